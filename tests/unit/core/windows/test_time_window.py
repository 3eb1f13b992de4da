"""TimeWindow and Flink's window-start arithmetic."""

from __future__ import annotations

from spark_jobs.core.durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from spark_jobs.core.windows import GLOBAL_WINDOW, GlobalWindows, TimeWindow
from spark_jobs.core.windows.base import window_start_with_offset


def test_max_timestamp_intersects_cover():
    window = TimeWindow(0, 10)
    assert window.max_timestamp == 9
    assert window.intersects(TimeWindow(10, 20))  # touching windows intersect (Flink's rule)
    assert TimeWindow(10, 20).intersects(window)
    assert not window.intersects(TimeWindow(11, 20))
    assert window.cover(TimeWindow(5, 30)) == TimeWindow(0, 30)


def test_window_start_with_offset_floors_negative_timestamps():
    assert window_start_with_offset(17, 0, 10) == 10
    assert window_start_with_offset(-1, 0, 10) == -10
    assert window_start_with_offset(-10, 0, 10) == -10
    assert window_start_with_offset(-11, 0, 10) == -20
    assert window_start_with_offset(4, 5, 10) == -5
    assert window_start_with_offset(5, 5, 10) == 5


def test_global_window():
    assert GLOBAL_WINDOW == TimeWindow(MIN_TIMESTAMP, MAX_TIMESTAMP)
    assert GLOBAL_WINDOW.max_timestamp == MAX_TIMESTAMP
    assigner = GlobalWindows.create()
    assert assigner.assign(-5) == assigner.assign(10**15) == [GLOBAL_WINDOW]
    assert not assigner.merging and assigner.is_event_time
    assert assigner.to_dict() == {"type": "global", "time": "event"}
    assert repr(assigner) == "GlobalWindows(time='event')"
