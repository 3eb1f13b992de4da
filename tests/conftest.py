"""Shared fixtures. Spark tests share one real local SparkSession with Delta (module `spark`)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("REPLAY_SPARK_LOG_LEVEL", "ERROR")

# Airflow reads AIRFLOW_HOME when first imported: point it at a throw-away directory (shared by
# tests/dags and tests/airflow, and by subprocesses) before any test module imports airflow.
# One per pytest-xdist worker (`make test` runs two): workers inherit the controller's
# environment, and two processes migrating one SQLite database lock each other out.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
if os.environ.get("REPLAY_TEST_AIRFLOW_HOME_OWNER") != _WORKER:
    os.environ["REPLAY_TEST_AIRFLOW_HOME"] = tempfile.mkdtemp(prefix=f"replay-airflow-{_WORKER}-")
    os.environ["REPLAY_TEST_AIRFLOW_HOME_OWNER"] = _WORKER
    atexit.register(shutil.rmtree, os.environ["REPLAY_TEST_AIRFLOW_HOME"], True)
os.environ["AIRFLOW_HOME"] = os.environ["REPLAY_TEST_AIRFLOW_HOME"]
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parents[1] / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"


@pytest.fixture(scope="session", autouse=True)
def connect_mode(tmp_path_factory):
    """``REPLAY_TEST_CONNECT=1`` (``make test-connect``): the run's Spark tests go through a Spark
    Connect server (``replay server start``) started here and stopped at the end; ``SPARK_REMOTE``
    reaches the session below and every ``replay`` subprocess the tests start."""
    if os.environ.get("REPLAY_TEST_CONNECT") != "1":
        yield None
        return
    from airflow_standalone import free_port

    from spark_jobs.execution import connect_server

    port = free_port()
    state = tmp_path_factory.mktemp("connect-server")
    server, _ = connect_server.start_server(port=port, directory=state)
    os.environ["SPARK_REMOTE"] = server.url
    try:
        yield server
    finally:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()  # before the server goes: an open client waits for it at exit
        connect_server.stop_server(state)
        os.environ.pop("SPARK_REMOTE", None)


@pytest.fixture(scope="session")
def spark(connect_mode):
    """A real local SparkSession with Delta's extension and catalog, shared by the run (a Spark
    Connect session on the run's server in ``connect_mode``)."""
    from spark_jobs.execution.spark_session import get_spark

    session = get_spark("replay-tests", master=os.environ.get("SPARK_MASTER", "local[2]"))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster (one master, one worker) on 127.0.0.1, started by
    ``scripts/services/spark-cluster.sh`` and always stopped: its master URL."""
    import subprocess

    from airflow_standalone import free_port

    script = str(Path(__file__).resolve().parents[1] / "scripts" / "services" / "spark-cluster.sh")
    root = tmp_path_factory.mktemp("spark-cluster")
    try:
        started = subprocess.run([script, "start", str(root), str(free_port())], capture_output=True,
                                 text=True, timeout=300)
        assert started.returncode == 0, started.stdout + started.stderr
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([script, "stop", str(root)], timeout=120)
