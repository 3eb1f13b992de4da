"""replay_positions: the driver's sort into replay order, against a plain-Python definition."""

from __future__ import annotations

import itertools
import os
from unittest import mock

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.execution.ordering import RUNNING_MAX, key_columns, replay_positions

INGEST_ORDER = ["_ingest_time", "_partition", "_offset", "_file_index", "_line"]
JOIN_ORDER = ["_ingest_time", "_input", "_partition", "_offset", "_file_index", "_line"]
FILE_ORDER = ["_file_index", "_line"]

# Partition names that sort differently as numbers, as code points and as UTF-16 ("10" < "9",
# "é" < "𝄞" but not in UTF-16): Spark compares UTF-8 bytes.
PARTITIONS = st.sampled_from(["0", "1", "9", "10", "a", "é", "\U0001d11e", "\uff21"])


@st.composite
def records(draw, with_offset: bool = True, inputs: int = 1):
    """Rows of sort keys with many ties on the leading keys; (file, line) is unique."""
    count = draw(st.integers(0, 60))
    cells = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40)), min_size=count,
                          max_size=count, unique=True))
    rows = []
    for file_index, line in cells:
        rows.append({
            "_ingest_time": draw(st.integers(0, 5)),
            "_event_time": draw(st.integers(-5, 30)),
            "_partition": draw(PARTITIONS),
            "_offset": draw(st.integers(0, 3)) if with_offset else None,
            "_input": file_index % inputs,  # an input's files are its own
            "_file_index": file_index,
            "_line": line,
        })
    return rows


def table(rows, columns):
    types = {"_partition": pa.string(), "_file_index": pa.int32()}
    return pa.table({c: pa.array([r[c] for r in rows], types.get(c, pa.int64())) for c in columns})


def by_definition(rows, order):
    """Positions from Python's sort: nulls first, strings as UTF-8 bytes."""
    def key(index):
        row = rows[index]
        return tuple(
            (0, b"") if row[c] is None else (1, row[c].encode() if isinstance(row[c], str) else row[c])
            for c in order
        )

    positions = [0] * len(rows)
    for position, index in enumerate(sorted(range(len(rows)), key=key)):
        positions[index] = position
    return positions


@settings(max_examples=200, deadline=None)
@given(records(with_offset=True))
def test_ingest_time_order(rows):
    got = replay_positions(table(rows, key_columns(INGEST_ORDER)), INGEST_ORDER)
    assert got.tolist() == by_definition(rows, INGEST_ORDER)


@settings(max_examples=100, deadline=None)
@given(records(with_offset=False))
def test_unset_offset_is_null_in_every_row(rows):
    got = replay_positions(table(rows, key_columns(INGEST_ORDER)), INGEST_ORDER)
    assert got.tolist() == by_definition(rows, INGEST_ORDER)


@settings(max_examples=100, deadline=None)
@given(records(inputs=2))
def test_file_order_and_two_inputs_by_ingest_time(rows):
    for order in (FILE_ORDER, JOIN_ORDER):
        got = replay_positions(table(rows, key_columns(order)), order)
        assert got.tolist() == by_definition(rows, order)


@settings(max_examples=200, deadline=None)
@given(records(inputs=2))
def test_two_inputs_without_ingest_time_merge_by_the_earlier_next_record(rows):
    """The running-maximum sort is the timestamp-synchronised merge: each input in its own file
    and line order; always take the input whose next record has the smaller running maximum
    event time (ties: the first input)."""
    order = [RUNNING_MAX, "_input", "_file_index", "_line"]
    got = replay_positions(table(rows, key_columns(order)), order)
    queues = {}
    for index in sorted(range(len(rows)), key=lambda i: (rows[i]["_file_index"], rows[i]["_line"])):
        queues.setdefault(rows[index]["_input"], []).append(index)
    expected, seen = [0] * len(rows), dict.fromkeys(queues, None)
    heads = dict.fromkeys(queues, 0)
    for position in range(len(rows)):
        def candidate(name):
            event_time = rows[queues[name][heads[name]]]["_event_time"]
            return max(event_time, seen[name]) if seen[name] is not None else event_time

        ready = [name for name in sorted(queues) if heads[name] < len(queues[name])]
        name = min(ready, key=lambda n: (candidate(n), n))
        seen[name] = candidate(name)
        expected[queues[name][heads[name]]] = position
        heads[name] += 1
    assert got.tolist() == expected


def read_positions(path):
    """The positions file as ``ReplaySequence`` reads it: {(file index, line): position}."""
    import struct

    found = {}
    with open(path, "rb") as source:
        assert source.read(4) == b"RPOS"
        (files,) = struct.unpack("<i", source.read(4))
        for _ in range(files):
            index, first, length = struct.unpack("<iqi", source.read(16))
            table = struct.unpack(f"<{length}i", source.read(4 * length))
            found.update({(index, first + at): position for at, position in enumerate(table)
                          if position >= 0})
        assert source.read() == b""
    return found


@settings(max_examples=200, deadline=None)
@given(cells=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5_000)), max_size=80, unique=True),
       data=st.data())
def test_positions_file_holds_each_records_position(cells, data):
    """Each record's position at its file and line, whether given (the driver's sort) or the rows'
    order (the cluster's); "in order" when every file's records have rising positions by line."""
    import shutil

    import numpy as np

    from spark_jobs.execution.ordering import _write_positions

    order = data.draw(st.permutations(range(len(cells))))
    files = np.array([file for file, _ in cells], dtype=np.int32)
    lines = np.array([line for _, line in cells], dtype=np.int64)
    expected = {cell: position for cell, position in zip(cells, order, strict=True)}
    rising = all(expected[a] < expected[b] for a in cells for b in cells if a[0] == b[0] and a[1] < b[1])
    path, in_order, counts = _write_positions(files, lines, np.array(order, dtype=np.int64))
    try:
        assert read_positions(path) == expected and in_order is rising
        assert counts == {file: sum(1 for f, _ in cells if f == file) for file, _ in cells}
    finally:
        shutil.rmtree(os.path.dirname(path))
    replayed = sorted(range(len(cells)), key=order.__getitem__)  # the rows in replay order
    # ... with rejected lines among them (lines no record has), skipped
    rejected = data.draw(st.lists(st.tuples(st.integers(0, 6), st.integers(5_001, 6_000)), unique=True))
    rows = [(*cells[i], True) for i in replayed]
    for cell in rejected:
        rows.insert(data.draw(st.integers(0, len(rows))), (*cell, False))
    # ... collected from Spark in Arrow batches, and filled in chunks that cross them
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))

    def collected(values: list, kind: pa.DataType) -> pa.ChunkedArray:
        bounds = [0, *cuts, len(values)]
        return pa.chunked_array([values[a:b] for a, b in itertools.pairwise(bounds)], type=kind)

    with mock.patch("spark_jobs.execution.ordering._FILL_CHUNK", data.draw(st.integers(1, 4))):
        path, in_order, counts = _write_positions(
            collected([r[0] for r in rows], pa.int16()), collected([r[1] for r in rows], pa.int32()),
            None, collected([r[2] for r in rows], pa.bool_()),
        )
    try:
        assert read_positions(path) == expected and in_order is rising
        assert counts == {file: sum(1 for f, _ in cells if f == file) for file, _ in cells}
    finally:
        shutil.rmtree(os.path.dirname(path))
