"""Flink's ``WindowOperator`` for one key with event-time session windows: a sweep for the merge
structure, the contents computed vectorised.

The same procedure as :class:`~spark_jobs.core.engine.operator.KeyedWindowOperator` for merging windows,
giving the same panes, late records and state rows (byte for byte: either engine resumes from the other's
state), at a fraction of its per-record cost. Whether a record is late, and which sessions it merges,
depends on every session open before it, so the structure stays one pass over the key's records in
replay order, doing only what a session needs:

* the open sessions are a list sorted by start (they never intersect: intersecting ones merged),
  so a record finds the sessions its window ``[t, t + gap)`` touches by bisection;
* only event-time timers exist (a processing-time one is declined), in one heap keyed by the
  replay position they fire at, looked at only when one is due before the next record;
* window ends and cleanup times are plain arithmetic (timestamps near the ends of time, where
  Flink's saturation would matter, are declined);
* the trigger is the pipeline's own, called as the operator calls it and through the operator's
  own trigger context (``WindowContext``), so its rules stay in one place;
* with the event-time trigger, a run of records that each land in or extend one session before
  the watermark reaches its end (most records, when a key's records come about in event-time
  order) is one step (``_run``): what the trigger and the timers do per record there adds up to
  what they do once for the session the run ends with;
* the pane's contents are not computed during the sweep: it notes what is added and merged
  where, and ``session_contents`` computes every firing's values and every state row's
  accumulators at the end, all at once, with the fixed-window kernel's vectorised aggregates.

Scope (:func:`supports`): event-time session windows; the built-in event-time triggers
(``EventTimeTrigger``, ``ContinuousEventTimeTrigger``, ``CountTrigger``, purging or not); the
built-in aggregates (a process function over their results included; no user aggregate, evictor,
keyed process function or join). :func:`process_key` declines (returns None, and the caller runs the
per-record operator) what it does not reproduce: extreme timestamps, restored state it does not
recognise (processing-time timers, sessions that intersect, accumulators of unexpected types), a
trigger that leaves state behind, and what the vectorised aggregates decline (NaN where Python
compares it, an integer sum that could overflow int64, columns of mixed types). Declining never
changes results, only the cost.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from heapq import heappop
from typing import Any

from .. import rules
from ..durations import MAX_TIMESTAMP, MIN_TIMESTAMP, clear_of_saturation
from ..functions import IncrementalPane
from ..rules import element_timing, timer_timing
from ..triggers import ContinuousEventTimeTrigger, CountTrigger, EventTimeTrigger, PurgingTrigger
from ..triggers.event_time import end_reached
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
from .session_contents import AggregateShape, Book, Contents
from .window_kernel_inputs import Decline, aggregate_columns, check_contents, int64_array

_EVENT_TIME_TRIGGERS = (EventTimeTrigger, ContinuousEventTimeTrigger, CountTrigger)


def _shape(spec: OperatorSpec) -> AggregateShape | None:
    assigner, trigger, pane = spec.assigner, spec.trigger, spec.pane
    if spec.process is not None or spec.two_inputs:
        return None
    if type(assigner) is not SessionWindows or assigner.time != "event":
        return None
    if type(pane) is not IncrementalPane or pane.user is not None:
        return None
    nested = trigger.nested if type(trigger) is PurgingTrigger else trigger
    if type(nested) not in _EVENT_TIME_TRIGGERS:
        return None
    specs = pane.aggregation.specs
    return AggregateShape(tuple(s.function for s in specs),
                          tuple(s.function == "count" and s.column is None for s in specs))


def supports(spec: OperatorSpec) -> bool:
    """Whether the kernel covers this pipeline (it may still decline a particular input)."""
    return _shape(spec) is not None


def process_key(
    spec: OperatorSpec,
    timeline: Timeline,
    state: Iterable[WindowStateRow],
    seqs: Any,
    timestamps: Any,
    columns: Sequence[Any],
    key: tuple[Any, ...] = (),
) -> KeyOutput | None:
    """One key's batch, as ``keyed.process_key`` runs it, or None where the kernel declines.

    Taken as the window kernel takes them: ``seqs`` (strictly increasing) and ``timestamps`` as
    int64 columns (numpy, Arrow or sequences), ``columns`` one per aggregate (Arrow arrays or
    sequences of Python values; None: all null, as for count(*)).
    """
    shape = _shape(spec)
    if shape is None:
        return None
    try:
        return _Run(spec, shape, timeline, key).run(list(state), seqs, timestamps, columns)
    except Decline:
        return None


class _Window:
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


class _Run(WindowStateRows):
    """One key's batch: restore, sweep the records and due timers, compute the contents, dump."""

    window_state = _Window

    def __init__(self, spec: OperatorSpec, shape: AggregateShape, timeline: Timeline, key: tuple[Any, ...]):
        self.spec = spec
        self.shape = shape
        self.timeline = timeline
        self.key = key
        self.gap = spec.assigner.gap
        self.lateness = spec.allowed_lateness
        self.trigger = spec.trigger
        self.pane = spec.pane
        nested = self.trigger.nested if type(self.trigger) is PurgingTrigger else self.trigger
        # Runs (``_run``) need a trigger that does nothing between a session's end timer and its
        # records, and a session whose end the watermark has not reached must not be late (so no
        # negative lateness).
        self.runs = type(nested) is EventTimeTrigger and self.lateness >= 0
        self.adv_seq, self.adv_wm = timeline.adv_seq, timeline.adv_wm
        self.windows: dict[TimeWindow, _Window] = {}
        self.opened: list[TimeWindow] = []  # the open sessions, sorted by start, disjoint
        self.trigger_state: dict[TimeWindow, dict[str, Any]] = {}
        #: Pending event-time timers: (time, window) -> index of the watermark advance firing it
        #: (None: beyond this batch); the heap holds (advance's seq, time, window, index).
        self.timers: dict[tuple[int, TimeWindow], int | None] = {}
        self.heap: list[tuple[int, int, TimeWindow, int]] = []
        self.event_timers, self.processing_timers = _Points(self.timers), _Points({})
        #: The firings, their values asked of ``book``: (request, the pane's other fields).
        self.fired: list[tuple[int, tuple[Any, ...]]] = []
        self.late: list[LateRecord] = []
        self.ctx = WindowContext(self)
        # The moment: replay position, watermark in force, and the first watermark advance a timer
        # registered now can fire at (Timeline.event_timer_point's lower bound).
        self.seq = timeline.seq_start - 1
        self.phase = STEP_EVENT_TIMER
        self.watermark = timeline.start_watermark
        self.lowest_advance = bisect_left(self.adv_seq, self.seq)
        self.clock = timeline.start_clock
        #: The record whose window's end and cleanup timers ``register_event_time_timer`` may be
        #: asked for (-1: none), and per record those times and their points (``run``).
        self.hint = -1
        self.last_timestamps: list[int] = []
        self.end_points: list[int] = []
        self.cleanup_points: list[int] = []

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

    # ---- the batch -----------------------------------------------------------------------------
    def run(self, state: list[WindowStateRow], seqs: Any, timestamps: Any,
            columns: Sequence[Any]) -> KeyOutput:
        shape = self.shape
        seq_array, ts_array = int64_array(seqs), int64_array(timestamps)
        n = len(seq_array)
        if len(ts_array) != n or (n > 1 and not bool((seq_array[1:] > seq_array[:-1]).all())):
            raise Decline
        if n:
            self.check_time(int(ts_array.min()), int(ts_array.max()))
        else:
            columns = [None] * len(shape.functions)
        arrays, kinds = aggregate_columns(shape.functions, shape.counts_all, columns, n)
        self.book = Book(self.pane, shape, arrays, kinds, seq_array)
        self._restore(state, int(seq_array[0]) if n else None)
        timeline = self.timeline
        advances, clocks = timeline.record_points(seq_array)
        self.watermarks = timeline.watermarks_before(seq_array).tolist()
        last_timestamps = ts_array + (self.gap - 1)  # of each record's window [t, t + gap)
        self.last_timestamps = last_timestamps.tolist()
        self.end_points = timeline.event_timer_points(last_timestamps).tolist()
        cleanups = rules.kernel_cleanup_time(last_timestamps, self.lateness)
        self.cleanup_points = timeline.event_timer_points(cleanups).tolist()
        self._sweep(seq_array.tolist(), ts_array.tolist(), advances, clocks)
        self._fire_timers(None)
        return self._output()

    def _sweep(self, seqs: list[int], timestamps: list[int], advances: list[int], clocks: list[int]) -> None:
        """The operator's process_element for a session window [t, t + gap), inlined, and the
        timers due between records; runs of records that only grow one session go to ``_run``."""
        timeline = self.timeline
        clk_val, start_clock, watermarks = timeline.clk_val, timeline.start_clock, self.watermarks
        heap, timers, windows, opened = self.heap, self.timers, self.windows, self.opened
        trigger, ctx, runs = self.trigger, self.ctx, self.runs
        gap, lateness, late = self.gap, self.lateness, self.late
        n, i = len(seqs), 0
        while i < n:
            seq, timestamp, advance = seqs[i], timestamps[i], advances[i]
            while heap and heap[0][0] < seq:
                time, window, point = heap[0][1:]
                if timers.get((time, window), -1) == point:
                    self._fire_timers(seq)
                    break
                heappop(heap)  # a timer deleted or registered again since: most due entries
            self.seq, self.phase, self.lowest_advance, self.hint = seq, STEP_ELEMENT, advance, i
            watermark = self.watermark = watermarks[i]
            self.clock = clk_val[clocks[i] - 1] if clocks[i] else start_clock
            # Flink's MergingWindowSet.addWindow with SessionWindows.merge_windows's rule (windows
            # merge when they intersect, touching included): find the open sessions the record's
            # window touches (a run of the sorted list, ending at the last one starting by its end).
            end = timestamp + gap
            high = bisect_right(opened, (end, MAX_TIMESTAMP))
            low = high
            while low and opened[low - 1].end >= timestamp:
                low -= 1
            if runs and high - low == 1 and not end_reached(max(opened[low].end, end) - 1, watermark):
                i = self._run(i, low, seqs, timestamps, advances, clocks)
                continue
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
            i += 1
            if rules.is_window_late(cleanup, watermark):  # Flink retires it
                del windows[window]
                opened.remove(window)
                if rules.kernel_element_late(timestamp, lateness, watermark):
                    late.append(LateRecord(seq, watermark))
                continue
            if state.contents is None:
                state.contents = Contents()
            state.contents.records.append(i - 1)
            ctx.window = window
            result = trigger.on_element(None, timestamp, window, ctx)
            if result.is_fire:
                self._emit(window, state, element_timing(watermark, window), None)
            if result.is_purge:
                state.contents = None
            if not state.cleanup_registered:  # registered once per window: the same call after is a no-op
                self.register_event_time_timer(cleanup, window)
                state.cleanup_registered = True

    def _run(self, i: int, low: int, seqs: list[int], timestamps: list[int], advances: list[int],
             clocks: list[int]) -> int:
        """Records ``i``, ``i + 1``, ... that each land in or extend the open session ``opened[low]``
        and nothing else, before the watermark reaches its end (nothing fires, nothing is late);
        returns the index after them.

        With the event-time trigger such a run does, record by record, what it does once for the
        session it ends with: the session merges into it (``_merge``), the records join its
        contents, its end and cleanup timers are registered (at the record that made it: the
        watermark reaches neither before the run ends, so they are at the same timeline point).
        The timers of the sessions in between are registered and deleted again, unfired: the
        operator leaves nothing of them. Other sessions' timers due meanwhile touch only their own
        session, so they fire after the run, at their own moments, with the same results.
        """
        opened, gap = self.opened, self.gap
        window = opened[low]
        start, end = window.start, window.end
        # Its neighbours: a record reaching one would merge it (sessions may only vanish meanwhile).
        before = opened[low - 1].end if low else MIN_TIMESTAMP
        after = opened[low + 1].start if low + 1 < len(opened) else MAX_TIMESTAMP
        timestamp, made = timestamps[i], i
        raised = i if timestamp + gap > end else -1  # the record whose window ends the session
        start, end = min(start, timestamp), max(end, timestamp + gap)  # the first record: checked
        watermarks, n, j = self.watermarks, len(seqs), i + 1
        while j < n:
            timestamp = timestamps[j]
            reach = timestamp + gap
            # Due before this record, the session's end timer would fire: the run stops.
            if (end_reached(end - 1, watermarks[j])
                    or not (before < timestamp <= end and start <= reach < after)):
                break
            if timestamp < start:
                start, made = timestamp, j
            if reach > end:
                end, made, raised = reach, j, j
            j += 1
        # The moment of the record that made the session as it ends.
        self.seq, self.phase, self.lowest_advance = seqs[made], STEP_ELEMENT, advances[made]
        self.hint = raised
        self.watermark = watermarks[made]
        clock = clocks[made]
        self.clock = self.timeline.clk_val[clock - 1] if clock else self.timeline.start_clock
        session = TimeWindow(start, end)
        if session != window:
            self._merge(session, [window], low, low + 1)
        state = self.windows[session]
        if state.contents is None:
            state.contents = Contents()
        state.contents.records.extend(range(i, j))
        self.ctx.window = session
        if self.trigger.on_element(None, timestamps[made], session, self.ctx).is_fire:
            raise Decline  # cannot be: the watermark is before the session's end
        if not state.cleanup_registered:
            self.register_event_time_timer(rules.kernel_cleanup_time(end - 1, self.lateness), session)
            state.cleanup_registered = True
        return j

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
        self.windows[cover] = _Window(contents[0] if len(contents) == 1 else
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
            self.watermark, self.clock = adv_wm[point], self.timeline.advance_clock(point)
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

    def _emit(self, window: TimeWindow, state: _Window, timing: str, fire_time: int | None) -> None:
        """A firing: its values are asked of the book (a pane with a process function gets the
        accumulator, which ``pane.fire`` turns into the pane's values afterwards)."""
        request = self.book.ask(state.contents, self.pane.process is not None)
        self.fired.append((request, (window, state.pane_count, timing, self.watermark, self.clock,
                                     fire_time, self.seq, self.phase)))
        state.pane_count += 1

    def _output(self) -> KeyOutput:
        """The contents computed: the panes' values and the open windows' accumulators."""
        dumps = [(state, self.book.ask(state.contents, True)) for state in self.windows.values()
                 if state.contents is not None]
        values = self.book.evaluate()
        for state, request in dumps:
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
