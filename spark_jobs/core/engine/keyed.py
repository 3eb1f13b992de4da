"""One key's share of a micro-batch: the function every execution path calls.

Spark calls :func:`process_key_columns` once per key group (``cogroup(...).applyInArrow``); the
in-memory runner used by tests and replay debugging calls the very same function, so the
semantics live in one place. It runs the vectorised window kernel (``window_kernel``) where that
covers the pipeline and the input, and otherwise :func:`process_key`, the per-record operator,
which stays the reference: both give the same panes, late records and state rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..watermarks import Timeline
from . import session_kernel, window_kernel
from .model import KeyOutput, WindowStateRow
from .operator import KeyedWindowOperator, OperatorSpec
from .process import KeyedProcessOperator


def process_key(
    spec: OperatorSpec,
    timeline: Timeline,
    state: Iterable[WindowStateRow],
    seqs: Sequence[int],
    timestamps: Sequence[int],
    values: Sequence[tuple[Any, ...]],
    elements: Sequence[Any] | None = None,
    key: tuple[Any, ...] = (),
) -> KeyOutput:
    """Restore the key's operator state, run its records and due timers, and dump the state."""
    if spec.process is not None:
        operator: Any = KeyedProcessOperator(spec.process, list(spec.output_names), timeline, key,
                                             spec.two_inputs)
    else:
        operator = KeyedWindowOperator(spec, timeline, key)
    operator.load_state(state)
    operator.process(seqs, timestamps, values, elements)
    sides = getattr(operator, "sides", [])
    return KeyOutput(operator.panes, operator.late, operator.dump_state(), operator.leaks, sides)


def process_key_columns(
    spec: OperatorSpec,
    timeline: Timeline,
    state: Iterable[WindowStateRow],
    seqs: Any,
    timestamps: Any,
    columns: Sequence[Any],
    elements: Sequence[Any] | None = None,
    key: tuple[Any, ...] = (),
) -> KeyOutput:
    """:func:`process_key` with the records' values given as columns, one per value a record
    carries (Arrow arrays or plain sequences; None: no column, all null); ``seqs`` and
    ``timestamps`` as Arrow, numpy or sequences of ints.

    A kernel runs the key when it supports the spec and does not decline the input (the vectorised
    one for fixed windows, the session one); otherwise the per-record operator does,
    from the same state, with the same results.
    """
    return process_keys_columns(spec, timeline, [(state, seqs, timestamps, columns, elements, key)])[0]


#: One key's batch as ``process_key_columns`` takes it:
#: ``(state, seqs, timestamps, columns, elements, key)``.
KeyColumns = tuple[Iterable[WindowStateRow], Any, Any, Sequence[Any], Sequence[Any] | None, tuple[Any, ...]]


def process_keys_columns(
    spec: OperatorSpec, timeline: Timeline, keys: Sequence[KeyColumns]
) -> list[KeyOutput]:
    """:func:`process_key_columns` for several keys of one batch, in order: the session kernel
    computes their contents together (``session_kernel.process_keys``); the same outputs."""
    keys = [(list(state), *rest) for state, *rest in keys]
    if window_kernel.supports(spec):
        found = [window_kernel.process_key(spec, timeline, state, seqs, timestamps, columns, key)
                 for state, seqs, timestamps, columns, _, key in keys]
    elif session_kernel.supports(spec):
        found = session_kernel.process_keys(spec, timeline, [
            (state, seqs, timestamps, columns, key) for state, seqs, timestamps, columns, _, key in keys
        ])
    else:
        found = [None] * len(keys)
    return [out if out is not None else _per_record(spec, timeline, *inputs)
            for out, inputs in zip(found, keys, strict=True)]


def _per_record(spec: OperatorSpec, timeline: Timeline, state: list[WindowStateRow], seqs: Any,
                timestamps: Any, columns: Sequence[Any], elements: Sequence[Any] | None,
                key: tuple[Any, ...]) -> KeyOutput:
    """The per-record operator over a key's columns (where no kernel runs it)."""
    n = len(seqs)
    value_lists = [[None] * n if column is None else _python_list(column) for column in columns]
    values = list(zip(*value_lists, strict=True)) if value_lists else [()] * n
    seqs, timestamps = _python_list(seqs), _python_list(timestamps)
    return process_key(spec, timeline, state, seqs, timestamps, values, elements, key)


def _python_list(column: Any) -> list[Any]:
    """A column's values as Python objects (Arrow and numpy columns converted)."""
    if hasattr(column, "to_pylist"):
        return column.to_pylist()
    if hasattr(column, "tolist"):
        return column.tolist()
    return list(column)
