"""The stable user import path ``spark_jobs.windows.global_window``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.windows.global_window``.
"""

from spark_jobs.core.windows.global_window import (
    GLOBAL_WINDOW,
    GlobalWindows,
    TimeWindow,
    WindowAssigner,
)

__all__ = [
    "GLOBAL_WINDOW",
    "TimeWindow",
    "WindowAssigner",
    "GlobalWindows",
]
