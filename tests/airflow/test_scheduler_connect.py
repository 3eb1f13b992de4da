"""The README's Airflow section through a real scheduler with every Spark task a client of one warm
Spark Connect server (``REPLAY_SPARK_MODE=connect``, the Spark provider's ``spark_connect_default``
connection): the demo's intervals, the quality DAG and a backfill, with tables equal to an
in-process ``replay run --finalize``. Prints the time of each DAG run (docs/spark-connect.md).

``make test-airflow-connect`` (run on purpose, about 4 minutes alone on 2 cores; CI runs the same
flows over Connect on PostgreSQL and the bucket, ``tests/prod/test_airflow_postgres_connect.py``)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml
from airflow_standalone import delta_tables, demo_world, pipeline_config, run_seconds

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark]

DAG_ID = "replay__clicks_per_minute"
INTERVALS = 6


@pytest.fixture(scope="module")
def world(tmp_path_factory, warm_connect_server):
    port = warm_connect_server
    connection = json.dumps({"conn_type": "spark_connect", "host": "localhost", "port": port})
    with demo_world(tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("replay-base"),
                    REPLAY_SPARK_MODE="connect", AIRFLOW_CONN_SPARK_CONNECT_DEFAULT=connection) as world:
        yield {**world, "port": port}


def test_the_demo_through_the_scheduler_as_clients_of_a_warm_server(world):
    run, airflow = world["run"], world["airflow"]
    run("airflow", "dags", "unpause", DAG_ID)
    runs = airflow.wait(DAG_ID, INTERVALS, timeout=900)
    assert len(runs) == INTERVALS and {r["state"] for r in runs} == {"success"}, runs
    replayed = [airflow.task_states(DAG_ID, r["run_id"])["replay"]["state"] for r in runs]
    assert replayed == ["skipped", "skipped", "success", "success", "success", "success"], replayed
    print("scheduled runs over Connect (s):", [round(run_seconds(r)) for r in runs])
    # The tasks were the server's clients (their logs say which server they reached).
    logs = [p.read_text(errors="replace") for p in (world["home"] / "logs").rglob("*.log")]
    assert any(f"Spark Connect server of connection spark_connect_default (sc://localhost:{world['port']})"
               in text for text in logs), "no task log names the server"

    plain = yaml.safe_load((world["pipelines"] / "clicks_per_minute.yaml").read_text())
    plain["output"]["path"] = "lakehouse/plain"
    plain_path = world["base"] / "plain.yaml"
    plain_path.write_text(yaml.safe_dump(plain))
    run("replay", "run", str(plain_path), "--finalize", "--quiet", timeout=600)  # in-process
    expected = delta_tables(pipeline_config(world["base"], plain_path))
    assert expected["window_results"]
    config = pipeline_config(world["base"], world["pipelines"] / "clicks_per_minute.yaml")
    assert delta_tables(config) == expected

    quality = airflow.wait("replay_quality", 1, timeout=600)
    assert {r["state"] for r in quality} == {"success"}, quality
    print("replay_quality runs over Connect (s):", [round(run_seconds(r)) for r in quality])

    created = dt.datetime.now(dt.UTC)
    run("airflow", "backfill", "create", "--dag-id", DAG_ID, "--max-active-runs", "1",
        "--from-date", "2023-11-14T22:20:00+00:00", "--to-date", "2023-11-14T22:30:00+00:00",
        "--reprocess-behavior", "completed")
    backfilled = airflow.wait(DAG_ID, 2, timeout=600, since=created)
    assert {r["state"] for r in backfilled} == {"success"}, backfilled
    print("backfill runs over Connect (s):", [round(run_seconds(r)) for r in backfilled])
    assert delta_tables(config) == expected
