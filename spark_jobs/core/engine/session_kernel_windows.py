"""The session kernel's sessions: the operator's window machinery over a sorted list of them.

What :class:`~spark_jobs.core.engine.operator.KeyedWindowOperator` does to merging windows (merge,
register and fire timers, emit, clear, load and dump state), for the open sessions of one key, with
the pane's contents kept symbolic (``session_contents``) and computed once the sweep is done. The
sweep over the records is ``session_kernel``'s.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from typing import Any

from .. import rules
from ..durations import clear_of_saturation
from ..rules import timer_timing
from ..watermarks import Timeline
from ..windows import TimeWindow
from .model import KeyOutput, LateRecord, Pane, WindowStateRow
from .operator import STEP_EVENT_TIMER, OperatorSpec, WindowContext, WindowStateRows, by_namespace
from .session_contents import AggregateShape, Book, Contents
from .window_kernel_inputs import Decline, check_contents


class Window:
    __slots__ = ("contents", "pane_count", "cleanup_registered")

    def __init__(self, contents: Contents | None = None, pane_count: int = 0):
        self.contents = contents
        self.pane_count = pane_count
        #: Whether its cleanup timer is pending: set once, as nothing deletes it while it is open.
        self.cleanup_registered = False


class _Points:
    """A time domain's pending timers as the trigger context reaches them (``points``)."""

    __slots__ = ("points",)

    def __init__(self, points: dict[tuple[int, TimeWindow], int | None]):
        self.points = points


class Sessions(WindowStateRows):
    """One key's open sessions, pending timers and firings, as the operator keeps them, and what
    it does to them: merge, fire timers, emit, clear, load and dump."""

    window_state = Window

    def __init__(self, spec: OperatorSpec, shape: AggregateShape, timeline: Timeline, key: tuple[Any, ...]):
        self.spec = spec
        self.shape = shape
        self.timeline = timeline
        self.key = key
        self.gap = spec.assigner.gap
        self.lateness = spec.allowed_lateness
        self.trigger = spec.trigger
        self.pane = spec.pane
        self.adv_seq, self.adv_wm = timeline.adv_seq, timeline.adv_wm
        self.windows: dict[TimeWindow, Window] = {}
        self.opened: list[TimeWindow] = []  # the open sessions, sorted by start, disjoint
        self.trigger_state: dict[TimeWindow, dict[str, Any]] = {}
        #: Pending event-time timers: (time, window) -> index of the watermark advance firing it
        #: (None: beyond this batch); the heap holds (advance's seq, time, window, index).
        self.timers: dict[tuple[int, TimeWindow], int | None] = {}
        self.heap: list[tuple[int, int, TimeWindow, int]] = []
        self.event_timers, self.processing_timers = _Points(self.timers), _Points({})
        #: The contents' values asked for, computed at the end (the kernel's ``run`` makes it, once
        #: it has read the columns).
        self.book: Book
        #: The firings, their values asked of ``book``: (request, the pane's other fields).
        self.fired: list[tuple[int, tuple[Any, ...]]] = []
        #: The open windows' accumulators asked of ``book`` once the sweep is done.
        self.dumps: list[tuple[Window, int]] = []
        self.late: list[LateRecord] = []
        self.ctx = WindowContext(self)
        # The moment: replay position, watermark in force, and the first watermark advance a timer
        # registered now can fire at (Timeline.event_timer_point's lower bound).
        self.seq = timeline.seq_start - 1
        self.phase = STEP_EVENT_TIMER
        self.watermark = timeline.start_watermark
        self.lowest_advance = bisect_left(self.adv_seq, self.seq)
        self._clock: int | None = timeline.start_clock
        #: The record whose window's end and cleanup timers ``register_event_time_timer`` may be
        #: asked for (-1: none), and per record those times and their points (the kernel's ``run``).
        self.hint = -1
        self.last_timestamps: list[int] = []
        self.end_points: list[int] = []
        self.cleanup_points: list[int] = []

    @property
    def clock(self) -> int:
        """The replay clock at the moment: read when asked (a firing, or a trigger reading the
        processing time), not at every record."""
        if self._clock is None:
            self._clock = self.timeline.clock_at(self.seq)
        return self._clock

    # ---- what the trigger context calls --------------------------------------------------------
    def register_event_time_timer(self, time: int, window: TimeWindow) -> None:
        timers = self.timers
        if (time, window) in timers:
            return  # most calls: the timer is pending already
        # A session's end and cleanup timers are mostly those of the window [t, t + gap) of the
        # record at hand, whose points were searched for all records at once.
        record = self.hint
        if record >= 0 and time == self.last_timestamps[record]:
            point = max(self.end_points[record], self.lowest_advance)
        elif record >= 0 and time == self.last_timestamps[record] + self.lateness:
            point = max(self.cleanup_points[record], self.lowest_advance)
        else:
            point = bisect_left(self.adv_wm, time, self.lowest_advance)
        if point < len(self.adv_wm):
            timers[(time, window)] = point
            heapq.heappush(self.heap, (self.adv_seq[point], time, window, point))
        else:
            timers[(time, window)] = None

    def register_processing_time_timer(self, time: int, window: TimeWindow) -> None:
        raise Decline

    def check_time(self, low: int, high: int) -> None:
        """Decline timestamps near the ends of time, where window ends and cleanup times would
        saturate (the operator's ``saturating_add``), which the kernel does not model."""
        if not clear_of_saturation(low, high, self.gap + self.lateness):
            raise Decline

    def _merge(self, cover: TimeWindow, merged: list[TimeWindow], low: int, high: int) -> None:
        """The operator's ``_merge``: the trigger merges, the merged windows are cleared and their
        contents folded (in window order) into the cover, a new window with no pane yet."""
        ctx, trigger, timers = self.ctx, self.trigger, self.timers
        ctx.window, ctx.merged = cover, merged
        trigger.on_merge(cover, ctx)
        ctx.merged = ()
        for window in merged:
            ctx.window = window
            trigger.clear(window, ctx)
            cleanup = rules.kernel_cleanup_time(window.end - 1, self.lateness)
            timers.pop((cleanup, window), None)  # its cleanup timer
        contents = [state.contents for state in map(self.windows.pop, merged) if state.contents is not None]
        self.opened[low:high] = [cover]
        # One window's contents move over as they are; several merge (``pane.merge``, computed later).
        self.windows[cover] = Window(contents[0] if len(contents) == 1 else
                                      self.book.merge(contents) if contents else None)

    def _fire_timers(self, before_seq: int | None) -> None:
        """Every pending timer due before record ``before_seq`` (None: all), in the operator's order
        (replay position, time, window); timers they register join in."""
        heap, timers, adv_wm = self.heap, self.timers, self.adv_wm
        while heap and (before_seq is None or heap[0][0] < before_seq):
            seq, time, window, point = heapq.heappop(heap)
            if timers.get((time, window), -1) != point:
                continue  # deleted, or registered again: a stale entry
            del timers[(time, window)]
            self.seq, self.phase, self.lowest_advance, self.hint = seq, STEP_EVENT_TIMER, point, -1
            self.watermark, self._clock = adv_wm[point], self.timeline.advance_clock(point)
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
            raise Decline  # the trigger left state or timers behind: the operator reports the leak

    def _emit(self, window: TimeWindow, state: Window, timing: str, fire_time: int | None) -> None:
        """A firing: its values are asked of the book (a pane with a process function gets the
        accumulator, which ``pane.fire`` turns into the pane's values afterwards)."""
        request = self.book.ask(state.contents, self.pane.process is not None)
        self.fired.append((request, (window, state.pane_count, timing, self.watermark, self.clock,
                                     fire_time, self.seq, self.phase)))
        state.pane_count += 1

    def _ask_dumps(self) -> None:
        """Once the sweep is done: the open windows' accumulators asked of the book."""
        self.dumps = [(state, self.book.ask(state.contents, True)) for state in self.windows.values()
                      if state.contents is not None]

    def output(self) -> KeyOutput:
        """Once ``book`` is evaluated: the key's panes, late records and state rows."""
        values = self.book.values
        for state, request in self.dumps:
            state.contents = values[request]
        panes = []
        for request, (window, pane_index, timing, watermark, clock, fire_time, seq, phase) in self.fired:
            result = values[request]
            if self.pane.process is not None:
                result = self.pane.fire(result, self.key, window, pane_index)[0]
            panes.append(Pane(window, pane_index, timing, watermark, clock, fire_time, result, seq, phase))
        return KeyOutput(panes, self.late, self.dump_state(), [])

    # ---- state ---------------------------------------------------------------------------------
    def _restore(self, rows: list[WindowStateRow], first_seq: int | None) -> None:
        """The operator's ``load_state``, declining rows it does not know (a processing-time
        timer declines as it registers) and accumulators the kernel would not continue."""
        windows = [TimeWindow(*(int(v) for v in row.window)) for row in rows]
        if len(set(windows)) != len(windows):
            raise Decline  # the operator would keep the last of two rows for a window
        for window in windows:
            self.check_time(window.start, window.end)
        try:
            self.load_state(rows)
        except (ValueError, TypeError) as error:
            raise Decline from error
        self.opened = sorted(self.windows)
        for window, state in self.windows.items():
            cleanup = rules.kernel_cleanup_time(window.end - 1, self.lateness)
            state.cleanup_registered = (cleanup, window) in self.timers
            if state.contents is not None:
                check_contents(self.shape.functions, self.book.kinds, state.contents, first_seq)
                state.contents = Contents(restored=state.contents)
        for before, after in zip(self.opened, self.opened[1:], strict=False):
            if before.end >= after.start:
                raise Decline  # intersecting sessions: the operator would merge them

    def timers_by_namespace(self) -> tuple[dict[TimeWindow, list[int]], dict[TimeWindow, list[int]]]:
        return by_namespace(self.timers), {}
