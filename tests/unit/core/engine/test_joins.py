"""Time-based joins of two inputs: config, the combined watermark, and both join kinds against
independent per-record references, for every batch size (Hypothesis)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.config import parse_config
from spark_jobs.core.durations import MIN_TIMESTAMP
from spark_jobs.core.watermarks import WatermarkState, compute_timeline
from spark_jobs.exceptions import ConfigError
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

EXAMPLES = int(os.environ.get("UNIT_MAX_EXAMPLES", "250"))
SETTINGS = settings(max_examples=max(1, EXAMPLES // 2), deadline=None,
                    suppress_health_check=list(HealthCheck))


def join_config(join: dict[str, Any], *, left_delay: int = 0, right_delay: int | None = None,
                **top: Any):
    right: dict[str, Any] = {"path": "r", "event_time": "ts"}
    if right_delay is not None:
        right["watermark"] = {"max_out_of_orderness": right_delay}
    spec = {
        "name": "j", "source": {"path": "l", "event_time": "ts"}, "key": "k",
        "watermark": {"max_out_of_orderness": left_delay},
        "join": {"right": right, **join}, "output": {"path": "o"}, **top,
    }
    return parse_config(spec)


# ---- config ----------------------------------------------------------------------------------
def test_interval_join_config_is_parsed_with_flink_bound_rules():
    config = join_config({"type": "interval", "lower": "-5s", "upper": 10, "upper_inclusive": False},
                         left_delay=100, right_delay=7)
    assert config.join.type == "interval"
    assert (config.join.lower, config.join.upper) == (-5000, 9)
    assert config.results_table == "join_results"
    assert [name for name, _ in config.outputs()] == ["left_time", "right_time", "left", "right"]
    inputs = config.input_watermarks()
    assert inputs["left"].max_out_of_orderness == 100 and inputs["right"].max_out_of_orderness == 7
    assert len(config.sources()) == 2


@pytest.mark.parametrize(("change", "field"), [
    ({"join": {"type": "interval", "right": {"path": "r", "event_time": "ts"}, "lower": 5, "upper": 1}},
     "join.lower"),
    ({"join": {"type": "interval", "right": {"path": "r", "event_time": "ts"}}}, "join.lower"),
    ({"join": {"type": "window"}}, "join.right"),
    ({"join": {"type": "outer", "right": {"path": "r", "event_time": "ts"}}}, "join.type"),
    ({"join": {"type": "window", "right": {"path": "l", "event_time": "ts"}}}, "join.right.path"),
    ({"join": {"type": "window", "right": {"path": "r", "event_time": "ts", "watermark": {"emit": "x"}}}},
     "join.right.watermark.emit"),
    ({"join": {"type": "interval", "right": {"path": "r", "event_time": "ts"}, "lower": 0, "upper": 1},
      "window": {"type": "tumbling", "size": "1m"}}, "window"),
    ({"join": {"type": "window", "right": {"path": "r", "event_time": "ts"}},
      "window": {"type": "tumbling", "size": "1m"}, "aggregates": {"n": "count(*)"}}, "aggregates"),
    ({"join": {"type": "window", "right": {"path": "r", "event_time": "ts"},
               "function": {"class": "json.JSONDecoder", "output": {"a": "long"}}},
      "window": {"type": "tumbling", "size": "1m"}}, "join.function.class"),
])
def test_bad_join_configs_name_the_field(change, field):
    spec = {"name": "j", "source": {"path": "l", "event_time": "ts"}, "key": "k", "output": {"path": "o"}}
    with pytest.raises(ConfigError) as error:
        parse_config({**spec, **change})
    assert error.value.field == field


# ---- the combined watermark ------------------------------------------------------------------
def test_combined_watermark_is_the_minimum_of_the_inputs_and_waits_for_both():
    config = join_config({"type": "interval", "lower": 0, "upper": 0}, left_delay=0, right_delay=10)
    ts = np.array([100, 200, 150, 300, 400], dtype=np.int64)
    parts = np.array(["left/0", "left/0", "right/0", "left/0", "right/0"], dtype=object)
    timeline, state = compute_timeline(config.watermark, WatermarkState(), 0, ts, None, parts,
                                       inputs=config.input_watermarks())
    # Nothing advances until the right input has sent a record; then min(left - 1, right - 11).
    assert timeline.adv_seq == [2, 4]
    assert timeline.adv_wm == [139, 299]  # min(199, 139); then min(299, 389)
    assert timeline.watermark_before(2) == MIN_TIMESTAMP
    assert state.watermark == 299


# ---- records and references ------------------------------------------------------------------
@st.composite
def two_inputs(draw):
    """Records of two inputs in replay order, with disorder and a few very late ones."""
    n = draw(st.integers(0, 40))
    keys = draw(st.sampled_from([["a"], ["a", "b"]]))
    now, out = draw(st.integers(0, 200)), []
    lag = draw(st.integers(0, 80))  # how far the right input trails the left
    for i in range(n):
        now += draw(st.integers(0, 20))
        side = draw(st.integers(0, 1))
        ts = now - (lag if side else 0) - draw(st.integers(0, 30))
        if draw(st.integers(0, 9)) == 0:
            ts -= draw(st.integers(100, 400))  # very late
        key = draw(st.sampled_from(keys))
        out.append(Record((key,), ts, (), partition="0", input=side,
                          fields={"id": f"{'LR'[side]}{i}", "k": key, "ts": ts}))
    return out


def combined_watermarks(recs: list[Record], delays: tuple[int, int]) -> list[int]:
    """The watermark after each record (per record emission), computed the plain way."""
    seen: list[int | None] = [None, None]
    watermark, out = MIN_TIMESTAMP, []
    for record in recs:
        side = record.input
        seen[side] = record.event_time if seen[side] is None else max(seen[side], record.event_time)
        own = [MIN_TIMESTAMP if s is None else s - d - 1 for s, d in zip(seen, delays, strict=True)]
        watermark = max(watermark, min(own))
        out.append(watermark)
    return out


def reference_interval_join(recs, lower, upper, delays):
    """Flink's IntervalJoinOperator, record by record, with its buffers and cleanup rule."""
    after = combined_watermarks(recs, delays)
    buffers: dict[tuple, list[list]] = {}
    pairs, late = [], []
    watermark = MIN_TIMESTAMP
    for i, record in enumerate(recs):
        if record.event_time < watermark:
            late.append(record.fields["id"])
        else:
            side = record.input
            bounds = (lower, upper) if side == 0 else (-upper, -lower)
            for other in sorted(buffers.get((record.key, 1 - side), []), key=lambda o: o[0]):
                if record.event_time + bounds[0] <= other[0] <= record.event_time + bounds[1]:
                    left, right = (record, other[1]) if side == 0 else (other[1], record)
                    pairs.append((record.key, left.fields["id"], right.fields["id"]))
            cleanup = record.event_time + bounds[1] if bounds[1] > 0 else record.event_time
            buffers.setdefault((record.key, side), []).append([record.event_time, record, cleanup])
        watermark = after[i]
        for name, entries in buffers.items():
            buffers[name] = [e for e in entries if e[2] > watermark]
    return pairs, late


def joined(memory: MemoryReplay) -> list[tuple]:
    out = []
    for key, pane in memory.emitted():
        row = dict(zip(["left_time", "right_time", "left", "right"], pane.values, strict=True))
        out.append((key, json.loads(row["left"])["id"], json.loads(row["right"])["id"]))
    return out


def late_ids(memory: MemoryReplay, recs: list[Record]) -> list[str]:
    return sorted(recs[late.seq].fields["id"] for _, late in memory.late)


def replay(config, recs, batch_size):
    memory = MemoryReplay(config, operator_spec(config))
    memory.run(recs, max(1, batch_size))
    return memory


# ---- interval join ---------------------------------------------------------------------------
@SETTINGS
@given(recs=two_inputs(), lower=st.integers(-60, 30), width=st.integers(0, 80),
       delays=st.tuples(st.integers(0, 40), st.integers(0, 40)), data=st.data())
def test_interval_join_equals_flink_reference_for_every_batch_size(recs, lower, width, delays, data):
    upper = lower + width
    config = join_config({"type": "interval", "lower": lower, "upper": upper},
                         left_delay=delays[0], right_delay=delays[1])
    expected_pairs, expected_late = reference_interval_join(recs, lower, upper, delays)
    batch_size = data.draw(st.integers(1, max(1, len(recs))))
    for size in {1, batch_size, max(1, len(recs))}:
        memory = replay(config, recs, size)
        # Per key, pairs come out in the reference's order; across keys order is undefined.
        assert sorted(joined(memory)) == sorted(expected_pairs)
        for key in {r.key for r in recs}:
            assert [p for p in joined(memory) if p[0] == key] == [p for p in expected_pairs if p[0] == key]
        assert late_ids(memory, recs) == sorted(expected_late)
        assert memory.state == {}  # finalize: every buffer cleaned up


def test_interval_join_state_is_bounded_by_the_watermark_lag():
    """State holds what the slower input's watermark has not passed yet: it grows with drift."""
    def buffered_after(drift: int) -> int:
        config = join_config({"type": "interval", "lower": -10, "upper": 10})
        recs = []
        for i in range(400):
            recs.append(Record(("a",), i * 10, (), input=0, fields={"id": f"L{i}"}))
            recs.append(Record(("a",), i * 10 - drift, (), input=1, fields={"id": f"R{i}"}))
        memory = MemoryReplay(config, operator_spec(config))
        memory.run(recs, 100, finalize=False)
        state = json.loads(memory.state[("a",)][0].contents)
        return sum(len(bucket) for side in state.values() for bucket in side.values())

    sizes = [buffered_after(drift) for drift in (0, 500, 2000)]
    assert sizes[0] < sizes[1] < sizes[2]
    assert sizes[0] <= 6  # no drift: only the last ~20 ms of each input
    assert abs(sizes[2] - 200) <= 6  # 2 s of drift at 100 records/s held on the left


# ---- window join -----------------------------------------------------------------------------
def reference_window_join(recs, size, delays):
    """Tumbling windows, event-time trigger, no lateness: every pair of records (same key and
    window) that were not late when they arrived, when the watermark passes the window."""
    after = combined_watermarks(recs, delays)
    windows: dict[tuple, list[Record]] = {}
    late = []
    watermark = MIN_TIMESTAMP
    for i, record in enumerate(recs):
        start = record.event_time - record.event_time % size
        if start + size - 1 <= watermark:
            late.append(record.fields["id"])
        else:
            windows.setdefault((record.key, start), []).append(record)
        watermark = after[i]
    pairs = []
    for (key, _), members in sorted(windows.items()):
        lefts = [r for r in members if r.input == 0]
        rights = [r for r in members if r.input == 1]
        pairs += [(key, left.fields["id"], right.fields["id"]) for left in lefts for right in rights]
    return pairs, late


@SETTINGS
@given(recs=two_inputs(), size=st.sampled_from([20, 50, 100]),
       delays=st.tuples(st.integers(0, 40), st.integers(0, 40)), data=st.data())
def test_window_join_equals_reference_for_every_batch_size(recs, size, delays, data):
    config = join_config({"type": "window"}, left_delay=delays[0], right_delay=delays[1],
                         window={"type": "tumbling", "size": size})
    expected_pairs, expected_late = reference_window_join(recs, size, delays)
    batch_size = data.draw(st.integers(1, max(1, len(recs))))
    for size_ in {1, batch_size, max(1, len(recs))}:
        memory = replay(config, recs, size_)
        assert sorted(joined(memory)) == sorted(expected_pairs)
        assert late_ids(memory, recs) == sorted(expected_late)
        assert memory.state == {}


@SETTINGS
@given(recs=two_inputs(), data=st.data())
def test_window_join_with_early_firings_lateness_and_evictor_is_batch_size_invariant(recs, data):
    after = data.draw(st.booleans())
    evictor = data.draw(st.sampled_from([
        {"type": "count", "count": 3, "after": after}, {"type": "time", "keep": 40, "after": after},
    ]))
    config = join_config(
        {"type": "window"}, left_delay=10, right_delay=30,
        window={"type": "tumbling", "size": 100}, allowed_lateness=50,
        trigger={"type": "continuous_event_time", "interval": 30}, evictor=evictor,
    )

    def outcome(size):
        memory = replay(config, recs, size)
        panes = [(key, p.window, p.pane_index, p.timing, tuple(p.values)) for key, p in memory.emitted()]
        return sorted(panes), late_ids(memory, recs), memory.state

    expected = outcome(max(1, len(recs)))
    assert outcome(1) == expected
    assert outcome(data.draw(st.integers(1, max(1, len(recs))))) == expected
    assert expected[2] == {}


def test_window_join_count_evictor_keeps_the_last_records_of_the_union():
    config = join_config({"type": "window"}, window={"type": "tumbling", "size": 100},
                         evictor={"type": "count", "count": 2})
    recs = [
        Record(("a",), 10, (), input=0, fields={"id": "L0"}),
        Record(("a",), 20, (), input=1, fields={"id": "R0"}),
        Record(("a",), 30, (), input=0, fields={"id": "L1"}),
        Record(("a",), 40, (), input=1, fields={"id": "R1"}),
    ]
    memory = replay(config, recs, 2)
    assert joined(memory) == [(("a",), "L1", "R1")]  # the last two of the union: L1, R1
