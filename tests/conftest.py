"""Shared fixtures. Spark tests share one real local SparkSession with Delta (module `spark`)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("REPLAY_SPARK_LOG_LEVEL", "ERROR")


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession with Delta's extension and catalog, shared by the run."""
    from spark_jobs.session import get_spark

    session = get_spark("replay-tests", master=os.environ.get("SPARK_MASTER", "local[2]"))
    yield session
    session.stop()
