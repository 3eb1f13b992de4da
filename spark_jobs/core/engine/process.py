"""Keyed process functions with timers: per-key logic that windows do not fit.

A user subclasses :class:`KeyedProcessFunction` and names it in the pipeline config::

    process:
      class: spark_jobs.contrib.process.InactivityAlert
      params: {gap: 30000}
      output: {kind: string, last_seen: long, events: long}

``process_element(record, ctx)`` sees every record of a key in replay order;
``on_timer(timestamp, ctx)`` runs when an event-time timer (watermark) or a processing-time
timer (replay clock) fires. Timers are one per key and timestamp and can be deleted; ``ctx.state``
is a JSON-serialisable dict kept per key in the Delta state table (it survives resumed runs);
``ctx.emit(row)`` writes a row to ``process_results`` and ``ctx.side_output(tag, row)`` one to
``side_outputs``. The same timeline driver as the window operator runs it, so results do not
depend on the batch size either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from ..watermarks import Timeline
from ..windows.base import GLOBAL_WINDOW, TimeWindow
from .model import LateRecord, Pane, WindowStateRow
from .operator import STEP_ELEMENT, TimelineDriver, restore_timers

#: Namespace of a key's timers and of its single state row.
KEY_NAMESPACE = TimeWindow(GLOBAL_WINDOW.start, GLOBAL_WINDOW.start)
EVENT_TIME, PROCESSING_TIME = "event", "processing"


class KeyedProcessFunction:
    """Override ``process_element`` and, if you register timers, ``on_timer``."""

    def process_element(self, record: dict[str, Any], ctx: ProcessContext) -> None:
        raise NotImplementedError

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        """Called when a timer fires; ``ctx.time_domain`` says which kind."""


@dataclass(frozen=True)
class SideOutput:
    tag: str
    payload: str  # JSON
    watermark: int
    replay_clock: int
    emit_seq: int
    emit_step: int


class ProcessContext:
    """What a process function may see and do for the current key."""

    def __init__(self, op: KeyedProcessOperator):
        self._op = op
        self.timestamp: int | None = None
        self.time_domain: str | None = None
        #: Which input the current record came from in a two-input pipeline (0 left, 1 right).
        self.input: int | None = None

    @property
    def seq(self) -> int:
        """The replay sequence number of the current record (or of the point a timer fired at)."""
        return self._op.seq

    @property
    def key(self) -> tuple[Any, ...]:
        return self._op.key

    @property
    def state(self) -> dict[str, Any]:
        return self._op.state

    def current_watermark(self) -> int:
        return self._op.watermark

    def current_processing_time(self) -> int:
        return self._op.clock

    def register_event_time_timer(self, time: int) -> None:
        self._op.register_event_time_timer(timer_time(time), KEY_NAMESPACE)

    def register_processing_time_timer(self, time: int) -> None:
        self._op.register_processing_time_timer(timer_time(time), KEY_NAMESPACE)

    def delete_event_time_timer(self, time: int) -> None:
        self._op.event_timers.points.pop((int(time), KEY_NAMESPACE), None)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.processing_timers.points.pop((int(time), KEY_NAMESPACE), None)

    def emit(self, row: dict[str, Any]) -> None:
        self._op.emit(row)

    def side_output(self, tag: str, row: dict[str, Any]) -> None:
        self._op.side(tag, row)

    def mark_late(self) -> None:
        """Send the current record to ``late_events`` (it was behind the watermark)."""
        self._op.late.append(LateRecord(self._op.seq, self._op.watermark))


def timer_time(time: Any) -> int:
    """A timer's time as a user function gave it, refused (at the call, in its stack) when the
    state rows' 64-bit timers cannot hold it: Java's long would have wrapped around."""
    value = int(time)
    if not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise ValueError(f"a timer at {value} ms is outside the 64-bit times (-2**63 to 2**63-1)")
    return value


class KeyedProcessOperator(TimelineDriver):
    """Drives a :class:`KeyedProcessFunction` for one key over a batch."""

    def __init__(self, function: KeyedProcessFunction, output_names: list[str], timeline: Timeline,
                 key: tuple[Any, ...] = (), two_inputs: bool = False):
        super().__init__(timeline, key)
        self.two_inputs = two_inputs
        self.function = function
        self.output_names = output_names
        self.state: dict[str, Any] = {}
        self.emitted = 0
        self.panes: list[Pane] = []
        self.sides: list[SideOutput] = []
        self.late: list[LateRecord] = []  # only what the function marks late (ctx.mark_late)
        self.leaks: list[str] = []
        self.ctx = ProcessContext(self)
        self._fire_time: int | None = None

    def process_element(self, seq: int, timestamp: int, values: tuple[Any, ...], element: Any) -> None:
        self.enter_element(seq)
        self.ctx.timestamp, self.ctx.time_domain, self._fire_time = timestamp, None, None
        # Two-input pipelines carry the input index as the record's only value.
        self.ctx.input = int(values[0]) if self.two_inputs else None
        self.function.process_element(element, self.ctx)

    def on_event_time(self, time: int, namespace: Any) -> None:
        del self.event_timers.points[(time, namespace)]
        self._on_timer(time, EVENT_TIME)

    def on_processing_time(self, time: int, namespace: Any) -> None:
        del self.processing_timers.points[(time, namespace)]
        self._on_timer(time, PROCESSING_TIME)

    def _on_timer(self, time: int, domain: str) -> None:
        self.ctx.timestamp, self.ctx.time_domain, self._fire_time = time, domain, time
        self.ctx.input = None
        self.function.on_timer(time, self.ctx)

    def emit(self, row: dict[str, Any]) -> None:
        values = [row.get(name) for name in self.output_names]
        self.panes.append(Pane(KEY_NAMESPACE, self.emitted, _timing(self.phase), self.watermark,
                               self.clock, self._fire_time, values, self.seq, self.phase))
        self.emitted += 1

    def side(self, tag: str, row: dict[str, Any]) -> None:
        self.sides.append(SideOutput(str(tag), json.dumps(row, sort_keys=True, default=str),
                                     self.watermark, self.clock, self.seq, self.phase))

    def load_state(self, rows: Iterable[WindowStateRow]) -> None:
        for row in rows:
            self.state = json.loads(row.contents) if row.contents else {}
            self.emitted = row.pane_count
            restore_timers(self, row, KEY_NAMESPACE)

    def dump_state(self) -> list[WindowStateRow]:
        events, processing = self.timers_by_namespace()
        # A key with no state and no timers leaves the table (its emission count restarts).
        if not (self.state or events or processing):
            return []
        return [WindowStateRow(
            KEY_NAMESPACE, True, self.emitted, json.dumps(self.state, sort_keys=True) if self.state else None,
            None, sorted(events.get(KEY_NAMESPACE, [])), sorted(processing.get(KEY_NAMESPACE, [])),
        )]


def _timing(phase: int) -> str:
    # Process-function rows have no window; `timing` says what caused them.
    return "ELEMENT" if phase == STEP_ELEMENT else "TIMER"
