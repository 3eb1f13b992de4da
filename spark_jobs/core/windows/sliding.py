"""Sliding windows: fixed size, a new window every ``slide``; a record lands in several."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..durations import format_duration
from .base import TimeWindow, WindowAssigner, window_start_with_offset


@dataclass(frozen=True)
class SlidingWindows(WindowAssigner):
    size: int
    slide: int
    offset: int = 0
    time: str = "event"
    kind: ClassVar[str] = "sliding"

    def __post_init__(self) -> None:
        if self.size <= 0 or self.slide <= 0:
            raise ValueError("sliding window size and slide must be positive")
        object.__setattr__(self, "offset", self.offset % self.slide)

    @property
    def reach(self) -> int:
        return self.size

    @classmethod
    def of(cls, size: int, slide: int, offset: int = 0, time: str = "event") -> SlidingWindows:
        return cls(size, slide, offset, time)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        # Flink's order: the latest window first.
        start = window_start_with_offset(timestamp, self.offset, self.slide)
        windows = []
        while start > timestamp - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return windows

    def assign_starts(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Array form of :meth:`assign`: (record index, window start) per (record, window) pair,
        record by record and, within a record, the latest window first (as ``assign``)."""
        last = window_start_with_offset(timestamps, self.offset, self.slide)
        most = -(-self.size // self.slide)  # the most windows one record can be in
        starts = last[:, None] - np.arange(most)[None, :] * self.slide
        inside = starts > (timestamps - self.size)[:, None]
        records = np.broadcast_to(np.arange(len(timestamps))[:, None], starts.shape)
        return records[inside], starts[inside]

    def to_dict(self) -> dict[str, Any]:
        spec = {
            "type": self.kind,
            "size": format_duration(self.size),
            "slide": format_duration(self.slide),
            "time": self.time,
        }
        if self.offset:
            spec["offset"] = format_duration(self.offset)
        return spec
