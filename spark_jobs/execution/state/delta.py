"""The Delta-backed store of one pipeline: every table it writes, named by table verbs.

The only module that writes Delta tables (a pass's small writes through ``delta_rs_writes``).
Exactly-once rests on the ``replay_log``: a batch is committed when its log row is written, and
that row records every output table's version.
A batch interrupted before its log row is rolled back with Delta ``RESTORE`` to the versions of
the last committed batch (see ``spark_jobs.execution.recovery``), then simply run again. (Delta's
``txnAppId``/``txnVersion`` writes were measured at 0.8-2.4 s per commit here, against 0.3 s
for a plain append, because each one reconstructs the table's transaction state.)
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ...config import PipelineConfig, local_path
from ..object_store import delete_tree, delta_location, require_reachable_without_jvm
from ..spark_session import is_connect
from .delta_rs_writes import epoch_ms
from .delta_rs_writes import merge_latest as merge_on_client
from .delta_rs_writes import write_rows as write_on_client

#: Tables a micro-batch writes: rolled back together to the last committed batch's versions.
BATCH_TABLES = (
    "window_results", "window_latest", "late_events", "operator_state", "process_results", "side_outputs",
    "join_results",
)
TABLES = (
    "window_results",
    "window_latest",
    "late_events",
    "quarantine",
    "operator_state",
    "replay_log",
    "source_files",
    "staging",
    "process_results",
    "side_outputs",
    "join_results",
)
#: Every table a pipeline may have (a reset deletes them): the replay's own, and those written
#: beside it (data-quality results, reprocessing history).
ALL_TABLES = (*TABLES, "dq_results", "reprocess_history")
#: Properties of every table the store creates (write options that Delta applies at creation and
#: ignores afterwards). A pass commits once to each of its tables: with Delta's default checkpoint
#: every 10 commits, every 10th pass wrote four checkpoints (one-batch passes: mean 1.50 -> 1.30 s
#: with 100); replaying up to 99 small JSON commits reads a table no slower than a checkpoint.
NEW_TABLE_PROPERTIES = {"delta.checkpointInterval": "100"}
#: ``window_latest``'s besides: its change data feed. (Deletion vectors are turned on by the first
#: MERGE Spark makes, ``_use_deletion_vectors``: a table delta-rs creates with them gets the
#: ``variantType`` feature too, which readers older than Delta 4 refuse.)
LATEST_TABLE_PROPERTIES = {**NEW_TABLE_PROPERTIES, "delta.enableChangeDataFeed": "true"}
#: The property that makes Spark's MERGE mark replaced rows in deletion vectors instead of
#: rewriting the files that hold them.
DELETION_VECTORS = "delta.enableDeletionVectors"
#: The table property naming the columns whose statistics a new table keeps.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def staging_clock_column(config: PipelineConfig) -> str:
    """The ``staging`` column holding each record's replay clock: its ingest time when the source
    has one, else its event time."""
    return "_ingest_time" if config.source.ingest_time else "_event_time"


@dataclass
class DeltaStore:
    spark: Any
    config: PipelineConfig
    #: Writes still running beside the run, by table (``write_behind``): reads of it wait for them.
    behind: dict[str, Future] = field(default_factory=dict, repr=False)

    def path(self, table: str) -> str:
        return self.config.table_path(table)

    def write_behind(self, table: str, write: Future) -> None:
        """Note ``write`` (a future) as writing ``table`` while the run goes on: this store's
        reads of the table (``settled``) wait for it, and fail as it failed."""
        self.behind[table] = write

    def settled(self, table: str) -> None:
        """Wait for a write of ``table`` still running (``write_behind``), if any."""
        write = self.behind.get(table)
        if write is not None:
            write.result()

    def exists(self, table: str) -> bool:
        # (Not ``settled``: the write behind asks it too. A table being created is not yet.)
        if is_connect(self.spark):
            return table in self.versions([table])
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, self.path(table))

    def _sql_name(self, table: str) -> str:
        """The table as Delta's SQL names a path (```` ` ```` doubled inside the quotes)."""
        return "delta.`{}`".format(self.path(table).replace("`", "``"))

    def read(self, table: str, version: int | None = None):
        self.settled(table)
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(self.path(table))

    def version(self, table: str) -> int | None:
        """The table's latest version (None when it does not exist)."""
        return self.versions([table]).get(table)

    def versions(self, tables: list[str] | tuple[str, ...]) -> dict[str, int]:
        """The latest version of each of these tables that exists, from listings of their
        ``_delta_log`` in one JVM call (no Spark job).

        Over Spark Connect (no JVM on this side) the client lists the logs itself with delta-rs
        when they are on the local disk, which it shares with a server on this machine, or on S3
        (the S3A settings' environment), else asks the server (``DESCRIBE HISTORY``, one query
        per table)."""
        if is_connect(self.spark):
            return self._versions_without_jvm(tables)
        jvm = self.spark._jvm
        paths = self.spark.sparkContext._gateway.new_array(jvm.java.lang.String, len(tables))
        for index, table in enumerate(tables):
            paths[index] = self.path(table)
        found = jvm.replay.delta.LogVersions.latest(self.spark._jsc.hadoopConfiguration(), paths)
        return {table: version for table, version in zip(tables, found, strict=True) if version >= 0}

    def _versions_without_jvm(self, tables: list[str] | tuple[str, ...]) -> dict[str, int]:
        reader = self.direct_reader()
        if reader is not None:
            return reader.versions(tables)
        found = {}
        for table in tables:
            try:
                rows = self.spark.sql(f"DESCRIBE HISTORY {self._sql_name(table)} LIMIT 1").collect()
            except Exception as error:  # not a Delta table (yet): no version
                if any(code in str(error) for code in
                       ("DELTA_MISSING_DELTA_TABLE", "PATH_NOT_FOUND", "DELTA_TABLE_ONLY_OPERATION")):
                    continue
                raise
            found[table] = int(rows[0]["version"])
        return found

    def append_rows(self, rows: Any, table: str, batch_id: int, merge_schema: bool = False) -> None:
        """Append one pass's rows (Arrow, held on this side): by delta-rs where this process
        reaches the table, the local disk or S3 (``delta_rs_writes.write_rows``: a few hundredths
        of a second, against a Spark job and its commit; a new table is created so too), else by
        Spark. ``merge_schema``: columns the table lacks are added."""
        self._write_rows(rows, table, batch_id, "append", merge_schema=merge_schema)

    def overwrite_rows(self, rows: Any, table: str, batch_id: int) -> None:
        """Replace a table's rows with ``rows`` (Arrow), as ``append_rows`` writes them."""
        self._write_rows(rows, table, batch_id, "overwrite")

    def _write_rows(self, rows: Any, table: str, batch_id: int, mode: str,
                    properties: dict[str, str] = NEW_TABLE_PROPERTIES, merge_schema: bool = False) -> None:
        location = delta_location(self.path(table))
        if location is not None:
            new_table = None if self.exists(table) else properties
            write_on_client(location, rows, mode, f"batch={batch_id}", new_table, merge_schema=merge_schema)
            return
        from ..arrow_frames import arrow_frame

        # One task, one file: a pass's output is small, and a write's tasks cost more than its rows.
        frame = arrow_frame(self.spark, rows).coalesce(1)
        writer = self._writer(frame, self._replacing(table) if mode == "overwrite" else "append")
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        writer.options(**properties).option("userMetadata", f"batch={batch_id}").save(self.path(table))

    def writes_directly(self, table: str) -> bool:
        """Whether rows held on this side are written to ``table`` by delta-rs (``replace_rows``,
        ``append_rows``): this process reaches it (the local disk, S3)."""
        return delta_location(self.path(table)) is not None

    def replace_rows(self, rows: Any, table: str, predicate: str, user_metadata: str | None = None,
                     merge_schema: bool = False, stats_columns: tuple[str, ...] = (),
                     row_group_bytes: int = 0, unique_columns: tuple[str, ...] = (),
                     compression: str = "") -> None:
        """``replace_where`` for rows held on this side (Arrow): by delta-rs where this process
        reaches the table (the ingest's ``source_files`` commit: 3.5 s of a first 1M run as a
        Spark job creating the table), else by Spark. The layout arguments are
        ``replace_where``'s."""
        location = delta_location(self.path(table))
        if location is not None:
            new_table = None
            if not self.exists(table):
                new_table = dict(NEW_TABLE_PROPERTIES)
                if stats_columns:
                    new_table[STATS_COLUMNS] = ",".join(stats_columns)
            write_on_client(location, rows, "overwrite", user_metadata, new_table, predicate, merge_schema,
                            row_group_bytes, unique_columns, compression)
            return
        from ..arrow_frames import arrow_frame

        self.replace_where(arrow_frame(self.spark, rows), table, predicate, stats_columns=stats_columns,
                           row_group_bytes=row_group_bytes, unique_columns=unique_columns,
                           compression=compression, user_metadata=user_metadata,
                           merge_schema=merge_schema)

    @staticmethod
    def _writer(df, mode: str):
        return df.write.format("delta").mode(mode).options(**NEW_TABLE_PROPERTIES)

    def read_state(self, last: Any):
        """``operator_state`` as the committed ``replay_log`` row ``last`` left it: the table at the
        version that row records, and of the snapshots it holds (one per pass since its last
        overwrite, each tagged with its pass's last batch) the one of that row's pass."""
        from pyspark.sql import functions as F

        version = last["table_versions"].get("operator_state")
        return self.read("operator_state", version).where(F.col("batch_id") == last["batch_id"])

    def read_state_rows(self, last: Any, schema: Any) -> Any:
        """``read_state``'s rows on this side, as Arrow of ``schema`` (its columns, batch_id left
        out): by the ``direct_reader`` when there is one (over Spark Connect, 0.8 s of server jobs
        less in a one-pass interval), else collected from Spark."""
        reader = self.direct_reader()
        if reader is not None:
            return reader.state_snapshot(last).select(schema.names).cast(schema)
        return self.read_state(last).select(*schema.names).toArrow().cast(schema)

    def direct_reader(self) -> Any:
        """A delta-rs reader of this pipeline's tables wherever this process reaches them (the
        local disk, S3), in-process or not; None elsewhere. For reads of many rows, which it
        answers from the Parquet files several times faster than a Spark job collected to the
        driver (a 1M-record pass of ``staging``: 0.15-0.4 s against 1.2-1.3 s)."""
        from .delta_rs import DeltaRsReader

        return DeltaRsReader(self.config) if DeltaRsReader.reaches(self.config) else None

    def batch_rows(self, table: str, first: int, last: int) -> Any:
        """The rows of ``table`` from batches ``first`` to ``last`` (``batch_id``, inclusive), as
        Arrow: by the ``direct_reader`` when there is one, else collected from Spark (the
        panes a run's last MERGE into ``window_latest`` takes from earlier passes: 2.6-5.9 s
        as a Spark job, the first of a run whose other reads are delta-rs's)."""
        self.settled(table)
        reader = self.direct_reader()
        if reader is not None:
            return reader.arrow(
                f"SELECT * FROM {table} WHERE batch_id >= {int(first)} AND batch_id <= {int(last)}",
                {table: None},
            )
        from pyspark.sql import functions as F

        return self.read(table).where(F.col("batch_id").between(first, last)).toArrow()

    def staged_rows(self, columns: list[str], seq_start: int, seq_end: int) -> Any:
        """``columns`` of the staged records ``seq_start`` to ``seq_end`` (exclusive), as Arrow in
        ``_seq`` order: by the ``direct_reader`` when there is one, else collected from Spark."""
        from ..ordering import collect_in_replay_order, in_replay_order

        self.settled("staging")
        reader = self.direct_reader()
        if reader is not None:
            return in_replay_order(reader.staged_rows(columns, seq_start, seq_end))
        return collect_in_replay_order(self.staged_range(seq_start, seq_end), *columns)

    def staged_records(self, columns: list[str], seqs: Any) -> Any:
        """``columns`` (``_seq`` among them) of the staged records numbered ``seqs`` (ascending
        int64, not empty: a pass's late records), as Arrow: by the ``direct_reader`` when there
        is one (``DeltaRsReader.staged_records``), else by a Spark join."""
        import pyarrow as pa

        self.settled("staging")
        reader = self.direct_reader()
        if reader is not None:
            return reader.staged_records(columns, seqs)
        from pyspark.sql import functions as F

        from ..arrow_frames import arrow_frame

        wanted = F.broadcast(arrow_frame(self.spark, pa.table({"_seq": pa.array(seqs, pa.int64())})))
        staged = self.staged_range(int(seqs[0]), int(seqs[-1]) + 1).select(*columns)
        return wanted.join(staged, "_seq").select(*columns).toArrow()

    def staged_range(self, seq_start: int, seq_end: int) -> Any:
        """``staging``'s rows of records ``seq_start`` to ``seq_end`` (exclusive)."""
        from pyspark.sql import functions as F

        return self.read("staging").where((F.col("_seq") >= seq_start) & (F.col("_seq") < seq_end))

    def staged_batches(self, after_batch: int, clock_column: str) -> list[dict[str, Any]]:
        """Per batch in ``staging`` after ``after_batch``, in order: ``_batch``, its first and
        last ``_seq`` (``lo``, ``hi``) and its latest replay clock (``clock``):
        by the ``direct_reader`` when there is one (0.14-0.19 s against 0.9 s for a warm Spark
        job over a 10M-record ``staging``, 5.8 s for the first job in a JVM), else by a Spark job."""
        self.settled("staging")
        reader = self.direct_reader()
        if reader is not None:
            return reader.staged_batches(after_batch, clock_column)
        if not self.exists("staging"):
            return []
        from pyspark.sql import functions as F

        rows = (
            self.read("staging")
            .where(F.col("_batch") > after_batch)
            .groupBy("_batch")
            .agg(F.min("_seq").alias("lo"), F.max("_seq").alias("hi"), F.max(clock_column).alias("clock"))
            .orderBy("_batch")
            .collect()
        )
        return [row.asDict() for row in rows]

    def _replacing(self, table: str) -> str:
        """The write mode that replaces a table's rows: an overwrite lists the files it replaces
        (several jobs); a new table has none, and an append creates it the same."""
        return "overwrite" if self.exists(table) else "append"

    def optimize(self, table: str) -> None:
        """Compact small files (Delta OPTIMIZE)."""
        self.spark.sql(f"OPTIMIZE {self._sql_name(table)}").collect()

    def vacuum(self, table: str, retention_hours: int) -> None:
        """Delete files no version within the retention needs. Rewinds (reprocess, recovery) can
        only reach versions inside this retention."""
        self.spark.sql(f"VACUUM {self._sql_name(table)} RETAIN {int(retention_hours)} HOURS").collect()

    def restore(self, table: str, version: int) -> None:
        """Delta RESTORE: the table as it was at ``version`` (a new commit; history is kept)."""
        self.spark.sql(f"RESTORE TABLE {self._sql_name(table)} TO VERSION AS OF {int(version)}").collect()

    def drop(self, table: str) -> None:
        """Delete a table's directory (one created by a batch that never committed)."""
        if is_connect(self.spark):
            # No Hadoop FileSystem on a Connect client: it shares the local disk with its server,
            # and reaches S3 itself (object_store).
            local = local_path(self.path(table))
            if local is not None:
                shutil.rmtree(local, ignore_errors=True)
            else:
                require_reachable_without_jvm(self.path(table))
                delete_tree(self.path(table))
            return
        jvm = self.spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.path(table))
        path.getFileSystem(self.spark._jsc.hadoopConfiguration()).delete(path, True)

    def replace_where(
        self, df, table: str, predicate: str, stats_columns: tuple[str, ...] = (),
        row_group_bytes: int = 0, unique_columns: tuple[str, ...] = (), compression: str = "",
        user_metadata: str | None = None, merge_schema: bool = False,
    ) -> None:
        """Overwrite just the rows matching ``predicate``: idempotent by replacement.

        ``row_group_bytes`` (0: Parquet's default) cuts each file into row groups of about that
        size, so that reads filtering on a column stored in ranges skip most of a file by its
        row groups' statistics, without the cost of writing many small files.
        ``stats_columns`` limits the file statistics of a new table to the columns reads filter
        on (the default, every one of the first 32, costs a fifth of a wide table's write).
        ``unique_columns`` (a value per row, such as raw lines) are written without the
        dictionary Parquet would build and then give up on (10M staged records: 19.5 s against
        23.5 s, the same size). ``compression``: the Parquet codec (lower case, as Spark names
        it: ``zstd``; empty: the session's). ``user_metadata`` goes into the commit's info
        (``DESCRIBE HISTORY``).
        ``merge_schema``: columns ``df`` has and the table not yet are added to it (Delta's schema
        evolution; a table written by an earlier release gains a new column, null in old rows).
        """
        mode = self._replacing(table)
        writer = self._writer(df, mode)
        if user_metadata is not None:
            writer = writer.option("userMetadata", user_metadata)
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        if row_group_bytes:
            writer = writer.option("parquet.block.size", row_group_bytes)
        for column in unique_columns:
            writer = writer.option(f"parquet.enable.dictionary#{column}", "false")
        if compression:
            writer = writer.option("compression", compression)
        if mode == "overwrite":
            writer = writer.option("replaceWhere", predicate)
        elif stats_columns:
            writer = writer.option(STATS_COLUMNS, ",".join(stats_columns))
        writer.save(self.path(table))

    def merge_latest_panes(self, rows: Any, keys: list[str], batch_id: int,
                           window_ends: tuple[int, int] | None = None) -> None:
        """Upsert each (key, window)'s newest pane (``rows``: Arrow, one per key and window) into
        ``window_latest``: by delta-rs on this side when it reaches the table and the files it
        would rewrite are small (``delta_rs_writes``), else by Delta's MERGE (its SQL form, which
        a Spark Connect session runs as well as an in-process one).

        ``window_ends``: the least and greatest ``window_end`` of the panes (epoch ms; by default
        from ``rows``). A target row that matches a pane has its window end, so the match also
        bounds the target's ``window_end`` to that range: Delta then skips the files outside it
        by their statistics (the table holds every window ever replayed, and without the range
        each MERGE read all of it: 1.14 -> 0.83 s of scan for 1,000 panes into 1M rows here,
        growing with the history). Panes of a global window (no window end) get no range."""
        from ..arrow_frames import arrow_frame

        table = "window_latest"
        if not self.exists(table):
            # A new table: every pane is an insert, which a plain write makes without MERGE's join.
            self._write_rows(rows, table, batch_id, "append", LATEST_TABLE_PROPERTIES)
            return
        if not rows.num_rows:
            return  # nothing to upsert
        if window_ends is None:
            window_ends = _window_end_range(rows)
        location = delta_location(self.path(table))
        match = latest_match(keys, window_ends, _datafusion_millis)
        if location is not None and merge_on_client(location, rows, match, NEWER_PANE, window_ends):
            return
        self._use_deletion_vectors(table)
        view = f"replay_panes_{uuid.uuid4().hex}"
        arrow_frame(self.spark, rows).createOrReplaceTempView(view)
        try:
            self.spark.sql(
                f"MERGE INTO {self._sql_name(table)} t USING {view} s "
                f"ON {latest_match(keys, window_ends, _spark_millis)} "
                f"WHEN MATCHED AND ({NEWER_PANE}) THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            ).collect()
        finally:
            self.spark.catalog.dropTempView(view)

    def _use_deletion_vectors(self, table: str) -> None:
        """Turn deletion vectors on for Spark's MERGE into ``table``, unless they are (one commit,
        once: a table is created without them, see ``LATEST_TABLE_PROPERTIES``)."""
        location = delta_location(self.path(table))
        if location is not None:
            from deltalake import DeltaTable

            uri, options = location
            enabled = DeltaTable(uri, storage_options=options).metadata().configuration.get(DELETION_VECTORS)
        else:
            detail = self.spark.sql(f"DESCRIBE DETAIL {self._sql_name(table)}").select("properties").first()
            enabled = dict(detail["properties"] or {}).get(DELETION_VECTORS)
        if enabled != "true":
            self.spark.sql(
                f"ALTER TABLE {self._sql_name(table)} SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')"
            ).collect()


#: When a pane replaces the row of its key and window in ``window_latest`` (``t``: the row, ``s``:
#: the pane): a later pane of the window, or the pane of a later batch (a reprocessed range).
NEWER_PANE = "s.pane_index > t.pane_index OR s.batch_id > t.batch_id"


def latest_match(keys: list[str], window_ends: tuple[int, int] | None,
                 millis: Callable[[int], str]) -> str:
    """The MERGE condition matching a pane (``s``) to its ``window_latest`` row (``t``), in the SQL
    both Spark and delta-rs (DataFusion) read: the same key, window start and end (NULL for the
    global window), and, when ``window_ends`` is known, the row's window end within the panes'
    range (``millis`` writes an epoch-ms timestamp literal), so that files of older windows are
    skipped by their statistics."""
    bounded = [] if window_ends is None else [
        f"t.window_end BETWEEN {millis(int(window_ends[0]))} AND {millis(int(window_ends[1]))}"
    ]
    return " AND ".join(
        [f"t.`{k}` = s.`{k}`" for k in keys]
        + ["(t.window_start IS NOT DISTINCT FROM s.window_start)",
           "(t.window_end IS NOT DISTINCT FROM s.window_end)", *bounded]
    )


def _spark_millis(ms: int) -> str:
    return f"timestamp_millis({ms})"


def _datafusion_millis(ms: int) -> str:
    return f"""arrow_cast({ms * 1000}, 'Timestamp(Microsecond, Some("UTC"))')"""


def _window_end_range(rows: Any) -> tuple[int, int] | None:
    """The least and greatest ``window_end`` of ``rows`` (Arrow panes; epoch ms); None when there
    is none or when a pane has none (a global window's)."""
    import pyarrow.compute as pc

    ends = rows.column("window_end")
    if len(ends) == 0 or ends.null_count:
        return None
    bounds = pc.min_max(epoch_ms(ends))
    return bounds["min"].as_py(), bounds["max"].as_py()
