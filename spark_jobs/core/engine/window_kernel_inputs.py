"""What the window kernel (``window_kernel``) takes as input, and when it declines.

The kernel reproduces the per-record operator exactly or not at all: whatever it cannot reproduce
(a column of mixed Python types, timestamps that are not int64, a restored accumulator of a type
its arithmetic would not continue) raises :class:`Decline`, and the caller runs the operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

#: The column kinds each value-reading function takes (count, first, last, collect_list take any).
VALUE_KINDS = {
    "sum": ("int", "float", "null"),
    "avg": ("int", "float", "null"),
    "min": ("int", "float", "str", "null"),
    "max": ("int", "float", "str", "null"),
    "count_distinct": ("int", "float", "str", "null"),
}


class Decline(Exception):
    """The input is outside what the kernel reproduces exactly: the per-record operator runs it."""


def int64_array(values: Any) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if values.null_count or not pa.types.is_integer(values.type) or values.type == pa.uint64():
            raise Decline
        return values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return values
    array = np.asarray(list(values))
    if not len(array):
        return np.zeros(0, dtype=np.int64)
    if array.dtype != np.int64:  # floats, bools, ints beyond int64 (object): not timestamps
        raise Decline
    return array


_PYTHON_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def arrow_column(column: Any, n: int) -> pa.Array:
    """The column as an Arrow array holding exactly the Python values the operator would see."""
    if column is None:
        return pa.nulls(n)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.Array):
        return column
    values = list(column)
    kinds = {type(value) for value in values if value is not None}
    if not kinds:
        return pa.nulls(len(values))
    if len(kinds) > 1 or (arrow_type := _PYTHON_TYPES.get(kinds.pop())) is None:
        raise Decline  # mixed types (e.g. int and float): Arrow would convert them
    try:
        return pa.array(values, arrow_type)
    except (pa.ArrowException, OverflowError, ValueError, UnicodeError) as error:
        raise Decline from error


def aggregate_columns(functions: tuple[str, ...], counts_all: tuple[bool, ...], columns: Any,
                      n: int) -> tuple[list[pa.Array | None], list[str | None]]:
    """The aggregates' columns as Arrow arrays (None for count(*), which reads none) and their
    kinds, or decline a column an aggregate cannot take."""
    if len(columns) != len(functions):
        raise Decline
    arrays = [None if all_rows else arrow_column(column, n)
              for all_rows, column in zip(counts_all, columns, strict=True)]
    kinds = [None if array is None else column_kind(array) for array in arrays]
    for function, kind in zip(functions, kinds, strict=True):
        if function in VALUE_KINDS and kind not in VALUE_KINDS[function]:
            raise Decline
    return arrays, kinds


def check_contents(functions: tuple[str, ...], kinds: list[str | None], contents: Any,
                   first_seq: int | None) -> None:
    """Decline restored accumulators the kernels would not continue with Python's results (by
    function and column kind)."""
    if not isinstance(contents, list) or len(contents) != len(functions):
        raise Decline
    for function, kind, value in zip(functions, kinds, contents, strict=True):
        if not continues(function, kind, value, first_seq):
            raise Decline


def column_kind(array: pa.Array) -> str:
    kind = array.type
    if pa.types.is_null(kind):
        return "null"
    if pa.types.is_signed_integer(kind):
        return "int"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "str"
    return "other"


def continues(function: str, kind: str | None, value: Any, first_seq: int | None) -> bool:
    """Whether a restored accumulator value is one the kernel continues exactly."""
    if function == "count":
        return type(value) is int
    if function in ("first", "last"):
        return value is None or (
            isinstance(value, list) and len(value) == 2 and type(value[0]) is int
            and (first_seq is None or value[0] < first_seq)
        )
    if function == "collect_list":
        return isinstance(value, list)
    if kind == "null":  # nothing gets added: the value only passes through
        return True
    python_type = {"int": int, "float": float, "str": str}[kind]
    if function == "sum":
        if kind == "int" and type(value) is int and not -(1 << 62) < value < (1 << 62):
            return False  # its exact sums could pass the 64-bit wrap (``aggregates.long_sum``)
        return value is None or type(value) is python_type or (kind == "float" and type(value) is int)
    if function == "avg":
        if not (isinstance(value, list) and len(value) == 2 and type(value[1]) is int and value[1] >= 0):
            return False
        total = value[0]
        return type(total) is python_type or (kind == "float" and type(total) is int)
    if function in ("min", "max"):
        if value is None:
            return True
        if type(value) is not python_type:
            return False
        return kind != "int" or -(2**63) <= value < 2**63
    # count_distinct: a set of values of the column's type
    return isinstance(value, set) and all(type(item) is python_type for item in value)
