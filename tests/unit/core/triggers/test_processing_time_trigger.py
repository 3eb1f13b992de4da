"""ProcessingTimeTrigger's hooks."""

from __future__ import annotations

from fake_context import FakeContext
from pipelines import ids_timings, make_config, records, replay

from spark_jobs.core.triggers import ProcessingTimeTrigger, TriggerResult
from spark_jobs.core.windows import TimeWindow

T = ProcessingTimeTrigger()
W = TimeWindow(0, 10)


def test_hooks():
    ctx = FakeContext(watermark=100, clock=2)
    assert T.on_element(None, 3, W, ctx) is TriggerResult.CONTINUE
    assert ctx.processing_timers == {9} and not ctx.event_timers and not ctx.state
    assert T.on_processing_time(9, W, ctx) is TriggerResult.FIRE
    assert T.on_event_time(9, W, ctx) is TriggerResult.CONTINUE
    T.clear(W, ctx)
    assert ctx.empty


def test_on_merge_registers_only_while_the_clock_is_before_the_end():
    assert T.can_merge()
    ctx = FakeContext(clock=8)
    T.on_merge(W, ctx)
    assert ctx.processing_timers == {9}
    ctx = FakeContext(clock=9)
    T.on_merge(W, ctx)
    assert ctx.empty


def test_value_semantics():
    assert T == ProcessingTimeTrigger.create() and repr(T) == "ProcessingTimeTrigger()"
    assert T.to_dict() == {"type": "processing_time"}


def test_fires_when_the_replay_clock_passes_the_end_not_the_wall_clock():
    config = make_config({"type": "tumbling", "size": 10, "time": "processing"},
                         {"type": "processing_time"}, ingest=True)
    recs = records([(500,), (1,), (2,)])
    for record, clock in zip(recs, (3, 8, 12), strict=True):
        record.ingest_time = clock
    memory = replay(config, recs, 1, finalize=False)
    # Assigned by the clock (3, 8 -> [0, 10); 12 -> [10, 20)), fired before the record at clock 12.
    assert ids_timings(memory) == [(0, 0, "ON_TIME", ["0", "1"])]
    ((_, pane),) = memory.emitted()
    assert (pane.replay_clock, pane.emit_seq, pane.emit_step) == (12, 2, 0)
