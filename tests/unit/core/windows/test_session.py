"""Session windows: Flink's merge sweep, touching windows, bridging."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.core.windows import SessionWindows, TimeWindow, assigner_from_dict

S = SessionWindows.with_gap(10)


def test_assign_opens_a_gap_long_window():
    assert S.assign(7) == [TimeWindow(7, 17)] and S.merging


def test_overlapping_windows_merge():
    assert S.merge_windows([TimeWindow(0, 10), TimeWindow(5, 15)]) == [
        (TimeWindow(0, 15), [TimeWindow(0, 10), TimeWindow(5, 15)])
    ]


def test_touching_windows_merge_separate_ones_do_not():
    assert S.merge_windows([TimeWindow(10, 20), TimeWindow(0, 10)]) == [
        (TimeWindow(0, 20), [TimeWindow(0, 10), TimeWindow(10, 20)])
    ]
    assert S.merge_windows([TimeWindow(0, 10), TimeWindow(11, 21)]) == []


def test_a_bridging_window_joins_two_sessions_into_one_group():
    windows = [TimeWindow(0, 10), TimeWindow(20, 30), TimeWindow(8, 22)]
    assert S.merge_windows(windows) == [
        (TimeWindow(0, 30), [TimeWindow(0, 10), TimeWindow(8, 22), TimeWindow(20, 30)])
    ]


def test_sweep_by_start_gives_one_group_per_run_and_skips_singletons():
    windows = [TimeWindow(50, 60), TimeWindow(0, 10), TimeWindow(5, 15), TimeWindow(30, 40),
               TimeWindow(55, 65), TimeWindow(14, 24)]
    assert S.merge_windows(windows) == [
        (TimeWindow(0, 24), [TimeWindow(0, 10), TimeWindow(5, 15), TimeWindow(14, 24)]),
        (TimeWindow(50, 65), [TimeWindow(50, 60), TimeWindow(55, 65)]),
    ]


def test_a_window_inside_another_merges_into_it():
    assert S.merge_windows([TimeWindow(0, 30), TimeWindow(5, 15)]) == [
        (TimeWindow(0, 30), [TimeWindow(0, 30), TimeWindow(5, 15)])
    ]


def test_validation_and_config_form():
    with pytest.raises(ValueError):
        SessionWindows(0)
    assert S.to_dict() == {"type": "session", "gap": "10ms", "time": "event"}
    assert assigner_from_dict({"type": "session", "gap": "30m"}) == SessionWindows(1_800_000)
    assert repr(S) == "SessionWindows(gap=10, time='event')"


def test_other_assigners_do_not_merge():
    from spark_jobs.core.windows import TumblingWindows

    with pytest.raises(NotImplementedError):
        TumblingWindows(10).merge_windows([])


def sweep(windows):
    """Flink's ``TimeWindow.mergeWindows`` as it reads, through ``intersects`` and ``cover``."""
    groups = []
    for window in sorted(windows):
        if groups and groups[-1][0].intersects(window):
            cover, members = groups[-1]
            groups[-1] = (cover.cover(window), [*members, window])
        else:
            groups.append((window, [window]))
    return [(cover, members) for cover, members in groups if len(members) > 1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(1, 20)), max_size=12))
def test_merge_windows_is_flinks_sweep(spans):
    windows = [TimeWindow(start, start + length) for start, length in spans]
    assert S.merge_windows(windows) == sweep(windows)
