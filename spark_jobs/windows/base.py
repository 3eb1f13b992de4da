"""The stable user import path ``spark_jobs.windows.base``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.windows.base``.
"""

from spark_jobs.core.windows.base import (
    GLOBAL_WINDOW,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    TimeWindow,
    WindowAssigner,
    window_start_with_offset,
)

__all__ = [
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "TimeWindow",
    "GLOBAL_WINDOW",
    "WindowAssigner",
    "window_start_with_offset",
]
