"""A real Airflow, as the README's users run it, for the scheduler tiers (tests/airflow/test_scheduler.py
on SQLite, tests/prod/test_airflow_postgres.py on PostgreSQL): the environment of a fresh Airflow
home driving dags/, ``airflow standalone`` started in it and stopped with its process group, and
the CLI's view of DAG runs and task states."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def airflow_env(home: Path, base: Path, pipelines: Path, port: int, **extra: str) -> dict[str, str]:
    """The README's environment for an Airflow home ``home`` serving the API on ``port``, with the
    pipelines of ``pipelines`` and relative paths against ``base``; ``extra`` adds or overrides."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        # Tasks report to the API server's execution API: on this test's port, not 8080.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "REPLAY_PIPELINES_DIR": str(pipelines),
        "REPLAY_BASE_DIR": str(base),
        **extra,
    }
    for key in ("AIRFLOW__CORE__UNIT_TEST_MODE", "REPLAY_TEST_AIRFLOW_HOME"):
        env.pop(key, None)
    return env


@contextlib.contextmanager
def standalone(env: dict[str, str], home: Path, base: Path, port: int) -> Iterator[None]:
    """``airflow standalone`` (scheduler, DAG processor, API server, triggerer) until the block
    ends, once its API answers (tasks report to it: started earlier, they fail and retry)."""
    log = open(home / "standalone.log", "w")  # noqa: SIM115 - open for the server's lifetime
    server = subprocess.Popen(["airflow", "standalone"], stdout=log, stderr=subprocess.STDOUT, env=env,
                              cwd=base, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("the API server did not come up:\n" + server_log(home))
                time.sleep(2)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def server_log(home: Path) -> str:
    return (home / "standalone.log").read_text()[-4000:]


def printed_json(out: str) -> list[dict]:
    """The JSON a CLI command printed (Airflow's warnings may precede it on stdout)."""
    return next((json.loads(line) for line in reversed(out.splitlines()) if line.startswith("[")), [])


def parse_time(moment: str) -> dt.datetime:
    return dt.datetime.fromisoformat(moment.replace("Z", "+00:00"))


class AirflowCli:
    """The CLI's view of the runs: ``run(*args)`` runs a command and returns its stdout."""

    def __init__(self, run: Callable[..., str], home: Path):
        self.run = run
        self.home = home

    def runs(self, dag_id: str) -> list[dict]:
        """The DAG's runs, oldest logical date first (manual runs, which have none, last)."""
        runs = printed_json(self.run("airflow", "dags", "list-runs", dag_id, "--output", "json"))
        return sorted(runs, key=lambda r: (r["logical_date"] == "", r["logical_date"], r["run_after"]))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, dict]:
        out = self.run("airflow", "tasks", "states-for-dag-run", dag_id, run_id, "--output", "json")
        return {row["task_id"]: row for row in printed_json(out)}

    def wait(self, dag_id: str, count: int, timeout: float, since: dt.datetime | None = None) -> list[dict]:
        """Until the DAG has ``count`` runs (started after ``since``), all finished; fails with the
        server's log tail if not."""
        deadline = time.monotonic() + timeout
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            runs = [r for r in self.runs(dag_id)
                    if since is None or (r["start_date"] and parse_time(r["start_date"]) > since)]
            if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            time.sleep(5)
        pytest.fail(f"{dag_id}: {len(runs)} runs, states {[r['state'] for r in runs]} after {timeout}s\n"
                    + server_log(self.home))
