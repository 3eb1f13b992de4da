"""The engine is pure Python: importing it must not pull in Spark, Delta or Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_under(folder: str) -> list[str]:
    """Every module of a package folder, as a dotted name."""
    names = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# All of core/, and the light modules built on it: the YAML layer, the in-memory runner, the
# numbering helpers, and the stable user import paths that re-export core.
PURE = [
    *_modules_under("spark_jobs/core"),
    "spark_jobs.config", "spark_jobs.pipeline_spec",
    "spark_jobs.testing.memory_replay",
    "spark_jobs.execution.ordering",
    *_modules_under("spark_jobs/triggers"), *_modules_under("spark_jobs/windows"),
    "spark_jobs.functions", "spark_jobs.process", "spark_jobs.joins",
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
