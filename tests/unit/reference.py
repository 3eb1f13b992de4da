"""An independent, per-record reference driver of Flink's ``WindowOperator`` (the test oracle).

It is written the way the contract (``shared/semantics.md``) reads, one record at a time, with
none of the engine's machinery: no :class:`~spark_jobs.core.watermarks.Timeline`, no
``KeyedWindowOperator``, no micro-batches. It has its own watermark bookkeeping (computed naively
per record), its own timer queues (a plain priority queue per time domain, as Flink's
``InternalTimerServiceImpl``), its own merging-window set (Flink's ``MergingWindowSet``) and its
own window state. It reuses only what *defines* the pipeline: the window assigner, the trigger
and the :class:`~spark_jobs.core.aggregates.Aggregation` from ``spark_jobs``.

Per record, in replay order:

1. the replay clock advances to the record's ingest time (without one: its event time), never
   decreasing; if it advanced, every processing-time timer ``<= clock`` fires, in time order,
   including timers registered by those firings;
2. the record is processed with the watermark emitted after the previous record;
3. the watermark candidate is recomputed from scratch over the partitions (per partition
   ``max event time - D - 1``, minimum over the active ones); if this record emits a watermark
   (``per_record``: always; ``periodic``: the clock crossed a multiple of the interval;
   ``per_batch``: the record ends a batch) and it is higher, the watermark advances and every
   event-time timer ``<= watermark`` fires, in time order, including chained ones.

``finalize`` takes the clock to +infinity (processing-time timers) and then the watermark.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.config import PipelineConfig
from spark_jobs.core.aggregates import Aggregation
from spark_jobs.core.durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from spark_jobs.core.triggers.base import StateDescriptor, TriggerResult
from spark_jobs.core.windows.base import TimeWindow

EVENT, PROCESSING = "event", "processing"


@dataclass(frozen=True)
class RefPane:
    pane_index: int
    timing: str
    values: tuple
    watermark: int
    clock: int
    fire_time: int | None


@dataclass
class RefResult:
    #: (key, window) -> that window's firings, in order.
    panes: dict[tuple[tuple, TimeWindow], list[RefPane]]
    #: (key, seq) of every record that went to the late output.
    late: set[tuple[tuple, int]]
    #: What is left after the run: windows per key with their contents, trigger state, timers.
    windows: dict[tuple, dict[TimeWindow, TimeWindow]]
    contents: dict[tuple[tuple, TimeWindow], Any]
    trigger_state: dict[tuple[tuple, TimeWindow], dict[str, Any]]
    event_timers: set[tuple[int, tuple, TimeWindow]]
    processing_timers: set[tuple[int, tuple, TimeWindow]]
    leaks: list[str]
    watermark: int
    clock: int


@dataclass
class _TimerQueue:
    """Flink's timer queue: a set of (time, key, window) with a heap for the order."""

    timers: set[tuple[int, tuple, TimeWindow]] = field(default_factory=set)
    heap: list[tuple[int, int, tuple, TimeWindow]] = field(default_factory=list)
    counter: Any = field(default_factory=itertools.count)

    def add(self, time: int, key: tuple, window: TimeWindow) -> None:
        if (time, key, window) not in self.timers:
            self.timers.add((time, key, window))
            heapq.heappush(self.heap, (time, next(self.counter), key, window))

    def delete(self, time: int, key: tuple, window: TimeWindow) -> None:
        self.timers.discard((time, key, window))

    def pop_due(self, now: int) -> tuple[int, tuple, TimeWindow] | None:
        while self.heap and self.heap[0][0] <= now:
            time, _, key, window = heapq.heappop(self.heap)
            if (time, key, window) in self.timers:
                self.timers.remove((time, key, window))
                return time, key, window
        return None


class _Ctx:
    """The trigger context, pointed at one (key, window) at a time."""

    def __init__(self, driver: ReferenceDriver):
        self.d = driver
        self.key: tuple = ()
        self.window: TimeWindow | None = None
        self.merged: list[TimeWindow] = []

    def current_watermark(self) -> int:
        return self.d.watermark

    def current_processing_time(self) -> int:
        return self.d.clock

    def register_event_time_timer(self, time: int) -> None:
        self.d.event_timers.add(time, self.key, self.window)

    def register_processing_time_timer(self, time: int) -> None:
        self.d.processing_timers.add(time, self.key, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self.d.event_timers.delete(time, self.key, self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self.d.processing_timers.delete(time, self.key, self.window)

    def _values(self, window: TimeWindow) -> dict[str, Any]:
        return self.d.trigger_state.setdefault((self.key, window), {})

    def get_state(self, descriptor: StateDescriptor) -> Any:
        return self.d.trigger_state.get((self.key, self.window), {}).get(descriptor.name)

    def set_state(self, descriptor: StateDescriptor, value: Any) -> None:
        self._values(self.window)[descriptor.name] = value

    def clear_state(self, descriptor: StateDescriptor) -> None:
        values = self.d.trigger_state.get((self.key, self.window))
        if values is not None:
            values.pop(descriptor.name, None)
            if not values:
                del self.d.trigger_state[(self.key, self.window)]

    def merge_state(self, descriptor: StateDescriptor) -> None:
        # Flink's mergePartitionedState: the merged windows' values move into this window's.
        result = self.get_state(descriptor)
        for window in self.merged:
            values = self.d.trigger_state.get((self.key, window))
            if not values or descriptor.name not in values:
                continue
            value = values.pop(descriptor.name)
            if not values:
                del self.d.trigger_state[(self.key, window)]
            result = value if result is None else descriptor.merge(result, value)
        if result is not None:
            self.set_state(descriptor, result)


class ReferenceDriver:
    def __init__(self, config: PipelineConfig, batch_size: int | None = None):
        self.config = config
        self.assigner = config.window
        self.trigger = config.trigger
        self.aggregation = Aggregation(list(config.aggregates))
        self.lateness = config.allowed_lateness
        self.event_time = config.window.time == "event"
        self.wm_config = config.watermark
        self.batch_size = batch_size  # only for the per_batch watermark mode
        self.watermark = MIN_TIMESTAMP
        self.clock = MIN_TIMESTAMP
        # per partition: [max event time, clock of its last record]
        self.partitions: dict[str, list[int]] = {}
        self.event_timers = _TimerQueue()
        self.processing_timers = _TimerQueue()
        # key -> {actual window: state window} (non-merging windows map to themselves)
        self.windows: dict[tuple, dict[TimeWindow, TimeWindow]] = {}
        self.contents: dict[tuple[tuple, TimeWindow], Any] = {}  # (key, state window) -> acc
        self.pane_counts: dict[tuple[tuple, TimeWindow], int] = {}  # (key, actual window)
        self.trigger_state: dict[tuple[tuple, TimeWindow], dict[str, Any]] = {}
        self.panes: dict[tuple[tuple, TimeWindow], list[RefPane]] = {}
        self.late: set[tuple[tuple, int]] = set()
        self.leaks: list[str] = []
        self.ctx = _Ctx(self)

    # ---- the loop --------------------------------------------------------------------------
    def run(self, records: Sequence[Any], finalize: bool = True) -> RefResult:
        uses_ingest = self.config.source.ingest_time is not None
        for seq, record in enumerate(records):
            raw_clock = record.ingest_time if uses_ingest else record.event_time
            previous_clock = self.clock
            if raw_clock > self.clock:
                self.advance_clock(raw_clock)
            self.process_element(record.key, seq, record.event_time, record.values)
            self.track_partition(record.partition, record.event_time)
            if self.emits(seq, len(records), previous_clock):
                candidate = self.watermark_candidate()
                if candidate > self.watermark:
                    self.advance_watermark(candidate)
        if finalize:
            if self.clock < MAX_TIMESTAMP:
                self.advance_clock(MAX_TIMESTAMP)
            if self.watermark < MAX_TIMESTAMP:
                self.advance_watermark(MAX_TIMESTAMP)
        return RefResult(
            self.panes, self.late, self.windows, self.contents, self.trigger_state,
            set(self.event_timers.timers), set(self.processing_timers.timers), self.leaks,
            self.watermark, self.clock,
        )

    # ---- watermarks, written naively ---------------------------------------------------------
    def track_partition(self, partition: str, event_time: int) -> None:
        state = self.partitions.setdefault(partition, [MIN_TIMESTAMP, MIN_TIMESTAMP])
        state[0] = max(state[0], event_time)
        state[1] = self.clock

    def watermark_candidate(self) -> int:
        idle = self.wm_config.idle_timeout
        candidates = []
        for max_event_time, last_clock in self.partitions.values():
            if idle is not None and self.clock - last_clock >= idle:
                continue  # idle: leaves the minimum until it speaks again
            candidates.append(max_event_time - self.wm_config.max_out_of_orderness - 1)
        return min(candidates)  # the current record's partition is always active

    def emits(self, seq: int, total: int, previous_clock: int) -> bool:
        mode = self.wm_config.emit
        if mode == "per_record":
            return True
        if mode == "periodic":
            interval = self.wm_config.interval
            return self.clock // interval > previous_clock // interval
        assert self.batch_size, "per_batch needs the batch size"
        return (seq + 1) % self.batch_size == 0 or seq + 1 == total

    def advance_clock(self, clock: int) -> None:
        self.clock = clock
        while (due := self.processing_timers.pop_due(clock)) is not None:
            self.on_timer(PROCESSING, *due)

    def advance_watermark(self, watermark: int) -> None:
        self.watermark = watermark
        while (due := self.event_timers.pop_due(watermark)) is not None:
            self.on_timer(EVENT, *due)

    # ---- Flink's WindowOperator ----------------------------------------------------------------
    def cleanup_time(self, window: TimeWindow) -> int:
        if not self.event_time:
            return window.max_timestamp
        time = window.max_timestamp + self.lateness
        return time if time < MAX_TIMESTAMP else MAX_TIMESTAMP

    def is_window_late(self, window: TimeWindow) -> bool:
        return self.event_time and self.cleanup_time(window) <= self.watermark

    def process_element(self, key: tuple, seq: int, timestamp: int, values: tuple) -> None:
        mapping = self.windows.setdefault(key, {})
        skipped = True
        for window in self.assigner.assign(timestamp if self.event_time else self.clock):
            if self.assigner.merging:
                window = self.add_merging_window(key, window)
                if self.is_window_late(window):
                    del mapping[window]  # retireWindow
                    continue
            elif self.is_window_late(window):
                continue
            else:
                mapping.setdefault(window, window)
            skipped = False
            state_window = mapping[window]
            acc = self.contents.get((key, state_window))
            if acc is None:
                acc = self.contents[(key, state_window)] = self.aggregation.create()
            self.aggregation.add(acc, values, seq)
            self.point(key, window)
            result = self.trigger.on_element(None, timestamp, window, self.ctx)
            if result.is_fire:
                now = self.watermark if self.event_time else self.clock
                self.emit(key, window, "EARLY" if now < window.max_timestamp else "LATE", None)
            if result.is_purge:
                self.contents.pop((key, state_window), None)
            self.register_cleanup_timer(key, window)
        if not mapping:
            del self.windows[key]
        if skipped and self.event_time and timestamp + self.lateness <= self.watermark:
            self.late.add((key, seq))

    def on_timer(self, domain: str, time: int, key: tuple, window: TimeWindow) -> None:
        mapping = self.windows.get(key, {})
        if self.assigner.merging and window not in mapping:
            return  # a timer of a window merged away
        self.point(key, window)
        hook = self.trigger.on_event_time if domain == EVENT else self.trigger.on_processing_time
        result: TriggerResult = hook(time, window, self.ctx)
        state_window = mapping.get(window, window)
        if result.is_fire and (key, state_window) in self.contents:
            end = window.max_timestamp
            timing = "EARLY" if time < end else "ON_TIME" if time == end else "LATE"
            self.emit(key, window, timing, time)
        if result.is_purge:
            self.contents.pop((key, state_window), None)
        cleans_up = (domain == EVENT) == self.event_time
        if cleans_up and time == self.cleanup_time(window):
            self.clear_all_state(key, window)

    def emit(self, key: tuple, window: TimeWindow, timing: str, fire_time: int | None) -> None:
        state_window = self.windows[key][window]
        values = self.aggregation.result(self.contents[(key, state_window)])
        index = self.pane_counts.get((key, window), 0)
        self.pane_counts[(key, window)] = index + 1
        pane = RefPane(index, timing, _freeze(values), self.watermark, self.clock, fire_time)
        self.panes.setdefault((key, window), []).append(pane)

    def register_cleanup_timer(self, key: tuple, window: TimeWindow) -> None:
        time = self.cleanup_time(window)
        if time == MAX_TIMESTAMP:
            return  # "end of time": no cleanup timer (Flink)
        queue = self.event_timers if self.event_time else self.processing_timers
        queue.add(time, key, window)

    def delete_cleanup_timer(self, key: tuple, window: TimeWindow) -> None:
        queue = self.event_timers if self.event_time else self.processing_timers
        queue.delete(self.cleanup_time(window), key, window)

    def clear_all_state(self, key: tuple, window: TimeWindow) -> None:
        mapping = self.windows.get(key, {})
        state_window = mapping.pop(window, window)
        if not mapping:
            self.windows.pop(key, None)
        self.contents.pop((key, state_window), None)
        self.pane_counts.pop((key, window), None)
        self.point(key, window)
        self.trigger.clear(window, self.ctx)
        left = [f"state {name}" for name in self.trigger_state.pop((key, window), {})]
        for label, queue in ((EVENT, self.event_timers), (PROCESSING, self.processing_timers)):
            for time, k, w in sorted(queue.timers):
                if k == key and w == window:
                    left.append(f"{label} timer {time}")
                    queue.delete(time, k, w)
        if left:
            self.leaks.append(f"{key} {window}: {', '.join(left)}")

    # ---- Flink's MergingWindowSet.addWindow --------------------------------------------------
    def add_merging_window(self, key: tuple, new_window: TimeWindow) -> TimeWindow:
        mapping = self.windows.setdefault(key, {})
        groups = self.assigner.merge_windows([*mapping, new_window])
        result, merged_new = new_window, False
        for cover, members in groups:
            members = list(members)
            if new_window in members:
                members.remove(new_window)
                merged_new, result = True, cover
            state_window = mapping[members[0]]
            merged_state_windows = [mapping.pop(m) for m in members if m in mapping]
            mapping[cover] = state_window
            merged_state_windows.remove(state_window)
            if not (cover in members and len(members) == 1):
                self.merge(key, cover, members, state_window, merged_state_windows)
        if not groups or (result == new_window and not merged_new):
            mapping[result] = result
        return result

    def merge(self, key: tuple, cover: TimeWindow, merged: list[TimeWindow],
              state_window: TimeWindow, merged_state_windows: list[TimeWindow]) -> None:
        self.point(key, cover)
        self.ctx.merged = merged
        self.trigger.on_merge(cover, self.ctx)
        self.ctx.merged = []
        for window in merged:
            self.point(key, window)
            self.trigger.clear(window, self.ctx)
            self.delete_cleanup_timer(key, window)
            self.pane_counts.pop((key, window), None)
        target = self.contents.get((key, state_window))
        for other in merged_state_windows:
            acc = self.contents.pop((key, other), None)
            if acc is not None:
                target = acc if target is None else self.aggregation.merge(target, acc)
        if target is not None:
            self.contents[(key, state_window)] = target

    def point(self, key: tuple, window: TimeWindow) -> None:
        self.ctx.key, self.ctx.window = key, window


def _freeze(values: list[Any]) -> tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)


def reference_replay(config: PipelineConfig, records: Sequence[Any], finalize: bool = True,
                     batch_size: int | None = None) -> RefResult:
    """Replay ``records`` (``state.memory.Record``-like) one at a time; see the module doc."""
    return ReferenceDriver(config, batch_size).run(records, finalize)
