"""PurgingTrigger turns every FIRE of the nested trigger into FIRE_AND_PURGE."""

from __future__ import annotations

import pytest
from fake_context import FakeContext
from pipelines import ids_timings, make_config, records, replay

from spark_jobs.core.triggers import (
    ContinuousEventTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
    trigger_from_dict,
)
from spark_jobs.core.windows import TimeWindow

W = TimeWindow(0, 10)


class Scripted(Trigger):
    """Answers a fixed result from every hook."""

    def __init__(self, result: TriggerResult):
        self.result = result

    def on_element(self, element, timestamp, window, ctx):
        return self.result

    def on_event_time(self, time, window, ctx):
        return self.result

    def on_processing_time(self, time, window, ctx):
        return self.result


@pytest.mark.parametrize(("nested", "purged"), [
    (TriggerResult.CONTINUE, TriggerResult.CONTINUE),
    (TriggerResult.FIRE, TriggerResult.FIRE_AND_PURGE),
    (TriggerResult.PURGE, TriggerResult.PURGE),
    (TriggerResult.FIRE_AND_PURGE, TriggerResult.FIRE_AND_PURGE),
])
def test_every_hook_turns_fire_into_fire_and_purge(nested, purged):
    trigger = PurgingTrigger(Scripted(nested))
    ctx = FakeContext()
    assert trigger.on_element(None, 1, W, ctx) is purged
    assert trigger.on_event_time(9, W, ctx) is purged
    assert trigger.on_processing_time(9, W, ctx) is purged


def test_result_flags():
    assert [(r.is_fire, r.is_purge) for r in TriggerResult] == [
        (False, False), (True, False), (False, True), (True, True)]


def test_merge_and_clear_are_delegated():
    trigger = PurgingTrigger(ContinuousEventTimeTrigger(5))
    assert trigger.can_merge()
    ctx = FakeContext(watermark=0)
    trigger.on_element(None, 1, W, ctx)
    assert ctx.event_timers == {5, 9}
    trigger.clear(W, ctx)
    assert ctx.state == {} and 5 not in ctx.event_timers
    ctx = FakeContext()
    ctx.merged = [{"fire-time": 5}]
    trigger.on_merge(W, ctx)
    assert ctx.event_timers == {5}
    assert not PurgingTrigger(Scripted(TriggerResult.FIRE)).can_merge()


def test_config_form_round_trips():
    for nested in (EventTimeTrigger(), CountTrigger(4), ContinuousEventTimeTrigger(10_000)):
        trigger = PurgingTrigger.of(nested)
        spec = trigger.to_dict()
        assert spec["purging"] is True
        assert trigger_from_dict(spec) == trigger
    assert repr(PurgingTrigger(CountTrigger(2))) == "PurgingTrigger(nested=CountTrigger(count=2))"


def test_purging_event_time_panes_discard_and_late_panes_hold_only_the_late_records():
    config = make_config({"type": "tumbling", "size": 10}, {"type": "event_time", "purging": True},
                         lateness=20)
    memory = replay(config, records([(1,), (2,), (15,), (3,), (4,)]), 2)
    assert ids_timings(memory) == [
        (0, 0, "ON_TIME", ["0", "1"]), (0, 1, "LATE", ["3"]), (0, 2, "LATE", ["4"]),
        (10, 0, "ON_TIME", ["2"]),
    ]


def test_state_names_are_the_nested_triggers():
    assert PurgingTrigger.of(CountTrigger(2)).state_names() == CountTrigger(2).state_names() == {"count"}
    assert PurgingTrigger.of(ContinuousEventTimeTrigger(5)).state_names() == {"fire-time"}
    assert PurgingTrigger.of(EventTimeTrigger()).state_names() == frozenset()
