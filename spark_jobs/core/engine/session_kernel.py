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

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from heapq import heappop
from typing import Any

import numpy as np

from .. import rules
from ..durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from ..functions import IncrementalPane
from ..rules import element_timing
from ..triggers import ContinuousEventTimeTrigger, CountTrigger, EventTimeTrigger, PurgingTrigger
from ..triggers.event_time import end_reached
from ..watermarks import Timeline
from ..windows import SessionWindows, TimeWindow
from .model import KeyOutput, LateRecord, WindowStateRow
from .operator import (
    STEP_ELEMENT,
    OperatorSpec,
)
from .session_contents import AggregateShape, Book, Contents, evaluate_books
from .session_kernel_windows import Sessions, Window
from .window_kernel_inputs import Decline, aggregate_columns, int64_array

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
    return process_keys(spec, timeline, [(state, seqs, timestamps, columns, key)])[0]


#: One key's batch as ``process_key`` takes it: ``(state, seqs, timestamps, columns, key)``.
KeyInput = tuple[Iterable[WindowStateRow], Any, Any, Sequence[Any], tuple[Any, ...]]


#: Records a ``process_keys`` evaluation takes together at most (bounds what the swept keys hold).
POOL_RECORDS = 250_000


def process_keys(spec: OperatorSpec, timeline: Timeline, keys: Sequence[KeyInput]) -> list[KeyOutput | None]:
    """``process_key`` for several keys of one batch: each key swept on its own, then the contents
    of keys holding up to ``POOL_RECORDS`` records computed together
    (``session_contents.evaluate_books``); None where a key declines. (Many keys make many live
    objects: a caller taking hundreds pauses Python's cyclic collector, see
    ``spark_batch.make_cogroup_function``.)"""
    shape = _shape(spec)
    if shape is None:
        return [None] * len(keys)
    outputs: list[KeyOutput | None] = []
    pool: list[_Run | None] = []
    pooled = 0
    for state, seqs, timestamps, columns, key in keys:
        run = _Run(spec, shape, timeline, key)
        try:
            pooled += run.sweep(list(state), seqs, timestamps, columns)
            pool.append(run)
        except Decline:
            pool.append(None)
        if pooled >= POOL_RECORDS:
            outputs += _outputs(pool)
            pool, pooled = [], 0
    return outputs + _outputs(pool)


def _outputs(runs: list[_Run | None]) -> list[KeyOutput | None]:
    """The swept ``runs``' outputs, their books evaluated together (None: declined)."""
    swept = [run for run in runs if run is not None]
    evaluated = {id(run) for run, ok in zip(swept, evaluate_books([run.book for run in swept]), strict=True)
                 if ok}
    outputs: list[KeyOutput | None] = []
    for run in runs:
        output = None
        if run is not None and id(run) in evaluated:
            try:
                output = run.output()
            except Decline:
                pass
        if run is not None:
            run.ctx.op = None  # the run's only cycle: freed as soon as it is done with
        outputs.append(output)
    return outputs


def _stretches(timestamps: np.ndarray, watermarks: np.ndarray, gap: int) -> tuple[list[int], list[int]]:
    """Per record, the furthest end of the windows ``[t, t + gap)`` of the records up to it, and
    the first record from it on whose window starts after that end of the records before it, or
    whose watermark has reached it (``len``: none).

    A session ending where the records so far reach grows by each record of such a stretch (as long
    as it does not start before the session or reach the next one), and nothing of it fires or is
    due in between: ``_run`` takes the stretch in one step."""
    reaches = np.maximum.accumulate(timestamps + gap) if len(timestamps) else timestamps
    follows = np.zeros(len(timestamps), dtype=bool)
    if len(timestamps) > 1:
        follows[1:] = (timestamps[1:] <= reaches[:-1]) & ~end_reached(reaches[:-1] - 1, watermarks[1:])
    breaks = np.where(follows, len(timestamps), np.arange(len(timestamps)))
    return reaches.tolist(), np.minimum.accumulate(breaks[::-1])[::-1].tolist()


class _Run(Sessions):
    """One key's batch: restore, sweep the records and due timers, compute the contents, dump."""

    def __init__(self, spec: OperatorSpec, shape: AggregateShape, timeline: Timeline, key: tuple[Any, ...]):
        super().__init__(spec, shape, timeline, key)
        nested = self.trigger.nested if type(self.trigger) is PurgingTrigger else self.trigger
        # Runs (``_run``) need a trigger that does nothing between a session's end timer and its
        # records, and a session whose end the watermark has not reached must not be late (so no
        # negative lateness).
        self.runs = type(nested) is EventTimeTrigger and self.lateness >= 0
        self.watermarks: list[int] = []  # per record, the watermark in force
        self.ts_array = np.zeros(0, dtype=np.int64)
        #: Per record, how far the records up to it reach, and where its stretch ends (``_stretches``).
        self.reaches: list[int] = []
        self.stretch_ends: list[int] = []

    # ---- the batch -----------------------------------------------------------------------------
    def sweep(self, state: list[WindowStateRow], seqs: Any, timestamps: Any, columns: Sequence[Any]) -> int:
        """Restore, sweep the records and due timers: every value the panes and state rows need
        asked of ``book``, which ``session_contents`` evaluates before ``output``. Returns how
        many records the key has."""
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
        advance_array = timeline.record_advances(seq_array)
        advances = advance_array.tolist()
        watermarks = timeline.watermarks_at(advance_array)
        self.watermarks = watermarks.tolist()
        self.ts_array = ts_array
        if self.runs:
            self.reaches, self.stretch_ends = _stretches(ts_array, watermarks, self.gap)
        last_timestamps = ts_array + (self.gap - 1)  # of each record's window [t, t + gap)
        self.last_timestamps = last_timestamps.tolist()
        self.end_points = timeline.event_timer_points(last_timestamps).tolist()
        cleanups = rules.kernel_cleanup_time(last_timestamps, self.lateness)
        self.cleanup_points = timeline.event_timer_points(cleanups).tolist()
        self._sweep(seq_array.tolist(), ts_array.tolist(), advances)
        self._fire_timers(None)
        self._ask_dumps()
        # Per-record lists the output does not read (a key waits for others' to be swept).
        self.watermarks = self.reaches = self.stretch_ends = []
        self.last_timestamps = self.end_points = self.cleanup_points = []
        return n

    def _sweep(self, seqs: list[int], timestamps: list[int], advances: list[int]) -> None:
        """The operator's process_element for a session window [t, t + gap), inlined, and the
        timers due between records; runs of records that only grow one session go to ``_run``."""
        watermarks = self.watermarks
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
            self._clock = None  # read when asked (``clock``)
            # Flink's MergingWindowSet.addWindow with SessionWindows.merge_windows's rule (windows
            # merge when they intersect, touching included): find the open sessions the record's
            # window touches (a run of the sorted list, ending at the last one starting by its end).
            end = timestamp + gap
            high = bisect_right(opened, (end, MAX_TIMESTAMP))
            low = high
            while low and opened[low - 1].end >= timestamp:
                low -= 1
            if runs and high - low == 1 and not end_reached(max(opened[low].end, end) - 1, watermark):
                i = self._run(i, low, seqs, timestamps, advances)
                continue
            if high - low == 1 and opened[low].start <= timestamp and opened[low].end >= end:
                window = opened[low]  # inside an open session: nothing changes
            elif low == high:
                window = TimeWindow(timestamp, end)
                windows[window] = Window()
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

    def _run(self, i: int, low: int, seqs: list[int], timestamps: list[int], advances: list[int]) -> int:
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
        reaches, stretch_ends, ts_array = self.reaches, self.stretch_ends, self.ts_array
        while j < n:
            # (A stretch of a few records is cheaper record by record than through numpy.)
            if end == reaches[j - 1] and stretch_ends[j] - j > 8:
                # The session ends where the records so far reach: it grows by the records of the
                # stretch from here (``_stretches``) that start in it and reach short of the next.
                chunk = ts_array[j:stretch_ends[j]]
                outside = np.flatnonzero((chunk < start) | (chunk >= after - gap))
                stop = j + (int(outside[0]) if len(outside) else len(chunk))
                if stop > j:
                    if reaches[stop - 1] > end:
                        end = reaches[stop - 1]
                        made = raised = bisect_left(reaches, end, j, stop)  # the first to reach it
                    j = stop
                    continue
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
        self._clock = None
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
