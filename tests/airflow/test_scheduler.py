"""The README's Airflow section, driven through a real scheduler: ``airflow standalone`` (scheduler,
DAG processor, API server, triggerer; SQLite) in a fresh Airflow home, and the CLI commands the
README shows, in its order: ``replay pools``, ``dags unpause``, ``backfill create``, ``dags trigger
replay_reprocess``. Asserts run counts and states, which tasks ran or were skipped, that runs of
the pipeline never overlapped, that empty intervals ended without Spark, that the quality DAG ran
on the asset events, and that the Delta tables equal a plain ``replay run --finalize``.

``make test-airflow`` (CI runs it after the cluster tier); about 6 minutes on 2 cores."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
import yaml
from airflow_standalone import delta_tables, demo_world, parse_time, pipeline_config

from spark_jobs.execution.state.delta_rs import DeltaRsReader

pytestmark = [pytest.mark.slow, pytest.mark.scheduler, pytest.mark.airflow]

DAG_ID = "replay__clicks_per_minute"
INTERVALS = 6  # the demo's schedule: 22:00 to 23:00 in 10 minutes


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A fresh Airflow home and project base (archive, tables, the demo's config), the README's
    environment, and ``airflow standalone`` running in it; stopped (its process group) at the end."""
    with demo_world(tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("replay-base")) as world:
        yield world


def _config(world, path: Path):
    return pipeline_config(world["base"], path)


def test_readme_airflow_section_through_the_scheduler(world):
    run, airflow = world["run"], world["airflow"]
    # 1. Unpausing runs the six intervals from schedule.start to schedule.end, and stops.
    run("airflow", "dags", "unpause", DAG_ID)
    runs = airflow.wait(DAG_ID, INTERVALS, timeout=900)
    assert len(runs) == INTERVALS and {r["state"] for r in runs} == {"success"}, runs
    replayed = []
    for dag_run in runs:
        states = airflow.task_states(DAG_ID, dag_run["run_id"])
        assert set(states) == {"replay"}, states  # one task a run
        replayed.append(states["replay"]["state"])
    # 22:00 ingests (no batch due yet: skipped, no asset event); 22:10 has nothing to do (skipped
    # by the task's check, without Spark); 22:20-22:40 replay the batches due; 22:50 finalizes.
    assert replayed == ["skipped", "skipped", "success", "success", "success", "success"], replayed
    config = _config(world, world["pipelines"] / "clicks_per_minute.yaml")
    assert "finalized" in run("replay", "status", str(world["pipelines"] / "clicks_per_minute.yaml"))

    # The same tables as one plain `replay run --finalize` of the same archive.
    plain = yaml.safe_load((world["pipelines"] / "clicks_per_minute.yaml").read_text())
    plain["output"]["path"] = "lakehouse/plain"
    plain_path = world["base"] / "plain.yaml"
    plain_path.write_text(yaml.safe_dump(plain))
    run("replay", "run", str(plain_path), "--finalize", "--quiet", timeout=600)
    expected = delta_tables(_config(world, plain_path))
    assert delta_tables(config) == expected

    # 2. The quality DAG ran on the asset events (unpaused from the start) and passed.
    quality = airflow.wait("replay_quality", 1, timeout=600)
    assert {r["state"] for r in quality} == {"success"}, quality

    # 3. A backfill of the demo's intervals again: every run ends at the check, without Spark.
    created = dt.datetime.now(dt.UTC)
    run("airflow", "backfill", "create", "--dag-id", DAG_ID, "--max-active-runs", "1",
        "--from-date", "2023-11-14T22:00:00+00:00", "--to-date", "2023-11-14T22:50:00+00:00",
        "--reprocess-behavior", "completed")

    def rerun() -> list[dict]:  # the runs the backfill cleared and ran again
        return [r for r in airflow.runs(DAG_ID) if r["end_date"] and parse_time(r["start_date"]) > created]

    deadline = time.monotonic() + 600
    while len(rerun()) < INTERVALS and time.monotonic() < deadline:
        time.sleep(5)
    backfilled = rerun()
    assert len(backfilled) == INTERVALS and {r["state"] for r in backfilled} == {"success"}, backfilled
    for dag_run in backfilled:
        states = airflow.task_states(DAG_ID, dag_run["run_id"])
        check = states["replay"]
        assert check["state"] == "skipped", states
        assert (parse_time(check["end_date"]) - parse_time(check["start_date"])).total_seconds() < 10, check

    # 4. A reprocess, with good and bad params: the results stay those of a clean replay.
    conf = {"pipeline": "clicks_per_minute", "from": "2023-11-14T22:20:00Z",
            "to": "2023-11-14T22:30:00Z", "reason": "late partner upload"}
    run("airflow", "dags", "trigger", "replay_reprocess", "--conf", json.dumps(conf))
    bad = {**conf, "from": "2023-11-14T22:40:00Z"}  # after `to`: refused before anything is touched
    run("airflow", "dags", "trigger", "replay_reprocess", "--conf", json.dumps(bad))
    reprocess = airflow.wait("replay_reprocess", 2, timeout=600)
    states = {r["run_id"]: airflow.task_states("replay_reprocess", r["run_id"]) for r in reprocess}
    good = [s for s in states.values() if s["check_params"]["state"] == "success"]
    refused = [s for s in states.values() if s["check_params"]["state"] == "failed"]
    assert len(good) == 1 and len(refused) == 1, states
    assert good[0]["reprocess__clicks_per_minute"]["state"] == "success"
    assert refused[0]["reprocess__clicks_per_minute"]["state"] in ("upstream_failed", None)
    assert delta_tables(config) == expected
    history = DeltaRsReader(config).rows("SELECT reason FROM reprocess_history", {"reprocess_history": None})
    assert history == [{"reason": "late partner upload"}]

    # Runs of the pipeline never overlapped: its tasks in the one-slot pool, one at a time.
    spans = []
    for dag_id in (DAG_ID, "replay_reprocess"):
        for dag_run in airflow.runs(dag_id):
            for task in airflow.task_states(dag_id, dag_run["run_id"]).values():
                if task["task_id"].startswith(("replay", "reprocess__")) and task["state"] == "success":
                    spans.append((parse_time(task["start_date"]), parse_time(task["end_date"])))
    spans.sort()
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:], strict=False)), spans
