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


#: The README's forkserver preload: what every task would import, loaded once (docs/airflow.md).
PRELOAD = "airflow,airflow.executors.local_executor,spark_jobs.interfaces.airflow_preload"


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
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        "AIRFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
        "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD": PRELOAD,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        # Tasks report to the API server's execution API: on this test's port, not 8080.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "REPLAY_PIPELINES_DIR": str(pipelines),
        "REPLAY_BASE_DIR": str(base),
        **extra,
    }
    for key in ("AIRFLOW__CORE__UNIT_TEST_MODE", "REPLAY_TEST_AIRFLOW_HOME",
                "REPLAY_TEST_AIRFLOW_HOME_OWNER"):
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
        # Task processes still running (a quality run the last asset event started) sit in process
        # groups of their own inside the server's session, and outlived the group's kill: left,
        # they waited for the API server for good, a Spark driver with them.
        end_session(server.pid)
        log.close()


def session_members(session: int) -> list[int]:
    """The live processes of a session (``/proc``: the sixth field of ``stat``)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == session:
                members.append(int(entry))
    return members


def end_session(session: int, grace: float = 10.0) -> None:
    """SIGTERM every process of ``session``, SIGKILL what is left after ``grace`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_members(session):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while session_members(session) and time.monotonic() < deadline:
            time.sleep(0.2)


def server_log(home: Path) -> str:
    return (home / "standalone.log").read_text()[-4000:]


def printed_json(out: str) -> list[dict]:
    """The JSON a CLI command printed (Airflow's warnings may precede it on stdout)."""
    return next((json.loads(line) for line in reversed(out.splitlines()) if line.startswith("[")), [])


def parse_time(moment: str) -> dt.datetime:
    return dt.datetime.fromisoformat(moment.replace("Z", "+00:00"))


def run_seconds(dag_run: dict) -> float:
    """How long a DAG run (a row of ``AirflowCli.runs``) took."""
    return (parse_time(dag_run["end_date"]) - parse_time(dag_run["start_date"])).total_seconds()


def retrying_runner(env: dict[str, str], cwd: Path) -> Callable[..., str]:
    """``run(*args, timeout=)``: a command in ``env``, asserted to succeed, its stdout returned.
    On SQLite a lock error can still happen despite the busy timeout; then, as the README says,
    it is run again (a backfill that failed half-way blocks a new one until the scheduler clears
    it, two minutes later)."""

    def run(*args: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + 240
        while True:
            done = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd,
                                  timeout=timeout)
            output = done.stderr + done.stdout
            retry = "database is locked" in output or "Another backfill is running" in output
            if done.returncode == 0 or not retry or time.monotonic() > deadline:
                break
            time.sleep(10)
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    return run


@contextlib.contextmanager
def demo_world(home: Path, base: Path, *, generate: tuple[str, ...] = (),
               schedule: dict[str, str] | None = None, **extra_env: str) -> Iterator[dict[str, Any]]:
    """The README's Airflow section on SQLite: a fresh Airflow home ``home``, the project base
    ``base`` with the demo's config and generated archive, pools made, ``airflow standalone``
    running; ``extra_env`` adds to the environment (e.g. the Spark mode). ``generate`` adds to
    ``replay generate``'s arguments and ``schedule`` replaces the config's, for a longer archive."""
    import shutil

    import yaml

    pipelines = base / "pipelines"
    pipelines.mkdir()
    port = free_port()
    demo = ROOT / "include" / "pipelines" / "clicks_per_minute.yaml"
    if schedule is None:
        shutil.copy(demo, pipelines)
    else:
        config = {**yaml.safe_load(demo.read_text()), "schedule": schedule}
        (pipelines / demo.name).write_text(yaml.safe_dump(config, sort_keys=False))
    # As the README: SQLite has one writer; a CLI write waits up to 60 s for the scheduler's
    # instead of failing after Python's default 5 s.
    env = airflow_env(home, base, pipelines, port,
                      AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db?timeout=60",
                      **extra_env)
    run = retrying_runner(env, base)
    run("replay", "generate", "data/archive/clicks", *generate)
    with serving(run, env, home, base, port):
        yield {"run": run, "home": home, "base": base, "env": env, "pipelines": pipelines,
               "airflow": AirflowCli(run, home)}


@contextlib.contextmanager
def serving(run: Callable[..., str], env: dict[str, str], home: Path, base: Path,
            port: int) -> Iterator[None]:
    """The README's set-up commands (metadata database, the pipelines' pools, the DAGs), then
    ``airflow standalone`` until the block ends."""
    run("airflow", "db", "migrate")
    run("replay", "pools")
    run("airflow", "dags", "reserialize")
    with standalone(env, home, base, port):
        yield


#: The demo pipeline's tables a scheduled replay must write as a plain ``replay run`` writes them.
COMPARED = ("window_results", "window_latest", "late_events", "quarantine")


def pipeline_config(base: Path, path: Path) -> Any:
    """A config as the tasks load it: relative paths against the project base ``base``."""
    from spark_jobs.config import load_config

    previous = os.environ.get("REPLAY_BASE_DIR")
    os.environ["REPLAY_BASE_DIR"] = str(base)
    try:
        return load_config(path)
    finally:
        if previous is None:
            os.environ.pop("REPLAY_BASE_DIR")
        else:
            os.environ["REPLAY_BASE_DIR"] = previous


def delta_tables(config: Any, tables: tuple[str, ...] = COMPARED) -> dict[str, list]:
    """The tables' rows (as sorted reprs), read with delta-rs."""
    from spark_jobs.execution.state.delta_rs import DeltaRsReader

    reader = DeltaRsReader(config)
    return {table: sorted(map(repr, reader.rows(f"SELECT * FROM {table}", {table: None})))
            for table in tables}


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
