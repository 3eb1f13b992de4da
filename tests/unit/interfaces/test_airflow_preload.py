"""The forkserver preload (``spark_jobs.interfaces.airflow_preload``), loaded as Airflow's
forkserver loads it: in a fresh interpreter started with ``python -c``."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
before = set(sys.modules)
import spark_jobs.interfaces.airflow_preload
loaded = set(sys.modules) - before
print(json.dumps(sorted(loaded)))
"""


def test_preload_loads_the_task_libraries_and_none_of_the_project():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    # What a task would otherwise import: the Connect client and what it needs, and delta-rs.
    assert {"pyspark.sql.connect.session", "pandas", "pyarrow", "grpc", "deltalake"} <= loaded
    # The project's own code stays out of a long-lived forkserver (tasks would run stale code).
    project = {name for name in loaded if name.split(".")[0] == "spark_jobs"}
    assert project == {"spark_jobs", "spark_jobs.interfaces", "spark_jobs.interfaces.airflow_preload"}
