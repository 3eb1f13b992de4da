"""A stand-in archive reader for ``spark_jobs.execution.sources`` while the real one has not landed.

Used by the quality tests only when ``import spark_jobs.execution.sources`` fails, so that they can still
exercise the real ``run_pipeline`` on a small JSON Lines archive. It implements the two functions
``replay.py`` calls (``list_archive``, ``read_archive``) with the columns it reads from them; once
the real module exists it is used instead and this file is dead code.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SPARK_TYPES = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}


@dataclass(frozen=True)
class ArchiveFile:
    path: str
    size: int
    modified_ms: int


def list_archive(spark: Any, source: Any) -> list[ArchiveFile]:
    root = Path(source.path)
    paths = sorted(root.glob("*.jsonl")) if root.is_dir() else [root]
    return [
        ArchiveFile(str(p), p.stat().st_size, int(os.path.getmtime(p) * 1000)) for p in paths
    ]


def read_archive(spark: Any, config: Any, files: list[ArchiveFile], first_index: int):
    source = config.source
    values = config.value_columns()
    types = {column: config.column_type(column) for column in values}
    good, bad = [], []
    for number, entry in enumerate(files):
        with open(entry.path, encoding="utf-8") as handle:
            for line_no, raw in enumerate(handle, 1):
                raw = raw.rstrip("\n")
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError as error:
                    bad.append((entry.path, line_no, raw, "malformed_json", str(error)))
                    continue
                if not isinstance(record, dict):
                    bad.append((entry.path, line_no, raw, "not_an_object", "not a JSON object"))
                    continue
                missing = [f for f in (*config.key, source.event_time) if record.get(f) is None]
                if missing:
                    bad.append((entry.path, line_no, raw, "missing_field", f"{missing[0]} is missing"))
                    continue
                if not isinstance(record[source.event_time], int):
                    bad.append((entry.path, line_no, raw, "invalid_timestamp", "not epoch ms"))
                    continue

                def field(name: str | None, record: dict = record) -> Any:
                    return None if name is None else record.get(name)

                good.append((
                    *[str(record[k]) for k in config.key],
                    int(record[source.event_time]),
                    field(source.ingest_time),
                    None if field(source.partition) is None else str(field(source.partition)),
                    field(source.offset),
                    None if field(source.id) is None else str(field(source.id)),
                    entry.path, line_no, raw, first_index + number,
                    *[_typed(record.get(c), types[c]) for c in values],
                ))
    columns = [
        *[f"`{k}` STRING" for k in config.key],
        "_event_time BIGINT", "_ingest_time BIGINT", "_partition STRING", "_offset BIGINT",
        "_id STRING", "_file STRING", "_line BIGINT", "_raw STRING", "_file_index INT",
        *[f"`{c}` {_SPARK_TYPES[types[c]]}" for c in values],
    ]
    records = spark.createDataFrame(good, ", ".join(columns))
    quarantine = spark.createDataFrame(
        bad, "source_file STRING, line BIGINT, raw STRING, reason STRING, detail STRING"
    )
    return records, quarantine


def _typed(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "long":
        return int(value)
    if kind == "double":
        return float(value)
    if kind == "boolean":
        return bool(value)
    return str(value)
