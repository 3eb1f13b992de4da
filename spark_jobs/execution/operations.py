"""The commands that change a pipeline's tables: run, reprocess, reset. Each is resumable.

Every command holds the pipeline's lock for its whole length and first finishes an operation a
killed command left unfinished (``finish_operation``, from the journal in ``state.journal``).

* **run**: recover, ingest, replay what is pending (``replay.Replay``).
* **reprocess**: records its intent (range, reason, the batch it rewinds to, the last batch
  committed, the batch that finalized the pipeline), then uncommits the batches from the pass
  holding the range's first record (the commit log first, so the tables are only ever *ahead* of
  the log, which any run repairs), then replays them forward, finalizing where the pipeline was
  finalized before. Killed at any moment, the next command on the pipeline does the rest; the
  tables end identical to an uninterrupted reprocess. The same reprocess again, once finished
  and with nothing replayed since, is a no-op.
* **reset**: records its intent, then deletes every table; the next command deletes the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import PipelineConfig, load_config, parse_instant
from ..exceptions import ConfigError, ReplayError
from .faults import crash_point
from .ingest import known_files
from .locks import pipeline_lock
from .recovery import committed_log, drop_all, pass_start, rewind_log
from .replay import Replay, RunSummary, stderr_progress
from .semantics_guard import check_semantics
from .spark_session import get_spark, is_connect, spark_remote
from .state.delta import DeltaStore
from .state.journal import Operation, clear_operation, read_operation, write_operation

Progress = Callable[[str], None]


def run_pipeline(
    config: PipelineConfig,
    spark: Any = None,
    batch_size: int | None = None,
    finalize: bool = False,
    progress: Progress | None = None,
    until_ms: int | None = None,
) -> RunSummary:
    """Replay what has not been replayed yet, then stop. Running again later continues.

    An operation a killed command left unfinished is finished first (its batches are in the
    summary). ``until_ms`` replays only the staged batches whose records all have a replay clock
    below it (an Airflow data interval's end); ``finalize`` applies only once every staged batch
    has been replayed.
    """
    spark = spark or _spark(config)
    progress = progress or stderr_progress
    with pipeline_lock(config, spark):
        summary = _summary(config)
        _check_semantics(config, spark)
        finish_operation(config, spark, summary, progress, batch_size)
        summary.add(_replay(config, spark, progress, batch_size).run(finalize, until_ms))
        return summary


def run_command(
    pipeline: str,
    batch_size: int | None = None,
    finalize: bool = False,
    master: str | None = None,
    quiet: bool = False,
    until: str | None = None,
    remote: str | None = None,
) -> RunSummary:
    """What ``replay run`` does with its arguments as given (also the ``spark-submit`` job's):
    load the config, check the arguments, start Spark (``master``: default ``$SPARK_MASTER`` or
    ``local[*]``) and ``run_pipeline``. ``until`` is ISO-8601 with a zone or epoch ms; ``quiet``
    drops the per-batch progress lines; ``remote`` (default ``$SPARK_REMOTE``) runs it on that
    Spark Connect server instead, in a session of its own that ends with the command. A bad
    config or argument raises ConfigError before anything starts."""
    config = load_config(pipeline)
    if batch_size is not None and batch_size < 1:
        raise ConfigError("--batch-size", "must be a whole number >= 1")
    until_ms = parse_instant(until, "--until") if until else None
    if master and spark_remote(remote):
        raise ConfigError("--master", "a run is on a Spark master or a Spark Connect server, not both")
    from pyspark.sql import SparkSession

    shared = SparkSession.getActiveSession() is not None  # a caller's session outlives the run
    spark = get_spark(f"replay-{config.name}", master=master, remote=remote)
    try:
        return run_pipeline(
            config, spark=spark, batch_size=batch_size, finalize=finalize,
            progress=(lambda _m: None) if quiet else None, until_ms=until_ms,
        )
    finally:
        if is_connect(spark) and not shared:
            # Its server session ends now; a client left open also waits at exit for a server
            # that has gone (see docs/spark-connect.md).
            spark.stop()


@dataclass
class ReprocessOutcome:
    """What a ``reprocess`` did: ``summary`` holds the batches it replayed (and those of an
    unfinished operation it finished first); ``reprocessed`` is False when it had nothing to do,
    and ``message`` says why."""

    reprocessed: bool
    summary: RunSummary
    message: str = ""


def reprocess(
    config: PipelineConfig,
    from_ms: int,
    to_ms: int,
    reason: str,
    spark: Any = None,
    progress: Progress | None = None,
) -> ReprocessOutcome:
    """Rewind to before the first batch holding a record with event time in ``[from_ms, to_ms)``,
    then replay forward to where the pipeline was (see the module's docstring)."""
    if from_ms >= to_ms:
        raise ReplayError(f"reprocess range is empty: from {from_ms} must be before to {to_ms}")
    if not reason or not reason.strip():
        raise ReplayError("reprocess needs a reason (it is recorded with the rewind)")
    spark = spark or _spark(config)
    progress = progress or stderr_progress
    summary = _summary(config)
    with pipeline_lock(config, spark):
        pending = read_operation(config, spark)
        _check_semantics(config, spark, pending)
        finish_operation(config, spark, summary, progress)
        if pending is not None and pending.same_request(from_ms, to_ms, reason):
            return ReprocessOutcome(True, summary, f"finished {pending.describe()}, left by a killed command")
        operation = plan_reprocess(DeltaStore(spark, config), from_ms, to_ms, reason)
        if isinstance(operation, str):
            return ReprocessOutcome(False, summary, operation)
        write_operation(config, operation, spark)
        crash_point("reprocess:intent")
        finish_operation(config, spark, summary, progress)
    return ReprocessOutcome(True, summary)


def plan_reprocess(store: DeltaStore, from_ms: int, to_ms: int, reason: str) -> Operation | str:
    """The reprocess to run, or why there is nothing to do."""
    from pyspark.sql import functions as F

    log = committed_log(store)
    if not log or not store.exists("staging"):
        return "nothing has been replayed yet; nothing to do"
    first = (
        store.read("staging")
        .where((F.col("_event_time") >= from_ms) & (F.col("_event_time") < to_ms))
        .agg(F.min("_batch"))
        .first()[0]
    )
    last = log[-1]["batch_id"]
    if first is None or first > last:
        return "no replayed batch holds records in that range; nothing to do"
    done = last_reprocess(store)
    if done is not None and (done["from_ms"], done["to_ms"], done["reason"], done["to_batch"]) == (
        from_ms, to_ms, reason, last
    ):
        return (
            f"this range was reprocessed for the same reason at {done['reprocessed_at']} and nothing was "
            "replayed since; nothing to do (give another --reason to run it again)"
        )
    first = pass_start(log, first)
    return Operation(
        kind="reprocess", id=uuid.uuid4().hex, phase="rewind", from_ms=from_ms, to_ms=to_ms, reason=reason,
        from_batch=first, through_batch=last,
        finalize_batches=[row["batch_id"] for row in log if row["finalize"] and row["batch_id"] >= first],
    )


def reset(config: PipelineConfig, spark: Any = None) -> list[str]:
    """Delete every table of the pipeline: the next run starts from the beginning. Returns the
    tables deleted."""
    spark = spark or _spark(config)
    with pipeline_lock(config, spark):
        pending = read_operation(config, spark)
        if pending is None or pending.kind != "reset":
            # (An unfinished reprocess needs no finishing: everything it would write goes too.)
            write_operation(config, Operation(kind="reset", id=uuid.uuid4().hex, phase="drop"), spark)
            crash_point("reset:intent")
        dropped = drop_all(DeltaStore(spark, config))
        clear_operation(config, spark)
    return dropped


def finish_operation(
    config: PipelineConfig,
    spark: Any,
    summary: RunSummary,
    progress: Progress,
    batch_size: int | None = None,
) -> Operation | None:
    """Finish the operation a killed command left unfinished, if any, for a caller that holds the
    pipeline's lock: each phase is recorded before the next starts, and each step can be repeated.
    Returns the operation finished (None: there was none)."""
    operation = read_operation(config, spark)
    if operation is None:
        return None
    progress(f"[{config.name}] finishing {operation.describe()}")
    store = DeltaStore(spark, config)
    if operation.kind == "reset":
        drop_all(store)
        clear_operation(config, spark)
        return operation
    if operation.phase == "rewind":
        rewind_log(store, operation.from_batch)
        crash_point("reprocess:log-rewound")
        _advance(config, spark, operation, "forward")
        crash_point("reprocess:forward")
    if operation.phase == "forward":
        # The log ends before from_batch: the run's recovery restores the tables to it, then the
        # batches are replayed up to where the pipeline was, finalizing at the same batch.
        for finalize_at in operation.finalize_batches:
            log = committed_log(store)
            if log and log[-1]["batch_id"] >= finalize_at:
                continue  # committed before a kill: finalizing again would add a batch
            replay = _replay(config, spark, progress, batch_size)
            summary.add(replay.run(True, through_batch=finalize_at - 1))
        replay = _replay(config, spark, progress, batch_size)
        summary.add(replay.run(False, through_batch=operation.through_batch))
        _advance(config, spark, operation, "record")
        crash_point("reprocess:replayed")
    record_reprocess(store, operation)
    crash_point("reprocess:recorded")
    clear_operation(config, spark)
    return operation


def _check_semantics(config: PipelineConfig, spark: Any, pending: Operation | None = None) -> None:
    """``semantics_guard.check_semantics`` against the committed batches, before a command
    replays anything (an unfinished reset, which replays nothing, goes ahead)."""
    pending = pending if pending is not None else read_operation(config, spark)
    if pending is None or pending.kind != "reset":
        store = DeltaStore(spark, config)
        check_semantics(config, committed_log(store), known_files(store))


def _advance(config: PipelineConfig, spark: Any, operation: Operation, phase: str) -> None:
    operation.phase = phase
    write_operation(config, operation, spark)


HISTORY_SCHEMA = (
    "operation_id STRING, from_ms BIGINT, to_ms BIGINT, reason STRING, from_batch BIGINT, to_batch BIGINT, "
    "started_at STRING"
)


def record_reprocess(store: DeltaStore, operation: Operation) -> None:
    """Append the finished reprocess to ``reprocess_history``, once per operation."""
    from pyspark.sql import functions as F

    table = "reprocess_history"
    if store.exists(table):
        history = store.read(table)
        if "operation_id" in history.columns and history.where(F.col("operation_id") == operation.id).take(1):
            return
    row = store.spark.createDataFrame(
        [(operation.id, operation.from_ms, operation.to_ms, operation.reason, operation.from_batch,
          operation.through_batch, operation.started_at)],
        HISTORY_SCHEMA,
    ).withColumn("reprocessed_at", F.current_timestamp())
    row.write.format("delta").mode("append").option("mergeSchema", "true").save(store.path(table))


def last_reprocess(store: DeltaStore) -> dict[str, Any] | None:
    """The newest row of ``reprocess_history`` (None: no reprocess yet)."""
    if not store.exists("reprocess_history"):
        return None
    row = store.read("reprocess_history").orderBy("reprocessed_at", ascending=False).first()
    return row.asDict() if row is not None else None


def _summary(config: PipelineConfig) -> RunSummary:
    return RunSummary(config.name, config.output_path, results_table=config.results_table)


def _replay(config: PipelineConfig, spark: Any, progress: Progress, batch_size: int | None) -> Replay:
    return Replay(spark, config, batch_size or config.batch_max_records, progress)


def _spark(config: PipelineConfig) -> Any:
    return get_spark(f"replay-{config.name}")
