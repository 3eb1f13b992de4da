"""Airflow reads AIRFLOW_HOME when first imported: point it at a throw-away directory (shared with
tests/airflow in the same pytest process) before any test module imports airflow."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"

if "REPLAY_TEST_AIRFLOW_HOME" not in os.environ:
    os.environ["REPLAY_TEST_AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="replay-airflow-")
    atexit.register(shutil.rmtree, os.environ["REPLAY_TEST_AIRFLOW_HOME"], True)
os.environ["AIRFLOW_HOME"] = os.environ["REPLAY_TEST_AIRFLOW_HOME"]
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
