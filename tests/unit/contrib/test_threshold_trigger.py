"""The user-defined trigger example, and leak detection for triggers that forget to clear."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from spark_jobs.config import parse_config
from spark_jobs.core.triggers import EventTimeTrigger, StateDescriptor, TriggerResult, trigger_from_dict
from spark_jobs.core.triggers.base import sum_merge
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

MINUTE = 60_000


def config_with(trigger: dict[str, Any]):
    return parse_config({
        "name": "t", "source": {"path": "x", "event_time": "ts"}, "key": "k",
        "window": {"type": "tumbling", "size": "1m"}, "trigger": trigger,
        "aggregates": {"n": "count(*)", "total": "sum(value)"}, "output": {"path": "o"},
    })


def replay(config, rows, batch_size):
    records = [
        Record(("a",), ts, (None, value), fields={"value": value, "ts": ts}) for ts, value in rows
    ]
    memory = MemoryReplay(config, operator_spec(config))
    memory.run(records, batch_size)
    return memory


THRESHOLD = {"type": "custom", "class": "spark_jobs.contrib.triggers.ThresholdTrigger",
             "params": {"field": "value", "threshold": 10}}


def test_threshold_trigger_fires_early_once_then_on_time_for_any_batch_size():
    rows = [(1_000, 4.0), (2_000, 4.0), (3_000, 4.0), (4_000, 9.0), (61_000, 1.0), (70_000, 1.0)]
    outcomes = []
    for batch_size in (1, 2, 6):
        memory = replay(config_with(THRESHOLD), rows, batch_size)
        outcomes.append([(p.window.start, p.timing, p.values) for _, p in memory.emitted()])
        assert not memory.leaks
        assert not memory.state
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert outcomes[0][:2] == [(0, "EARLY", [3, 12.0]), (0, "ON_TIME", [4, 21.0])]
    assert outcomes[0][2:] == [(MINUTE, "ON_TIME", [2, 2.0])]


def test_custom_trigger_round_trips_through_its_config_form():
    trigger = trigger_from_dict(THRESHOLD)
    assert trigger.to_dict() == THRESHOLD
    assert trigger_from_dict(trigger.to_dict()) == trigger


@dataclass(frozen=True)
class ForgetfulTrigger(EventTimeTrigger):
    """Counts elements but does not clear its count: a state leak."""

    kind: ClassVar[str] = "custom"
    SEEN: ClassVar[StateDescriptor] = StateDescriptor("seen", sum_merge)

    def on_element(self, element, timestamp, window, ctx):
        ctx.set_state(self.SEEN, (ctx.get_state(self.SEEN) or 0) + 1)
        return super().on_element(element, timestamp, window, ctx)


def test_a_trigger_that_does_not_clear_is_reported_as_a_leak():
    config = config_with({"type": "custom", "class": f"{__name__}.ForgetfulTrigger", "params": {}})
    memory = replay(config, [(1_000, 1.0), (2_000, 1.0)], 1)
    assert len(memory.leaks) == 1
    assert "state seen" in memory.leaks[0] and "ForgetfulTrigger" in memory.leaks[0]
    assert not memory.state, "leaked state is reported and then removed, so it cannot grow"
    assert TriggerResult.FIRE.is_fire
