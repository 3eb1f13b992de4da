"""Window functions and evictors: what a firing computes from a window's contents.

Built-in aggregates (``aggregates:``) are incremental, like Flink's ``AggregateFunction``. Users
can add their own:

* ``aggregate_function``: an :class:`AggregateFunction` subclass (``create_accumulator``, ``add``,
  ``merge``, ``get_result``), incremental, its accumulator JSON-serialisable;
* ``process_function``: a :class:`ProcessWindowFunction` subclass whose ``process`` sees the
  window, the pane index and either every record of the pane (full-window form) or, when
  aggregates are configured too, their results (Flink's combined form);
* ``evictor``: Flink's ``CountEvictor`` / ``TimeEvictor`` / ``DeltaEvictor``, before or after the
  function. With an evictor the pane buffers its records and the aggregates are computed over
  what remains at each firing (the same result as a full-window function); evicted records leave
  the window's state for good.

A pane function object implements ``create`` / ``add`` / ``merge`` / ``fire`` and the JSON
round-trip of its contents; the operator only talks to that.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .aggregates import Aggregation
from .durations import parse_duration
from .windows.base import TimeWindow


class AggregateFunction:
    """User-defined incremental aggregate. Accumulators must be JSON-serialisable."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add(self, record: dict[str, Any], accumulator: Any) -> Any:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def get_result(self, accumulator: Any) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class WindowInfo:
    """What a process function knows about the firing."""

    key: tuple[Any, ...]
    window: TimeWindow
    pane_index: int


class ProcessWindowFunction:
    """User-defined full-window function: one output row (a dict of the declared outputs) per
    firing. ``elements`` are the pane's records (dicts, arrival order), or, in the combined form,
    a one-element list holding the aggregates' results."""

    def process(self, info: WindowInfo, elements: list[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError


# ---- evictors ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Evictor:
    after: bool = False  # evict after the function instead of before it

    def evict(self, entries: list[list[Any]]) -> list[list[Any]]:
        """``entries`` are ``[seq, timestamp, values, element]`` in arrival order."""
        raise NotImplementedError


@dataclass(frozen=True)
class CountEvictor(Evictor):
    count: int = 1

    def evict(self, entries: list[list[Any]]) -> list[list[Any]]:
        # Keeps the last `count` records in arrival order (not by timestamp), as Flink does.
        return entries if len(entries) <= self.count else entries[len(entries) - self.count:]


@dataclass(frozen=True)
class TimeEvictor(Evictor):
    keep: int = 0  # ms

    def evict(self, entries: list[list[Any]]) -> list[list[Any]]:
        # Relative to the largest record timestamp in the pane, not to the watermark.
        if not entries:
            return entries
        cutoff = max(entry[1] for entry in entries) - self.keep
        return [entry for entry in entries if entry[1] > cutoff]


@dataclass(frozen=True)
class DeltaEvictor(Evictor):
    field: str = ""
    threshold: float = 0.0

    def evict(self, entries: list[list[Any]]) -> list[list[Any]]:
        # Flink: drop every record whose delta to the last record is >= threshold.
        if not entries:
            return entries
        last = _field(entries[-1][3], self.field)
        return [
            entry for entry in entries
            if last is None or (value := _field(entry[3], self.field)) is None
            or abs(value - last) < self.threshold
        ]


def _field(element: Any, name: str) -> float | None:
    value = element.get(name) if isinstance(element, dict) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def evictor_from_dict(spec: dict[str, Any]) -> Evictor:
    kind = spec.get("type")
    after = spec.get("after", False)
    if not isinstance(after, bool):
        raise ValueError("after must be true or false")
    if kind == "count":
        count = spec.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("count evictor needs count >= 1")
        return CountEvictor(after, count)
    if kind == "time":
        return TimeEvictor(after, parse_duration(spec.get("keep", "")))
    if kind == "delta":
        field, threshold = spec.get("field"), spec.get("threshold")
        if not isinstance(field, str) or not isinstance(threshold, int | float):
            raise ValueError("delta evictor needs field (name) and threshold (number)")
        return DeltaEvictor(after, field, float(threshold))
    raise ValueError(f"type must be count, time or delta, not {kind!r}")


def load_object(path: str, params: dict[str, Any], base: type) -> Any:
    module_name, _, name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"class must be an import path like pkg.module.Class, not {path!r}")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import {path!r}: {error}") from error
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{path!r} is not a {base.__name__} subclass")
    try:
        return cls(**params)
    except TypeError as error:
        raise ValueError(f"bad params for {path}: {error}") from error


# ---- pane functions (what the operator calls) ---------------------------------------------------
class IncrementalPane:
    """Built-in aggregates (and an optional user aggregate), folded in as records arrive."""

    def __init__(
        self,
        aggregation: Aggregation,
        user: AggregateFunction | None = None,
        user_names: list[str] | None = None,
        process: ProcessWindowFunction | None = None,
        output_names: list[str] | None = None,
    ):
        self.aggregation = aggregation
        self.user = user
        self.user_names = list(user_names or [])
        self.process = process
        self.output_names = list(output_names or [])
        self.needs_element = user is not None

    def create(self) -> Any:
        acc = self.aggregation.create()
        return [acc, self.user.create_accumulator()] if self.user else acc

    def add(self, contents: Any, seq: int, timestamp: int, values: tuple, element: Any) -> Any:
        if self.user is None:
            self.aggregation.add(contents, values, seq)
            return contents
        self.aggregation.add(contents[0], values, seq)
        contents[1] = self.user.add(element, contents[1])
        return contents

    def merge(self, a: Any, b: Any) -> Any:
        if self.user is None:
            return self.aggregation.merge(a, b)
        return [self.aggregation.merge(a[0], b[0]), self.user.merge(a[1], b[1])]

    def fire(self, contents: Any, key: tuple, window: TimeWindow, pane_index: int) -> tuple[list, Any]:
        if self.user is None:
            values = self.aggregation.result(contents)
        else:
            user = self.user.get_result(contents[1]) or {}
            values = self.aggregation.result(contents[0]) + [user.get(n) for n in self.user_names]
        if self.process is not None:
            names = [spec.name for spec in self.aggregation.specs] + self.user_names
            results = dict(zip(names, values, strict=True))
            row = self.process.process(WindowInfo(key, window, pane_index), [results])
            values = [(row or {}).get(name) for name in self.output_names]
        return values, contents

    def to_json(self, contents: Any) -> Any:
        if self.user is None:
            return self.aggregation.to_json(contents)
        return [self.aggregation.to_json(contents[0]), contents[1]]

    def from_json(self, data: Any) -> Any:
        if self.user is None:
            return self.aggregation.from_json(data)
        return [self.aggregation.from_json(data[0]), data[1]]


class BufferedPane:
    """Keeps the pane's records: for evictors and full-window process functions."""

    needs_element = True

    def __init__(self, aggregation: Aggregation, evictor: Evictor | None,
                 process: ProcessWindowFunction | None, output_names: list[str]):
        self.aggregation = aggregation
        self.evictor = evictor
        self.process = process
        self.output_names = output_names

    def create(self) -> list:
        return []

    def add(self, contents: list, seq: int, timestamp: int, values: tuple, element: Any) -> list:
        contents.append([seq, timestamp, list(values), element])
        return contents

    def merge(self, a: list, b: list) -> list:
        return sorted(a + b, key=lambda entry: entry[0])

    def fire(self, contents: list, key: tuple, window: TimeWindow, pane_index: int) -> tuple[list, Any]:
        evictor = self.evictor
        if evictor is not None and not evictor.after:
            contents = evictor.evict(contents)
        if self.process is not None:
            row = self.process.process(WindowInfo(key, window, pane_index), [e[3] for e in contents])
            values = [(row or {}).get(name) for name in self.output_names]
        else:
            acc = self.aggregation.create()
            for seq, _, entry_values, _ in contents:
                self.aggregation.add(acc, tuple(entry_values), seq)
            values = self.aggregation.result(acc)
        if evictor is not None and evictor.after:
            contents = evictor.evict(contents)
        # Evicted records leave the window's state for good; an emptied pane holds nothing.
        return values, (contents or None)

    def to_json(self, contents: list) -> list:
        return contents

    def from_json(self, data: list) -> list:
        return [list(entry) for entry in data]
