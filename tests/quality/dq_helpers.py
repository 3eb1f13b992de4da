"""Helpers of the quality tests: a small archive with every kind of record, a real replay of it,
and deliberate corruptions committed the way an engine bug would commit them."""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

BASE_TS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


def write_archive(directory: Path, records: int = 240, keys: int = 3) -> Path:
    """Deterministic clicks: mostly in order, every 10th 20 s out of order (some of those re-fire
    their window LATE, within the allowed lateness), every 25th 40 s late (late for some sliding
    windows only) or 90 s late (late events), plus two corrupt lines."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(records):
        ingest = BASE_TS + i * 1_000
        if i % 25 == 24:
            delay = 90_000
        elif i % 25 == 12:
            delay = 40_000
        elif i % 10 == 7:
            delay = 20_000
        else:
            delay = (0, 500, 2_000, 4_000)[i % 4]
        rows.append({
            "event_id": f"e{i}", "page": f"/p{(i * 7) % keys}", "ts": ingest - delay, "ingest_ts": ingest,
            "partition": i % 2, "offset": i // 2, "value": round((i * 37 % 100) / 10, 1),
        })
    half = len(rows) // 2
    for number, chunk in enumerate((rows[:half], rows[half:])):
        with open(directory / f"part-{number:03d}.jsonl", "w") as handle:
            for row in chunk:
                handle.write(json.dumps(row) + "\n")
            handle.write('{"event_id": "broken' + "\n")  # malformed_json
    return directory


def pipeline_dict(archive: Path, output: Path, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "dq_clicks",
        "source": {"path": str(archive), "format": "jsonl", "event_time": "ts",
                   "ingest_time": "ingest_ts", "partition": "partition", "offset": "offset",
                   "id": "event_id"},
        "key": ["page"],
        "watermark": {"max_out_of_orderness": "5s", "emit": "per_record"},
        "window": {"type": "tumbling", "size": "1m"},
        "trigger": {"type": "continuous_event_time", "interval": "10s"},
        "allowed_lateness": "20s",
        "aggregates": {"clicks": "count(*)", "revenue": "sum(value)"},
        "batch": {"max_records": 120},
        "output": {"path": str(output)},
        "quality": {"max_late_fraction": 0.1, "max_quarantine_fraction": 0.02,
                    "ranges": {"clicks": {"min": 1}, "revenue": {"min": 0}}},
    }
    config.update(overrides)
    return config


def write_pipeline(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def archive_reader():
    """The real ``spark_jobs.execution.sources`` if it exists, else the stand-in in ``archive_shim``."""
    try:
        importlib.import_module("spark_jobs.execution.sources")
    except ImportError:
        import archive_shim

        sys.modules["spark_jobs.execution.sources"] = archive_shim
        try:
            yield "shim"
        finally:
            sys.modules.pop("spark_jobs.execution.sources", None)
        return
    yield "real"


def replay(config: Any, spark: Any, finalize: bool = False) -> Any:
    from spark_jobs.execution.operations import run_pipeline

    with archive_reader():
        return run_pipeline(config, spark=spark, finalize=finalize, progress=lambda _m: None)


def copy_lakehouse(source: str, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def read(spark: Any, lakehouse: Path, table: str, version: int | None = None) -> Any:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(lakehouse / table))


def committed_version(spark: Any, lakehouse: Path, table: str) -> int:
    log = read(spark, lakehouse, "replay_log").orderBy("batch_id").collect()
    return log[-1]["table_versions"][table]


def commit_corrupted(spark: Any, lakehouse: Path, table: str, frame: Any) -> None:
    """Overwrite ``table`` with ``frame`` and point the last committed batch at the new version,
    as if the engine had written (and committed) these rows itself."""
    rows = frame.collect()
    schema = frame.schema
    spark.createDataFrame(rows, schema).write.format("delta").mode("overwrite").save(str(lakehouse / table))
    version = max(
        int(p.stem) for p in (lakehouse / table / "_delta_log").glob("*.json") if p.stem.isdigit()
    )
    log = read(spark, lakehouse, "replay_log")
    entries = [row.asDict() for row in log.orderBy("batch_id").collect()]
    entries[-1]["table_versions"] = {**entries[-1]["table_versions"], table: version}
    spark.createDataFrame(entries, log.schema).write.format("delta").mode("overwrite").save(
        str(lakehouse / "replay_log")
    )
