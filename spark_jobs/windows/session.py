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

    @classmethod
    def with_gap(cls, gap: int, time: str = "event") -> SessionWindows:
        return cls(gap, time)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [TimeWindow(timestamp, timestamp + self.gap)]

    def merge_windows(self, windows: list[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        """Flink's ``TimeWindow.mergeWindows``: sweep by start, covering intersecting windows."""
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for window in sorted(windows):
            if groups and groups[-1][0].intersects(window):
                cover, members = groups[-1]
                groups[-1] = (cover.cover(window), [*members, window])
            else:
                groups.append((window, [window]))
        return [(cover, members) for cover, members in groups if len(members) > 1]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "gap": format_duration(self.gap), "time": self.time}
