"""Profile the ingest's parts on a benchmark archive: where a replay's ingest spends its time.

Runs, in one warm Spark session, the jobs ``replay._Replay.ingest`` is made of, each on its own
and repeated (the shortest time is reported, after a first parse that warms the JVM up):

* ``lines``: the JVM reader cutting the archive into lines and checking each as one JSON object;
* ``parse``: the same plus typing and validating the fields (what both of the ingest's reads do);
* ``probe``: the first read, collecting every record's sort keys on the driver (Arrow);
* ``number``: numbering the records in replay order on the driver;
* ``staged``: the second read, looking each record's number up and writing ``staging`` to Delta
  (with the product's table options); ``staged_noop`` the same read without the write;
* ``staged_unnumbered`` and ``keys_back``: what staging the archive in one read would cost: the
  records written without their numbers, then the sort keys read back from that table.

    .venv/bin/python bench/profile_ingest.py --events 10000000

The archive is the one ``python -m bench.harness`` generates (``bench/results/archives``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import PIPELINES, RESULTS, SEED, prepare_archive  # noqa: E402
from spark_jobs.config import parse_config  # noqa: E402
from spark_jobs.execution.ingest import STAGING_LAYOUT  # noqa: E402
from spark_jobs.execution.ordering import driver_key_columns, number_records  # noqa: E402
from spark_jobs.execution.sources import accepted, check_archive, list_archive  # noqa: E402
from spark_jobs.execution.spark_session import get_spark  # noqa: E402
from spark_jobs.execution.state.delta import DeltaStore  # noqa: E402


def shortest(repeats: int, job: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        job()
        times.append(time.perf_counter() - started)
    return round(min(times), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from pyspark.sql import functions as F

    archive = prepare_archive(RESULTS, args.events, SEED, "jsonl")
    data = yaml.safe_load((PIPELINES / "tumbling.yaml").read_text())
    data["source"]["path"] = archive["path"]
    scratch = Path(tempfile.mkdtemp(prefix="profile-ingest-"))
    data["output"] = {"path": str(scratch / "lakehouse")}
    config = parse_config(data)
    spark = get_spark("profile-ingest")
    store = DeltaStore(spark, config)
    files = list_archive(spark, config.source)
    checked = check_archive(spark, config, files).frame
    records = accepted(checked, config)
    wanted = driver_key_columns(config)

    def noop(frame) -> Callable[[], None]:
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def probe():
        return checked.select(F.col("_outcome").isNull().alias("_ok"), *wanted).toArrow()

    def staged(frame, table: str, order: str) -> Callable[[], None]:
        # Without numbers, a pass would find its records by file and line.
        def write() -> None:
            shutil.rmtree(store.path(table), ignore_errors=True)
            store.replace_where(frame.withColumn("_batch", F.lit(0).cast("long"))
                                .withColumn("_ingest", F.lit(0).cast("long")), table, "_ingest = 0",
                                stats_columns=(*order.split(","), "_ingest"), **STAGING_LAYOUT)
        return write

    report: dict[str, object] = {"events": args.events, "archive_bytes": archive["bytes"]}
    try:
        report["first_parse_cold"] = shortest(1, noop(checked))
        report["lines"] = shortest(args.repeats, noop(checked.select("_line")))
        report["parse"] = shortest(args.repeats, noop(checked))
        report["probe"] = shortest(args.repeats, probe)
        outcomes = probe()
        keys = outcomes.filter(outcomes.column("_ok")).drop_columns(["_ok"])
        started = time.perf_counter()
        numbered = number_records(spark, config, records, 0, keys)
        report["number"] = round(time.perf_counter() - started, 2)
        frame = numbered.frame
        report["staged_noop"] = shortest(args.repeats, noop(frame))
        report["staged"] = shortest(args.repeats, staged(frame, "staging", "_seq,_batch"))
        unnumbered = staged(records, "unnumbered", "_file_index,_line")
        report["staged_unnumbered"] = shortest(args.repeats, unnumbered)
        back = store.read("unnumbered").select(*wanted)
        report["keys_back"] = shortest(args.repeats, back.toArrow)
        numbered.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
