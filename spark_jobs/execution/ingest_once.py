"""A small ingest read once: every checked line collected on the driver in one Spark job, split
there into records and quarantined lines, numbered in replay order (``ordering``) and written to
``staging`` and ``quarantine`` from the driver (delta-rs, where this process reaches the tables).

A larger ingest reads its archive twice (``ingest``): its narrow sort keys first, then the full
rows, staged by Spark, which no driver's memory has to hold. Read once, a 1M-line archive's
ingest skips a second parse of every line and a Spark write job (8.6-9.0 s against 13-16 s in a
fresh process); past a few million lines, moving every full row into Python costs more than
Spark's second read and write (docs/bench/history.md, "Ingest"). The tables hold the same rows
with the same types either way, and a later ingest may take the other route.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .archive_files import QUARANTINE_FROM_CHECKED
from .ordering import key_columns, order_columns, replay_positions, timeline_columns

if TYPE_CHECKING:
    from ..config import PipelineConfig
    from .archive_files import ArchiveFile

#: The most bytes of archive files (as stored) an ingest read once may hold: a bound on the
#: driver's memory when its lines are long (JSON Lines are bounded by their lines already).
STAGE_ON_DRIVER_MAX_BYTES = 1 << 30
#: How much larger than stored a compressed or columnar file is counted (gzip, zstd, Parquet,
#: Avro: JSON text compresses 5-10x).
_STORED_EXPANSION = 8
#: The collected columns that are not the staged record's: its outcome, and why it is quarantined.
OUTCOME_COLUMNS = ("_ok", "_reason", "_detail")


def reads_once(config: PipelineConfig, bound: int, files: list[ArchiveFile]) -> bool:
    """Whether an ingest of at most ``bound`` lines from ``files`` is small enough for the
    driver to hold every line (``batch.stage_on_driver_max_records``)."""
    if not config.stage_on_driver_max_records or bound > config.stage_on_driver_max_records:
        return False  # (0: never)
    plain_text = config.source.format in ("jsonl", "csv")

    def counted(file: ArchiveFile) -> int:
        compressed = not plain_text or file.path.lower().endswith((".gz", ".gzip", ".zst"))
        return file.size * (_STORED_EXPANSION if compressed else 1)

    return sum(counted(f) for f in files) <= STAGE_ON_DRIVER_MAX_BYTES


@dataclass
class StagedOnDriver:
    """An ingest's rows, split and numbered on the driver."""

    #: Every checked line as collected (None once ``staged`` has taken them), and the lines of
    #: its records in replay order.
    lines: pa.Table | None
    replay_order: np.ndarray
    #: The first ``_seq`` and ``_batch``, records a batch, and the ingest's id.
    seq_base: int
    batch_base: int
    batch_size: int
    ingest_id: int
    #: ``quarantine``'s rows, ``ingest_id`` included.
    quarantined: pa.Table
    #: Records and quarantined lines per archive file index.
    per_file_records: np.ndarray
    per_file_bad: np.ndarray

    def staged(self) -> pa.Table:
        """``staging``'s rows in replay order: the record, ``_seq``, ``_batch`` and ``_ingest``.

        Made by the write that stores them (``DeltaStore.write_behind``), beside the run's first
        pass: the full rows' reorder, raw lines included, is an Arrow ``take`` of 0.15-1.5 s at
        1M lines in a fresh process (the memory touched first), which the numbering waited for.
        Called once: the collected lines are let go as soon as they are copied (a 1M ingest's are
        350 MB, beside the first pass's own memory)."""
        lines, self.lines = self.lines, None
        # One copy of the full rows, straight into replay order.
        staged = lines.drop_columns(list(OUTCOME_COLUMNS)).take(self.replay_order)
        del lines
        numbers = np.arange(staged.num_rows, dtype=np.int64)
        return (
            staged.append_column("_seq", pa.array(numbers + self.seq_base))
            .append_column("_batch", pa.array(numbers // self.batch_size + self.batch_base))
            .append_column("_ingest", pa.array(np.full(staged.num_rows, self.ingest_id, dtype=np.int32)))
        )


def stage_on_driver(
    lines: pa.Table, config: PipelineConfig, files: int, seq_base: int, batch_base: int,
    batch_size: int, ingest_id: int,
) -> StagedOnDriver:
    """``lines`` (every checked line: ``OUTCOME_COLUMNS``, then a record's columns, with
    ``_input`` for joins) split, numbered from ``seq_base`` and cut into batches from
    ``batch_base`` as the two-read ingest stages them; ``files``: archive file indexes in use."""
    ok = lines.column("_ok").to_numpy(zero_copy_only=False)
    record_lines = np.flatnonzero(ok)
    bad = lines.take(np.flatnonzero(~ok))
    order = order_columns(config)
    positions = replay_positions(lines.select(key_columns(order)).take(record_lines), order)
    in_replay_order = np.empty(len(positions), dtype=np.int64)
    in_replay_order[positions] = record_lines
    quarantined = {name: bad.column(line) for name, line in QUARANTINE_FROM_CHECKED}
    quarantined["line"] = quarantined["line"].cast(pa.int64())
    quarantined["ingest_id"] = pa.array(np.full(bad.num_rows, ingest_id, dtype=np.int64))
    file_index = lines.column("_file_index").to_numpy(zero_copy_only=False)
    return StagedOnDriver(
        lines, in_replay_order, seq_base, batch_base, batch_size, ingest_id, pa.table(quarantined),
        np.bincount(file_index[record_lines], minlength=files), np.bincount(file_index[~ok], minlength=files),
    )


def ingested_columns(records: pa.Table, config: PipelineConfig, kept: list[str],
                     replay_order: np.ndarray | None = None) -> pa.Table:
    """What this run's passes take from an ingest numbered on the driver, by either route
    (``PassComputer.ingested``): the watermark timeline's and the operator's (``kept``) columns
    of ``records``, taken in ``replay_order`` (None: they are in it), strings dictionary-encoded
    (before the take: cheaper to copy)."""
    columns = records.select(list(dict.fromkeys([*timeline_columns(config), *kept])))
    for name in dict.fromkeys([*kept, "_partition"]):
        index = columns.schema.get_field_index(name)
        if index >= 0 and pa.types.is_string(columns.schema.types[index]):
            columns = columns.set_column(index, name, columns.column(index).dictionary_encode())
    return columns if replay_order is None else columns.take(replay_order)


def collected_columns(config: PipelineConfig) -> list[Any]:
    """The Spark columns collected of every checked line: ``OUTCOME_COLUMNS``, then the record's."""
    from .sources import outcome_columns, record_columns

    return [*outcome_columns(), *record_columns(config)]
