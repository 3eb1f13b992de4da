"""A consistent read of one pipeline's Delta tables for the quality checks.

The batch tables (``window_results``, ``window_latest``, ``late_events``, ``operator_state``) are
read at the versions the last committed ``replay_log`` row records, so a replay that is running
(or died) after that commit is invisible: the checks see exactly the committed batches. The
ingest tables (``source_files``, ``staging``, ``quarantine``) are read at their latest version,
restricted to ingests that ``source_files`` records (an ingest is complete once its
``source_files`` rows exist).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import PipelineConfig
from ..core.durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from ..execution.state.delta import BATCH_TABLES, DeltaStore
from .suites import output_columns

STAGING_COLUMNS = ("_seq", "_event_time", "_ingest_time", "_partition", "_batch", "_ingest")
_SQL_TYPES = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}


def sql_type(kind: str) -> str:
    if kind.startswith("array<"):
        return f"ARRAY<{sql_type(kind[6:-1])}>"
    return _SQL_TYPES[kind]


def documented_schema(config: PipelineConfig, table: str) -> str:
    """The DDL of a table as docs/tables.md describes it (used when the table does not exist)."""
    keys = [f"`{k}` STRING" for k in config.key]
    if table in ("window_results", "window_latest"):
        outputs = [f"`{name}` {sql_type(kind)}" for name, kind in output_columns(config)]
        columns = [
            *keys, "window_start TIMESTAMP", "window_end TIMESTAMP", "pane_index INT", "timing STRING",
            "watermark BIGINT", "replay_clock BIGINT", "fire_time BIGINT", *outputs, "batch_id BIGINT",
            "emit_seq BIGINT", "emit_step INT",
        ]
    elif table == "late_events":
        columns = [
            "_seq BIGINT", *keys, "event_time BIGINT", "ingest_time BIGINT", "`partition` STRING",
            "`offset` BIGINT", "record_id STRING", "source_file STRING", "line BIGINT", "raw STRING",
            "watermark BIGINT", "reason STRING", "batch_id BIGINT",
        ]
    elif table == "quarantine":
        columns = [
            "source_file STRING", "line BIGINT", "raw STRING", "reason STRING", "detail STRING",
            "ingest_id BIGINT",
        ]
    else:
        raise ValueError(f"no documented schema for {table}")
    return ", ".join(columns)


@dataclass
class Snapshot:
    """The committed state of a pipeline's tables, read once per validation run."""

    spark: Any
    config: PipelineConfig
    store: DeltaStore
    log: list[dict[str, Any]] = field(default_factory=list)
    ingest_ids: list[int] = field(default_factory=list)
    _frames: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, spark: Any, config: PipelineConfig) -> Snapshot:
        store = DeltaStore(spark, config)
        log = []
        if store.exists("replay_log"):
            log = [row.asDict() for row in store.read("replay_log").orderBy("batch_id").collect()]
        ingest_ids = []
        if store.exists("source_files"):
            ingest_ids = sorted(
                {row["ingest_id"] for row in store.read("source_files").select("ingest_id").collect()}
            )
        return cls(spark, config, store, log, ingest_ids)

    @property
    def last(self) -> dict[str, Any] | None:
        return self.log[-1] if self.log else None

    @property
    def batch_range(self) -> tuple[int | None, int | None]:
        if not self.log:
            return None, None
        return self.log[0]["batch_id"], self.log[-1]["batch_id"]

    @property
    def watermark(self) -> int:
        return self.last["watermark_after"] if self.last else MIN_TIMESTAMP

    @property
    def finalized(self) -> bool:
        return bool(self.last and (self.last.get("finalize") or self.watermark >= MAX_TIMESTAMP))

    @property
    def replayed_seq_end(self) -> int:
        """Records with ``_seq`` below this were replayed by a committed batch."""
        return max((row["seq_end"] for row in self.log), default=0)

    def version(self, table: str) -> int | None:
        if table in BATCH_TABLES:
            recorded = (self.last or {}).get("table_versions") or {}
            return recorded.get(table)
        return self.store.version(table)

    def exists(self, table: str) -> bool:
        return self.version(table) is not None

    def frame(self, table: str) -> Any | None:
        """The table at its committed version (cached), or None when it does not exist."""
        if table in self._frames:
            return self._frames[table]
        version = self.version(table)
        frame = None
        if version is not None:
            if table == "operator_state":
                frame = self.store.read_state(self.last)
            else:
                frame = self.store.read(table, version)
            if table == "staging":
                # What the checks need; the raw record text and value columns stay on disk.
                needed = [*self.config.key, *STAGING_COLUMNS]
                frame = frame.select(*[c for c in frame.columns if c in needed])
            if table in ("staging", "quarantine"):
                frame = self._complete_ingests(frame, table)
            frame = frame.cache()
        self._frames[table] = frame
        return frame

    def frame_or_empty(self, table: str) -> Any:
        frame = self.frame(table)
        if frame is None:
            frame = self.spark.createDataFrame([], documented_schema(self.config, table))
        return frame

    def _complete_ingests(self, frame: Any, table: str) -> Any:
        from pyspark.sql import functions as F

        column = "_ingest" if table == "staging" else "ingest_id"
        if column not in frame.columns:
            return frame
        if not self.ingest_ids:
            return frame.limit(0)
        return frame.where(F.col(column).isin(self.ingest_ids))

    def release(self) -> None:
        for frame in self._frames.values():
            if frame is not None:
                frame.unpersist()
        self._frames.clear()
