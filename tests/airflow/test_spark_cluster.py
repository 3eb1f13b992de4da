"""Slow tier: a real Spark standalone cluster (master + worker from the pip-installed Spark, on
127.0.0.1 only; ``scripts/services/spark-cluster.sh`` through the ``spark_cluster`` fixture) runs
the same pipeline twice, via `replay run --master spark://...` and via the backfill DAG in submit
mode (SparkSubmitOperator -> spark_jobs/execution/jobs/replay_job.py through the spark_default
connection); both must equal a local[2] run row for row. The cluster's processes are always
stopped."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_helpers import BASE_MS, load_dag, task_states, write_events, write_pipeline, xcom

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.spark, pytest.mark.airflow]

TABLES = ("window_results", "late_events", "replay_log")


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    write_events(root / "part-000.jsonl", BASE_MS, 100, step_ms=30_000)
    write_events(root / "part-001.jsonl", BASE_MS + 3_600_000, 100, step_ms=30_000, first_id=100)
    return root


def replay_cli(config: Path, master: str) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "spark_jobs.interfaces.cli", "run", str(config),
                           "--finalize", "--master", master],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


def tables(spark, output: Path) -> dict[str, list[tuple] | None]:
    found = {}
    for table in TABLES:
        if not (output / table / "_delta_log").exists():  # e.g. no late events at all
            found[table] = None
            continue
        frame = spark.read.format("delta").load(str(output / table))
        # Not results: wall-clock time, and run-boundary bookkeeping (the end of every run merges
        # window_latest, so its versions and `latest_through` depend on how runs were cut).
        columns = [c for c in frame.columns if c not in ("committed_at", "table_versions", "latest_through")]
        found[table] = sorted(tuple(str(v) for v in r) for r in frame.select(*columns).collect())
    return found


@pytest.fixture(scope="module")
def local_tables(spark, archive, tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    config = write_pipeline(root / "p.yaml", "cluster_check", archive, root / "out")
    replay_cli(config, "local[2]")
    return tables(spark, root / "out")


def test_replay_run_on_the_cluster_equals_local(spark, spark_cluster, archive, local_tables, tmp_path):
    config = write_pipeline(tmp_path / "p.yaml", "cluster_check", archive, tmp_path / "out")
    replay_cli(config, spark_cluster)
    assert local_tables["window_results"]
    assert tables(spark, tmp_path / "out") == local_tables


def test_backfill_dag_in_submit_mode_on_the_cluster(spark, spark_cluster, archive, local_tables, tmp_path,
                                                    monkeypatch, airflow_db):
    """Both hourly intervals through SparkSubmitOperator; the last one finalizes."""
    pipelines = tmp_path / "pipelines"
    write_pipeline(pipelines / "cluster_check.yaml", "cluster_check", archive, tmp_path / "out")
    host, port = spark_cluster.removeprefix("spark://").split(":")
    monkeypatch.setenv("REPLAY_PIPELINES_DIR", str(pipelines))
    monkeypatch.setenv("REPLAY_SPARK_MODE", "submit")
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", f"spark://{host}:{port}")
    hour = dt.timedelta(hours=1)
    first = dt.datetime.fromtimestamp(BASE_MS / 1000, dt.UTC)
    for end, conf in ((first + hour, None), (first + 2 * hour, {"finalize": True})):
        run = load_dag("replay__cluster_check").test(logical_date=end, run_conf=conf)  # interval before end
        states = task_states(run)
        assert str(run.state) == "success", states
        assert states["replay"] == "success"
        assert xcom(run, "replay")["mode"] == "submit"
    assert tables(spark, tmp_path / "out") == local_tables
