"""Window assigners. Pure Python: no Spark, Delta or Airflow import belongs here."""

from __future__ import annotations

from typing import Any

from ..durations import parse_duration
from .base import GLOBAL_WINDOW, TimeWindow, WindowAssigner
from .global_window import GlobalWindows
from .session import SessionWindows
from .sliding import SlidingWindows
from .tumbling import TumblingWindows

__all__ = [
    "GLOBAL_WINDOW",
    "GlobalWindows",
    "SessionWindows",
    "SlidingWindows",
    "TimeWindow",
    "TumblingWindows",
    "WindowAssigner",
    "assigner_from_dict",
]

WINDOW_TYPES = ("tumbling", "sliding", "session", "global")


def assigner_from_dict(spec: dict[str, Any]) -> WindowAssigner:
    """Build an assigner from its config form (``{type: tumbling, size: 1m}``); inverse of
    ``to_dict``. Raises ``ValueError`` naming the problem."""
    kind = spec.get("type")
    time = spec.get("time", "event")
    if time not in ("event", "processing"):
        raise ValueError(f"time must be 'event' or 'processing', not {time!r}")
    offset = parse_duration(spec.get("offset", 0))
    if kind == "tumbling":
        return TumblingWindows(parse_duration(_required(spec, "size")), offset, time)
    if kind == "sliding":
        return SlidingWindows(
            parse_duration(_required(spec, "size")), parse_duration(_required(spec, "slide")),
            offset, time,
        )
    if kind == "session":
        return SessionWindows(parse_duration(_required(spec, "gap")), time)
    if kind == "global":
        return GlobalWindows(time)
    raise ValueError(f"type must be one of {', '.join(WINDOW_TYPES)}, not {kind!r}")


def _required(spec: dict[str, Any], name: str) -> Any:
    if name not in spec:
        raise ValueError(f"{spec.get('type')} windows need '{name}'")
    return spec[name]
