"""Airflow reads AIRFLOW_HOME when first imported: point it at a throw-away directory (shared with
tests/dags in the same pytest process) before any test module imports airflow; create the
metadata DB with the documented command, once."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"

if "REPLAY_TEST_AIRFLOW_HOME" not in os.environ:
    os.environ["REPLAY_TEST_AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="replay-airflow-")
    atexit.register(shutil.rmtree, os.environ["REPLAY_TEST_AIRFLOW_HOME"], True)
os.environ["AIRFLOW_HOME"] = os.environ["REPLAY_TEST_AIRFLOW_HOME"]
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"


@pytest.fixture(scope="session")
def airflow_db():
    """The metadata DB (SQLite in the temp AIRFLOW_HOME), created by `airflow db migrate`."""
    done = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return os.environ["AIRFLOW_HOME"]
