"""The stable user import path ``spark_jobs.triggers.purging``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers.purging``.
"""

from spark_jobs.core.triggers.purging import (
    PurgingTrigger,
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
    "PurgingTrigger",
]
