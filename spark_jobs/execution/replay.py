"""The replay loop: ingest new archive files, then run micro-batches until the archive is done.

A run (``replay run PIPELINE.yaml``; ``spark_jobs.execution.operations.run_pipeline`` holds the pipeline's
lock around it) does:

0. **recover**: put every table back to the versions the last committed batch recorded;
1. **ingest**: list the archive, read the files not yet ingested (bad records go to
   ``quarantine``), number the new records in replay order (``_seq``, see ``ordering``), cut
   them into batches and stage them in the ``staging`` table;
2. **passes**: the staged batches not yet committed, grouped into passes of consecutive batches
   (up to ``batch.pass_max_records``): compute each batch's watermark timeline on the driver, run
   every key once through the operator over the joined timelines on the executors, and write
   results, late events, ``window_latest`` and ``operator_state`` once each; the batches'
   ``replay_log`` rows, appended last in one commit, commit the pass;
3. **finalize** (``--finalize``): one more batch with no records that takes the clock and the
   watermark to +infinity.

The plan of a run and its account (pending batches, passes, summaries) are in ``passes``; the
``window_latest`` MERGEs that run beside the passes in ``latest_merges``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from functools import reduce
from typing import Any

import numpy as np

from ..config import PipelineConfig
from ..core.durations import MIN_TIMESTAMP
from ..core.engine import window_kernel
from ..core.engine.joins import INTERVAL_LATE_REASON
from ..core.engine.operator import LATE_REASON
from ..core.watermarks import Timeline, WatermarkState, compute_pass_timelines
from ..exceptions import ArchiveChangedError
from ..pipeline_spec import operator_spec
from .faults import crash_point
from .latest_merges import LatestMerged, LatestMerges
from .ordering import collect_in_replay_order, driver_key_columns, number_records, timeline_columns
from .passes import (
    BatchSummary,
    ComputedPass,
    PassSummary,
    PendingBatch,
    ReadAhead,
    RunSummary,
    plan_passes,
)
from .recovery import committed_log, recover
from .spark_batch import (
    STATE_COLUMNS,
    make_cogroup_function,
    output_ddl,
    output_schema,
    run_keys_on_driver,
    sql_type,
)
from .state.delta import BATCH_TABLES, DeltaStore, staging_clock_column

Progress = Callable[[str], None]
#: How ``staging`` is written (besides its statistics columns): records are staged in ranges of
#: ``_seq`` and row groups of 2 MB, so a pass of a few thousand records reads little more than its
#: own row groups; raw lines and ids, a value per row, get no dictionary.
STAGING_LAYOUT = {"row_group_bytes": 2 << 20, "unique_columns": ("_raw", "_id")}
#: How many staged records a small pass reads to the driver for the passes after it (full rows:
#: about 50 MB of raw lines and columns).
READ_AHEAD_RECORDS = 200_000
#: The tables ``maintenance`` compacts and cleans: every table a pass appends to (the ingest's are
#: replaced by ingest, not appended).
MAINTAINED_TABLES = (*BATCH_TABLES, "replay_log")


def check_archive_unchanged(files: list[Any], known: dict[str, dict[str, Any]]) -> None:
    """Refuse to go on when a file that was already replayed changed or disappeared."""
    present = {f.path: f for f in files}
    problems = []
    for path, seen in sorted(known.items()):
        current = present.get(path)
        if current is None:
            problems.append(f"removed: {path}")
        elif current.size != seen["size"] or current.modified_ms != seen["modified_ms"]:
            problems.append(
                f"changed: {path} (size {seen['size']} -> {current.size}, "
                f"modified {seen['modified_ms']} -> {current.modified_ms})"
            )
    if problems:
        raise ArchiveChangedError(
            "the archive changed under files that were already replayed; replaying would silently "
            "differ from the results already written. Restore the files, or start over with "
            "`replay reset`:\n  " + "\n  ".join(problems)
        )


def stderr_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _StepClock:
    """Seconds spent in each named step since the previous one (``REPLAY_PROFILE`` output)."""

    def __init__(self) -> None:
        self.mark = time.time()
        self.steps: dict[str, float] = {}

    def step(self, name: str) -> None:
        now = time.time()
        self.steps[name] = now - self.mark
        self.mark = now


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
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="delta-write")
        # A pass is written in two stages, each on its own thread and in pass order: its tables
        # (``write_pass``), then its replay_log rows (``log_pass``), so that pass N+1's tables are
        # written while pass N's log rows commit.
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pass-write")
        self.logger = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pass-log")
        self.previous_commit_end = 0.0
        self.latest: LatestMerges | None = None  # set once the run knows its last commit row
        #: Staged records read ahead for small passes, and where this run's pending records end.
        self.read_ahead: ReadAhead | None = None
        self.pending_end = 0
        #: ``(first seq, first batch, timeline and kept record columns in replay order)`` of what
        #: this run ingested.
        self.ingested: tuple[int, int, Any] | None = None

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
            self.writer.shutdown()
            self.logger.shutdown()
            if self.latest is not None:
                self.latest.shutdown()
            self.pool.shutdown()

    def _run(self, finalize: bool, until_ms: int | None, through_batch: int | None) -> RunSummary:
        started = time.time()
        config = self.config
        summary = RunSummary(config.name, config.output_path, results_table=config.results_table)
        log = self.committed_log()
        last = log[-1] if log else None
        for repair in recover(self.store, last):
            self.progress(f"[{self.config.name}] recovery: {repair}")
        through = (last or {}).get("latest_through")
        self.latest = LatestMerges(
            self.store, LatestMerged(-1 if through is None else through, self.store.version("window_latest"))
        )
        # The ingest's source_files rows commit beside the first pass's computing and table
        # writes; that pass's log rows wait for them (an ingest without them is redone).
        ingested = self.ingest(summary)
        pending = self.pending_batches(last)
        if through_batch is not None:
            pending = [batch for batch in pending if batch[0] <= through_batch]
        if until_ms is not None:
            ready = [batch for batch in pending if batch[3] < until_ms]
            # Stop at the first batch that reaches past the interval: replay order is kept.
            cut = next((i for i, batch in enumerate(pending) if batch[3] >= until_ms), len(pending))
            finalize = finalize and cut == len(pending)
            pending = ready[:cut]
        batches = [PendingBatch(*batch[:3]) for batch in pending]
        if finalize and not (last and last["finalize"]):
            previous = batches[-1] if batches else None
            batch_id = previous.batch_id + 1 if previous else ((last["batch_id"] + 1) if last else 0)
            seq = previous.seq_end if previous else (last["seq_end"] if last else 0)
            batches.append(PendingBatch(batch_id, seq, seq, finalize=True))
        passes = plan_passes(batches, max(self.config.pass_max_records, self.batch_size))
        self.pending_end = batches[-1].seq_end if batches else 0
        # Pass N+1 is computed while pass N is written and committed: it only needs N's watermark
        # and window state, known once N is computed. Its tables are then written while N's log
        # rows commit; commits stay in order, one at a time.
        watermark = WatermarkState.from_json(last["watermark_state"] if last else None)
        state = self.read_state(last).toArrow() if passes else None
        previous = last  # the log row of the batch before the next pass (written, maybe not committed)
        writing: Future | None = None  # the write stage of the pass before
        logged: Future | None = ingested  # the log stage of the pass before that one
        for number, group in enumerate(passes, 1):
            computed = self.compute_pass(group, watermark, state)
            watermark, state = computed.states[-1], computed.state_rows()
            if writing is not None:
                previous, logged = writing.result()
            writing = self.writer.submit(
                self.write_pass, computed, previous, logged, (number, len(passes), len(batches)), summary
            )
        if writing is not None:
            _, logged = writing.result()
            last = logged.result()
        elif ingested is not None:
            ingested.result()
        summary.finalized = bool(last and last["finalize"])
        summary.watermark = last["watermark_after"] if last else MIN_TIMESTAMP
        summary.seconds = time.time() - started
        return summary

    def report(self, total: int, passes: tuple[int, int], summary: RunSummary) -> None:
        """One line per batch (its own counts), then one for the pass that ran and committed them."""
        run = summary.passes[-1]
        batches = summary.batches[-(run.last_batch - run.first_batch + 1):]
        done = len(summary.batches)
        for number, batch in enumerate(batches, done - len(batches) + 1):
            panes = ", ".join(f"{k} {v}" for k, v in sorted(batch.panes.items())) or "no panes"
            self.progress(
                f"[{self.config.name}] batch {number}/{total} (id {batch.batch_id}): "
                f"{batch.records} records, {panes}, {batch.late} late"
            )
        rate = run.records / run.seconds if run.seconds else 0.0
        self.progress(
            f"[{self.config.name}] pass {passes[0]}/{passes[1]}: batches {done - len(batches) + 1}-{done}, "
            f"{run.records} records, {run.seconds:.2f}s, {rate:,.0f} events/s"
        )

    # ---- ingest ---------------------------------------------------------------------------------
    def ingest(self, summary: RunSummary) -> Future | None:
        """Read the new archive files: number their records into ``staging``, quarantine the rest.
        Returns the commit of their ``source_files`` rows, which completes the ingest (None when
        there was nothing new).

        The archive is read twice rather than cached (a cache costs more to fill than a second
        read): once for the narrow sort keys and each line's outcome, collected on the driver,
        which numbers the records (with the columns the passes' operator reads, when those passes
        run on the driver: ``kept_record_columns``); once more for the full records, staged with
        their numbers.
        Quarantined lines, known by then, are read a third time on their own.
        """
        import pyarrow as pa
        from pyspark.sql import functions as F

        # sources imports pyspark at module level: kept here so importing the replay stays light.
        from .sources import accepted, check_archive, line_count, list_archive, rejected

        sources = self.config.sources()
        listed = [list_archive(self.spark, source) for source in sources]
        known = self.known_files()
        check_archive_unchanged([f for files in listed for f in files], known)
        new_per_input = [[f for f in files if f.path not in known] for files in listed]
        new = [f for files in new_per_input for f in files]
        if not new:
            return None
        clock = _StepClock()
        ingest_id = max((v["ingest_id"] for v in known.values()), default=-1) + 1
        seq_base, batch_base = self.next_positions()
        join = self.config.join is not None

        def read(only: Any = None) -> list[tuple[Any, Any]]:
            """Each input's checked archive and a function adding its input number (joins)."""
            parts, first_index = [], len(known)
            for number, (source, files) in enumerate(zip(sources, new_per_input, strict=True)):
                config = self.config if number == 0 else replace(self.config, source=source)
                checked = check_archive(self.spark, config, files, first_index, only)
                first_index += len(files)

                def tag(frame: Any, number: int = number) -> Any:
                    return frame.withColumn("_input", F.lit(number).cast("long")) if join else frame

                parts.append((checked, tag))
            return parts

        def union(frames: list[Any]) -> Any:
            return reduce(lambda a, b: a.unionByName(b), frames)

        parts = read()
        clock.step("listed")
        records = union([tag(accepted(checked.frame, self.config)) for checked, tag in parts])
        bound = None if any(c.max_rows is None for c, _ in parts) else sum(c.max_rows for c, _ in parts)
        limit = self.config.sort_on_driver_max_records
        if bound is None or bound > limit:  # gzip, or a big archive: count its lines first
            bound = sum(
                line_count(self.spark, replace(self.config, source=source), files)
                for source, files in zip(sources, new_per_input, strict=True)
            )
        on_driver = bound <= limit
        counted = None if on_driver else dict(records.groupBy("_file_index").count().collect())
        # One read: every accepted record's sort keys (driver numbering), and where the
        # quarantined lines are; the operator's columns too when this run's passes take their
        # records from here.
        kept = self.kept_record_columns(bound) if on_driver else []
        if on_driver:
            wanted = list(dict.fromkeys([*driver_key_columns(self.config), *kept]))
        else:
            wanted = ["_file_index", "_line"]
        probe = union([
            tag(checked.frame).select(F.col("_outcome").isNull().alias("_ok"), *wanted)
            for checked, tag in parts
        ])
        if not on_driver:
            probe = probe.where(~F.col("_ok"))
        outcomes = probe.toArrow()
        for name in kept:  # (encoded before the rows are filtered and reordered: cheaper to copy)
            index = outcomes.schema.get_field_index(name)
            if pa.types.is_string(outcomes.schema.types[index]):
                outcomes = outcomes.set_column(index, name, outcomes.column(index).dictionary_encode())
        ok = outcomes.column("_ok").to_numpy(zero_copy_only=False)
        keys = outcomes.filter(ok).drop_columns(["_ok"]) if on_driver else None
        bad = outcomes.filter(~ok).select(["_file_index", "_line"])
        del outcomes
        files = len(known) + len(new)
        file_indexes = {f.path: len(known) + i for i, f in enumerate(new)}  # as read() numbers them
        per_file_bad = np.bincount(bad.column("_file_index").to_numpy(), minlength=files)
        if keys is not None:
            per_file_records = np.bincount(keys.column("_file_index").to_numpy(), minlength=files)
        else:
            per_file_records = np.zeros(files, dtype=np.int64)
            for file_index, count in (counted or {}).items():
                per_file_records[file_index] = count
        accepted_count = int(per_file_records.sum())
        clock.step("parsed")
        numbered = number_records(self.spark, self.config, records, seq_base, keys)
        if numbered.replay_order is not None:
            # This run's passes take their watermark timelines (and kept records) from here rather
            # than from staging.
            # (The kept strings are encoded already; _partition, a sort key, only once numbered.)
            columns = keys.select(list(dict.fromkeys([*timeline_columns(self.config), *kept])))
            index = columns.schema.get_field_index("_partition")
            columns = columns.set_column(index, "_partition", columns.column(index).dictionary_encode())
            self.ingested = (seq_base, batch_base, columns.take(numbered.replay_order))
        del keys
        clock.step("numbered")
        # The quarantined lines, known by now, are read again on their own, beside the staging
        # write: both are idempotent (replaced by ingest id) until source_files commits the ingest.
        quarantined = bad.num_rows
        if quarantined:
            bad_rows = union([tag(rejected(checked.frame)) for checked, tag in read(bad)])
            if join:
                bad_rows = bad_rows.drop("_input")
        else:
            bad_rows = self.spark.createDataFrame(
                [], "source_file string, line bigint, raw string, reason string, detail string"
            )
        quarantine = self.pool.submit(
            self.store.replace_where, bad_rows.withColumn("ingest_id", F.lit(ingest_id).cast("long")),
            "quarantine", f"ingest_id = {ingest_id}",
        )
        batch = F.floor((F.col("_seq") - seq_base) / self.batch_size) + batch_base
        staged = numbered.frame.withColumn("_batch", batch).withColumn("_ingest", F.lit(ingest_id))
        self.store.replace_where(
            staged, "staging", f"_ingest = {ingest_id}",
            stats_columns=("_seq", "_batch", "_ingest"),  # what reads of staging filter on
            **STAGING_LAYOUT,
        )
        numbered.close()
        # Drops the cluster sort's copy of the records, if it made one.
        self.spark.catalog.clearCache()
        clock.step("staged")
        crash_point("ingest:staged")
        quarantine.result()
        clock.step("quarantined")
        rows = [
            (f.path, f.size, f.modified_ms, file_indexes[f.path], ingest_id,
             int(per_file_records[file_indexes[f.path]]), int(per_file_bad[file_indexes[f.path]]),
             seq_base, seq_base + accepted_count, batch_base,
             batch_base + -(-accepted_count // self.batch_size))
            for f in new
        ]
        schema = (
            "path STRING, size BIGINT, modified_ms BIGINT, file_index INT, ingest_id BIGINT, "
            "records BIGINT, quarantined BIGINT, seq_start BIGINT, seq_end BIGINT, batch_start BIGINT, "
            "batch_end BIGINT"
        )
        crash_point("ingest:quarantined")
        # Written last: an ingest without its source_files rows is redone from scratch.
        logged = self.pool.submit(
            self.store.replace_where, self.spark.createDataFrame(rows, schema), "source_files",
            f"ingest_id = {ingest_id}",
        )
        self.profile("ingest steps", clock.steps)
        summary.files_ingested += len(new)
        summary.wrote("staging", "quarantine", "source_files")
        summary.records_accepted += accepted_count
        summary.records_quarantined += quarantined
        summary.records_read += accepted_count + quarantined
        self.progress(
            f"[{self.config.name}] ingested {len(new)} files: {accepted_count + quarantined} records, "
            f"{accepted_count} accepted, {quarantined} quarantined"
        )
        return logged

    def profile(self, label: str, steps: dict[str, float]) -> None:
        if os.environ.get("REPLAY_PROFILE"):
            self.progress(f"  {label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in steps.items()))

    def maintenance_due(self, batch_ids: list[int]) -> tuple[bool, bool]:
        """Whether a pass of these batches compacts, and whether it cleans (every N batches)."""
        maintenance = self.config.maintenance

        def due(every: int) -> bool:
            return bool(every) and any((batch_id + 1) % every == 0 for batch_id in batch_ids)

        return due(maintenance.optimize_every), due(maintenance.vacuum_every)

    def maintain(self, optimize: bool, vacuum: bool) -> None:
        """Compact (OPTIMIZE) and clean (VACUUM) the tables, in the pass ``maintenance_due`` says,
        so that the versions its commit rows record include the maintenance commits."""
        retention = self.config.maintenance.vacuum_retention_hours

        def maintain_table(table: str) -> None:
            # The pass rewrote operator_state to its one snapshot: nothing to compact.
            if optimize and table != "operator_state":
                self.store.optimize(table)
                crash_point(f"maintenance:{table}:optimized")
            if vacuum:
                self.store.vacuum(table, retention)
                crash_point(f"maintenance:{table}:vacuumed")

        # Tables are maintained independently: overlapping their jobs and commits, as a pass's
        # writes do, takes five OPTIMIZEs from 6.0-6.3 s to 4.2-4.7 s.
        tables = [table for table in MAINTAINED_TABLES if self.store.exists(table)]
        for future in [self.pool.submit(maintain_table, table) for table in tables]:
            future.result()

    def known_files(self) -> dict[str, dict[str, Any]]:
        if not self.store.exists("source_files"):
            return {}
        return {row["path"]: row.asDict() for row in self.store.read("source_files").collect()}

    def next_positions(self) -> tuple[int, int]:
        """The next free sequence number and batch id (after staged and committed batches)."""
        seq, batch = 0, 0
        if self.store.exists("source_files"):
            row = self.store.read("source_files").agg({"seq_end": "max", "batch_end": "max"}).collect()[0]
            seq, batch = row["max(seq_end)"] or 0, row["max(batch_end)"] or 0
        log = self.committed_log()
        if log:
            batch = max(batch, log[-1]["batch_id"] + 1)
            seq = max(seq, log[-1]["seq_end"])
        return seq, batch

    def committed_log(self) -> list[dict[str, Any]]:
        return committed_log(self.store)

    def pending_batches(self, last: dict[str, Any] | None) -> list[tuple[int, int, int, int]]:
        """Staged batches not yet committed: (batch id, first seq, end seq, replay clock at end)."""
        running = (last or {}).get("clock_after") or MIN_TIMESTAMP
        clock = staging_clock_column(self.config)
        if self.ingested is not None and self.ingested[0] == (last["seq_end"] if last else 0):
            # Everything pending was ingested by this run: its batches are known on the driver.
            seq_base, batch_base, table = self.ingested
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
        if not self.store.exists("staging"):
            return []
        from pyspark.sql import functions as F

        done = last["batch_id"] if last else -1
        rows = (
            self.store.read("staging")
            .where(F.col("_batch") > done)
            .groupBy("_batch")
            .agg(F.min("_seq").alias("lo"), F.max("_seq").alias("hi"), F.max(clock).alias("clock"))
            .orderBy("_batch")
            .collect()
        )
        batches = []
        for row in rows:
            running = max(running, row["clock"])  # the clock never goes back
            batches.append((row["_batch"], row["lo"], row["hi"] + 1, running))
        return batches

    # ---- one pass: consecutive micro-batches -----------------------------------------------------
    def compute_pass(
        self, batches: list[PendingBatch], watermark: WatermarkState, state: Any
    ) -> ComputedPass:
        """Run consecutive micro-batches' operator in one Spark pass, from the watermark and the
        window state (Arrow) after the batch before them.

        Each batch gets its own timeline (so per-batch watermarks stay per batch); the operator
        runs every key once over the joined timelines, and each output row carries the batch it
        belongs to. Nothing is written: see ``write_pass``.
        """
        import pyarrow.compute as pc

        started = time.time()
        config = self.config
        keys = list(config.key)
        first, final = batches[0], batches[-1]
        seq_start, seq_end = first.seq_start, final.seq_end
        ids = [batch.batch_id for batch in batches]
        staged = self.staged_range(seq_start, seq_end) if seq_end > seq_start else None
        inputs = config.input_watermarks()
        record_columns = self.record_columns()
        # The timeline's columns: from what this run ingested when it covers the pass, else from
        # staging, with the pass's records when they are read ahead (one read for both).
        arrow = self.ingested_timeline(seq_start, seq_end) if staged is not None else None
        timeline = ["_seq", *timeline_columns(config)]
        on_driver = self.runs_on_driver(seq_end - seq_start)
        staged_rows = None  # the pass's staged rows on the driver (with late events' columns if written)
        ahead_read = 0.0  # seconds reading them (a records_read step)
        if staged is not None and on_driver and seq_end - seq_start < READ_AHEAD_RECORDS:
            late = self.late_source_columns() if config.late_output == "side_output" else []
            wanted = [*record_columns, *late, *(timeline if arrow is None else [])]
            mark = time.time()
            staged_rows = self.driver_records(list(dict.fromkeys(wanted)), seq_start, seq_end)
            ahead_read = time.time() - mark
        if staged is not None and arrow is None:
            arrow = staged_rows.select(timeline) if staged_rows is not None else collect_in_replay_order(
                staged, *timeline
            )
        steps = {"timeline_read": time.time() - started - ahead_read}
        event_time = arrow.column("_event_time").to_numpy() if arrow is not None else np.array([], np.int64)
        ingest = None
        if config.source.ingest_time and arrow is not None:
            ingest = arrow.column("_ingest_time").to_numpy()
        partition = None
        if arrow is not None:
            partition = arrow.column("_partition").to_numpy(zero_copy_only=False).astype(object)
        if inputs is not None and arrow is not None:
            # Two inputs: each input's partitions are its own ("left/0", "right/0").
            names = np.array([f"{name}/" for name in inputs], dtype=object)
            partition = names[arrow.column("_input").to_numpy()] + partition.astype(str).astype(object)
        timelines, states = compute_pass_timelines(
            config.watermark, watermark, seq_start, event_time, ingest, partition,
            [(batch.records, batch.finalize) for batch in batches], inputs,
        )
        if staged is not None:
            records = staged.select(*record_columns)
        else:
            records = self.spark.createDataFrame([], self.staging_schema(record_columns))
        function = make_cogroup_function(
            config, self.spec, Timeline.concat(timelines), [(b.seq_start, b.batch_id) for b in batches]
        )
        mark = time.time()
        steps["timelines"] = mark - started - steps["timeline_read"] - ahead_read
        # What a pass emits (panes, late records' positions, open windows) is small next to what
        # it reads, and it all comes to the driver, which writes each table from there. A pass
        # small enough runs its keys there too: the vectorised operator costs less than moving
        # the records through a shuffle and Python workers.
        if on_driver:
            if staged_rows is not None:
                rows = staged_rows.select(record_columns)
            else:
                rows = self.ingested_records(arrow, seq_start, seq_end)
                if rows is None:
                    rows = records.toArrow()
            steps["records_read"], mark = ahead_read + time.time() - mark, time.time()
            out = run_keys_on_driver(function, keys, rows, state, output_schema(config))
        else:
            out = (
                records.groupBy(*keys)
                .cogroup(self.spark.createDataFrame(state).groupBy(*keys))
                .applyInArrow(function, output_ddl(config))
                .toArrow()
            )
        steps["operator"] = time.time() - mark
        kind = out.column("_kind")
        by_kind = {value: out.filter(pc.equal(kind, value)) for value in pc.unique(kind).to_pylist()}
        panes: dict[int, dict[str, int]] = {batch_id: {} for batch_id in ids}
        late_counts = dict.fromkeys(ids, 0)
        if "pane" in by_kind:
            counted = by_kind["pane"].group_by(["_batch", "timing"]).aggregate([("_batch", "count")])
            for batch_id, timing, n in zip(*(counted.column(c).to_pylist()
                                            for c in ("_batch", "timing", "_batch_count")), strict=True):
                panes[batch_id][timing] = n
        if "late" in by_kind:
            counted = by_kind["late"].group_by("_batch").aggregate([("_batch", "count")])
            for batch_id, n in zip(counted.column("_batch").to_pylist(),
                                   counted.column("_batch_count").to_pylist(), strict=True):
                late_counts[batch_id] = n
        return ComputedPass(batches, staged, timelines, states, out, by_kind, panes, late_counts, steps,
                            started, keys, staged_rows)

    def write_pass(
        self, computed: ComputedPass, last: dict[str, Any] | None, previous_commit: Future | None,
        position: tuple[int, int, int], summary: RunSummary,
    ) -> tuple[dict[str, Any], Future]:
        """Write a computed pass's tables (one write per table), then hand its batches'
        ``replay_log`` rows to ``log_pass``, which commits them in one append, so that all of them
        are committed or none. ``last`` is the log row of the batch before; ``previous_commit`` the
        commit of the pass before (or of the ingest), still running while this pass's tables are
        written: the table versions this pass records, and its maintenance, wait for it.
        ``position`` is (pass number, passes, batches) in this run. Returns the pass's last log
        row and its commit."""
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        config, store = self.config, self.store
        batches, staged, out, by_kind = computed.batches, computed.staged, computed.out, computed.by_kind
        timelines, states, steps = computed.timelines, computed.states, computed.steps
        panes, late_counts, keys = computed.panes, computed.late_counts, computed.keys
        first, final = batches[0], batches[-1]
        ids = [batch.batch_id for batch in batches]
        kinds = set(by_kind)

        def frame(kind: str):
            rows = by_kind.get(kind)
            # One task, one file: a pass's output is small, and a write's tasks cost more than
            # their rows.
            return self.spark.createDataFrame(rows if rows is not None else out.slice(0, 0)).coalesce(1)

        def traced(name: str, table: str, write: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                write()
                summary.wrote(table)
                for batch_id in ids:
                    crash_point(f"batch:{batch_id}:{name}")

            return run

        tag = final.batch_id  # commits are tagged with the pass's last batch
        last_of_run = position[0] == position[1]
        writes: list[Callable[[], None]] = []
        results = self.results_frame(frame("pane"))
        results_table = config.results_table
        if "pane" in kinds:
            writes.append(traced(
                "results", results_table, lambda: store.append_batch(results, results_table, tag)
            ))
        # window_latest is MERGEd every `latest_every` batches and at the end of each run, from
        # the panes of every batch since the previous MERGE, beside this pass's writes and the
        # next pass (see LatestMerges).
        merges = self.latest
        latest_before = merges.started_through
        # (Only windowed aggregates have one newest row per window to keep.)
        merged = results_table == "window_results" and (
            last_of_run or final.batch_id - latest_before >= config.latest_every
        )
        if "late" in kinds and config.late_output == "side_output":
            source = staged
            if computed.staged_rows is not None:  # the late records are on the driver already
                rows = computed.staged_rows
                wanted = pc.is_in(rows.column("_seq"), value_set=by_kind["late"].column("_seq"))
                late_rows = rows.filter(wanted).select(self.late_source_columns())
                source = self.spark.createDataFrame(late_rows).coalesce(1)  # one file, as frame()
            late = self.late_frame(frame("late"), source)
            writes.append(traced("late", "late_events", lambda: store.append_batch(late, "late_events", tag)))
        new_state = frame("state").select(
            *keys, *[name for name, _ in STATE_COLUMNS], F.col("_batch").alias("batch_id")
        )
        # A pass appends its state snapshot (one Spark job, against five for an overwrite, which
        # lists the files it replaces); in the passes that compact the tables, at the end of each
        # run and when no window is open (an empty append makes no commit) it overwrites, which
        # drops the older snapshots (that is its compaction). Readers take the snapshot of the last
        # committed batch.
        compacts, cleans = self.maintenance_due(ids)
        replaces = compacts or last_of_run or "state" not in kinds
        write_state = store.overwrite_batch if replaces else store.append_batch
        writes.append(traced(
            "state", "operator_state", lambda: write_state(new_state, "operator_state", tag)
        ))
        if "side" in kinds:
            sides = frame("side").select(
                *keys, F.col("detail").alias("tag"), F.col("contents").alias("payload"), "watermark",
                "replay_clock", "emit_seq", F.col("emit_step").cast("int").alias("emit_step"),
                F.col("_batch").alias("batch_id"),
            )
            writes.append(traced(
                "side", "side_outputs", lambda: store.append_batch(sides, "side_outputs", tag)
            ))
        leaks = by_kind["leak"].column("detail").to_pylist() if "leak" in kinds else []
        for leak in leaks:
            self.progress(f"[{config.name}] WARNING state leak: {leak}")
        # Different tables commit independently: overlap their Spark jobs and Delta commits.
        mark = time.time()
        submitted = [self.pool.submit(write) for write in writes]
        maintains = compacts or cleans
        merge = None
        if merged:
            since = results
            if latest_before < first.batch_id - 1 and store.exists("window_results"):
                since = store.read("window_results").where(
                    (F.col("batch_id") > latest_before) & (F.col("batch_id") < first.batch_id)
                ).unionByName(results)
            latest = self.latest_frame(since)
            merge = traced("latest", "window_latest", lambda: store.merge_latest_panes(latest, keys, tag))
            if not maintains:
                merges.start(merge, final.batch_id)
        for future in submitted:
            future.result()
        if previous_commit is not None:
            # A recovery puts the tables back to the versions a committed row records: the pass
            # before must be committed before this pass's versions are, each its own.
            previous_commit.result()
        merges.check()
        if maintains:
            # Maintenance compacts window_latest too: not beside a MERGE. This pass's own MERGE
            # starts after it.
            merges.settle()
            self.maintain(compacts, cleans)
            if merge is not None:
                merges.start(merge, final.batch_id)
        if last_of_run:
            merges.record()
        steps["writes"] = time.time() - mark
        versions = store.versions(BATCH_TABLES)
        # The listing may or may not show a running MERGE's commit: the recorded version instead.
        recorded = merges.recorded
        versions.pop("window_latest", None)
        if recorded.version is not None:
            versions["window_latest"] = recorded.version
        entries = []
        for batch, timeline, after in zip(batches, timelines, states, strict=True):
            entries.append({
                "batch_id": batch.batch_id,
                "seq_start": batch.seq_start,
                "seq_end": batch.seq_end,
                "records": batch.records,
                "finalize": batch.finalize,
                "watermark_before": timeline.start_watermark,
                "watermark_after": after.watermark,
                "clock_after": after.clock,
                "watermark_state": after.to_json(),
                "panes": sum(panes[batch.batch_id].values()),
                "late": late_counts[batch.batch_id],
                "leaks": len(leaks) if batch is final else 0,
                # The last batch whose panes window_latest holds, as far as this row records it.
                "latest_through": min(batch.batch_id, recorded.through),
                # The same versions for every batch of the pass: the pass is the unit of restart.
                "table_versions": versions,
            })
        log_schema = (
            "batch_id BIGINT, seq_start BIGINT, seq_end BIGINT, records BIGINT, "
            "finalize BOOLEAN, watermark_before BIGINT, watermark_after BIGINT, clock_after BIGINT, "
            "watermark_state STRING, panes BIGINT, late BIGINT, leaks BIGINT, latest_through BIGINT, "
            "table_versions MAP<STRING, BIGINT>"
        )
        log_rows = (
            self.spark.createDataFrame(entries, log_schema)
            .withColumn("committed_at", F.current_timestamp())
            .coalesce(1)  # one small file per commit
        )
        commit = self.logger.submit(self.log_pass, computed, log_rows, entries[-1], position, summary)
        return entries[-1], commit

    def log_pass(
        self, computed: ComputedPass, log_rows: Any, last_row: dict[str, Any], position: tuple[int, int, int],
        summary: RunSummary,
    ) -> dict[str, Any]:
        """Commit a written pass: its ``replay_log`` rows in one append. Returns the last row."""
        batches, steps, panes = computed.batches, computed.steps, computed.panes
        first, final = batches[0], batches[-1]
        ids = [batch.batch_id for batch in batches]
        for batch_id in ids:
            crash_point(f"batch:{batch_id}:before-commit")
        mark = time.time()
        self.store.append_batch(log_rows, "replay_log", final.batch_id)
        summary.wrote("replay_log")
        for batch_id in ids:
            crash_point(f"batch:{batch_id}:committed")
        steps["commit"] = time.time() - mark
        self.profile("steps", steps)
        # What this pass added to the run: from its computing or the previous commit, whichever
        # ended later (passes overlap), to its own commit.
        now = time.time()
        seconds = now - max(computed.started, self.previous_commit_end)
        self.previous_commit_end = now
        summary.passes.append(PassSummary(first.batch_id, final.batch_id, final.seq_end - first.seq_start,
                                          seconds))
        for batch, after in zip(batches, computed.states, strict=True):
            summary.batches.append(BatchSummary(
                batch.batch_id, batch.records, panes[batch.batch_id], computed.late_counts[batch.batch_id],
                after.watermark, seconds / len(batches),
            ))
        number, passes, total = position
        self.report(total, (number, passes), summary)
        return last_row

    def late_source_columns(self) -> list[str]:
        """The staged columns a late event is made of (see ``late_frame``)."""
        return [
            "_seq", *self.config.key, "_event_time", "_ingest_time", "_partition", "_offset", "_id", "_file",
            "_line", "_raw", "_batch",
        ]

    def late_frame(self, late, staged):
        """The late events: the operator's late rows joined to their staged records (``staged``
        holds at least ``late_source_columns``)."""
        from pyspark.sql import functions as F

        return (
            F.broadcast(late.select(F.col("_seq"), F.col("watermark")))
            .join(staged.select(self.late_source_columns()), "_seq")
            .select(
                "_seq", *self.config.key, F.col("_event_time").alias("event_time"),
                F.col("_ingest_time").alias("ingest_time"), F.col("_partition").alias("partition"),
                F.col("_offset").alias("offset"), F.col("_id").alias("record_id"),
                F.col("_file").alias("source_file"), F.col("_line").alias("line"),
                F.col("_raw").alias("raw"), "watermark",
                F.lit(self.late_reason()).alias("reason"), F.col("_batch").alias("batch_id"),
            )
        )

    def ingested_timeline(self, seq_start: int, seq_end: int) -> Any:
        """The timeline columns of records ``seq_start`` to ``seq_end`` in replay order, from what
        this run ingested (None when it does not cover them)."""
        if self.ingested is not None:
            base, _, table = self.ingested
            if base <= seq_start and seq_end <= base + table.num_rows:
                return table.slice(seq_start - base, seq_end - seq_start)
        return None

    def record_columns(self) -> list[str]:
        """The staged columns a pass's operator reads."""
        config = self.config
        value_columns = ["_input"] if config.input_watermarks() is not None else config.value_columns()
        element = ["_raw"] if self.spec.needs_element else []
        return [*config.key, "_seq", "_event_time", *value_columns, *element]

    def kept_record_columns(self, records: int) -> list[str]:
        """The record columns an ingest of up to ``records`` keeps on the driver, beside the
        timeline's, for this run's passes: none unless those passes run their keys on the driver
        and are too big to read ahead, when each would otherwise read its records from
        ``staging`` (1-2 s a pass of 1M records) while the ingest's first read collects them for
        1-2 s at 10M (measured: BENCHMARKS.md)."""
        config = self.config
        pass_records = min(records, max(config.pass_max_records, self.batch_size))
        if pass_records < READ_AHEAD_RECORDS or not self.runs_on_driver(pass_records):
            return []
        if config.input_watermarks() is not None or self.spec.needs_element:
            return []  # two inputs' records; every raw line
        return [c for c in self.record_columns() if c not in ("_seq", "_event_time")]

    def ingested_records(self, timeline: Any, seq_start: int, seq_end: int) -> Any:
        """A pass's records (``record_columns``, in ``_seq`` order) from what this run ingested:
        ``timeline`` is ``ingested_timeline``'s slice for the pass; None when the ingest did not keep
        them (see ``kept_record_columns``)."""
        import pyarrow as pa

        columns = self.record_columns()
        if timeline is None or not set(columns) - {"_seq"} <= set(timeline.column_names):
            return None
        arrays = []
        for name in columns:
            if name == "_seq":
                arrays.append(pa.array(np.arange(seq_start, seq_end, dtype=np.int64)))
                continue
            column = timeline.column(name)
            if pa.types.is_dictionary(column.type):  # as staged
                column = column.cast(column.type.value_type)
            arrays.append(column)
        return pa.table(arrays, names=columns)

    def staged_range(self, seq_start: int, seq_end: int) -> Any:
        """``staging``'s rows of records ``seq_start`` to ``seq_end`` (exclusive)."""
        from pyspark.sql import functions as F

        return self.store.read("staging").where((F.col("_seq") >= seq_start) & (F.col("_seq") < seq_end))

    def late_reason(self) -> str:
        join = self.config.join
        if join is not None and join.type == "interval":
            return INTERVAL_LATE_REASON
        return LATE_REASON

    def runs_on_driver(self, records: int) -> bool:
        """Whether a pass of ``records`` runs its keys on the driver (see the setting). The
        per-record paths (pipelines the vectorised kernel does not cover, the session kernel
        included) cost ten times as much per record: there the executors' cores pay off for
        passes a tenth of the size (measured for sessions: BENCHMARKS.md)."""
        limit = self.config.driver_pass_max_records
        return records <= (limit if window_kernel.supports(self.spec) else limit // 10)

    def driver_records(self, columns: list[str], seq_start: int, seq_end: int) -> Any:
        """A small pass's staged records (Arrow, in ``_seq`` order) for its keys to run on the
        driver.

        A small pass reads ahead: one staging read of up to ``READ_AHEAD_RECORDS`` serves the
        passes after it too (each read is a Delta snapshot and a Spark job, 0.3-0.5 s of a
        one-batch pass whatever its size).
        """
        ahead = self.read_ahead
        covered = ahead is not None and ahead.start <= seq_start and seq_end <= ahead.end
        if not covered or ahead.columns != columns:
            end = max(seq_end, min(seq_start + READ_AHEAD_RECORDS, self.pending_end))
            rows = collect_in_replay_order(self.staged_range(seq_start, end), *columns)
            ahead = self.read_ahead = ReadAhead(seq_start, end, columns, rows)
        lo, hi = np.searchsorted(ahead.rows.column("_seq").to_numpy(), [seq_start, seq_end])
        return ahead.rows.slice(lo, hi - lo)

    def read_state(self, last: dict[str, Any] | None):
        version = (last or {}).get("table_versions", {}).get("operator_state") if last else None
        if version is None:
            columns = [*[(k, "string") for k in self.config.key], *STATE_COLUMNS]
            ddl = ", ".join(f"`{n}` {sql_type(t)}" for n, t in columns)
            return self.spark.createDataFrame([], ddl)
        return self.store.read_state(last).drop("batch_id")

    def staging_schema(self, columns: list[str]):
        schema = self.store.read("staging").schema if self.store.exists("staging") else None
        if schema is not None:
            from pyspark.sql.types import StructType

            return StructType([schema[c] for c in columns])
        types = {"_seq": "long", "_event_time": "long", "_raw": "string", "_input": "long"}
        for key in self.config.key:
            types[key] = "string"
        for column in self.config.value_columns():
            types[column] = self.config.column_type(column)
        return ", ".join(f"`{c}` {sql_type(types[c])}" for c in columns)

    def results_frame(self, pane_rows):
        from pyspark.sql import functions as F

        def bound(column: str):
            return F.when(F.col(column) == MIN_TIMESTAMP, None).otherwise(
                F.when(F.col("window_start_ms") == MIN_TIMESTAMP, None).otherwise(
                    F.timestamp_millis(F.col(column))
                )
            )

        return pane_rows.select(
            *self.config.key,
            bound("window_start_ms").alias("window_start"),
            bound("window_end_ms").alias("window_end"),
            F.col("pane_index").cast("int").alias("pane_index"),
            "timing",
            "watermark",
            "replay_clock",
            "fire_time",
            *[F.col(f"agg_{name}").alias(name) for name, _ in self.config.outputs()],
            F.col("_batch").alias("batch_id"),
            "emit_seq",
            F.col("emit_step").cast("int").alias("emit_step"),
        )

    def latest_frame(self, results):
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        keys = [*self.config.key, "window_start", "window_end"]
        newest = Window.partitionBy(*keys).orderBy(F.col("pane_index").desc())
        return results.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1").drop("_rank")
