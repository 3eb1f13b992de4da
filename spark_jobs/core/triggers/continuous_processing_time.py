"""Flink's ``ContinuousProcessingTimeTrigger``: fire every ``interval`` of replay clock.

The chain is aligned to the epoch grid by the clock at the window's first record; its last
segment is capped at the window's max timestamp, so the final interval fires too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..durations import format_duration
from ..windows.base import TimeWindow
from .base import StateDescriptor, Trigger, TriggerContext, TriggerResult, min_merge
from .continuous_event_time import align_to_interval, chain_ends, next_fire_time


@dataclass(frozen=True)
class ContinuousProcessingTimeTrigger(Trigger):
    interval: int
    kind: ClassVar[str] = "continuous_processing_time"
    FIRE_TIME: ClassVar[StateDescriptor] = StateDescriptor("fire-time", min_merge)

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("continuous_processing_time needs a positive interval")

    @classmethod
    def of(cls, interval: int) -> ContinuousProcessingTimeTrigger:
        return cls(interval)

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        if ctx.get_state(self.FIRE_TIME) is None:
            now = ctx.current_processing_time()
            self._register_next(align_to_interval(now, self.interval), window, ctx)
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        if ctx.get_state(self.FIRE_TIME) == time:
            ctx.clear_state(self.FIRE_TIME)
            # The capped last segment fires once: re-registering maxTimestamp at the same clock
            # point would fire forever on event-time windows, whose cleanup is not on this clock.
            if time < window.max_timestamp:
                self._register_next(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.merge_state(self.FIRE_TIME)
        fire_time = ctx.get_state(self.FIRE_TIME)
        if fire_time is not None:
            ctx.register_processing_time_timer(fire_time)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        fire_time = ctx.get_state(self.FIRE_TIME)
        if fire_time is not None:
            ctx.delete_processing_time_timer(fire_time)
            ctx.clear_state(self.FIRE_TIME)

    def _register_next(self, time: int, window: TimeWindow, ctx: TriggerContext) -> None:
        if chain_ends(window, ctx.current_processing_time()):
            return
        fire_time = next_fire_time(time, self.interval, window)
        ctx.set_state(self.FIRE_TIME, fire_time)
        ctx.register_processing_time_timer(fire_time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "interval": format_duration(self.interval)}
