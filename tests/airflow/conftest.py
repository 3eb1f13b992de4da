"""The metadata DB for the Airflow tests (the Airflow home is set in tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def airflow_db():
    """The metadata DB (SQLite in the temp AIRFLOW_HOME), created by `airflow db migrate`."""
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture(scope="module")
def warm_connect_server(tmp_path_factory):
    """A Spark Connect server (``replay server start``'s code) on a free port for the module, its
    port; no token (loopback)."""
    from airflow_standalone import free_port

    from spark_jobs.execution import connect_server

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(connect_server.TOKEN_ENV, raising=False)
        state = tmp_path_factory.mktemp("connect-server")
        port = free_port()
        connect_server.start_server(port=port, directory=state)
        try:
            yield port
        finally:
            connect_server.stop_server(state)
