"""EventTimeTrigger's hooks, against a fake context."""

from __future__ import annotations

from fake_context import FakeContext

from spark_jobs.core.triggers import EventTimeTrigger, TriggerResult
from spark_jobs.core.windows import TimeWindow

W = TimeWindow(0, 10)
T = EventTimeTrigger()


def test_element_before_the_end_registers_the_end_timer():
    ctx = FakeContext(watermark=5)
    assert T.on_element(None, 3, W, ctx) is TriggerResult.CONTINUE
    assert ctx.event_timers == {9} and not ctx.processing_timers and not ctx.state


def test_element_behind_the_watermark_fires_at_once_without_a_timer():
    for watermark in (9, 10, 100):  # maxTimestamp <= watermark: an allowed-late record re-fires
        ctx = FakeContext(watermark=watermark)
        assert T.on_element(None, 3, W, ctx) is TriggerResult.FIRE
        assert ctx.empty


def test_timers():
    ctx = FakeContext()
    assert T.on_event_time(9, W, ctx) is TriggerResult.FIRE
    assert T.on_event_time(8, W, ctx) is TriggerResult.CONTINUE
    assert T.on_event_time(14, W, ctx) is TriggerResult.CONTINUE  # e.g. the cleanup timer
    assert T.on_processing_time(9, W, ctx) is TriggerResult.CONTINUE


def test_clear_deletes_the_end_timer():
    ctx = FakeContext(watermark=0)
    T.on_element(None, 3, W, ctx)
    T.clear(W, ctx)
    assert ctx.empty


def test_on_merge_registers_only_while_the_merged_window_is_not_due():
    assert T.can_merge()
    ctx = FakeContext(watermark=8)
    T.on_merge(W, ctx)
    assert ctx.event_timers == {9}
    ctx = FakeContext(watermark=9)  # due: on_element fires it; a timer would fire it twice
    T.on_merge(W, ctx)
    assert ctx.empty


def test_value_semantics():
    assert T == EventTimeTrigger.create() and hash(T) == hash(EventTimeTrigger())
    assert repr(T) == "EventTimeTrigger()"
    assert T.to_dict() == {"type": "event_time"}


def test_keeps_no_state():
    assert T.state_names() == frozenset()
