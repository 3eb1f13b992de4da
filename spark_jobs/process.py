"""The stable user import path ``spark_jobs.process``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.engine.process``.
"""

from spark_jobs.core.engine.process import (
    GLOBAL_WINDOW,
    KEY_NAMESPACE,
    STEP_ELEMENT,
    KeyedProcessFunction,
    KeyedProcessOperator,
    LateRecord,
    Pane,
    ProcessContext,
    SideOutput,
    Timeline,
    TimelineDriver,
    TimeWindow,
    WindowStateRow,
    restore_timers,
)

__all__ = [
    "STEP_ELEMENT",
    "LateRecord",
    "Pane",
    "TimelineDriver",
    "WindowStateRow",
    "restore_timers",
    "Timeline",
    "GLOBAL_WINDOW",
    "TimeWindow",
    "KEY_NAMESPACE",
    "KeyedProcessFunction",
    "SideOutput",
    "ProcessContext",
    "KeyedProcessOperator",
]
