"""Time-based joins of two archives, built from the engine's own parts.

A join pipeline reads two archives (``source``, the left input, and ``join.right``), each with
its own watermark; records are interleaved into one replay order (see ``spark_jobs.execution.replay``)
and tagged with their input, and the operator's watermark is the minimum of the two inputs'
(``spark_jobs.core.watermarks``), as in Flink's two-input operators.

* **Window join** (Flink's ``JoinedStreams``: a co-group of the tagged union in the pipeline's
  windows): the ordinary window operator with :class:`WindowJoinPane`, which buffers both inputs'
  records of a window and, at every firing, emits one row per (left, right) pair. Triggers,
  allowed lateness, late records and evictors (over the pane's union, before or after the join)
  behave exactly as in a windowed aggregation.
* **Interval join** (Flink's ``IntervalJoinOperator``): :class:`IntervalJoin`, a keyed process
  function run by the keyed-process operator, so its buffers and cleanup timers live in the
  state table like any process function's. A record behind the watermark is late and goes to
  ``late_events``; a buffered record leaves the state once the watermark passes the last time
  a partner could still join it.

A :class:`JoinFunction` (``join.function``) turns a pair into an output row; by default the row
holds both records (JSON) and their event times.
"""

from __future__ import annotations

import json
from typing import Any

from ..aggregates import Aggregation
from ..functions import BufferedPane, Evictor
from ..windows.base import TimeWindow
from .process import KeyedProcessFunction, ProcessContext

LEFT, RIGHT = 0, 1
#: Output columns of a join without ``join.function``.
DEFAULT_JOIN_OUTPUT = {"left_time": "long", "right_time": "long", "left": "string", "right": "string"}
#: ``late_events.reason`` of a record that reached an interval join behind the watermark.
INTERVAL_LATE_REASON = "behind_watermark"


class JoinFunction:
    """Override ``join``: one output row (a dict of the declared outputs) per pair, or None to
    emit nothing for the pair (Flink's ``FlatJoinFunction`` with zero or one results)."""

    def join(self, left: dict[str, Any], right: dict[str, Any], left_time: int,
             right_time: int) -> dict[str, Any] | None:
        raise NotImplementedError


class PairJoin(JoinFunction):
    """The default: both records as JSON (keys sorted) and both event times."""

    def join(self, left: dict[str, Any], right: dict[str, Any], left_time: int,
             right_time: int) -> dict[str, Any]:
        return {
            "left_time": left_time,
            "right_time": right_time,
            "left": json.dumps(left, sort_keys=True),
            "right": json.dumps(right, sort_keys=True),
        }


class _Rows:
    """Applies the join function to a pair and lays its result out as the output columns."""

    def __init__(self, function: JoinFunction | None, output_names: list[str]):
        self.function = function or PairJoin()
        self.output_names = output_names

    def row(self, left: list[Any], right: list[Any]) -> list[Any] | None:
        """``left``/``right`` are ``[seq, timestamp, ..., element]`` entries."""
        result = self.function.join(left[-1], right[-1], left[1], right[1])
        if result is None:
            return None
        return [result.get(name) for name in self.output_names]


class WindowJoinPane(BufferedPane):
    """The pane function of a window join: both inputs' records, joined at each firing.

    It buffers like any buffered pane: ``[seq, timestamp, [input], element]`` entries in arrival
    order, the layout evictors work on, so an evictor sees the union of both inputs, as in
    Flink's co-group. Only the firing differs.
    """

    #: ``fire`` returns a list of rows (one per pair), not one row.
    rows_per_firing = True

    def __init__(self, evictor: Evictor | None, function: JoinFunction | None, output_names: list[str]):
        super().__init__(Aggregation([]), evictor, None, output_names)
        self.rows = _Rows(function, output_names)

    def fire(self, contents: list, key: tuple, window: TimeWindow, pane_index: int) -> tuple[list, Any]:
        evictor = self.evictor
        if evictor is not None and not evictor.after:
            contents = evictor.evict(contents)
        lefts = [entry for entry in contents if entry[2][0] == LEFT]
        rights = [entry for entry in contents if entry[2][0] == RIGHT]
        # Flink's CoGroupJoinFunction: for each left record, for each right record.
        rows = [row for left in lefts for right in rights if (row := self.rows.row(left, right)) is not None]
        if evictor is not None and evictor.after:
            contents = evictor.evict(contents)
        return rows, (contents or None)


class IntervalJoin(KeyedProcessFunction):
    """Flink's ``IntervalJoinOperator`` for one key.

    A left record at ``t`` joins every right record at ``t + lower .. t + upper`` (inclusive),
    whichever arrives first. Each input's records are buffered by timestamp in ``ctx.state``;
    a record is late (and dropped to ``late_events``) when its timestamp is below the current
    watermark. Buffers are cleaned by event-time timers at the last moment a partner could
    still arrive: a left record at ``t + upper`` (or ``t`` if ``upper`` < 0), a right record at
    ``t - lower`` (or ``t`` if ``lower`` > 0), exactly as Flink registers them.
    """

    def __init__(self, lower: int, upper: int, function: JoinFunction | None, output_names: list[str]):
        self.lower, self.upper = lower, upper
        self.rows = _Rows(function, output_names)

    def process_element(self, record: dict[str, Any], ctx: ProcessContext) -> None:
        timestamp = ctx.timestamp
        assert timestamp is not None
        if timestamp < ctx.current_watermark():
            ctx.mark_late()
            return
        is_left = ctx.input == LEFT
        ours, theirs = ("left", "right") if is_left else ("right", "left")
        lower, upper = (self.lower, self.upper) if is_left else (-self.upper, -self.lower)
        entry = [ctx.seq, timestamp, record]
        ctx.state.setdefault(ours, {}).setdefault(str(timestamp), []).append(entry)
        # JSON object keys are strings: buckets are visited in timestamp order for a stable output.
        for bucket_time, bucket in sorted(ctx.state.get(theirs, {}).items(), key=lambda kv: int(kv[0])):
            other_time = int(bucket_time)
            if other_time < timestamp + lower or other_time > timestamp + upper:
                continue
            for other in bucket:
                left, right = (entry, other) if is_left else (other, entry)
                row = self.rows.row(left, right)
                if row is not None:
                    ctx.emit(dict(zip(self.rows.output_names, row, strict=True)))
        cleanup = timestamp + upper if upper > 0 else timestamp
        ctx.register_event_time_timer(cleanup)

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> None:
        # One timer per time stands for both inputs' cleanup at that time (Flink keeps two
        # namespaces); a bucket exists at the derived time only if its own timer was this one.
        left_time = timestamp - self.upper if self.upper > 0 else timestamp
        right_time = timestamp + self.lower if self.lower <= 0 else timestamp
        for side, bucket_time in (("left", left_time), ("right", right_time)):
            buckets = ctx.state.get(side)
            if buckets is not None:
                buckets.pop(str(bucket_time), None)
                if not buckets:
                    del ctx.state[side]
