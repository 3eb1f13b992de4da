"""The stable user import path ``spark_jobs.triggers``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.triggers``.
"""

from spark_jobs.core.triggers import (
    TRIGGER_TYPES,
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    StateDescriptor,
    Trigger,
    TriggerContext,
    TriggerResult,
    load_custom_trigger,
    parse_duration,
    trigger_from_dict,
)

__all__ = [
    "parse_duration",
    "StateDescriptor",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountTrigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "TRIGGER_TYPES",
    "trigger_from_dict",
    "load_custom_trigger",
]
