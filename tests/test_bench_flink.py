"""The benchmark's Apache Flink reference (``bench/flink``) against the replay, on the same events.

Flink 2's own ``WindowOperator`` runs each benchmark scenario (tumbling with a continuous
event-time trigger, sliding, merging session windows; allowed lateness and a late side output)
on the generator's archive (out of order, late, duplicated and corrupt records included) read in
replay order; the replay runs the same scenario with ``finalize``. Both must reject the same
lines, send the same records to the late output and emit the same panes (key, window, count, sum,
distinct count), as the product promises Flink's answers.

Slow tier: the first run builds the job and resolves Flink's jars from Maven Central into
``.cache/m2``. Skipped where Maven or Java is missing (the benchmark then skips Flink too).
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from bench import harness as bench

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(not bench.flink_available(), reason="the Flink reference needs mvn and java"),
]


@pytest.mark.parametrize("scenario", bench.SCENARIOS)
def test_flink_and_the_replay_give_the_same_panes(spark, tmp_path: Path, scenario: str) -> None:
    from pyspark.sql import functions as F

    from spark_jobs.execution.operations import run_pipeline

    archive = bench.prepare_archive(tmp_path, 30_000, 7, "jsonl")
    spec = {"scenario": scenario, "events": 30_000, "archive": archive["path"], "format": "jsonl",
            "split": bench.split_archive(archive, 1), "classpath": bench.flink_classpath(),
            "workdir": str(tmp_path / "flink")}
    subprocess.run(bench.flink_command(spec), check=True, capture_output=True, timeout=600)
    flink = Path(spec["workdir"]) / "out"
    rows = [line.split(",") for part in flink.glob("panes.csv-*") for line in part.read_text().splitlines()]
    flink_panes = Counter(
        (key, int(start), int(end), int(count), round(float(total), 6), int(distinct))
        for key, start, end, count, total, distinct in rows
    )
    flink_late = sorted(
        (key, int(ts)) for part in flink.glob("late.csv-*")
        for key, ts, _ in (line.split(",") for line in part.read_text().splitlines())
    )
    measured = bench.flink_result(spec)

    config = bench._scenario_config(spec, tmp_path / "replay", batch_size=4_000)
    summary = run_pipeline(config, spark, finalize=True)
    lakehouse = tmp_path / "replay" / "lakehouse"
    [key] = config.key
    count, total, distinct = [name for name, _ in config.outputs()]  # as bench/pipelines declares them
    rows = spark.read.format("delta").load(str(lakehouse / "window_results")).select(
        key, F.unix_millis("window_start"), F.unix_millis("window_end"), count, total, distinct
    ).collect()
    replay_panes = Counter((r[0], r[1], r[2], r[3], round(r[4], 6), r[5]) for r in rows)
    replay_late = sorted(
        (r[0], r[1]) for r in spark.read.format("delta").load(str(lakehouse / "late_events"))
        .select(key, "event_time").collect()
    )

    assert measured["records_accepted"] == summary.records_accepted
    assert measured["records_rejected"] == summary.records_quarantined > 0
    assert len(replay_late) > 0 and replay_late == flink_late
    assert sum(replay_panes.values()) > 100
    assert replay_panes == flink_panes
