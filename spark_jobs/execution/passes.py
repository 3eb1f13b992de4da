"""A run's plan and its account: the batches still to replay cut into passes, a pass computed and
waiting for its writes, the driver's read-ahead of staged records, and the summaries a run
reports (per batch, per pass, in total; per step with ``REPLAY_PROFILE``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core.durations import MIN_TIMESTAMP, format_timestamp
from ..core.watermarks import Timeline, WatermarkState
from .spark_batch import STATE_COLUMNS
from .state.delta import ALL_TABLES

#: Where a run's progress lines go (one call per line).
Progress = Callable[[str], None]


def profile(progress: Progress, label: str, steps: dict[str, float]) -> None:
    """The seconds of each step, as one progress line, when ``REPLAY_PROFILE`` is set."""
    if os.environ.get("REPLAY_PROFILE"):
        progress(f"  {label}: " + ", ".join(f"{k} {v:.2f}s" for k, v in steps.items()))


@dataclass
class BatchSummary:
    batch_id: int
    records: int
    panes: dict[str, int]
    late: int
    watermark: int
    #: The batch's share of its pass's wall time (a pass runs several batches at once).
    seconds: float


@dataclass
class PassSummary:
    """Consecutive micro-batches run as one Spark pass and committed together."""

    first_batch: int
    last_batch: int
    records: int
    seconds: float


@dataclass(frozen=True)
class PendingBatch:
    batch_id: int
    seq_start: int
    seq_end: int
    finalize: bool = False

    @property
    def records(self) -> int:
        return self.seq_end - self.seq_start


def plan_passes(batches: list[PendingBatch], max_records: int) -> list[list[PendingBatch]]:
    """Cut consecutive batches into passes of at most ``max_records`` records (at least one
    batch each; the finalize batch, which has none, joins the last)."""
    passes: list[list[PendingBatch]] = []
    records = 0
    for batch in batches:
        if passes and records + batch.records <= max_records:
            passes[-1].append(batch)
            records += batch.records
        else:
            passes.append([batch])
            records = batch.records
    return passes


@dataclass
class ComputedPass:
    """A pass whose operator has run, not yet written: what ``write_pass`` needs."""

    batches: list[PendingBatch]
    timelines: list[Timeline]
    states: list[WatermarkState]  # the watermark state after each batch
    out: Any  # the operator's output rows (Arrow), every kind
    by_kind: dict[str, Any]  # the same rows by ``_kind``
    panes: dict[int, dict[str, int]]  # per batch: panes by timing
    late_counts: dict[int, int]  # per batch
    steps: dict[str, float]
    started: float
    keys: list[str]
    staged_rows: Any = None  # the staged rows (Arrow) when the pass read them to the driver

    def state_rows(self) -> Any:
        """The window state after the pass (Arrow), as the next pass starts from it."""
        rows = self.by_kind.get("state", self.out.slice(0, 0))
        return rows.select([*self.keys, *[name for name, _ in STATE_COLUMNS]])


class ReadAhead(NamedTuple):
    """Staged records read to the driver for the small passes from ``start`` on."""

    start: int  # first _seq
    end: int  # end _seq (exclusive)
    columns: list[str]
    rows: Any  # Arrow, in _seq order


@dataclass
class RunSummary:
    pipeline: str
    output_path: str
    files_ingested: int = 0
    records_read: int = 0
    records_accepted: int = 0
    records_quarantined: int = 0
    batches: list[BatchSummary] = field(default_factory=list)
    passes: list[PassSummary] = field(default_factory=list)
    finalized: bool = False
    watermark: int = MIN_TIMESTAMP
    seconds: float = 0.0
    #: What the run's firings went to (``window_results``, ``join_results``, ``process_results``).
    results_table: str = "window_results"
    #: The tables the run wrote to, in the order it first did (a dict as an ordered set: the
    #: pass-writing threads add to it).
    tables: dict[str, None] = field(default_factory=dict)

    def wrote(self, *tables: str) -> None:
        for table in tables:
            self.tables.setdefault(table, None)

    @property
    def panes(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for batch in self.batches:
            for timing, count in batch.panes.items():
                totals[timing] = totals.get(timing, 0) + count
        return totals

    @property
    def late(self) -> int:
        return sum(batch.late for batch in self.batches)

    @property
    def records_replayed(self) -> int:
        return sum(batch.records for batch in self.batches)

    def add(self, later: RunSummary) -> None:
        """Count a later run of the same command in (a finished operation, then the run asked for)."""
        for name in ("files_ingested", "records_read", "records_accepted", "records_quarantined", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(later, name))
        self.batches += later.batches
        self.passes += later.passes
        self.wrote(*later.tables)
        self.finalized, self.watermark = later.finalized, later.watermark


def format_summary(summary: RunSummary) -> str:
    """A run's account as ``replay run`` prints it (also its spark-submit job, reprocess, demo)."""
    lines = [
        f"pipeline {summary.pipeline}: {len(summary.batches)} batches in {summary.seconds:.1f}s",
        f"  records    read {summary.records_read}, accepted {summary.records_accepted}, "
        f"quarantined {summary.records_quarantined} (this run's new files)",
        f"  replayed   {summary.records_replayed} records",
        format_firings(summary),
        f"  late       {summary.late} late events",
        f"  watermark  {format_timestamp(summary.watermark)}"
        + (" (finalized)" if summary.finalized else ""),
        f"  tables     {summary.output_path}/"
        + ("{" + ",".join(sorted(summary.tables, key=_table_order)) + "}" if summary.tables
           else " (none written by this run)"),
    ]
    return "\n".join(lines)


def _table_order(table: str) -> int:
    return ALL_TABLES.index(table) if table in ALL_TABLES else len(ALL_TABLES)


def format_firings(summary: RunSummary) -> str:
    """What the firings emitted, in the terms of the pipeline's kind."""
    panes = summary.panes
    if summary.results_table == "join_results":
        return f"  pairs      {sum(panes.values())} joined pairs"
    if summary.results_table == "process_results":
        causes = ", ".join(f"{cause} {count}" for cause, count in sorted(panes.items()))
        return f"  results    {sum(panes.values())} rows" + (f" ({causes})" if causes else "")
    return (
        f"  panes      EARLY {panes.get('EARLY', 0)}, ON_TIME {panes.get('ON_TIME', 0)}, "
        f"LATE {panes.get('LATE', 0)}"
    )
