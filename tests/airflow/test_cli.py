"""The Airflow commands docs/airflow.md and the compose services run, against the temp metadata
DB: `airflow db migrate`, `airflow dags reserialize`, `airflow dags list`, and a backfill of the
shipped pipeline (`airflow backfill create --dry-run`, the README's range) that lists one run per
10-minute interval."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.airflow


def airflow(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_reserialize_list_and_backfill_dry_run(airflow_db, monkeypatch):
    monkeypatch.delenv("REPLAY_PIPELINES_DIR", raising=False)  # the shipped include/pipelines
    airflow("dags", "reserialize")
    listed = airflow("dags", "list", "--output", "plain")
    for dag_id in ("replay__clicks_per_minute", "replay_reprocess", "replay_quality"):
        assert dag_id in listed
    plan = airflow("backfill", "create", "--dag-id", "replay__clicks_per_minute",
                   "--from-date", "2023-11-14T22:00:00+00:00", "--to-date", "2023-11-14T22:50:00+00:00",
                   "--max-active-runs", "1", "--dry-run")
    runs = [line for line in plan.splitlines() if "| 2023-11-1" in line]
    assert len(runs) == 6, plan  # 22:00, 22:10, ... 22:50: from and to are inclusive
