"""The one SparkSession factory: Delta configured, jars from the project cache, no network.

Delta's JVM jars are resolved once by ``python -m spark_jobs.session --fetch-jars`` (the set-up
step) into ``.cache/ivy`` through Spark's own Ivy resolver; every later session loads them from
there with ``spark.jars``, so runs never reach Maven Central.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

# The pip package delta-spark 4.4.1 pairs with jar 4.4.1, but the Maven Central this project
# reaches serves io.delta:delta-spark_4.2_2.13 only up to 4.4.0. The Python sides of 4.4.0 and
# 4.4.1 are identical but for their version string, so the 4.4.0 jar is the exact JVM half.
DELTA_PACKAGE = os.environ.get("REPLAY_DELTA_PACKAGE", "io.delta:delta-spark_4.2_2.13:4.4.0")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
JAR_CACHE = Path(os.environ.get("REPLAY_JAR_CACHE", PROJECT_ROOT / ".cache" / "ivy"))

_LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # Local mode runs the executors in the driver's JVM. 2 GiB keeps a 10M-event replay's whole
    # process tree under 4 GiB (3 GiB measured 4.45 GiB); caches live on disk (see read_archive).
    "spark.driver.memory": os.environ.get("REPLAY_DRIVER_MEMORY", "2g"),
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Caches here are short-lived and read back once or twice (the parsed archive, a pass's
    # output): Spark's column encoders cost more CPU than the bytes they save (measured: the
    # parse cache of 1M events 2.4 s faster, for 4x the local disk it briefly occupies).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.databricks.delta.retentionDurationCheck.enabled": "true",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


class JarsMissingError(RuntimeError):
    pass


def delta_jars() -> list[str]:
    """The cached Delta jars; raises with the set-up command when they are missing."""
    jars = sorted((JAR_CACHE / "jars").glob("*.jar"))
    if not any("delta-spark" in jar.name for jar in jars):
        raise JarsMissingError(
            f"Delta jars are not in {JAR_CACHE}/jars; run `make setup` "
            "(or `python -m spark_jobs.session --fetch-jars`) once with network access"
        )
    return [str(jar) for jar in jars]


def fetch_jars() -> list[str]:
    """Resolve Delta and its dependencies from Maven Central into the project cache."""
    try:
        return delta_jars()
    except JarsMissingError:
        pass
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("fetch-delta-jars")
        .config("spark.jars.packages", DELTA_PACKAGE)
        .config("spark.jars.ivy", str(JAR_CACHE))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.stop()
    return delta_jars()


def spark_master(master: str | None = None) -> str:
    return master or os.environ.get("SPARK_MASTER") or "local[*]"


def get_spark(
    app_name: str = "replay", master: str | None = None, conf: dict[str, Any] | None = None
):
    """Return the active session, or build one with Delta and sensible local settings.

    ``master`` (or ``SPARK_MASTER``) may be a standalone URL such as ``spark://host:7077``; the
    same code then runs unchanged on the cluster.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    _check_java()
    python = sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    builder = (
        SparkSession.builder.master(spark_master(master))
        .appName(app_name)
        .config("spark.jars", ",".join(delta_jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.pyspark.python", python)
    )
    for key, value in _LOCAL_DEFAULTS.items():
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("REPLAY_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def _check_java() -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise RuntimeError("Java 17 or newer is required by Spark: install a JDK (e.g. openjdk-17)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fetch-jars", action="store_true", help="resolve Delta jars into the cache")
    args = parser.parse_args(argv)
    if args.fetch_jars:
        for jar in fetch_jars():
            print(jar)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
