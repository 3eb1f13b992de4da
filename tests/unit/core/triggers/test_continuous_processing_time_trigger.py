"""ContinuousProcessingTimeTrigger: the chain on the replay clock, capped at maxTimestamp."""

from __future__ import annotations

import pytest
from fake_context import FakeContext, time_limit
from pipelines import ids_timings, make_config, records, replay

from spark_jobs.core.triggers import ContinuousProcessingTimeTrigger, TriggerResult
from spark_jobs.core.windows import TimeWindow

T = ContinuousProcessingTimeTrigger(10)
FIRE_TIME = ContinuousProcessingTimeTrigger.FIRE_TIME.name
W = TimeWindow(0, 60)


def test_first_fire_time_is_aligned_on_the_clock_not_the_record():
    ctx = FakeContext(watermark=50, clock=23)
    assert T.on_element(None, 55, W, ctx) is TriggerResult.CONTINUE  # event time plays no part
    assert ctx.state == {FIRE_TIME: 30} and ctx.processing_timers == {30}
    assert not ctx.event_timers
    capped = FakeContext(clock=57)
    T.on_element(None, 1, W, capped)
    assert capped.state == {FIRE_TIME: 59}  # the last segment is capped so it fires too


def test_chain_and_other_times():
    ctx = FakeContext(clock=3)
    T.on_element(None, 3, W, ctx)
    T.on_element(None, 4, W, ctx)  # already chained: nothing new
    assert ctx.processing_timers == {10}
    assert T.on_processing_time(10, W, ctx) is TriggerResult.FIRE
    assert ctx.state == {FIRE_TIME: 20} and 20 in ctx.processing_timers
    assert T.on_processing_time(15, W, ctx) is TriggerResult.CONTINUE
    assert T.on_event_time(20, W, ctx) is TriggerResult.CONTINUE


def test_clear_and_merge():
    ctx = FakeContext(clock=3)
    T.on_element(None, 3, W, ctx)
    T.clear(W, ctx)
    assert ctx.empty
    assert T.can_merge()
    ctx = FakeContext()
    ctx.merged = [{FIRE_TIME: 40}, {FIRE_TIME: 30}]
    T.on_merge(W, ctx)
    assert ctx.state == {FIRE_TIME: 30} and ctx.processing_timers == {30}


def test_value_semantics():
    assert T == ContinuousProcessingTimeTrigger.of(10)
    assert repr(T) == "ContinuousProcessingTimeTrigger(interval=10)"
    assert ContinuousProcessingTimeTrigger(60_000).to_dict() == {
        "type": "continuous_processing_time", "interval": "1m"}
    with pytest.raises(ValueError):
        ContinuousProcessingTimeTrigger(-1)


def test_processing_time_windows_fire_every_interval_and_at_the_end():
    config = make_config({"type": "tumbling", "size": 60, "time": "processing"},
                         {"type": "continuous_processing_time", "interval": 20}, ingest=True)
    recs = records([(0,), (0,), (0,)])
    for record, clock in zip(recs, (5, 25, 70), strict=True):
        record.ingest_time = clock
    for batch_size in (1, 3):
        memory = replay(config, recs, batch_size, finalize=False)
        assert ids_timings(memory) == [
            (0, 0, "EARLY", ["0"]), (0, 1, "EARLY", ["0", "1"]), (0, 2, "ON_TIME", ["0", "1"])
        ]
        assert [p.fire_time for _, p in memory.emitted()] == [20, 40, 59]


# The time limit may first interrupt a gc callback, which reports the exception as unraisable.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_event_time_window_with_continuous_processing_time_terminates():
    config = make_config({"type": "tumbling", "size": 10_000},
                         {"type": "continuous_processing_time", "interval": 1_000})
    with time_limit(1.5):
        # Without ingest times the clock follows event time: record 15 s passes [0, 10 s)'s end.
        memory = replay(config, records([(1_000,), (15_000,)]), 1, finalize=False)
    panes = [p for _, p in memory.emitted() if p.window.start == 0]
    assert [p.fire_time for p in panes] == [2_000, 3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000, 9_999]
