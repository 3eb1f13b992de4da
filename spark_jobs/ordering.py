"""Replay order: the sort that numbers an ingest's accepted records (``_seq``).

One archive replays in file and line order, or by ingest time when it has one (then partition,
offset, file and line break ties). Two archives (joins) are interleaved by time as a
timestamp-synchronising reader would (Kafka Streams' choice): by ingest time when they have one;
otherwise always taking the input whose next record is earlier, which keeps each input's own
order and equals a sort by each record's running maximum event time within its input. File index
and line make every sort key unique, so the order is total and repeatable.

``number_records`` attaches the numbers without moving the full rows: the narrow sort keys
(about 40 bytes a record) are collected and sorted on the driver with Arrow, and each record
looks its number up by its position in its Spark partition (a broadcast array per partition, an
Arrow UDF over one column). The full rows, raw lines included, are never shuffled or cached a
second time. An ingest of more than ``sort_on_driver_max_records`` records (a driver's memory
is finite) sorts the full rows on the cluster instead; both give the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .config import PipelineConfig

RUNNING_MAX = "_running_max"
_ROW_BITS = 33  # monotonically_increasing_id() = (partition index << 33) + row in the partition
_ROW_MASK = (1 << _ROW_BITS) - 1


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
    table = frame.select(*columns).toArrow()
    return table.take(np.argsort(table.column("_seq").to_numpy(), kind="stable"))


@dataclass
class NumberedRecords:
    """The records with ``_seq``, sorted by it within each partition.

    ``rows_per_file`` (0: no limit) keeps a pass's reads of the staging table narrow, since Delta
    skips files by their ``_seq`` range: records numbered on the driver stay in their parse
    partitions, which span the whole ingest, so each partition is cut into files small enough
    that a pass touches few of them; records sorted on the cluster are range-partitioned already.
    """

    frame: DataFrame
    rows_per_file: int
    lookup: Any = None  # the broadcast tables, released by ``close`` once the frame is written

    def close(self) -> None:
        if self.lookup is not None:
            self.lookup.destroy()


def number_records(
    spark: SparkSession, config: PipelineConfig, records: DataFrame, count: int, seq_base: int,
) -> NumberedRecords:
    """``records`` numbered ``seq_base``, ``seq_base + 1``, ... in replay order.

    ``records`` must give the same rows in the same partitions each time it is evaluated (the
    ingest caches them); ``count`` is its number of rows.
    """
    order = order_columns(config)
    if count > config.sort_on_driver_max_records:
        return NumberedRecords(_number_on_cluster(records, order, seq_base), 0)
    from pyspark.sql import functions as F
    from pyspark.sql.functions import ArrowUDFType

    records = records.withColumn("_mid", F.monotonically_increasing_id())
    keys = records.select(*key_columns(order), "_mid").toArrow()
    positions = replay_positions(keys.drop_columns(["_mid"]), order)
    mids = keys.column("_mid").to_numpy()
    del keys
    partitions = mids >> _ROW_BITS
    if (np.diff(partitions) < 0).any():  # collect() keeps partition order; do not rely on it
        by_mid = np.argsort(mids, kind="stable")
        mids, positions, partitions = mids[by_mid], positions[by_mid], partitions[by_mid]
    # Positions, not sequence numbers, in the tables: half the memory while they fit 32 bits.
    kind = np.int32 if count < 2**31 else np.int64
    by_partition: dict[int, np.ndarray] = {}
    for start, end in _runs(partitions):
        rows = mids[start:end] & _ROW_MASK
        table = np.full(int(rows.max()) + 1, -1, dtype=kind)
        table[rows] = positions[start:end]
        by_partition[int(partitions[start])] = table
    del positions, mids, partitions
    tables = spark.sparkContext.broadcast(by_partition)
    _give_back_freed_memory()
    udf = F.arrow_udf(SequenceLookup(tables, seq_base), "long", ArrowUDFType.SCALAR)
    numbered = records.withColumn("_seq", udf(F.col("_mid"))).drop("_mid")
    partition_count = records.rdd.getNumPartitions()
    per_file = max(10_000, config.pass_max_records // max(1, 2 * partition_count))
    return NumberedRecords(numbered.sortWithinPartitions("_seq"), per_file, tables)


def _give_back_freed_memory() -> None:
    """Return the sort's freed memory to the system (~0.5 GB at 10M records, else kept by the
    allocators for the rest of the run)."""
    import ctypes

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


class SequenceLookup:
    """The executor side of ``number_records``: ``_mid`` -> ``_seq`` from the broadcast tables.

    A callable object, so that what is shipped is the broadcast handle, not a closure's cell.
    """

    def __init__(self, tables: Any, seq_base: int):
        self.tables = tables
        self.seq_base = seq_base

    def __call__(self, mids: pa.Array) -> pa.Array:
        values = mids.to_numpy()
        partitions, rows = values >> _ROW_BITS, values & _ROW_MASK
        result = np.empty(len(values), dtype=np.int64)
        tables = self.tables.value
        for partition in np.unique(partitions):
            selected = partitions == partition
            result[selected] = tables[int(partition)][rows[selected]]
        if (result < 0).any():
            raise RuntimeError("a record has no replay position: the ingest's records changed")
        return pa.array(result + self.seq_base, pa.int64())


def _number_on_cluster(records: DataFrame, order: list[str], seq_base: int) -> DataFrame:
    """The same numbering by a global sort of the full rows (for ingests too big for the driver)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if RUNNING_MAX in order:
        so_far = (
            Window.partitionBy("_input").orderBy("_file_index", "_line")
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        records = records.withColumn(RUNNING_MAX, F.max("_event_time").over(so_far))
    ordered = (
        records.orderBy(*order)
        .withColumn("_mid", F.monotonically_increasing_id())
        .persist(StorageLevel.DISK_ONLY)  # the whole ingest: see sources.read_archive
    )
    # monotonically_increasing_id is (partition << 33) + row: turn it into a dense rank.
    chunks = (
        ordered.groupBy(F.shiftright("_mid", _ROW_BITS).alias("pid"))
        .agg(F.count("*").alias("n"), F.min("_mid").alias("first"))
        .orderBy("pid")
        .collect()
    )
    seq = F.lit(None).cast("long")
    running = seq_base
    pid = F.shiftright("_mid", _ROW_BITS)
    for row in chunks:
        seq = F.when(pid == row["pid"], F.col("_mid") - F.lit(row["first"]) + F.lit(running)).otherwise(seq)
        running += row["n"]
    numbered = ordered.withColumn("_seq", seq).drop("_mid")
    if RUNNING_MAX in order:
        numbered = numbered.drop(RUNNING_MAX)
    return numbered.sortWithinPartitions("_seq")
