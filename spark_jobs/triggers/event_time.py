"""The stable user import path ``spark_jobs.triggers.event_time``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers.event_time``.
"""

from spark_jobs.core.triggers.event_time import (
    EventTimeTrigger,
    TimeWindow,
    Trigger,
    TriggerContext,
    TriggerResult,
)

__all__ = [
    "TimeWindow",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "EventTimeTrigger",
]
