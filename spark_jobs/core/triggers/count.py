"""Flink's ``CountTrigger``: fire each time the window has collected ``count`` more records.

It replaces the event-time trigger: nothing fires at the window's end, and records short of
``count`` when the window is cleaned up leave without a firing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..windows.base import TimeWindow
from .base import StateDescriptor, Trigger, TriggerContext, TriggerResult, sum_merge


@dataclass(frozen=True)
class CountTrigger(Trigger):
    count: int
    kind: ClassVar[str] = "count"
    COUNT: ClassVar[StateDescriptor] = StateDescriptor("count", sum_merge)

    def __post_init__(self) -> None:
        if self.count <= 0:
            raise ValueError("count trigger needs a positive count")

    @classmethod
    def of(cls, count: int) -> CountTrigger:
        return cls(count)

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        seen = (ctx.get_state(self.COUNT) or 0) + 1
        if seen >= self.count:
            ctx.clear_state(self.COUNT)
            return TriggerResult.FIRE
        ctx.set_state(self.COUNT, seen)
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.merge_state(self.COUNT)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.clear_state(self.COUNT)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "count": self.count}
