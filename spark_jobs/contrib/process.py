"""A keyed process function: per-user inactivity alerts with custom rules, on event-time timers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.engine.process import KeyedProcessFunction, ProcessContext


@dataclass
class InactivityAlert(KeyedProcessFunction):
    """Emits ``session_end`` when a key has been silent for ``gap`` ms of event time (a timer
    re-armed by each record, the previous one deleted), with the session's event count; records
    whose ``value`` reaches ``big`` also go to the side output ``big_spend``."""

    gap: int = 30_000
    big: float = 9.0

    def process_element(self, record: dict[str, Any], ctx: ProcessContext) -> None:
        state = ctx.state
        if state.get("timer") is not None:
            ctx.delete_event_time_timer(state["timer"])
        state["events"] = state.get("events", 0) + 1
        state["last_seen"] = max(state.get("last_seen", ctx.timestamp), ctx.timestamp)
        state["timer"] = state["last_seen"] + self.gap
        ctx.register_event_time_timer(state["timer"])
        value = record.get("value")
        if isinstance(value, int | float) and value >= self.big:
            ctx.side_output("big_spend", {"event_id": record.get("event_id"), "value": value})

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        state = ctx.state
        ctx.emit({"kind": "session_end", "last_seen": state["last_seen"], "events": state["events"]})
        state.clear()  # nothing left for this key: its state row disappears
