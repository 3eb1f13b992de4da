"""A worked example of a user-defined join function (see ``spark_jobs.joins``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.engine.joins import JoinFunction


@dataclass
class PickFields(JoinFunction):
    """Named fields of both records, as ``left_<field>`` and ``right_<field>`` columns, plus the
    pair's ``gap_ms`` (right event time minus left) and, with ``min_total``, only the pairs whose
    ``total_field`` adds up to at least that much (a flat join: a pair may emit nothing)."""

    left: list[str] = field(default_factory=list)
    right: list[str] = field(default_factory=list)
    total_field: str | None = None
    min_total: float | None = None

    def join(self, left: dict[str, Any], right: dict[str, Any], left_time: int,
             right_time: int) -> dict[str, Any] | None:
        if self.total_field and self.min_total is not None:
            total = _number(left.get(self.total_field)) + _number(right.get(self.total_field))
            if total < self.min_total:
                return None
        row: dict[str, Any] = {"gap_ms": right_time - left_time}
        row.update({f"left_{name}": left.get(name) for name in self.left})
        row.update({f"right_{name}": right.get(name) for name in self.right})
        return row


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
