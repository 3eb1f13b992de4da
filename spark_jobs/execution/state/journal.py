"""The operation journal: a command that rewrites a pipeline's tables records its intent first.

A reprocess or a reset changes many tables, one Delta commit at a time; a kill between two of
them would leave a state no single commit describes. So the command writes what it is doing
(``_replay_operation.json`` beside the lock, replaced atomically) before its first change, moves
it from phase to phase as it goes, and removes it when done. Any next command on the pipeline
(the same one again, a ``replay run``, an Airflow retry) finds it and finishes the operation
first (``spark_jobs.execution.replay.finish_operation``); ``replay status`` shows it.

The journal lives outside the tables on purpose: a reset drops every table, its own record
included would be lost half-way.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ...config import PipelineConfig, local_path
from ...core.durations import format_timestamp
from ..object_store import delete, read_text, require_reachable_without_jvm, write_text
from ..spark_session import is_connect

JOURNAL_NAME = "_replay_operation.json"

#: A reprocess's phases, in order. ``rewind``: the commit log may still hold the batches being
#: redone (deleting them again is safe: nothing was replayed yet). ``forward``: the log was
#: rewound; the tables catch up with it (recovery restores them) and the batches are replayed
#: forward: a resume continues, never rewinds again. ``record``: replayed; the history row
#: remains to be written (idempotent, by operation id).
REPROCESS_PHASES = ("rewind", "forward", "record")


@dataclass
class Operation:
    """An operation in flight on a pipeline's tables."""

    kind: str  # "reprocess" | "reset"
    id: str
    phase: str
    started_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    # reprocess only
    from_ms: int | None = None
    to_ms: int | None = None
    reason: str | None = None
    #: The first batch replayed again (a pass boundary), and the last batch committed before.
    from_batch: int | None = None
    through_batch: int | None = None
    #: The batches among those that finalized the pipeline (``--finalize``): the replay forward
    #: finalizes at the same batches.
    finalize_batches: list[int] = field(default_factory=list)

    def describe(self) -> str:
        if self.kind == "reset":
            return f"a reset started at {self.started_at}"
        return (
            f"a reprocess of [{format_timestamp(self.from_ms)}, {format_timestamp(self.to_ms)}) "
            f"({self.reason!r}) started at {self.started_at}, phase {self.phase}: batches "
            f"{self.from_batch}-{self.through_batch} to replay again"
            + (", finalizing as before" if self.finalize_batches else "")
        )

    def same_request(self, from_ms: int, to_ms: int, reason: str) -> bool:
        request = (self.from_ms, self.to_ms, self.reason)
        return self.kind == "reprocess" and request == (from_ms, to_ms, reason)


def journal_path(config: PipelineConfig) -> str:
    return f"{config.output_path.rstrip('/')}/{JOURNAL_NAME}"


def read_operation(config: PipelineConfig, spark: Any = None) -> Operation | None:
    """The unfinished operation, if any. Needs ``spark`` only for a pipeline on object storage
    other than S3 (without a JVM, an ``s3a://`` journal is read with pyarrow: ``pending_work``, a
    Spark Connect client)."""
    path = journal_path(config)
    local = local_path(path)
    if local is not None:
        try:
            with open(local) as handle:
                text = handle.read()
        except FileNotFoundError:
            return None
    elif _without_jvm(spark, path):
        text = read_text(path)
        if text is None:
            return None
    else:
        text = _hadoop_read(spark, path)
        if text is None:
            return None
    return Operation(**json.loads(text))


def write_operation(config: PipelineConfig, operation: Operation, spark: Any = None) -> None:
    """Record the operation (or its next phase). Atomic: a reader sees the old or the new record."""
    text = json.dumps(asdict(operation), indent=1)
    path = journal_path(config)
    local = local_path(path)
    if local is None:  # one PUT on object storage, atomic by itself
        if _without_jvm(spark, path):
            write_text(path, text)
        else:
            _hadoop_write(spark, path, text)
        return
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    temporary = f"{local}.tmp-{os.getpid()}"
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, local)


def clear_operation(config: PipelineConfig, spark: Any = None) -> None:
    """The operation is done."""
    path = journal_path(config)
    local = local_path(path)
    if local is not None:
        try:
            os.remove(local)
        except FileNotFoundError:
            pass
        return
    if _without_jvm(spark, path):
        delete(path)
        return
    target = spark._jvm.org.apache.hadoop.fs.Path(path)
    target.getFileSystem(spark._jsc.hadoopConfiguration()).delete(target, False)


def _without_jvm(spark: Any, path: str) -> bool:
    """An ``s3a://`` journal handled here (pyarrow) instead of through Hadoop: no session (a
    metadata check) or a Spark Connect client's, which has no Hadoop ``FileSystem`` (and is
    refused, with a ConfigError, any other scheme)."""
    if spark is not None and not is_connect(spark):
        return False
    require_reachable_without_jvm(path)
    return True


def _hadoop_read(spark: Any, path: str) -> str | None:
    jvm = spark._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(target):
        return None
    stream = fs.open(target)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def _hadoop_write(spark: Any, path: str, text: str) -> None:
    jvm = spark._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    stream = target.getFileSystem(spark._jsc.hadoopConfiguration()).create(target, True)
    try:
        stream.write(text.encode())
    finally:
        stream.close()
