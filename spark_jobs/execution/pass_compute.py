"""Computing a pass: where its records and watermark timelines come from, and the operator run
over them for every key. Nothing is written here (see ``pass_write``).

A pass's inputs come from the cheapest place that has them: what this run's ingest kept on the
driver (its timeline columns, and the operator's record columns for big passes that run on the
driver), a read-ahead of ``staging`` shared by the small passes after it, or ``staging`` itself.
Its keys then run once each, on the driver for a small pass, on the executors otherwise.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..config import PipelineConfig
from ..core.engine import session_kernel, window_kernel
from ..core.engine.operator import OperatorSpec
from ..core.watermarks import Timeline, WatermarkState, compute_pass_timelines
from .arrow_frames import arrow_frame
from .key_processes import MIN_SHARED_RECORDS, KeyHelpers
from .ordering import timeline_columns
from .passes import ComputedPass, PendingBatch, ReadAhead
from .spark_batch import (
    make_cogroup_function,
    output_ddl,
    output_schema,
    run_keys_on_driver,
    sql_type,
    state_schema,
)
from .state.delta import DeltaStore

#: How many staged records a small pass reads to the driver for the passes after it (full rows:
#: about 50 MB of raw lines and columns).
READ_AHEAD_RECORDS = 200_000


def late_source_columns(config: PipelineConfig) -> list[str]:
    """The staged columns a late event is made of (see ``pass_write.PassWriter.late_rows``)."""
    return [
        "_seq", *config.key, "_event_time", "_ingest_time", "_partition", "_offset", "_id", "_file",
        "_line", "_raw", "_batch",
    ]


class PassComputer:
    """Computes one run's passes, in order (``compute_pass``), from the records this run
    ingested (``ingested``, set by the run), a read-ahead of ``staging`` or ``staging`` itself."""

    def __init__(self, spark: Any, config: PipelineConfig, store: DeltaStore, spec: OperatorSpec,
                 batch_size: int):
        self.spark = spark
        self.config = config
        self.store = store
        self.spec = spec
        self.batch_size = batch_size
        #: Staged records read ahead for small passes, and where this run's pending records end.
        self.read_ahead: ReadAhead | None = None
        self.pending_end = 0
        #: ``(first seq, first batch, timeline and kept record columns in replay order)`` of what
        #: this run ingested.
        self.ingested: tuple[int, int, Any] | None = None
        #: Processes a big pass on the driver shares its keys with (started when first wanted).
        self.helpers = KeyHelpers(config.driver_processes)

    def close(self) -> None:
        self.helpers.close()

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
        # (Whether the pass has records: its Spark frame over ``staging`` is built only where one
        # is read, as loading the table's snapshot costs a job, a second of a fresh JVM.)
        has_records = seq_end > seq_start
        inputs = config.input_watermarks()
        record_columns = self.record_columns()
        # The timeline's columns: from what this run ingested when it covers the pass, else from
        # staging, with the pass's records when they are read ahead (one read for both).
        arrow = self.ingested_timeline(seq_start, seq_end) if has_records else None
        timeline = ["_seq", *timeline_columns(config)]
        on_driver = self.runs_on_driver(seq_end - seq_start)
        shared = on_driver and self.shares_keys(seq_end - seq_start)
        if shared:
            self.helpers.start()  # (they import while the timelines are computed)
        staged_rows = None  # the pass's staged rows on the driver (with late events' columns if written)
        ahead_read = 0.0  # seconds reading them (a records_read step)
        small = seq_end - seq_start < READ_AHEAD_RECORDS
        big_rows = None  # a big pass's records and timeline from staging, in one read
        if has_records and on_driver and small:
            late = late_source_columns(self.config) if config.late_output == "side_output" else []
            wanted = [*record_columns, *late, *(timeline if arrow is None else [])]
            mark = time.time()
            staged_rows = self.driver_records(list(dict.fromkeys(wanted)), seq_start, seq_end)
            ahead_read = time.time() - mark
        elif has_records and on_driver and arrow is None:
            # (Its late records' raw lines are fetched by their numbers: not a million of them.)
            mark = time.time()
            big_rows = self.store.staged_rows(list(dict.fromkeys([*timeline, *record_columns])),
                                              seq_start, seq_end)
            ahead_read = time.time() - mark
        read = staged_rows if staged_rows is not None else big_rows  # this pass's one staging read
        if has_records and arrow is None:
            arrow = (read.select(timeline) if read is not None
                     else self.store.staged_rows(timeline, seq_start, seq_end))
        steps = {"timeline_read": time.time() - started - ahead_read}
        event_time = arrow.column("_event_time").to_numpy() if arrow is not None else np.array([], np.int64)
        ingest = None
        if config.source.ingest_time and arrow is not None:
            ingest = arrow.column("_ingest_time").to_numpy()
        partition = None
        if arrow is not None:
            partition = arrow.column("_partition")
        if inputs is not None and arrow is not None:
            # Two inputs: each input's partitions are its own ("left/0", "right/0").
            names = np.array([f"{name}/" for name in inputs], dtype=object)
            partition = (names[arrow.column("_input").to_numpy()]
                         + partition.to_numpy(zero_copy_only=False).astype(str).astype(object))
        timelines, states = compute_pass_timelines(
            config.watermark, watermark, seq_start, event_time, ingest, partition,
            [(batch.records, batch.finalize) for batch in batches], inputs,
        )
        def records() -> Any:  # the pass's records as a Spark frame
            if has_records:
                return self.store.staged_range(seq_start, seq_end).select(*record_columns)
            return self.spark.createDataFrame([], self.staging_schema(record_columns))
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
            if read is not None:
                rows = read.select(record_columns)
            else:
                rows = self.ingested_records(arrow, seq_start, seq_end)
                if rows is None:
                    rows = records().toArrow()
            steps["records_read"], mark = ahead_read + time.time() - mark, time.time()
            out = run_keys_on_driver(function, keys, rows, state, output_schema(config),
                                     self.helpers if shared else None)
        else:
            out = (
                records().groupBy(*keys)
                .cogroup(arrow_frame(self.spark, state).groupBy(*keys))
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
        return ComputedPass(batches, timelines, states, out, by_kind, panes, late_counts, steps,
                            started, keys, staged_rows)

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
        ``staging`` (0.2-0.4 s a pass of 1M records with delta-rs, 1.2-1.3 s where Spark reads
        them) while the ingest's first read collects them for 1-2 s at 10M (measured:
        BENCHMARKS.md). Starts ``helpers`` when those passes will share their keys
        (``shares_keys``)."""
        config = self.config
        pass_records = min(records, max(config.pass_max_records, self.batch_size))
        if pass_records < READ_AHEAD_RECORDS or not self.runs_on_driver(pass_records):
            return []
        if config.input_watermarks() is not None or self.spec.needs_element:
            return []  # two inputs' records; every raw line
        if self.shares_keys(pass_records):
            # Those passes will share their keys with helper processes: started now, they are
            # ready (imported) by the first pass.
            self.helpers.start()
        return [c for c in self.record_columns() if c not in ("_seq", "_event_time")]

    def shares_keys(self, records: int) -> bool:
        """Whether a pass of ``records`` on the driver shares its keys with helper processes
        (``batch.driver_processes``): big passes whose operator costs more per record than
        sending the record to a helper, i.e. all but the fixed windows' kernel where a record is
        in one or two windows (~0.3 us a record in tumbling windows: a 10M tumbling replay's
        operator took 6.0 s alone, 9.0 s shared; sessions 37.9 -> 25.9 s; sliding windows, six a
        record, ~1.5 us: 10M passes 18.6 -> 15.7 s)."""
        return (records >= MIN_SHARED_RECORDS and self.helpers.enabled
                and not 1 <= window_kernel.windows_per_record(self.spec) <= 2)

    def runs_on_driver(self, records: int) -> bool:
        """Whether a pass of ``records`` runs its keys on the driver (see the setting). The
        per-record paths (pipelines neither kernel covers) cost ten times as much per record:
        there the executors' cores pay off for passes a tenth of the size. The session kernel,
        which takes runs of records at once, runs 1M-record passes faster on the driver
        (measured: BENCHMARKS.md)."""
        limit = self.config.driver_pass_max_records
        vectorised = window_kernel.supports(self.spec) or session_kernel.supports(self.spec)
        return records <= (limit if vectorised else limit // 10)

    def ingested_timeline(self, seq_start: int, seq_end: int) -> Any:
        """The timeline columns of records ``seq_start`` to ``seq_end`` in replay order, from what
        this run ingested (None when it does not cover them)."""
        if self.ingested is not None:
            base, _, table = self.ingested
            if base <= seq_start and seq_end <= base + table.num_rows:
                return table.slice(seq_start - base, seq_end - seq_start)
        return None

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
            rows = self.store.staged_rows(columns, seq_start, end)
            ahead = self.read_ahead = ReadAhead(seq_start, end, columns, rows)
        lo, hi = np.searchsorted(ahead.rows.column("_seq").to_numpy(), [seq_start, seq_end])
        return ahead.rows.slice(lo, hi - lo)

    def read_state(self, last: dict[str, Any] | None) -> Any:
        """The window state (Arrow) the run's first pass starts from: the snapshot the last
        committed batch (``last``, its log row) recorded; none before any."""
        schema = state_schema(self.config)
        version = (last or {}).get("table_versions", {}).get("operator_state") if last else None
        if version is None:
            return schema.empty_table()
        return self.store.read_state_rows(last, schema)

    def staging_schema(self, columns: list[str]) -> Any:
        """``columns`` as staged (the schema of a pass with no records): from ``staging`` when it
        exists, else from the config."""
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
