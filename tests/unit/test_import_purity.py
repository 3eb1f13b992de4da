"""The engine is pure Python: importing it must not pull in Spark, Delta or Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    "spark_jobs.windows", "spark_jobs.triggers", "spark_jobs.operator", "spark_jobs.watermarks",
    "spark_jobs.keyed", "spark_jobs.window_kernel", "spark_jobs.aggregates", "spark_jobs.config",
    "spark_jobs.state.memory",
    "spark_jobs.ordering",
]
# In a fresh interpreter, import each module in turn and note any forbidden module it brought in.
CODE = """
import importlib, json, sys
forbidden = ("pyspark", "delta", "airflow")
found = {}
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
    bad = sorted(m for m in sys.modules if m.split(".")[0] in forbidden)
    if bad:
        found[name] = bad[:5]
        break
print(json.dumps(found))
"""


def test_importing_the_engine_loads_no_spark_delta_or_airflow():
    done = subprocess.run([sys.executable, "-c", CODE, json.dumps(PURE)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == {}, "the first module to pull in Spark/Delta/Airflow, and what"


def test_the_check_would_see_a_forbidden_import():
    done = subprocess.run([sys.executable, "-c", CODE, json.dumps(["json", "delta"])], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:  # delta-spark not installed here: the check itself is still exercised
        assert "ModuleNotFoundError" in done.stderr
    else:
        assert list(json.loads(done.stdout)) == ["delta"]
