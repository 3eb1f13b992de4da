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
