"""The stable user import path ``spark_jobs.joins``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.engine.joins``.
"""

from spark_jobs.core.engine.joins import (
    DEFAULT_JOIN_OUTPUT,
    INTERVAL_LATE_REASON,
    Aggregation,
    BufferedPane,
    Evictor,
    IntervalJoin,
    JoinFunction,
    KeyedProcessFunction,
    PairJoin,
    ProcessContext,
    TimeWindow,
    WindowJoinPane,
)

__all__ = [
    "Aggregation",
    "BufferedPane",
    "Evictor",
    "KeyedProcessFunction",
    "ProcessContext",
    "TimeWindow",
    "DEFAULT_JOIN_OUTPUT",
    "INTERVAL_LATE_REASON",
    "JoinFunction",
    "PairJoin",
    "WindowJoinPane",
    "IntervalJoin",
]
