"""Flink's ``ProcessingTimeTrigger``: fire when the replay clock passes the window's end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..windows.base import TimeWindow
from .base import Trigger, TriggerContext, TriggerResult


@dataclass(frozen=True)
class ProcessingTimeTrigger(Trigger):
    kind: ClassVar[str] = "processing_time"

    @classmethod
    def create(cls) -> ProcessingTimeTrigger:
        return cls()

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        if window.max_timestamp > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp)
