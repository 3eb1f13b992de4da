"""trigger_from_dict / to_dict: every built-in round-trips; errors name the problem."""

from __future__ import annotations

import pytest

from spark_jobs.core.triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    trigger_from_dict,
)

BUILT_INS = [
    EventTimeTrigger(), ProcessingTimeTrigger(), ContinuousEventTimeTrigger(10_000),
    ContinuousProcessingTimeTrigger(500), CountTrigger(7),
]


@pytest.mark.parametrize("trigger", BUILT_INS + [PurgingTrigger(t) for t in BUILT_INS], ids=repr)
def test_round_trip(trigger):
    assert trigger_from_dict(trigger.to_dict()) == trigger
    assert trigger_from_dict(dict(trigger.to_dict())).to_dict() == trigger.to_dict()


def test_defaults_and_spellings():
    assert trigger_from_dict(None) == EventTimeTrigger()
    assert trigger_from_dict({}) == EventTimeTrigger()
    minute = trigger_from_dict({"type": "continuous_event_time", "interval": "1m"})
    assert minute == ContinuousEventTimeTrigger(60_000)
    assert trigger_from_dict({"type": "count", "count": 3, "purging": False}) == CountTrigger(3)


@pytest.mark.parametrize(("spec", "message"), [
    ({"type": "never"}, "type must be one of event_time, continuous_event_time, processing_time, "
                        "continuous_processing_time, count, custom, not 'never'"),
    ({"type": "continuous_event_time"}, "continuous_event_time trigger needs 'interval'"),
    ({"type": "continuous_processing_time", "interval": "soon"}, "not a duration"),
    ({"type": "count"}, "count trigger needs 'count'"),
    ({"type": "count", "count": "3"}, "count must be a whole number"),
    ({"type": "count", "count": True}, "count must be a whole number"),
    ({"type": "count", "count": 0}, "positive count"),
    ({"type": "event_time", "purging": "yes"}, "purging must be true or false"),
    ({"type": "custom"}, "custom trigger needs 'class'"),
    ({"type": "custom", "class": "NoModule"}, "import path"),
    ({"type": "custom", "class": "spark_jobs.nothing.Here"}, "cannot import trigger"),
    ({"type": "custom", "class": "spark_jobs.core.windows.TumblingWindows"}, "is not a Trigger subclass"),
])
def test_errors(spec, message):
    with pytest.raises(ValueError) as error:
        trigger_from_dict(spec)
    assert message in str(error.value)
