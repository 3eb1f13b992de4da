"""What Spark's per-key path costs around the operator: a pass's records through
``groupBy().cogroup().applyInArrow()`` (the executors' path) with a function that does nothing,
against ``groupBy().applyInArrow()``, against one Arrow stream per partition cut into keys by the
function itself (``repartition`` by key, ``sortWithinPartitions``, ``mapInArrow``) and against
bringing them to the driver (``toArrow``, the driver's path), in one warm JVM.

    .venv/bin/python bench/profile_cogroup.py --events 1000000 --key user_id

The records are the benchmark archive's (``python -m bench.harness`` generates it under
``bench/results/archives``), staged once into a Delta table under ``--workdir`` with the columns a
session pass reads. Each line printed is one repeat; the first pays the JVM's warm-up.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import RESULTS, SEED, prepare_archive  # noqa: E402
from spark_jobs.execution.spark_session import get_spark  # noqa: E402

SCHEMA = "user_id string, page string, ts long, value double"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--key", default="user_id", choices=["user_id", "page"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=RESULTS / "profile-cogroup")
    args = parser.parse_args()
    from pyspark.sql import functions as F

    archive = prepare_archive(RESULTS, args.events, SEED, "jsonl")
    spark = get_spark("profile-cogroup")
    staged = args.workdir / f"staged-{args.events}"
    if not staged.exists():
        lines = spark.read.schema(SCHEMA).json(archive["path"])
        (lines.where(F.col("ts").isNotNull() & F.col(args.key).isNotNull())
         .select(args.key, F.monotonically_increasing_id().alias("_seq"), F.col("ts").alias("_event_time"),
                 "value", "page" if args.key != "page" else "user_id")
         .write.format("delta").save(str(staged)))
    records = spark.read.format("delta").load(str(staged))
    state = spark.createDataFrame([], f"{args.key} string, window_start_ms long")
    out = f"{args.key} string, n long"

    def cogrouped(key, left, right):
        return pa.table({args.key: [key[0].as_py()], "n": [left.num_rows]})

    def grouped(key, table):
        return pa.table({args.key: [key[0].as_py()], "n": [table.num_rows]})

    def streamed(batches):
        # What a per-partition function would do: read its sorted batches and cut them into keys
        # (here only counted: a key spanning two batches counts twice, as the timing does not care).
        for batch in batches:
            table = pa.Table.from_batches([batch])
            keys = pc.unique(table.column(args.key))
            yield pa.record_batch({args.key: keys, "n": pa.array([0] * len(keys), pa.int64())})

    for repeat in range(args.repeats):
        mark = time.perf_counter()
        rows = records.toArrow().num_rows
        to_driver = time.perf_counter() - mark
        mark = time.perf_counter()
        keys = (records.groupBy(args.key).cogroup(state.groupBy(args.key))
                .applyInArrow(cogrouped, out).toArrow().num_rows)
        cogroup = time.perf_counter() - mark
        mark = time.perf_counter()
        records.groupBy(args.key).applyInArrow(grouped, out).toArrow()
        group = time.perf_counter() - mark
        mark = time.perf_counter()
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        (records.repartition(partitions, args.key).sortWithinPartitions(args.key, "_seq")
         .mapInArrow(streamed, out).toArrow())
        stream = time.perf_counter() - mark
        print(f"repeat {repeat + 1}: {rows:,} records, {keys:,} keys: toArrow {to_driver:.2f} s, "
              f"cogroup applyInArrow {cogroup:.2f} s, groupBy applyInArrow {group:.2f} s, "
              f"repartition + mapInArrow {stream:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
