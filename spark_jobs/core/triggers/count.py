"""Flink's ``CountTrigger``: fire each time the window has collected ``count`` more records.

It replaces the event-time trigger: nothing fires at the window's end, and records short of
``count`` when the window is cleaned up leave without a firing.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    # A window's stored trigger state (the operator's name -> value mapping), read and written
    # outside a context: the vectorised kernel counts a window's records in bulk.
    def counted(self, state: Mapping[str, Any], default: Any = None) -> Any:
        """The records a window has counted toward its next firing, in its stored trigger state
        (``default`` when it holds none)."""
        return state.get(self.COUNT.name, default)

    def store_counted(self, state: dict[str, Any], counted: int) -> None:
        """Keep ``counted`` records toward the next firing in a stored trigger state, as
        ``on_element`` leaves it (0: nothing kept)."""
        if counted:
            state[self.COUNT.name] = counted
        else:
            state.pop(self.COUNT.name, None)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "count": self.count}
