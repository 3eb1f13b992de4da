"""One key's share of a micro-batch: the function every execution path calls.

Spark calls :func:`process_key` once per key group (``cogroup(...).applyInArrow``); the
in-memory runner used by tests and replay debugging calls the very same function, so the
semantics live in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .operator import KeyedWindowOperator, LateRecord, OperatorSpec, Pane, WindowStateRow
from .watermarks import Timeline


@dataclass
class KeyOutput:
    panes: list[Pane]
    late: list[LateRecord]
    state: list[WindowStateRow]
    leaks: list[str]


def process_key(
    spec: OperatorSpec,
    timeline: Timeline,
    state: Iterable[WindowStateRow],
    seqs: Sequence[int],
    timestamps: Sequence[int],
    values: Sequence[tuple[Any, ...]],
    elements: Sequence[Any] | None = None,
) -> KeyOutput:
    """Restore the key's operator state, run its records and due timers, and dump the state."""
    operator = KeyedWindowOperator(spec, timeline)
    operator.load_state(state)
    operator.process(seqs, timestamps, values, elements)
    return KeyOutput(operator.panes, operator.late, operator.dump_state(), operator.leaks)
