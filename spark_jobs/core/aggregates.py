"""Pane aggregates: ``count(*)``, ``sum(x)``, ``min``, ``max``, ``avg``, ``count_distinct``,
``first``, ``last``, ``collect_list``.

An :class:`Aggregation` owns a list of accumulators (one per named aggregate) with Flink's
``AggregateFunction`` shape: ``create``, ``add``, ``merge``, ``result``. ``first``, ``last`` and
``collect_list`` keep each value's replay sequence number, so merged session windows still
report arrival order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FUNCTIONS = ("count", "sum", "min", "max", "avg", "count_distinct", "first", "last", "collect_list")
NUMERIC_FUNCTIONS = ("sum", "min", "max", "avg")
_CALL = re.compile(r"^\s*([a-z_]+)\s*\(\s*([A-Za-z_][A-Za-z0-9_.]*|\*)\s*\)\s*$")


@dataclass(frozen=True)
class AggregateSpec:
    name: str
    function: str
    column: str | None  # None for count(*)

    @classmethod
    def parse(cls, name: str, text: str) -> AggregateSpec:
        match = _CALL.match(str(text))
        if not match:
            raise ValueError(f"{text!r} is not of the form function(column), e.g. sum(value)")
        function, column = match.groups()
        if function not in FUNCTIONS:
            raise ValueError(f"unknown function {function!r}; use one of {', '.join(FUNCTIONS)}")
        if column == "*":
            if function != "count":
                raise ValueError(f"{function}(*) is not defined; name a column")
            column = None
        return cls(name, function, column)

    def to_text(self) -> str:
        return f"{self.function}({self.column or '*'})"


def long_sum(a: Any, b: Any) -> Any:
    """``a + b``; a sum of integers wraps around at 64 bits, as Java's (Flink's) ``long`` does,
    so that it fits the BIGINT column it is written to. (Wrapping at every addition or once at
    the end gives the same value: the kernels' exact sums, declined where they could overflow,
    agree with it.)"""
    total = a + b
    if type(total) is int and not -(1 << 63) <= total < (1 << 63):
        total = (total + (1 << 63)) % (1 << 64) - (1 << 63)
    return total


class Aggregation:
    """The accumulators of a pane, as a plain list (cheap to copy, JSON-serialisable)."""

    def __init__(self, specs: list[AggregateSpec]):
        self.specs = list(specs)
        self.functions = [spec.function for spec in self.specs]

    @property
    def columns(self) -> list[str]:
        """Input columns the aggregates read, in spec order (``None`` for ``count(*)``)."""
        return [spec.column for spec in self.specs]

    def create(self) -> list[Any]:
        return [_create(function) for function in self.functions]

    def add(self, acc: list[Any], values: tuple[Any, ...], seq: int) -> None:
        """Add one record: ``values`` holds the record's value for each spec, in order."""
        for i, function in enumerate(self.functions):
            value = values[i]
            if function == "count":
                if value is not None or self.specs[i].column is None:
                    acc[i] += 1
            elif value is None:
                continue
            elif function == "sum":
                acc[i] = value if acc[i] is None else long_sum(acc[i], value)
            elif function == "min":
                if acc[i] is None or value < acc[i]:
                    acc[i] = value
            elif function == "max":
                if acc[i] is None or value > acc[i]:
                    acc[i] = value
            elif function == "avg":
                acc[i][0] += value
                acc[i][1] += 1
            elif function == "count_distinct":
                acc[i].add(value)
            elif function == "first":
                if acc[i] is None or seq < acc[i][0]:
                    acc[i] = [seq, value]
            elif function == "last":
                if acc[i] is None or seq >= acc[i][0]:
                    acc[i] = [seq, value]
            else:  # collect_list
                acc[i].append((seq, value))

    def merge(self, acc: list[Any], other: list[Any]) -> list[Any]:
        """Fold ``other`` into ``acc`` (session windows merging) and return ``acc``."""
        for i, function in enumerate(self.functions):
            mine, theirs = acc[i], other[i]
            if function == "count":
                acc[i] = mine + theirs
            elif theirs is None:
                continue
            elif mine is None:
                acc[i] = theirs
            elif function == "sum":
                acc[i] = long_sum(mine, theirs)
            elif function == "min":
                acc[i] = min(mine, theirs)
            elif function == "max":
                acc[i] = max(mine, theirs)
            elif function == "avg":
                acc[i] = [mine[0] + theirs[0], mine[1] + theirs[1]]
            elif function == "count_distinct":
                mine.update(theirs)
            elif function == "first":
                acc[i] = mine if mine[0] <= theirs[0] else theirs
            elif function == "last":
                acc[i] = mine if mine[0] >= theirs[0] else theirs
            else:
                acc[i] = sorted(mine + theirs, key=lambda pair: pair[0])
        return acc

    def result(self, acc: list[Any]) -> list[Any]:
        out = []
        for i, function in enumerate(self.functions):
            value = acc[i]
            if function == "avg":
                out.append(value[0] / value[1] if value[1] else None)
            elif function == "count_distinct":
                out.append(len(value))
            elif function in ("first", "last"):
                out.append(None if value is None else value[1])
            elif function == "collect_list":
                out.append([item for _, item in value])
            else:
                out.append(value)
        return out

    def to_json(self, acc: list[Any]) -> list[Any]:
        """A JSON-ready copy (sets become sorted lists)."""
        return [
            sorted(value, key=_sort_key) if function == "count_distinct" else value
            for function, value in zip(self.functions, acc, strict=True)
        ]

    def from_json(self, data: list[Any]) -> list[Any]:
        acc = []
        for function, value in zip(self.functions, data, strict=True):
            if function == "count_distinct":
                value = set(value)
            elif function == "collect_list":
                value = [(seq, item) for seq, item in value]
            acc.append(value)
        return acc


def _create(function: str) -> Any:
    if function == "count":
        return 0
    if function == "avg":
        return [0, 0]
    if function == "count_distinct":
        return set()
    if function == "collect_list":
        return []
    return None


def _sort_key(value: Any) -> tuple[str, Any]:
    return (type(value).__name__, value)
