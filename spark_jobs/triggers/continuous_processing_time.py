"""The stable user import path ``spark_jobs.triggers.continuous_processing_time``.

User code and pipeline YAML name it; the code lives in
``spark_jobs.core.triggers.continuous_processing_time``.
"""

from spark_jobs.core.triggers.continuous_processing_time import (
    ContinuousProcessingTimeTrigger,
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
    "format_duration",
    "TimeWindow",
    "StateDescriptor",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "min_merge",
    "align_to_interval",
    "chain_ends",
    "next_fire_time",
    "ContinuousProcessingTimeTrigger",
]
