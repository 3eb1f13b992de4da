"""Tumbling windows: offset, negative timestamps, boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.core.windows import TimeWindow, TumblingWindows, assigner_from_dict


def test_boundaries_are_half_open():
    assigner = TumblingWindows.of(10)
    assert assigner.assign(0) == [TimeWindow(0, 10)]
    assert assigner.assign(9) == [TimeWindow(0, 10)]
    assert assigner.assign(10) == [TimeWindow(10, 20)]


def test_offset_shifts_the_grid():
    assigner = TumblingWindows.of(60_000, 15_000)
    assert assigner.assign(14_999) == [TimeWindow(-45_000, 15_000)]
    assert assigner.assign(15_000) == [TimeWindow(15_000, 75_000)]


def test_negative_timestamps_use_the_window_below():
    assigner = TumblingWindows.of(10)
    assert assigner.assign(-1) == [TimeWindow(-10, 0)]
    assert assigner.assign(-10) == [TimeWindow(-10, 0)]
    assert assigner.assign(-11) == [TimeWindow(-20, -10)]
    assert TumblingWindows.of(10, 3).assign(-1) == [TimeWindow(-7, 3)]


def test_offset_is_normalised_modulo_size():
    assert TumblingWindows.of(10, 13) == TumblingWindows.of(10, 3)
    assert TumblingWindows.of(10, 10).offset == 0


@given(st.integers(-10**12, 10**12), st.integers(1, 10**6), st.integers(0, 10**6))
def test_every_timestamp_lands_in_exactly_one_aligned_window(timestamp, size, offset):
    (window,) = TumblingWindows.of(size, offset).assign(timestamp)
    assert window.start <= timestamp < window.end and window.end - window.start == size
    assert (window.start - offset) % size == 0


def test_size_must_be_positive():
    with pytest.raises(ValueError):
        TumblingWindows(0)


def test_config_form():
    assigner = TumblingWindows.of(60_000, 15_000)
    assert assigner.to_dict() == {"type": "tumbling", "size": "1m", "time": "event", "offset": "15s"}
    assert assigner_from_dict(assigner.to_dict()) == assigner
    plain = TumblingWindows.of(500, time="processing")
    assert plain.to_dict() == {"type": "tumbling", "size": "500ms", "time": "processing"}
    assert assigner_from_dict(plain.to_dict()) == plain and not plain.is_event_time
    assert repr(plain) == "TumblingWindows(size=500, offset=0, time='processing')"
