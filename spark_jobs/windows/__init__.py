"""The stable user import path ``spark_jobs.windows``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.windows``.
"""

from spark_jobs.core.windows import (
    GLOBAL_WINDOW,
    WINDOW_TYPES,
    GlobalWindows,
    SessionWindows,
    SlidingWindows,
    TimeWindow,
    TumblingWindows,
    WindowAssigner,
    assigner_from_dict,
    parse_duration,
)

__all__ = [
    "parse_duration",
    "GLOBAL_WINDOW",
    "TimeWindow",
    "WindowAssigner",
    "GlobalWindows",
    "SessionWindows",
    "SlidingWindows",
    "TumblingWindows",
    "WINDOW_TYPES",
    "assigner_from_dict",
]
