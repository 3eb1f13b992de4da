"""Writing and committing a computed pass (``pass_compute``): each of its tables once (results,
late events, state, side outputs; maintenance in the passes that call for it) beside
``window_latest``'s MERGE, then its batches' ``replay_log`` rows in one append, which commits the
pass: all of its batches or none.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from ..config import PipelineConfig
from ..core.windows.base import is_global_window
from .faults import crash_point
from .latest_merges import LatestMerges
from .maintenance import maintain, maintenance_due
from .pass_compute import late_source_columns
from .passes import BatchSummary, ComputedPass, PassSummary, Progress, RunSummary, profile
from .semantics_guard import semantics_text
from .spark_batch import STATE_COLUMNS
from .state.delta import BATCH_TABLES, DeltaStore

#: ``replay_log``'s columns, one row per batch; the table is created from the first pass's rows.
REPLAY_LOG_SCHEMA = pa.schema([
    ("batch_id", pa.int64()), ("seq_start", pa.int64()), ("seq_end", pa.int64()), ("records", pa.int64()),
    ("finalize", pa.bool_()), ("watermark_before", pa.int64()), ("watermark_after", pa.int64()),
    ("clock_after", pa.int64()), ("watermark_state", pa.string()), ("panes", pa.int64()),
    ("late", pa.int64()), ("leaks", pa.int64()), ("latest_through", pa.int64()),
    ("table_versions", pa.map_(pa.string(), pa.int64())),
    ("committed_at", pa.timestamp("us", "UTC")),
    # What the batch was replayed under (``semantics_guard``; tables of earlier releases gain it).
    ("semantics", pa.string()),
])


class PassWriter:
    """Writes and commits one run's computed passes, in pass order.

    A pass is written in two stages, each on its own thread and in pass order: its tables
    (``write_pass``), then its replay_log rows (``log_pass``), so that pass N+1's tables are
    written while pass N's log rows commit.
    """

    def __init__(self, spark: Any, config: PipelineConfig, store: DeltaStore, pool: Executor,
                 progress: Progress):
        self.spark = spark
        self.config = config
        self.store = store
        self.pool = pool  # the run's Delta writes, overlapped across tables
        self.progress = progress
        self.write_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pass-write")
        self.log_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pass-log")
        self.previous_commit_end = 0.0
        self.semantics = semantics_text(config)
        self.latest: LatestMerges | None = None  # set once the run knows its last commit row

    def submit(
        self, computed: ComputedPass, last: dict[str, Any] | None, previous_commit: Future | None,
        position: tuple[int, int, int], summary: RunSummary,
    ) -> Future:
        """``write_pass`` on the write thread, after the passes submitted before."""
        return self.write_thread.submit(self.write_pass, computed, last, previous_commit, position, summary)

    def shutdown(self) -> None:
        self.write_thread.shutdown()
        self.log_thread.shutdown()
        if self.latest is not None:
            self.latest.shutdown()

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

        config, store = self.config, self.store
        batches, out, by_kind = computed.batches, computed.out, computed.by_kind
        timelines, states, steps = computed.timelines, computed.states, computed.steps
        panes, late_counts, keys = computed.panes, computed.late_counts, computed.keys
        first, final = batches[0], batches[-1]
        ids = [batch.batch_id for batch in batches]
        kinds = set(by_kind)

        def rows_of(kind: str) -> Any:
            rows = by_kind.get(kind)
            return rows if rows is not None else out.slice(0, 0)

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
        result_rows = self.results_rows(rows_of("pane"))
        results_table = config.results_table
        if "pane" in kinds:
            writes.append(traced(
                "results", results_table, lambda: store.append_rows(result_rows, results_table, tag)
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
            late = by_kind["late"]

            def write_late() -> None:
                if computed.staged_rows is not None:  # the late records are on the driver already
                    rows = computed.staged_rows
                    wanted = pc.is_in(rows.column("_seq"), value_set=late.column("_seq"))
                    records = rows.filter(wanted).select(late_source_columns(config))
                else:  # a big pass's: fetched from staging by their numbers
                    seqs = np.unique(late.column("_seq").to_numpy())
                    records = store.staged_records(late_source_columns(config), seqs)
                store.append_rows(self.late_rows(late, records), "late_events", tag)

            writes.append(traced("late", "late_events", write_late))
        new_state = rows_of("state").select(
            [*keys, *[name for name, _ in STATE_COLUMNS], "_batch"]
        ).rename_columns([*keys, *[name for name, _ in STATE_COLUMNS], "batch_id"])
        # A pass appends its state snapshot (one Spark job, against five for an overwrite, which
        # lists the files it replaces); in the passes that compact the tables, at the end of each
        # run and when no window is open (an empty append makes no commit) it overwrites, which
        # drops the older snapshots (that is its compaction). Readers take the snapshot of the last
        # committed batch.
        compacts, cleans = maintenance_due(config, ids)
        replaces = compacts or last_of_run or "state" not in kinds
        write_state = store.overwrite_rows if replaces else store.append_rows
        writes.append(traced(
            "state", "operator_state", lambda: write_state(new_state, "operator_state", tag)
        ))
        if "side" in kinds:
            side_rows = rows_of("side")
            sides = pa.table({
                **{key: side_rows.column(key) for key in keys},
                "tag": side_rows.column("detail"), "payload": side_rows.column("contents"),
                **{name: side_rows.column(name) for name in ("watermark", "replay_clock", "emit_seq")},
                "emit_step": side_rows.column("emit_step").cast(pa.int32()),
                "batch_id": side_rows.column("_batch"),
            })
            writes.append(traced(
                "side", "side_outputs", lambda: store.append_rows(sides, "side_outputs", tag)
            ))
        leaks = by_kind["leak"].column("detail").to_pylist() if "leak" in kinds else []
        for leak in leaks:
            self.progress(f"[{config.name}] WARNING state leak: {leak}")
        # Different tables commit independently: overlap their Spark jobs and Delta commits.
        mark = time.time()
        maintains = compacts or cleans
        merge = None
        if merged:
            since = result_rows
            if latest_before < first.batch_id - 1 and store.exists("window_results"):
                earlier = store.batch_rows("window_results", latest_before + 1, first.batch_id - 1)
                since = pa.concat_tables([earlier.select(since.schema.names).cast(since.schema), since])
            latest = newest_panes(since, self.config.key)
            merge = traced("latest", "window_latest", lambda: store.merge_latest_panes(latest, keys, tag))
            if not maintains:
                # First: the MERGE can be the longest of the writes (Spark's: several jobs in turn).
                merges.start(merge, final.batch_id)
        submitted = [self.pool.submit(write) for write in writes]
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
            maintain(store, config, self.pool, compacts, cleans)
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
                "semantics": self.semantics,
            })
        commit = self.log_thread.submit(self.log_pass, computed, entries, position, summary)
        return entries[-1], commit

    def log_pass(
        self, computed: ComputedPass, entries: list[dict[str, Any]], position: tuple[int, int, int],
        summary: RunSummary,
    ) -> dict[str, Any]:
        """Commit a written pass: its ``replay_log`` rows (``entries``) in one append, by delta-rs
        where this process reaches the table (``DeltaStore.append_rows``: one atomic log entry, as
        Spark's append, in hundredths of a second against 0.3-0.5 s for a Spark job on a Connect
        server). Returns the last row."""
        batches, steps, panes = computed.batches, computed.steps, computed.panes
        first, final = batches[0], batches[-1]
        ids = [batch.batch_id for batch in batches]
        for batch_id in ids:
            crash_point(f"batch:{batch_id}:before-commit")
        mark = time.time()
        committed_at = dt.datetime.now(dt.UTC)
        log_rows = pa.Table.from_pylist([{**entry, "committed_at": committed_at} for entry in entries],
                                        schema=REPLAY_LOG_SCHEMA)
        self.store.append_rows(log_rows, "replay_log", final.batch_id, merge_schema=True)
        summary.wrote("replay_log")
        for batch_id in ids:
            crash_point(f"batch:{batch_id}:committed")
        steps["commit"] = time.time() - mark
        profile(self.progress, "steps", steps)
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
        return entries[-1]

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

    def results_rows(self, pane_rows: Any) -> Any:
        """``window_results``' rows (Arrow) of a pass's panes as the operator emits them: window
        bounds as timestamps (NULL for the global window), aggregates under their names."""
        import pyarrow.compute as pc

        is_global = is_global_window(pane_rows.column("window_start_ms").to_numpy())

        def bound(column: str) -> Any:
            ms = pc.if_else(pa.array(is_global, pa.bool_()), pa.scalar(None, pa.int64()),
                            pane_rows.column(column).cast(pa.int64()))
            return ms.cast(pa.timestamp("ms", "UTC")).cast(pa.timestamp("us", "UTC"))

        columns = {
            **{key: pane_rows.column(key) for key in self.config.key},
            "window_start": bound("window_start_ms"),
            "window_end": bound("window_end_ms"),
            "pane_index": pane_rows.column("pane_index").cast(pa.int32()),
            **{name: pane_rows.column(name) for name in ("timing", "watermark", "replay_clock", "fire_time")},
            **{name: pane_rows.column(f"agg_{name}") for name, _ in self.config.outputs()},
            "batch_id": pane_rows.column("_batch"),
            "emit_seq": pane_rows.column("emit_seq"),
            "emit_step": pane_rows.column("emit_step").cast(pa.int32()),
        }
        return pa.table(columns)

    def late_rows(self, late: Any, records: Any) -> Any:
        """The late events (Arrow): the operator's late rows (``_seq``, ``watermark``) with their
        staged records' columns (``records``: ``late_source_columns``, any order)."""
        import pyarrow.compute as pc

        at = pc.index_in(late.column("_seq"), value_set=records.column("_seq"))
        if at.null_count:  # every late record was staged: a pass without it must not commit
            raise RuntimeError(f"{at.null_count} late records are missing from staging")
        staged = records.take(at)
        return pa.table({
            "_seq": late.column("_seq"),
            **{key: staged.column(key) for key in self.config.key},
            **{name: staged.column(f"_{name}")
               for name in ("event_time", "ingest_time", "partition", "offset")},
            "record_id": staged.column("_id"), "source_file": staged.column("_file"),
            "line": staged.column("_line"), "raw": staged.column("_raw"),
            "watermark": late.column("watermark"),
            "reason": pa.array([self.config.late_reason] * late.num_rows, pa.string()),
            "batch_id": staged.column("_batch"),
        })



def newest_panes(results: Any, key: list[str]) -> Any:
    """Of ``window_results``' rows (Arrow), the newest pane (highest ``pane_index``) of each key and
    window: what ``window_latest`` holds of them."""
    ordered = results.sort_by([("pane_index", "descending")])
    ordered = ordered.append_column("_row", pa.array(np.arange(ordered.num_rows, dtype=np.int64)))
    # Without threads the groups keep the rows' order: "first" is the highest pane.
    newest = ordered.group_by([*key, "window_start", "window_end"], use_threads=False).aggregate(
        [("_row", "first")]
    )
    return ordered.take(newest.column("_row_first")).drop_columns(["_row"])
