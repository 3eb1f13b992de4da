"""The contract's worked example (semantics.md), through the real CLI into real Delta tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

# id, frequency, event time: the seed article's log (key "a").
RECORDS = [
    (1, 2, 1662303772840), (2, 1, 1662303770844), (3, 3, 1662303773848), (4, 2, 1662303774866),
    (5, 1, 1662303777839), (6, 2, 1662303784887), (7, 3, 1662303776894), (8, 1, 1662303786891),
    (9, 5, 1662303778877), (10, 4, 1662303791904), (11, 1, 1662303795918), (12, 6, 1662303779883),
    (13, 2, 1662303846254),
]
MINUTE = 60_000
W1 = 1662303720000  # the window holding ids 1-5, 7 ([23:02, 23:03) in the seed's UTC+8 log)

PIPELINE = """
name: worked_example
source: {{path: {archive}, format: jsonl, event_time: ts, id: id, types: {{frequency: long}}}}
key: [word]
watermark: {{max_out_of_orderness: 5s, emit: per_record}}
window: {{type: tumbling, size: 1m}}
trigger: {{type: continuous_event_time, interval: 10s}}
allowed_lateness: 0s
late_output: side_output
aggregates: {{frequency: sum(frequency), ids: collect_list(id)}}
output: {{path: {output}}}
"""


def write_example(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    with open(archive / "words.jsonl", "w") as handle:
        for rid, freq, ts in RECORDS:
            handle.write(json.dumps({"id": str(rid), "word": "a", "frequency": freq, "ts": ts}) + "\n")
    config = tmp_path / "pipeline.yaml"
    config.write_text(PIPELINE.format(archive=archive, output=tmp_path / "lakehouse"))
    return config


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARK_MASTER": "local[2]"}
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.interfaces.cli", *args], capture_output=True, text=True, env=env,
        timeout=600,
    )


@pytest.mark.parametrize("batch_size", [1, 3, 13])
def test_worked_example_is_reproduced_for_every_batch_size(spark, tmp_path, batch_size):
    config = write_example(tmp_path)
    done = run_cli("run", str(config), "--batch-size", str(batch_size), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    lakehouse = tmp_path / "lakehouse"
    rows = (
        spark.read.format("delta").load(str(lakehouse / "window_results"))
        .orderBy("emit_seq", "emit_step", "fire_time").collect()
    )
    panes = [
        (
            int(r.window_start.timestamp() * 1000) - W1, r.pane_index, r.timing,
            r.fire_time - int(r.window_start.timestamp() * 1000) if r.fire_time is not None else None,
            r.ids, r.frequency,
        )
        for r in rows
    ]
    late_ids = ["6", "8", "10", "11"]
    expected = [(0, 0, "ON_TIME", MINUTE - 1, ["1", "2", "3", "4", "5", "7"], 12)]
    expected += [(MINUTE, i, "EARLY", 10_000 * (i + 1), late_ids, 8) for i in range(5)]
    expected += [(MINUTE, 5, "ON_TIME", MINUTE - 1, late_ids, 8)]
    expected += [(2 * MINUTE, i, "EARLY", 10_000 * (i + 1), ["13"], 2) for i in range(5)]
    expected += [(2 * MINUTE, 5, "ON_TIME", MINUTE - 1, ["13"], 2)]
    assert panes == expected

    late = spark.read.format("delta").load(str(lakehouse / "late_events")).orderBy("_seq").collect()
    assert [r.record_id for r in late] == ["9", "12"]
    assert all(r.reason == "window_closed" for r in late)
    assert json.loads(late[0].raw)["frequency"] == 5

    latest = spark.read.format("delta").load(str(lakehouse / "window_latest")).collect()
    expected_latest = [(0, "ON_TIME"), (5, "ON_TIME"), (5, "ON_TIME")]
    assert sorted((r.pane_index, r.timing) for r in latest) == expected_latest
    state = spark.read.format("delta").load(str(lakehouse / "operator_state"))
    assert state.count() == 0, "closed windows must leave the state"
    log = spark.read.format("delta").load(str(lakehouse / "replay_log"))
    assert log.count() == -(-13 // batch_size) + 1
    assert log.agg({"records": "sum"}).first()[0] == 13
