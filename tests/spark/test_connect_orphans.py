"""A Spark Connect client killed while the server runs its Delta write: the next holder of the
pipeline lock interrupts the dead session's operations and waits for them, so no write of the dead
run can land after the next run's recovery (``execution.connect_orphans``).

Runs in ``make test-connect`` (and its CI smoke), where the run's sessions are Connect clients of
one server; skipped in-process, where a killed driver's JVM dies with it (or is waited for).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from replay_helpers import write_archive, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.execution.locks import LOCK_NAME, pipeline_lock
from spark_jobs.execution.spark_session import is_connect

pytestmark = pytest.mark.spark

#: The dead client: takes the pipeline's lock, then has the server write a Delta table slowly
#: (eight rows of a second each on the server's cores), and is killed mid-write.
DEAD_CLIENT = """
import sys, time
from pyspark.sql import SparkSession, functions as F
from spark_jobs.config import load_config
from spark_jobs.execution.locks import pipeline_lock

spark = SparkSession.builder.remote(sys.argv[3]).create()
slow = F.udf(lambda i: (time.sleep(1), i)[1], "long")
with pipeline_lock(load_config(sys.argv[1]), spark):
    print("locked", flush=True)
    spark.range(0, 8, 1, 8).select(slow("id").alias("id")).write.format("delta").save(sys.argv[2])
"""


def commits(table: Path) -> list[str]:
    """The table's commits (Delta makes ``_delta_log`` when a write starts, commits at its end)."""
    return sorted(p.name for p in (table / "_delta_log").glob("*.json"))


def test_a_killed_clients_write_is_stopped_before_the_next_run_goes_on(spark, tmp_path):
    if not is_connect(spark):
        pytest.skip("over Spark Connect only (make test-connect)")
    config_path = write_pipeline(tmp_path / "p.yaml", write_archive(tmp_path / "archive", records=10),
                                 tmp_path / "out")
    config = load_config(config_path)
    table = tmp_path / "out" / "orphan_write"
    client = subprocess.Popen(
        [sys.executable, "-c", DEAD_CLIENT, str(config_path), str(table), os.environ["SPARK_REMOTE"]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "locked", client.stderr.read()[-3000:]
        holder = (tmp_path / "out" / LOCK_NAME).read_text()
        assert " connect " in holder and " session " in holder and "token" not in holder, holder
        time.sleep(3)  # the write is running on the server
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()

    started = time.monotonic()
    with pipeline_lock(config, spark):
        waited = time.monotonic() - started
        # Interrupted and stopped: nothing of the dead run's write lands, now or later (without
        # the wait it commits while this run holds the lock: seen 10-60 s after the kill here).
        assert commits(table) == []
        time.sleep(40)
        assert commits(table) == [], "the dead client's write landed after the lock"
    assert waited < 60, waited


#: A client that dies right after a command returned (as a reprocess killed just after its
#: ``DELETE`` of ``replay_log``): the server keeps that finished command as TERMINATING until its
#: detached timeout (five minutes), which is not running.
KILLED_AFTER_COMMAND = """
import os, signal, sys
from pyspark.sql import SparkSession
from spark_jobs.config import load_config
from spark_jobs.execution.locks import pipeline_lock

spark = SparkSession.builder.remote(sys.argv[3]).create()
with pipeline_lock(load_config(sys.argv[1]), spark):
    spark.sql(f"DELETE FROM delta.`{sys.argv[2]}` WHERE id >= 4")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_command_finished_before_the_kill_does_not_hold_up_the_next_run(spark, tmp_path):
    if not is_connect(spark):
        pytest.skip("over Spark Connect only (make test-connect)")
    config_path = write_pipeline(tmp_path / "p.yaml", write_archive(tmp_path / "archive", records=10),
                                 tmp_path / "out")
    table = tmp_path / "out" / "finished_command"
    spark.range(0, 8).write.format("delta").save(str(table))
    client = subprocess.run([sys.executable, "-c", KILLED_AFTER_COMMAND, str(config_path), str(table),
                             os.environ["SPARK_REMOTE"]], capture_output=True, text=True, timeout=300)
    assert client.returncode == -signal.SIGKILL, client.stderr[-3000:]
    started = time.monotonic()
    with pipeline_lock(load_config(config_path), spark):  # waited 120 s, then refused, before
        waited = time.monotonic() - started
    assert waited < 30, waited
    assert sorted(r.id for r in spark.read.format("delta").load(str(table)).collect()) == [0, 1, 2, 3]
