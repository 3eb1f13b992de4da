"""Flink's ``PurgingTrigger``: every FIRE of the nested trigger becomes FIRE_AND_PURGE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..windows.base import TimeWindow
from .base import Trigger, TriggerContext, TriggerResult


def _purging(result: TriggerResult) -> TriggerResult:
    return TriggerResult.FIRE_AND_PURGE if result.is_fire else result


@dataclass(frozen=True)
class PurgingTrigger(Trigger):
    nested: Trigger
    kind: ClassVar[str] = "purging"

    @classmethod
    def of(cls, nested: Trigger) -> PurgingTrigger:
        return cls(nested)

    @property
    def needs_element(self) -> bool:  # type: ignore[override]
        return self.nested.needs_element

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        return _purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return _purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        return _purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        self.nested.clear(window, ctx)

    def state_names(self) -> frozenset[str]:
        return self.nested.state_names()  # it keeps none of its own

    def to_dict(self) -> dict[str, Any]:
        return {**self.nested.to_dict(), "purging": True}
