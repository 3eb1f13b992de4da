"""Several micro-batches per Spark pass: the tables are those of one batch per pass, row for row
(batch ids, watermarks and commit-log rows included); only the number of commits shrinks, and a
reprocess rewinds to a pass boundary. Running a pass's keys on the executors (a shuffle by key)
instead of on the driver changes nothing either."""

from __future__ import annotations

import pytest
from replay_helpers import REPLAY_LOG_VOLATILE, cli, snapshot, table_rows, write_archive, write_pipeline

pytestmark = pytest.mark.spark


def tables(spark, lakehouse) -> dict:
    """Every table, with the commit log minus ``latest_through``: when ``window_latest`` was last
    MERGEd is the one column that follows the passes (it is MERGEd at the end of a pass)."""
    return {
        **snapshot(spark, lakehouse),
        "replay_log": table_rows(spark, lakehouse, "replay_log", (*REPLAY_LOG_VOLATILE, "latest_through")),
    }


def delta_commits(spark, table) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, str(table)).history().count()


def test_batches_per_pass_change_no_row_only_the_commits(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=120, keys=3, seed=5)
    runs = {}
    for name, per_pass, on_driver in (
        ("one_per_pass", 20, 1_000_000), ("three_per_pass", 60, 1_000_000), ("on_executors", 60, 0),
    ):
        config = write_pipeline(
            tmp_path / f"{name}.yaml", archive, tmp_path / name,
            batch={"max_records": 20, "pass_max_records": per_pass, "driver_pass_max_records": on_driver},
        )
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = tables(spark, tmp_path / name)
    assert runs["three_per_pass"] == runs["one_per_pass"]
    assert runs["on_executors"] == runs["one_per_pass"]
    log = runs["one_per_pass"]["replay_log"]
    assert len(log) == 7 and len({row[0] for row in log}) == 7  # 6 batches and the finalize
    results = spark.read.format("delta").load(str(tmp_path / "three_per_pass" / "window_results"))
    assert results.select("batch_id").distinct().count() >= 5  # rows keep their own batch's id
    # One state commit per pass: 6 passes (the finalize batch has no records and joins the last
    # pass) against 2 (batches 0-2, then 3-5 and the finalize).
    assert delta_commits(spark, tmp_path / "one_per_pass" / "operator_state") == 6
    assert delta_commits(spark, tmp_path / "three_per_pass" / "operator_state") == 2
    assert delta_commits(spark, tmp_path / "three_per_pass" / "replay_log") == 2

    # Reprocessing a range whose first record is in batch 4 (records 80-99, one a second) rewinds
    # to the first batch of its pass, 3.
    config = tmp_path / "three_per_pass.yaml"
    start, end = 1_700_000_080_000, 1_700_000_100_000
    done = cli("reprocess", str(config), "--from", str(start), "--to", str(end), "--reason", "pass test")
    assert done.returncode == 0, done.stderr[-3000:]
    assert tables(spark, tmp_path / "three_per_pass") == runs["one_per_pass"]
    history = spark.read.format("delta").load(str(tmp_path / "three_per_pass" / "reprocess_history"))
    assert history.first()["from_batch"] == 3
