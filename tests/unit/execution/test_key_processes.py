"""How a driver pass's keys are cut into the shares its helper processes and the driver run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.execution.key_processes import share_cuts


@given(st.lists(st.integers(1, 5_000), max_size=60), st.integers(1, 4), st.sampled_from([0.0, 0.3, 1.0]))
def test_shares_are_contiguous_and_about_equal(weights, shares, extra):
    cuts = share_cuts(weights, shares, extra)
    assert len(cuts) == shares - 1
    bounds = [0, *cuts, len(weights)]
    assert bounds == sorted(bounds)
    # Each helper's share reaches its target by less than one key's weight; the driver's, last,
    # holds the rest.
    target = sum(weights) / (shares + extra)
    heaviest = max(weights, default=0)
    for lo, hi in zip(bounds[:-2], bounds[1:-1], strict=True):
        assert sum(weights[lo:hi]) <= target + heaviest


def test_the_driver_keeps_more_than_a_helper():
    assert share_cuts([1] * 23, 2, 0.3) == [10]  # 10 keys to the helper, 13 on the driver
    assert share_cuts([1] * 9, 3) == [3, 6]
    assert share_cuts([], 2) == [0]
