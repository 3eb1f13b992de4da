"""Session windows: each record opens ``[t, t + gap)``; intersecting sessions merge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..durations import format_duration
from .base import TimeWindow, WindowAssigner


@dataclass(frozen=True)
class SessionWindows(WindowAssigner):
    gap: int
    time: str = "event"
    kind: ClassVar[str] = "session"
    merging: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.gap <= 0:
            raise ValueError("session gap must be positive")

    @property
    def reach(self) -> int:
        return self.gap

    @classmethod
    def with_gap(cls, gap: int, time: str = "event") -> SessionWindows:
        return cls(gap, time)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [TimeWindow(timestamp, timestamp + self.gap)]

    def merge_windows(self, windows: list[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        """Flink's ``TimeWindow.mergeWindows``: sweep by start, covering intersecting windows
        (``TimeWindow.intersects`` and ``cover``, spelled out: this runs once per record)."""
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        members: list[TimeWindow] = []
        low = high = 0
        for window in sorted(windows):
            start, end = window
            if members and low <= end and high >= start:
                members.append(window)
                low, high = min(low, start), max(high, end)
                continue
            if len(members) > 1:
                groups.append((TimeWindow(low, high), members))
            members, low, high = [window], start, end
        if len(members) > 1:
            groups.append((TimeWindow(low, high), members))
        return groups

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "gap": format_duration(self.gap), "time": self.time}
