"""The types the engines share: what a firing emits (``Pane``), a late record, a window's persisted
state (``WindowStateRow``) and what one key's run gives back (``KeyOutput``).

The reference operator, both kernels, the process functions and the execution layer all speak
these; they live here rather than in ``operator`` so that none of them has to import the reference
operator for its vocabulary (``operator`` re-exports them: older imports keep working).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..windows.base import TimeWindow


class Pane(NamedTuple):
    """One firing of one (key, window)."""

    window: TimeWindow
    pane_index: int
    timing: str
    watermark: int
    replay_clock: int
    fire_time: int | None
    values: list[Any]
    emit_seq: int
    emit_step: int


class LateRecord(NamedTuple):
    seq: int
    watermark: int


class WindowStateRow(NamedTuple):
    """A window's persisted state: what ``operator_state`` stores per (key, window)."""

    window: TimeWindow
    is_open: bool
    pane_count: int
    contents: str | None
    trigger_state: str | None
    event_timers: list[int]
    processing_timers: list[int]


@dataclass
class KeyOutput:
    """A key's panes, late records, state rows to keep, leak notes and side outputs, in order."""

    panes: list[Pane]
    late: list[LateRecord]
    state: list[WindowStateRow]
    leaks: list[str]
    sides: list[Any] = field(default_factory=list)
