"""Flink's ``WindowOperator`` for one key, vectorised (numpy / Arrow), for the common case.

The same procedure as :class:`~spark_jobs.core.engine.operator.KeyedWindowOperator` over a batch's
:class:`~spark_jobs.core.watermarks.Timeline`, giving the same panes, late records and state rows (byte
for byte: either engine resumes from the other's state), at a fraction of the per-record cost.

Scope (:func:`supports`): event-time tumbling or sliding windows; ``EventTimeTrigger``,
``ContinuousEventTimeTrigger`` or ``CountTrigger``, purging or not; the built-in aggregates only (no
user aggregate or process function, no evictor, no keyed process function, no join). Within it,
:func:`process_key` still declines (returns None, and the caller runs the per-record operator) an
input it could not reproduce exactly: timestamps so extreme that window ends or cleanup times would
saturate, an integer sum that could overflow int64, NaN where Python's comparisons and sets behave
peculiarly (min, max, count_distinct), columns of a type an aggregate cannot take (or mixing Python
types), state rows it does not recognise (processing-time timers, unknown trigger state or timers,
contents of the wrong types). Declining never changes results, only the cost.

Why a window operator vectorises: the windows of a non-merging assigner are independent, and the
watermark in force only grows along the replay order. So a window's accepted records are a prefix
of its records (the rest is late), and among them the ones that arrive before the watermark reaches
the window's end come first. Only the first accepted record can register anything (the end timer,
the continuous chain's first fire time, the cleanup timer); for every later one the registrations
are no-ops, and each record after the watermark passed the end fires the window at once (with a
count trigger, every count-th record fires). Three phases:

1. per (record, window) pair, vectorised: the watermark in force, window lateness, late records,
   the pairs grouped by window in replay order;
2. per window, in Python, a handful of steps each (not one per record): the trigger itself, through
   a one-window context, runs the first record's ``on_element``, every timer (each at the timeline
   point the operator would give it) and ``clear`` at cleanup; the record firings are merged in, so
   every firing knows its cut (how many of the window's pairs it sees) and its segment (the pairs
   since the last purge);
3. per aggregate, vectorised over all firings: the value over each firing's segment with Python's
   arithmetic (floats summed in order, a set keeping the first of equal values).

Phases 1 and 2 are here; phase 3 is ``window_kernel_aggregates``; what the kernel takes as input and
when it declines (column kinds, restored accumulators) is ``window_kernel_inputs``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import rules
from ..durations import MIN_TIMESTAMP, clear_of_saturation
from ..functions import IncrementalPane
from ..rules import element_timing, timer_timing
from ..triggers import ContinuousEventTimeTrigger, CountTrigger, EventTimeTrigger, PurgingTrigger
from ..triggers.base import StateDescriptor, Trigger, TriggerResult
from ..watermarks import Timeline
from ..windows import SlidingWindows, TimeWindow, TumblingWindows
from .model import KeyOutput, LateRecord, Pane, WindowStateRow
from .operator import STEP_ELEMENT, STEP_EVENT_TIMER, OperatorSpec
from .window_kernel_aggregates import Pairs, Requests
from .window_kernel_inputs import Decline, aggregate_columns, check_contents, int64_array


@dataclass(frozen=True)
class _Shape:
    """What the kernel needs of a spec it supports."""

    size: int
    slide: int
    lateness: int
    #: The configured trigger (purging included): the kernel runs its timers through it.
    trigger: Trigger
    #: The trigger under any purging: the one whose state a window keeps (through its public
    #: accessors: ``state_names``, ``counted``, ``fire_time``).
    nested: EventTimeTrigger | ContinuousEventTimeTrigger | CountTrigger
    purging: bool
    #: ContinuousEventTimeTrigger's interval; 0 for the other triggers.
    interval: int
    #: CountTrigger's count; 0 for the event-time triggers.
    count: int
    functions: tuple[str, ...]
    counts_all: tuple[bool, ...]  # count(*), which reads no column


def _shape(spec: OperatorSpec) -> _Shape | None:
    assigner, pane, trigger = spec.assigner, spec.pane, spec.trigger
    if spec.process is not None or spec.two_inputs:
        return None
    if type(assigner) not in (TumblingWindows, SlidingWindows) or assigner.time != "event":
        return None
    if type(pane) is not IncrementalPane or pane.user is not None or pane.process is not None:
        return None
    purging = type(trigger) is PurgingTrigger
    nested = trigger.nested if purging else trigger
    if type(nested) not in (EventTimeTrigger, ContinuousEventTimeTrigger, CountTrigger):
        return None
    specs = pane.aggregation.specs
    return _Shape(
        size=assigner.size,
        slide=assigner.slide if type(assigner) is SlidingWindows else assigner.size,
        lateness=spec.allowed_lateness,
        trigger=trigger,
        nested=nested,
        purging=purging,
        interval=nested.interval if type(nested) is ContinuousEventTimeTrigger else 0,
        count=nested.count if type(nested) is CountTrigger else 0,
        functions=tuple(s.function for s in specs),
        counts_all=tuple(s.function == "count" and s.column is None for s in specs),
    )


def supports(spec: OperatorSpec) -> bool:
    """Whether the kernel covers this pipeline (it may still decline a particular input)."""
    return _shape(spec) is not None


def windows_per_record(spec: OperatorSpec) -> int:
    """The most windows one record is in, where the kernel covers the pipeline (1: tumbling
    windows; a sliding window's size over its slide), else 0: how the kernel's cost per record
    grows (each record is a pair per window)."""
    shape = _shape(spec)
    return -(-shape.size // shape.slide) if shape is not None else 0


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

    ``seqs`` (strictly increasing) and ``timestamps`` are int64 columns (numpy, Arrow or
    sequences); ``columns`` holds one column per aggregate (Arrow arrays or plain sequences of
    Python values; None reads as all null, as for count(*)). ``key`` is not needed by the built-in
    aggregates; it is there so that both engines take the same arguments.
    """
    shape = _shape(spec)
    if shape is None:
        return None
    try:
        return _Run(spec, shape, timeline).run(list(state), seqs, timestamps, columns)
    except Decline:
        return None


@dataclass
class _Window:
    """A window's restored state (a ``WindowStateRow`` the kernel recognises)."""

    pane_count: int
    contents: list[Any] | None
    trigger_state: dict[str, Any]
    timers: list[int]


class _OneWindow:
    """The trigger context of one window (a ``TriggerContext``): its pending event-time timers
    (time -> timeline point, None when beyond this batch) and its trigger state, with the watermark
    and replay position of the moment, so that timers land where the operator would put them."""

    __slots__ = ("timeline", "timers", "state", "watermark", "seq")

    def __init__(self, timeline: Timeline):
        self.timeline = timeline
        self.timers: dict[int, int | None] = {}
        self.state: dict[str, Any] = {}
        self.watermark = MIN_TIMESTAMP
        self.seq = timeline.seq_start - 1

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self.timeline.clock_at(self.seq)

    def register_event_time_timer(self, time: int) -> None:
        if time not in self.timers:
            self.timers[time] = self.timeline.event_timer_point(time, self.seq)

    def register_processing_time_timer(self, time: int) -> None:
        raise Decline

    def delete_event_time_timer(self, time: int) -> None:
        self.timers.pop(time, None)

    def delete_processing_time_timer(self, time: int) -> None:
        pass

    def get_state(self, descriptor: StateDescriptor) -> Any:
        return self.state.get(descriptor.name)

    def set_state(self, descriptor: StateDescriptor, value: Any) -> None:
        self.state[descriptor.name] = value

    def clear_state(self, descriptor: StateDescriptor) -> None:
        self.state.pop(descriptor.name, None)

    def merge_state(self, descriptor: StateDescriptor) -> None:
        raise Decline


class _Run:
    """One key's batch through the three phases (the module's doc)."""

    def __init__(self, spec: OperatorSpec, shape: _Shape, timeline: Timeline):
        self.spec = spec
        self.shape = shape
        self.timeline = timeline

    def run(self, state: list[WindowStateRow], seqs: Any, timestamps: Any,
            columns: Sequence[Any]) -> KeyOutput:
        shape, timeline = self.shape, self.timeline
        seqs, timestamps = int64_array(seqs), int64_array(timestamps)
        n = len(seqs)
        if len(timestamps) != n or (n > 1 and not bool((seqs[1:] > seqs[:-1]).all())):
            raise Decline
        if not n:
            columns = [None] * len(shape.functions)
        else:
            self._check_time(int(timestamps.min()), int(timestamps.max()))
        self.columns, self.kinds = aggregate_columns(shape.functions, shape.counts_all, columns, n)
        restored = self._restore(state, int(seqs[0]) if n else None)

        # Phase 1: pairs, lateness, late records, grouping by window.
        watermarks = timeline.watermarks_before(seqs)
        records, starts = self.spec.assigner.assign_starts(timestamps)
        max_timestamps = starts + (shape.size - 1)
        accepted = ~rules.is_window_late(rules.kernel_cleanup_time(max_timestamps, shape.lateness),
                                         watermarks[records])
        placed = np.zeros(n, dtype=bool)
        placed[records[accepted]] = True
        late = np.flatnonzero(~placed & rules.kernel_element_late(timestamps, shape.lateness, watermarks))
        late_records = [LateRecord(s, w) for s, w in zip(seqs[late].tolist(), watermarks[late].tolist(),
                                                         strict=True)]
        records, starts = records[accepted], starts[accepted]
        groups: dict[int, tuple[int, ...]] = {}
        if len(starts):
            slot = (starts - int(starts.min())) // shape.slide
            if int(slot.max()) > 4 * len(slot) + 1024:  # few windows far apart: rank them instead
                slot = np.unique(starts, return_inverse=True)[1]
            order = np.argsort(slot, kind="stable")  # stable: each window's pairs stay in replay order
            records, starts = records[order], starts[order]
            lo = np.flatnonzero(np.concatenate(([True], starts[1:] != starts[:-1])))
            hi = np.append(lo[1:], len(starts))
            # Pairs seen while the watermark is before the window's end come first in each window.
            on_time = (watermarks[records] < starts + (shape.size - 1)).astype(np.int64)
            firsts = records[lo]
            on_time_end = lo + np.add.reduceat(on_time, lo)
            groups = {
                start: group for start, *group in zip(
                    starts[lo].tolist(), lo.tolist(), hi.tolist(), on_time_end.tolist(),
                    seqs[firsts].tolist(), timestamps[firsts].tolist(), watermarks[firsts].tolist(),
                    strict=True,
                )
            }
        self.records, self.watermarks = records, watermarks
        self.pair_seqs = seqs[records]

        # Phase 2: per window, the trigger's timers and the firings.
        self.windows = sorted(set(groups) | set(restored))
        self.grouped = groups
        self.first_pairs = [groups[start][0] if start in groups else 0 for start in self.windows]
        self.restored_contents = [restored[start].contents if start in restored else None
                                  for start in self.windows]
        self.requests = Requests([], [], [], [], [])
        self.purge_cuts: list[int] = []
        firings: list[tuple[int, tuple[Any, ...]]] = []  # (request, pane fields)
        dumps: list[tuple[TimeWindow, int, int | None, str | None, list[int]]] = []
        for index, start in enumerate(self.windows):
            self._window(index, start, groups.get(start), restored.get(start), firings, dumps)

        # Phase 3: the aggregates of every firing and every dumped window.
        results = Pairs(self).evaluate_all()
        panes = [Pane(window, pane_index, timing, watermark, clock, fire_time, results[request],
                      emit_seq, emit_step)
                 for request, (window, pane_index, timing, watermark, clock, fire_time, emit_seq, emit_step)
                 in firings]
        rows = [
            WindowStateRow(window, True, pane_count,
                           None if request is None else json.dumps(self.spec.pane.to_json(results[request])),
                           trigger_state, timers, [])
            for window, pane_count, request, trigger_state, timers in dumps
        ]
        return KeyOutput(panes, late_records, rows, [])

    # ---- checks ---------------------------------------------------------------------------------
    def _check_time(self, low: int, high: int) -> None:
        """Decline timestamps near the ends of time: there windows, cleanup and fire times would
        saturate (and the cleanup timer vanish at +infinity), which the kernel does not model."""
        shape = self.shape
        reach = shape.size + shape.slide + shape.lateness + shape.interval
        if not clear_of_saturation(low, high, reach):
            raise Decline

    def _restore(self, state: list[WindowStateRow], first_seq: int | None) -> dict[int, _Window]:
        """The state rows as the operator would load them, or decline what the kernel does not know."""
        shape = self.shape
        restored: dict[int, _Window] = {}
        for row in state:
            start, end = (int(v) for v in row.window)
            if not row.is_open or row.processing_timers or start in restored:
                raise Decline
            if end - start != shape.size or (start - self.spec.assigner.offset) % shape.slide:
                raise Decline
            self._check_time(start, end)
            try:
                contents = None
                if row.contents is not None:
                    contents = self.spec.pane.from_json(json.loads(row.contents))
                trigger_state = json.loads(row.trigger_state) if row.trigger_state else {}
            except (ValueError, TypeError) as error:
                raise Decline from error
            max_timestamp = end - 1
            timers = sorted({int(t) for t in row.event_timers or ()})
            allowed = {max_timestamp + shape.lateness}
            if not isinstance(trigger_state, dict):
                raise Decline
            nested = shape.nested
            # Only the state the trigger keeps (the event-time trigger keeps none).
            if set(trigger_state) - nested.state_names():
                raise Decline
            if shape.count:
                count = nested.counted(trigger_state)
                if count is not None and (type(count) is not int or not 0 < count < shape.count):
                    raise Decline
            else:
                allowed.add(max_timestamp)
                fire_time = nested.fire_time(trigger_state) if shape.interval else None
                if fire_time is not None:
                    if type(fire_time) is not int or fire_time > max_timestamp:
                        raise Decline
                    allowed.add(fire_time)
            if not set(timers) <= allowed or type(row.pane_count) is not int:
                raise Decline
            if contents is not None:
                check_contents(shape.functions, self.kinds, contents, first_seq)
            restored[start] = _Window(row.pane_count, contents, trigger_state, timers)
        return restored

    # ---- phase 2 --------------------------------------------------------------------------------
    def _window(self, index: int, start: int, group: tuple[int, ...] | None, restored: _Window | None,
                firings: list, dumps: list) -> None:
        shape, timeline, trigger = self.shape, self.timeline, self.shape.trigger
        window = TimeWindow(start, start + shape.size)
        max_timestamp = window.max_timestamp
        cleanup = rules.kernel_cleanup_time(max_timestamp, shape.lateness)  # no saturation: _check_time
        ctx = _OneWindow(timeline)
        contents = None
        pane_count = 0
        if restored is not None:
            contents, pane_count = restored.contents, restored.pane_count
            ctx.state = dict(restored.trigger_state)
            for time in restored.timers:
                ctx.register_event_time_timer(time)  # as load_state: positioned before the batch
        lo, hi, on_time_end = 0, 0, 0
        if group is not None:
            lo, hi, on_time_end, first_seq, first_ts, first_wm = group
            ctx.seq, ctx.watermark = first_seq, first_wm
            if shape.count:
                # CountTrigger fires at every count-th record: the kernel counts them here.
                counter = shape.nested
                seen = counter.counted(ctx.state, 0)
                element_fires = list(range(lo + shape.count - seen - 1, hi, shape.count))
                counter.store_counted(ctx.state, (seen + hi - lo) % shape.count)
            else:
                if on_time_end > lo:
                    # The first on-time record registers the end timer (and the continuous chain);
                    # for the later ones the same registrations are no-ops.
                    if trigger.on_element(None, first_ts, window, ctx).is_fire:
                        raise Decline  # cannot be: the watermark is before the window's end
                element_fires = list(range(on_time_end, hi))  # after the end: each record fires
            ctx.register_event_time_timer(cleanup)  # the operator's register_cleanup_timer
        else:
            element_fires = []

        # The window's timers in the operator's order (timeline point, then time).
        adv_seq, adv_wm = timeline.adv_seq, timeline.adv_wm
        timer_fires: list[tuple[int, int, Any]] = []
        cleaned = False
        while not cleaned:
            due = min(((point, time) for time, point in ctx.timers.items() if point is not None),
                      default=None)
            if due is None:
                break
            point, time = due
            del ctx.timers[time]
            ctx.seq, ctx.watermark = adv_seq[point], adv_wm[point]
            timer_fires.append((point, time, trigger.on_event_time(time, window, ctx)))
            if time == cleanup:
                trigger.clear(window, ctx)
                if ctx.state or ctx.timers:
                    raise Decline  # the operator would report a leak
                cleaned = True

        # Record firings and timer firings in replay order; each sees the pairs up to its position
        # (a timer firing after a record's watermark advance sees that record).
        pair_seqs = self.pair_seqs
        element_seqs = pair_seqs[element_fires].tolist() if element_fires else []
        timer_seqs = [adv_seq[point] for point, _, _ in timer_fires]
        timer_cuts = (lo + np.searchsorted(pair_seqs[lo:hi], timer_seqs, side="right")).tolist()
        segment, first_segment = lo, True
        fire_result = _element_result(shape.purging)
        e = 0
        timer_steps = zip([*timer_fires, (None, None, None)], [*timer_seqs, None], [*timer_cuts, None],
                          strict=True)
        for (point, time, result), emit_seq, cut in timer_steps:
            while e < len(element_fires) and (emit_seq is None or element_seqs[e] <= emit_seq):
                pair, seq = element_fires[e], element_seqs[e]
                watermark = int(self.watermarks[self.records[pair]])
                fields = (window, pane_count, element_timing(watermark, window), watermark,
                          timeline.clock_at(seq), None, seq, STEP_ELEMENT)
                segment, first_segment, pane_count = self._fire(
                    index, segment, first_segment, pair + 1, fire_result, contents, hi, fields, firings,
                    pane_count)
                e += 1
            if point is None:
                break
            fields = (window, pane_count, timer_timing(time, window), adv_wm[point],
                      timeline.clock_at(emit_seq), time, emit_seq, STEP_EVENT_TIMER)
            segment, first_segment, pane_count = self._fire(
                index, segment, first_segment, cut, result, contents, hi, fields, firings, pane_count)
        if cleaned:
            return
        restored_contents = contents if first_segment else None
        request = None
        if restored_contents is not None or hi > segment:
            request = self.requests.add(index, segment, hi, restored_contents, True)
        trigger_state = json.dumps(ctx.state, sort_keys=True) if ctx.state else None
        dumps.append((window, pane_count, request, trigger_state, sorted(ctx.timers)))

    def _fire(self, index: int, segment: int, first_segment: bool, cut: int, result: Any,
              contents: list[Any] | None, hi: int, fields: tuple[Any, ...], firings: list,
              pane_count: int) -> tuple[int, bool, int]:
        """One firing (the operator's emit_window_contents when the window holds contents), then
        its purge; returns the new segment start, whether it is still the first, the pane count."""
        restored = contents if first_segment else None
        if result.is_fire and (restored is not None or cut > segment):
            firings.append((self.requests.add(index, segment, cut, restored, False), fields))
            pane_count += 1
        if result.is_purge:
            segment, first_segment = cut, False
            if cut < hi:
                self.purge_cuts.append(cut)
        return segment, first_segment, pane_count


def _element_result(purging: bool) -> TriggerResult:
    """What on_element answers for a record after the window's end: FIRE (purging: and purge)."""
    return TriggerResult.FIRE_AND_PURGE if purging else TriggerResult.FIRE
