"""``window_latest``'s MERGE (``DeltaStore.merge_latest_panes``): the newest pane per key and window,
with the target's ``window_end`` bounded to the panes' range so that Delta skips the files of older
windows; a global window's panes (no window end) are merged without a range. Made by delta-rs on
this side while the files it may rewrite are small, else by Spark: the same rows either way."""

from __future__ import annotations

import datetime as dt

import pytest

from spark_jobs.config import parse_config
from spark_jobs.execution.pass_write import newest_panes
from spark_jobs.execution.state import delta_rs_writes
from spark_jobs.execution.state.delta import DeltaStore

pytestmark = pytest.mark.spark

SCHEMA = ("page string, window_start timestamp, window_end timestamp, pane_index int, batch_id bigint, "
          "clicks bigint")
T0 = dt.datetime(2023, 11, 14, 22, 0, tzinfo=dt.UTC)


def minute(n: int | None) -> dt.datetime | None:
    return None if n is None else T0 + dt.timedelta(minutes=n)


def panes(spark, rows):
    """(page, window's minute or None for the global window, pane index, batch, clicks), as the
    Arrow rows a pass merges."""
    return spark.createDataFrame(
        [(page, minute(m), minute(None if m is None else m + 1), pane, batch, clicks)
         for page, m, pane, batch, clicks in rows], SCHEMA).toArrow()


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


@pytest.fixture(params=["delta-rs", "spark"])
def writer(request, monkeypatch) -> str:
    """Which MERGE the store makes: delta-rs's (the small tables here), or Spark's (no file may be
    rewritten on this side)."""
    if request.param == "spark":
        monkeypatch.setattr(delta_rs_writes, "CLIENT_MERGE_MAX_BYTES", -1)
    return request.param


def merges_made_by(spark, store) -> list[str]:
    """Per MERGE commit of ``window_latest``, oldest first: "delta-rs" or "spark" (their metrics'
    names differ: ``num_target_rows_updated`` against ``numTargetRowsUpdated``)."""
    return ["delta-rs" if "num_target_rows_updated" in row["operationMetrics"] else "spark"
            for row in history(spark, store) if row["operation"] == "MERGE"]


def merge_versions(spark, store) -> list[int]:
    """The versions of ``window_latest``'s MERGE commits, oldest first."""
    return [row["version"] for row in history(spark, store) if row["operation"] == "MERGE"]


def history(spark, store) -> list:
    """``window_latest``'s commits (``DESCRIBE HISTORY`` rows), oldest first."""
    return spark.sql(f"DESCRIBE HISTORY delta.`{store.path('window_latest')}`").orderBy("version").collect()


def with_history(spark, store: DeltaStore) -> DeltaStore:
    """Minutes 0-29 of two pages, and a global window's pane, in several commits (files)."""
    for first in range(0, 30, 10):
        store.merge_latest_panes(panes(spark, [(p, m, 0, 0, 1) for p in ("a", "b")
                                               for m in range(first, first + 10)]), ["page"], 0)
    store.merge_latest_panes(panes(spark, [("a", None, 0, 0, 7)]), ["page"], 0)
    return store


def test_the_newest_pane_per_window_with_and_without_the_range(spark, tmp_path, writer):
    store = with_history(spark, store_at(spark, tmp_path))
    before = latest(spark, store)
    # A pass: later panes of minutes 28-29 (updates), minutes 30-31 (new), an older pane of
    # minute 29 of page b (kept out: not newer), and the global window's next pane.
    new = [("a", 28, 1, 1, 2), ("a", 29, 1, 1, 3), ("b", 29, 0, 0, 9), ("a", 30, 0, 1, 4),
           ("b", 31, 0, 1, 5), ("a", None, 1, 1, 8)]
    store.merge_latest_panes(panes(spark, new), ["page"], 1)  # the range found from the panes
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
    assert set(merges_made_by(spark, store)) == {writer}


def test_the_range_bounds_the_match(spark, tmp_path, writer):
    """The range is part of the match: a (wrong) range that leaves a pane's window out makes it an
    insert beside the row it should have replaced, which is how the files outside it are skipped."""
    store = store_at(spark, tmp_path)
    store.merge_latest_panes(panes(spark, [("a", m, 0, 0, 1) for m in range(10)]), ["page"], 0)
    too_late = (ms(9), ms(11))
    store.merge_latest_panes(panes(spark, [("a", 3, 1, 1, 2)]), ["page"], 1, too_late)
    minute_3 = [r for r in latest(spark, store) if r[1] == ms(3)]
    assert minute_3 == [("a", ms(3), 0, 0, 1), ("a", ms(3), 1, 1, 2)]


def test_spark_takes_the_merges_that_would_rewrite_too_much(spark, tmp_path, monkeypatch):
    """delta-rs rewrites the files holding a replaced row: past CLIENT_MERGE_MAX_BYTES of files
    in the panes' range, Spark's MERGE (deletion vectors) takes over; files of older windows
    do not count. Either way the change data feed shows each replaced row's before and after."""
    store = with_history(spark, store_at(spark, tmp_path))  # 3 files of 10 minutes, the global pane
    path = store.path("window_latest")
    from deltalake import DeltaTable

    table = DeltaTable(path)
    one_file = delta_rs_writes.candidate_bytes(table, (ms(25), ms(26)))
    assert 0 < one_file < delta_rs_writes.candidate_bytes(table, (ms(5), ms(26)))
    monkeypatch.setattr(delta_rs_writes, "CLIENT_MERGE_MAX_BYTES", one_file)
    store.merge_latest_panes(panes(spark, [("a", 25, 1, 1, 2)]), ["page"], 1)  # one file: delta-rs
    store.merge_latest_panes(panes(spark, [("a", 5, 1, 1, 3), ("a", 25, 2, 1, 4)]), ["page"], 1)  # two
    assert merges_made_by(spark, store)[-2:] == ["delta-rs", "spark"]
    rows = latest(spark, store)
    assert ("a", ms(5), 1, 1, 3) in rows and ("a", ms(25), 2, 1, 4) in rows and len(rows) == 61
    # (Spark's first MERGE turned deletion vectors on first: a commit between the two MERGEs.)
    start, end = merge_versions(spark, store)[-2:]
    changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
               .load(path).selectExpr(f"IF(_commit_version = {start}, 0, 1)", "_change_type", "pane_index",
                                      "unix_millis(window_start)").collect())
    assert end == store.version("window_latest")
    assert sorted(tuple(r) for r in changes) == [
        (0, "update_postimage", 1, ms(25)), (0, "update_preimage", 0, ms(25)),
        (1, "update_postimage", 1, ms(5)), (1, "update_postimage", 2, ms(25)),
        (1, "update_preimage", 0, ms(5)), (1, "update_preimage", 1, ms(25)),
    ]


def test_the_newest_pane_of_each_key_and_window(spark):
    rows = panes(spark, [("a", 1, 0, 0, 1), ("a", 1, 2, 1, 3), ("a", 1, 1, 0, 2), ("b", 1, 0, 0, 4),
                         ("a", None, 0, 0, 5), ("a", None, 1, 1, 6), ("a", 2, 0, 1, 7)])
    newest = newest_panes(rows, ["page"]).select(["page", "pane_index", "clicks"]).to_pylist()
    assert sorted((r["page"], r["pane_index"], r["clicks"]) for r in newest) == [
        ("a", 0, 7), ("a", 1, 6), ("a", 2, 3), ("b", 0, 4)]


@pytest.mark.parametrize("reached", [True, False], ids=["reached", "spark-only"])
def test_a_new_table_gets_deletion_vectors_from_sparks_first_merge(spark, tmp_path, monkeypatch, reached):
    """``window_latest`` is created with its change data feed and without deletion vectors (delta-rs,
    asked for them, adds a feature older readers refuse); Spark's first MERGE turns them on, once,
    and marks replaced rows in them. Where this process cannot reach the table, Spark does it all."""
    from deltalake import DeltaTable

    from spark_jobs.execution.state import delta

    if not reached:
        monkeypatch.setattr(delta, "delta_location", lambda path: None)
    monkeypatch.setattr(delta_rs_writes, "CLIENT_MERGE_MAX_BYTES", -1)
    store = store_at(spark, tmp_path)
    store.merge_latest_panes(panes(spark, [("a", m, 0, 0, 1) for m in range(10)]), ["page"], 0)
    table = DeltaTable(store.path("window_latest"))
    assert table.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
    assert "delta.enableDeletionVectors" not in table.metadata().configuration
    assert table.protocol().min_reader_version == 1 and not table.protocol().reader_features
    for pane in (1, 2):
        store.merge_latest_panes(panes(spark, [("a", 3, pane, pane, 2)]), ["page"], pane)
    commits = history(spark, store)
    assert [row["operation"] for row in commits] == ["WRITE", "SET TBLPROPERTIES", "MERGE", "MERGE"]
    assert commits[0]["engineInfo"].startswith("delta-rs") == reached
    # The first MERGE marks the replaced row of the table's one file in a deletion vector.
    assert commits[2]["operationMetrics"]["numTargetDeletionVectorsAdded"] == "1"
    protocol = DeltaTable(store.path("window_latest")).protocol()
    assert "deletionVectors" in protocol.reader_features and "variantType" not in protocol.writer_features
    assert ("a", ms(3), 2, 2, 2) in latest(spark, store) and len(latest(spark, store)) == 10
