"""How a driver pass's keys are dealt into the shares its helper processes and the driver run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.execution.key_processes import share_keys


@given(st.lists(st.integers(1, 5_000), max_size=60), st.integers(1, 4), st.sampled_from([0.0, 0.3, 1.0]))
def test_every_key_goes_to_one_share_and_no_share_runs_long(weights, shares, extra):
    dealt = share_keys(weights, shares, extra)
    assert len(dealt) == shares
    assert sorted(i for keys in dealt for i in keys) == list(range(len(weights)))
    assert all(keys == sorted(keys) for keys in dealt)
    # Each key goes where it finishes first, so no share ends later than an even split of the
    # work (the driver's share 1 + extra times a helper's) by more than each share's one key.
    capacity = [1.0] * (shares - 1) + [1.0 + extra]
    even = (sum(weights) + shares * max(weights, default=0)) / sum(capacity)
    for keys, room in zip(dealt, capacity, strict=True):
        assert sum(weights[i] for i in keys) / room <= even + 1e-9


def test_a_few_skewed_keys_split_evenly_and_the_driver_keeps_more():
    # Sliding windows' eight pages (shares of a pass's records): cut contiguously, 57 % against 43 %.
    pages = [5, 3, 10, 6, 3, 30, 25, 18]
    helper, driver = share_keys(pages, 2, 0.3)
    assert sum(pages[i] for i in helper) == 44 and sum(pages[i] for i in driver) == 56
    assert [len(keys) for keys in share_keys([1] * 23, 2, 0.3)] == [10, 13]
    assert share_keys([1] * 9, 3) == [[2, 5, 8], [1, 4, 7], [0, 3, 6]]  # ties: the driver first
    assert share_keys([], 2) == [[], []]
