"""Flink's ``ContinuousEventTimeTrigger``: fire every ``interval`` of event time, and at the end.

The first fire time is aligned to the epoch grid by the window's first record
(``ts - ts % interval + interval``), capped at the window's max timestamp; each firing
registers the next one. A watermark jump fires the chain several times in a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..durations import MAX_TIMESTAMP, format_duration
from ..windows.base import TimeWindow
from .base import StateDescriptor, Trigger, TriggerContext, TriggerResult, min_merge


def next_fire_time(time: int, interval: int, window: TimeWindow) -> int:
    """The fire time after ``time`` on the interval chain, capped at the window's end."""
    return min(time + interval, window.max_timestamp)


def align_to_interval(timestamp: int, interval: int) -> int:
    """Flink's ``ts - ts % interval`` with Java's remainder (truncated toward zero)."""
    remainder = timestamp % interval if timestamp >= 0 else -(-timestamp % interval)
    return timestamp - remainder


def chain_ends(window: TimeWindow, now: int) -> bool:
    """At end of input (+infinity) a never-ending window's chain would fire forever: it stops,
    and the window's own end timer (at +infinity) gives its last firing."""
    return window.max_timestamp == MAX_TIMESTAMP and now == MAX_TIMESTAMP


@dataclass(frozen=True)
class ContinuousEventTimeTrigger(Trigger):
    interval: int
    kind: ClassVar[str] = "continuous_event_time"
    FIRE_TIME: ClassVar[StateDescriptor] = StateDescriptor("fire-time", min_merge)

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("continuous_event_time needs a positive interval")

    @classmethod
    def of(cls, interval: int) -> ContinuousEventTimeTrigger:
        return cls(interval)

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        if window.max_timestamp <= ctx.current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp)
        if ctx.get_state(self.FIRE_TIME) is None:
            self._register_next(align_to_interval(timestamp, self.interval), window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        if time == window.max_timestamp:
            return TriggerResult.FIRE
        if ctx.get_state(self.FIRE_TIME) == time:
            ctx.clear_state(self.FIRE_TIME)
            self._register_next(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.merge_state(self.FIRE_TIME)
        fire_time = ctx.get_state(self.FIRE_TIME)
        if fire_time is not None:
            ctx.register_event_time_timer(fire_time)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        fire_time = ctx.get_state(self.FIRE_TIME)
        if fire_time is not None:
            ctx.delete_event_time_timer(fire_time)
            ctx.clear_state(self.FIRE_TIME)
        # Flink leaves the end timer behind; on processing-time windows it would outlive the
        # window, so it goes too (no output changes).
        ctx.delete_event_time_timer(window.max_timestamp)

    def fire_time(self, state: Mapping[str, Any]) -> Any:
        """The chain's next fire time in a window's stored trigger state (the operator's name ->
        value mapping), None when it holds none: what the vectorised kernel checks on restore."""
        return state.get(self.FIRE_TIME.name)

    def _register_next(self, time: int, window: TimeWindow, ctx: TriggerContext) -> None:
        if chain_ends(window, ctx.current_watermark()):
            return
        fire_time = next_fire_time(time, self.interval, window)
        ctx.set_state(self.FIRE_TIME, fire_time)
        ctx.register_event_time_timer(fire_time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "interval": format_duration(self.interval)}
