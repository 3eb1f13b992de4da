"""The global window: one window per key that only ends when the input is finalized."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .base import GLOBAL_WINDOW, TimeWindow, WindowAssigner


@dataclass(frozen=True)
class GlobalWindows(WindowAssigner):
    time: str = "event"
    kind: ClassVar[str] = "global"

    @classmethod
    def create(cls) -> GlobalWindows:
        return cls()

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [GLOBAL_WINDOW]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "time": self.time}
