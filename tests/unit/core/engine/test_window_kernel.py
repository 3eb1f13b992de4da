"""The vectorised window kernel against the per-record operator it replaces on the common path.

For random in-scope pipelines (tumbling and sliding windows with offsets, event-time, continuous
and count triggers, purging, allowed lateness, every watermark mode, several keys and partitions,
disorder, very late records, nulls, every built-in aggregate over ints, floats with -0.0 and
repeats, and strings) and random batch and pass splits, every key of every pass runs through both
engines from the same state: panes (as multisets), late records and the dumped state rows must be
identical, and which engine's state the next pass starts from must not matter. The generated
inputs never call for a decline, so the kernel must take every one of them: a kernel that declined
would pass the comparison vacuously.
"""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spark_jobs.config import parse_config
from spark_jobs.core.engine import window_kernel
from spark_jobs.core.engine.keyed import process_key, process_key_columns
from spark_jobs.core.engine.model import WindowStateRow
from spark_jobs.core.watermarks import Timeline, WatermarkState, compute_pass_timelines
from spark_jobs.core.windows import TimeWindow
from spark_jobs.pipeline_spec import operator_spec
from spark_jobs.testing.memory_replay import MemoryReplay, Record

EXAMPLES = int(os.environ.get("UNIT_MAX_EXAMPLES", "250"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

#: Every built-in aggregate, over an int column (v), a float column (x) and a string column (u).
AGGREGATES = {
    "n": "count(*)", "n_v": "count(v)", "s_v": "sum(v)", "lo_v": "min(v)", "hi_v": "max(v)",
    "avg_v": "avg(v)", "d_v": "count_distinct(v)", "f_v": "first(v)", "l_v": "last(v)",
    "c_v": "collect_list(v)", "s_x": "sum(x)", "avg_x": "avg(x)", "lo_x": "min(x)", "hi_x": "max(x)",
    "d_x": "count_distinct(x)", "l_x": "last(x)", "d_u": "count_distinct(u)", "lo_u": "min(u)",
    "hi_u": "max(u)", "c_u": "collect_list(u)", "f_u": "first(u)",
}
TYPES = {"v": "long", "x": "double", "u": "string"}
FLOATS = [0.0, -0.0, 0.5, -1.25, 3.0, 1e-3, 1e16, -1e16, 0.1, 0.2, 7.75]


def make_config(window, trigger, lateness, watermark, ingest, aggregates):
    source = {"path": "x", "event_time": "ts", "types": TYPES}
    if ingest:
        source["ingest_time"] = "ingest"
    spec = {"name": "k", "source": source, "key": "k", "window": window, "trigger": trigger,
            "aggregates": aggregates, "output": {"path": "o"}, "watermark": watermark}
    if lateness:
        spec["allowed_lateness"] = lateness
    return parse_config(spec)


@st.composite
def fixed_windows(draw):
    """A tumbling or sliding window spec, and its size."""
    kind = draw(st.sampled_from(["tumbling", "sliding"]))
    if kind == "tumbling":
        size = draw(st.integers(5, 120))
        return {"type": kind, "size": size, "offset": draw(st.integers(0, size - 1))}, size
    slide = draw(st.integers(5, 60))
    size = slide * draw(st.integers(1, 4)) + draw(st.sampled_from([0, 0, 3, -2]))
    window = {"type": kind, "size": max(1, size), "slide": slide, "offset": draw(st.integers(0, slide - 1))}
    return window, size


@st.composite
def pipelines(draw, windows=None):
    """A random pipeline over ``windows`` (window spec and size; default tumbling or sliding)."""
    window, size = draw(windows if windows is not None else fixed_windows())
    trigger_kind = draw(st.sampled_from(["event_time", "continuous_event_time", "continuous_event_time",
                                         "count"]))
    trigger = {"type": trigger_kind, "purging": draw(st.booleans())}
    if trigger_kind == "continuous_event_time":
        trigger["interval"] = draw(st.integers(1, max(2, size + 5)))
    if trigger_kind == "count":
        trigger["count"] = draw(st.integers(1, 4))
    lateness = draw(st.sampled_from([0, 0, 1, 15, 80, 400]))
    emit = draw(st.sampled_from(["per_record", "per_record", "periodic", "per_batch"]))
    watermark = {"max_out_of_orderness": draw(st.sampled_from([0, 0, 5, 30])), "emit": emit}
    if emit == "periodic":
        watermark["emit"] = f"periodic:{draw(st.integers(1, 40))}ms"
    if draw(st.booleans()):
        watermark["idle_timeout"] = draw(st.integers(1, 80))
    names = draw(st.lists(st.sampled_from(sorted(AGGREGATES)), min_size=1, max_size=8, unique=True))
    aggregates = {name: AGGREGATES[name] for name in sorted(names)}
    ingest = draw(st.booleans())
    return make_config(window, trigger, lateness, watermark, ingest, aggregates), ingest


@st.composite
def archives(draw, config, ingest):
    n = draw(st.one_of(st.just(0), st.integers(1, 60)))
    keys = draw(st.sampled_from([["a"], ["a", "b"], ["a", "b", "c"]]))
    partitions = draw(st.sampled_from([["p0"], ["p0", "p1"], ["p0", "p1", "p2"]]))
    now = draw(st.integers(-300, 300))
    step, disorder = draw(st.integers(0, 25)), draw(st.integers(0, 60))
    clock = now + draw(st.integers(0, 40))
    null_rate = draw(st.sampled_from([0.0, 0.0, 0.3, 1.0]))
    ints = draw(st.sampled_from([(-5, 9), (0, 2), (-(2**40), 2**40)]))
    columns = [spec.column for spec in config.aggregates]
    out = []
    for _ in range(n):
        now += draw(st.integers(0, step))
        kind = draw(st.sampled_from(["normal"] * 8 + ["very_late", "future"]))
        if kind == "very_late":
            event_time = now - draw(st.integers(100, 900))
        elif kind == "future":
            event_time = now + draw(st.integers(0, 80))
        else:
            event_time = now - draw(st.integers(0, disorder))
        clock += draw(st.integers(0, step + 5))

        def value(kind):
            if draw(st.floats(0, 1)) < null_rate:
                return None
            if kind == "v":
                return draw(st.integers(*ints))
            if kind == "x":
                return draw(st.sampled_from(FLOATS))
            return draw(st.sampled_from(["", "a", "b", "ab", "é", "z", "A", "\U0001f600"]))

        fields = {c: value(c) for c in TYPES}
        out.append(Record(
            (draw(st.sampled_from(keys)),), event_time, tuple(fields[c] if c else None for c in columns),
            ingest_time=clock if ingest else None, partition=draw(st.sampled_from(partitions)),
        ))
    return out


def split(draw, records):
    """Random batches (with a finalize batch, maybe) grouped into random passes."""
    sizes, left = [], len(records)
    while left:
        size = draw(st.integers(1, max(1, left)))
        sizes.append(size)
        left -= size
    batches, lo = [], 0
    for size in sizes:
        batches.append((records[lo:lo + size], False))
        lo += size
    if draw(st.booleans()) or not batches:
        batches.append(([], True))
    passes, lo = [], 0
    while lo < len(batches):
        width = draw(st.integers(1, 4))
        passes.append(batches[lo:lo + width])
        lo += width
    return passes


def canonical(panes):
    """Panes as a multiset, compared by ``repr``: exact where ``==`` is not (-0.0 == 0.0, 1 == 1.0)."""
    return sorted(map(repr, panes))


ARROW_TYPES = {"v": pa.int64(), "x": pa.float64(), "u": pa.string()}


def arrow_column(values, column, chunks):
    """A column as Spark hands it over: a chunked Arrow array of the declared type."""
    arrow_type = ARROW_TYPES[column] if column else pa.null()
    bounds = sorted({0, len(values), *(c % (len(values) + 1) for c in chunks)})
    pieces = [pa.array(values[a:b], arrow_type) for a, b in zip(bounds, bounds[1:], strict=False)]
    return pa.chunked_array(pieces or [pa.array([], arrow_type)], arrow_type)


def pass_records(config, passes):
    """Per pass: its watermark timeline, first seq, records, and each key's record indices."""
    watermark, seq = WatermarkState(), 0
    for batches in passes:
        recs = [r for batch, _ in batches for r in batch]
        timelines, states = compute_pass_timelines(
            config.watermark, watermark, seq,
            np.array([r.event_time for r in recs], dtype=np.int64),
            np.array([r.ingest_time for r in recs], dtype=np.int64) if config.source.ingest_time else None,
            np.array([r.partition for r in recs], dtype=object),
            [(len(batch), finalize) for batch, finalize in batches],
        )
        watermark = states[-1]
        by_key = defaultdict(list)
        for i, record in enumerate(recs):
            by_key[record.key].append(i)
        yield Timeline.concat(timelines), seq, recs, by_key
        seq += len(recs)


def key_records(config, recs, seq, rows):
    """A key's records (``rows`` of the pass's ``recs``): seqs, timestamps, values, columns."""
    values = [recs[i].values for i in rows]
    columns = [list(column) for column in zip(*values, strict=True)] or [[]] * len(config.aggregates)
    return [seq + i for i in rows], [recs[i].event_time for i in rows], values, columns


def run_both(config, records, passes, pick, chunks=None, kernel=None):
    """Every pass and key through the kernel and the operator from the same state; returns the
    concatenated outputs (checked equal along the way). ``chunks``: hand the kernel chunked Arrow
    columns (split there) instead of Python lists. ``kernel``: another kernel than this one,
    called as ``kernel(spec, timeline, state, seqs, timestamps, values, key)``."""
    spec = operator_spec(config)
    state = {}
    all_panes, all_late = [], []
    for timeline, seq, recs, by_key in pass_records(config, passes):
        for key in sorted(set(by_key) | set(state)):
            seqs, timestamps, values, columns = key_records(config, recs, seq, by_key.get(key, []))
            before = state.get(key, [])
            if kernel is not None:
                fast = kernel(spec, timeline, before, seqs, timestamps, values, key)
            elif chunks is None:
                fast = window_kernel.process_key(spec, timeline, before, seqs, timestamps, columns, key)
            else:
                names = [spec_.column for spec_ in config.aggregates]
                arrow = [arrow_column(column, name, chunks)
                         for column, name in zip(columns, names, strict=True)]
                fast = window_kernel.process_key(spec, timeline, before, pa.array(seqs, pa.int64()),
                                                 pa.chunked_array([timestamps], pa.int64()), arrow, key)
            slow = process_key(spec, timeline, before, seqs, timestamps, values, None, key)
            assert slow.leaks == []
            assert fast is not None, "the kernel declined an ordinary input"
            assert canonical(fast.panes) == canonical(slow.panes), (key, before, fast.panes, slow.panes)
            assert repr(fast.late) == repr(slow.late)
            assert repr(fast.state) == repr(slow.state), (key, before, fast.state, slow.state)
            assert fast.leaks == []
            chosen = fast if pick() else slow
            all_panes.extend((key, pane) for pane in chosen.panes)
            all_late.extend((key, late) for late in chosen.late)
            if chosen.state:
                state[key] = chosen.state
            else:
                state.pop(key, None)
        seq += len(recs)
    return canonical(all_panes), sorted(all_late), state


@SETTINGS
@given(data=st.data())
def test_the_kernel_equals_the_per_record_operator_pass_by_pass(data):
    config, ingest = data.draw(pipelines())
    records = data.draw(archives(config, ingest))
    passes = split(data.draw, records)
    event(f"{config.window.kind} / {config.trigger.to_dict()['type']}")
    chunks = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 60), max_size=3)))
    # Alternating engines between passes (the next pass starting from either's state) changes nothing.
    first = run_both(config, records, passes, lambda: True, chunks)
    pattern = data.draw(st.lists(st.booleans(), min_size=1, max_size=8))
    turns = iter(pattern * 1000)
    assert run_both(config, records, passes, lambda: next(turns), chunks) == first


# ---- scope and fallback -------------------------------------------------------------------------
BASE = {"type": "tumbling", "size": 10}


def spec_of(window=BASE, trigger=None, aggregates=None, **extra):
    data = {"name": "k", "source": {"path": "x", "event_time": "ts", "types": TYPES}, "key": "k",
            "window": window, "aggregates": aggregates or {"n": "count(*)"}, "output": {"path": "o"}}
    if trigger:
        data["trigger"] = trigger
    data.update(extra)
    return operator_spec(parse_config(data))


@pytest.mark.parametrize("window, trigger, extra", [
    ({"type": "session", "gap": 10}, None, {}),
    ({"type": "global"}, {"type": "count", "count": 2}, {}),
    ({"type": "tumbling", "size": 10, "time": "processing"}, {"type": "processing_time"}, {}),
    (BASE, {"type": "processing_time"}, {}),
    (BASE, {"type": "continuous_processing_time", "interval": 3}, {}),
    (BASE, None, {"evictor": {"type": "count", "count": 2}}),
    (BASE, None, {"aggregate_function": {"class": "spark_jobs.contrib.functions.SumAndMax",
                                         "params": {"field": "v"}, "output": {"sum_v": "double"}}}),
])
def test_out_of_scope_specs_are_not_claimed(window, trigger, extra):
    assert not window_kernel.supports(spec_of(window, trigger, **extra))


def test_in_scope_specs_are_claimed():
    assert window_kernel.supports(spec_of())
    assert window_kernel.supports(spec_of({"type": "sliding", "size": 20, "slide": 5},
                                          {"type": "continuous_event_time", "interval": 3, "purging": True}))
    assert window_kernel.supports(spec_of(trigger={"type": "count", "count": 3}))


def timeline(seq_start, seq_end, adv_seq, adv_wm, start_wm=-(2**63)):
    return Timeline(seq_start, seq_end, start_wm, -(2**63), adv_seq, adv_wm, [], [])


@pytest.mark.parametrize("timestamps, values", [
    ([2**63 - 100, 5], [1, 2]),  # near +infinity: window ends and cleanup times would saturate
    ([1, 5], [2**62, 2**62]),  # an int sum that could overflow int64
    ([1, 5], [1, 2.5]),  # mixed int and float: Arrow would convert them
])
def test_a_declined_input_falls_back_to_the_operator_with_the_same_results(timestamps, values):
    spec = spec_of(aggregates={"n": "count(*)", "s": "sum(v)"})
    line = timeline(0, 2, [0, 1, 2], [0, 4, 2**63 - 1])
    assert window_kernel.process_key(spec, line, [], [0, 1], timestamps, [[None, None], values]) is None
    out = process_key_columns(spec, line, [], [0, 1], timestamps, [[None, None], values])
    rows = list(zip([None, None], values, strict=True))
    assert out == process_key(spec, line, [], [0, 1], timestamps, rows)
    assert out.panes


def test_an_int_sum_past_int64_wraps_as_a_java_long():
    """Java's (Flink's) ``long`` wraps around; the per-record operator's sums do too, the kernel
    declines inputs whose exact sums could get there, and a restored sum near the wrap."""
    spec = spec_of(aggregates={"s": "sum(v)"})
    line = timeline(0, 3, [0, 1, 2, 3], [0, 1, 2, 2**63 - 1])
    values = [2**62, 2**62, 5]
    out = process_key_columns(spec, line, [], [0, 1, 2], [1, 2, 3], [values])
    assert [pane.values for pane in out.panes] == [[-(2**63) + 5]]
    restored = WindowStateRow(TimeWindow(0, 10), True, 0, f"[{2**62}]", None, [9], [])
    later = timeline(5, 6, [5, 6], [0, 2**63 - 1])
    assert window_kernel.process_key(spec, later, [restored], [5], [1], [[2**62]]) is None
    out = process_key_columns(spec, later, [restored], [5], [1], [[2**62]])
    assert [pane.values for pane in out.panes] == [[-(2**63)]]


def test_nan_is_declined_where_python_compares_it():
    """min, max and count_distinct of NaN follow Python's comparisons and object identity, which
    the kernel does not model; sum and avg simply propagate it."""
    line = timeline(0, 3, [0, 1, 2, 3], [0, 1, 2, 2**63 - 1])
    xs = [[1.0, float("nan"), 0.5]]
    for function in ("min", "max", "count_distinct"):
        spec = spec_of(aggregates={"a": f"{function}(x)"})
        assert window_kernel.process_key(spec, line, [], [0, 1, 2], [1, 2, 3], xs) is None
    spec = spec_of(aggregates={"a": "sum(x)", "b": "avg(x)"})
    out = window_kernel.process_key(spec, line, [], [0, 1, 2], [1, 2, 3], xs + xs)
    assert np.isnan(out.panes[0].values).all()


def test_python_keeps_the_first_of_equal_values():
    """0.0 == -0.0: a set keeps the one added first, and so does min/max's ``value < acc``."""
    spec = spec_of(aggregates={"d": "count_distinct(x)", "lo": "min(x)", "hi": "max(x)"})
    line = timeline(0, 4, [3], [4])  # no firing: the state shows the accumulators
    xs = [-0.0, 0.0, 1.0, -0.0]
    fast = window_kernel.process_key(spec, line, [], [0, 1, 2, 3], [1, 2, 3, 4], [xs, xs, xs])
    slow = process_key(spec, line, [], [0, 1, 2, 3], [1, 2, 3, 4], list(zip(xs, xs, xs, strict=True)))
    assert fast.state == slow.state
    assert fast.state[0].contents == "[[-0.0, 1.0], -0.0, 1.0]"


def test_unknown_state_is_declined():
    spec = spec_of()
    line = timeline(5, 6, [5], [100])
    row = WindowStateRow(TimeWindow(0, 10), True, 0, "[1]", None, [9], [3])  # a processing-time timer
    assert window_kernel.process_key(spec, line, [row], [5], [1], [[None]]) is None
    row = row._replace(processing_timers=[], trigger_state='{"other": 1}')
    assert window_kernel.process_key(spec, line, [row], [5], [1], [[None]]) is None
    row = row._replace(trigger_state=None)
    assert window_kernel.process_key(spec, line, [row], [5], [1], [[None]]) is not None


@pytest.mark.parametrize("trigger, state, taken", [
    ({"type": "count", "count": 3}, '{"count": 2}', True),
    ({"type": "count", "count": 3}, '{"count": 3}', False),  # would have fired
    ({"type": "count", "count": 3}, '{"fire-time": 5}', False),  # another trigger's state
    ({"type": "continuous_event_time", "interval": 5}, '{"fire-time": 5}', True),
    ({"type": "continuous_event_time", "interval": 5}, '{"fire-time": 12}', False),  # past the end
    ({"type": "event_time"}, '{"fire-time": 5}', False),  # keeps no state
])
def test_restored_trigger_state_is_read_through_the_trigger(trigger, state, taken):
    """The kernel takes a restored window's trigger state the trigger itself names (and the
    operator resumes it the same way), and declines any other."""
    spec = spec_of(trigger=trigger)
    line = timeline(5, 6, [5], [100])
    timers = [9, 5] if "fire-time\": 5" in state else [9]
    row = WindowStateRow(TimeWindow(0, 10), True, 0, "[1]", state, timers, [])
    fast = window_kernel.process_key(spec, line, [row], [5], [1], [[None]])
    assert (fast is not None) == taken
    if taken:
        assert fast == process_key(spec, line, [row], [5], [1], [(None,)])


def test_arrow_columns_are_read_without_conversion_and_match_python_lists():
    spec = spec_of(aggregates={"s": "sum(x)", "d": "count_distinct(u)", "c": "count(x)"})
    line = timeline(0, 4, [3, 4], [50, 2**63 - 1])
    xs, us = [0.1, None, 0.2, -0.0], ["a", "b", None, "a"]
    arrow = window_kernel.process_key(spec, line, [], pa.array([0, 1, 2, 3]), pa.array([1, 2, 3, 4]),
                                      [pa.array(xs), pa.array(us), pa.array(xs)])
    plain = window_kernel.process_key(spec, line, [], [0, 1, 2, 3], [1, 2, 3, 4], [xs, us, xs])
    assert arrow == plain
    assert [pane.values for pane in arrow.panes] == [[0.1 + 0.2 + -0.0, 2, 3]]


def test_memory_replay_takes_the_kernel(monkeypatch):
    calls = []
    original = window_kernel.process_key

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(window_kernel, "process_key", spy)
    config = make_config(BASE, None, 0, {"max_out_of_orderness": 0}, False, {"n": "count(*)"})
    memory = MemoryReplay(config, operator_spec(config))
    memory.run([Record(("a",), t, (None,)) for t in (1, 5, 12)], batch_size=2)
    assert calls and all(calls)
    assert [(pane.window, pane.values) for _, pane in memory.emitted()] == [
        (TimeWindow(0, 10), [2]), (TimeWindow(10, 20), [1])]
