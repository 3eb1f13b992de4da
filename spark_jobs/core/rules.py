"""The rules every engine shares: when a window's state is cleaned up, when a window or a record
is late, and what a pane's timing is called. One home for each, in integer milliseconds, called by
the reference operator and by both kernels so that they cannot drift apart.

Two forms of the arithmetic, which agree wherever the kernels run:

* with Flink's overflow guard (``saturating_add``): the reference operator, for any timestamp;
* plain ``+``, for a scalar or a numpy array: the kernels, which decline input whose times come
  near the ends of time (``durations.clear_of_saturation``), where the guard would clamp.
"""

from __future__ import annotations

from typing import Any

from .durations import saturating_add

#: A pane's timing (Flink's ``PaneInfo.Timing``): fired before, at, or after its window's end.
EARLY, ON_TIME, LATE = "EARLY", "ON_TIME", "LATE"


def cleanup_time(max_timestamp: int, allowed_lateness: int, event_time: bool = True) -> int:
    """When a window's state is dropped (Flink's ``cleanupTime``): its last timestamp plus the
    allowed lateness in event time (saturating), its last timestamp in processing time."""
    return saturating_add(max_timestamp, allowed_lateness) if event_time else max_timestamp


def is_window_late(cleanup: Any, watermark: Any) -> Any:
    """Whether a window is past its cleanup time (Flink's ``isWindowLate``); scalars or arrays."""
    return cleanup <= watermark


def is_element_late(timestamp: int, allowed_lateness: int, watermark: int) -> bool:
    """Whether a record that landed in no window is late (Flink's ``isElementLate``), saturating."""
    return saturating_add(timestamp, allowed_lateness) <= watermark


def kernel_cleanup_time(max_timestamp: Any, allowed_lateness: int) -> Any:
    """:func:`cleanup_time` in event time without the overflow guard, for a scalar or an array
    (the kernels keep times clear of saturation)."""
    return max_timestamp + allowed_lateness


def kernel_element_late(timestamp: Any, allowed_lateness: int, watermark: Any) -> Any:
    """:func:`is_element_late` without the overflow guard, for scalars or arrays."""
    return timestamp + allowed_lateness <= watermark


def timer_timing(time: int, window: Any) -> str:
    """A firing by a timer: early before the window's last timestamp, on time at it, late after."""
    end = window.max_timestamp
    return EARLY if time < end else ON_TIME if time == end else LATE


def element_timing(now: int, window: Any) -> str:
    """A firing by a record: early while the window's time (watermark or clock) is before its end."""
    return EARLY if now < window.max_timestamp else LATE
