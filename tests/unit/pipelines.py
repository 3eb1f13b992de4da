"""Small builders shared by the unit tests: configs, records, and the firings of a replay."""

from __future__ import annotations

from typing import Any

from spark_jobs.config import parse_config
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

#: Every record carries (None, v, id) for these aggregates, in this order.
AGGREGATES = {"n": "count(*)", "total": "sum(v)", "ids": "collect_list(id)"}


def make_config(window: dict[str, Any], trigger: dict[str, Any] | None = None, *,
                lateness: int = 0, watermark: dict[str, Any] | None = None,
                ingest: bool = False, aggregates: dict[str, str] | None = None):
    source: dict[str, Any] = {"path": "x", "event_time": "ts", "types": {"v": "long", "id": "string"}}
    if ingest:
        source["ingest_time"] = "ingest"
    spec: dict[str, Any] = {
        "name": "t", "source": source, "key": "k", "window": window,
        "aggregates": aggregates or AGGREGATES, "output": {"path": "o"},
        "watermark": watermark or {"max_out_of_orderness": 0},
    }
    if trigger is not None:
        spec["trigger"] = trigger
    if lateness:
        spec["allowed_lateness"] = lateness
    return parse_config(spec)


def records(rows: list[tuple], key: str = "a") -> list[Record]:
    """``rows`` of ``(ts,)``, ``(ts, v)`` or ``(ts, v, key)``; ids are the row numbers."""
    out = []
    for i, row in enumerate(rows):
        ts = row[0]
        v = row[1] if len(row) > 1 else 1
        k = row[2] if len(row) > 2 else key
        out.append(Record((k,), ts, (None, v, str(i))))
    return out


def replay(config, recs: list[Record], batch_size: int | None = None, finalize: bool = True):
    memory = MemoryReplay(config, operator_spec(config))
    memory.run(recs, batch_size or max(1, len(recs)), finalize=finalize)
    return memory


def freeze(values: list[Any]) -> tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)


def firings(memory: MemoryReplay) -> dict[tuple, list[tuple]]:
    """(key, window) -> [(pane_index, timing, values, watermark, clock, fire_time), ...]."""
    out: dict[tuple, list[tuple]] = {}
    for key, pane in memory.emitted():
        out.setdefault((key, pane.window), []).append(
            (pane.pane_index, pane.timing, freeze(pane.values), pane.watermark, pane.replay_clock,
             pane.fire_time)
        )
    return out


def reference_firings(result) -> dict[tuple, list[tuple]]:
    return {
        kw: [(p.pane_index, p.timing, p.values, p.watermark, p.clock, p.fire_time) for p in panes]
        for kw, panes in result.panes.items()
    }


def late_seqs(memory: MemoryReplay) -> set[tuple]:
    return {(key, late.seq) for key, late in memory.late}


def ids_timings(memory: MemoryReplay) -> list[tuple]:
    """(window start, pane index, timing, ids) in emission order."""
    return [(p.window.start, p.pane_index, p.timing, p.values[2]) for _, p in memory.emitted()]
