"""Flink's ``WindowOperator`` for one key with event-time session windows, as a lean sweep.

The same procedure as :class:`~spark_jobs.core.engine.operator.KeyedWindowOperator` for merging windows,
giving the same panes, late records and state rows (byte for byte: either engine resumes from the other's
state), at a fraction of its per-record cost. Sessions cannot be vectorised like
:mod:`~spark_jobs.core.engine.window_kernel`'s fixed windows: whether a record is late, and which windows it
merges, depends on every session open before it. So this stays one pass over the key's records in
replay order, but one that does only what a session needs:

* the open sessions are a list sorted by start (they never intersect: intersecting ones merged),
  so a record finds the sessions its window ``[t, t + gap)`` touches by bisection, instead of the
  operator's ``merge_windows`` over every open window;
* only event-time timers exist (a processing-time one is declined), in one heap keyed by the
  replay position they fire at, looked at only when one is due before the next record;
* window ends and cleanup times are plain arithmetic (timestamps near the ends of time, where
  Flink's saturation would matter, are declined);
* the trigger and the pane are the pipeline's own objects, called as the operator calls them and
  through the operator's own trigger context (``WindowContext``), so their rules stay in one place.

Scope (:func:`supports`): event-time session windows; the built-in event-time triggers
(``EventTimeTrigger``, ``ContinuousEventTimeTrigger``, ``CountTrigger``, purging or not); any pane
that does not read the whole record (no join, keyed process function, or user function needing
the element). :func:`process_key` declines (returns None, and the caller runs the per-record
operator) what it does not reproduce: extreme timestamps, restored state it does not recognise
(processing-time timers, sessions that intersect), a trigger that leaves state behind. Declining
never changes results, only the cost.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from heapq import heappop
from typing import Any

from .. import rules
from ..durations import MAX_TIMESTAMP, clear_of_saturation
from ..rules import element_timing, timer_timing
from ..triggers import ContinuousEventTimeTrigger, CountTrigger, EventTimeTrigger, PurgingTrigger
from ..watermarks import Timeline
from ..windows import SessionWindows, TimeWindow
from .model import KeyOutput, LateRecord, Pane, WindowStateRow
from .operator import (
    STEP_ELEMENT,
    STEP_EVENT_TIMER,
    OperatorSpec,
    WindowContext,
    WindowStateRows,
    by_namespace,
)

_EVENT_TIME_TRIGGERS = (EventTimeTrigger, ContinuousEventTimeTrigger, CountTrigger)


class _Decline(Exception):
    """The input is outside what the kernel reproduces exactly: the per-record operator runs it."""


def supports(spec: OperatorSpec) -> bool:
    """Whether the kernel covers this pipeline (it may still decline a particular input)."""
    assigner, trigger = spec.assigner, spec.trigger
    if spec.process is not None or spec.two_inputs or spec.needs_element:
        return False
    if type(assigner) is not SessionWindows or assigner.time != "event":
        return False
    nested = trigger.nested if type(trigger) is PurgingTrigger else trigger
    return type(nested) in _EVENT_TIME_TRIGGERS and not getattr(spec.pane, "rows_per_firing", False)


def process_key(
    spec: OperatorSpec,
    timeline: Timeline,
    state: Iterable[WindowStateRow],
    seqs: Sequence[int],
    timestamps: Sequence[int],
    values: Sequence[tuple[Any, ...]],
    key: tuple[Any, ...] = (),
) -> KeyOutput | None:
    """One key's batch, as ``keyed.process_key`` runs it, or None where the kernel declines.

    ``seqs`` (strictly increasing), ``timestamps`` and ``values`` (one tuple per record) are Python
    sequences, as the per-record operator takes them.
    """
    if not supports(spec):
        return None
    try:
        return _Run(spec, timeline, key).run(list(state), seqs, timestamps, values)
    except _Decline:
        return None


class _Window:
    __slots__ = ("contents", "pane_count", "cleanup_registered")

    def __init__(self, contents: Any = None, pane_count: int = 0):
        self.contents = contents
        self.pane_count = pane_count
        #: Whether its cleanup timer is pending: set once, as nothing deletes it while it is open.
        self.cleanup_registered = False


class _Points:
    """A time domain's pending timers as the trigger context reaches them (``points``)."""

    __slots__ = ("points",)

    def __init__(self, points: dict[tuple[int, TimeWindow], int | None]):
        self.points = points


class _Run(WindowStateRows):
    """One key's batch: restore, sweep the records and due timers, dump."""

    window_state = _Window

    def __init__(self, spec: OperatorSpec, timeline: Timeline, key: tuple[Any, ...]):
        self.spec = spec
        self.timeline = timeline
        self.key = key
        self.gap = spec.assigner.gap
        self.lateness = spec.allowed_lateness
        self.trigger = spec.trigger
        self.pane = spec.pane
        self.adv_seq, self.adv_wm = timeline.adv_seq, timeline.adv_wm
        self.windows: dict[TimeWindow, _Window] = {}
        self.opened: list[TimeWindow] = []  # the open sessions, sorted by start, disjoint
        self.trigger_state: dict[TimeWindow, dict[str, Any]] = {}
        #: Pending event-time timers: (time, window) -> index of the watermark advance firing it
        #: (None: beyond this batch); the heap holds (advance's seq, time, window, index).
        self.timers: dict[tuple[int, TimeWindow], int | None] = {}
        self.heap: list[tuple[int, int, TimeWindow, int]] = []
        self.event_timers, self.processing_timers = _Points(self.timers), _Points({})
        self.panes: list[Pane] = []
        self.late: list[LateRecord] = []
        self.ctx = WindowContext(self)
        # The moment: replay position, watermark in force, and the first watermark advance a timer
        # registered now can fire at (Timeline.event_timer_point's lower bound).
        self.seq = timeline.seq_start - 1
        self.phase = STEP_EVENT_TIMER
        self.watermark = timeline.start_watermark
        self.lowest_advance = bisect_left(self.adv_seq, self.seq)
        self.clock = timeline.start_clock

    # ---- what the trigger context calls --------------------------------------------------------
    def register_event_time_timer(self, time: int, window: TimeWindow) -> None:
        timers = self.timers
        if (time, window) in timers:
            return  # most calls: the timer is pending already
        point = bisect_left(self.adv_wm, time, self.lowest_advance)
        if point < len(self.adv_wm):
            timers[(time, window)] = point
            heapq.heappush(self.heap, (self.adv_seq[point], time, window, point))
        else:
            timers[(time, window)] = None

    def register_processing_time_timer(self, time: int, window: TimeWindow) -> None:
        raise _Decline

    def check_time(self, low: int, high: int) -> None:
        """Decline timestamps near the ends of time, where window ends and cleanup times would
        saturate (the operator's ``saturating_add``), which the kernel does not model."""
        if not clear_of_saturation(low, high, self.gap + self.lateness):
            raise _Decline

    # ---- the batch -----------------------------------------------------------------------------
    def run(self, state: list[WindowStateRow], seqs: Sequence[int], timestamps: Sequence[int],
            values: Sequence[tuple[Any, ...]]) -> KeyOutput:
        n = len(seqs)
        if len(timestamps) != n or len(values) != n:
            raise _Decline
        if n:
            self.check_time(min(timestamps), max(timestamps))
        self._restore(state)
        timeline = self.timeline
        advances, clocks = timeline.record_points(seqs)
        adv_wm, clk_val = self.adv_wm, timeline.clk_val
        start_watermark, start_clock = timeline.start_watermark, timeline.start_clock
        heap, timers, windows, opened = self.heap, self.timers, self.windows, self.opened
        trigger, pane, ctx = self.trigger, self.pane, self.ctx
        gap, lateness, late = self.gap, self.lateness, self.late
        # The operator's process_element for a session window [t, t + gap), inlined: this loop is
        # the kernel's whole per-record cost.
        for seq, timestamp, record_values, advance, clock in zip(seqs, timestamps, values, advances, clocks,
                                                                 strict=True):
            while heap and heap[0][0] < seq:
                time, window, point = heap[0][1:]
                if timers.get((time, window), -1) == point:
                    self._fire_timers(seq)
                    break
                heappop(heap)  # a timer deleted or registered again since: most due entries
            self.seq, self.phase, self.lowest_advance = seq, STEP_ELEMENT, advance
            watermark = self.watermark = adv_wm[advance - 1] if advance else start_watermark
            self.clock = clk_val[clock - 1] if clock else start_clock
            # Flink's MergingWindowSet.addWindow with SessionWindows.merge_windows's rule (windows
            # merge when they intersect, touching included): find the open sessions the record's
            # window touches (a run of the sorted list, ending at the last one starting by its end).
            end = timestamp + gap
            high = bisect_right(opened, (end, MAX_TIMESTAMP))
            low = high
            while low and opened[low - 1].end >= timestamp:
                low -= 1
            if high - low == 1 and opened[low].start <= timestamp and opened[low].end >= end:
                window = opened[low]  # inside an open session: nothing changes
            elif low == high:
                window = TimeWindow(timestamp, end)
                windows[window] = _Window()
                opened.insert(low, window)
            else:
                members = opened[low:high]
                window = TimeWindow(min(members[0].start, timestamp), max(members[-1].end, end))
                self._merge(window, members, low, high)
            state = windows[window]
            cleanup = rules.kernel_cleanup_time(window.end - 1, lateness)
            if rules.is_window_late(cleanup, watermark):  # Flink retires it
                del windows[window]
                opened.remove(window)
                if rules.kernel_element_late(timestamp, lateness, watermark):
                    late.append(LateRecord(seq, watermark))
                continue
            contents = state.contents
            state.contents = pane.add(pane.create() if contents is None else contents, seq, timestamp,
                                      record_values, None)
            ctx.window = window
            result = trigger.on_element(None, timestamp, window, ctx)
            if result.is_fire:
                self._emit(window, state, element_timing(watermark, window), None)
            if result.is_purge:
                state.contents = None
            if not state.cleanup_registered:  # registered once per window: the same call after is a no-op
                self.register_event_time_timer(cleanup, window)
                state.cleanup_registered = True
        self._fire_timers(None)
        return KeyOutput(self.panes, self.late, self.dump_state(), [])

    def _merge(self, cover: TimeWindow, merged: list[TimeWindow], low: int, high: int) -> None:
        """The operator's ``_merge``: the trigger merges, the merged windows are cleared and their
        contents folded (in window order) into the cover, a new window with no pane yet."""
        ctx, trigger, timers, pane = self.ctx, self.trigger, self.timers, self.pane
        ctx.window, ctx.merged = cover, merged
        trigger.on_merge(cover, ctx)
        ctx.merged = ()
        for window in merged:
            ctx.window = window
            trigger.clear(window, ctx)
            cleanup = rules.kernel_cleanup_time(window.end - 1, self.lateness)
            timers.pop((cleanup, window), None)  # its cleanup timer
        contents = None
        for window in merged:
            state = self.windows.pop(window)
            if state.contents is not None:
                contents = state.contents if contents is None else pane.merge(contents, state.contents)
        self.opened[low:high] = [cover]
        self.windows[cover] = _Window(contents)

    def _fire_timers(self, before_seq: int | None) -> None:
        """Every pending timer due before record ``before_seq`` (None: all), in the operator's order
        (replay position, time, window); timers they register join in."""
        heap, timers, adv_wm = self.heap, self.timers, self.adv_wm
        while heap and (before_seq is None or heap[0][0] < before_seq):
            seq, time, window, point = heapq.heappop(heap)
            if timers.get((time, window), -1) != point:
                continue  # deleted, or registered again: a stale entry
            del timers[(time, window)]
            self.seq, self.phase, self.lowest_advance = seq, STEP_EVENT_TIMER, point
            self.watermark, self.clock = adv_wm[point], self.timeline.clock_at(seq)
            state = self.windows.get(window)
            if state is None:
                continue  # a timer of a window merged away: nothing to do (as in Flink)
            ctx = self.ctx
            ctx.window = window
            result = self.trigger.on_event_time(time, window, ctx)
            if result.is_fire and state.contents is not None:
                self._emit(window, state, timer_timing(time, window), time)
            if result.is_purge:
                state.contents = None
            if time == window.end - 1 + self.lateness:
                self._clear_all_state(window)

    def _clear_all_state(self, window: TimeWindow) -> None:
        del self.windows[window]
        self.opened.remove(window)
        self.ctx.window = window
        self.trigger.clear(window, self.ctx)
        if window in self.trigger_state or any(other == window for _, other in self.timers):
            raise _Decline  # the trigger left state or timers behind: the operator reports the leak

    def _emit(self, window: TimeWindow, state: _Window, timing: str, fire_time: int | None) -> None:
        values, state.contents = self.pane.fire(state.contents, self.key, window, state.pane_count)
        self.panes.append(Pane(window, state.pane_count, timing, self.watermark, self.clock, fire_time,
                               values, self.seq, self.phase))
        state.pane_count += 1

    # ---- state ---------------------------------------------------------------------------------
    def _restore(self, rows: list[WindowStateRow]) -> None:
        """The operator's ``load_state``, declining rows it does not know (a processing-time
        timer declines as it registers)."""
        windows = [TimeWindow(*(int(v) for v in row.window)) for row in rows]
        if len(set(windows)) != len(windows):
            raise _Decline  # the operator would keep the last of two rows for a window
        for window in windows:
            self.check_time(window.start, window.end)
        try:
            self.load_state(rows)
        except (ValueError, TypeError) as error:
            raise _Decline from error
        self.opened = sorted(self.windows)
        for window, state in self.windows.items():
            cleanup = rules.kernel_cleanup_time(window.end - 1, self.lateness)
            state.cleanup_registered = (cleanup, window) in self.timers
        for before, after in zip(self.opened, self.opened[1:], strict=False):
            if before.end >= after.start:
                raise _Decline  # intersecting sessions: the operator would merge them

    def timers_by_namespace(self) -> tuple[dict[TimeWindow, list[int]], dict[TimeWindow, list[int]]]:
        return by_namespace(self.timers), {}
