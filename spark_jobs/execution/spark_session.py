"""The one SparkSession factory: Delta configured, jars from the project cache, no network.

Delta's JVM jars and Spark's Avro source (``spark-avro``) are resolved once by ``python -m
spark_jobs.execution.spark_session --fetch-jars`` (the set-up step) into ``.cache/ivy`` through
Spark's own Ivy resolver; every later session loads them from there with ``spark.jars``, so runs
never reach Maven Central.

The set-up step also compiles the project's own JVM code (``spark_jobs/execution/jvm``: the JSON Lines
reader) against the installed Spark's jars into ``.cache/ivy/project`` (``--build-jar``, needs a
JDK's ``javac``); sessions load it like Delta's jars.

The set-up step also records which JVM classes a session loads into a class-data-sharing archive
(``--build-class-archive``, JDK AppCDS) under ``.cache/jvm``. A local driver maps them from it
instead of loading thousands of Spark classes from jars: a session starts about 3 s sooner on
this machine. Without the archive, or when the JVM finds it does not match (another JDK build,
another Spark), the driver simply starts the slow way.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError, SparkServerUnavailableError

# The pip package delta-spark 4.4.1 pairs with jar 4.4.1, but the Maven Central this project
# reaches serves io.delta:delta-spark_4.2_2.13 only up to 4.4.0. The Python sides of 4.4.0 and
# 4.4.1 are identical but for their version string, so the 4.4.0 jar is the exact JVM half.
DELTA_PACKAGE = os.environ.get("REPLAY_DELTA_PACKAGE", "io.delta:delta-spark_4.2_2.13:4.4.0")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
JAR_CACHE = Path(os.environ.get("REPLAY_JAR_CACHE", PROJECT_ROOT / ".cache" / "ivy"))
# Hadoop's S3A connector, for archives and tables on S3-compatible object storage (``s3a://``):
# hadoop-aws of the Hadoop PySpark is built on (3.5.0), which brings AWS SDK v2's bundle (~600 MB).
# Resolved by the same Ivy resolver, only on request (``--fetch-s3a-jars``), into a directory of
# its own under the jar cache, and loaded only by sessions with ``REPLAY_S3A=1`` (or
# ``REPLAY_S3A_ENDPOINT`` set): a local user neither downloads nor loads it.
S3A_PACKAGE = os.environ.get("REPLAY_S3A_PACKAGE", "org.apache.hadoop:hadoop-aws:3.5.0")
S3A_JAR_CACHE = JAR_CACHE / "s3a"
# Spark's own Avro data source (``source.format: avro``), of this Spark's version and Scala: not
# part of PySpark's jars. Resolved at set-up (``--fetch-jars``) into a directory of its own beside
# Delta's, and loaded by every session like Delta's jars. Only its own jar: its dependencies (xz,
# scala-parallel-collections) are among PySpark's jars at the same versions.
AVRO_PACKAGE = os.environ.get("REPLAY_AVRO_PACKAGE", "org.apache.spark:spark-avro_2.13:4.2.0")
AVRO_JAR_CACHE = JAR_CACHE / "avro"
CLASS_ARCHIVE_DIR = Path(os.environ.get("REPLAY_CLASS_ARCHIVE_DIR", PROJECT_ROOT / ".cache" / "jvm"))
# A stale or foreign archive is not an error: the JVM falls back to normal class loading, and
# these keep it from printing CDS warnings into every command's output when it does.
#: The driver's log4j2 configuration: quiet from the first line (see the file).
DRIVER_LOG_CONFIG = Path(__file__).resolve().parent / "jvm" / "log4j2-driver.properties"
_QUIET_CDS = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
# HotSpot never JIT-compiles a method over 8000 bytes of bytecode; whole-stage codegen makes such
# methods for wide projections (validating a record, staging it), which then run interpreted, up
# to four times slower (measured: staging 10M records, 40 s against 10 s). Spark's docs name this.
# A run is a short batch process on few cores, where the JVM's own threads take cores from tasks:
# the parallel collector has no concurrent threads (G1's do), and C2 compiles only code called
# 100,000 times rather than 5,000 (the JIT compiled for ~25 s of a 22 s, 1M-event replay, mostly
# code that is warm, not hot). Measured (docs/bench/history.md, "JVM start and warm-up", 24 Nov pm): 1M
# events 21.7 -> ~19 s, 10M 81.1 -> 74.7 s and 147 -> 130 CPU-seconds, one-batch passes no slower.
JVM_OPTIONS = " ".join([
    "-XX:-DontCompileHugeMethods",
    "-XX:+UseParallelGC",
    "-XX:Tier4InvocationThreshold=100000",
    "-XX:Tier4MinInvocationThreshold=50000",
    "-XX:Tier4CompileThreshold=150000",
    "-XX:Tier4BackEdgeThreshold=400000",
])

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
    # The ingest collects on purpose what numbering needs: every record's sort keys (and a big
    # pass's columns) up to batch.sort_on_driver_max_records, 40-80 bytes a record; past it each
    # line's outcome, file and line, 7-9 bytes. Spark's 1 GiB default stops both well within their
    # range (a 100M ingest: "Total size of serialized results ... bigger than maxResultSize").
    "spark.driver.maxResultSize": "0",
    # Fewer, larger Arrow batches: collecting an ingest's 10M sort keys to the driver takes 10 s
    # with batches of 200,000 rows against 13.5 s with the default 10,000.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
    # Caches here are short-lived and read back once or twice (the parsed archive, a pass's
    # output): Spark's column encoders cost more CPU than the bytes they save (measured: the
    # parse cache of 1M events 2.4 s faster, for 4x the local disk it briefly occupies).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.adaptive.enabled": "true",
    # Replaying a table's small log in one task: an overwrite, which lists what it replaces, costs a
    # quarter less than with two (operator_state is overwritten every pass).
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.databricks.delta.retentionDurationCheck.enabled": "true",
    # The product's one MERGE (window_latest) takes its source from the pass's own panes and from
    # window_results' rows of committed batches, which nothing changes while it runs, and keeps the
    # newest pane per window by a unique pane_index: deterministic, so Delta's copy of it (a Spark
    # job of its own) buys nothing. One-pass intervals over a warm Connect server: writes 3.1 ->
    # 2.6 s (median of 8-10).
    "spark.databricks.delta.merge.materializeSource": "none",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


JVM_SOURCES = Path(__file__).resolve().parent / "jvm"


class JarsMissingError(RuntimeError):
    pass


def project_jars() -> list[str]:
    """Every jar a session needs: Delta's and the project's own; raises with the set-up command
    when either is missing."""
    jar = replay_jar_path()
    if not jar.is_file():
        raise JarsMissingError(
            f"the project's JVM code is not built ({jar}); run `make setup` "
            "(or `python -m spark_jobs.execution.spark_session --build-jar`, which needs a JDK's javac)"
        )
    return [*delta_jars(), *avro_jars(), str(jar)]


def replay_jar_path() -> Path:
    """The jar of ``spark_jobs/execution/jvm`` for this Spark version and these sources (it may not exist)."""
    from pyspark import __version__ as spark_version

    digest = hashlib.sha256()
    for source in sorted(JVM_SOURCES.rglob("*.java")):
        digest.update(source.relative_to(JVM_SOURCES).as_posix().encode())
        digest.update(source.read_bytes())
    return JAR_CACHE / "project" / f"replay-spark{spark_version}-{digest.hexdigest()[:12]}.jar"


def build_replay_jar() -> Path:
    """Compile ``spark_jobs/execution/jvm`` against the installed Spark's jars (once per version of both)."""
    import tempfile
    import zipfile

    import pyspark

    target = replay_jar_path()
    if target.is_file():
        return target
    javac = _java_binary("javac")
    if javac is None:
        raise RuntimeError("a JDK's javac is required to build spark_jobs/execution/jvm "
                           "(e.g. openjdk-17-jdk-headless)")
    spark_jars = Path(pyspark.__file__).parent / "jars"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        classes = Path(scratch) / "classes"
        sources = [str(p) for p in sorted(JVM_SOURCES.rglob("*.java"))]
        subprocess.run(
            [javac, "--release", "17", "-nowarn", "-cp", f"{spark_jars}/*", "-d", str(classes), *sources],
            check=True,
        )
        partial = Path(scratch) / target.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        for stale in target.parent.glob("replay-*.jar"):
            stale.unlink(missing_ok=True)
        os.replace(partial, target)  # whole or not at all, even with concurrent set-ups
    return target


def delta_jars() -> list[str]:
    """The cached Delta jars; raises with the set-up command when they are missing."""
    return _cached_jars(JAR_CACHE, "delta-spark", "Delta jars", "`make setup` (or `python -m "
                        "spark_jobs.execution.spark_session --fetch-jars`)")


def fetch_jars() -> list[str]:
    """Resolve Delta and Spark's Avro source (and their dependencies) from Maven Central into the
    project cache."""
    return _fetch_packages(DELTA_PACKAGE, JAR_CACHE, delta_jars) + fetch_avro_jars()


def avro_jars() -> list[str]:
    """The cached spark-avro jar (only it: see ``AVRO_PACKAGE``); raises with the set-up command
    when it is missing."""
    jars = _cached_jars(AVRO_JAR_CACHE, "spark-avro", "Spark's Avro source (spark-avro)",
                        "`make setup` (or `python -m spark_jobs.execution.spark_session --fetch-jars`)")
    return [jar for jar in jars if "spark-avro" in Path(jar).name]


def fetch_avro_jars() -> list[str]:
    """Resolve spark-avro from Maven Central into the jar cache (once)."""
    return _fetch_packages(AVRO_PACKAGE, AVRO_JAR_CACHE, avro_jars)


def _cached_jars(cache: Path, marker: str, what: str, command: str) -> list[str]:
    """The jars under ``cache``/jars, when one of them is named with ``marker``; else raises
    JarsMissingError saying which ``command`` fetches them."""
    jars = sorted((cache / "jars").glob("*.jar"))
    if not any(marker in jar.name for jar in jars):
        raise JarsMissingError(f"{what} are not in {cache}/jars; run {command} once with network access")
    return [str(jar) for jar in jars]


def _fetch_packages(packages: str, cache: Path, cached: Callable[[], list[str]]) -> list[str]:
    """``cached()``, after resolving ``packages`` from Maven Central into ``cache`` with Spark's
    own Ivy resolver (a throw-away local session) if they are not there yet."""
    try:
        return cached()
    except JarsMissingError:
        pass
    # In a child process: spark.jars.packages is resolved by spark-submit when a process starts its
    # JVM, so a second fetch in this process (Delta's, then spark-avro's on a fresh clone) would
    # reuse the first one's JVM and silently resolve nothing.
    subprocess.run(
        [sys.executable, "-c", _RESOLVE, packages, str(cache)], check=True, stdout=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"},
    )
    return cached()


_RESOLVE = """
import sys
from pyspark.sql import SparkSession
(SparkSession.builder.master("local[1]").appName("fetch-jars")
 .config("spark.jars.packages", sys.argv[1]).config("spark.jars.ivy", sys.argv[2])
 .config("spark.ui.enabled", "false").getOrCreate().stop())
"""


def s3a_enabled() -> bool:
    """Whether sessions load the S3A connector: ``REPLAY_S3A=1``, or an endpoint configured."""
    return os.environ.get("REPLAY_S3A", "") not in ("", "0") or bool(os.environ.get("REPLAY_S3A_ENDPOINT"))


def s3a_jars() -> list[str]:
    """The cached S3A jars (hadoop-aws and the AWS SDK bundle); raises with the fetch command."""
    return _cached_jars(S3A_JAR_CACHE, "hadoop-aws", "the S3A connector's jars",
                        "`python -m spark_jobs.execution.spark_session --fetch-s3a-jars`")


def fetch_s3a_jars() -> list[str]:
    """Resolve hadoop-aws and its AWS SDK bundle from Maven Central into the jar cache."""
    return _fetch_packages(S3A_PACKAGE, S3A_JAR_CACHE, s3a_jars)


def s3a_conf() -> dict[str, str]:
    """S3A settings for an S3-compatible endpoint, from the environment; no credentials here.

    ``REPLAY_S3A_ENDPOINT`` (e.g. ``http://127.0.0.1:8333``) sets the endpoint with path-style
    access (what non-AWS servers need); the keys come from S3A's default credential chain, which
    reads ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` from the environment of the driver (and
    Spark copies them into the job's Hadoop configuration for the executors). Any
    ``spark.hadoop.fs.s3a.*`` the caller passes wins.
    """
    settings = {
        # Archive change detection compares size and modification time (S3: Last-Modified);
        # the ETag as the file checksum is there for tools that want it.
        "spark.hadoop.fs.s3a.etag.checksum.enabled": "true",
        # A lease (the pipeline lock) is created with If-None-Match: * where the store supports it.
        "spark.hadoop.fs.s3a.create.conditional.enabled": "true",
    }
    endpoint = os.environ.get("REPLAY_S3A_ENDPOINT")
    if endpoint:
        settings.update({
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": os.environ.get("AWS_REGION", "us-east-1"),
            "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        })
    return settings


def spark_master(master: str | None = None) -> str:
    return master or os.environ.get("SPARK_MASTER") or "local[*]"


def spark_remote(remote: str | None = None) -> str | None:
    """The Spark Connect server to use (``--remote``, else ``SPARK_REMOTE``), or None: in-process."""
    return remote or os.environ.get("SPARK_REMOTE") or None


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no driver JVM on this side).

    By the class's module, so that an in-process run never imports the Connect client (~3.5 s).
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_spark(
    app_name: str = "replay", master: str | None = None, conf: dict[str, Any] | None = None,
    remote: str | None = None,
):
    """Return the active session, or build one with Delta and sensible local settings.

    ``master`` (or ``SPARK_MASTER``) may be a standalone URL such as ``spark://host:7077``; the
    same code then runs unchanged on the cluster. ``remote`` (or ``SPARK_REMOTE``), a Spark
    Connect address such as ``sc://localhost:15002``, makes this process a thin client of that
    server (``replay server start``), which holds Delta's jars and the settings instead.
    """
    from pyspark.sql import SparkSession

    url = spark_remote(remote)
    if url is not None:
        return _connect_session(url, app_name)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    _check_java()
    # py4j logs "Closing down clientserver connection" at INFO from an exit hook, after pytest or
    # Airflow closed the stream its handler writes to: a "--- Logging error ---" traceback at the
    # end of a green run. Its warnings stay.
    if logging.getLogger("py4j").level == logging.NOTSET:
        logging.getLogger("py4j").setLevel(logging.WARNING)
    python = sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    builder = SparkSession.builder.master(spark_master(master)).appName(app_name)
    for key, value in session_conf(conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("REPLAY_SPARK_LOG_LEVEL", "ERROR"))
    return spark


def connect_address(url: str) -> tuple[str, int]:
    """``(host, port)`` of a Spark Connect URL ``sc://host[:port][/;param=value...]``."""
    if not url.startswith("sc://"):
        raise ConfigError("--remote", f"a Spark Connect URL starts with sc://, not {url!r}")
    netloc = url.removeprefix("sc://").split("/", 1)[0]
    host, _, port = netloc.rpartition(":") if ":" in netloc else (netloc, "", "15002")
    if not host or not port.isdigit():
        raise ConfigError("--remote", f"not a Spark Connect URL (sc://host:port): {url!r}")
    return host.strip("[]"), int(port)


def _connect_session(url: str, app_name: str):
    """A Spark Connect session of its own on the server at ``url`` (sessions are isolated: their
    temporary views, settings and artifacts are not shared). Built through PySpark's own builder,
    which also switches ``pyspark.sql.functions`` to Connect for the rest of the process.

    A server that does not answer is a clear error at once: PySpark's client would retry an
    unreachable address with back-off for minutes before failing."""
    from pyspark.sql import SparkSession

    host, port = connect_address(url)
    try:
        socket.create_connection((host, port), timeout=5.0).close()
    except OSError as error:
        raise SparkServerUnavailableError(
            # The address only: the URL's parameters may hold the token.
            f"no Spark Connect server answers at sc://{host}:{port} ({error.strerror or error}); start one "
            "with `replay server start`, or unset SPARK_REMOTE (and --remote) to run Spark in "
            "this process"
        ) from None

    return SparkSession.builder.remote(url).appName(app_name).getOrCreate()


def driver_jars() -> list[str]:
    """The jars a replay driver loads: Delta's and the project's, and S3A's when it is on. (Also
    what ``spark-submit`` is given: jars named only once the JVM runs would not reach its class path.)"""
    return project_jars() + (s3a_jars() if s3a_enabled() else [])


def session_conf(conf: dict[str, Any] | None = None) -> dict[str, str]:
    """Every Spark setting a replay driver gets: the cached jars (Delta's and the project's own),
    Delta's SQL extension and catalog, the local defaults and the JVM options, then ``conf``.

    The one home of them: ``get_spark`` builds its session from it, and the Spark Connect server
    (``connect_server``) passes the same settings to ``spark-submit``.
    """
    settings: dict[str, Any] = {
        "spark.jars": ",".join(driver_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.pyspark.python": sys.executable,
        **_LOCAL_DEFAULTS,
        **(s3a_conf() if s3a_enabled() else {}),
    }
    conf = dict(conf or {})
    # The caller's own JVM options come last, so that they win.
    driver_options = [JVM_OPTIONS, f"-Dlog4j2.configurationFile={DRIVER_LOG_CONFIG.as_uri()}",
                      conf.get("spark.driver.extraJavaOptions", "")]
    archive = class_archive_path()
    if archive.is_file():
        driver_options.insert(0, f"-XX:SharedArchiveFile={archive} {_QUIET_CDS}")
    conf["spark.driver.extraJavaOptions"] = " ".join(o for o in driver_options if o)
    executor_options = conf.get("spark.executor.extraJavaOptions", "")
    conf["spark.executor.extraJavaOptions"] = f"{JVM_OPTIONS} {executor_options}".strip()
    settings.update(conf)
    return {key: str(value) for key, value in settings.items()}


def class_archive_path() -> Path:
    """This machine's class-data archive for the driver JVM (it may not exist yet).

    Named after what it was built from (the Spark version, where its jars are and the ``java``
    binary), so that an upgrade of either, or a project moved or copied with its ``.cache``, makes
    set-up build a new one rather than keep one the JVM refuses (it checks the class path).
    """
    import pyspark

    java = _java_binary()
    java_id = f"{os.path.realpath(java)}:{os.stat(java).st_mtime_ns}" if java else "none"
    jars = os.path.realpath(os.path.dirname(pyspark.__file__))
    digest = hashlib.sha256(f"{pyspark.__version__}|{jars}|{java_id}".encode()).hexdigest()[:12]
    return CLASS_ARCHIVE_DIR / f"driver-spark{pyspark.__version__}-{digest}.jsa"


def build_class_archive() -> Path | None:
    """Run a representative session in a child process and archive the classes it loaded.

    The JVM writes the archive when it exits; returns its path, or None if none was written
    (the product works the same without it, only starts slower).
    """
    target = class_archive_path()
    if target.is_file():
        return target
    print(f"setup: archiving the Spark driver's classes into {target.parent} (once, about half a minute)",
          file=sys.stderr, flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Per process: two set-ups running at once must not write into the same file.
    partial = target.with_suffix(f".{os.getpid()}.partial")
    try:
        subprocess.run(
            [sys.executable, "-m", "spark_jobs.execution.spark_session", "--class-archive-workload",
             str(partial)],
            check=True, stdout=subprocess.DEVNULL,
            # The archive is of an in-process driver's classes, even for a user of a Connect server.
            env={k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"},
        )
        if not partial.is_file():
            return None
        for stale in target.parent.glob("driver-*.jsa"):
            if stale != target:
                stale.unlink(missing_ok=True)  # a running JVM keeps its mapping of an unlinked file
        os.replace(partial, target)
        return target
    finally:
        partial.unlink(missing_ok=True)


def _class_archive_workload(partial: Path) -> None:
    """What a replay's driver does, in miniature: JSON parsing, Arrow UDFs, Delta writes and MERGE."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    spark = get_spark("class-archive", conf={
        "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={partial} {_QUIET_CDS}",
    })
    scratch = partial.with_suffix(".workload")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        lines = spark.range(1000).select(F.to_json(F.struct(
            (F.col("id") * 1000).alias("ts"), (F.col("id") % 7).cast("string").alias("key"),
        )).alias("raw"))
        parsed = lines.select(F.from_json("raw", "ts string, key string").alias("j")).select("j.*")
        typed = parsed.select(F.col("ts").try_cast("bigint").alias("ts"), "key")

        def passthrough(left: pa.Table, right: pa.Table) -> pa.Table:
            return left

        grouped = typed.groupBy("key").cogroup(typed.groupBy("key")).applyInArrow(
            passthrough, "ts long, key string"
        )
        grouped.write.format("delta").mode("overwrite").save(str(scratch / "t"))
        from delta.tables import DeltaTable

        (
            DeltaTable.forPath(spark, str(scratch / "t")).alias("t")
            .merge(typed.alias("s"), "t.key = s.key AND t.ts = s.ts")
            .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
        )
        spark.read.format("delta").load(str(scratch / "t")).groupBy("key").count().toArrow()
    finally:
        gateway = spark.sparkContext._gateway.proc  # the driver JVM process
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    # The JVM exits when its stdin closes and writes the archive on the way out: wait for that.
    gateway.stdin.close()
    gateway.wait(timeout=300)


def _java_binary(tool: str = "java") -> str | None:
    """The JDK tool spark-submit's JVM comes with: ``$JAVA_HOME/bin/<tool>``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", tool)):
        return os.path.join(home, "bin", tool)
    return shutil.which(tool)


def _check_java() -> None:
    if not _java_binary():
        raise RuntimeError("Java 17 or newer is required by Spark: install a JDK (e.g. openjdk-17)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fetch-jars", action="store_true",
                        help="resolve Delta's and spark-avro's jars into the cache")
    parser.add_argument("--fetch-s3a-jars", action="store_true",
                        help="resolve the S3A connector (hadoop-aws, AWS SDK bundle) into the cache")
    parser.add_argument("--build-jar", action="store_true",
                        help="compile spark_jobs/execution/jvm into the cache")
    parser.add_argument(
        "--build-class-archive", action="store_true",
        help="archive the driver JVM's classes for faster session start (once, after --fetch-jars)",
    )
    parser.add_argument("--class-archive-workload", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fetch_jars:
        for jar in fetch_jars():
            print(jar)
    if args.fetch_s3a_jars:
        for jar in fetch_s3a_jars():
            print(jar)
    if args.build_jar:
        print(build_replay_jar())
    if args.build_class_archive:
        print(build_class_archive() or "no class archive written (sessions start without one)")
    if args.class_archive_workload:
        _class_archive_workload(args.class_archive_workload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
