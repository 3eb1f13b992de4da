"""Table maintenance (``maintenance:``): OPTIMIZE and VACUUM on their schedule, inside the pass, so
that each commit row records the versions maintenance made; no row changes."""

from __future__ import annotations

import pytest
from replay_helpers import (
    INACTIVITY_ALERT,
    REPLAY_LOG_VOLATILE,
    cli,
    delta_history,
    snapshot,
    table_rows,
    write_archive,
    write_pipeline,
)
from test_join_pipelines import INTERVAL, NOT_WINDOWED, archives, right_source

from spark_jobs.execution.maintenance import MAINTAINED_TABLES

pytestmark = pytest.mark.spark


def operations(spark, table) -> list[str]:
    return [row.operation for row in delta_history(spark, table)]


def active_files(spark, table) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()["numFiles"]


def state_write_modes(spark, lakehouse) -> dict[int, str]:
    """How each pass wrote operator_state, by the pass's last batch."""
    history = delta_history(spark, lakehouse / "operator_state")
    return {
        int(row.userMetadata.removeprefix("batch=")): row.operationParameters["mode"]
        for row in history if row.operation == "WRITE" and row.userMetadata
    }


# Over Connect the same OPTIMIZE and VACUUM run in test_maintenance_covers_every_table_a_pass_appends_to.
@pytest.mark.in_process_only
def test_optimize_and_vacuum_on_schedule_change_no_row(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=240, keys=3, seed=9)
    runs = {}
    for name, maintenance in (
        ("plain", {"optimize_every": 0}),
        ("maintained", {"optimize_every": 4, "vacuum_every": 3, "vacuum_retention_hours": 168}),
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
    written = [table for table in MAINTAINED_TABLES if (plain / table / "_delta_log").exists()]
    assert set(written) == {"window_results", "window_latest", "late_events", "operator_state", "replay_log"}
    for table in written:
        assert "OPTIMIZE" not in operations(spark, plain / table), table
        done = operations(spark, maintained / table)
        assert "VACUUM END" in done, (table, done)
        # operator_state is compacted by the maintaining pass overwriting it with its snapshot.
        assert ("OPTIMIZE" in done) == (table != "operator_state"), (table, done)
    assert state_write_modes(spark, maintained)[3] == "Overwrite"
    assert state_write_modes(spark, plain)[3] == "Append"
    # Twelve one-batch passes and the finalize: compacted after batches 3, 7 and 11 (window_latest,
    # MERGEd every third batch beside the passes after, has files to compact from batch 7 on).
    assert active_files(spark, maintained / "window_results") < active_files(spark, plain / "window_results")

    # The last batch's commit row records the versions its pass's maintenance made: a recovery
    # restores exactly them.
    log = spark.read.format("delta").load(str(maintained / "replay_log")).orderBy("batch_id").collect()
    versions = log[-1]["table_versions"]
    for table in ("window_results", "operator_state", "window_latest"):
        latest = delta_history(spark, maintained / table, limit=1)[0]["version"]
        assert versions[table] == latest, table
    assert table_rows(spark, maintained, "replay_log", REPLAY_LOG_VOLATILE) == runs["plain"]["replay_log"]



@pytest.mark.parametrize("kind", ["process", "join"])
def test_maintenance_covers_every_table_a_pass_appends_to(spark, tmp_path, kind):
    """Process functions append to process_results and side_outputs, joins to join_results: those
    are compacted and cleaned on the same schedule, with no row changed."""
    left, right = archives(tmp_path)
    if kind == "process":
        settings = {"process": INACTIVITY_ALERT, **NOT_WINDOWED, "aggregates": None}
        outputs = ("process_results", "side_outputs")
    else:
        settings = {"join": {**INTERVAL, "right": right_source(right)}, **NOT_WINDOWED, "aggregates": None}
        outputs = ("join_results",)
    for name, maintenance in (
        ("plain", {"optimize_every": 0}),
        ("maintained", {"optimize_every": 2, "vacuum_every": 3, "vacuum_retention_hours": 168}),
    ):
        config = write_pipeline(
            tmp_path / f"{name}.yaml", left, tmp_path / name, name=kind,
            batch={"max_records": 40, "pass_max_records": 40}, maintenance=maintenance, **settings,
        )
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
    plain, maintained = tmp_path / "plain", tmp_path / "maintained"
    for table in outputs:
        assert table_rows(spark, maintained, table) == table_rows(spark, plain, table), table
        assert table_rows(spark, plain, table), table
        done = operations(spark, maintained / table)
        assert "OPTIMIZE" in done and "VACUUM END" in done, (table, done)
        assert active_files(spark, maintained / table) < active_files(spark, plain / table), table
