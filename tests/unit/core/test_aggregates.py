"""Pane aggregates: the nine functions, nulls, merge (sessions) and the JSON round-trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.core.aggregates import FUNCTIONS, AggregateSpec, Aggregation, long_sum

SPECS = [
    AggregateSpec.parse("n", "count(*)"),
    AggregateSpec.parse("n_v", "count(v)"),
    AggregateSpec.parse("total", "sum(v)"),
    AggregateSpec.parse("low", "min(v)"),
    AggregateSpec.parse("high", "max(v)"),
    AggregateSpec.parse("mean", "avg(v)"),
    AggregateSpec.parse("distinct", "count_distinct(v)"),
    AggregateSpec.parse("first_v", "first(v)"),
    AggregateSpec.parse("last_v", "last(v)"),
    AggregateSpec.parse("all_v", "collect_list(v)"),
]
AGG = Aggregation(SPECS)


def fold(rows):
    """rows: (seq, value); every spec reads the same value (count(*) ignores it)."""
    acc = AGG.create()
    for seq, value in rows:
        AGG.add(acc, (value,) * len(SPECS), seq)
    return acc


def test_every_function_is_covered():
    assert sorted({spec.function for spec in SPECS}) == sorted(FUNCTIONS)


def test_results():
    acc = fold([(0, 3), (1, None), (2, 1), (3, 3), (4, 7)])
    assert AGG.result(acc) == [5, 4, 14, 1, 7, 3.5, 3, 3, 7, [3, 1, 3, 7]]


def test_empty_and_all_null():
    assert AGG.result(AGG.create()) == [0, 0, None, None, None, None, 0, None, None, []]
    assert AGG.result(fold([(0, None)])) == [1, 0, None, None, None, None, 0, None, None, []]


def test_merge_keeps_arrival_order_by_sequence_number():
    late_half = fold([(5, 10), (7, 2)])
    early_half = fold([(1, 4), (6, 4)])
    merged = AGG.merge(late_half, early_half)
    assert AGG.result(merged) == [4, 4, 20, 2, 10, 5.0, 3, 4, 2, [4, 10, 4, 2]]


def test_merge_with_an_empty_side():
    assert AGG.result(AGG.merge(AGG.create(), fold([(0, 2)]))) == AGG.result(fold([(0, 2)]))
    assert AGG.result(AGG.merge(fold([(0, 2)]), AGG.create())) == AGG.result(fold([(0, 2)]))


def test_json_round_trip():
    acc = fold([(0, 3), (1, 5), (2, 3)])
    text = json.dumps(AGG.to_json(acc))
    again = AGG.from_json(json.loads(text))
    assert AGG.result(again) == AGG.result(acc)
    AGG.add(again, (9,) * len(SPECS), 3)  # still a working accumulator
    assert AGG.result(again)[0] == 4 and AGG.result(again)[6] == 3


rows = st.lists(st.tuples(st.integers(-50, 50), st.one_of(st.none(), st.integers(-9, 9))),
                max_size=20, unique_by=lambda r: r[0])


@settings(max_examples=100, deadline=None)
@given(rows, rows)
def test_merging_two_partial_folds_equals_one_fold(left, right):
    seqs = {seq for seq, _ in left}
    right = [(seq, value) for seq, value in right if seq not in seqs]
    whole = fold(sorted(left + right))
    merged = AGG.merge(fold(left), AGG.from_json(json.loads(json.dumps(AGG.to_json(fold(right))))))
    assert AGG.result(merged) == AGG.result(whole)


@pytest.mark.parametrize(("text", "message"), [
    ("median(v)", "unknown function 'median'"),
    ("sum(*)", r"sum\(\*\) is not defined"),
    ("sum v", "is not of the form function"),
])
def test_parse_errors(text, message):
    with pytest.raises(ValueError, match=message):
        AggregateSpec.parse("x", text)


def test_parse_and_text():
    spec = AggregateSpec.parse("n", " count( * ) ")
    assert spec == AggregateSpec("n", "count", None) and spec.to_text() == "count(*)"
    assert AggregateSpec.parse("s", "sum(a.b)").to_text() == "sum(a.b)"
    assert Aggregation(SPECS[:3]).columns == [None, "v", "v"]


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20), st.integers(0, 20))
def test_an_int_sum_wraps_as_a_java_long_however_it_is_folded(values, cut):
    """Added one by one or merged from two parts (sessions), a sum of integers is the exact sum
    wrapped into int64, as Java's ``long`` arithmetic leaves it; floats are untouched."""
    exact = sum(values)
    wrapped = (exact + 2**63) % 2**64 - 2**63
    agg = Aggregation([AggregateSpec.parse("s", "sum(v)")])
    parts = []
    for part in (values[:cut], values[cut:]):
        acc = agg.create()
        for seq, value in enumerate(part):
            agg.add(acc, (value,), seq)
        parts.append(acc)
    merged = agg.merge(parts[0], parts[1])
    assert agg.result(merged) == [wrapped if values else None]
    assert long_sum(2**62, 2.0**62) == 2.0**63  # a float sum is not wrapped
