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
if "REPLAY_TEST_AIRFLOW_HOME" not in os.environ:
    os.environ["REPLAY_TEST_AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="replay-airflow-")
    atexit.register(shutil.rmtree, os.environ["REPLAY_TEST_AIRFLOW_HOME"], True)
os.environ["AIRFLOW_HOME"] = os.environ["REPLAY_TEST_AIRFLOW_HOME"]
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parents[1] / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession with Delta's extension and catalog, shared by the run."""
    from spark_jobs.execution.spark_session import get_spark

    session = get_spark("replay-tests", master=os.environ.get("SPARK_MASTER", "local[2]"))
    yield session
    session.stop()
