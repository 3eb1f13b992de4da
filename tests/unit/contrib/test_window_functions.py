"""Evictors and user-defined window functions, through the same operator as the built-ins."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.config import parse_config
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

# (ts, value, page): one key, one 1-minute window, the continuous trigger firing every 10 s.
ROWS = [(1_000, 1.0, "a"), (2_000, 5.0, "b"), (12_000, 2.0, "a"), (13_000, 9.0, "c"),
        (25_000, 4.0, "a"), (61_000, 1.0, "a"), (75_000, 1.0, "d")]


def run(extra: dict[str, Any], batch_size: int, aggregates: dict | None = None):
    spec = {
        "name": "f", "source": {"path": "x", "event_time": "ts", "id": "id"}, "key": "k",
        "window": {"type": "tumbling", "size": "1m"},
        "trigger": {"type": "continuous_event_time", "interval": "10s"},
        "output": {"path": "o"}, **extra,
    }
    if aggregates is not None:
        spec["aggregates"] = aggregates
    config = parse_config(spec)
    names = [a.column for a in config.aggregates]
    records = []
    for i, (ts, value, page) in enumerate(ROWS):
        fields = {"ts": ts, "value": value, "page": page, "id": f"r{i}"}
        records.append(Record(("k",), ts, tuple(fields.get(n) if n else None for n in names), fields=fields))
    memory = MemoryReplay(config, operator_spec(config))
    memory.run(records, batch_size)
    assert not memory.leaks
    return [(p.window.start, p.pane_index, p.timing, p.values) for _, p in memory.emitted()], memory


@pytest.mark.parametrize("batch_size", [1, 3, 7])
def test_count_evictor_keeps_last_n_in_arrival_order_and_evicted_records_are_gone(batch_size):
    panes, memory = run({"evictor": {"type": "count", "count": 2}}, batch_size,
                        {"n": "count(*)", "ids": "collect_list(id)"})
    first_window = [p for p in panes if p[0] == 0]
    # The 10 s timer fires after r2 moved the watermark past it: r0, r1, r2 -> keep r1, r2.
    # At 20 s (after r4): r1, r2, r3, r4 -> keep r3, r4 (r0 was evicted for good at 10 s).
    # r5 jumps the watermark: 30, 40, 50 s and ON_TIME fire in a row on what is left.
    assert [p[3] for p in first_window] == [[2, ["r1", "r2"]]] + [[2, ["r3", "r4"]]] * 5
    assert not memory.state


@pytest.mark.parametrize("batch_size", [1, 7])
def test_time_and_delta_evictors(batch_size):
    ids = {"n": "count(*)", "ids": "collect_list(id)"}
    panes, _ = run({"evictor": {"type": "time", "keep": "5s"}}, batch_size, ids)
    # Keeps records newer than (largest timestamp in the pane - 5 s), not relative to the watermark:
    # r0 1 s, r1 2 s, r2 12 s -> r2; then r2, r3 13 s, r4 25 s -> r4.
    assert [p[3] for p in panes[:2]] == [[1, ["r2"]], [1, ["r4"]]]
    panes, _ = run({"evictor": {"type": "delta", "field": "value", "threshold": 4.5}}, batch_size, ids)
    # Drops records whose |value - last record's value| >= 4.5: only r3 (9.0 vs r4's 4.0).
    assert [p[3] for p in panes[:2]] == [[3, ["r0", "r1", "r2"]], [4, ["r0", "r1", "r2", "r4"]]]


def test_evict_after_the_function_sees_everything_first():
    panes, _ = run({"evictor": {"type": "count", "count": 1, "after": True}}, 1, {"n": "count(*)"})
    # The function sees r0-r2, then r2-r4 (only the last record survived the first firing).
    assert [p[3] for p in panes if p[0] == 0][:3] == [[3], [3], [1]]


@pytest.mark.parametrize("batch_size", [1, 7])
def test_full_window_process_function(batch_size):
    process = {"class": "spark_jobs.contrib.functions.PaneSummary", "params": {"field": "page"},
               "output": {"records": "long", "distinct_values": "long", "span_ms": "long", "pane": "long"}}
    panes, _ = run({"process_function": process}, batch_size)
    assert panes[0] == (0, 0, "EARLY", [3, 2, 11_000, 0])
    on_time = [p for p in panes if p[0] == 0 and p[2] == "ON_TIME"][0]
    assert on_time[3] == [5, 3, 24_000, 5]


@pytest.mark.parametrize("batch_size", [1, 7])
def test_incremental_user_aggregate_and_combined_form(batch_size):
    aggregate = {"class": "spark_jobs.contrib.functions.SumAndMax", "params": {"field": "value"},
                 "output": {"sum_value": "double", "max_value": "double"}}
    panes, _ = run({"aggregate_function": aggregate}, batch_size, {"n": "count(*)"})
    on_time = [p for p in panes if p[0] == 0 and p[2] == "ON_TIME"][0]
    assert on_time[3] == [5, 21.0, 9.0]
    combined = {"class": "spark_jobs.contrib.functions.Ratio", "params": {},
                "output": {"ratio": "double", "n": "long"}}
    panes, _ = run({"process_function": combined}, batch_size, {"n": "count(*)", "total": "sum(value)"})
    on_time = [p for p in panes if p[0] == 0 and p[2] == "ON_TIME"][0]
    assert on_time[3] == [21.0 / 5, 5]


def test_bad_function_config_names_the_field():
    from spark_jobs.exceptions import ConfigError

    with pytest.raises(ConfigError, match="process_function.class"):
        run({"process_function": {"class": "no.such.Thing", "output": {"x": "long"}}}, 1)
    with pytest.raises(ConfigError, match="evictor"):
        run({"evictor": {"type": "sideways"}}, 1)
