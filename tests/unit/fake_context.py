"""A fake trigger context: one window at a time, timers and state held in plain sets and dicts."""

from __future__ import annotations

import signal
from typing import Any

from spark_jobs.core.durations import MIN_TIMESTAMP
from spark_jobs.core.triggers.base import StateDescriptor


class FakeContext:
    def __init__(self, watermark: int = MIN_TIMESTAMP, clock: int = MIN_TIMESTAMP):
        self.watermark = watermark
        self.clock = clock
        self.event_timers: set[int] = set()
        self.processing_timers: set[int] = set()
        self.state: dict[str, Any] = {}
        #: For ``on_merge``: the trigger state of each window being merged into this one.
        self.merged: list[dict[str, Any]] = []

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self.clock

    def register_event_time_timer(self, time: int) -> None:
        self.event_timers.add(time)

    def register_processing_time_timer(self, time: int) -> None:
        self.processing_timers.add(time)

    def delete_event_time_timer(self, time: int) -> None:
        self.event_timers.discard(time)

    def delete_processing_time_timer(self, time: int) -> None:
        self.processing_timers.discard(time)

    def get_state(self, descriptor: StateDescriptor) -> Any:
        return self.state.get(descriptor.name)

    def set_state(self, descriptor: StateDescriptor, value: Any) -> None:
        self.state[descriptor.name] = value

    def clear_state(self, descriptor: StateDescriptor) -> None:
        self.state.pop(descriptor.name, None)

    def merge_state(self, descriptor: StateDescriptor) -> None:
        value = self.state.get(descriptor.name)
        for other in self.merged:
            if descriptor.name in other:
                theirs = other.pop(descriptor.name)
                value = theirs if value is None else descriptor.merge(value, theirs)
        if value is not None:
            self.state[descriptor.name] = value

    @property
    def empty(self) -> bool:
        """Nothing left: no timer and no state (what ``clear`` must achieve)."""
        return not (self.event_timers or self.processing_timers or self.state)


class TooSlow(Exception):
    """Raised inside a block that overran its :func:`time_limit` (a hang, for a test)."""


class time_limit:  # noqa: N801
    """``with time_limit(3): ...`` raises :class:`TooSlow` in the block after 3 s (main thread).

    The alarm repeats every 50 ms until the block is left: an exception raised while the handler
    happens to run inside a callback that swallows it (e.g. a ``gc`` callback, which Hypothesis
    installs) would otherwise be lost, and the block would run on forever."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self) -> None:
        def alarm(signum: int, frame: Any) -> None:
            raise TooSlow(f"still running after {self.seconds} s")

        self.previous = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, 0.05)

    def __exit__(self, *exc: Any) -> bool:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
        return False
