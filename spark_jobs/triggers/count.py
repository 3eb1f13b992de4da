"""The stable user import path ``spark_jobs.triggers.count``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers.count``.
"""

from spark_jobs.core.triggers.count import (
    CountTrigger,
    StateDescriptor,
    TimeWindow,
    Trigger,
    TriggerContext,
    TriggerResult,
    sum_merge,
)

__all__ = [
    "TimeWindow",
    "StateDescriptor",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "sum_merge",
    "CountTrigger",
]
