"""``window_latest``'s MERGEs, run one at a time beside the passes, and what a commit row records
of them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from .state.delta import DeltaStore


@dataclass(frozen=True)
class LatestMerged:
    """What ``window_latest`` holds, as a commit row records it."""

    through: int  # the last batch whose panes it holds (-1: none)
    version: int | None  # its Delta version (None: no table yet)


class LatestMerges:
    """``window_latest``'s MERGEs, one at a time, each running beside the passes after the one
    that starts it (Spark's MERGE is several Spark jobs: it took 2.6-3.4 s of a one-batch pass
    whose other writes took 0.8 s; delta-rs's, when it takes the MERGE, a few hundredths).

    Commit rows record a MERGE from the pass that starts the next one on (which waits for it), or
    from the pass that ends the run (which waits for its own): until then they record the table as
    it was before the MERGE, which a recovery restores. What a row records so depends only on the
    passes, never on timing.
    """

    def __init__(self, store: DeltaStore, recorded: LatestMerged):
        self.store = store
        #: What commit rows record now.
        self.recorded = recorded
        #: The last batch the newest MERGE (running or not) covers: the next one starts after it.
        self.started_through = recorded.through
        self.running: tuple[Future, int] | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="latest-merge")

    def start(self, merge: Callable[[], None], through: int) -> None:
        """Run ``merge`` (panes through batch ``through``) once the MERGE before it is done."""
        self.record()
        # Nothing else writes the table now (maintenance waits for MERGEs): its version before
        # this MERGE, after any compaction since the last one.
        self.recorded = LatestMerged(self.recorded.through, self.store.version("window_latest"))
        self.started_through = through

        def run() -> int | None:
            merge()
            return self.store.version("window_latest")

        self.running = (self.executor.submit(run), through)

    def record(self) -> None:
        """Wait for the running MERGE, and record it."""
        if self.running is not None:
            future, through = self.running
            self.running = None
            self.recorded = LatestMerged(through, future.result())

    def settle(self) -> None:
        """Wait for the running MERGE without recording it (before maintenance compacts the table)."""
        if self.running is not None:
            self.running[0].result()

    def check(self) -> None:
        """Raise the running MERGE's error if it failed already."""
        if self.running is not None and self.running[0].done():
            self.running[0].result()

    def shutdown(self) -> None:
        self.executor.shutdown()
