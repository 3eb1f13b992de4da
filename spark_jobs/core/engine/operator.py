"""Flink's ``WindowOperator`` for one key, driven over a micro-batch's :class:`Timeline`.

One clear per-record procedure (``process_element``), a timer path that mirrors it
(``on_event_time`` / ``on_processing_time``), and Flink's helpers (``is_window_late``,
``is_element_late``, ``cleanup_time``, ``register_cleanup_timer``, ``clear_all_state``,
``emit_window_contents``). Triggers are consulted through a reusable context pointed at one
window at a time.

Positions order everything that happens to a key: record ``s`` is at ``(s, 1)``; processing-time
timers fire before it at ``(s, 0)`` when the clock advanced there; event-time timers fire after
it at ``(s, 2)`` when the watermark advanced there. A timer is placed on the timeline when it is
registered, so a key only wakes up where something can happen to it.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import rules
from ..durations import MAX_TIMESTAMP
from ..rules import element_timing, timer_timing
from ..triggers.base import StateDescriptor, Trigger, TriggerResult
from ..watermarks import Timeline
from ..windows.base import TimeWindow, WindowAssigner

# The shared types live in model; imported from here by older code, so they stay importable here.
from .model import LateRecord, Pane, WindowStateRow

STEP_PROCESSING_TIMER, STEP_ELEMENT, STEP_EVENT_TIMER = 0, 1, 2
LATE_REASON = "window_closed"


@dataclass(frozen=True)
class OperatorSpec:
    """Everything the operator needs that is the same for every key."""

    assigner: WindowAssigner
    trigger: Trigger
    #: What a firing computes: ``functions.IncrementalPane`` or ``functions.BufferedPane``.
    pane: Any
    allowed_lateness: int = 0
    #: A keyed process function (``spark_jobs.core.engine.process``) instead of windows, with its outputs.
    process: Any = None
    output_names: tuple[str, ...] = ()
    #: A join: records carry their input (0 left, 1 right) as their only value.
    two_inputs: bool = False

    @property
    def needs_element(self) -> bool:
        return self.process is not None or self.trigger.needs_element or self.pane.needs_element


@dataclass
class _Window:
    contents: list[Any] | None = None
    pane_count: int = 0


@dataclass
class _Timers:
    """One time domain's timers: a set of (time, window) with a position on the timeline each."""

    points: dict[tuple[int, TimeWindow], int | None] = field(default_factory=dict)
    heap: list[tuple[int, int, TimeWindow, int]] = field(default_factory=list)

    def peek(self) -> tuple[int, int, TimeWindow, int] | None:
        heap, points = self.heap, self.points
        while heap:
            position, time, window, point = heap[0]
            if points.get((time, window), -1) == point:
                return heap[0]
            heapq.heappop(heap)  # deleted or re-registered: stale entry
        return None


class TimelineDriver:
    """Runs one key's records and timers in replay order over a batch's :class:`Timeline`.

    Subclasses implement ``process_element``, ``on_event_time`` and ``on_processing_time``; timers
    are ``(time, namespace)`` pairs (the namespace is a window for the window operator), one per
    pair, each placed on the timeline when registered.
    """

    def __init__(self, timeline: Timeline, key: tuple[Any, ...] = ()):
        self.timeline = timeline
        self.key = key
        self.event_timers = _Timers()
        self.processing_timers = _Timers()
        self.seq = timeline.seq_start - 1
        self.phase = STEP_EVENT_TIMER
        self.watermark = timeline.start_watermark
        self.clock = timeline.start_clock
        #: The record ``process`` is at, with its ``Timeline.record_points``: (seq, advances
        #: before it, clock advances up to it).
        self._record: tuple[int, int, int] | None = None

    def process(
        self,
        seqs: Sequence[int],
        timestamps: Sequence[int],
        values: Sequence[tuple[Any, ...]],
        elements: Sequence[Any] | None = None,
    ) -> None:
        """Run the key's records (replay order) and every timer the timeline reaches."""
        timeline = self.timeline
        adv_seq, clk_seq = timeline.adv_seq, timeline.clk_seq
        # Where each record falls on the timeline, for all of them at once (not a search each).
        advances, clocks = timeline.record_points(seqs)
        n = len(seqs)
        i = 0
        while True:
            record_position = seqs[i] * 4 + STEP_ELEMENT if i < n else None
            event = self.event_timers.peek()
            processing = self.processing_timers.peek()
            best = record_position
            if event is not None and (best is None or event[0] < best):
                best = event[0]
            if processing is not None and (best is None or processing[0] < best):
                best = processing[0]
            if best is None:
                self._record = None
                return
            if best == record_position:
                element = elements[i] if elements is not None else None
                self._record = (seqs[i], advances[i], clocks[i])
                self.process_element(seqs[i], timestamps[i], values[i], element)
                i += 1
            elif event is not None and best == event[0]:
                heapq.heappop(self.event_timers.heap)
                _, time, namespace, point = event
                self.seq, self.phase = adv_seq[point], STEP_EVENT_TIMER
                self.watermark = timeline.adv_wm[point]
                self.clock = timeline.clock_at(self.seq)
                self.on_event_time(time, namespace)
            else:
                heapq.heappop(self.processing_timers.heap)
                _, time, namespace, point = processing
                self.seq, self.phase = clk_seq[point], STEP_PROCESSING_TIMER
                self.watermark = timeline.watermark_before(self.seq)
                self.clock = timeline.clk_val[point]
                self.on_processing_time(time, namespace)

    def enter_element(self, seq: int) -> None:
        """Point the clocks at record ``seq`` (the watermark emitted after the previous record)."""
        self.seq, self.phase = seq, STEP_ELEMENT
        timeline, record = self.timeline, self._record
        if record is None or record[0] != seq:
            self.watermark = timeline.watermark_before(seq)
            self.clock = timeline.clock_at(seq)
            return
        _, advances, clocks = record
        self.watermark = timeline.adv_wm[advances - 1] if advances else timeline.start_watermark
        self.clock = timeline.clk_val[clocks - 1] if clocks else timeline.start_clock

    def process_element(self, seq: int, timestamp: int, values: tuple[Any, ...], element: Any) -> None:
        raise NotImplementedError

    def on_event_time(self, time: int, namespace: Any) -> None:
        raise NotImplementedError

    def on_processing_time(self, time: int, namespace: Any) -> None:
        raise NotImplementedError

    def register_event_time_timer(self, time: int, namespace: Any) -> None:
        timers = self.event_timers
        if (time, namespace) in timers.points:
            return
        record = self._record
        if self.phase == STEP_ELEMENT and record is not None and record[0] == self.seq:
            point = self.timeline.event_timer_point(time, self.seq, record[1])
        else:
            point = self.timeline.event_timer_point(time, self.seq)
        timers.points[(time, namespace)] = point
        if point is not None:
            heapq.heappush(timers.heap, (self.timeline.adv_seq[point] * 4 + 2, time, namespace, point))

    def register_processing_time_timer(self, time: int, namespace: Any) -> None:
        timers = self.processing_timers
        if (time, namespace) in timers.points:
            return
        inclusive = self.phase == STEP_PROCESSING_TIMER
        point = self.timeline.processing_timer_point(time, self.seq, inclusive)
        timers.points[(time, namespace)] = point
        if point is not None:
            heapq.heappush(timers.heap, (self.timeline.clk_seq[point] * 4, time, namespace, point))

    def timers_by_namespace(self) -> tuple[dict[Any, list[int]], dict[Any, list[int]]]:
        """Pending event-time and processing-time timers, grouped by namespace (for dumping)."""
        return by_namespace(self.event_timers.points), by_namespace(self.processing_timers.points)


def by_namespace(points: Iterable[tuple[int, Any]]) -> dict[Any, list[int]]:
    """Timers keyed ``(time, namespace)`` as ``{namespace: [time, ...]}``."""
    grouped: dict[Any, list[int]] = {}
    for time, namespace in points:
        grouped.setdefault(namespace, []).append(time)
    return grouped


def restore_timers(owner: Any, row: WindowStateRow, namespace: Any) -> None:
    """Register a state row's pending timers with ``owner`` under ``namespace``: the inverse of
    dumping them through ``by_namespace``."""
    for time in row.event_timers or ():
        owner.register_event_time_timer(int(time), namespace)
    for time in row.processing_timers or ():
        owner.register_processing_time_timer(int(time), namespace)


class WindowStateRows:
    """A window operator's state as ``WindowStateRow`` rows: ``load_state`` before a batch,
    ``dump_state`` after it (one format, whichever engine ran the key).

    Its users hold ``windows`` (window -> state with ``contents`` and ``pane_count``, built by
    ``window_state``), ``trigger_state``, ``pane``, the two ``register_*_timer`` methods and
    ``timers_by_namespace``."""

    window_state: Any = None  # the class of a window's state, called as (contents, pane_count)

    def load_state(self, rows: Iterable[WindowStateRow]) -> None:
        for row in rows:
            window = TimeWindow(*row.window)
            if row.is_open:
                contents = None
                if row.contents is not None:
                    contents = self.pane.from_json(json.loads(row.contents))
                self.windows[window] = self.window_state(contents, row.pane_count)
            if row.trigger_state:
                self.trigger_state[window] = json.loads(row.trigger_state)
            restore_timers(self, row, window)

    def dump_state(self) -> list[WindowStateRow]:
        events, processing = self.timers_by_namespace()
        windows = set(self.windows) | set(self.trigger_state) | set(events) | set(processing)
        rows = []
        for window in sorted(windows):
            state = self.windows.get(window)
            trigger_state = self.trigger_state.get(window)
            rows.append(
                WindowStateRow(
                    window,
                    state is not None,
                    state.pane_count if state else 0,
                    None
                    if state is None or state.contents is None
                    else json.dumps(self.pane.to_json(state.contents)),
                    json.dumps(trigger_state, sort_keys=True) if trigger_state else None,
                    sorted(events.get(window, [])),
                    sorted(processing.get(window, [])),
                )
            )
        return rows


class KeyedWindowOperator(TimelineDriver, WindowStateRows):
    """The window operator for one key. Load its state, ``process`` a batch, dump its state."""

    window_state = _Window

    def __init__(self, spec: OperatorSpec, timeline: Timeline, key: tuple[Any, ...] = ()):
        super().__init__(timeline, key)
        self.spec = spec
        self.assigner = spec.assigner
        self.trigger = spec.trigger
        self.pane = spec.pane
        self.merging = spec.assigner.merging
        self.event_time = spec.assigner.is_event_time
        self.windows: dict[TimeWindow, _Window] = {}
        self.trigger_state: dict[TimeWindow, dict[str, Any]] = {}
        self.panes: list[Pane] = []
        self.late: list[LateRecord] = []
        self.leaks: list[str] = []
        self.ctx = WindowContext(self)
        self._cleanup_times: dict[TimeWindow, int] = {}

    # ---- Flink's WindowOperator ----------------------------------------------------------------
    def process_element(self, seq: int, timestamp: int, values: tuple[Any, ...], element: Any) -> None:
        self.enter_element(seq)
        assign_time = timestamp if self.event_time else self.clock
        skipped = True
        for window in self.assigner.assign(assign_time):
            if self.merging:
                window = self.add_merging_window(window)
                if self.is_window_late(window):
                    self.windows.pop(window, None)  # Flink's retireWindow
                    continue
            elif self.is_window_late(window):
                continue
            skipped = False
            state = self.windows.get(window)
            if state is None:
                state = self.windows[window] = _Window()
            if state.contents is None:
                state.contents = self.pane.create()
            state.contents = self.pane.add(state.contents, seq, timestamp, values, element)
            self.ctx.window = window
            result = self.trigger.on_element(element, timestamp, window, self.ctx)
            if result.is_fire:
                self.emit_window_contents(window, state, self.element_timing(window), None)
            if result.is_purge:
                state.contents = None
            self.register_cleanup_timer(window)
        if skipped and self.is_element_late(timestamp):
            self.late.append(LateRecord(seq, self.watermark))

    def on_event_time(self, time: int, window: TimeWindow) -> None:
        del self.event_timers.points[(time, window)]
        self._on_timer(time, window, self.trigger.on_event_time, self.event_time)

    def on_processing_time(self, time: int, window: TimeWindow) -> None:
        del self.processing_timers.points[(time, window)]
        self._on_timer(time, window, self.trigger.on_processing_time, not self.event_time)

    def _on_timer(self, time: int, window: TimeWindow, hook: Any, cleans_up: bool) -> None:
        state = self.windows.get(window)
        if self.merging and state is None:
            return  # a timer of a window merged away: nothing to do (as in Flink)
        self.ctx.window = window
        result: TriggerResult = hook(time, window, self.ctx)
        if result.is_fire and state is not None and state.contents is not None:
            self.emit_window_contents(window, state, timer_timing(time, window), time)
        if result.is_purge and state is not None:
            state.contents = None
        if cleans_up and time == self.cleanup_time(window):
            self.clear_all_state(window)

    def is_window_late(self, window: TimeWindow) -> bool:
        return self.event_time and rules.is_window_late(self.cleanup_time(window), self.watermark)

    def is_element_late(self, timestamp: int) -> bool:
        lateness = self.spec.allowed_lateness
        return self.event_time and rules.is_element_late(timestamp, lateness, self.watermark)

    def cleanup_time(self, window: TimeWindow) -> int:
        time = self._cleanup_times.get(window)
        if time is None:
            time = rules.cleanup_time(window.max_timestamp, self.spec.allowed_lateness, self.event_time)
            self._cleanup_times[window] = time
        return time

    def register_cleanup_timer(self, window: TimeWindow) -> None:
        time = self.cleanup_time(window)
        if time == MAX_TIMESTAMP:
            return  # the global window is never cleaned up
        if self.event_time:
            self.register_event_time_timer(time, window)
        else:
            self.register_processing_time_timer(time, window)

    def delete_cleanup_timer(self, window: TimeWindow) -> None:
        time = self.cleanup_time(window)
        if time == MAX_TIMESTAMP:
            return
        timers = self.event_timers if self.event_time else self.processing_timers
        timers.points.pop((time, window), None)

    def clear_all_state(self, window: TimeWindow) -> None:
        self.windows.pop(window, None)
        self.ctx.window = window
        self.trigger.clear(window, self.ctx)
        self._check_cleared(window)

    def emit_window_contents(
        self, window: TimeWindow, state: _Window, timing: str, fire_time: int | None
    ) -> None:
        values, state.contents = self.pane.fire(state.contents, self.key, window, state.pane_count)
        # A join pane emits one row per pair (possibly none); every other pane one row.
        rows = values if getattr(self.pane, "rows_per_firing", False) else [values]
        for row in rows:
            self.panes.append(Pane(window, state.pane_count, timing, self.watermark, self.clock,
                                   fire_time, row, self.seq, self.phase))
        state.pane_count += 1

    def element_timing(self, window: TimeWindow) -> str:
        return element_timing(self.watermark if self.event_time else self.clock, window)

    # ---- merging windows (Flink's MergingWindowSet.addWindow) ---------------------------------
    def add_merging_window(self, new_window: TimeWindow) -> TimeWindow:
        groups = self.assigner.merge_windows([*self.windows, new_window])
        result, merged_new = new_window, False
        for cover, members in groups:
            members = list(members)
            if new_window in members:
                members.remove(new_window)
                merged_new, result = True, cover
            if len(members) == 1 and members[0] == cover:
                continue  # the new window lies inside an existing one: nothing changes
            self._merge(cover, members)
        if not groups or (result == new_window and not merged_new):
            self.windows.setdefault(new_window, _Window())
        return result

    def _merge(self, cover: TimeWindow, merged: list[TimeWindow]) -> None:
        self.ctx.window, self.ctx.merged = cover, merged
        self.trigger.on_merge(cover, self.ctx)
        self.ctx.merged = ()
        for window in merged:
            self.ctx.window = window
            self.trigger.clear(window, self.ctx)
            self.delete_cleanup_timer(window)
        contents = None
        for window in sorted(merged):
            state = self.windows.pop(window, None)
            if state is not None and state.contents is not None:
                if contents is None:
                    contents = state.contents
                else:
                    contents = self.pane.merge(contents, state.contents)
        target = self.windows.setdefault(cover, _Window())
        if contents is not None:
            target.contents = (
                contents if target.contents is None else self.pane.merge(target.contents, contents)
            )

    # ---- timers --------------------------------------------------------------------------------
    def _check_cleared(self, window: TimeWindow) -> None:
        """Flag a trigger that left timers or state behind after ``clear`` (a state leak)."""
        leftovers = [f"state {name}" for name in self.trigger_state.pop(window, {})]
        for label, timers in (("event", self.event_timers), ("processing", self.processing_timers)):
            for time, other in [key for key in timers.points if key[1] == window]:
                leftovers.append(f"{label} timer {time}")
                del timers.points[(time, other)]
        if leftovers:
            self.leaks.append(f"{self.trigger!r} left {', '.join(leftovers)} for window {window}")


class WindowContext:
    """The reusable trigger context (Flink's ``triggerContext``), pointed at one window.

    ``op`` is the window operator, or anything with its clocks (``watermark``, ``clock``), timer
    registration, timer ``points`` and ``trigger_state`` (the session kernel)."""

    __slots__ = ("op", "window", "merged")

    def __init__(self, op: Any):
        self.op = op
        self.window: TimeWindow | None = None
        self.merged: Sequence[TimeWindow] = ()

    def current_watermark(self) -> int:
        return self.op.watermark

    def current_processing_time(self) -> int:
        return self.op.clock

    def register_event_time_timer(self, time: int) -> None:
        self.op.register_event_time_timer(time, self.window)

    def register_processing_time_timer(self, time: int) -> None:
        self.op.register_processing_time_timer(time, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self.op.event_timers.points.pop((time, self.window), None)

    def delete_processing_time_timer(self, time: int) -> None:
        self.op.processing_timers.points.pop((time, self.window), None)

    def get_state(self, descriptor: StateDescriptor) -> Any:
        values = self.op.trigger_state.get(self.window)
        return None if values is None else values.get(descriptor.name)

    def set_state(self, descriptor: StateDescriptor, value: Any) -> None:
        self.op.trigger_state.setdefault(self.window, {})[descriptor.name] = value

    def clear_state(self, descriptor: StateDescriptor) -> None:
        values = self.op.trigger_state.get(self.window)
        if values is not None:
            values.pop(descriptor.name, None)
            if not values:
                del self.op.trigger_state[self.window]

    def merge_state(self, descriptor: StateDescriptor) -> None:
        # Flink moves the merged windows' values into the result (they are gone afterwards).
        merged = self.get_state(descriptor)
        for window in self.merged:
            values = self.op.trigger_state.get(window)
            if values is None or descriptor.name not in values:
                continue
            value = values.pop(descriptor.name)
            if not values:
                del self.op.trigger_state[window]
            merged = value if merged is None else descriptor.merge(merged, value)
        if merged is not None:
            self.set_state(descriptor, merged)
