"""The stable user import path ``spark_jobs.functions``.

User code and pipeline YAML name it; the code lives in ``spark_jobs.core.functions``.
"""

from spark_jobs.core.functions import (
    AggregateFunction,
    Aggregation,
    BufferedPane,
    CountEvictor,
    DeltaEvictor,
    Evictor,
    IncrementalPane,
    ProcessWindowFunction,
    TimeEvictor,
    TimeWindow,
    WindowInfo,
    evictor_from_dict,
    load_object,
)

__all__ = [
    "Aggregation",
    "TimeWindow",
    "AggregateFunction",
    "WindowInfo",
    "ProcessWindowFunction",
    "Evictor",
    "CountEvictor",
    "TimeEvictor",
    "DeltaEvictor",
    "evictor_from_dict",
    "load_object",
    "IncrementalPane",
    "BufferedPane",
]
