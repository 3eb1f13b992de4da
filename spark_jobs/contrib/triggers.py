"""A user-defined trigger, written against the same small API as the built-ins.

``ThresholdTrigger(field, threshold)``: fire EARLY once, as soon as the window's running sum of
``field`` reaches ``threshold`` (an alert that should not wait for the window's end), and fire
ON_TIME when the watermark passes the window, like the event-time trigger. Use it from a
pipeline config::

    trigger:
      type: custom
      class: spark_jobs.contrib.triggers.ThresholdTrigger
      params: {field: value, threshold: 100}

A trigger keeps state only through the context (declared as StateDescriptors) and must delete
every timer and value it created in ``clear``: the operator reports any leftover as a leak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.triggers.base import StateDescriptor, Trigger, TriggerContext, TriggerResult, sum_merge
from ..core.windows.base import TimeWindow


def _either(a: Any, b: Any) -> Any:
    return a or b


@dataclass(frozen=True)
class ThresholdTrigger(Trigger):
    field: str
    threshold: float
    needs_element: ClassVar[bool] = True
    RUNNING_SUM: ClassVar[StateDescriptor] = StateDescriptor("running-sum", sum_merge)
    CROSSED: ClassVar[StateDescriptor] = StateDescriptor("crossed", _either)

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        if window.max_timestamp <= ctx.current_watermark():
            return TriggerResult.FIRE  # allowed-late record: re-fire, as the event-time trigger
        ctx.register_event_time_timer(window.max_timestamp)
        value = element.get(self.field) if isinstance(element, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            return TriggerResult.CONTINUE
        running = (ctx.get_state(self.RUNNING_SUM) or 0) + value
        ctx.set_state(self.RUNNING_SUM, running)
        if running >= self.threshold and not ctx.get_state(self.CROSSED):
            ctx.set_state(self.CROSSED, True)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.merge_state(self.RUNNING_SUM)
        ctx.merge_state(self.CROSSED)
        if window.max_timestamp > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp)
        ctx.clear_state(self.RUNNING_SUM)
        ctx.clear_state(self.CROSSED)
