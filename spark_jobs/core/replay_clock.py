"""The replay clock of staged batches, and which are due in a run bounded by a time.

One home for the rule that both a run (``execution.replay``) and the Spark-free check of whether
an Airflow interval has work (``execution.pending_work``) apply.
"""

from __future__ import annotations

from .durations import MIN_TIMESTAMP


def clock_after(batch_clock: int, previous: int | None) -> int:
    """The replay clock at a batch's end: the highest seen up to its last record (it never goes
    back), from the batch's own highest clock and the clock after the batch before."""
    return max(batch_clock, MIN_TIMESTAMP if previous is None else previous)


def is_due(clock: int, until_ms: int | None) -> bool:
    """Whether a staged batch whose replay clock ends at ``clock`` is replayed by a run bounded
    by ``until_ms`` (``--until``, an Airflow interval's end; None: every batch is)."""
    return until_ms is None or clock < until_ms
