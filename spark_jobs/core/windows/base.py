"""Windows and the window-assigner contract (Flink's ``TimeWindow`` / ``WindowAssigner``)."""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from ..durations import MAX_TIMESTAMP, MIN_TIMESTAMP


class TimeWindow(NamedTuple):
    """A half-open window ``[start, end)`` of epoch milliseconds."""

    start: int
    end: int

    @property
    def max_timestamp(self) -> int:
        """The largest timestamp inside the window; the global window's is +infinity."""
        return MAX_TIMESTAMP if self.end == MAX_TIMESTAMP else self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        # Flink's rule: touching windows intersect, so sessions [a, b) and [b, c) merge.
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


GLOBAL_WINDOW = TimeWindow(MIN_TIMESTAMP, MAX_TIMESTAMP)


def is_global_window(window_start_ms: Any) -> Any:
    """Whether a window start (an int, a numpy array or a Spark column) is the global window's:
    the one window without bounds, whose start and end the tables show as NULL."""
    return window_start_ms == GLOBAL_WINDOW.start


class WindowAssigner:
    """Assigns a record's timestamp to windows. Subclasses are frozen dataclasses (values)."""

    kind: ClassVar[str]
    merging: ClassVar[bool] = False
    #: ``event`` windows use the record's event time; ``processing`` ones the replay clock.
    time: str

    @property
    def is_event_time(self) -> bool:
        return self.time == "event"

    @property
    def reach(self) -> int:
        """How far a record's windows extend from its time either way, at most: the times a
        pipeline takes are those whose windows the tables can hold (``durations.fitting_times``)."""
        return 0

    def assign(self, timestamp: int) -> list[TimeWindow]:
        raise NotImplementedError

    def merge_windows(self, windows: list[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        """Groups of windows to merge, each with its merge result (merging assigners only)."""
        raise NotImplementedError(f"{self.kind} windows do not merge")

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


def window_start_with_offset(timestamp: int, offset: int, size: int) -> int:
    """Flink's ``TimeWindow.getWindowStartWithOffset``, with floor modulo for negative times."""
    return timestamp - (timestamp - offset) % size
