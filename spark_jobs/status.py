"""What has been replayed: read back from the pipeline's own Delta tables."""

from __future__ import annotations

from typing import Any

from .config import PipelineConfig
from .durations import format_timestamp
from .state.delta import TABLES, DeltaStore


def pipeline_status(config: PipelineConfig, spark: Any = None) -> str:
    from pyspark.sql import functions as F

    from .session import get_spark

    spark = spark or get_spark(f"replay-{config.name}")
    store = DeltaStore(spark, config)
    lines = [f"pipeline {config.name} ({config.output_path})"]
    if not store.exists("replay_log"):
        lines.append("  nothing replayed yet")
        return "\n".join(lines)
    log = store.read("replay_log")
    last = log.orderBy(F.col("batch_id").desc()).first()
    totals = log.agg(F.count("*"), F.sum("records"), F.sum("panes"), F.sum("late")).first()
    files = store.read("source_files").agg(
        F.count("*"), F.sum("records"), F.sum("quarantined")
    ).first()
    state = store.read_state(last)
    state_counts = state.agg(F.count("*"), F.sum(F.col("is_open").cast("int"))).first()
    lines += [
        f"  files      {files[0]} ingested: {files[1] or 0} records accepted, "
        f"{files[2] or 0} quarantined",
        f"  batches    {totals[0]} committed (last id {last['batch_id']}), "
        f"{totals[1] or 0} records replayed" + (", finalized" if last["finalize"] else ""),
        f"  watermark  {format_timestamp(last['watermark_after'])}, "
        f"replay clock {format_timestamp(last['clock_after'])}",
        f"  output     {totals[2] or 0} panes, {totals[3] or 0} late events",
        f"  state      {state_counts[1] or 0} open windows in {state_counts[0]} state rows",
        "  tables     "
        + ", ".join(f"{table} v{version}" for table, version in store.versions(TABLES).items()),
    ]
    return "\n".join(lines)


def pane_examples(spark: Any, config: PipelineConfig, limit: int = 8) -> str:
    """The firings of one busy (key, window) that saw EARLY, ON_TIME and LATE panes, if any."""
    from pyspark.sql import functions as F

    store = DeltaStore(spark, config)
    if not store.exists("window_results"):
        return ""
    results = store.read("window_results")
    keys = [*config.key, "window_start"]
    candidates = (
        results.groupBy(*keys)
        .agg(F.countDistinct("timing").alias("kinds"), F.count("*").alias("n"))
        .orderBy(F.col("kinds").desc(), F.col("n").desc())
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
    names = [spec.name for spec in config.aggregates]
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
