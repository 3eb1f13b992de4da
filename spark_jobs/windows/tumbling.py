"""The stable user import path ``spark_jobs.windows.tumbling``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.windows.tumbling``.
"""

from spark_jobs.core.windows.tumbling import (
    TimeWindow,
    TumblingWindows,
    WindowAssigner,
    format_duration,
    window_start_with_offset,
)

__all__ = [
    "format_duration",
    "TimeWindow",
    "WindowAssigner",
    "window_start_with_offset",
    "TumblingWindows",
]
