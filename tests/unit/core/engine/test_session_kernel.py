"""The session kernel against the per-record operator it replaces for session windows.

For random session pipelines (gaps, event-time, continuous and count triggers, purging, allowed
lateness, every watermark mode, several keys and partitions, disorder, very late records that
still bridge open sessions, nulls, every built-in aggregate) and random batch and pass splits,
every key of every pass runs through both engines from the same state: panes (as multisets), late
records and the dumped state rows must be identical, and which engine's state the next pass starts
from must not matter. The generated inputs never call for a decline, so the kernel must take every
one of them (a kernel that declined would pass the comparison vacuously).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from test_window_kernel import (
    AGGREGATES,
    FLOATS,
    SETTINGS,
    TYPES,
    archives,
    key_records,
    make_config,
    pass_records,
    pipelines,
    run_both,
    split,
)

from spark_jobs.core.engine import session_kernel
from spark_jobs.core.engine.keyed import process_key, process_key_columns, process_keys_columns
from spark_jobs.core.engine.model import WindowStateRow
from spark_jobs.core.watermarks import Timeline
from spark_jobs.core.windows import TimeWindow
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec


@st.composite
def session_windows(draw):
    gap = draw(st.integers(1, 90))
    return {"type": "session", "gap": gap}, gap


def kernel(spec, timeline, state, seqs, timestamps, values, key):
    """The kernel called with the records' values as columns, as ``process_key_columns`` calls it."""
    columns = [list(column) for column in zip(*values, strict=True)]
    columns = columns or [[]] * len(spec.pane.aggregation.specs)
    return session_kernel.process_key(spec, timeline, state, seqs, timestamps, columns, key)


def assert_kernel_equals_operator(data, config, records) -> None:
    """The kernel and the per-record operator give the same passes over random pass cuts, and
    alternating engines between passes (the next pass starting from either's state) changes
    nothing."""
    passes = split(data.draw, records)
    event(config.trigger.to_dict()["type"])
    first = run_both(config, records, passes, lambda: True, kernel=kernel)
    pattern = data.draw(st.lists(st.booleans(), min_size=1, max_size=8))
    turns = iter(pattern * 1000)
    assert run_both(config, records, passes, lambda: next(turns), kernel=kernel) == first


@SETTINGS
@given(data=st.data())
def test_the_session_kernel_equals_the_per_record_operator_pass_by_pass(data):
    config, ingest = data.draw(pipelines(session_windows()))
    records = data.draw(archives(config, ingest))
    assert_kernel_equals_operator(data, config, records)


# ---- scope and fallback -------------------------------------------------------------------------
SESSION = {"type": "session", "gap": 10}


def spec_of(window=SESSION, trigger=None, **extra):
    from test_window_kernel import spec_of as window_spec_of

    return window_spec_of(window, trigger, **extra)


@pytest.mark.parametrize("window, trigger", [
    ({"type": "tumbling", "size": 10}, None),
    ({"type": "session", "gap": 10, "time": "processing"}, None),
    (SESSION, {"type": "processing_time"}),
    (SESSION, {"type": "continuous_processing_time", "interval": 5}),
])
def test_the_kernel_leaves_other_pipelines_to_the_operator(window, trigger):
    assert not session_kernel.supports(spec_of(window, trigger))


def test_the_kernel_covers_the_event_time_triggers():
    assert session_kernel.supports(spec_of())
    assert session_kernel.supports(spec_of(trigger={"type": "continuous_event_time", "interval": 5,
                                                    "purging": True}))
    assert session_kernel.supports(spec_of(trigger={"type": "count", "count": 2}))


def one_line(watermarks, records=None):
    """A timeline whose watermark advances after each of the first records to the given values."""
    return Timeline(0, records or len(watermarks), -(2**63), 0, list(range(len(watermarks))),
                    list(watermarks), [], [])


def test_the_kernel_declines_state_it_does_not_reproduce():
    spec, line = spec_of(), one_line([5])
    row = WindowStateRow(TimeWindow(0, 10), True, 0, None, None, [9, 9 + 0], [])
    assert session_kernel.process_key(spec, line, [row], [0], [1], [[None]]) is not None
    with_processing = row._replace(processing_timers=[3])
    assert session_kernel.process_key(spec, line, [with_processing], [0], [1], [[None]]) is None
    intersecting = [row, row._replace(window=TimeWindow(10, 20), event_timers=[19])]
    assert session_kernel.process_key(spec, line, intersecting, [0], [1], [[None]]) is None
    assert session_kernel.process_key(spec, line, [], [0], [2**63 - 2**60], [[None]]) is None


def test_process_key_columns_runs_sessions_through_the_kernel(monkeypatch):
    spec, line = spec_of(), one_line([0, 3, 20])
    calls = []
    original = session_kernel.process_keys

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(session_kernel, "process_keys", counting)
    out = process_key_columns(spec, line, [], [0, 1, 2], [1, 8, 30], [[None, None, None]])
    assert len(calls) == 1
    assert [(pane.window, pane.values) for pane in out.panes] == [(TimeWindow(1, 18), [2])]
    assert [row.window for row in out.state] == [TimeWindow(30, 40)]


def test_a_session_is_late_exactly_when_its_cleanup_time_is_reached():
    # Watermark 45 after the first record; gap 10, lateness 5: [31, 41) is cleaned up at 45, so it
    # is late and so is its record; [32, 42) at 46, so it is taken and fires at once (late pane).
    spec = spec_of(allowed_lateness=5)
    line = one_line([45], records=3)
    args = (spec, line, [], [0, 1, 2], [50, 31, 32])
    fast, slow = session_kernel.process_key(*args, [[None] * 3]), process_key(*args, [(None,)] * 3)
    assert [(late.seq, late.watermark) for late in fast.late] == [(1, 45)]
    assert [(pane.window, pane.timing, pane.values) for pane in fast.panes] == [
        (TimeWindow(32, 42), "LATE", [1])]
    assert (repr(fast.panes), repr(fast.late), repr(fast.state)) == (
        repr(slow.panes), repr(slow.late), repr(slow.state))


# ---- several keys at once ------------------------------------------------------------------------
def pass_keys(config, passes):
    """Per pass: its timeline and each key's ``(seqs, timestamps, columns, key)``, keys in order."""
    for timeline, seq, recs, by_key in pass_records(config, passes):
        keys = []
        for key in sorted(by_key):
            seqs, timestamps, _, columns = key_records(config, recs, seq, by_key[key])
            keys.append((seqs, timestamps, columns, key))
        yield timeline, keys


@SETTINGS
@given(data=st.data())
def test_keys_taken_together_equal_keys_taken_one_by_one(data, monkeypatch):
    """``process_keys`` (every key of a pass swept, then their contents computed together, in pools
    of a random size) gives each key what ``process_key`` gives it alone, pass after pass. Keys
    whose columns differ in type (a column of nulls in one key) are pooled apart."""
    config, ingest, gap = data.draw(run_pipelines())
    records = data.draw(run_archives(config, ingest, gap))
    monkeypatch.setattr(session_kernel, "POOL_RECORDS", data.draw(st.integers(1, 150)))
    spec = operator_spec(config)
    state: dict = {}
    for timeline, keys in pass_keys(config, split(data.draw, records)):
        known = {key for *_, key in keys}
        keys += [([], [], [[] for _ in config.aggregates], key) for key in sorted(set(state) - known)]
        together = session_kernel.process_keys(spec, timeline, [
            (state.get(key, []), seqs, timestamps, columns, key) for seqs, timestamps, columns, key in keys
        ])
        for (seqs, timestamps, columns, key), pooled in zip(keys, together, strict=True):
            before = state.get(key, [])
            alone = session_kernel.process_key(spec, timeline, before, seqs, timestamps, columns, key)
            assert alone is not None and pooled is not None, "the kernel declined an ordinary input"
            assert (repr(pooled.panes), repr(pooled.late), repr(pooled.state)) == (
                repr(alone.panes), repr(alone.late), repr(alone.state))
            state[key] = pooled.state


def test_a_key_declining_in_a_pool_leaves_the_others_to_the_kernel():
    """A key whose values the aggregates decline (a NaN under min) goes to the operator alone."""
    spec = spec_of(aggregates={"lo": "min(x)"})
    line = one_line([0, 3, 20])
    keys = [([], [0, 2], [1, 30], [[1.5, 2.5]], ("a",)), ([], [1], [2], [[float("nan")]], ("b",))]
    pooled = session_kernel.process_keys(spec, line, keys)
    assert pooled[1] is None
    assert repr(pooled[0]) == repr(session_kernel.process_key(spec, line, *keys[0][:4], ("a",)))
    outputs = process_keys_columns(spec, line, [(*k[:4], None, k[4]) for k in keys])
    assert [(pane.window, pane.values) for pane in outputs[0].panes] == [(TimeWindow(1, 11), [1.5])]
    assert [pane.window for pane in outputs[1].panes] == [TimeWindow(2, 12)]
    assert math.isnan(outputs[1].panes[0].values[0])


# ---- runs: records that only grow one session ---------------------------------------------------
@st.composite
def run_pipelines(draw):
    """Session pipelines weighted to the event-time trigger (whose runs the kernel takes in one step)."""
    gap = draw(st.integers(3, 60))
    kind = draw(st.sampled_from(["event_time"] * 5 + ["continuous_event_time", "count"]))
    trigger = {"type": kind, "purging": draw(st.booleans())}
    if kind == "continuous_event_time":
        trigger["interval"] = draw(st.integers(1, 2 * gap))
    if kind == "count":
        trigger["count"] = draw(st.integers(1, 5))
    emit = draw(st.sampled_from(["per_record", "per_record", "periodic"]))
    watermark = {"max_out_of_orderness": draw(st.sampled_from([0, 0, 3, 20])), "emit": emit}
    if emit == "periodic":
        watermark["emit"] = f"periodic:{draw(st.integers(1, 30))}ms"
    if draw(st.booleans()):
        watermark["idle_timeout"] = draw(st.integers(1, 80))
    names = draw(st.lists(st.sampled_from(sorted(AGGREGATES)), min_size=1, max_size=6, unique=True))
    ingest = draw(st.booleans())
    config = make_config({"type": "session", "gap": gap}, trigger, draw(st.sampled_from([0, 0, 2, 40])),
                         watermark, ingest, {name: AGGREGATES[name] for name in sorted(names)})
    return config, ingest, gap


@st.composite
def run_archives(draw, config, ingest, gap):
    """Mostly event-time order in small steps (long runs), with pauses longer than the gap (new
    sessions, and the watermark passing the old ones' ends between a key's records), records a
    little back (landing inside), late ones (behind the watermark: retired or firing at once), ones
    bridging two sessions and ones ahead (a later session that a run grows into)."""
    n = draw(st.integers(1, 120))
    keys = draw(st.sampled_from([["a"], ["a", "b"], ["a", "b", "c"]]))
    partitions = draw(st.sampled_from([["p0"], ["p0"], ["p0", "p1"]]))
    now = draw(st.integers(-300, 300))
    clock = now
    step = draw(st.integers(0, max(1, gap // 2)))
    null_rate = draw(st.sampled_from([0.0, 0.0, 0.3]))
    columns = [spec.column for spec in config.aggregates]
    out = []
    for _ in range(n):
        kind = draw(st.sampled_from(["next"] * 14 + ["pause", "back", "late", "bridge", "ahead"]))
        if kind == "pause":
            now += draw(st.integers(gap, 4 * gap))
        elif kind == "next":
            now += draw(st.integers(0, step))
        event_time = now
        if kind == "back":
            event_time = now - draw(st.integers(0, gap))
        elif kind == "late":
            event_time = now - draw(st.integers(gap, 10 * gap))
        elif kind == "bridge":
            event_time = now - draw(st.integers(gap, 3 * gap))
        elif kind == "ahead":  # a session ahead, which in-order records then grow into
            event_time = now + draw(st.integers(gap, 3 * gap))
        clock += draw(st.integers(0, step + 5))

        def value(column):
            if draw(st.floats(0, 1)) < null_rate:
                return None
            if column == "v":
                return draw(st.integers(-5, 9))
            if column == "x":
                return draw(st.sampled_from(FLOATS))
            return draw(st.sampled_from(["", "a", "b", "é"]))

        fields = {c: value(c) for c in TYPES}
        out.append(Record(
            (draw(st.sampled_from(keys)),), event_time, tuple(fields[c] if c else None for c in columns),
            ingest_time=clock if ingest else None, partition=draw(st.sampled_from(partitions)),
        ))
    return out


@SETTINGS
@given(data=st.data())
def test_runs_equal_the_per_record_operator_pass_by_pass(data):
    """Long in-order runs, interrupted by watermark advances past a session's end, merges, late
    records and restored state (random passes), through both engines from the same state."""
    config, ingest, gap = data.draw(run_pipelines())
    records = data.draw(run_archives(config, ingest, gap))
    assert_kernel_equals_operator(data, config, records)


@SETTINGS
@given(data=st.data())
def test_runs_do_not_depend_on_the_batch_size(data):
    """The replay through ``process_key_columns`` (the kernel) gives the same firings and late
    records whatever the batch size and however batches are grouped into passes."""
    config, ingest, gap = data.draw(run_pipelines())
    records = data.draw(run_archives(config, ingest, gap))
    results = []
    for _ in range(2):
        size = data.draw(st.integers(1, max(1, len(records))))
        memory = MemoryReplay(config, operator_spec(config))
        memory.run(records, batch_size=size, batches_per_pass=data.draw(st.integers(1, 3)))
        assert memory.leaks == []
        results.append((sorted(map(repr, memory.emitted())), sorted(map(repr, memory.late)), memory.state))
    assert results[0] == results[1]


def counted_runs(monkeypatch) -> list[tuple[int, int]]:
    """The (first, end) record of every run the kernel takes, as it takes them."""
    calls = []
    original = session_kernel._Run._run

    def counting(self, i, *args):
        end = original(self, i, *args)
        calls.append((i, end))
        return end

    monkeypatch.setattr(session_kernel._Run, "_run", counting)
    return calls


def test_an_in_order_run_is_one_step(monkeypatch):
    """A key's records in event-time order, each within the gap of the last, with the watermark
    never reaching the session's end in between: one run, one firing with all of them."""
    calls = counted_runs(monkeypatch)
    spec = spec_of(aggregates={"n": "count(*)", "s": "sum(x)"}, allowed_lateness=5)
    n = 50
    # The watermark trails each record by 3; then jumps to the end of time.
    watermarks = [5 * i - 3 for i in range(n - 1)] + [2**63 - 1]
    line = Timeline(0, n, -(2**63), 0, list(range(n)), watermarks, [], [])
    xs = [0.1 * i for i in range(n)]
    args = (spec, line, [], list(range(n)), [5 * i for i in range(n)])
    fast = session_kernel.process_key(*args, [[None] * n, xs])
    slow = process_key(*args, [(None, x) for x in xs])
    assert calls == [(1, n)]  # the first record opens the session; the rest is one run
    assert (repr(fast.panes), repr(fast.late), repr(fast.state)) == (
        repr(slow.panes), repr(slow.late), repr(slow.state))
    assert [(pane.window, pane.values) for pane in fast.panes] == [(TimeWindow(0, 5 * n + 5), [n, sum(xs)])]


def test_an_in_order_run_stops_at_the_next_session(monkeypatch):
    """Records in order growing a session toward a later one: the run takes them up to the record
    that reaches the later session, which merges the two (the per-record path)."""
    calls = counted_runs(monkeypatch)
    spec = spec_of(aggregates={"n": "count(*)", "c": "collect_list(v)"}, allowed_lateness=5)
    timestamps = [0, 100] + list(range(5, 95, 5))
    n = len(timestamps)
    watermarks = [-10] * (n - 1) + [2**63 - 1]
    line = Timeline(0, n, -(2**63), 0, list(range(n)), watermarks, [], [])
    values = list(range(n))
    args = (spec, line, [], list(range(n)), timestamps)
    fast = session_kernel.process_key(*args, [[None] * n, values])
    slow = process_key(*args, [(None, v) for v in values])
    assert (repr(fast.panes), repr(fast.late), repr(fast.state)) == (
        repr(slow.panes), repr(slow.late), repr(slow.state))
    assert calls == [(2, n - 1)]  # 5 .. 85 grow [0, 10); 90 reaches [100, 110)
    # The merge folds the contents in window order; collect_list keeps arrival order.
    assert [(pane.window, pane.values) for pane in fast.panes] == [(TimeWindow(0, 110), [n, values])]
