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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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

#: The column kinds each value-reading function takes (count, first, last, collect_list take any).
_VALUE_KINDS = {
    "sum": ("int", "float", "null"),
    "avg": ("int", "float", "null"),
    "min": ("int", "float", "str", "null"),
    "max": ("int", "float", "str", "null"),
    "count_distinct": ("int", "float", "str", "null"),
}


class _Decline(Exception):
    """The input is outside what the kernel reproduces exactly: the per-record operator runs it."""


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
    except _Decline:
        return None


# ---- inputs -------------------------------------------------------------------------------------
def _int64_array(values: Any) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if values.null_count or not pa.types.is_integer(values.type) or values.type == pa.uint64():
            raise _Decline
        return values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return values
    array = np.asarray(list(values))
    if not len(array):
        return np.zeros(0, dtype=np.int64)
    if array.dtype != np.int64:  # floats, bools, ints beyond int64 (object): not timestamps
        raise _Decline
    return array


_PYTHON_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def _arrow_column(column: Any, n: int) -> pa.Array:
    """The column as an Arrow array holding exactly the Python values the operator would see."""
    if column is None:
        return pa.nulls(n)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.Array):
        return column
    values = list(column)
    kinds = {type(value) for value in values if value is not None}
    if not kinds:
        return pa.nulls(len(values))
    if len(kinds) > 1 or (arrow_type := _PYTHON_TYPES.get(kinds.pop())) is None:
        raise _Decline  # mixed types (e.g. int and float): Arrow would convert them
    try:
        return pa.array(values, arrow_type)
    except (pa.ArrowException, OverflowError, ValueError, UnicodeError) as error:
        raise _Decline from error


def _kind(array: pa.Array) -> str:
    kind = array.type
    if pa.types.is_null(kind):
        return "null"
    if pa.types.is_signed_integer(kind):
        return "int"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "str"
    return "other"


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
        raise _Decline

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
        raise _Decline


@dataclass
class _Requests:
    """What phase 3 computes: per firing (or state dump), a window's pairs ``[segment, cut)``
    (indices into the sorted pairs) and, when the segment is the window's first, its restored
    contents too."""

    window: list[int]
    segment: list[int]
    cut: list[int]
    restored: list[list[Any] | None]  # the restored contents the segment starts from, if any
    dump: list[bool]  # the Python accumulator (for the state row) rather than the result

    def add(self, window: int, segment: int, cut: int, restored: list[Any] | None, dump: bool) -> int:
        self.window.append(window)
        self.segment.append(segment)
        self.cut.append(cut)
        self.restored.append(restored)
        self.dump.append(dump)
        return len(self.cut) - 1


class _Run:
    """One key's batch through the three phases (the module's doc)."""

    def __init__(self, spec: OperatorSpec, shape: _Shape, timeline: Timeline):
        self.spec = spec
        self.shape = shape
        self.timeline = timeline

    def run(self, state: list[WindowStateRow], seqs: Any, timestamps: Any,
            columns: Sequence[Any]) -> KeyOutput:
        shape, timeline = self.shape, self.timeline
        seqs, timestamps = _int64_array(seqs), _int64_array(timestamps)
        n = len(seqs)
        if len(timestamps) != n or (n > 1 and not bool((seqs[1:] > seqs[:-1]).all())):
            raise _Decline
        if not n:
            columns = [None] * len(shape.functions)
        elif len(columns) != len(shape.functions):
            raise _Decline
        else:
            self._check_time(int(timestamps.min()), int(timestamps.max()))
        self.columns = [None if counts_all else _arrow_column(column, n)
                        for counts_all, column in zip(shape.counts_all, columns, strict=True)]
        self.kinds = [None if column is None else _kind(column) for column in self.columns]
        for function, kind in zip(shape.functions, self.kinds, strict=True):
            if function in _VALUE_KINDS and kind not in _VALUE_KINDS[function]:
                raise _Decline
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
        self.requests = _Requests([], [], [], [], [])
        self.purge_cuts: list[int] = []
        firings: list[tuple[int, tuple[Any, ...]]] = []  # (request, pane fields)
        dumps: list[tuple[TimeWindow, int, int | None, str | None, list[int]]] = []
        for index, start in enumerate(self.windows):
            self._window(index, start, groups.get(start), restored.get(start), firings, dumps)

        # Phase 3: the aggregates of every firing and every dumped window.
        results = _Pairs(self).evaluate_all()
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
            raise _Decline

    def _restore(self, state: list[WindowStateRow], first_seq: int | None) -> dict[int, _Window]:
        """The state rows as the operator would load them, or decline what the kernel does not know."""
        shape = self.shape
        restored: dict[int, _Window] = {}
        for row in state:
            start, end = (int(v) for v in row.window)
            if not row.is_open or row.processing_timers or start in restored:
                raise _Decline
            if end - start != shape.size or (start - self.spec.assigner.offset) % shape.slide:
                raise _Decline
            self._check_time(start, end)
            try:
                contents = None
                if row.contents is not None:
                    contents = self.spec.pane.from_json(json.loads(row.contents))
                trigger_state = json.loads(row.trigger_state) if row.trigger_state else {}
            except (ValueError, TypeError) as error:
                raise _Decline from error
            max_timestamp = end - 1
            timers = sorted({int(t) for t in row.event_timers or ()})
            allowed = {max_timestamp + shape.lateness}
            if not isinstance(trigger_state, dict):
                raise _Decline
            nested = shape.nested
            # Only the state the trigger keeps (the event-time trigger keeps none).
            if set(trigger_state) - nested.state_names():
                raise _Decline
            if shape.count:
                count = nested.counted(trigger_state)
                if count is not None and (type(count) is not int or not 0 < count < shape.count):
                    raise _Decline
            else:
                allowed.add(max_timestamp)
                fire_time = nested.fire_time(trigger_state) if shape.interval else None
                if fire_time is not None:
                    if type(fire_time) is not int or fire_time > max_timestamp:
                        raise _Decline
                    allowed.add(fire_time)
            if not set(timers) <= allowed or type(row.pane_count) is not int:
                raise _Decline
            if contents is not None:
                self._check_contents(contents, first_seq)
            restored[start] = _Window(row.pane_count, contents, trigger_state, timers)
        return restored

    def _check_contents(self, contents: list[Any], first_seq: int | None) -> None:
        """Restored accumulators the kernel continues with Python's results (by function and
        column kind), or decline."""
        if len(contents) != len(self.shape.functions):
            raise _Decline
        for function, kind, value in zip(self.shape.functions, self.kinds, contents, strict=True):
            if not _continues(function, kind, value, first_seq):
                raise _Decline

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
                        raise _Decline  # cannot be: the watermark is before the window's end
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
                    raise _Decline  # the operator would report a leak
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


def _continues(function: str, kind: str | None, value: Any, first_seq: int | None) -> bool:
    """Whether a restored accumulator value is one the kernel continues exactly."""
    if function == "count":
        return type(value) is int
    if function in ("first", "last"):
        return value is None or (
            isinstance(value, list) and len(value) == 2 and type(value[0]) is int
            and (first_seq is None or value[0] < first_seq)
        )
    if function == "collect_list":
        return isinstance(value, list)
    if kind == "null":  # nothing gets added: the value only passes through
        return True
    python_type = {"int": int, "float": float, "str": str}[kind]
    if function == "sum":
        return value is None or type(value) is python_type or (kind == "float" and type(value) is int)
    if function == "avg":
        if not (isinstance(value, list) and len(value) == 2 and type(value[1]) is int and value[1] >= 0):
            return False
        total = value[0]
        return type(total) is python_type or (kind == "float" and type(total) is int)
    if function in ("min", "max"):
        if value is None:
            return True
        if type(value) is not python_type:
            return False
        return kind != "int" or -(2**63) <= value < 2**63
    # count_distinct: a set of values of the column's type
    return isinstance(value, set) and all(type(item) is python_type for item in value)


class _Pairs:
    """Phase 3: the aggregates over the accepted pairs (window by window, replay order within) for
    every request, one aggregate at a time, with Python's results."""

    def __init__(self, run: _Run):
        requests = run.requests
        self.run = run
        self.records = run.records
        self.count = len(run.records)
        self.window = np.asarray(requests.window, dtype=np.int64)
        self.segment = np.asarray(requests.segment, dtype=np.int64)
        self.cut = np.asarray(requests.cut, dtype=np.int64)
        self.contents = requests.restored
        self.dump = requests.dump
        # Requests of one segment come one after another, their cuts not decreasing. A segment is
        # its window, its first pair and whether it starts from restored contents: a purge right at
        # the first pair starts a new segment at the same pair.
        fresh = np.asarray([contents is None for contents in self.contents], dtype=bool)
        change = ((self.window[1:] != self.window[:-1]) | (self.segment[1:] != self.segment[:-1])
                  | (fresh[1:] != fresh[:-1]))
        self.runs = np.flatnonzero(np.concatenate(([True], change))).tolist() + [len(self.cut)]
        self._valid_before: dict[int, np.ndarray] = {}

    def evaluate_all(self) -> list[list[Any]]:
        """Per request: the pane's values, or (for a dump) the aggregation's accumulator list."""
        if not len(self.cut):
            return []
        per_function = [self.evaluate(i, function) for i, function in enumerate(self.run.shape.functions)]
        return [list(values) for values in zip(*per_function, strict=True)]

    def evaluate(self, i: int, function: str) -> list[Any]:
        kind = self.run.kinds[i]
        if function == "count":
            return self._count(i)
        if function == "sum":
            return self._sum(i, kind)
        if function == "avg":
            return self._avg(i, kind)
        if function in ("min", "max"):
            return self._extreme(i, kind, np.minimum if function == "min" else np.maximum)
        if function == "count_distinct":
            return self._count_distinct(i, kind)
        if function in ("first", "last"):
            return self._end(i, function == "first")
        return self._collect(i)

    # -- per column ------------------------------------------------------------------------------
    def column(self, i: int) -> pa.Array:
        return self.run.columns[i]

    def valid_before(self, i: int) -> np.ndarray:
        """How many pairs before each pair index (0..count) have a value (not null) in column ``i``."""
        if i not in self._valid_before:
            column = self.column(i)
            if column.null_count == 0:
                before = np.arange(self.count + 1, dtype=np.int64)
            else:
                valid = np.asarray(column.is_valid())[self.records]
                before = np.concatenate(([0], np.cumsum(valid, dtype=np.int64)))
            self._valid_before[i] = before
        return self._valid_before[i]

    def valid_pairs(self, i: int) -> np.ndarray:
        """The pairs with a value in column ``i``, in order."""
        before = self.valid_before(i)
        return np.flatnonzero(before[1:] > before[:-1])

    def numbers(self, i: int, dtype: Any) -> np.ndarray:
        """Column ``i``'s values at its valid pairs, in order."""
        column = self.column(i)
        if pa.types.is_null(column.type):
            return np.zeros(0, dtype=dtype)
        filled = pc.fill_null(column, 0) if column.null_count else column
        values = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=dtype)
        return values[self.records[self.valid_pairs(i)]]

    def python_values(self, i: int, pairs: np.ndarray) -> list[Any]:
        return self.column(i).take(pa.array(self.records[pairs], pa.int64())).to_pylist()

    def restored(self, i: int) -> list[Any]:
        """Per request, the restored accumulator its segment starts from (None: a fresh one)."""
        return [None if contents is None else contents[i] for contents in self.contents]

    def added(self, i: int) -> np.ndarray:
        """How many values each request's segment adds (for count(*): pairs)."""
        if self.run.shape.counts_all[i]:
            return self.cut - self.segment
        before = self.valid_before(i)
        return before[self.cut] - before[self.segment]

    def _int_totals(self, i: int) -> list[int]:
        """Exact integer sums of each request's segment (int64 prefix sums, declined if they could
        overflow: Python's ints never do)."""
        values = self.numbers(i, np.int64)
        if len(values) and float(np.abs(values.astype(np.float64)).max()) * len(values) >= 2.0**62:
            raise _Decline
        prefix = np.concatenate(([0], np.cumsum(values)))
        before = self.valid_before(i)
        return (prefix[before[self.cut]] - prefix[before[self.segment]]).tolist()

    # -- per function ------------------------------------------------------------------------------
    def _count(self, i: int) -> list[Any]:
        return [a if base is None else base + a
                for a, base in zip(self.added(i).tolist(), self.restored(i), strict=True)]

    def _sum(self, i: int, kind: str) -> list[Any]:
        bases = self.restored(i)
        if kind != "int":
            return self._running(i, np.add, self.numbers(i, np.float64), bases)
        return [
            (total if a else None) if base is None else base + total
            for total, a, base in zip(self._int_totals(i), self.added(i).tolist(), bases, strict=True)
        ]

    def _avg(self, i: int, kind: str) -> list[Any]:
        starts = [[0, 0] if base is None else base for base in self.restored(i)]
        if kind == "int":
            sums = [start[0] + total for start, total in zip(starts, self._int_totals(i), strict=True)]
        else:  # Python's 0 + v1 + v2 ...: a float fold from the start value
            sums = self._running(i, np.add, self.numbers(i, np.float64), [start[0] for start in starts])
        out: list[Any] = []
        for total, a, start, dump in zip(sums, self.added(i).tolist(), starts, self.dump, strict=True):
            n = start[1] + a
            out.append([total, n] if dump else (total / n if n else None))
        return out

    def _extreme(self, i: int, kind: str, ufunc: Any) -> list[Any]:
        bases = self.restored(i)
        if kind == "str":
            ranks, ordered, base_ranks = self._ranks(i, bases)
            return [None if rank is None else ordered[rank]
                    for rank in self._running(i, ufunc, ranks, base_ranks)]
        values = self.numbers(i, np.int64 if kind == "int" else np.float64)
        if kind == "float" and (np.isnan(values).any() or any(b != b for b in bases if b is not None)):
            raise _Decline  # Python's comparisons with NaN are false both ways: no running min/max
        # Of equal values Python keeps the first: only 0.0 vs -0.0 can tell.
        return self._running(i, ufunc, values, bases, first_zero=kind == "float")

    def _ranks(self, i: int, bases: list[Any]) -> tuple[np.ndarray, list[str], list[Any]]:
        """Strings as ranks in code-point order (UTF-8 byte order, which Arrow sorts by): the valid
        pairs' ranks, the strings by rank, the bases' ranks."""
        column = self.column(i).cast(pa.string())
        extra = [b for b in bases if b is not None]
        encoded = pa.concat_arrays([column, pa.array(extra, pa.string())]).dictionary_encode()
        if not len(encoded.dictionary):  # nothing but nulls
            return np.zeros(0, dtype=np.int64), [], [None] * len(bases)
        order = np.asarray(pc.sort_indices(encoded.dictionary), dtype=np.int64)
        rank_of = np.empty(len(order), dtype=np.int64)
        rank_of[order] = np.arange(len(order))
        ranks = rank_of[np.asarray(pc.fill_null(encoded.indices, 0), dtype=np.int64)]
        extra_ranks = iter(ranks[len(column):].tolist())
        base_ranks = [None if b is None else next(extra_ranks) for b in bases]
        ordered = encoded.dictionary.take(pa.array(order)).to_pylist()
        return ranks[: len(column)][self.records[self.valid_pairs(i)]], ordered, base_ranks

    def _running(self, i: int, ufunc: Any, values: np.ndarray, bases: list[Any],
                 first_zero: bool = False) -> list[Any]:
        """``ufunc`` folded in order (``accumulate`` is sequential, unlike a pairwise ``sum``) over
        each request's segment values up to its cut, starting from the request's base (None: from
        the first value), as Python's loop does; the base itself while nothing was added.

        ``first_zero`` (min and max of floats): a result equal to zero is the first zero of the
        segment, as Python's ``if value < acc`` never replaces a zero by another one."""
        before = self.valid_before(i)
        lows, cuts = before[self.segment], before[self.cut]
        out: list[Any] = [None] * len(self.cut)
        runs = self.runs
        for first, end in zip(runs[:-1], runs[1:], strict=True):
            base = bases[first]
            low, top = int(lows[first]), int(cuts[end - 1])
            if low == top:  # nothing added (perhaps a column of nulls): the base as it was
                out[first:end] = [base] * (end - first)
                continue
            chunk = values[low:top]
            if base is not None:
                chunk = np.concatenate((np.asarray([base], dtype=values.dtype), chunk))
            folded = ufunc.accumulate(chunk)
            if first_zero and (zeros := np.flatnonzero(chunk == 0)).size:
                folded = np.where(folded == 0, chunk[zeros[0]], folded)
            folded = folded.tolist()
            for r, k in zip(range(first, end), (cuts[first:end] - low).tolist(), strict=True):
                if base is None:
                    out[r] = folded[k - 1] if k else None
                else:
                    out[r] = folded[k] if k else base
        return out

    def _count_distinct(self, i: int, kind: str) -> list[Any]:
        bases = self.restored(i)
        column = self.column(i)
        valid = self.valid_pairs(i)
        if not len(valid):  # nothing added (a column of nulls, or no records): the sets as they were
            return [(set(base) if base else set()) if dump else (len(base) if base else 0)
                    for base, dump in zip(bases, self.dump, strict=True)]
        # Each window's restored set, added before any of its pairs (in its first segment).
        restored = [(w, contents[i]) for w, contents in enumerate(self.run.restored_contents)
                    if contents is not None and contents[i]]
        extra = [v for _, members in restored for v in members]
        # Values keyed under Python's equality: -0.0 == 0.0 (so 0.0 stands for both); NaN declined.
        if kind == "float":
            numbers = np.asarray(pc.fill_null(column, 0.0), dtype=np.float64)
            if np.isnan(numbers[self.records[valid]]).any():
                raise _Decline
            keyed = pa.concat_arrays([pa.array(numbers + 0.0), pa.array(np.asarray(extra, np.float64) + 0.0)])
        else:
            arrow_type = pa.int64() if kind == "int" else pa.string()
            keyed = pa.concat_arrays([column.cast(arrow_type), pa.array(extra, arrow_type)])
        encoded = keyed.dictionary_encode()
        codes = np.asarray(pc.fill_null(encoded.indices, 0), dtype=np.int64)
        distinct = max(1, len(encoded.dictionary))
        epochs = len(self.run.purge_cuts) + 1  # segment key: window * epochs + purges before it
        if float(len(self.run.windows)) * epochs * distinct >= 2.0**62:
            raise _Decline
        extra_segments = np.repeat(np.asarray([w * epochs for w, _ in restored], dtype=np.int64),
                                   np.asarray([len(members) for _, members in restored], dtype=np.int64))
        pair_segments = self._segment_keys(epochs)[valid]
        keys = np.concatenate((extra_segments * distinct + codes[len(column):],
                               pair_segments * distinct + codes[: len(column)][self.records[valid]]))
        new = np.zeros(self.count, dtype=np.int64)  # 1 where a pair adds a value new to its segment
        new[valid] = _first_occurrences(keys)[len(extra):]
        new_before = np.concatenate(([0], np.cumsum(new)))
        out: list[Any] = []
        for r, (a, base) in enumerate(zip((new_before[self.cut] - new_before[self.segment]).tolist(), bases,
                                           strict=True)):
            if not self.dump[r]:
                out.append(a + (len(base) if base else 0))
                continue
            members = set(base) if base else set()
            members.update(self.python_values(i, np.flatnonzero(new[self.segment[r]:self.cut[r]])
                                              + self.segment[r]))
            out.append(members)
        return out

    def _segment_keys(self, epochs: int) -> np.ndarray:
        """Each pair's segment as ``window * epochs + purges in its window up to it`` (0: the
        window's first segment, which starts from the restored contents)."""
        first_pairs, windows = self.run.first_pairs, self.run.windows
        with_pairs = [w for w, start in enumerate(windows) if start in self.run.grouped]
        lows = np.asarray([first_pairs[w] for w in with_pairs], dtype=np.int64)
        sizes = np.diff(np.append(lows, self.count))
        window_of = np.repeat(np.asarray(with_pairs, dtype=np.int64), sizes)
        cuts = np.sort(np.asarray(self.run.purge_cuts, dtype=np.int64))
        purges = (np.searchsorted(cuts, np.arange(self.count), side="right")
                  - np.searchsorted(cuts, np.repeat(lows, sizes), side="left"))
        return window_of * epochs + purges

    def _end(self, i: int, first: bool) -> list[Any]:
        before = self.valid_before(i)
        lows, cuts = before[self.segment], before[self.cut]
        found = cuts > lows
        picked = self.valid_pairs(i)[np.where(found, lows if first else cuts - 1, 0)[found]]
        values = iter(self.python_values(i, picked))
        seqs = iter(self.run.pair_seqs[picked].tolist())
        out: list[Any] = []
        for has, base, dump in zip(found.tolist(), self.restored(i), self.dump, strict=True):
            acc = [next(seqs), next(values)] if has else None
            if base is not None and (first or acc is None):
                acc = base  # first: a restored value came before every pair of this batch
            out.append(acc if dump or acc is None else acc[1])
        return out

    def _collect(self, i: int) -> list[Any]:
        before = self.valid_before(i)
        valid = self.valid_pairs(i)
        lows, cuts = before[self.segment].tolist(), before[self.cut].tolist()
        out: list[Any] = []
        for low, cut, base, dump in zip(lows, cuts, self.restored(i), self.dump, strict=True):
            pairs = valid[low:cut]
            acc = list(base or []) + list(zip(self.run.pair_seqs[pairs].tolist(),
                                              self.python_values(i, pairs), strict=True))
            out.append(acc if dump else [item for _, item in acc])
        return out


def _first_occurrences(keys: np.ndarray) -> np.ndarray:
    """Whether each key is the first of its value in the array (Arrow's hash encoding numbers values
    in order of first appearance, so a first occurrence is one that raises the running maximum)."""
    if not len(keys):
        return np.zeros(0, dtype=bool)
    codes = np.asarray(pa.array(keys, pa.int64()).dictionary_encode().indices, dtype=np.int64)
    previous = np.concatenate(([-1], np.maximum.accumulate(codes)[:-1]))
    return codes > previous
