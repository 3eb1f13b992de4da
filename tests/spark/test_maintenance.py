"""Table maintenance (``maintenance:``): OPTIMIZE and VACUUM on their schedule, inside the pass, so
that each commit row records the versions maintenance made; no row changes."""

from __future__ import annotations

import pytest
from replay_helpers import REPLAY_LOG_VOLATILE, cli, snapshot, table_rows, write_archive, write_pipeline

from spark_jobs.replay import MAINTAINED_TABLES

pytestmark = pytest.mark.spark


def operations(spark, table) -> list[str]:
    from delta.tables import DeltaTable

    return [row.operation for row in DeltaTable.forPath(spark, str(table)).history().collect()]


def active_files(spark, table) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()["numFiles"]


def test_optimize_and_vacuum_on_schedule_change_no_row(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=120, keys=3, seed=9)
    runs = {}
    for name, maintenance in (
        ("plain", {"optimize_every": 0}),
        ("maintained", {"optimize_every": 2, "vacuum_every": 3, "vacuum_retention_hours": 168}),
    ):
        config = write_pipeline(
            tmp_path / f"{name}.yaml", archive, tmp_path / name,
            batch={"max_records": 20, "pass_max_records": 20}, maintenance=maintenance,
        )
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = snapshot(spark, tmp_path / name)
    assert runs["maintained"] == runs["plain"]

    plain, maintained = tmp_path / "plain", tmp_path / "maintained"
    for table in MAINTAINED_TABLES:
        assert "OPTIMIZE" not in operations(spark, plain / table), table
        done = operations(spark, maintained / table)
        assert "OPTIMIZE" in done and "VACUUM END" in done, (table, done)
    # Six one-batch passes and the finalize: compacted after batches 1, 3 and 5.
    assert active_files(spark, maintained / "window_results") < active_files(spark, plain / "window_results")

    # The last batch's commit row records the versions its pass's maintenance made: a recovery
    # restores exactly them.
    log = spark.read.format("delta").load(str(maintained / "replay_log")).orderBy("batch_id").collect()
    versions = log[-1]["table_versions"]
    from delta.tables import DeltaTable

    for table in ("window_results", "operator_state", "window_latest"):
        latest = DeltaTable.forPath(spark, str(maintained / table)).history(1).first()["version"]
        assert versions[table] == latest, table
    assert table_rows(spark, maintained, "replay_log", REPLAY_LOG_VOLATILE) == runs["plain"]["replay_log"]
