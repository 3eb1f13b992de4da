"""A pass's writes made by this process with delta-rs, when it reaches the tables (the local disk
or S3).

A pass's outputs are small and already on the driver (Arrow). Written by Spark, each is a Spark
job and a Delta commit, and ``window_latest``'s MERGE about ten jobs in turn: over a Spark Connect
server a one-pass Airflow interval spent 2-3 s of its 3.3-4.3 s there (the MERGE 1-2 s, the state
overwrite at the run's end 2-3 s, beside the appends). delta-rs (``write_deltalake``,
``DeltaTable.merge``: DataFusion) commits the same rows by the same Delta protocol in a few
hundredths of a second each; the interval took 1.2 s. The pass's ``replay_log`` rows, its commit
point, are one such append: one log entry, put only if absent, as Spark's commit is. A run's
first pass creates its tables the same way, with the properties and protocol Spark would give
them (``new_table_schema``); Spark writes wherever this process cannot reach (HDFS, ``gs://``,
...).

On S3 delta-rs commits with a conditional PUT (``If-None-Match: *`` on the log entry), so a
competing commit fails instead of overwriting; Spark's S3 log store is single-driver. Neither
writes a pipeline's table while the other does: both run under the pipeline's lock, one step at a
time.

The MERGE gives the same rows, one commit and the same change data feed (``update_preimage`` /
``update_postimage`` / ``insert``). But delta-rs writes no deletion vectors: it rewrites each file
holding a replaced row, and the rows it copies stay in the file it writes (which the next MERGE
may touch again). So it takes a MERGE only while the files the panes' window ends may touch hold
at most ``CLIENT_MERGE_MAX_BYTES``; past that, Spark's MERGE marks the replaced rows in deletion
vectors and writes the new ones apart, which keeps the rewrites bounded.
"""

from __future__ import annotations

from typing import Any

from ..object_store import DeltaLocation

#: The most bytes of ``window_latest`` files a delta-rs MERGE may rewrite (the files whose
#: ``window_end`` statistics overlap the panes' range).
CLIENT_MERGE_MAX_BYTES = 16 << 20


def epoch_ms(timestamps: Any) -> Any:
    """Arrow timestamps (any unit or zone) as epoch milliseconds (int64), sub-milliseconds cut."""
    import pyarrow as pa
    import pyarrow.compute as pc

    micros = pc.cast(pc.cast(timestamps, pa.timestamp("us", "UTC")), pa.int64())
    return pc.floor(pc.divide(pc.cast(micros, pa.float64()), 1000)).cast(pa.int64())


def candidate_bytes(table: Any, window_ends: tuple[int, int] | None) -> int:
    """Bytes of the table's files whose ``window_end`` range overlaps ``window_ends`` (epoch ms;
    None: every file, as a global window's panes match by key alone)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    files = pa.table(table.get_add_actions(flatten=True))
    if files.num_rows == 0:
        return 0
    sizes = files.column("size_bytes")
    if window_ends is None or "min.window_end" not in files.column_names:
        return int(pc.sum(sizes).as_py() or 0)
    lo, hi = window_ends
    low = epoch_ms(files.column("min.window_end"))
    # Delta truncates a maximum to milliseconds: a file's true maximum may be up to 1 ms later.
    high = epoch_ms(files.column("max.window_end"))
    overlaps = pc.and_kleene(pc.less_equal(low, hi), pc.greater_equal(pc.add(high, 1), lo))
    # A file without statistics may hold any window.
    touched = pc.fill_null(overlaps, True)
    return int(pc.sum(pc.filter(sizes, touched)).as_py() or 0)


def merge_latest(location: DeltaLocation, rows: Any, condition: str, newer: str,
                 window_ends: tuple[int, int] | None) -> bool:
    """MERGE ``rows`` (Arrow panes, one per key and window) into the Delta table at ``location``
    (``object_store.delta_location``'s URI and storage options): ``condition`` matches a pane to
    its row (target ``t``, source ``s``), ``newer`` says when the pane replaces it, and an
    unmatched pane is inserted. False, with nothing written, when the files it may rewrite are over
    ``CLIENT_MERGE_MAX_BYTES`` (the caller then runs Spark's)."""
    from deltalake import DeltaTable

    uri, options = location
    table = DeltaTable(uri, storage_options=options)
    if candidate_bytes(table, window_ends) > CLIENT_MERGE_MAX_BYTES:
        return False
    (
        table.merge(as_table_schema(rows, table), predicate=condition, source_alias="s", target_alias="t")
        .when_matched_update_all(predicate=newer)
        .when_not_matched_insert_all()
        .execute()
    )
    return True


def write_rows(location: DeltaLocation, rows: Any, mode: str, user_metadata: str | None,
               new_table: dict[str, str] | None = None, predicate: str | None = None,
               merge_schema: bool = False, row_group_bytes: int = 0,
               unique_columns: tuple[str, ...] = (), compression: str = "") -> None:
    """Append (``mode="append"``) or overwrite the Delta table at ``location``
    (``object_store.delta_location``'s) with ``rows`` (Arrow, cast to the table's schema),
    ``user_metadata`` in the commit's info as Spark's ``userMetadata`` option puts it.

    ``new_table``: the table does not exist yet and is created with these properties and
    ``new_table_schema(rows)`` (what Spark would have created: in a first run each of a pass's
    tables was a Spark job, 2.3-2.8 s of a 1M one-batch replay's first pass, against milliseconds).
    ``predicate``: an overwrite replaces only the rows matching it (Spark's ``replaceWhere``).
    ``merge_schema``: columns of ``rows`` the table lacks are added (null in its older rows).
    ``row_group_bytes``, ``unique_columns`` and ``compression``: the Parquet layout
    ``DeltaStore.replace_where`` asks of Spark (row groups of about that many bytes; no dictionary
    for those columns; the codec)."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    uri, options = location
    metadata = {} if user_metadata is None else {"userMetadata": user_metadata}
    commit = CommitProperties(custom_metadata=metadata)
    layout = _writer_properties(rows, row_group_bytes, unique_columns, compression)
    if new_table is not None:
        # Created by its first write, as Spark's append creates a table (one commit).
        write_deltalake(uri, new_table_schema(rows), mode="append", configuration=new_table,
                        storage_options=options, commit_properties=commit, writer_properties=layout)
        return
    table = DeltaTable(uri, storage_options=options)
    if merge_schema:
        write_deltalake(table, new_table_schema(rows), mode=mode, predicate=predicate,
                        schema_mode="merge", commit_properties=commit, writer_properties=layout)
        return
    write_deltalake(table, as_table_schema(rows, table), mode=mode, predicate=predicate,
                    commit_properties=commit, writer_properties=layout)


#: Parquet-mr's default levels (``parquet.compression.codec.zstd.level``): the same bytes whoever writes.
SPARK_CODEC_LEVELS = {"zstd": 3}


def _writer_properties(rows: Any, row_group_bytes: int, unique_columns: tuple[str, ...],
                       compression: str = "") -> Any:
    """delta-rs's Parquet settings for ``write_rows``' layout; None: its defaults. Its row groups
    are cut by rows, so the bytes are turned into rows by the rows' average size in memory (as
    Parquet's writer measures a row group before it compresses it). A codec Spark names
    (``zstd``) is written at the level Spark's Parquet writer uses by default."""
    from deltalake import ColumnProperties, WriterProperties

    if not row_group_bytes and not unique_columns and not compression:
        return None
    rows_per_group = None
    if row_group_bytes and rows.num_rows:
        rows_per_group = max(1, row_group_bytes * rows.num_rows // max(1, rows.nbytes))
    return WriterProperties(
        max_row_group_size=rows_per_group,
        column_properties={name: ColumnProperties(dictionary_enabled=False) for name in unique_columns},
        compression=compression.upper() or None,
        compression_level=SPARK_CODEC_LEVELS.get(compression),
    )


def new_table_schema(rows: Any) -> Any:
    """``rows`` (Arrow) with the types Spark gives a table it creates from them: every column
    nullable, strings plain (not dictionary-encoded), timestamps in microseconds."""
    import pyarrow as pa

    def spark_type(kind: Any) -> Any:
        if pa.types.is_dictionary(kind):
            return spark_type(kind.value_type)
        if pa.types.is_large_string(kind):
            return pa.string()
        if pa.types.is_timestamp(kind):
            return pa.timestamp("us", kind.tz)
        return kind

    schema = pa.schema([pa.field(field.name, spark_type(field.type), nullable=True) for field in rows.schema])
    return rows.cast(schema)


def as_table_schema(rows: Any, table: Any) -> Any:
    """``rows`` (Arrow) as the Delta ``table``'s columns and types (its order; dictionary strings
    decoded, timestamps in the table's unit and zone)."""
    import pyarrow as pa

    target = pa.schema(table.schema().to_arrow())
    return rows.select(target.names).cast(target)
