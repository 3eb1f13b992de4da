"""The stable user import path ``spark_jobs.windows.session``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.windows.session``.
"""

from spark_jobs.core.windows.session import (
    SessionWindows,
    TimeWindow,
    WindowAssigner,
    format_duration,
)

__all__ = [
    "format_duration",
    "TimeWindow",
    "WindowAssigner",
    "SessionWindows",
]
