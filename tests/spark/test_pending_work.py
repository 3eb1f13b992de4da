"""pending_work: what an Airflow interval's check decides from metadata, without Spark, agrees with
what a run up to the same bound then does (real Delta tables written by real runs)."""

from __future__ import annotations

import os
import shutil

import pytest
from replay_helpers import BASE_TS, write_archive, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.execution.operations import run_pipeline
from spark_jobs.execution.pending_work import pending_work
from spark_jobs.execution.state.journal import Operation, clear_operation, write_operation

pytestmark = pytest.mark.spark

#: Batches of 40 records one second apart: batch 1 ends at clock BASE+79 s, batch 2 at +119 s.
UNTIL = BASE_TS + 100_000


def run(spark, config, until=None, finalize=False) -> list[int]:
    summary = run_pipeline(config, spark=spark, until_ms=until, finalize=finalize)
    return [batch.batch_id for batch in summary.batches]


def test_the_check_agrees_with_the_run(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=200)
    config = load_config(write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "lakehouse"))

    first = pending_work(config, UNTIL)
    assert first.work and "nothing ingested" in first.reason
    assert run(spark, config, UNTIL) == [0, 1]

    idle = pending_work(config, UNTIL)
    assert not idle.work and "batch 2 waits for a later interval" in idle.reason, idle
    assert run(spark, config, UNTIL) == []  # the run agrees: nothing was due
    assert not pending_work(config, UNTIL, finalize=True).work  # a batch is left: no finalize yet
    due = pending_work(config, UNTIL + 20_000)
    assert due.work and "batch 2 is due" in due.reason

    # A new archive file is work (the ingest); so is a changed or removed one (the run refuses).
    extra = archive / "part-009.jsonl"
    shutil.copy(archive / "part-000.jsonl", extra)
    assert "new archive file" in pending_work(config, UNTIL).reason
    extra.unlink()
    assert not pending_work(config, UNTIL).work
    ingested = archive / "part-001.jsonl"
    stat = ingested.stat()
    os.utime(ingested, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    changed = pending_work(config, UNTIL)
    assert changed.work and "changed or is gone" in changed.reason and "part-001" in changed.reason
    os.utime(ingested, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    # An unfinished operation is work: the next run finishes it.
    write_operation(config, Operation(kind="reset", id="t", phase="drop"))
    assert "unfinished: a reset" in pending_work(config, UNTIL).reason
    clear_operation(config)

    # Tables ahead of the commit log (a run killed between its writes and its log row): work.
    results = config.table_path("window_results")
    spark.read.format("delta").load(results).limit(1).write.format("delta").mode("append").save(results)
    ahead = pending_work(config, UNTIL)
    assert ahead.work and "tables ahead of the commit log (window_results)" in ahead.reason
    assert run(spark, config, UNTIL) == []  # which the run restores
    assert not pending_work(config, UNTIL).work

    # The end of input: work until finalized, then nothing, whatever the bound.
    assert pending_work(config, None, finalize=True).work
    assert run(spark, config, None, finalize=True)[-1] == 5  # batches 2-4, then the finalize batch
    done = pending_work(config, None, finalize=True)
    assert not done.work and done.reason.endswith("finalized")
