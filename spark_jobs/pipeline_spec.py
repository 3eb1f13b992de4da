"""The engine's per-pipeline parts, built once from a typed config.

The one place the YAML layer (``config``) meets the engines (``core.engine``): ``core`` never reads
a config, so every execution path (Spark, the in-memory runner, the benchmarks) builds its
:class:`~spark_jobs.core.engine.operator.OperatorSpec` here.
"""

from __future__ import annotations

from typing import Any

from .config import PipelineConfig
from .core.aggregates import Aggregation
from .core.engine.joins import IntervalJoin, WindowJoinPane
from .core.engine.operator import OperatorSpec
from .core.functions import BufferedPane, IncrementalPane


def operator_spec(config: PipelineConfig) -> OperatorSpec:
    """The operator's per-pipeline parts, built once from the config."""
    aggregation = Aggregation(list(config.aggregates))
    names = [name for name, _ in config.outputs()]
    join = config.join
    if join is not None:
        function = join.function.instance if join.function else None
        if join.type == "interval":
            process = IntervalJoin(join.lower, join.upper, function, names)
            return OperatorSpec(config.window, config.trigger, IncrementalPane(Aggregation([])),
                                process=process, output_names=tuple(names), two_inputs=True)
        pane = WindowJoinPane(config.evictor, function, names)
        return OperatorSpec(config.window, config.trigger, pane, config.allowed_lateness, two_inputs=True)
    if config.keyed_process is not None:
        return OperatorSpec(config.window, config.trigger, IncrementalPane(Aggregation([])),
                            process=config.keyed_process.instance, output_names=tuple(names))
    process = config.process_function.instance if config.process_function else None
    if config.evictor is not None or (process is not None and not config.aggregates):
        pane: Any = BufferedPane(aggregation, config.evictor, process, names)
    else:
        user = config.aggregate_function
        pane = IncrementalPane(
            aggregation,
            user.instance if user else None,
            list(user.output) if user else [],
            process,
            names,
        )
    return OperatorSpec(config.window, config.trigger, pane, config.allowed_lateness)
