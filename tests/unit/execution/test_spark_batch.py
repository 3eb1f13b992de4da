"""run_keys_on_driver: each key's records and state through the per-key function, alone or shared."""

from __future__ import annotations

import io
import pickle

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.execution import key_processes
from spark_jobs.execution.spark_batch import run_keys_on_driver

SCHEMA = pa.schema([("k", pa.string()), ("seqs", pa.list_(pa.int64())), ("held", pa.int64())])


def per_key(scalars: tuple, records: pa.Table, state: pa.Table) -> pa.Table:
    """What each key saw: its records' seqs in the order given, and how many state rows."""
    return pa.table({"k": [scalars[0].as_py()], "seqs": [records.column("_seq").to_pylist()],
                     "held": [state.num_rows]}, schema=SCHEMA)


class InProcessHelpers:
    """``KeyHelpers``' contract with its shares sent as a helper gets them and served by the
    helper's own loop (``key_processes.serve``), here, before the driver's share."""

    enabled = True

    def __init__(self, processes: int):
        self.processes = processes

    def run(self, shares: list[tuple], local) -> list[pa.Table]:
        from pyspark import cloudpickle

        requests, answers = io.BytesIO(), io.BytesIO()
        for share in shares:
            key_processes._write(requests, key_processes._request(cloudpickle, *share))
        requests.seek(0)
        key_processes.serve(requests, answers)
        answers.seek(0)
        outputs = []
        while (answer := key_processes._read(answers)) is not None:
            ok, rows = pickle.loads(answer)
            assert ok, rows
            outputs.append(key_processes._table(rows))
        assert len(outputs) == len(shares)
        return [*outputs, local()]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 10_000)), unique_by=lambda r: r[1]),
       st.lists(st.sampled_from("abcdefgh"), unique=True), st.integers(2, 4))
def test_shared_keys_give_the_rows_of_the_driver_alone(records, held, processes):
    """Shares of the sorted keys (their rows grouped already, not sorted again) see each key's
    records in replay order and its state rows, as the driver alone does; their rows come back
    in the order of all the keys."""
    rows = pa.table({"k": pa.array([k for k, _ in records], pa.string()),
                     "_seq": pa.array([seq for _, seq in records], pa.int64())})
    state = pa.table({"k": pa.array(held, pa.string()), "w": pa.array(range(len(held)), pa.int64())})
    alone = run_keys_on_driver(per_key, ["k"], rows, state, SCHEMA)
    shared = run_keys_on_driver(per_key, ["k"], rows, state, SCHEMA, InProcessHelpers(processes))
    assert shared.to_pylist() == alone.to_pylist()
    assert alone.column("k").to_pylist() == sorted({k for k, _ in records} | set(held))
    for row in alone.to_pylist():
        assert row["seqs"] == sorted(seq for k, seq in records if k == row["k"])


TAKEN: list[int] = []  # how many keys each ``many`` call took


def per_key_many(groups: list[tuple]) -> pa.Table:
    TAKEN.append(len(groups))
    return pa.concat_tables([per_key(*group) for group in groups])


def per_key_with_many(scalars: tuple, records: pa.Table, state: pa.Table) -> pa.Table:
    raise AssertionError("a function with `many` is given a share's keys at once")


per_key_with_many.many = per_key_many  # type: ignore[attr-defined]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 10_000)), min_size=1,
                unique_by=lambda r: r[1]), st.integers(2, 3))
def test_a_function_with_many_takes_each_share_at_once(records, processes):
    """A per-key function with ``many`` (``make_cogroup_function``'s: the session kernel computes
    several keys' contents together) gets every share's keys in one call, in a helper too (the
    attribute travels with the function); the same rows."""
    rows = pa.table({"k": pa.array([k for k, _ in records], pa.string()),
                     "_seq": pa.array([seq for _, seq in records], pa.int64())})
    state = pa.table({"k": pa.array([], pa.string()), "w": pa.array([], pa.int64())})
    keys = len({k for k, _ in records})
    alone = run_keys_on_driver(per_key, ["k"], rows, state, SCHEMA)
    TAKEN.clear()
    assert run_keys_on_driver(per_key_with_many, ["k"], rows, state, SCHEMA).to_pylist() == alone.to_pylist()
    assert TAKEN == [keys]
    TAKEN.clear()
    shared = run_keys_on_driver(per_key_with_many, ["k"], rows, state, SCHEMA, InProcessHelpers(processes))
    assert shared.to_pylist() == alone.to_pylist()
    assert sum(TAKEN) == keys and len(TAKEN) == (processes if keys >= processes else 1)
