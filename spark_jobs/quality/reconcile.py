"""Record reconciliation: every record read is accounted for exactly once, from the tables alone.

Computed with Spark from the Delta tables (never from the engine's counters)::

    records read (source_files.records + source_files.quarantined)
      = quarantined                                  (quarantine rows)
      + late                                         (late_events rows)
      + counted in the final panes of closed windows (window_results)
      + held by windows still open                   (operator_state contents: "in flight")
      + staged but not replayed yet                  (staging rows after the last committed batch)

and, window by window, the records a window holds equal the accepted records that belong to it.
For tumbling windows each accepted record belongs to one window; the check needs no watermark.
For sliding windows a record belongs to ``size / slide`` windows but is skipped by those already
cleaned up when it arrived (a record late for some windows only is not a late event), so the
watermark before each record is recomputed from the replay log's carried watermark state with the
engine's :func:`spark_jobs.core.watermarks.compute_timeline`, and the records predicted late for every
window must be exactly the ``late_events`` rows.

"Counted" is the count of a window's last pane (``count(*)`` accumulates), or the sum of its
panes for purging (discarding) triggers. The check is exact only for tumbling and sliding
event-time windows with event-time triggers, a ``count(*)`` aggregate and late records kept in
``late_events``; anything else gets an explicit *not applicable* result saying why (sessions
merge windows; count triggers drop a remainder at cleanup; processing-time triggers can leave
records unfired at cleanup; evictors drop records; ``late_output: drop`` loses the late records).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import PipelineConfig
from ..core.durations import format_timestamp
from ..core.watermarks import WatermarkState, compute_timeline
from ..execution.ordering import collect_in_replay_order
from .suites import count_star_columns, quote
from .tables import Snapshot

EXACT_TRIGGERS = ("event_time", "continuous_event_time")
EXAMPLES = 5


@dataclass
class Reconciliation:
    status: str  # ok | mismatch | not_applicable | nothing_replayed
    reason: str = ""
    window: str = ""
    count_column: str | None = None
    records_read: int = 0
    accepted: int = 0
    quarantined: int = 0
    replayed: int = 0
    pending: int = 0
    late: int = 0
    counted: int = 0
    in_flight: int = 0
    expected: int = 0
    windows: int = 0
    open_windows: int = 0
    mismatched_windows: int = 0
    examples: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.status != "mismatch"

    @property
    def applicable(self) -> bool:
        return self.status in ("ok", "mismatch")

    def balanced(self) -> bool:
        """The headline identity (the equation) holds."""
        if self.window == "sliding":
            return self.counted + self.in_flight == self.expected
        total = self.quarantined + self.late + self.counted + self.in_flight + self.pending
        return total == self.records_read

    def equation(self) -> str:
        parts = (
            f"quarantined {self.quarantined} + late {self.late} + in final panes {self.counted} "
            f"+ in open windows {self.in_flight} + not yet replayed {self.pending}"
        )
        if self.window == "sliding":
            return (
                f"record-windows counted {self.counted} + in open windows {self.in_flight} "
                f"{'=' if self.counted + self.in_flight == self.expected else '!='} "
                f"{self.expected} expected from {self.replayed - self.late} accepted records "
                f"(size/slide windows each, minus those closed when the record arrived); "
                f"records read {self.records_read}, quarantined {self.quarantined}, late {self.late}, "
                f"not yet replayed {self.pending}"
            )
        total = self.quarantined + self.late + self.counted + self.in_flight + self.pending
        sign = "=" if total == self.records_read else "!="
        gap = "" if total == self.records_read else f" ({self.records_read - total:+d} unaccounted)"
        return f"records read {self.records_read} {sign} {parts}{gap}"

    def summary(self) -> str:
        if self.status == "not_applicable":
            return f"not applicable: {self.reason}"
        if self.status == "nothing_replayed":
            text = f"nothing replayed yet: records read {self.records_read}, quarantined {self.quarantined}"
            return text + "".join(f"; {p}" for p in self.problems)
        text = self.equation()
        if self.mismatched_windows:
            text += f"; {self.mismatched_windows} of {self.windows} windows disagree, e.g. " + "; ".join(
                self.examples[:3]
            )
        for problem in self.problems:
            text += f"; {problem}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "success": self.success, "summary": self.summary()}


def not_applicable_reason(config: PipelineConfig) -> str | None:
    if config.join is not None:
        return (f"{config.join.type} join: a record joins zero or many partners, so join_results "
                "count pairs, not records")
    if config.keyed_process is not None:
        return "keyed process function: its rows are whatever the function emits, not record counts"
    window, trigger = config.window, config.trigger
    base = trigger.nested if trigger.kind == "purging" else trigger
    if window.kind not in ("tumbling", "sliding"):
        return (f"{window.kind} windows: records are not assigned to fixed windows "
                "(sessions merge, the global window never closes before finalize)")
    if not window.is_event_time:
        return "processing-time windows: a record's window depends on the replay clock, not its data"
    if base.kind not in EXACT_TRIGGERS:
        return (f"{base.kind} trigger: records can stay unemitted at cleanup "
                "(a count trigger drops its remainder; processing-time firings may miss records)")
    if not count_star_columns(config):
        return "no count(*) aggregate to count records with"
    if config.late_output != "side_output":
        return "late_output is drop: late records are not kept, so they cannot be counted"
    for name in ("evictor", "aggregate_function", "process_function"):
        if getattr(config, name, None) is not None:
            return f"{name.replace('_', ' ')} configured: pane values are not plain record counts"
    return None


def reconcile(snapshot: Snapshot) -> Reconciliation:
    """Account for every record read; see the module docstring for the equation."""
    from pyspark.sql import functions as F

    config = snapshot.config
    result = Reconciliation("ok", window=config.window.kind)
    source_files = snapshot.frame("source_files")
    if source_files is not None:
        sums = source_files.agg(F.sum("records").alias("r"), F.sum("quarantined").alias("q")).collect()[0]
        file_records, file_quarantined = int(sums["r"] or 0), int(sums["q"] or 0)
    else:
        file_records = file_quarantined = 0
    result.records_read = file_records + file_quarantined
    staging = snapshot.frame("staging")
    if staging is not None:
        replayed_flag = (F.col("_seq") < F.lit(snapshot.replayed_seq_end)).cast("long")
        counts = staging.agg(F.count("*").alias("n"), F.sum(replayed_flag).alias("replayed")).collect()[0]
        result.accepted, result.replayed = int(counts["n"]), int(counts["replayed"] or 0)
    quarantine = snapshot.frame("quarantine")
    result.quarantined = quarantine.count() if quarantine is not None else 0
    if result.accepted != file_records:
        result.problems.append(
            f"source_files counts {file_records} accepted records but staging holds {result.accepted}"
        )
    if result.quarantined != file_quarantined:
        result.problems.append(
            f"source_files counts {file_quarantined} quarantined records but quarantine holds "
            f"{result.quarantined}"
        )
    reason = not_applicable_reason(config)
    if reason:
        result.status, result.reason = "not_applicable", reason
        return result
    if not snapshot.log or staging is None:
        result.status = "mismatch" if result.problems else "nothing_replayed"
        result.replayed, result.pending = 0, result.accepted
        return result

    count_column = count_star_columns(config)[0]
    result.count_column = count_column
    replayed = staging.where(F.col("_seq") < snapshot.replayed_seq_end)
    result.pending = result.accepted - result.replayed
    late = snapshot.frame("late_events")
    late_seqs = late.select("_seq") if late is not None else snapshot.spark.createDataFrame([], "_seq BIGINT")
    counts = late_seqs.agg(F.count("*").alias("n"), F.countDistinct("_seq").alias("distinct")).collect()[0]
    result.late, distinct_late = int(counts["n"]), int(counts["distinct"])
    if distinct_late != result.late:
        result.problems.append(f"{result.late - distinct_late} records appear more than once in late_events")
    stray = late_seqs.join(replayed.select("_seq"), "_seq", "left_anti").count()
    if stray:
        result.problems.append(f"{stray} late_events rows are not replayed staging records")

    if config.window.kind == "tumbling":
        expected = _expected_tumbling(config, replayed, late_seqs)
    else:
        expected = _expected_sliding(snapshot, replayed, late_seqs, result)
    actual = _actual_windows(snapshot, count_column)
    _compare(config, expected, actual, result)
    if result.problems or result.mismatched_windows or not result.balanced():
        result.status = "mismatch"
    return result


def _window_start(ts: Any, offset: int, slide: int) -> Any:
    from pyspark.sql import functions as F

    return ts - F.pmod(ts - F.lit(offset), F.lit(slide))


def _expected_tumbling(config: PipelineConfig, replayed: Any, late_seqs: Any) -> Any:
    """Accepted (not late) replayed records per (key, window start)."""
    from pyspark.sql import functions as F

    window = config.window
    accepted = replayed.join(late_seqs, "_seq", "left_anti")
    start = _window_start(F.col("_event_time"), window.offset, window.size)
    return (
        accepted.select(*config.key, start.alias("ws"))
        .groupBy(*config.key, "ws")
        .agg(F.count("*").alias("expected"))
    )


def _expected_sliding(snapshot: Snapshot, replayed: Any, late_seqs: Any, result: Reconciliation) -> Any:
    """Record-window memberships per (key, window start), skipping windows closed on arrival."""
    from pyspark.sql import functions as F

    config = snapshot.config
    window = config.window
    seqs, lower = accepted_window_bounds(snapshot, replayed)
    import pandas as pd

    bounds = snapshot.spark.createDataFrame(
        pd.DataFrame({"_seq": seqs.astype(np.int64), "lower": lower.astype(np.int64)}),
        "_seq BIGINT, lower BIGINT",
    )
    slide, offset = window.slide, window.offset
    ts = F.col("_event_time")
    last_start = _window_start(ts, offset, slide)
    first_start = F.col("lower") + 1 + F.pmod(F.lit(offset) - (F.col("lower") + 1), F.lit(slide))
    records = replayed.select("_seq", *config.key, "_event_time").join(bounds, "_seq").select(
        "_seq", *config.key, first_start.alias("first"), last_start.alias("last")
    ).cache()
    predicted_late = records.where(F.col("last") < F.col("first")).select("_seq")
    missing = predicted_late.join(late_seqs, "_seq", "left_anti").count()
    extra = late_seqs.join(predicted_late, "_seq", "left_anti").count()
    if missing:
        result.problems.append(
            f"{missing} records were closed out of all their windows but are not in late_events"
        )
    if extra:
        result.problems.append(f"{extra} late_events records still had an open window when they arrived")
    expected = (
        records.where(F.col("last") >= F.col("first"))
        .select(*config.key, F.explode(F.sequence("first", "last", F.lit(slide))).alias("ws"))
        .groupBy(*config.key, "ws")
        .agg(F.count("*").alias("expected"))
    )
    records.unpersist()
    return expected


def accepted_window_bounds(snapshot: Snapshot, replayed: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per replayed record: its ``_seq`` and the exclusive lower bound of the window starts that
    accepted it (``max(ts - size, watermark_before - size + 1 - allowed_lateness)``)."""
    config = snapshot.config
    size, lateness = config.window.size, config.allowed_lateness
    table = collect_in_replay_order(replayed, "_seq", "_event_time", "_ingest_time", "_partition")
    all_seqs = table.column("_seq").to_numpy()
    all_ts = table.column("_event_time").to_numpy()
    ingest = table.column("_ingest_time").to_numpy(zero_copy_only=False)
    partition = table.column("_partition").to_numpy(zero_copy_only=False)
    watermark = np.empty(len(all_seqs), dtype=np.int64)
    previous = None
    for row in snapshot.log:
        lo, hi = np.searchsorted(all_seqs, [row["seq_start"], row["seq_end"]])
        state = WatermarkState.from_json(previous["watermark_state"] if previous else None)
        clock = ingest[lo:hi].astype(np.int64) if config.source.ingest_time else None
        timeline, _ = compute_timeline(
            config.watermark, state, int(row["seq_start"]), all_ts[lo:hi], clock, partition[lo:hi],
            bool(row["finalize"]),
        )
        adv_seq = np.asarray(timeline.adv_seq, dtype=np.int64)
        adv_wm = np.asarray(timeline.adv_wm, dtype=np.int64)
        # The watermark before record s was emitted after the last advance at a record < s.
        index = np.searchsorted(adv_seq, all_seqs[lo:hi], side="left") - 1
        watermark[lo:hi] = timeline.start_watermark
        if len(adv_wm):
            advanced = index >= 0
            watermark[lo:hi][advanced] = adv_wm[index[advanced]]
        previous = row
    # Clip the watermark into a range where it still decides the same and nothing overflows.
    span = 2 * size + lateness + 1
    clipped = np.clip(watermark, all_ts - span, all_ts + span)
    lower = np.maximum(all_ts - size, clipped - size + 1 - lateness)
    return all_seqs, lower


def _actual_windows(snapshot: Snapshot, count_column: str) -> Any:
    """Per (key, window start): records emitted in panes and held in open state."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    config = snapshot.config
    keys = list(config.key)
    purging = config.trigger.kind == "purging"
    panes = snapshot.frame("window_results")
    spark = snapshot.spark
    key_ddl = ", ".join(f"{quote(k)} STRING" for k in keys)
    if panes is not None:
        rows = panes.select(
            *keys, F.unix_millis("window_start").alias("ws"), "pane_index", F.col(count_column).alias("n")
        ).dropDuplicates([*keys, "ws", "pane_index"])
        if purging:
            emitted = rows.groupBy(*keys, "ws").agg(F.sum("n").alias("emitted"))
        else:
            newest = Window.partitionBy(*keys, "ws").orderBy(F.col("pane_index").desc())
            emitted = (
                rows.withColumn("_rank", F.row_number().over(newest))
                .where("_rank = 1")
                .select(*keys, "ws", F.col("n").alias("emitted"))
            )
    else:
        emitted = spark.createDataFrame([], f"{key_ddl}, ws BIGINT, emitted BIGINT")
    state = snapshot.frame("operator_state")
    if state is not None:
        index = [spec.name for spec in config.aggregates].index(count_column)
        open_rows = state.where(F.col("contents").isNotNull())
        if "is_open" in state.columns:
            open_rows = open_rows.where(F.col("is_open"))
        held = open_rows.select(
            *keys, F.col("window_start_ms").alias("ws"),
            F.get_json_object("contents", f"$[{index}]").cast("long").alias("held"),
        )
    else:
        held = spark.createDataFrame([], f"{key_ddl}, ws BIGINT, held BIGINT")
    return emitted.join(held, [*keys, "ws"], "full_outer")


def _compare(config: PipelineConfig, expected: Any, actual: Any, result: Reconciliation) -> None:
    from pyspark.sql import functions as F

    keys = list(config.key)
    purging = config.trigger.kind == "purging"
    emitted, held = F.coalesce(F.col("emitted"), F.lit(0)), F.coalesce(F.col("held"), F.lit(0))
    if purging:
        counted, in_flight = emitted, held
    else:
        counted = F.when(F.col("held").isNull(), emitted).otherwise(F.lit(0))
        in_flight = held
    joined = (
        actual.select(*keys, "ws", counted.alias("counted"), in_flight.alias("in_flight"),
                      F.col("held").isNotNull().alias("open"))
        .join(expected, [*keys, "ws"], "full_outer")
        .select(
            *keys, "ws",
            F.coalesce("counted", F.lit(0)).alias("counted"),
            F.coalesce("in_flight", F.lit(0)).alias("in_flight"),
            F.coalesce("open", F.lit(False)).alias("open"),
            F.coalesce("expected", F.lit(0)).alias("expected"),
        )
        .cache()
    )
    totals = joined.agg(
        F.count("*").alias("windows"),
        F.sum(F.col("open").cast("int")).alias("open"),
        F.sum("counted").alias("counted"),
        F.sum("in_flight").alias("in_flight"),
        F.sum("expected").alias("expected"),
        F.sum((F.col("counted") + F.col("in_flight") != F.col("expected")).cast("int")).alias("bad"),
    ).collect()[0]
    result.windows = int(totals["windows"] or 0)
    result.open_windows = int(totals["open"] or 0)
    result.counted = int(totals["counted"] or 0)
    result.in_flight = int(totals["in_flight"] or 0)
    result.expected = int(totals["expected"] or 0)
    result.mismatched_windows = int(totals["bad"] or 0)
    if result.mismatched_windows:
        size = config.window.size
        for row in (
            joined.where(F.col("counted") + F.col("in_flight") != F.col("expected"))
            .orderBy("ws", *keys)
            .limit(EXAMPLES)
            .collect()
        ):
            key = ", ".join(f"{k}={row[k]}" for k in keys)
            where = "in open state" if row["open"] else "in the final pane"
            result.examples.append(
                f"{key} window [{format_timestamp(row['ws'])}, {format_timestamp(row['ws'] + size)}) "
                f"holds {row['counted'] + row['in_flight']} records {where} but "
                f"{row['expected']} accepted records belong to it"
            )
    joined.unpersist()
