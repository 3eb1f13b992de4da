"""The stable user import path ``spark_jobs.windows.sliding``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.windows.sliding``.
"""

from spark_jobs.core.windows.sliding import (
    SlidingWindows,
    TimeWindow,
    WindowAssigner,
    format_duration,
    window_start_with_offset,
)

__all__ = [
    "format_duration",
    "TimeWindow",
    "WindowAssigner",
    "window_start_with_offset",
    "SlidingWindows",
]
