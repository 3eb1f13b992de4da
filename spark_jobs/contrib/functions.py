"""Worked examples of user-defined window functions (see ``spark_jobs.functions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.functions import AggregateFunction, ProcessWindowFunction, WindowInfo


@dataclass
class SumAndMax(AggregateFunction):
    """Incremental: the sum and the maximum of a numeric field. Outputs ``sum_<field>`` and
    ``max_<field>``."""

    field: str = "value"

    def create_accumulator(self) -> list[float | None]:
        return [0.0, None]

    def add(self, record: dict[str, Any], accumulator: list[Any]) -> list[Any]:
        value = record.get(self.field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            accumulator[0] += value
            accumulator[1] = value if accumulator[1] is None else max(accumulator[1], value)
        return accumulator

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        maxima = [m for m in (a[1], b[1]) if m is not None]
        return [a[0] + b[0], max(maxima) if maxima else None]

    def get_result(self, accumulator: list[Any]) -> dict[str, Any]:
        return {f"sum_{self.field}": accumulator[0], f"max_{self.field}": accumulator[1]}


@dataclass
class PaneSummary(ProcessWindowFunction):
    """Full window: how many records, their distinct ``field`` values, the event-time span and the
    pane's window start, from every record of the pane."""

    field: str = "page"
    time_field: str = "ts"

    def process(self, info: WindowInfo, elements: list[dict[str, Any]]) -> dict[str, Any]:
        times = [e[self.time_field] for e in elements if isinstance(e.get(self.time_field), int)]
        return {
            "records": len(elements),
            "distinct_values": len({str(e.get(self.field)) for e in elements}),
            "span_ms": (max(times) - min(times)) if times else None,
            "pane": info.pane_index,
        }


@dataclass
class Ratio(ProcessWindowFunction):
    """Combined form: runs on the aggregates' results (one dict) instead of the records."""

    numerator: str = "total"
    denominator: str = "n"

    def process(self, info: WindowInfo, elements: list[dict[str, Any]]) -> dict[str, Any]:
        results = elements[0]
        bottom = results.get(self.denominator) or 0
        return {"ratio": results.get(self.numerator, 0) / bottom if bottom else None, "n": bottom}
