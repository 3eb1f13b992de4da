"""Helpers for Spark tests: write small archives and pipeline configs, run the real CLI, and
read a pipeline's tables back in a comparable form."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

BASE_TS = 1_700_000_000_000


def write_archive(directory: Path, records: int = 300, keys: int = 3, partitions: int = 2,
                  seed: int = 1, files: int = 2) -> Path:
    """A small out-of-order archive with very late records, spread over a few files."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(records):
        ingest = BASE_TS + i * 1_000
        delay = rng.choice([0, 500, 2_000, 4_000, 7_000]) if rng.random() > 0.05 else 90_000
        rows.append({
            "event_id": f"e{i}", "user": f"u{rng.randrange(keys)}", "ts": ingest - delay,
            "ingest_ts": ingest, "partition": i % partitions, "offset": i // partitions,
            "value": round(rng.random() * 10, 2),
        })
    per_file = -(-records // files)
    for f in range(files):
        with open(directory / f"part-{f:03d}.jsonl", "w") as handle:
            for row in rows[f * per_file:(f + 1) * per_file]:
                handle.write(json.dumps(row) + "\n")
    return directory


#: A keyed process function (``process:``) with side outputs, for pipelines without windows.
INACTIVITY_ALERT = {
    "class": "spark_jobs.contrib.process.InactivityAlert", "params": {"gap": 4_000, "big": 9.0},
    "output": {"kind": "string", "last_seen": "long", "events": "long"},
}


def write_pipeline(path: Path, archive: Path, output: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "name": "kill_test",
        "source": {"path": str(archive), "format": "jsonl", "event_time": "ts",
                   "ingest_time": "ingest_ts", "partition": "partition", "offset": "offset",
                   "id": "event_id"},
        "key": ["user"],
        "watermark": {"max_out_of_orderness": "5s", "emit": "per_record"},
        "window": {"type": "tumbling", "size": "1m"},
        "trigger": {"type": "continuous_event_time", "interval": "10s"},
        "allowed_lateness": "20s",
        "aggregates": {"n": "count(*)", "total": "sum(value)", "ids": "collect_list(event_id)"},
        "batch": {"max_records": 40, "pass_max_records": 80},  # passes of two batches
        "output": {"path": str(output), "latest_every": 3},
    }
    for key, value in overrides.items():
        if value is None:
            config.pop(key, None)  # e.g. aggregates: None -> a process function sees every record
        else:
            config[key] = value
    path.write_text(yaml.safe_dump(config))
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    """The real ``replay`` command in a fresh process (its own JVM): for kill tests."""
    environment = {**os.environ, "SPARK_MASTER": os.environ.get("SPARK_MASTER", "local[2]"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.interfaces.cli", *args], capture_output=True, text=True,
        env=environment, timeout=timeout,
    )


def cli(*args: str) -> subprocess.CompletedProcess:
    """The real ``replay`` command's code path, in this process on the test session's Spark
    (``get_spark`` returns the active session), which saves a JVM start per call."""
    import contextlib
    import io

    from spark_jobs.interfaces.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    return subprocess.CompletedProcess(["replay", *args], code, out.getvalue(), err.getvalue())


def delta_history(spark: Any, table: Path | str, limit: int | None = None) -> list[Any]:
    """A Delta table's commits, newest first (Delta's SQL: the same in-process and over Spark
    Connect, where Delta's Python ``DeltaTable`` API needs a plugin the server does not have)."""
    query = f"DESCRIBE HISTORY delta.`{table}`" + (f" LIMIT {int(limit)}" if limit else "")
    return spark.sql(query).collect()


def table_rows(spark: Any, lakehouse: Path, table: str, drop: tuple[str, ...] = ()) -> list[tuple]:
    """A table's rows as sorted tuples (order-free comparison), minus volatile columns."""
    path = lakehouse / table
    if not (path / "_delta_log").exists():
        return []
    frame = spark.read.format("delta").load(str(path))
    columns = [c for c in frame.columns if c not in drop]
    return sorted(tuple(_freeze(row[c]) for c in columns) for row in frame.select(*columns).collect())


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


REPLAY_LOG_VOLATILE = ("committed_at", "table_versions")


def snapshot(spark: Any, lakehouse: Path) -> dict[str, list[tuple]]:
    """Everything a replay produced that must be identical between runs."""
    return {
        "window_results": table_rows(spark, lakehouse, "window_results"),
        "window_latest": table_rows(spark, lakehouse, "window_latest"),
        "late_events": table_rows(spark, lakehouse, "late_events"),
        "operator_state": table_rows(spark, lakehouse, "operator_state"),
        "replay_log": table_rows(spark, lakehouse, "replay_log", REPLAY_LOG_VOLATILE),
        "quarantine": table_rows(spark, lakehouse, "quarantine"),
    }
