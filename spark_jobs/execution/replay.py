"""The replay loop: ingest new archive files, then run micro-batches until the archive is done.

A run (``replay run PIPELINE.yaml``; ``spark_jobs.execution.operations.run_pipeline`` holds the pipeline's
lock around it) does:

0. **recover** (``recovery``): put every table back to the versions the last committed batch
   recorded;
1. **ingest** (``ingest``): list the archive, read the files not yet ingested (bad records go to
   ``quarantine``), number the new records in replay order (``_seq``, see ``ordering``), cut
   them into batches and stage them in the ``staging`` table;
2. **passes**: the staged batches not yet committed, grouped into passes of consecutive batches
   (up to ``batch.pass_max_records``; the plan and the run's account are in ``passes``). Each is
   computed (``pass_compute``: every batch's watermark timeline on the driver, every key once
   through the operator over the joined timelines), then written (``pass_write``: results, late
   events, ``window_latest`` (its MERGEs in ``latest_merges``) and ``operator_state`` once each,
   with ``maintenance`` every N batches); the batches' ``replay_log`` rows, appended last in one
   commit, commit the pass;
3. **finalize** (``--finalize``): one more batch with no records that takes the clock and the
   watermark to +infinity.

This module only orders those steps: pass N+1 is computed while pass N is written and committed.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..config import PipelineConfig
from ..core.durations import MIN_TIMESTAMP
from ..core.replay_clock import clock_after, is_due
from ..core.watermarks import WatermarkState
from ..pipeline_spec import operator_spec
from .ingest import Ingest
from .latest_merges import LatestMerged, LatestMerges
from .pass_compute import PassComputer
from .pass_write import PassWriter
from .passes import PendingBatch, Progress, RunSummary, plan_passes
from .recovery import committed_log, recover
from .state.delta import DeltaStore, staging_clock_column

__all__ = ["Progress", "Replay", "RunSummary", "stderr_progress"]


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Replay:
    """One replay of a pipeline's pending batches (``run``), for a caller holding its lock:
    ``spark_jobs.execution.operations.run_pipeline`` and the operations built on it."""

    def __init__(self, spark: Any, config: PipelineConfig, batch_size: int, progress: Progress):
        self.spark = spark
        self.config = config
        self.batch_size = batch_size
        self.progress = progress
        self.store = DeltaStore(spark, config)
        self.spec = operator_spec(config)
        # The run's Delta writes, overlapped: the ingest's, each pass's tables, maintenance.
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="delta-write")
        self.ingestion = Ingest(spark, config, self.store, batch_size, self.pool, progress)
        self.computer = PassComputer(spark, config, self.store, self.spec, batch_size)
        self.writer = PassWriter(spark, config, self.store, self.pool, progress)

    def run(
        self, finalize: bool, until_ms: int | None = None, through_batch: int | None = None
    ) -> RunSummary:
        """Recover, ingest what is new, replay the staged batches not yet committed, then stop.

        ``until_ms`` replays only the staged batches whose records all have a replay clock below it
        (an Airflow data interval's end); the rest waits for a later run. ``through_batch`` stops
        after that batch (a reprocess replays what was committed before it, no further).
        ``finalize`` applies only once every batch to replay has been replayed.
        """
        try:
            return self._run(finalize, until_ms, through_batch)
        finally:
            self.computer.close()
            self.writer.shutdown()
            self.pool.shutdown()

    def _run(self, finalize: bool, until_ms: int | None, through_batch: int | None) -> RunSummary:
        started = time.time()
        config = self.config
        summary = RunSummary(config.name, config.output_path, results_table=config.results_table)
        log = committed_log(self.store)
        last = log[-1] if log else None
        for repair in recover(self.store, last):
            self.progress(f"[{self.config.name}] recovery: {repair}")
        through = (last or {}).get("latest_through")
        self.writer.latest = LatestMerges(
            self.store, LatestMerged(-1 if through is None else through, self.store.version("window_latest"))
        )
        # The ingest's source_files rows commit beside the first pass's computing and table
        # writes; that pass's log rows wait for them (an ingest without them is redone).
        ingest_commit, self.computer.ingested = self.ingestion.ingest(
            summary, self.computer.kept_record_columns
        )
        pending = self.pending_batches(last)
        if through_batch is not None:
            pending = [batch for batch in pending if batch[0] <= through_batch]
        if until_ms is not None:
            # Stop at the first batch that reaches past the interval: replay order is kept.
            cut = next((i for i, batch in enumerate(pending) if not is_due(batch[3], until_ms)), len(pending))
            finalize = finalize and cut == len(pending)
            pending = pending[:cut]
        batches = [PendingBatch(*batch[:3]) for batch in pending]
        if finalize and not (last and last["finalize"]):
            previous = batches[-1] if batches else None
            batch_id = previous.batch_id + 1 if previous else ((last["batch_id"] + 1) if last else 0)
            seq = previous.seq_end if previous else (last["seq_end"] if last else 0)
            batches.append(PendingBatch(batch_id, seq, seq, finalize=True))
        passes = plan_passes(batches, max(self.config.pass_max_records, self.batch_size))
        self.computer.pending_end = batches[-1].seq_end if batches else 0
        # Pass N+1 is computed while pass N is written and committed: it only needs N's watermark
        # and window state, known once N is computed. Its tables are then written while N's log
        # rows commit; commits stay in order, one at a time.
        watermark = WatermarkState.from_json(last["watermark_state"] if last else None)
        state = self.computer.read_state(last) if passes else None
        previous = last  # the log row of the batch before the next pass (written, maybe not committed)
        writing: Future | None = None  # the write stage of the pass before
        logged: Future | None = ingest_commit  # the log stage of the pass before that one
        for number, group in enumerate(passes, 1):
            computed = self.computer.compute_pass(group, watermark, state)
            watermark, state = computed.states[-1], computed.state_rows()
            if writing is not None:
                previous, logged = writing.result()
            position = (number, len(passes), len(batches))
            writing = self.writer.submit(computed, previous, logged, position, summary)
        if writing is not None:
            _, logged = writing.result()
            last = logged.result()
        elif ingest_commit is not None:
            ingest_commit.result()
        summary.finalized = bool(last and last["finalize"])
        summary.watermark = last["watermark_after"] if last else MIN_TIMESTAMP
        summary.seconds = time.time() - started
        return summary

    def pending_batches(self, last: dict[str, Any] | None) -> list[tuple[int, int, int, int]]:
        """Staged batches not yet committed: (batch id, first seq, end seq, replay clock at end)."""
        running = (last or {}).get("clock_after") or MIN_TIMESTAMP
        clock = staging_clock_column(self.config)
        ingested = self.computer.ingested
        if ingested is not None and ingested[0] == (last["seq_end"] if last else 0):
            # Everything pending was ingested by this run: its batches are known on the driver.
            seq_base, batch_base, table = ingested
            count = table.num_rows
            if not count:
                return []
            starts = np.arange(0, count, self.batch_size)
            ends = np.append(starts[1:], count)
            clocks = np.maximum.reduceat(table.column(clock).to_numpy(), starts)
            running_clocks = np.maximum.accumulate(np.maximum(clocks, running))  # never goes back
            return [
                (batch_base + number, seq_base + int(lo), seq_base + int(hi), int(at))
                for number, (lo, hi, at) in enumerate(zip(starts, ends, running_clocks, strict=True))
            ]
        done = last["batch_id"] if last else -1
        rows = self.store.staged_batches(done, clock)
        batches = []
        for row in rows:
            running = clock_after(row["clock"], running)
            batches.append((row["_batch"], row["lo"], row["hi"] + 1, running))
        return batches
