"""Sliding windows: order (latest first), count, offset, negative timestamps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.core.windows import SlidingWindows, TimeWindow, assigner_from_dict


def test_latest_window_first_as_flink():
    assert SlidingWindows.of(30, 10).assign(25) == [TimeWindow(20, 50), TimeWindow(10, 40), TimeWindow(0, 30)]


def test_size_not_a_multiple_of_slide():
    assert SlidingWindows.of(25, 10).assign(24) == [TimeWindow(20, 45), TimeWindow(10, 35), TimeWindow(0, 25)]
    assert SlidingWindows.of(25, 10).assign(25) == [TimeWindow(20, 45), TimeWindow(10, 35)]


def test_offset_and_negative_timestamps():
    assert SlidingWindows.of(20, 10, 5).assign(4) == [TimeWindow(-5, 15), TimeWindow(-15, 5)]
    assert SlidingWindows.of(20, 10).assign(-1) == [TimeWindow(-10, 10), TimeWindow(-20, 0)]
    assert SlidingWindows.of(20, 10, 15) == SlidingWindows.of(20, 10, 5)


def test_slide_larger_than_size_leaves_gaps():
    assigner = SlidingWindows.of(5, 10)
    assert assigner.assign(3) == [TimeWindow(0, 5)]
    assert assigner.assign(7) == []


@given(st.integers(-10**9, 10**9), st.integers(1, 500), st.integers(1, 200), st.integers(0, 500))
def test_windows_contain_the_timestamp_descending_and_counted(timestamp, size, slide, offset):
    windows = SlidingWindows.of(size, slide, offset).assign(timestamp)
    assert all(w.start <= timestamp < w.end and w.end - w.start == size for w in windows)
    assert all((w.start - offset) % slide == 0 for w in windows)
    assert [w.start for w in windows] == sorted((w.start for w in windows), reverse=True)
    assert len(set(windows)) == len(windows)
    if size % slide == 0:
        assert len(windows) == size // slide
    else:
        assert len(windows) in (math.floor(size / slide), math.ceil(size / slide))


def test_validation_and_config_form():
    with pytest.raises(ValueError):
        SlidingWindows(10, 0)
    with pytest.raises(ValueError):
        SlidingWindows(0, 10)
    assigner = SlidingWindows.of(3_600_000, 60_000, 1_000)
    assert assigner.to_dict() == {
        "type": "sliding", "size": "1h", "slide": "1m", "time": "event", "offset": "1s"}
    assert assigner_from_dict(assigner.to_dict()) == assigner
    assert repr(assigner) == "SlidingWindows(size=3600000, slide=60000, offset=1000, time='event')"
