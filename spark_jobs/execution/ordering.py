"""Replay order: the sort that numbers an ingest's accepted records (``_seq``).

One archive replays in file and line order, or by ingest time when it has one (then partition,
offset, file and line break ties). Two archives (joins) are interleaved by time as a
timestamp-synchronising reader would (Kafka Streams' choice): by ingest time when they have one;
otherwise always taking the input whose next record is earlier, which keeps each input's own
order and equals a sort by each record's running maximum event time within its input. File index
and line make every sort key unique, so the order is total and repeatable.

``number_records`` attaches the numbers without moving the full rows: the narrow sort keys
(about 40 bytes a record, collected by the caller) are sorted on the driver with Arrow, and each
record looks its number up by its file and line (an array of positions per file, shipped to the
executors as a file, looked up in the JVM). The full rows, raw lines included, are never
shuffled or cached. An ingest of more than ``sort_on_driver_max_records`` records (a driver's
memory is finite) has every checked line's narrow keys sorted by Spark instead, and only each
line's outcome, file and line collected in that order (7 bytes a line, 9 past 2**15 archive
files): the same positions file, the same numbers.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .spark_session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..config import PipelineConfig

RUNNING_MAX = "_running_max"
# The JVM side of the numbering (spark_jobs/execution/jvm, built by `make setup`).
_SEQUENCE_LOOKUP = "replay_sequence"
_SEQUENCE_LOOKUP_CLASS = "replay.ingest.ReplaySequence"
#: Records whose positions are filled into the positions table at once (bounds the temporaries).
_FILL_CHUNK = 4_000_000
#: The cluster sort's partitions before AQE coalesces them (see ``lines_in_replay_order``).
_SORT_PARTITIONS = 512
_SORT_PARTITIONS_SETTING = "spark.sql.adaptive.coalescePartitions.initialPartitionNum"


def order_columns(config: PipelineConfig) -> list[str]:
    """The columns that sort accepted records into replay order (``RUNNING_MAX`` is derived)."""
    ingest_time = config.source.ingest_time
    if config.join is None:
        if ingest_time:
            return ["_ingest_time", "_partition", "_offset", "_file_index", "_line"]
        return ["_file_index", "_line"]
    if ingest_time:
        return ["_ingest_time", "_input", "_partition", "_offset", "_file_index", "_line"]
    return [RUNNING_MAX, "_input", "_file_index", "_line"]


def key_columns(order: Sequence[str]) -> list[str]:
    """The record columns ``order`` is computed from."""
    if RUNNING_MAX in order:
        return ["_event_time", "_input", "_file_index", "_line"]
    return list(order)


def replay_positions(keys: pa.Table, order: Sequence[str]) -> np.ndarray:
    """Each row's 0-based position in replay order; ``keys`` holds ``key_columns(order)``.

    Ascending with nulls first, as Spark's ``orderBy`` (an unset ``_offset`` is null in every
    row). Strings compare as UTF-8 bytes in both.
    """
    if RUNNING_MAX in order:
        keys = keys.append_column(RUNNING_MAX, pa.array(_running_max(keys), pa.int64()))
    sort_keys = [(name, "ascending", "at_start") for name in order]
    indices = pc.sort_indices(keys, sort_keys=sort_keys).to_numpy()
    positions = np.empty(len(indices), dtype=np.int64)
    positions[indices] = np.arange(len(indices), dtype=np.int64)
    return positions


def _running_max(keys: pa.Table) -> np.ndarray:
    """Per input, the largest event time so far in file and line order."""
    inputs = keys.column("_input").to_numpy()
    event_time = keys.column("_event_time").to_numpy()
    within_input = np.lexsort((keys.column("_line").to_numpy(), keys.column("_file_index").to_numpy(),
                               inputs))
    result = np.empty(len(event_time), dtype=np.int64)
    for start, end in _runs(inputs[within_input]):
        rows = within_input[start:end]
        result[rows] = np.maximum.accumulate(event_time[rows])
    return result


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of equal neighbours in ``values``."""
    if not len(values):
        return []
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]]).tolist()
    return list(zip(starts, [*starts[1:], len(values)], strict=True))


def collect_in_replay_order(frame: DataFrame, *columns: str) -> pa.Table:
    """``columns`` of ``frame`` (``_seq`` among them) as an Arrow table in ``_seq`` order.

    Sorted on the driver: an argsort of the collected column takes milliseconds, where Spark's
    ``orderBy`` adds a sampling job and a shuffle.
    """
    return in_replay_order(frame.select(*columns).toArrow())


def in_replay_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in ``_seq`` order."""
    return table.take(np.argsort(table.column("_seq").to_numpy(), kind="stable"))


@dataclass
class NumberedRecords:
    """The records with ``_seq``: sorted by it within each read task, unless every archive file
    holds its records in replay order already."""

    frame: DataFrame
    #: The positions file the executors look the numbers up in, removed by ``close`` once the
    #: frame is written.
    positions_file: str | None = None
    #: Numbered on the driver: the rows of the collected keys in replay order.
    replay_order: np.ndarray | None = None
    #: How many records each archive file holds, by file index (files without any left out).
    file_records: dict[int, int] = field(default_factory=dict)

    def close(self) -> None:
        if self.positions_file is not None:
            shutil.rmtree(os.path.dirname(self.positions_file), ignore_errors=True)


def sort_key_columns(config: PipelineConfig) -> list[str]:
    """What ``number_records`` needs collected on the driver: the order's key columns, and the
    file index and line every record is found by."""
    return list(dict.fromkeys([*key_columns(order_columns(config)), "_file_index", "_line"]))


def timeline_columns(config: PipelineConfig) -> list[str]:
    """What the watermarks are computed from, per record in replay order."""
    columns = ["_event_time", "_ingest_time", "_partition"]
    return [*columns, "_input"] if config.join is not None else columns


def driver_key_columns(config: PipelineConfig) -> list[str]:
    """What an ingest numbered on the driver collects there per record: the sort keys, then the
    watermark timeline's columns (its passes take their timelines from them)."""
    return list(dict.fromkeys([*sort_key_columns(config), *timeline_columns(config)]))


def number_records(
    spark: SparkSession, config: PipelineConfig, records: DataFrame, seq_base: int,
    keys: pa.Table | None, ordered: pa.Table | None = None,
) -> NumberedRecords:
    """``records`` numbered ``seq_base``, ``seq_base + 1``, ... in replay order.

    ``keys`` holds every record's ``sort_key_columns`` collected on the driver, which sorts them;
    ``keys=None`` (an ingest too big for the driver's memory) has Spark sort them and collects
    each record's file index and line in that order. Either way the records then look their
    numbers up by file index and line, in the JVM (``ReplaySequence``), from a table of 32-bit
    positions per file that the driver writes and Spark ships to the executors
    (``SparkContext.addFile``; a Spark Connect client uploads it as a file artifact of its
    session); the full rows never move. ``ordered`` (with ``keys=None``): the records' lines in
    replay order already, as ``lines_in_replay_order`` collects them (its rejected lines skipped).
    """
    from pyspark.sql import functions as F

    order = order_columns(config)
    replay_order, accepted = None, None
    if keys is None:
        if ordered is None:
            ordered = lines_in_replay_order(records.withColumn("_ok", F.lit(True)), order)
        # Left in Arrow and converted chunk by chunk: whole numpy copies would double the
        # driver's 900 MB at 100M lines.
        files, lines, accepted = (ordered.column(name) for name in ("_file_index", "_line", "_ok"))
        positions = None
    else:
        positions = replay_positions(keys.select(key_columns(order)), order)
        if len(positions) >= 2**31:
            raise ValueError("an ingest numbered on the driver holds fewer than 2**31 records")
        replay_order = np.empty(len(positions), dtype=np.int32)
        replay_order[positions] = np.arange(len(positions), dtype=np.int32)
        files = keys.column("_file_index").to_numpy()
        lines = keys.column("_line").to_numpy()
    path, in_order, file_records = _write_positions(files, lines, positions, accepted)
    del positions, files, lines, accepted, ordered
    give_back_freed_memory()

    if is_connect(spark):
        spark.addArtifacts(path, file=True)  # the session's own files on the server
    else:
        spark.sparkContext.addFile(path)
    spark.udf.registerJavaFunction(_SEQUENCE_LOOKUP, _SEQUENCE_LOOKUP_CLASS, "bigint")
    found = F.call_udf(_SEQUENCE_LOOKUP, F.lit(os.path.basename(path)), F.col("_file_index"), F.col("_line"))
    numbered = records.withColumn("_seq", F.coalesce(
        found + F.lit(seq_base),
        F.raise_error(F.lit("a record has no replay position: the ingest's records changed")).cast("bigint"),
    ))
    # Records are read file by file in line order: when that is replay order already (an archive
    # of partition logs), they need no sort to be stored in ranges of _seq.
    if not in_order:
        numbered = numbered.sortWithinPartitions("_seq")
    return NumberedRecords(numbered, path, replay_order, file_records)


_Column = np.ndarray | pa.ChunkedArray


def _write_positions(
    files: _Column, lines: _Column, positions: np.ndarray | None, accepted: _Column | None = None,
) -> tuple[str, bool, dict[int, int]]:
    """The positions file ``ReplaySequence`` reads (per archive file, one int32 position per line
    from its first record's), in a new temporary folder; whether every archive file holds its
    records in replay order; how many records each file holds. Row ``i`` is the record at
    ``(files[i], lines[i])``, whose position is ``positions[i]``; with ``positions=None`` the rows
    are in replay order, and only those ``accepted`` (a mask; None: all) are records.

    Each record's slot is computed, not found by sorting the records by file and line: a flat
    table with each file's lines at an offset, filled in chunks (at 100M records, 400 MB), so
    that nothing the size of the input is copied (columns may stay in Arrow for that)."""
    if len(files) >= 2**31:
        raise ValueError("an ingest holds fewer than 2**31 records")

    def chunks():
        """``(files, lines, positions)`` of the records, chunk by chunk."""
        done = 0
        for start in range(0, len(files), _FILL_CHUNK):
            end = min(start + _FILL_CHUNK, len(files))
            chunk_files, chunk_lines = _as_numpy(files[start:end]), _as_numpy(lines[start:end])
            if positions is not None:
                yield chunk_files, chunk_lines, positions[start:end].astype(np.int32)
                continue
            if accepted is not None:
                mask = _as_numpy(accepted[start:end])
                chunk_files, chunk_lines = chunk_files[mask], chunk_lines[mask]
            yield chunk_files, chunk_lines, np.arange(done, done + len(chunk_files), dtype=np.int32)
            done += len(chunk_files)

    indexes = firsts = lengths = np.zeros(0, dtype=np.int64)
    counts: dict[int, int] = {}
    per_chunk = [pa.table({"file": chunk_files, "line": chunk_lines}).group_by("file").aggregate(
        [("line", "min"), ("line", "max"), ("line", "count")]) for chunk_files, chunk_lines, _ in chunks()]
    if per_chunk:
        spans = pa.concat_tables(per_chunk).group_by("file").aggregate(
            [("line_min", "min"), ("line_max", "max"), ("line_count", "sum")]
        ).sort_by("file")
        indexes = spans.column("file").to_numpy()
        firsts = spans.column("line_min_min").to_numpy().astype(np.int64)
        lengths = spans.column("line_max_max").to_numpy().astype(np.int64) - firsts + 1
        counts = dict(zip(indexes.tolist(), spans.column("line_count_sum").to_pylist(), strict=True))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if len(indexes) and lengths.max() >= 2**31:
        raise ValueError("an archive file holds fewer than 2**31 lines")
    # Where a file's first line sits in the flat table, by file index.
    base = np.zeros(int(indexes.max()) + 1 if len(indexes) else 0, dtype=np.int64)
    base[indexes] = offsets[:-1] - firsts
    table = np.full(int(offsets[-1]), -1, dtype="<i4")
    for chunk_files, chunk_lines, chunk_positions in chunks():
        table[base[chunk_files] + chunk_lines] = chunk_positions
    folder = tempfile.mkdtemp(prefix="replay-order-")
    path = os.path.join(folder, f"positions-{uuid.uuid4().hex}.bin")
    in_order = True
    with open(path, "wb") as out:
        out.write(b"RPOS" + struct.pack("<i", len(indexes)))
        for index, first, length, offset in zip(indexes.tolist(), firsts.tolist(), lengths.tolist(),
                                                offsets[:-1].tolist(), strict=True):
            own = table[offset:offset + length]
            out.write(struct.pack("<iqi", index, first, length))
            out.write(own.tobytes())
            held = own[own >= 0]
            in_order = in_order and bool(np.all(held[1:] > held[:-1]))
    return path, in_order, counts


def _as_numpy(column: _Column) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False) if isinstance(column, pa.ChunkedArray) else column


def lines_in_replay_order(lines: DataFrame, order: list[str], files: int | None = None) -> pa.Table:
    """``lines`` (checked archive lines: ``_ok`` and ``sort_key_columns``) sorted by Spark into
    replay order, for ingests too big to sort on the driver; collected as ``_ok``, ``_file_index``
    and ``_line`` (7 bytes a line when the ingest's ``files`` are fewer than 2**15, else 9). The
    full rows are never shuffled. Rejected lines (not ``_ok``) land anywhere: the accepted ones
    are in replay order among themselves (a running maximum counts accepted lines only)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    narrow = lines.select("_ok", *key_columns(order))
    if RUNNING_MAX in order:
        so_far = (
            Window.partitionBy("_input").orderBy("_file_index", "_line")
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        accepted_time = F.when(F.col("_ok"), F.col("_event_time"))
        narrow = narrow.withColumn(RUNNING_MAX, F.max(accepted_time).over(so_far))
    # (a line number past 2**31 fails the cast, as a file that long would fail the positions file)
    file_type = "smallint" if files is not None and files < 2**15 else "int"
    ordered = narrow.orderBy(*order).select(
        "_ok", F.col("_file_index").cast(file_type), F.col("_line").cast("int")
    )
    # Each sorted partition reaches the driver's JVM as one task result: with the few shuffle
    # partitions of a local session, a 100M ingest's were ~225 MB each, and holding two of them
    # ran the 2 GiB heap out. Many partitions, coalesced by AQE to its advisory size, keep each
    # result small (~15 MB) and a small ingest's one partition.
    conf = lines.sparkSession.conf
    before = conf.get(_SORT_PARTITIONS_SETTING, None)
    conf.set(_SORT_PARTITIONS_SETTING, str(_SORT_PARTITIONS))
    try:
        return ordered.toArrow()
    finally:
        if before is None:
            conf.unset(_SORT_PARTITIONS_SETTING)
        else:
            conf.set(_SORT_PARTITIONS_SETTING, before)


def give_back_freed_memory() -> None:
    """Return freed memory to the system (the sort's: ~0.5 GB at 10M records), else kept by the
    allocators for the rest of the run."""
    import ctypes

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
