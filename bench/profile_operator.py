"""Profile the per-key function outside Spark: what one replay batch costs in Python.

Runs the engine's own per-key function (``spark_batch.make_cogroup_function``'s ``run``: Arrow in,
``process_key``, Arrow out) over two consecutive batches of a benchmark archive, key by key, as
the Spark executors would (the second batch starts from the first one's state), and reports CPU
time per record (``time.process_time``: insensitive to other processes on the machine), the
share of each part, the top cProfile entries, and the size and (un)pickling time of the function
closure Spark ships to every task (it carries the batch's watermark timeline).

    .venv/bin/python bench/profile_operator.py --events 1000000 --batch-size 100000 --scenario tumbling

``--together`` hands every key of a batch over in one call (``function.many``), as a pass on the
driver runs its keys (``spark_batch.run_keys_on_driver``).

``--per-record`` measures the per-record operator where a kernel would otherwise run
(``spark_jobs.core.engine.window_kernel`` for fixed windows,
``spark_jobs.core.engine.session_kernel`` for sessions), for comparing them on the same batches.

The archive is the one ``python -m bench.harness`` generated (``bench/results/archives``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import PIPELINES, RESULTS, SEED, prepare_archive  # noqa: E402
from spark_jobs.config import parse_config  # noqa: E402
from spark_jobs.core.watermarks import WatermarkState, compute_timeline  # noqa: E402
from spark_jobs.execution.spark_batch import (  # noqa: E402
    STATE_COLUMNS,
    _groups,  # (how the driver cuts a pass by key: the state rows per key here)
    arrow_type,
    make_cogroup_function,
)
from spark_jobs.pipeline_spec import operator_spec  # noqa: E402


def load_records(path: str, limit: int) -> list[dict]:
    """The archive's parseable records in replay order (ingest time, partition, offset)."""
    rows = []
    for file in sorted(Path(path).rglob("*.jsonl")):
        for line in file.open("rb"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            ok = isinstance(row, dict) and isinstance(row.get("ts"), int)
            if ok and row.get("page") and row.get("user_id"):
                if not isinstance(row.get("value"), (int, float)):
                    row["value"] = None
                rows.append(row)
    rows.sort(key=lambda r: (r["ingest_ts"], r["partition"], r["offset"]))
    return rows[:limit]


def key_tables(config, rows: list[dict], seq_start: int) -> dict[tuple, pa.Table]:
    keys = list(config.key)
    values = config.value_columns()
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(tuple(row[k] for k in keys), []).append(i)
    tables = {}
    for key, index in groups.items():
        columns = {k: pa.array([rows[i][k] for i in index], pa.string()) for k in keys}
        columns["_seq"] = pa.array([seq_start + i for i in index], pa.int64())
        columns["_event_time"] = pa.array([rows[i]["ts"] for i in index], pa.int64())
        for column in values:
            kind = config.column_type(column)
            data = [rows[i].get(column) for i in index]
            columns[column] = pa.array([str(v) if kind == "string" and v is not None else v for v in data],
                                       arrow_type(kind))
        tables[key] = pa.table(columns)
    return tables


def empty_state(config) -> pa.Table:
    fields = [(k, pa.string()) for k in config.key] + [(n, arrow_type(t)) for n, t in STATE_COLUMNS]
    return pa.schema(fields).empty_table()


def run_batch(config, spec, rows, seq_start, wm_state, states, profile: cProfile.Profile | None,
              together: bool = False):
    import pyspark.cloudpickle as cloudpickle

    event_time = np.array([r["ts"] for r in rows], dtype=np.int64)
    ingest = np.array([r["ingest_ts"] for r in rows], dtype=np.int64)
    partition = np.array([str(r["partition"]) for r in rows], dtype=object)
    mark = time.process_time()
    timeline, new_state = compute_timeline(
        config.watermark, wm_state, seq_start, event_time, ingest, partition
    )
    timeline_cpu = time.process_time() - mark
    function = make_cogroup_function(config, spec, timeline)
    mark = time.perf_counter()
    blob = cloudpickle.dumps(function)
    pickle_s = time.perf_counter() - mark
    mark = time.perf_counter()
    cloudpickle.loads(blob)
    unpickle_s = time.perf_counter() - mark
    tables = key_tables(config, rows, seq_start)
    empty = empty_state(config)
    out_states = {}
    groups = [(tuple(pa.scalar(k) for k in key), table, states.get(key, empty))
              for key, table in tables.items()]
    if profile:
        profile.enable()
    mark = time.process_time()
    if together:  # as a driver pass's process takes its keys (``run_keys_on_driver``)
        out = function.many(groups)
    else:
        out = pa.concat_tables([function(*group) for group in groups])
    total = time.process_time() - mark
    if profile:
        profile.disable()
    out_rows = out.num_rows
    state_rows = out.filter(pc.equal(out.column("_kind"), "state"))
    for key, (_, held) in _groups(state_rows, list(config.key), None).items():
        out_states[key] = held.select(list(empty.schema.names)).cast(empty.schema)
    return {
        "records": len(rows),
        "keys": len(tables),
        "timeline_points": len(timeline.adv_seq) + len(timeline.clk_seq),
        "timeline_cpu_seconds": round(timeline_cpu, 4),
        "closure_bytes": len(blob),
        "closure_pickle_seconds": round(pickle_s, 4),
        "closure_unpickle_seconds": round(unpickle_s, 4),
        "function_cpu_seconds": round(total, 4),
        "microseconds_per_record": round(total / max(1, len(rows)) * 1e6, 2),
        "output_rows": out_rows,
        "state_rows_after": sum(t.num_rows for t in out_states.values()),
    }, new_state, out_states


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=100_000)
    parser.add_argument("--scenario", default="tumbling")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--together", action="store_true",
                        help="every key of a batch in one call, as a pass on the driver runs its keys")
    parser.add_argument("--per-record", action="store_true",
                        help="run the per-record operator even where a kernel applies")
    args = parser.parse_args()
    if args.per_record:
        from spark_jobs.core.engine import session_kernel, window_kernel

        window_kernel.supports = lambda spec: False
        session_kernel.supports = lambda spec: False
    archive = prepare_archive(RESULTS, args.events, SEED, "jsonl")
    data = yaml.safe_load((PIPELINES / f"{args.scenario}.yaml").read_text())
    data["source"]["path"] = archive["path"]
    data["output"] = {"path": "/tmp/unused"}
    config = parse_config(data)
    spec = operator_spec(config)
    rows = load_records(archive["path"], 2 * args.batch_size)
    first, second = rows[: args.batch_size], rows[args.batch_size:]
    report = {"scenario": args.scenario, "events": args.events, "batch_size": args.batch_size,
              "engine": "per-record" if args.per_record else "kernel where it applies",
              "keys": "together" if args.together else "one by one"}
    # Plain timing (no profiler), then the same two batches under cProfile for the breakdown.
    one, wm, states = run_batch(config, spec, first, 0, WatermarkState(), {}, None, args.together)
    two, _, _ = run_batch(config, spec, second, len(first), wm, states, None, args.together)
    report["batch_1"], report["batch_2"] = one, two
    profile = cProfile.Profile()
    _, wm, states = run_batch(config, spec, first, 0, WatermarkState(), {}, profile, args.together)
    run_batch(config, spec, second, len(first), wm, states, profile, args.together)
    stream = io.StringIO()
    stats = pstats.Stats(profile, stream=stream)
    stats.sort_stats("tottime").print_stats(args.top)
    report["cprofile_tottime"] = stream.getvalue()
    stream = io.StringIO()
    pstats.Stats(profile, stream=stream).sort_stats("cumulative").print_stats(args.top)
    report["cprofile_cumulative"] = stream.getvalue()
    print(json.dumps({k: v for k, v in report.items() if not k.startswith("cprofile")}, indent=1))
    print(report["cprofile_tottime"])
    print(report["cprofile_cumulative"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
