"""The stable user import path ``spark_jobs.triggers.processing_time``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers.processing_time``.
"""

from spark_jobs.core.triggers.processing_time import (
    ProcessingTimeTrigger,
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
    "ProcessingTimeTrigger",
]
