"""The driver JVM's class-data archive: used when set-up built it, harmless when it is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_jobs.execution.spark_session import class_archive_path

# A session that runs one query needing Spark SQL, JSON and Delta's extension.
_SESSION = """
import os
from spark_jobs.execution.spark_session import get_spark
log = os.environ["CLASS_LOAD_LOG"]
spark = get_spark("archive-check", master="local[1]", conf={
    "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={log}",
})
parsed = spark.range(3).selectExpr("from_json(to_json(named_struct('a', id)), 'a long').a AS a")
print("sum", parsed.agg({"a": "sum"}).first()[0])
"""


def _start_session(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    """Run a fresh driver, logging where each JVM class came from (jar or shared archive)."""
    log = tmp_path / "class-load.log"
    # The caller's own driver options (here: the class-load log) are kept beside the archive's.
    environment = {**os.environ, **env, "CLASS_LOAD_LOG": str(log)}
    done = subprocess.run(
        [sys.executable, "-c", _SESSION], env=environment, capture_output=True, text=True, timeout=300,
    )
    return done, log.read_text() if log.exists() else ""


def test_set_up_built_the_archive_and_a_session_loads_spark_from_it(tmp_path):
    archive = class_archive_path()
    assert archive.is_file(), f"make setup builds {archive}"
    done, loads = _start_session(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sum 3" in done.stdout
    session_class = "org.apache.spark.sql.classic.SparkSession "
    spark_class = [line for line in loads.splitlines() if session_class in line]
    assert spark_class, "the class-load log names SparkSession"
    assert "shared objects file (top)" in spark_class[0], spark_class[0]


def test_a_foreign_archive_only_costs_the_speed_up(tmp_path):
    # Same name as the real one, but not an archive of this JVM (e.g. copied from another machine).
    folder = tmp_path / "jvm"
    folder.mkdir()
    real = class_archive_path()
    (folder / real.name).write_bytes(b"not a CDS archive" * 100)
    done, loads = _start_session(tmp_path, REPLAY_CLASS_ARCHIVE_DIR=str(folder))
    assert done.returncode == 0, done.stderr
    assert "sum 3" in done.stdout
    assert "cds" not in (done.stdout + done.stderr).lower()
    assert "shared objects file (top)" not in loads
