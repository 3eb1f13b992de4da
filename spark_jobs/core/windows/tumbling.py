"""Tumbling windows: fixed size, no overlap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..durations import format_duration
from .base import TimeWindow, WindowAssigner, window_start_with_offset


@dataclass(frozen=True)
class TumblingWindows(WindowAssigner):
    size: int
    offset: int = 0
    time: str = "event"
    kind: ClassVar[str] = "tumbling"

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ValueError("tumbling window size must be positive")
        object.__setattr__(self, "offset", self.offset % self.size)

    @property
    def reach(self) -> int:
        return self.size

    @classmethod
    def of(cls, size: int, offset: int = 0, time: str = "event") -> TumblingWindows:
        return cls(size, offset, time)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        start = window_start_with_offset(timestamp, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def assign_starts(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Array form of :meth:`assign`: (record index, window start) per (record, window) pair."""
        return np.arange(len(timestamps)), window_start_with_offset(timestamps, self.offset, self.size)

    def to_dict(self) -> dict[str, Any]:
        spec = {"type": self.kind, "size": format_duration(self.size), "time": self.time}
        if self.offset:
            spec["offset"] = format_duration(self.offset)
        return spec
