"""``window_latest``'s MERGE (``DeltaStore.merge_latest_panes``): the newest pane per key and window,
with the target's ``window_end`` bounded to the panes' range so that Delta skips the files of older
windows; a global window's panes (no window end) are merged without a range."""

from __future__ import annotations

import datetime as dt

import pytest

from spark_jobs.config import parse_config
from spark_jobs.execution.pass_write import pane_window_ends
from spark_jobs.execution.state.delta import DeltaStore

pytestmark = pytest.mark.spark

SCHEMA = ("page string, window_start timestamp, window_end timestamp, pane_index int, batch_id bigint, "
          "clicks bigint")
T0 = dt.datetime(2023, 11, 14, 22, 0, tzinfo=dt.UTC)


def minute(n: int | None) -> dt.datetime | None:
    return None if n is None else T0 + dt.timedelta(minutes=n)


def panes(spark, rows):
    """(page, window's minute or None for the global window, pane index, batch, clicks)."""
    return spark.createDataFrame(
        [(page, minute(m), minute(None if m is None else m + 1), pane, batch, clicks)
         for page, m, pane, batch, clicks in rows], SCHEMA)


def ms(n: int | None) -> int | None:
    return None if n is None else int(minute(n).timestamp() * 1000)


def latest(spark, store) -> list[tuple]:
    """(page, window start in ms or None, pane index, batch, clicks), sorted."""
    rows = (spark.read.format("delta").load(store.path("window_latest"))
            .selectExpr("page", "unix_millis(window_start) AS start", "pane_index", "batch_id", "clicks")
            .collect())
    return ordered(tuple(r) for r in rows)


def ordered(rows) -> list[tuple]:
    """Rows of ``latest`` sorted: by page, the global window first, then by window start."""
    return sorted(rows, key=lambda r: (r[0], r[1] is not None, r[1] or 0, r[2:]))


def store_at(spark, tmp_path) -> DeltaStore:
    config = parse_config({
        "name": "p", "source": {"path": str(tmp_path / "archive"), "event_time": "ts"}, "key": ["page"],
        "window": {"type": "tumbling", "size": "1m"}, "aggregates": {"clicks": "count(*)"},
        "output": {"path": str(tmp_path / "lakehouse")},
    })
    return DeltaStore(spark, config)


def with_history(spark, store: DeltaStore) -> DeltaStore:
    """Minutes 0-29 of two pages, and a global window's pane, in several commits (files)."""
    for first in range(0, 30, 10):
        store.merge_latest_panes(panes(spark, [(p, m, 0, 0, 1) for p in ("a", "b")
                                               for m in range(first, first + 10)]), ["page"], 0)
    store.merge_latest_panes(panes(spark, [("a", None, 0, 0, 7)]), ["page"], 0)
    return store


def test_the_newest_pane_per_window_with_and_without_the_range(spark, tmp_path):
    store = with_history(spark, store_at(spark, tmp_path))
    before = latest(spark, store)
    # A pass: later panes of minutes 28-29 (updates), minutes 30-31 (new), an older pane of
    # minute 29 of page b (kept out: not newer), and the global window's next pane.
    new = [("a", 28, 1, 1, 2), ("a", 29, 1, 1, 3), ("b", 29, 0, 0, 9), ("a", 30, 0, 1, 4),
           ("b", 31, 0, 1, 5), ("a", None, 1, 1, 8)]
    store.merge_latest_panes(panes(spark, new), ["page"], 1)  # the range found by an aggregate
    kept = [row for row in before if not (row[0] == "a" and row[1] in (ms(28), ms(29), None))]
    expected = kept + [("a", ms(28), 1, 1, 2), ("a", ms(29), 1, 1, 3), ("a", ms(30), 0, 1, 4),
                       ("b", ms(31), 0, 1, 5), ("a", None, 1, 1, 8)]
    assert latest(spark, store) == ordered(expected)

    # The same pass given its range (as a pass knows it): the same table.
    other = with_history(spark, store_at(spark, tmp_path / "given"))
    ends = (ms(29), ms(32))
    other.merge_latest_panes(panes(spark, [r for r in new if r[1] is not None]), ["page"], 1, ends)
    other.merge_latest_panes(panes(spark, [("a", None, 1, 1, 8)]), ["page"], 1)
    assert latest(spark, other) == latest(spark, store)


def test_the_range_bounds_the_match(spark, tmp_path):
    """The range is part of the match: a (wrong) range that leaves a pane's window out makes it an
    insert beside the row it should have replaced, which is how the files outside it are skipped."""
    store = store_at(spark, tmp_path)
    store.merge_latest_panes(panes(spark, [("a", m, 0, 0, 1) for m in range(10)]), ["page"], 0)
    too_late = (ms(9), ms(11))
    store.merge_latest_panes(panes(spark, [("a", 3, 1, 1, 2)]), ["page"], 1, too_late)
    minute_3 = [r for r in latest(spark, store) if r[1] == ms(3)]
    assert minute_3 == [("a", ms(3), 0, 0, 1), ("a", ms(3), 1, 1, 2)]


def test_a_pass_knows_its_panes_window_ends():
    import pyarrow as pa

    from spark_jobs.core.durations import MIN_TIMESTAMP

    rows = pa.table({"window_start_ms": [0, 60_000, 120_000], "window_end_ms": [60_000, 120_000, 180_000]})
    assert pane_window_ends(rows) == (60_000, 180_000)
    assert pane_window_ends(rows.slice(0, 0)) is None and pane_window_ends(None) is None
    global_pane = pa.table({"window_start_ms": [MIN_TIMESTAMP], "window_end_ms": [2**62]})
    assert pane_window_ends(pa.concat_tables([rows, global_pane])) is None
