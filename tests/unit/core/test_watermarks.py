"""compute_timeline: bounded out-of-orderness, partitions, idleness, emission modes, carry-over."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.config import WatermarkConfig
from spark_jobs.core.durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from spark_jobs.core.watermarks import WatermarkState, compute_timeline


def timeline(config, event_times, clocks=None, partitions=None, state=None, seq_start=0, finalize=False):
    return compute_timeline(
        config, state or WatermarkState(), seq_start, np.array(event_times, dtype=np.int64),
        None if clocks is None else np.array(clocks, dtype=np.int64),
        None if partitions is None else np.array(partitions, dtype=object), finalize=finalize,
    )


def watermarks(tl, n):
    """The watermark emitted after each record (what record i + 1 sees)."""
    return [tl.watermark_before(tl.seq_start + i + 1) for i in range(n)]


def test_bounded_out_of_orderness_and_never_decreasing():
    tl, state = timeline(WatermarkConfig(max_out_of_orderness=5), [10, 3, 20, 12])
    assert tl.watermark_before(0) == MIN_TIMESTAMP  # the first record sees -infinity
    assert watermarks(tl, 4) == [4, 4, 14, 14]
    assert (tl.adv_seq, tl.adv_wm) == ([0, 2], [4, 14])
    assert state.watermark == 14 and state.partitions["0"].max_event_time == 20


def test_monotonous_is_max_minus_one():
    tl, _ = timeline(WatermarkConfig(), [10, 11, 11, 30])
    assert watermarks(tl, 4) == [9, 10, 10, 29]


def test_the_clock_is_the_ingest_time_or_the_largest_event_time_never_decreasing():
    tl, state = timeline(WatermarkConfig(), [10, 3, 20])
    assert [tl.clock_at(i) for i in range(3)] == [10, 10, 20]
    tl, state = timeline(WatermarkConfig(), [10, 3, 20], clocks=[100, 90, 150])
    assert [tl.clock_at(i) for i in range(3)] == [100, 100, 150]
    assert (tl.clk_seq, tl.clk_val, state.clock) == ([0, 2], [100, 150], 150)


def test_several_partitions_take_the_minimum_of_those_that_spoke():
    tl, _ = timeline(WatermarkConfig(), [50, 10, 60, 40, 90], partitions=["a", "b", "a", "b", "b"])
    # a alone: 49; b joins at 9 (no decrease: stays 49); a 59 / b 9 -> 49; b 39 -> 39 < 49: stays;
    # b 89 -> min(59, 89) = 59.
    assert watermarks(tl, 5) == [49, 49, 49, 49, 59]


def test_an_idle_partition_leaves_the_minimum_and_rejoins_when_it_speaks():
    config = WatermarkConfig(idle_timeout=10)
    tl, state = timeline(
        config,
        event_times=[10, 100, 110, 120, 30, 130],
        clocks=[0, 1, 5, 11, 12, 13],
        partitions=["a", "b", "b", "b", "a", "b"],
    )
    # a (last spoke at clock 0) is idle from clock 10: record 3 (clock 11) sees only b: 119.
    # a speaks again at clock 12 with 30: back in the minimum, but the watermark never decreases;
    # record 5: min(a 29, b 129) = 29 -> stays 119.
    assert watermarks(tl, 6) == [9, 9, 9, 119, 119, 119]
    assert state.partitions["a"].last_clock == 12


def test_without_idle_timeout_a_silent_partition_holds_the_watermark_back():
    tl, _ = timeline(WatermarkConfig(), [10, 100, 110, 120], clocks=[0, 1, 50, 500],
                     partitions=["a", "b", "b", "b"])
    assert watermarks(tl, 4) == [9, 9, 9, 9]


def test_periodic_emission_when_the_clock_crosses_a_multiple_of_the_interval():
    config = WatermarkConfig(emit="periodic", interval=10)
    tl, _ = timeline(config, [1, 5, 12, 13, 35, 36])
    # clocks 1 (first record: emits), 5, 12 (crossed 10), 13, 35 (crossed 20 and 30), 36
    assert tl.adv_seq == [0, 2, 4]
    assert watermarks(tl, 6) == [0, 0, 11, 11, 34, 34]


def test_per_batch_emits_once_after_the_last_record():
    tl, state = timeline(WatermarkConfig(emit="per_batch"), [10, 30, 20])
    assert (tl.adv_seq, tl.adv_wm) == ([2], [29])
    assert watermarks(tl, 3) == [MIN_TIMESTAMP, MIN_TIMESTAMP, 29]
    assert state.watermark == 29


def test_finalize_takes_the_clock_then_the_watermark_to_infinity():
    tl, state = timeline(WatermarkConfig(), [10, 20], finalize=True)
    assert (tl.clk_seq[-1], tl.clk_val[-1]) == (2, MAX_TIMESTAMP)
    assert (tl.adv_seq[-1], tl.adv_wm[-1]) == (2, MAX_TIMESTAMP)
    assert state.watermark == state.clock == MAX_TIMESTAMP
    empty, again = timeline(WatermarkConfig(), [], state=state, seq_start=2, finalize=True)
    assert empty.adv_seq == [] and empty.clk_seq == [] and again.watermark == MAX_TIMESTAMP


def test_timer_points():
    tl, _ = timeline(WatermarkConfig(), [10, 3, 20, 25], clocks=[1, 2, 2, 9])
    # advances: after 0 -> 9, after 2 -> 19, after 3 -> 24
    assert tl.event_timer_point(15, 0) == 1  # first advance at/after record 0 reaching 15
    assert tl.event_timer_point(5, 1) == 1  # registered behind the watermark: the next advance
    assert tl.event_timer_point(25, 0) is None
    # clock advances: before 0 -> 1, before 1 -> 2, before 3 -> 9
    assert tl.processing_timer_point(2, 1, inclusive=True) == 1
    assert tl.processing_timer_point(2, 1, inclusive=False) == 2


def test_state_json_round_trip():
    _, state = timeline(WatermarkConfig(max_out_of_orderness=3), [10, 20], clocks=[5, 6],
                        partitions=["x", "y"])
    again = WatermarkState.from_json(state.to_json())
    assert again == state
    assert WatermarkState.from_json(None) == WatermarkState() == WatermarkState.from_json("")


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(-500, 500), st.integers(0, 30), st.sampled_from("abc")),
                  max_size=40),
    delay=st.integers(0, 20),
    idle=st.one_of(st.none(), st.integers(1, 50)),
    emit=st.sampled_from(["per_record", "periodic"]),
    cut=st.integers(0, 40),
)
def test_splitting_into_batches_changes_nothing_but_per_batch(rows, delay, idle, emit, cut):
    """Two batches with carried state give the same timeline as one (except the start fields)."""
    config = WatermarkConfig(delay, emit, 7 if emit == "periodic" else None, idle)
    clocks = np.cumsum([r[1] for r in rows]).tolist()
    ts, parts = [r[0] for r in rows], [r[2] for r in rows]
    whole, whole_state = timeline(config, ts, clocks, parts)
    cut = min(cut, len(rows))
    first, mid = timeline(config, ts[:cut], clocks[:cut], parts[:cut])
    second, end_state = timeline(config, ts[cut:], clocks[cut:], parts[cut:], state=mid, seq_start=cut)
    assert first.adv_seq + second.adv_seq == whole.adv_seq
    assert first.adv_wm + second.adv_wm == whole.adv_wm
    assert first.clk_seq + second.clk_seq == whole.clk_seq
    assert first.clk_val + second.clk_val == whole.clk_val
    assert end_state == whole_state
    assert all(b > a for a, b in zip(whole.adv_wm, whole.adv_wm[1:], strict=False))  # strictly increasing


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(-500, 500), st.integers(0, 30), st.sampled_from("ab")),
                  max_size=40),
    delay=st.integers(0, 20),
    finalize=st.booleans(),
    times=st.lists(st.integers(-600, 600), min_size=1, max_size=5),
)
def test_record_points_give_what_the_searches_give(rows, delay, finalize, times):
    """The operator takes each record's watermark, clock and timer lower bound from
    ``record_points`` (all records at once) instead of a search per record: the same values."""
    clocks = np.cumsum([r[1] for r in rows]).tolist()
    tl, _ = timeline(WatermarkConfig(delay), [r[0] for r in rows], clocks, [r[2] for r in rows],
                     seq_start=3, finalize=finalize)
    seqs = np.arange(tl.seq_start, tl.seq_end + 1)
    advances, clock_points = tl.record_points(seqs)
    for seq, advance, clock_point in zip(seqs.tolist(), advances, clock_points, strict=True):
        assert (tl.adv_wm[advance - 1] if advance else tl.start_watermark) == tl.watermark_before(seq)
        assert (tl.clk_val[clock_point - 1] if clock_point else tl.start_clock) == tl.clock_at(seq)
        for time in times:
            assert tl.event_timer_point(time, seq, advance) == tl.event_timer_point(time, seq)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(-500, 500), st.integers(0, 12), st.sampled_from("abc")),
                  min_size=1, max_size=60),
    delay=st.integers(0, 20),
    idle=st.one_of(st.none(), st.integers(1, 60)),
    emit=st.sampled_from(["per_record", "periodic"]),
    cells=st.integers(1, 12),
    cut=st.integers(0, 30),
)
def test_chunks_where_every_partition_stays_active_take_the_same_values(rows, delay, idle, emit, cells, cut):
    """A chunk whose partitions all spoke before it and cannot fall idle within it skips the
    per-partition clocks: the same timeline and state as the full computation, chunk by chunk."""
    from unittest import mock

    from spark_jobs.core import watermarks as module

    config = WatermarkConfig(delay, emit, 7 if emit == "periodic" else None, idle)
    clocks = np.cumsum([r[1] for r in rows]).tolist()
    ts, parts = [r[0] for r in rows], [r[2] for r in rows]
    cut = min(cut, len(rows))
    _, state = timeline(config, ts[:cut], clocks[:cut], parts[:cut])  # partitions carried in
    taken = []

    def watched(*args):
        taken.append(real(*args))
        return taken[-1]

    real = module._all_active
    with mock.patch.object(module, "_CHUNK_CELLS", cells):
        with mock.patch.object(module, "_all_active", watched):
            fast = timeline(config, ts[cut:], clocks[cut:], parts[cut:], state=state, seq_start=cut)
        with mock.patch.object(module, "_all_active", lambda *args: False):
            full = timeline(config, ts[cut:], clocks[cut:], parts[cut:], state=state, seq_start=cut)
    assert fast[0].to_dict() == full[0].to_dict() and fast[1] == full[1]
    # Without an idle timeout, every chunk that starts once all partitions have spoken skips them.
    names = set(state.partitions) | set(parts[cut:])
    spoken = set(state.partitions)
    all_spoken = next(i for i in range(len(rows) - cut + 1) if spoken | set(parts[cut:cut + i]) == names)
    chunk = max(1, cells // len(names))
    if idle is None and any(lo >= all_spoken for lo in range(0, len(rows) - cut, chunk)):
        assert any(taken)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(-500, 500), st.integers(0, 12), st.sampled_from(["a", "b", None])),
                  max_size=40),
    idle=st.one_of(st.none(), st.integers(1, 60)),
    chunks=st.integers(1, 3),
    encoded=st.booleans(),
)
def test_partitions_as_an_arrow_column_name_the_same_partitions(rows, idle, chunks, encoded):
    """A pass gives its partition column as Arrow (chunked, nulls included, maybe dictionary
    encoded as the ingest keeps it): the same timeline and state as the names as Python objects."""
    import pyarrow as pa

    config = WatermarkConfig(3, "per_record", None, idle)
    clocks = np.cumsum([r[1] for r in rows]).tolist()
    ts, parts = [r[0] for r in rows], [r[2] for r in rows]
    size = -(-len(parts) // chunks) or 1
    kind = pa.dictionary(pa.int32(), pa.string()) if encoded else pa.string()
    column = pa.chunked_array([pa.array(parts[i:i + size], pa.string()).cast(kind)
                               for i in range(0, len(parts), size)], kind)
    as_objects = timeline(config, ts, clocks, parts)
    as_arrow = compute_timeline(config, WatermarkState(), 0, np.array(ts, dtype=np.int64),
                                np.array(clocks, dtype=np.int64), column)
    assert as_arrow[0].to_dict() == as_objects[0].to_dict() and as_arrow[1] == as_objects[1]
