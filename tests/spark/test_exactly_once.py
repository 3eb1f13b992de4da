"""Exactly-once: kill a real replay process (SIGKILL) at many points, resume, and compare every
table with an uninterrupted run; reprocess a middle range; refuse concurrent runs."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest
from replay_helpers import cli, run_cli, snapshot, write_archive, write_pipeline

# Slow tier (`make test-slow`): each case runs whole replays; see the notes in BENCHMARKS.md
# and the issue notes for what was verified on this machine.
pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """One uninterrupted replay of the archive, finalized."""
    root = tmp_path_factory.mktemp("reference")
    archive = write_archive(root / "archive")
    config = write_pipeline(root / "pipeline.yaml", archive, root / "lakehouse")
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    return archive, snapshot(spark, root / "lakehouse")


def resume_after_crash(spark, tmp_path, archive, crash_at: str) -> dict:
    config = write_pipeline(tmp_path / "pipeline.yaml", archive, tmp_path / "lakehouse")
    crashed = run_cli("run", str(config), "--finalize", env={"REPLAY_CRASH_AT": crash_at})
    assert crashed.returncode == -signal.SIGKILL, f"never reached {crash_at}: {crashed.stderr[-2000:]}"
    resumed = cli("run", str(config), "--finalize")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return snapshot(spark, tmp_path / "lakehouse")


# Points inside every phase: the ingest, each table write of a batch (results, window_latest
# MERGE, late events, state), just before and just after the commit-log row, and the finalize.
# Both sides of the commit point (a delta-rs append of the pass's replay_log rows) among the first.
FAST_KILL_POINTS = ["batch:2:state", "batch:3:before-commit", "batch:5:committed"]
SLOW_KILL_POINTS = [
    "ingest:staged", "ingest:quarantined", "batch:0:state", "batch:1:results", "batch:2:latest",
    "batch:3:late", "batch:7:results", "batch:8:latest", "batch:8:state",
]


@pytest.mark.parametrize("crash_at", FAST_KILL_POINTS)
def test_kill_and_resume_equals_uninterrupted_run(spark, tmp_path, reference, crash_at):
    archive, expected = reference
    assert resume_after_crash(spark, tmp_path, archive, crash_at) == expected


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", SLOW_KILL_POINTS)
def test_kill_at_many_points(spark, tmp_path, reference, crash_at):
    archive, expected = reference
    assert resume_after_crash(spark, tmp_path, archive, crash_at) == expected


@pytest.mark.slow
@pytest.mark.parametrize("delay", [9.0, 17.0, 26.0])
def test_kill_at_arbitrary_moments(spark, tmp_path, reference, delay):
    """SIGKILL from outside at a wall-clock moment, wherever the replay happens to be."""
    archive, expected = reference
    config = write_pipeline(tmp_path / "pipeline.yaml", archive, tmp_path / "lakehouse")
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.interfaces.cli", "run", str(config), "--finalize"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = cli("run", str(config), "--finalize")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert snapshot(spark, tmp_path / "lakehouse") == expected


def test_reprocess_middle_range_equals_clean_replay_and_rerun_is_noop(spark, tmp_path, reference):
    archive, expected = reference
    # The reference's own archive (reprocessing only reads it): late_events name their files.
    config = write_pipeline(tmp_path / "pipeline.yaml", archive, tmp_path / "lakehouse")
    assert cli("run", str(config), "--finalize").returncode == 0
    start, end = 1_700_000_080_000, 1_700_000_160_000
    done = cli("reprocess", str(config), "--from", str(start), "--to", str(end), "--reason", "test")
    assert done.returncode == 0, done.stderr[-3000:]
    after = snapshot(spark, tmp_path / "lakehouse")
    assert after == expected
    history = spark.read.format("delta").load(str(tmp_path / "lakehouse" / "reprocess_history"))
    assert history.first()["reason"] == "test" and history.first()["from_batch"] > 0
    again = cli("run", str(config), "--finalize")
    assert again.returncode == 0 and "0 batches" in again.stdout
    assert snapshot(spark, tmp_path / "lakehouse") == expected


def test_second_replay_of_same_pipeline_is_refused(tmp_path):
    from spark_jobs.config import load_config
    from spark_jobs.exceptions import ConcurrentRunError
    from spark_jobs.execution.locks import pipeline_lock

    archive = write_archive(tmp_path / "archive", records=10)
    config = load_config(write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "lakehouse"))
    with pipeline_lock(config):
        done = run_cli("run", str(tmp_path / "p.yaml"))
        assert done.returncode == 1
        assert "already being replayed" in done.stderr
        with pytest.raises(ConcurrentRunError):
            with pipeline_lock(config):
                pass


def test_changed_or_removed_archive_file_stops_the_run_and_new_files_are_picked_up(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=40, files=2)
    config = write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "lakehouse")
    assert cli("run", str(config)).returncode == 0
    extra = write_archive(tmp_path / "more", records=4, files=1, seed=9) / "part-000.jsonl"
    shutil.copy(extra, archive / "part-900.jsonl")
    picked = cli("run", str(config))
    assert picked.returncode == 0 and "ingested 1 files" in picked.stderr
    with open(archive / "part-000.jsonl", "a") as handle:
        handle.write('{"event_id": "sneaky"}\n')
    changed = cli("run", str(config))
    assert changed.returncode == 1
    assert "changed:" in changed.stderr and "part-000.jsonl" in changed.stderr
    (archive / "part-000.jsonl").unlink()
    removed = cli("run", str(config))
    assert removed.returncode == 1 and "removed:" in removed.stderr
