"""Production-topology tier, Airflow: ``airflow standalone`` (scheduler, DAG processor, API server,
triggerer) on PostgreSQL started by ``scripts/services/postgres.sh``, with the demo pipeline's
archive and tables on the S3 server of this tier, driven by the README's CLI commands: ``replay
pools``, ``dags unpause`` (the scheduler runs the demo's six intervals), ``backfill create``,
``dags trigger replay_reprocess`` with good and bad conf; the quality DAG runs on the asset
events. The tables on the bucket equal a local ``replay run --finalize`` row for row. Prints the
time per DAG run (docs/airflow.md). ``make test-prod``."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from airflow_standalone import AirflowCli, airflow_env, free_port, run_seconds, serving
from prod_services import BUCKET
from test_object_storage import tables_local, tables_s3

pytestmark = [pytest.mark.slow, pytest.mark.prod, pytest.mark.airflow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVICES = ROOT / "scripts" / "services"
DAG_ID = "replay__clicks_per_minute"
INTERVALS = 6
PREFIX = "lakehouse/airflow"


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    root = tmp_path_factory.mktemp("postgres")
    driver = subprocess.run([str(SERVICES / "postgres.sh"), "driver"], capture_output=True, text=True,
                            timeout=300)
    assert driver.returncode == 0, driver.stderr
    try:
        started = subprocess.run([str(SERVICES / "postgres.sh"), "start", str(root), str(free_port())],
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        yield {"url": started.stdout.strip().splitlines()[-1], "pythonpath": driver.stdout.strip()}
    finally:
        subprocess.run([str(SERVICES / "postgres.sh"), "stop", str(root)], timeout=120)


@pytest.fixture(scope="module")
def world(store, postgres, spark_cluster, tmp_path_factory):
    import pyarrow.fs as pafs

    home = tmp_path_factory.mktemp("airflow-home")
    base = tmp_path_factory.mktemp("airflow-base")
    pipelines = base / "pipelines"
    pipelines.mkdir()
    port = free_port()
    env = airflow_env(
        home, base, pipelines, port,
        **store["keys"],  # S3A's credential chain reads them from the environment of every task
        PYTHONPATH=os.pathsep.join(filter(None, [postgres["pythonpath"], os.environ.get("PYTHONPATH")])),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgres["url"],
        # Airflow derives asyncpg for the async engine; psycopg 3 is async too.
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC=postgres["url"].replace("+psycopg:", "+psycopg_async:"),
        REPLAY_S3A_ENDPOINT=store["endpoint"],
        # As docker-compose.yml: the replay is spark-submitted to the tier's cluster through the
        # spark_default connection; the quality tasks' sessions use the cluster too.
        SPARK_MASTER=spark_cluster,
        SPARK_LOCAL_IP="127.0.0.1",  # drivers bind and advertise 127.0.0.1, as the cluster does
        REPLAY_SPARK_MODE="submit",
        AIRFLOW_CONN_SPARK_DEFAULT=spark_cluster,
    )

    def run(*args: str, timeout: float = 600, extra: dict[str, str] | None = None) -> str:
        done = subprocess.run(list(args), capture_output=True, text=True, env={**env, **(extra or {})},
                              cwd=base, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    run("replay", "generate", "data/archive/clicks")
    pafs.copy_files(str(base / "data" / "archive" / "clicks"), f"{BUCKET}/archive/airflow",
                    source_filesystem=pafs.LocalFileSystem(), destination_filesystem=store["fs"])
    demo = yaml.safe_load((ROOT / "include" / "pipelines" / "clicks_per_minute.yaml").read_text())
    demo["source"]["path"] = f"s3a://{BUCKET}/archive/airflow"
    demo["output"]["path"] = f"s3a://{BUCKET}/{PREFIX}"
    (pipelines / "clicks_per_minute.yaml").write_text(yaml.safe_dump(demo))
    with serving(run, env, home, base, port):
        yield {"run": run, "home": home, "base": base, "env": env, "store": store,
               "airflow": AirflowCli(run, home)}


def test_scheduler_on_postgres_with_tables_on_the_bucket(world):
    run, store, airflow = world["run"], world["store"], world["airflow"]
    # 1. Unpausing: the scheduler runs the demo's six intervals; the tables go to the bucket.
    run("airflow", "dags", "unpause", DAG_ID)
    runs = airflow.wait(DAG_ID, INTERVALS, timeout=1200)
    assert len(runs) == INTERVALS and {r["state"] for r in runs} == {"success"}, runs
    replayed = [airflow.task_states(DAG_ID, r["run_id"])["replay_submit"]["state"] for r in runs]
    # The first interval only ingests (no batch is due before its end): in-process that task skips
    # itself; a spark-submitted job cannot, so it succeeds. The second has nothing to do at all.
    assert replayed == ["success", "skipped", "success", "success", "success", "success"], replayed
    print("scheduled runs (s):", [round(run_seconds(r)) for r in runs])

    # The same tables as a plain local `replay run --finalize` of the same archive.
    local = yaml.safe_load((world["base"] / "pipelines" / "clicks_per_minute.yaml").read_text())
    local["source"]["path"] = "data/archive/clicks"
    local["output"]["path"] = "lakehouse/local"
    (world["base"] / "local.yaml").write_text(yaml.safe_dump(local))
    run("replay", "run", str(world["base"] / "local.yaml"), "--finalize", "--quiet",
        extra={"SPARK_MASTER": "local[2]"})
    expected = tables_local(world["base"] / "lakehouse" / "local")
    assert tables_s3(store, PREFIX) == expected

    # 2. The quality DAG ran on the asset events and passed.
    quality = airflow.wait("replay_quality", 1, timeout=900)
    assert {r["state"] for r in quality} == {"success"}, quality
    print("replay_quality runs (s):", [round(run_seconds(r)) for r in quality])

    # 3. `backfill create` of two intervals again, through the scheduler: each ends at the check.
    created = dt.datetime.now(dt.UTC)
    run("airflow", "backfill", "create", "--dag-id", DAG_ID, "--max-active-runs", "1",
        "--from-date", "2023-11-14T22:20:00+00:00", "--to-date", "2023-11-14T22:30:00+00:00",
        "--reprocess-behavior", "completed")
    backfilled = airflow.wait(DAG_ID, 2, timeout=900, since=created)
    assert len(backfilled) == 2 and {r["state"] for r in backfilled} == {"success"}, backfilled
    for dag_run in backfilled:
        assert airflow.task_states(DAG_ID, dag_run["run_id"])["replay_submit"]["state"] == "skipped"
    print("backfill runs (s):", [round(run_seconds(r)) for r in backfilled])

    # 4. A reprocess with good and bad conf: the bad one refused before anything is touched; the
    # results stay those of a clean replay.
    conf = {"pipeline": "clicks_per_minute", "from": "2023-11-14T22:20:00Z",
            "to": "2023-11-14T22:30:00Z", "reason": "late partner upload"}
    run("airflow", "dags", "trigger", "replay_reprocess", "--conf", json.dumps(conf))
    bad = {**conf, "from": "2023-11-14T22:40:00Z"}  # after `to`
    run("airflow", "dags", "trigger", "replay_reprocess", "--conf", json.dumps(bad))
    reprocess = airflow.wait("replay_reprocess", 2, timeout=900)
    states = [airflow.task_states("replay_reprocess", r["run_id"]) for r in reprocess]
    good = [s for s in states if s["check_params"]["state"] == "success"]
    refused = [s for s in states if s["check_params"]["state"] == "failed"]
    assert len(good) == 1 and len(refused) == 1, states
    assert good[0]["reprocess__clicks_per_minute"]["state"] == "success"
    assert refused[0]["reprocess__clicks_per_minute"]["state"] in ("upstream_failed", None)
    assert tables_s3(store, PREFIX) == expected
    print("replay_reprocess runs (s):", [(r["state"], round(run_seconds(r))) for r in reprocess])
