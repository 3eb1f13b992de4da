"""The stable user import path ``spark_jobs.triggers.base``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers.base``.
"""

from spark_jobs.core.triggers.base import (
    StateDescriptor,
    TimeWindow,
    Trigger,
    TriggerContext,
    TriggerResult,
    min_merge,
    sum_merge,
)

__all__ = [
    "TimeWindow",
    "TriggerResult",
    "StateDescriptor",
    "TriggerContext",
    "Trigger",
    "min_merge",
    "sum_merge",
]
