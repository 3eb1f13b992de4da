"""Flink's ``EventTimeTrigger``: fire once the watermark passes the window's end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..windows.base import TimeWindow
from .base import Trigger, TriggerContext, TriggerResult


def end_reached(max_timestamp: Any, watermark: Any) -> Any:
    """Whether the watermark has reached a window's last timestamp: then a record fires the window
    at once, and neither a record nor a merge registers its end timer (which is due already).
    Scalars or numpy arrays."""
    return max_timestamp <= watermark


@dataclass(frozen=True)
class EventTimeTrigger(Trigger):
    kind: ClassVar[str] = "event_time"

    @classmethod
    def create(cls) -> EventTimeTrigger:
        return cls()

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        if end_reached(window.max_timestamp, ctx.current_watermark()):
            # Already past the end: an allowed-late record re-fires the window at once.
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        # Only while the merged window is not yet due: otherwise on_element fires it, and a
        # timer here would fire it twice.
        if not end_reached(window.max_timestamp, ctx.current_watermark()):
            ctx.register_event_time_timer(window.max_timestamp)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp)
