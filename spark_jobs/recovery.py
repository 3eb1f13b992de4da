"""Exactly-once replay: the pipeline lock, crash recovery, reset and reprocessing a range.

* **Lock**: one replay of a pipeline at a time (``flock`` on a local lakehouse, which the OS
  releases even on SIGKILL; an exclusive-create lease file on other file systems).
* **Recover**: a batch that did not write its ``replay_log`` row never happened: every output
  table is put back with Delta RESTORE to the version the last committed batch recorded (or
  dropped, if that batch predates the table). The batch then simply runs again.
* **Reprocess**: rewind state and outputs to just before the pass that committed the first batch
  holding a record of the range, then replay forward from the staged input; the result equals
  a clean replay.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from .config import PipelineConfig
from .exceptions import ConcurrentRunError, ReplayError
from .state.delta import BATCH_TABLES, TABLES, DeltaStore

LOCK_NAME = "_replay.lock"


@contextlib.contextmanager
def pipeline_lock(config: PipelineConfig, spark: Any = None) -> Iterator[None]:
    """Hold the pipeline's lock for the duration of the block, or raise ConcurrentRunError."""
    path = config.output_path
    if "://" not in path or path.startswith("file:"):
        local = path.removeprefix("file:")
        os.makedirs(local, exist_ok=True)
        with _flock(os.path.join(local, LOCK_NAME), config.name):
            yield
    else:
        with _lease(spark, f"{path.rstrip('/')}/{LOCK_NAME}", config.name):
            yield


@contextlib.contextmanager
def _flock(lock_path: str, name: str) -> Iterator[None]:
    import fcntl

    handle = open(lock_path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConcurrentRunError(
                f"pipeline {name} is already being replayed ({holder}); "
                f"wait for it to finish (lock: {lock_path})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        handle.flush()
        yield
    finally:
        handle.close()


@contextlib.contextmanager
def _lease(spark: Any, lock_uri: str, name: str) -> Iterator[None]:
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(lock_uri)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    try:
        stream = fs.create(path, False)
    except Exception as error:  # FileAlreadyExistsException from the JVM
        raise ConcurrentRunError(
            f"pipeline {name} is already being replayed (lease {lock_uri} exists); if no replay "
            "is running, a crashed one left it: delete that file"
        ) from error
    stream.write(f"pid {os.getpid()}".encode())
    stream.close()
    try:
        yield
    finally:
        fs.delete(path, False)


def committed_log(store: DeltaStore) -> list[dict[str, Any]]:
    if not store.exists("replay_log"):
        return []
    return [row.asDict() for row in store.read("replay_log").orderBy("batch_id").collect()]


def recover(store: DeltaStore, last: dict[str, Any] | None) -> list[str]:
    """Roll every batch table back to the last committed batch. Returns what was repaired."""
    recorded = (last or {}).get("table_versions") or {}
    repaired = []
    for table, current in store.versions(BATCH_TABLES).items():
        version = recorded.get(table)
        if version is None:
            store.drop(table)
            repaired.append(f"dropped {table} (created by an uncommitted batch)")
        elif current > version:
            store.restore(table, version)
            repaired.append(f"restored {table} from v{current} to v{version}")
    return repaired


def pass_start(log: list[dict[str, Any]], batch_id: int) -> int:
    """The first batch of the pass that committed ``batch_id``: a rewind can only go back to a
    pass boundary, since the batches of a pass share one version of every table. (A pass always
    commits to ``operator_state``, so different passes never record the same versions.)"""
    by_id = {row["batch_id"]: row for row in log}
    versions = by_id[batch_id]["table_versions"]
    while batch_id - 1 in by_id and by_id[batch_id - 1]["table_versions"] == versions:
        batch_id -= 1
    return batch_id


def reset(config: PipelineConfig, spark: Any = None) -> list[str]:
    """Delete every table of the pipeline: the next run starts from the beginning."""
    from .session import get_spark

    spark = spark or get_spark(f"replay-{config.name}")
    store = DeltaStore(spark, config)
    dropped = []
    with pipeline_lock(config, spark):
        for table in (*TABLES, "dq_results", "reprocess_history"):
            if store.version(table) is not None:
                store.drop(table)
                dropped.append(table)
    return dropped


def reprocess(
    config: PipelineConfig,
    from_ms: int,
    to_ms: int,
    reason: str,
    spark: Any = None,
    progress: Any = None,
) -> Any:
    """Rewind to before the first batch holding a record with event time in ``[from_ms, to_ms)``,
    then replay forward. Returns the run's ``RunSummary`` (None when nothing was in range)."""
    from pyspark.sql import functions as F

    from .replay import run_pipeline
    from .session import get_spark

    if from_ms >= to_ms:
        raise ReplayError(f"reprocess range is empty: from {from_ms} must be before to {to_ms}")
    if not reason or not reason.strip():
        raise ReplayError("reprocess needs a reason (it is recorded with the rewind)")
    spark = spark or get_spark(f"replay-{config.name}")
    store = DeltaStore(spark, config)
    with pipeline_lock(config, spark):
        log = committed_log(store)
        if not log or not store.exists("staging"):
            return None
        first = (
            store.read("staging")
            .where((F.col("_event_time") >= from_ms) & (F.col("_event_time") < to_ms))
            .agg(F.min("_batch"))
            .first()[0]
        )
        if first is None or first > log[-1]["batch_id"]:
            return None  # nothing replayed in that range yet: a normal run will do it
        first = pass_start(log, first)
        was_finalized = bool(log[-1]["finalize"])
        before = [row for row in log if row["batch_id"] < first]
        recover(store, before[-1] if before else None)
        store.spark.sql(f"DELETE FROM delta.`{store.path('replay_log')}` WHERE batch_id >= {first}")
        history = spark.createDataFrame(
            [(from_ms, to_ms, reason, first, log[-1]["batch_id"])],
            "from_ms BIGINT, to_ms BIGINT, reason STRING, from_batch BIGINT, to_batch BIGINT",
        ).withColumn("reprocessed_at", F.current_timestamp())
        history.write.format("delta").mode("append").save(store.path("reprocess_history"))
    return run_pipeline(config, spark=spark, finalize=was_finalized, progress=progress)
