"""The stable user import path ``spark_jobs.triggers.continuous_event_time``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers.continuous_event_time``.
"""

from spark_jobs.core.triggers.continuous_event_time import (
    MAX_TIMESTAMP,
    ContinuousEventTimeTrigger,
    StateDescriptor,
    TimeWindow,
    Trigger,
    TriggerContext,
    TriggerResult,
    align_to_interval,
    chain_ends,
    format_duration,
    min_merge,
    next_fire_time,
)

__all__ = [
    "MAX_TIMESTAMP",
    "format_duration",
    "TimeWindow",
    "StateDescriptor",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "min_merge",
    "next_fire_time",
    "align_to_interval",
    "chain_ends",
    "ContinuousEventTimeTrigger",
]
