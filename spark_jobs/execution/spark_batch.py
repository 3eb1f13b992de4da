"""The Spark side of one micro-batch: every key's records cogrouped with its state, run through
:func:`spark_jobs.core.engine.keyed.process_keys_columns` on the executors (Arrow in, Arrow out).

The output is one DataFrame holding four kinds of rows (``_kind``): ``pane`` (a firing),
``late`` (a late record's sequence number and watermark), ``state`` (a window's new state) and
``leak`` (a trigger that did not clear its state). The caller persists it and writes each kind
to its Delta table.
"""

from __future__ import annotations

import gc
import json
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import PipelineConfig
from ..core.engine.keyed import process_keys_columns
from ..core.engine.model import WindowStateRow
from ..core.engine.operator import OperatorSpec
from ..core.watermarks import Timeline
from ..exceptions import ReplayError
from .key_processes import DRIVER_EXTRA_SHARE, KEY_COST_RECORDS, share_keys

_ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}
_SQL_TYPES = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}

STATE_COLUMNS = [
    ("window_start_ms", "long"),
    ("window_end_ms", "long"),
    ("is_open", "boolean"),
    ("pane_count", "long"),
    ("contents", "string"),
    ("trigger_state", "string"),
    ("event_timers", "array<long>"),
    ("processing_timers", "array<long>"),
]
PANE_COLUMNS = [
    ("pane_index", "long"),
    ("timing", "string"),
    ("watermark", "long"),
    ("replay_clock", "long"),
    ("fire_time", "long"),
    ("emit_seq", "long"),
    ("emit_step", "long"),
]


def output_columns(config: PipelineConfig) -> list[tuple[str, str]]:
    """The union schema of the batch output (name, type) in order."""
    columns: list[tuple[str, str]] = [("_kind", "string")]
    columns += [(key, "string") for key in config.key]
    columns += STATE_COLUMNS + PANE_COLUMNS
    columns += [(f"agg_{name}", kind) for name, kind in config.outputs()]
    columns += [("_seq", "long"), ("detail", "string"), ("_batch", "long")]
    return columns


def sql_type(kind: str) -> str:
    if kind.startswith("array<"):
        return f"ARRAY<{sql_type(kind[6:-1])}>"
    return _SQL_TYPES[kind]


def arrow_type(kind: str) -> pa.DataType:
    if kind.startswith("array<"):
        return pa.list_(arrow_type(kind[6:-1]))
    return _ARROW_TYPES[kind]


def state_schema(config: PipelineConfig) -> pa.Schema:
    """The window state as the operator reads it and a pass writes it: key fields, then
    ``STATE_COLUMNS``."""
    return pa.schema([(key, pa.string()) for key in config.key]
                     + [(name, arrow_type(kind)) for name, kind in STATE_COLUMNS])


def output_schema(config: PipelineConfig) -> pa.Schema:
    return pa.schema([(name, arrow_type(kind)) for name, kind in output_columns(config)])


def output_ddl(config: PipelineConfig) -> str:
    return ", ".join(f"`{name}` {sql_type(kind)}" for name, kind in output_columns(config))


def make_cogroup_function(
    config: PipelineConfig,
    spec: OperatorSpec,
    timeline: Timeline,
    batches: list[tuple[int, int]] | None = None,
) -> Any:
    """The function Spark runs per key: ``(key, records, state) -> output rows`` as Arrow.

    ``batches`` lists the pass's micro-batches as ``(first seq, batch id)`` in order: each
    output row gets the batch of the record it was emitted at (``_batch``); state rows the last.
    """
    batches = batches or [(timeline.seq_start, 0)]
    batch_starts = [start for start, _ in batches]
    batch_ids = [batch_id for _, batch_id in batches]

    def batch_of(seq: int) -> int:
        # A finalize batch has no records: its firings sit at its start, the previous end.
        return batch_ids[max(0, bisect_right(batch_starts, seq) - 1)]

    key_names = list(config.key)
    # A join's records carry their input (0 left, 1 right) as their only value.
    value_columns = ["_input"] if config.join is not None else [spec_.column for spec_ in config.aggregates]
    columns = output_columns(config)
    schema = output_schema(config)
    needs_element = spec.needs_element
    output_names = [name for name, _ in config.outputs()]
    declared = {f"agg_{name}": (name, kind) for name, kind in config.outputs()}

    def inputs(key: tuple[Any, ...], records: pa.Table, state: pa.Table) -> tuple[Any, ...]:
        """A key's group as ``process_keys_columns`` takes it."""
        key_values = tuple(scalar.as_py() for scalar in key)
        # Spark hands a group's rows over in no particular order: restore replay order.
        seqs = records.column("_seq").to_numpy()
        if len(seqs) > 1 and not (seqs[1:] > seqs[:-1]).all():
            records = records.sort_by("_seq")
        # Arrow columns as they are: the vectorised kernel reads them without a Python object per
        # value; the per-record operator (its fallback) converts them.
        values = [records.column(column) if column else None for column in value_columns]
        elements = None
        if needs_element:
            elements = [json.loads(raw) for raw in records.column("_raw").to_pylist()]
        return (_state_rows(state), records.column("_seq"), records.column("_event_time"), values, elements,
                key_values)

    def rows(outputs: list[tuple[tuple[Any, ...], Any]]) -> pa.Table:
        """The output rows of ``(key, KeyOutput)`` pairs, key after key, in one table."""
        data: dict[str, list[Any]] = {name: [] for name, _ in columns}
        for key_values, out in outputs:
            key_rows(data, key_values, out)
        try:
            return pa.table(data, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as error:
            raise _unstorable(data, schema, declared, error) from error

    def key_rows(data: dict[str, list[Any]], key_values: tuple[Any, ...], out: Any) -> None:
        """A key's output rows appended to ``data``'s columns."""

        def section(kind: str, count: int, values: dict[str, list[Any]], windows: list[Any] | None) -> None:
            """Append ``count`` rows of one kind, column by column (rows in ``out``'s order)."""
            fill = {**values, "_kind": [kind] * count}
            fill.update({name: [value] * count for name, value in zip(key_names, key_values, strict=True)})
            if windows is not None:
                fill["window_start_ms"] = [window[0] for window in windows]
                fill["window_end_ms"] = [window[1] for window in windows]
            for name, column in data.items():
                column.extend(fill.get(name) or [None] * count)

        panes = out.panes
        aggregates = list(zip(*(pane.values for pane in panes), strict=True)) if panes else []
        section("pane", len(panes), {
            "pane_index": [pane.pane_index for pane in panes],
            "timing": [pane.timing for pane in panes],
            "watermark": [pane.watermark for pane in panes],
            "replay_clock": [pane.replay_clock for pane in panes],
            "fire_time": [pane.fire_time for pane in panes],
            "emit_seq": [pane.emit_seq for pane in panes],
            "emit_step": [pane.emit_step for pane in panes],
            "_batch": [batch_of(pane.emit_seq) for pane in panes],
            **{f"agg_{name}": list(column) for name, column in zip(output_names, aggregates,
                                                                  strict=bool(panes))},
        }, [pane.window for pane in panes])
        section("late", len(out.late), {
            "_seq": [late.seq for late in out.late],
            "watermark": [late.watermark for late in out.late],
            "_batch": [batch_of(late.seq) for late in out.late],
        }, None)
        section("state", len(out.state), {
            "is_open": [row.is_open for row in out.state],
            "pane_count": [row.pane_count for row in out.state],
            "contents": [row.contents for row in out.state],
            "trigger_state": [row.trigger_state for row in out.state],
            "event_timers": [row.event_timers for row in out.state],
            "processing_timers": [row.processing_timers for row in out.state],
            "_batch": [batch_ids[-1]] * len(out.state),
        }, [row.window for row in out.state])
        leaks = out.leaks
        section("leak", len(leaks), {"detail": list(leaks), "_batch": [batch_ids[-1]] * len(leaks)}, None)
        sides = out.sides
        section("side", len(sides), {
            "detail": [side.tag for side in sides],
            "contents": [side.payload for side in sides],
            "watermark": [side.watermark for side in sides],
            "replay_clock": [side.replay_clock for side in sides],
            "emit_seq": [side.emit_seq for side in sides],
            "emit_step": [side.emit_step for side in sides],
            "_batch": [batch_of(side.emit_seq) for side in sides],
        }, None)

    def run_many(groups: list[tuple[tuple[Any, ...], pa.Table, pa.Table]]) -> pa.Table:
        """Several keys' ``(key, records, state)`` groups at once, as ``run_keys_on_driver`` hands
        a share over: their contents computed together (``process_keys_columns``), their rows in
        one table, key after key."""
        # Hundreds of keys' state rows, sweeps and panes are many live objects: Python's cyclic
        # collector, run as they are made, would traverse them again and again (a 500,000-record
        # session batch's keys together: 1.1-1.2 s against 1.8 with it). Paused for the call;
        # any cyclic garbage it leaves is collected after.
        with _collector_paused():
            taken = [inputs(*group) for group in groups]
            outputs = process_keys_columns(spec, timeline, taken)
            return rows([(key_input[-1], out) for key_input, out in zip(taken, outputs, strict=True)])

    def run(key: tuple[Any, ...], records: pa.Table, state: pa.Table) -> pa.Table:
        return run_many([(key, records, state)])

    run.many = run_many  # type: ignore[attr-defined]  (kept by cloudpickle, as helpers get it)
    return run


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_keys_on_driver(
    function: Any, keys: list[str], records: pa.Table, state: pa.Table, schema: pa.Schema,
    helpers: Any = None, grouped: bool = False,
) -> pa.Table:
    """What ``records.groupBy(keys).cogroup(state.groupBy(keys)).applyInArrow(function)`` computes,
    without Spark: each key's records (in ``_seq`` order) and state rows go through the same
    ``function``, keys in sorted order. ``helpers`` (``key_processes.KeyHelpers``), when given,
    take shares of the keys (``share_keys``), the driver the last one: the same rows. ``grouped``: each
    key's rows are together already, its records in ``_seq`` order (a share cut from them)."""
    record_groups = _groups(records, keys, "_seq", grouped)
    state_groups = _groups(state, keys, None, grouped)
    no_records, no_state = records.slice(0, 0), state.slice(0, 0)
    ordered = sorted(set(record_groups) | set(state_groups))

    def run(chosen: list[tuple]) -> pa.Table:
        groups = []
        for key in chosen:
            scalars, group = record_groups.get(key, (None, no_records))
            if scalars is None:
                scalars = state_groups[key][0]
            groups.append((scalars, group, state_groups.get(key, (None, no_state))[1]))
        if not groups:
            return schema.empty_table()
        many = getattr(function, "many", None)  # (several keys at once: make_cogroup_function's)
        return many(groups) if many is not None else pa.concat_tables([function(*group) for group in groups])

    if helpers is None or not helpers.enabled or len(ordered) < helpers.processes:
        return run(ordered)
    weights = [len(record_groups.get(key, (None, no_records))[1]) + KEY_COST_RECORDS for key in ordered]
    runs = [[ordered[i] for i in chosen]
            for chosen in share_keys(weights, helpers.processes, DRIVER_EXTRA_SHARE)]

    def share(chosen: list[tuple]) -> tuple[Any, ...]:
        """A helper's arguments: its keys' records and state rows, as this function takes them."""
        parts = [record_groups[key][1] for key in chosen if key in record_groups]
        held = [state_groups[key][1] for key in chosen if key in state_groups]
        return (run_share, function, keys, pa.concat_tables(parts or [no_records]),
                pa.concat_tables(held or [no_state]), schema)

    outputs = helpers.run([share(chosen) for chosen in runs[:-1]], lambda: run(runs[-1]))
    return _in_key_order(outputs, keys, ordered)


def run_share(
    function: Any, keys: list[str], records: pa.Table, state: pa.Table, schema: pa.Schema,
) -> pa.Table:
    """A share of ``run_keys_on_driver``'s keys, as a helper runs it: its rows cut from the sorted
    pass, each key's together and its records in replay order, so not sorted again."""
    return run_keys_on_driver(function, keys, records, state, schema, grouped=True)


def _in_key_order(outputs: list[pa.Table], keys: list[str], ordered: list[tuple]) -> pa.Table:
    """The shares' rows (each share's key by key, its keys in order) laid out in the order of all
    the keys, as one process would have written them; as they come should a key not be found
    again (values that are not equal to themselves): the same rows."""
    rank = {key: i for i, key in enumerate(ordered)}
    ranks: list[int] = []
    starts: list[int] = []  # each key's first row in all the shares' rows
    base = 0
    for output in outputs:
        if output.num_rows:
            bounds, _, values = _key_runs(output, keys)
            ranks += [rank.get(key, -1) for key in values]
            starts += [base + start for start in bounds[:-1]]
        base += output.num_rows
    joined = pa.concat_tables(outputs)
    order = np.argsort(np.asarray(ranks, dtype=np.int64), kind="stable")
    if -1 in ranks or len(set(ranks)) != len(ranks) or (order == np.arange(len(order))).all():
        return joined
    first = np.asarray(starts, dtype=np.int64)
    length = np.diff(np.append(first, base))[order]
    # Block by block in key order: its rows where they are, less where the block now starts.
    moved = np.repeat(first[order] - (np.cumsum(length) - length), length)
    return joined.take(pa.array(np.arange(base, dtype=np.int64) + moved))


def _groups(table: pa.Table, keys: list[str], order: str | None,
            grouped: bool = False) -> dict[tuple, tuple[tuple, pa.Table]]:
    """``table`` cut by its ``keys`` columns: ``{key values: (key as Arrow scalars, rows)}``, each
    key's rows by ``order``; sorted first unless ``grouped`` (they are already)."""
    if table.num_rows == 0:
        return {}
    if not grouped:
        sort_keys = [(key, "ascending") for key in keys] + ([(order, "ascending")] if order else [])
        table = table.take(pc.sort_indices(table, sort_keys=sort_keys))
    bounds, firsts, values = _key_runs(table, keys)
    return {key: (tuple(column[run] for column in firsts), table.slice(start, end - start))
            for run, (key, start, end) in enumerate(zip(values, bounds, bounds[1:], strict=False))}


def _key_runs(table: pa.Table, keys: list[str]) -> tuple[list[int], list[Any], list[tuple]]:
    """Where each run of equal ``keys`` values starts in ``table`` (not empty), then its length;
    the key columns at those starts (Arrow); and each run's key as Python values (what
    ``_groups`` is keyed by)."""
    starts = np.zeros(table.num_rows, dtype=bool)
    starts[0] = True
    for key in keys:
        column = table.column(key)
        starts[1:] |= pc.not_equal(column.slice(1), column.slice(0, len(column) - 1)).to_numpy(
            zero_copy_only=False)
    bounds = [*np.flatnonzero(starts).tolist(), table.num_rows]
    # Taken at the run starts in one call a column (indexing a many-chunk column scans its chunks).
    firsts = [table.column(key).take(pa.array(bounds[:-1], pa.int64())) for key in keys]
    return bounds, firsts, list(zip(*(column.to_pylist() for column in firsts), strict=True))


def _state_rows(state: pa.Table) -> list[WindowStateRow]:
    if state.num_rows == 0:
        return []
    columns = {name: state.column(name).to_pylist() for name, _ in STATE_COLUMNS}
    return [
        WindowStateRow(
            (columns["window_start_ms"][i], columns["window_end_ms"][i]),
            bool(columns["is_open"][i]),
            int(columns["pane_count"][i] or 0),
            columns["contents"][i],
            columns["trigger_state"][i],
            columns["event_timers"][i] or [],
            columns["processing_timers"][i] or [],
        )
        for i in range(state.num_rows)
    ]


def _unstorable(data: dict[str, list[Any]], schema: pa.Schema, declared: dict[str, tuple[str, str]],
                error: Exception) -> ReplayError:
    """Why a pass's output rows do not fit their columns, naming the column and the value: a
    user function's output (``declared`` in the config) that is not of its type, or a time past
    64 bits. Found by converting the columns one by one (only once the whole table failed)."""
    for field in schema:
        values = data[field.name]
        try:
            pa.array(values, field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            bad = next(v for v in values if not _fits(v, field.type))
            name, kind = declared.get(field.name, (field.name, str(field.type)))
            return ReplayError(f"an output row's {name} is {bad!r}, which its column ({kind}) cannot hold: "
                               "a user function's output not of its declared type, or past 64 bits")
    return ReplayError(f"a pass's output rows cannot be stored: {error}")


def _fits(value: Any, kind: pa.DataType) -> bool:
    try:
        pa.array([value], kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return False
    return True
