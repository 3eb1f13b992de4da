"""The production tier's Airflow half, shared by its two flavours (``test_airflow_postgres*.py``):
``airflow standalone`` on PostgreSQL with the demo pipeline's archive and tables on the tier's S3
server, set up by the README's commands, and the README's flows driven through the scheduler."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from airflow_standalone import AirflowCli, airflow_env, free_port, run_seconds, serving
from prod_services import BUCKET
from test_object_storage import tables_local, tables_s3

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = "replay__clicks_per_minute"
INTERVALS = 6


@contextlib.contextmanager
def postgres_world(store: dict, postgres: dict, home: Path, base: Path, prefix: str,
                   **extra_env: str) -> Iterator[dict[str, Any]]:
    """The demo's archive uploaded to ``archive/<prefix>`` of the bucket, its tables configured at
    ``lakehouse/<prefix>``, Airflow's metadata on ``postgres``, ``airflow standalone`` running;
    ``extra_env`` sets the Spark mode and its connection."""
    import pyarrow.fs as pafs

    pipelines = base / "pipelines"
    pipelines.mkdir()
    port = free_port()
    env = airflow_env(
        home, base, pipelines, port,
        **store["keys"],  # S3A's credential chain and the clients' boto3 read them from here
        PYTHONPATH=os.pathsep.join(filter(None, [postgres["pythonpath"], os.environ.get("PYTHONPATH")])),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgres["url"],
        # Airflow derives asyncpg for the async engine; psycopg 3 is async too.
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC=postgres["url"].replace("+psycopg:", "+psycopg_async:"),
        REPLAY_S3A_ENDPOINT=store["endpoint"],
        SPARK_LOCAL_IP="127.0.0.1",  # drivers bind and advertise 127.0.0.1, as the cluster does
        **extra_env,
    )

    def run(*args: str, timeout: float = 600, extra: dict[str, str] | None = None) -> str:
        done = subprocess.run(list(args), capture_output=True, text=True, env={**env, **(extra or {})},
                              cwd=base, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    run("replay", "generate", "data/archive/clicks")
    pafs.copy_files(str(base / "data" / "archive" / "clicks"), f"{BUCKET}/archive/{prefix}",
                    source_filesystem=pafs.LocalFileSystem(), destination_filesystem=store["fs"])
    demo = yaml.safe_load((ROOT / "include" / "pipelines" / "clicks_per_minute.yaml").read_text())
    demo["source"]["path"] = f"s3a://{BUCKET}/archive/{prefix}"
    demo["output"]["path"] = f"s3a://{BUCKET}/lakehouse/{prefix}"
    (pipelines / "clicks_per_minute.yaml").write_text(yaml.safe_dump(demo))
    with serving(run, env, home, base, port):
        yield {"run": run, "home": home, "base": base, "env": env, "store": store,
               "prefix": f"lakehouse/{prefix}", "airflow": AirflowCli(run, home)}


def the_readme_flows(world: dict[str, Any], replayed: list[str], label: str) -> None:
    """``dags unpause`` (the scheduler runs the demo's six intervals: their ``replay`` task's states are
    ``replayed``), the tables equal to a local ``replay run --finalize`` row for row, the quality
    DAG on the asset events, ``backfill create`` of two intervals again, a reprocess with good and
    bad conf. Prints the time of each DAG run (docs/airflow.md)."""
    run, store, airflow, prefix = world["run"], world["store"], world["airflow"], world["prefix"]
    # 1. Unpausing: the scheduler runs the demo's six intervals; the tables go to the bucket.
    run("airflow", "dags", "unpause", DAG_ID)
    runs = airflow.wait(DAG_ID, INTERVALS, timeout=1200)
    assert len(runs) == INTERVALS and {r["state"] for r in runs} == {"success"}, runs
    states = [airflow.task_states(DAG_ID, r["run_id"])["replay"]["state"] for r in runs]
    assert states == replayed, states
    print(f"scheduled runs, {label} (s):", [round(run_seconds(r)) for r in runs])

    local = yaml.safe_load((world["base"] / "pipelines" / "clicks_per_minute.yaml").read_text())
    local["source"]["path"] = "data/archive/clicks"
    local["output"]["path"] = "lakehouse/local"
    (world["base"] / "local.yaml").write_text(yaml.safe_dump(local))
    run("replay", "run", str(world["base"] / "local.yaml"), "--finalize", "--quiet",
        extra={"SPARK_MASTER": "local[2]"})
    expected = tables_local(world["base"] / "lakehouse" / "local")
    assert expected["window_results"]
    assert tables_s3(store, prefix) == expected

    # 2. The quality DAG ran on the asset events and passed.
    quality = airflow.wait("replay_quality", 1, timeout=900)
    assert {r["state"] for r in quality} == {"success"}, quality
    print(f"replay_quality runs, {label} (s):", [round(run_seconds(r)) for r in quality])

    # 3. `backfill create` of two intervals again, through the scheduler: each ends at the check.
    created = dt.datetime.now(dt.UTC)
    run("airflow", "backfill", "create", "--dag-id", DAG_ID, "--max-active-runs", "1",
        "--from-date", "2023-11-14T22:20:00+00:00", "--to-date", "2023-11-14T22:30:00+00:00",
        "--reprocess-behavior", "completed")
    backfilled = airflow.wait(DAG_ID, 2, timeout=900, since=created)
    assert len(backfilled) == 2 and {r["state"] for r in backfilled} == {"success"}, backfilled
    for dag_run in backfilled:
        assert airflow.task_states(DAG_ID, dag_run["run_id"])["replay"]["state"] == "skipped"
    print(f"backfill runs, {label} (s):", [round(run_seconds(r)) for r in backfilled])

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
    assert tables_s3(store, prefix) == expected
    print(f"replay_reprocess runs, {label} (s):", [(r["state"], round(run_seconds(r))) for r in reprocess])
