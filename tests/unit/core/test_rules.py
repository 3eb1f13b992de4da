"""The shared rules: the kernels' plain forms agree with the operator's saturating ones wherever
the kernels run, scalar and vectorised alike; pane timings follow the window's last timestamp."""

from __future__ import annotations

import numpy as np

from spark_jobs.core import rules
from spark_jobs.core.durations import MAX_TIMESTAMP, MIN_TIMESTAMP
from spark_jobs.core.windows.base import TimeWindow


def test_cleanup_time_adds_the_lateness_in_event_time_only_and_saturates() -> None:
    assert rules.cleanup_time(999, 100) == 1099
    assert rules.cleanup_time(999, 100, event_time=False) == 999
    assert rules.cleanup_time(MAX_TIMESTAMP - 1, 100) == MAX_TIMESTAMP


def test_lateness_is_at_or_past_the_watermark() -> None:
    assert rules.is_window_late(1099, 1099) and not rules.is_window_late(1099, 1098)
    assert rules.is_element_late(10, 5, 15) and not rules.is_element_late(10, 5, 14)
    assert not rules.is_element_late(MAX_TIMESTAMP - 1, 10, MAX_TIMESTAMP - 1)  # saturates, never wraps


def test_the_plain_forms_agree_with_the_saturating_ones_scalar_and_vectorised() -> None:
    rng = np.random.default_rng(7)
    times = rng.integers(-10**12, 10**12, 2_000)
    watermarks = times + rng.integers(-5_000, 5_000, 2_000)
    for lateness in (0, 1, 1_000):
        cleanup = rules.kernel_cleanup_time(times, lateness)
        late_windows = rules.is_window_late(cleanup, watermarks)
        late_records = rules.kernel_element_late(times, lateness, watermarks)
        for t, w, window_late, record_late in zip(times.tolist(), watermarks.tolist(),
                                                  late_windows.tolist(), late_records.tolist(), strict=True):
            assert rules.is_window_late(rules.cleanup_time(t, lateness), w) == window_late
            assert rules.is_element_late(t, lateness, w) == record_late
            assert rules.kernel_element_late(t, lateness, w) == record_late


def test_pane_timing_follows_the_windows_last_timestamp() -> None:
    window = TimeWindow(0, 1000)
    timings = [rules.timer_timing(t, window) for t in (998, 999, 1000)]
    assert timings == [rules.EARLY, rules.ON_TIME, rules.LATE]
    assert [rules.element_timing(t, window) for t in (998, 999)] == [rules.EARLY, rules.LATE]
    assert rules.timer_timing(MIN_TIMESTAMP, window) == rules.EARLY
