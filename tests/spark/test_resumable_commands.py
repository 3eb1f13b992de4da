"""Resumable commands: a reprocess or a reset killed (SIGKILL, a real process) at any named step or
moment is finished by the next command on the pipeline, and the tables end identical, row for
row, to an uninterrupted one; ``replay status`` reads every state a kill can leave.

The default tier kills at the window a kill test found (after the log's rewind, before the
tables') and once mid-reset (tests/airflow/test_backfill_e2e.py kills a reprocess task, then
retries it); the slow tier at every named step, at wall-clock moments, and inside maintenance.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from replay_helpers import cli, run_cli, snapshot, table_rows, write_archive, write_pipeline

from spark_jobs.execution.state.delta import ALL_TABLES

pytestmark = pytest.mark.spark

#: The middle of the archive's event time (write_archive: one record a second from BASE_TS), in
#: the pass of batches 2-3: the rewind goes back to batch 2 of 8 (plus the finalize batch).
RANGE = ["--from", "1700000100000", "--to", "1700000140000"]
REPROCESS = ["reprocess", *RANGE, "--reason", "partner upload"]


@pytest.fixture(scope="module")
def reprocessed(spark, tmp_path_factory):
    """One finalized replay (kept as it was, for every case to start from), then an uninterrupted
    reprocess of the range: the tables every interrupted reprocess must end with."""
    root = tmp_path_factory.mktemp("reprocess-reference")
    archive = write_archive(root / "archive")
    config = write_pipeline(root / "pipeline.yaml", archive, root / "lakehouse")
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copytree(root / "lakehouse", root / "finalized")
    finalized = snapshot(spark, root / "finalized")
    again = cli(REPROCESS[0], str(config), *REPROCESS[1:])
    assert again.returncode == 0, again.stderr[-3000:]
    expected = snapshot(spark, root / "lakehouse")
    assert history(spark, root / "lakehouse") == [("partner upload", 2, 8)]
    # Same archive, same code: the reprocessed tables are the finalized ones.
    assert expected == finalized
    return archive, root / "finalized", expected


def history(spark, lakehouse: Path) -> list[tuple]:
    rows = table_rows(spark, lakehouse, "reprocess_history")
    frame = spark.read.format("delta").load(str(lakehouse / "reprocess_history"))
    index = {name: frame.columns.index(name) for name in ("reason", "from_batch", "to_batch")}
    return [(row[index["reason"]], row[index["from_batch"]], row[index["to_batch"]]) for row in rows]


def finalized_copy(tmp_path: Path, archive: Path, finalized: Path) -> Path:
    shutil.copytree(finalized, tmp_path / "lakehouse")
    return write_pipeline(tmp_path / "pipeline.yaml", archive, tmp_path / "lakehouse")


def killed(config: Path, command: list[str], crash_at: str) -> None:
    done = run_cli(command[0], str(config), *command[1:], env={"REPLAY_CRASH_AT": crash_at})
    assert done.returncode == -signal.SIGKILL, f"never reached {crash_at}: {done.stderr[-2000:]}"


def status_reads(config: Path, *expected: str) -> str:
    done = cli("status", str(config))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    for words in expected:
        assert words in done.stdout, done.stdout
    return done.stdout


def finish_and_compare(spark, tmp_path: Path, config: Path, expected: dict, next_command: list[str]) -> None:
    finished = cli(next_command[0], str(config), *next_command[1:])
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert snapshot(spark, tmp_path / "lakehouse") == expected
    assert history(spark, tmp_path / "lakehouse") == [("partner upload", 2, 8)]
    assert not (tmp_path / "lakehouse" / "_replay_operation.json").exists()
    status = status_reads(config, "finalized")
    assert "UNFINISHED" not in status and "AHEAD" not in status
    # Finished: the same reprocess again is a no-op, and so is a run.
    again = cli(REPROCESS[0], str(config), *REPROCESS[1:])
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout
    assert cli("run", str(config), "--finalize").stdout.startswith("pipeline kill_test: 0 batches")
    assert snapshot(spark, tmp_path / "lakehouse") == expected


@pytest.mark.parametrize("next_command", [
    pytest.param(REPROCESS, id="same-reprocess", marks=pytest.mark.slow),  # default tier: the Airflow retry
    pytest.param(["run"], id="plain-run"),
])
def test_reprocess_killed_after_the_rewind_is_finished_by_the_next_command(
    spark, tmp_path, reprocessed, next_command
):
    """The issue's window: the log rewound, the tables not yet. A plain ``run`` (no --finalize)
    finishes it too, finalizing as the pipeline was."""
    archive, finalized, expected = reprocessed
    config = finalized_copy(tmp_path, archive, finalized)
    killed(config, REPROCESS, "reprocess:log-rewound")
    status_reads(config, "UNFINISHED a reprocess", "phase rewind", "AHEAD")
    finish_and_compare(spark, tmp_path, config, expected, next_command)


def test_reset_killed_half_way_is_finished_by_the_next_run(spark, tmp_path, reprocessed):
    archive, finalized, expected = reprocessed
    config = finalized_copy(tmp_path, archive, finalized)
    killed(config, ["reset", "--yes"], "reset:late_events")
    status_reads(config, "UNFINISHED a reset")
    # The next run deletes the rest, then replays from the beginning.
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finishing a reset" in done.stderr
    assert snapshot(spark, tmp_path / "lakehouse") == expected
    assert not (tmp_path / "lakehouse" / "reprocess_history").exists()


# Every named step of a reprocess: the intent, the log rewound, the phase recorded, each table's
# restore (recovery in the replay forward), the forward passes' writes and commits, the replay
# done, the history written.
REPROCESS_KILL_POINTS = [
    "reprocess:intent", "reprocess:forward", "recover:window_results", "recover:window_latest",
    "recover:late_events", "recover:operator_state", "batch:2:results", "batch:3:committed",
    "batch:6:state", "batch:8:before-commit", "reprocess:replayed", "reprocess:recorded",
]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", REPROCESS_KILL_POINTS)
def test_reprocess_killed_at_every_step(spark, tmp_path, reprocessed, crash_at):
    archive, finalized, expected = reprocessed
    config = finalized_copy(tmp_path, archive, finalized)
    killed(config, REPROCESS, crash_at)
    status_reads(config, "UNFINISHED a reprocess")
    finish_and_compare(spark, tmp_path, config, expected, REPROCESS)


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", ["reset:intent", "reset:window_results", "reset:replay_log",
                                      "reset:staging"])
def test_reset_killed_at_every_step(spark, tmp_path, reprocessed, crash_at):
    archive, finalized, expected = reprocessed
    config = finalized_copy(tmp_path, archive, finalized)
    killed(config, ["reset", "--yes"], crash_at)
    status_reads(config, "UNFINISHED a reset")
    again = cli("reset", str(config), "--yes")
    assert again.returncode == 0, again.stderr[-3000:]
    assert not [t for t in ALL_TABLES if (tmp_path / "lakehouse" / t).exists()]
    status_reads(config, "none committed yet")
    assert cli("run", str(config), "--finalize").returncode == 0
    assert snapshot(spark, tmp_path / "lakehouse") == expected


@pytest.mark.slow
@pytest.mark.parametrize("delay", [7.0, 10.0, 13.0, 16.0])
def test_reprocess_killed_at_arbitrary_moments(spark, tmp_path, reprocessed, delay):
    """SIGKILL to the whole process group (the driver and its JVM) at a wall-clock moment."""
    archive, finalized, expected = reprocessed
    config = finalized_copy(tmp_path, archive, finalized)
    environment = {**os.environ, "SPARK_MASTER": os.environ.get("SPARK_MASTER", "local[2]")}
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.interfaces.cli", REPROCESS[0], str(config), *REPROCESS[1:]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment, start_new_session=True,
    )
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    status_reads(config)
    finish_and_compare(spark, tmp_path, config, expected, REPROCESS)


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", [
    "maintenance:window_results:optimized", "maintenance:late_events:vacuumed",
    "maintenance:replay_log:vacuumed",
])
def test_run_killed_inside_maintenance_resumes_to_the_same_tables(spark, tmp_path, crash_at):
    """OPTIMIZE and VACUUM inside a pass, killed between two tables' maintenance: the pass is not
    committed, its tables are restored and it runs again."""
    archive = write_archive(tmp_path / "archive", records=160)
    maintenance = {"optimize_every": 2, "vacuum_every": 2, "vacuum_retention_hours": 168}
    batch = {"max_records": 20, "pass_max_records": 20}
    tables = {}
    for name, env in (("clean", None), ("killed", {"REPLAY_CRASH_AT": crash_at})):
        config = write_pipeline(tmp_path / f"{name}.yaml", archive, tmp_path / name, batch=batch,
                                maintenance=maintenance)
        if env:
            done = run_cli("run", str(config), "--finalize", env=env)
            assert done.returncode == -signal.SIGKILL, f"never reached {crash_at}: {done.stderr[-2000:]}"
            status_reads(config, "AHEAD")
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        tables[name] = snapshot(spark, tmp_path / name)
    assert tables["killed"] == tables["clean"]


@pytest.mark.slow
def test_reprocess_of_a_pipeline_replayed_past_its_finalize_is_resumed_without_a_second_finalize(
    spark, tmp_path
):
    """Batches after the finalize batch (a file that arrived later: replayed at +infinity, all
    late): the replay forward finalizes at the same batch, then replays them; killed after their
    commit, the resumed reprocess must not finalize again."""
    later = write_archive(tmp_path / "later", records=30, seed=4, files=1) / "part-000.jsonl"
    for name, crash_at in (("clean", None), ("killed", "batch:9:committed")):
        archive = write_archive(tmp_path / name / "archive")
        config = write_pipeline(tmp_path / f"{name}.yaml", archive, tmp_path / name / "lakehouse")
        assert cli("run", str(config), "--finalize").returncode == 0
        shutil.copy(later, archive / "part-900.jsonl")
        assert cli("run", str(config)).returncode == 0  # batch 9, after the finalize batch 8
        before = snapshot(spark, tmp_path / name / "lakehouse")
        if crash_at:
            killed(config, REPROCESS, crash_at)
        done = cli(REPROCESS[0], str(config), *REPROCESS[1:])
        assert done.returncode == 0, done.stderr[-3000:]
        assert snapshot(spark, tmp_path / name / "lakehouse") == before
        log = spark.read.format("delta").load(str(tmp_path / name / "lakehouse" / "replay_log"))
        rows = [(row["batch_id"], row["finalize"]) for row in log.orderBy("batch_id").collect()]
        assert rows[-3:] == [(7, False), (8, True), (9, False)], rows
    # (Each against its own tables before the reprocess: late events name their archive's path.)
