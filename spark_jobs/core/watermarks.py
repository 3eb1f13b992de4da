"""Watermarks and the replay clock, computed once per micro-batch for every key.

Per record, in replay order (the contract's rules):

* the replay clock is the record's ingest time (or, without one, the largest event time seen),
  never decreasing;
* each input partition's watermark is ``max_event_time_seen - max_out_of_orderness - 1``;
* a partition silent for ``idle_timeout`` of replay clock is idle and leaves the minimum; the
  combined watermark is the minimum over active partitions and never decreases;
* it is emitted after every record (``per_record``), after a record whose clock crossed a
  multiple of the interval (``periodic``), or after the batch's last record (``per_batch``,
  the only mode whose results depend on the batch size).

The result is a :class:`Timeline`: the points where the watermark advanced and where the clock
advanced. Each key's operator locates its timers on it with a binary search, so the whole batch's
watermark is computed once (vectorised) and never per key.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .durations import MAX_TIMESTAMP, MIN_TIMESTAMP

# Rows per chunk times partitions: bounds the temporary (rows x partitions) matrices. Small enough
# (128 KB each) to stay in the CPU's cache and in the allocator's reused memory: with 32 MB matrices
# every pass's first timeline page-faulted its way to twice the time (1M records: 0.5 -> 0.26 s),
# and 2 MB ones took 0.33 s against 0.25 (1M records, 8 partitions). Short enough in replay time
# for a chunk to be shorter than an idle timeout (``_all_active``): 4,096 rows of 4 partitions
# are ~20 s of the generated clickstream.
_CHUNK_CELLS = 1 << 14


@dataclass(frozen=True)
class WatermarkConfig:
    """A watermark's parameters as plain values (integer milliseconds): what the pipeline YAML's
    ``watermark:`` block parses into. Defined here, beside the rules that read it, so the
    semantics never import the YAML layer (``spark_jobs.config`` re-exports it)."""

    max_out_of_orderness: int = 0
    emit: str = "per_record"  # per_record | periodic | per_batch
    interval: int | None = None  # for periodic
    idle_timeout: int | None = None

    @property
    def emit_spec(self) -> str:
        return f"periodic:{self.interval}ms" if self.emit == "periodic" else self.emit


@dataclass
class PartitionWatermark:
    max_event_time: int = MIN_TIMESTAMP
    last_clock: int = MIN_TIMESTAMP


@dataclass
class WatermarkState:
    """What carries over between batches: per-partition progress, the emitted watermark, clock."""

    partitions: dict[str, PartitionWatermark] = field(default_factory=dict)
    watermark: int = MIN_TIMESTAMP
    clock: int = MIN_TIMESTAMP

    def to_json(self) -> str:
        return json.dumps(
            {
                "watermark": self.watermark,
                "clock": self.clock,
                "partitions": {
                    name: [p.max_event_time, p.last_clock] for name, p in self.partitions.items()
                },
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> WatermarkState:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(
            partitions={
                name: PartitionWatermark(int(pair[0]), int(pair[1]))
                for name, pair in data["partitions"].items()
            },
            watermark=int(data["watermark"]),
            clock=int(data["clock"]),
        )


@dataclass
class Timeline:
    """The batch's global time points, shared by every key.

    ``adv_seq[i]`` is the replay sequence number of the record after which the combined watermark
    advanced to ``adv_wm[i]`` (strictly increasing); ``clk_seq[j]`` the record before which the
    replay clock advanced to ``clk_val[j]``. ``--finalize`` appends a point at ``seq_end`` that
    takes the clock, then the watermark, to +infinity.
    """

    seq_start: int
    seq_end: int
    start_watermark: int
    start_clock: int
    adv_seq: list[int]
    adv_wm: list[int]
    clk_seq: list[int]
    clk_val: list[int]
    _POINTS: ClassVar[tuple[str, ...]] = ("adv_seq", "adv_wm", "clk_seq", "clk_val")
    #: ``adv_seq`` and ``adv_wm`` as int64 arrays, built on first use (not pickled, not compared).
    _advance_arrays: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    #: ``clk_seq`` as an int64 array, built on first use (not pickled, not compared).
    _clock_array: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    #: The replay clock at each watermark advance, built on first use (not pickled, not compared).
    _advance_clocks: list[int] | None = field(default=None, init=False, repr=False, compare=False)

    def watermark_before(self, seq: int) -> int:
        """The watermark in force while record ``seq`` is processed (emitted after ``seq - 1``)."""
        i = bisect_left(self.adv_seq, seq)
        return self.adv_wm[i - 1] if i else self.start_watermark

    def watermarks_before(self, seqs: np.ndarray) -> np.ndarray:
        """Array form of :meth:`watermark_before`, for many records at once."""
        return self.watermarks_at(self.record_advances(seqs))

    def watermarks_at(self, advances: np.ndarray) -> np.ndarray:
        """The watermark in force at records with ``advances`` watermark advances before them
        (:meth:`record_points`' first list, as an array): :meth:`watermarks_before` without the search."""
        adv_wm = self._advances()[1]
        if not len(adv_wm):
            return np.full(len(advances), self.start_watermark, dtype=np.int64)
        return np.where(advances > 0, adv_wm[np.maximum(advances - 1, 0)], self.start_watermark)

    def clock_at(self, seq: int) -> int:
        """The replay clock while record ``seq`` (or a firing after it) is processed."""
        j = bisect_right(self.clk_seq, seq)
        return self.clk_val[j - 1] if j else self.start_clock

    def record_points(self, seqs: np.ndarray) -> tuple[list[int], list[int]]:
        """For records ``seqs`` at once: the number of watermark advances before each
        (``bisect_left(adv_seq, seq)``) and of clock advances up to each
        (``bisect_right(clk_seq, seq)``), which give :meth:`watermark_before`, :meth:`clock_at`
        and :meth:`event_timer_point`'s lower bound without a search per record."""
        seqs = np.asarray(seqs, dtype=np.int64)
        clocks = np.searchsorted(self._clocks(), seqs, side="right")
        return self.record_advances(seqs).tolist(), clocks.tolist()

    def record_advances(self, seqs: np.ndarray) -> np.ndarray:
        """:meth:`record_points`' advance counts alone, as an array (each a search of the batch's
        advances: a caller that needs the clock only now and then reads it with :meth:`clock_at`)."""
        return np.searchsorted(self._advances()[0], np.asarray(seqs, dtype=np.int64), side="left")

    def event_timer_points(self, times: np.ndarray) -> np.ndarray:
        """:meth:`event_timer_point` for many times at once, before its lower bound: the index of
        the first advance reaching each time (``len(adv_seq)``: none). As ``adv_wm`` is sorted,
        the point for a timer registered after ``advances_before`` advances is the larger of the
        two (None when it is ``len(adv_seq)``)."""
        return np.searchsorted(self._advances()[1], times, side="left")

    def advance_clock(self, point: int) -> int:
        """The replay clock at watermark advance ``point``: ``clock_at(adv_seq[point])``, read
        from a list built once for all keys (a timer firing needs it)."""
        if self._advance_clocks is None or len(self._advance_clocks) != len(self.adv_seq):
            clocks = np.searchsorted(self._clocks(), self._advances()[0], side="right")
            values = np.asarray([self.start_clock, *self.clk_val], dtype=np.int64)
            self._advance_clocks = values[clocks].tolist()
        return self._advance_clocks[point]

    def event_timer_point(self, time: int, after_seq: int, advances_before: int | None = None) -> int | None:
        """Index of the first watermark advance at or after record ``after_seq`` reaching ``time``
        (``advances_before``: ``bisect_left(adv_seq, after_seq)`` when the caller knows it)."""
        if advances_before is None:
            advances_before = bisect_left(self.adv_seq, after_seq)
        i = bisect_left(self.adv_wm, time, advances_before)  # adv_wm is sorted: max of the two
        return i if i < len(self.adv_seq) else None

    def _advances(self) -> tuple[np.ndarray, np.ndarray]:
        if self._advance_arrays is None or len(self._advance_arrays[0]) != len(self.adv_seq):
            self._advance_arrays = (np.asarray(self.adv_seq, dtype=np.int64),
                                    np.asarray(self.adv_wm, dtype=np.int64))
        return self._advance_arrays

    def _clocks(self) -> np.ndarray:
        if self._clock_array is None or len(self._clock_array) != len(self.clk_seq):
            self._clock_array = np.asarray(self.clk_seq, dtype=np.int64)
        return self._clock_array

    def processing_timer_point(self, time: int, after_seq: int, inclusive: bool) -> int | None:
        """Index of the first clock advance after record ``after_seq`` (at it, if ``inclusive``)
        reaching ``time``."""
        lo = bisect_left(self.clk_seq, after_seq) if inclusive else bisect_right(self.clk_seq, after_seq)
        j = max(lo, bisect_left(self.clk_val, time))
        return j if j < len(self.clk_seq) else None

    @property
    def end_watermark(self) -> int:
        return self.adv_wm[-1] if self.adv_wm else self.start_watermark

    @property
    def end_clock(self) -> int:
        return self.clk_val[-1] if self.clk_val else self.start_clock

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if not name.startswith("_")}

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to every Spark task and key helper: without the arrays each builds on first use,
        # and the points as int64 arrays (a pickled list of a 1M-record pass's advances: 12 MB,
        # 0.27 s to load; as an array a tenth of that).
        state = {**self.__dict__, "_advance_arrays": None, "_clock_array": None, "_advance_clocks": None}
        for name in self._POINTS:
            try:
                state[name] = np.asarray(state[name], dtype=np.int64)
            except OverflowError:  # a point past int64 (none is expected): pickled as the list
                pass
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in self._POINTS:
            if isinstance(state[name], np.ndarray):
                state[name] = state[name].tolist()
        self.__dict__.update(state)

    @classmethod
    def concat(cls, timelines: list[Timeline]) -> Timeline:
        """Consecutive batches' timelines as one, for running them in one pass.

        A key's operator only ever looks at the points, so running the joined timeline is
        running each batch in turn with its state carried over: the results are the same.
        """
        first, last = timelines[0], timelines[-1]
        for before, after in zip(timelines, timelines[1:], strict=False):
            if after.seq_start != before.seq_end:
                raise ValueError(f"timelines not consecutive: {before.seq_end} then {after.seq_start}")
        return cls(
            seq_start=first.seq_start,
            seq_end=last.seq_end,
            start_watermark=first.start_watermark,
            start_clock=first.start_clock,
            adv_seq=[s for t in timelines for s in t.adv_seq],
            adv_wm=[w for t in timelines for w in t.adv_wm],
            clk_seq=[s for t in timelines for s in t.clk_seq],
            clk_val=[v for t in timelines for v in t.clk_val],
        )


def compute_timeline(
    config: WatermarkConfig,
    state: WatermarkState,
    seq_start: int,
    event_time: np.ndarray,
    clock_source: np.ndarray | None,
    partition: np.ndarray | None,
    finalize: bool = False,
    inputs: dict[str, WatermarkConfig] | None = None,
) -> tuple[Timeline, WatermarkState]:
    """Compute one batch's timeline from its records (in replay order) and the carried state.

    ``clock_source`` is the ingest time per record (None: the clock follows event time);
    ``partition`` the partition name per record (an Arrow or numpy column; None: one partition).

    ``inputs`` (two-input pipelines) maps each input's name to its own out-of-orderness and
    idle timeout; partitions are then named ``input/partition``. Each input's watermark is the
    minimum over its active partitions, and the combined one the minimum over the inputs, where
    an input that has not sent a record yet holds it at the minimum (as in Flink).
    """
    n = len(event_time)
    event_time = np.asarray(event_time, dtype=np.int64)
    raw_clock = event_time if clock_source is None else np.asarray(clock_source, dtype=np.int64)
    clock = np.maximum.accumulate(np.maximum(raw_clock, state.clock)) if n else raw_clock
    names = list(state.partitions)
    if partition is None:
        partition = np.full(n, "0", dtype=object)
    # A hash table rather than np.unique's sort of the names as strings (1M records: 0.02 s, 0.1 s):
    # an Arrow column's own (no Python object per record: 0.07 -> 0.01 s), else pandas'. Imported
    # here: pandas (1.4 s) stays off the config's import path (DAG parsing, status).
    if hasattr(partition, "dictionary_encode"):
        whole = partition.combine_chunks() if hasattr(partition, "combine_chunks") else partition
        if hasattr(whole, "dictionary_decode"):  # encoded already: maybe with nulls, unused values
            whole = whole.dictionary_decode()
        encoded = whole.dictionary_encode(null_encoding="encode")
        codes, uniques = np.asarray(encoded.indices, dtype=np.int64), encoded.dictionary.to_pylist()
    else:
        import pandas as pd

        codes, uniques = pd.factorize(np.asarray(partition, dtype=object), use_na_sentinel=False)
    uniques = [_partition_name(u) for u in uniques]
    names.extend(sorted(set(uniques) - set(names)))
    index_of = {name: i for i, name in enumerate(names)}
    codes = np.array([index_of[u] for u in uniques], dtype=np.int64)[codes] if n else codes
    max_ts = np.array(
        [state.partitions.get(name, PartitionWatermark()).max_event_time for name in names],
        dtype=np.int64,
    )
    last_clock = np.array(
        [state.partitions.get(name, PartitionWatermark()).last_clock for name in names],
        dtype=np.int64,
    )
    candidate = np.empty(n, dtype=np.int64)
    chunk = max(1, _CHUNK_CELLS // max(1, len(names)))
    if inputs is None:
        groups: list[np.ndarray] = []
        delay: Any = config.max_out_of_orderness + 1
        idle: Any = config.idle_timeout
    else:
        group_of = [name.partition("/")[0] for name in names]
        unknown = sorted(set(group_of) - set(inputs))
        if unknown:
            raise ValueError(f"partition of an unknown input: {unknown[0]!r}")
        groups = [
            np.array([i for i, g in enumerate(group_of) if g == name], dtype=np.int64) for name in inputs
        ]
        delay = np.array([inputs[g].max_out_of_orderness + 1 for g in group_of], dtype=np.int64)[None, :]
        idle = np.array([inputs[g].idle_timeout or MAX_TIMESTAMP for g in group_of], dtype=np.int64)[None, :]
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        ts, cl, cd = event_time[lo:hi], clock[lo:hi], codes[lo:hi]
        own = cd[:, None] == np.arange(len(names))[None, :]
        seen_ts = np.maximum.accumulate(np.where(own, ts[:, None], MIN_TIMESTAMP), axis=0)
        np.maximum(seen_ts, max_ts[None, :], out=seen_ts)
        if inputs is None and _all_active(last_clock, int(cl[-1]), idle):
            # Every partition stays active through the chunk: the candidate is the least of their
            # largest event times less the delay (the same values, half the work: no clocks per cell).
            least = seen_ts.min(axis=1)
            candidate[lo:hi] = np.where(least == MIN_TIMESTAMP, MIN_TIMESTAMP, least - delay)
            max_ts, last_clock = seen_ts[-1], last_clock.copy()
            np.maximum.at(last_clock, cd, cl)  # (the clock never decreases: each one's last record's)
            continue
        seen_clock = np.maximum.accumulate(np.where(own, cl[:, None], MIN_TIMESTAMP), axis=0)
        seen_clock = np.maximum(seen_clock, last_clock[None, :])
        seen = seen_clock != MIN_TIMESTAMP
        active = seen
        if idle is not None:
            active = seen & ((cl[:, None] - seen_clock) < idle)
        part_wm = np.where(seen_ts == MIN_TIMESTAMP, MIN_TIMESTAMP, seen_ts - delay)
        masked = np.where(active, part_wm, MAX_TIMESTAMP)
        if inputs is None:
            candidate[lo:hi] = masked.min(axis=1)
        else:
            combined = np.full(hi - lo, MAX_TIMESTAMP, dtype=np.int64)
            for columns in groups:
                if not len(columns):
                    combined[:] = MIN_TIMESTAMP  # an input with no record yet
                    continue
                own_wm = masked[:, columns].min(axis=1)
                combined = np.minimum(combined, np.where(seen[:, columns].any(axis=1), own_wm, MIN_TIMESTAMP))
            candidate[lo:hi] = combined
        max_ts, last_clock = seen_ts[-1], seen_clock[-1]
    if config.emit == "per_record":
        emit = np.ones(n, dtype=bool)
    elif config.emit == "periodic":
        previous = np.concatenate(([state.clock], clock[:-1])) if n else clock
        emit = _floor_div(clock, config.interval) > _floor_div(previous, config.interval)
    else:  # per_batch
        emit = np.zeros(n, dtype=bool)
        if n:
            emit[-1] = True
    emitted = np.where(emit, candidate, MIN_TIMESTAMP)
    emitted = np.maximum.accumulate(np.maximum(emitted, state.watermark)) if n else emitted
    before = np.concatenate(([state.watermark], emitted[:-1])) if n else emitted
    adv = np.nonzero(emitted > before)[0]
    clock_before = np.concatenate(([state.clock], clock[:-1])) if n else clock
    clk = np.nonzero(clock > clock_before)[0]
    seq_end = seq_start + n
    timeline = Timeline(
        seq_start=seq_start,
        seq_end=seq_end,
        start_watermark=state.watermark,
        start_clock=state.clock,
        adv_seq=(adv + seq_start).tolist(),
        adv_wm=emitted[adv].tolist(),
        clk_seq=(clk + seq_start).tolist(),
        clk_val=clock[clk].tolist(),
    )
    new_state = WatermarkState(
        partitions={
            name: PartitionWatermark(int(max_ts[i]), int(last_clock[i])) for i, name in enumerate(names)
        },
        watermark=int(emitted[-1]) if n else state.watermark,
        clock=int(clock[-1]) if n else state.clock,
    )
    if finalize:
        # End of input: the clock, then the watermark, jump to +infinity (firing every timer).
        if new_state.clock < MAX_TIMESTAMP:
            timeline.clk_seq.append(seq_end)
            timeline.clk_val.append(MAX_TIMESTAMP)
        if new_state.watermark < MAX_TIMESTAMP:
            timeline.adv_seq.append(seq_end)
            timeline.adv_wm.append(MAX_TIMESTAMP)
        new_state.clock = new_state.watermark = MAX_TIMESTAMP
    return timeline, new_state


def compute_pass_timelines(
    config: WatermarkConfig,
    state: WatermarkState,
    seq_start: int,
    event_time: np.ndarray,
    clock_source: np.ndarray | None,
    partition: np.ndarray | None,
    batches: list[tuple[int, bool]],
    inputs: dict[str, WatermarkConfig] | None = None,
) -> tuple[list[Timeline], list[WatermarkState]]:
    """Consecutive batches run as one pass: each batch's own timeline and the state after it.

    The arrays hold the pass's records in replay order; ``batches`` gives each batch's record
    count and whether it finalizes. Join the timelines with :meth:`Timeline.concat`.
    """
    timelines, states, lo = [], [], 0
    for records, finalize in batches:
        hi = lo + records
        timeline, state = compute_timeline(
            config, state, seq_start + lo, event_time[lo:hi],
            None if clock_source is None else clock_source[lo:hi],
            None if partition is None else partition[lo:hi],
            finalize, inputs,
        )
        timelines.append(timeline)
        states.append(state)
        lo = hi
    return timelines, states


def _partition_name(value: Any) -> str:
    """A partition's name in the watermark state: its value as text; a missing one "nan" (the
    name pandas' factorisation gave it, which state already written holds)."""
    return "nan" if value is None or value != value else str(value)


def _all_active(last_clock: np.ndarray, chunk_end_clock: int, idle: int | None) -> bool:
    """Whether every partition has spoken before a chunk (``last_clock``: each one's clock at its
    last record) and none can fall idle within it (``idle``: the single input's timeout)."""
    if not len(last_clock) or bool((last_clock == MIN_TIMESTAMP).any()):
        return False
    return idle is None or chunk_end_clock - int(last_clock.min()) < idle


def _floor_div(values: np.ndarray, interval: int) -> np.ndarray:
    # MIN_TIMESTAMP (no clock yet) floors to the smallest bucket, so the first record emits.
    return np.floor_divide(values, interval)
