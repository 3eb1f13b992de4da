"""Time is integer epoch milliseconds everywhere; this module fixes the constants and parsing."""

from __future__ import annotations

import re

#: Flink's Long.MIN_VALUE / Long.MAX_VALUE: the watermark before any record, and +infinity.
MIN_TIMESTAMP = -(2**63)
MAX_TIMESTAMP = 2**63 - 1

#: The event and ingest times a replay takes: ISO-8601's years, from 0001-01-02 (PySpark reads a
#: TIMESTAMP as a local time, probing a day before it) to 9999-12-31 (Python's last datetime).
#: Records outside are quarantined (``invalid_timestamp``), as are those whose windows would be
#: (``fitting_times``): the tables hold window bounds as TIMESTAMPs, and near the ends of int64
#: Flink's long arithmetic wraps around.
EARLIEST_TIME = -62_135_510_400_000
LATEST_TIME = 253_402_300_799_999
#: The longest duration a pipeline may name: 1000 years of 365.25 days.
MAX_DURATION = 365_250 * 86_400_000

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def parse_duration(value: str | int) -> int:
    """Parse ``500ms``, ``10s``, ``1m``, ``2h``, ``1d`` (or a bare integer of ms) into milliseconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        return _within_limit(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (write e.g. 500ms, 10s, 1m, 2h, 1d)")
    return _within_limit(int(match.group(1)) * _UNITS[match.group(2)])


def _within_limit(ms: int) -> int:
    if ms > MAX_DURATION:
        raise ValueError(f"a duration cannot exceed 1000 years (365250d): {ms} ms")
    return ms


def format_duration(ms: int) -> str:
    """The shortest exact spelling of ``ms`` in the units ``parse_duration`` reads."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def saturating_add(timestamp: int, delta: int) -> int:
    """``timestamp + delta`` clamped to the representable range (Flink's overflow guard)."""
    return max(MIN_TIMESTAMP, min(MAX_TIMESTAMP, timestamp + delta))


#: How far inside the int64 range the kernels keep times, so that their window arithmetic never
#: reaches where ``saturating_add`` would clamp.
KERNEL_MARGIN = 1 << 61


def fitting_times(reach: int) -> tuple[int, int]:
    """The first and last time whose windows, reaching ``reach`` from it either way at most
    (``WindowAssigner.reach``), lie within ``EARLIEST_TIME`` to ``LATEST_TIME``."""
    return EARLIEST_TIME + max(reach - 1, 0), LATEST_TIME - reach  # (a window's end included)


def clear_of_saturation(low: int, high: int, reach: int) -> bool:
    """Whether times from ``low`` to ``high``, plus any span up to ``reach``, stay far from both
    ends of time (the kernels decline what does not: they do not model saturation)."""
    margin = KERNEL_MARGIN
    return reach < margin and low > MIN_TIMESTAMP + margin and high < MAX_TIMESTAMP - margin


def format_timestamp(ms: int) -> str:
    """Human-readable UTC form of an epoch-ms timestamp; the infinities spelled out."""
    import datetime as _dt

    if ms <= MIN_TIMESTAMP:
        return "-inf"
    if ms >= MAX_TIMESTAMP:
        return "+inf"
    if not EARLIEST_TIME <= ms <= LATEST_TIME:
        return f"{ms} ms"  # (a window's end past year 9999: no datetime spells it)
    moment = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    return f"{moment.year:04d}" + moment.strftime("-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"
