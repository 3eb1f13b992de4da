"""Whether a run up to a replay-clock bound would do anything, decided without Spark.

An Airflow backfill is one run per data interval, and most intervals of a long schedule hold
nothing new: starting a Spark driver (15-30 s) to find that out is the cost of an empty
interval. The answer comes from cheap metadata instead: the archive's file listing, the commit
log, the tables' versions and the replay clock of the next staged batch, read with delta-rs
(``state.delta_rs``). The rules are ``Replay.run``'s own, applied to metadata:

* an unfinished operation (reprocess, reset), tables ahead of the commit log (a run killed
  mid-pass), no commit yet: the run has work (finishing, repairing, the first ingest);
* an archive file not yet ingested, or an ingested one changed or removed: work (the ingest, or
  the run's refusal to go on, which must be seen);
* the next staged batch is due when its replay clock, carried forward from the last committed
  batch (it never goes back), is before the bound;
* ``finalize`` is work until the pipeline is finalized.

Archives and tables on ``s3a://`` are read without a JVM too (``object_store``: pyarrow's
``S3FileSystem`` for the listing and the journal, delta-rs for the tables, both configured from the
S3A settings' environment). When in doubt (another scheme, which only Spark's file systems reach;
a table or an object it cannot read), the answer is "work": a wasted Spark start is better than a
skipped batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import PipelineConfig, local_path
from ..core.durations import MIN_TIMESTAMP, format_timestamp
from ..core.replay_clock import clock_after, is_due
from .archive_delta import list_delta
from .archive_files import change_of, list_local_archive
from .object_store import is_s3, list_s3_archive, reachable_without_jvm
from .recovery import tables_ahead
from .state.delta import staging_clock_column
from .state.delta_rs import DeltaRsReader
from .state.journal import read_operation


@dataclass(frozen=True)
class PendingWork:
    """``work``: whether a run would change anything; ``reason``: why, in one line."""

    work: bool
    reason: str


def pending_work(config: PipelineConfig, until_ms: int | None = None, finalize: bool = False) -> PendingWork:
    """Whether ``replay run --until until_ms`` (``--finalize``) would ingest, repair or replay
    anything. Reads metadata only; never raises on a pipeline's state (it answers "work")."""
    try:
        return _pending_work(config, until_ms, finalize)
    except Exception as error:  # unreadable metadata: let the run look, and report it properly
        return PendingWork(True, f"cannot tell without Spark ({type(error).__name__}: {error})")


def _pending_work(config: PipelineConfig, until_ms: int | None, finalize: bool) -> PendingWork:
    sources = config.sources()
    if not all(reachable_without_jvm(path) for path in [config.output_path, *(s.path for s in sources)]):
        return PendingWork(True, "the archive or the tables are neither on the local disk nor on S3: "
                                 "Spark decides")
    operation = read_operation(config)
    if operation is not None:
        return PendingWork(True, f"unfinished: {operation.describe()}")
    reader = DeltaRsReader(config)
    known = reader.source_files()
    if not known:
        return PendingWork(True, "nothing ingested yet: the first run ingests the archive")
    last = reader.last_committed()
    # A table a recovery already restored to the committed version is past it by version only
    # (RESTORE is a commit); a run would restore it again, to the same content: not work.
    ahead = {table: versions for table, versions in tables_ahead(reader, last).items()
             if versions[1] is None or reader.restored_to(table) != versions[1]}
    if ahead:
        return PendingWork(True, f"tables ahead of the commit log ({', '.join(sorted(ahead))}): to restore")
    listed = [f for source in sources for f in (
        list_delta(source, known=known).files if source.format == "delta"  # delta-rs: no JVM either
        else list_s3_archive(source.path, source.format, source.layout) if is_s3(source.path)
        else list_local_archive(local_path(source.path), source.format, source.layout))]
    new = [f.path for f in listed if f.path not in known]
    if new:
        return PendingWork(True, f"{len(new)} new archive file(s), e.g. {new[0]}")
    changed = [f.path for f in listed if change_of(known[f.path], f) is not None]
    removed = sorted(set(known) - {f.path for f in listed})
    if changed or removed:
        return PendingWork(True, f"an ingested archive file changed or is gone: {(changed or removed)[0]}")
    next_batch = last["batch_id"] + 1 if last else 0
    clock = reader.staged_batch_clock(next_batch, staging_clock_column(config))
    if clock is not None:
        running = clock_after(clock, (last or {}).get("clock_after") or MIN_TIMESTAMP)
        if is_due(running, until_ms):
            return PendingWork(True, f"batch {next_batch} is due (replay clock {format_timestamp(running)})")
        waiting = f"batch {next_batch} waits for a later interval (replay clock {format_timestamp(running)})"
    else:
        waiting = "every staged batch is committed"
    finalized = bool(last and last["finalize"])
    if finalize and clock is None and not finalized:
        # (With a batch left for later, the run would not finalize either.)
        return PendingWork(True, "the input ends here: to finalize")
    state = ("finalized" if finalized else
             f"watermark {format_timestamp(last['watermark_after'] if last else MIN_TIMESTAMP)}")
    return PendingWork(False, f"nothing to do: no new archive file, {waiting}; {state}")
