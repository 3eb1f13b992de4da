"""What has been replayed: read back from the pipeline's own Delta tables.

For tables on the local disk or S3 the report reads them with delta-rs
(``execution.state.delta_rs``) and answers in about a second, without a JVM; elsewhere (HDFS,
``gs://``, ...) it reads them through Spark.
"""

from __future__ import annotations

from typing import Any

from ..config import PipelineConfig
from ..core.durations import format_timestamp
from ..execution.recovery import committed_log, tables_ahead
from ..execution.state.delta import ALL_TABLES, DeltaStore
from ..execution.state.delta_rs import DeltaRsReader
from ..execution.state.journal import read_operation

#: What a firing emits, by the table it goes to.
FIRINGS = {"window_results": "panes", "join_results": "joined pairs", "process_results": "result rows"}


def pipeline_status(config: PipelineConfig, spark: Any = None) -> str:
    """What the pipeline's tables hold, and what a killed command left unfinished with the command
    that repairs it. Never raises on a pipeline's state: a table it cannot read is reported as
    such. Starts Spark (when ``spark`` is not given) only for tables delta-rs does not reach."""
    if DeltaRsReader.reaches(config):
        tables: Any = DeltaRsReader(config)
    else:
        from ..execution.spark_session import get_spark

        spark = spark or get_spark(f"replay-{config.name}")
        tables = SparkTables(DeltaStore(spark, config))
    lines = [f"pipeline {config.name} ({config.output_path})"]
    operation = _attempt(lambda: read_operation(config, spark))
    if isinstance(operation, _Unreadable):
        lines.append(f"  UNFINISHED an operation journal that cannot be read: {operation}")
    elif operation is not None:
        again = "replay reset PIPELINE --yes" if operation.kind == "reset" else "the same reprocess"
        lines.append(f"  UNFINISHED {operation.describe()}; `replay run PIPELINE` (or {again}) finishes it")
    log = _attempt(tables.committed_log)
    if isinstance(log, _Unreadable):
        lines.append(f"  replay_log cannot be read: {log}")
        lines.append(_tables_line(tables))
        return "\n".join(lines)
    last = log[-1] if log else None
    if last is None:
        lines.append("  batches    none committed yet")
    files = _attempt(tables.files_summary)
    if isinstance(files, _Unreadable):
        lines.append(f"  files      source_files cannot be read: {files}")
    elif files is not None:
        lines.append(f"  files      {files[0]} ingested: {files[1]} records accepted, {files[2]} quarantined")
    if last is not None:
        lines += [
            f"  batches    {len(log)} committed (last id {last['batch_id']}), "
            f"{sum(row['records'] for row in log)} records replayed"
            + (", finalized" if last["finalize"] else ""),
            f"  watermark  {format_timestamp(last['watermark_after'])}, "
            f"replay clock {format_timestamp(last['clock_after'])}",
            f"  output     {sum(row['panes'] for row in log)} {FIRINGS[config.results_table]}, "
            f"{sum(row['late'] for row in log)} late events",
        ]
        state = _attempt(lambda: tables.state_summary(last))
        if isinstance(state, _Unreadable):
            lines.append(f"  state      operator_state cannot be read at the committed version: {state}")
        else:
            lines.append(f"  state      {state[1]} open windows in {state[0]} state rows")
    lines += _consistency(tables, last, operation)
    lines.append(_tables_line(tables))
    return "\n".join(line for line in lines if line)


class SparkTables:
    """What the report reads, through Spark (tables on object storage): ``DeltaRsReader``'s
    methods over a ``DeltaStore``."""

    def __init__(self, store: DeltaStore) -> None:
        self.store = store

    def committed_log(self) -> list[dict[str, Any]]:
        return committed_log(self.store)

    def versions(self, tables: list[str] | tuple[str, ...]) -> dict[str, int]:
        return self.store.versions(tables)

    def files_summary(self) -> tuple[int, int, int] | None:
        from pyspark.sql import functions as F

        if not self.store.exists("source_files"):
            return None
        files = self.store.read("source_files")
        row = files.agg(F.count("*"), F.sum("records"), F.sum("quarantined")).first()
        return row[0], row[1] or 0, row[2] or 0

    def state_summary(self, last: dict[str, Any]) -> tuple[int, int]:
        from pyspark.sql import functions as F

        row = self.store.read_state(last).agg(F.count("*"), F.sum(F.col("is_open").cast("int"))).first()
        return row[0], row[1] or 0


def _consistency(tables: Any, last: dict[str, Any] | None, operation: Any) -> list[str]:
    """Tables ahead of the commit log (a run killed mid-pass) or missing though it records them."""
    ahead = _attempt(lambda: tables_ahead(tables, last))
    if isinstance(ahead, _Unreadable):
        return [f"  CHECK      table versions cannot be listed: {ahead}"]
    lines = []
    repair = "" if operation is not None else "; the next `replay run PIPELINE` restores them"
    if ahead:
        described = ", ".join(
            f"{table} v{current} (committed: {'none' if recorded is None else f'v{recorded}'})"
            for table, (current, recorded) in ahead.items()
        )
        lines.append(
            f"  AHEAD      of the last committed batch, left by an interrupted command: {described}{repair}"
        )
    recorded = (last or {}).get("table_versions") or {}
    present = _attempt(lambda: tables.versions(list(recorded)))
    missing = [] if isinstance(present, _Unreadable) else [t for t in recorded if t not in present]
    if missing:
        lines.append(
            f"  MISSING    {', '.join(missing)}: the commit log records them but they are gone (deleted "
            "outside the product?); `replay reset PIPELINE --yes`, then `replay run`, rebuilds every table"
        )
    return lines


def _tables_line(tables: Any) -> str:
    versions = _attempt(lambda: tables.versions(ALL_TABLES))
    if isinstance(versions, _Unreadable):
        return f"  tables     cannot be listed: {versions}"
    if not versions:
        return "  tables     none"
    return "  tables     " + ", ".join(f"{table} v{version}" for table, version in versions.items())


class _Unreadable(str):
    """Why something could not be read (its error's first line)."""


def _attempt(read: Any) -> Any:
    try:
        return read()
    except Exception as error:  # a status report shows what it cannot read rather than failing
        text = str(error).strip().splitlines()
        return _Unreadable(f"{type(error).__name__}: {text[0][:200] if text else ''}")


def pane_examples(spark: Any, config: PipelineConfig, limit: int = 8) -> str:
    """The firings of one busy (key, window) that saw EARLY, ON_TIME and LATE panes, if any."""
    from pyspark.sql import functions as F

    store = DeltaStore(spark, config)
    if not store.exists("window_results"):
        return ""
    results = store.read("window_results")
    keys = [*config.key, "window_start"]
    names = [spec.name for spec in config.aggregates]
    # Among those, one whose every aggregate changes from pane to pane (a page without revenue
    # showed `revenue=0.00` on every pane): the most distinct values, summed over the aggregates.
    changing = sum((F.countDistinct(F.to_json(F.struct(name))) for name in names), F.lit(0))
    candidates = (
        results.groupBy(*keys)
        .agg(F.countDistinct("timing").alias("kinds"), changing.alias("changing"), F.count("*").alias("n"))
        .orderBy(F.col("kinds").desc(), F.col("changing").desc(), F.col("n").desc())
        .limit(1)
        .collect()
    )
    if not candidates:
        return ""
    pick = candidates[0]
    condition = F.lit(True)
    for key in keys:
        condition = condition & (F.col(key) == pick[key])
    rows = (
        results.where(condition)
        .orderBy("emit_seq", "emit_step", "pane_index")
        .limit(limit)
        .collect()
    )
    key_text = ", ".join(f"{k}={pick[k]}" for k in config.key)
    out = [f"example: the panes of {key_text}, window starting {pick['window_start']}"]
    for row in rows:
        values = ", ".join(f"{n}={_short(row[n])}" for n in names)
        out.append(
            f"  pane {row['pane_index']:>2} {row['timing']:<7} at watermark "
            f"{format_timestamp(row['watermark'])}: {values}"
        )
    return "\n".join(out)


def _short(value: Any) -> str:
    if isinstance(value, list) and len(value) > 4:
        return f"[{', '.join(map(str, value[:4]))}, ... {len(value)} items]"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
