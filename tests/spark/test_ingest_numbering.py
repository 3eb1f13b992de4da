"""The ingest numbers its records on the driver up to ``batch.sort_on_driver_max_records`` and on
the cluster past it: after collecting their keys when the archive's size left room for that many
(within ``DRIVER_SLACK``), or straight away when its lines' count is well over. Every route
replays the same."""

from __future__ import annotations

import pytest
from replay_helpers import cli, snapshot, write_archive, write_pipeline

pytestmark = pytest.mark.spark

ON_CLUSTER = "numbered on the cluster"


def test_every_numbering_route_replays_the_same(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=200, files=3)
    with open(archive / "part-001.jsonl", "a") as handle:
        handle.write("not json\n")  # a quarantined line counts towards the lines, not the records
    routes = {  # limit: 200 records in 201 lines
        "driver": 200,
        "keys collected, then the cluster": 190,  # 201 lines within DRIVER_SLACK of 190
        "cluster": 100,  # 201 lines are over 125
    }
    seen = {}
    for route, limit in routes.items():
        lakehouse = tmp_path / route.replace(" ", "_").replace(",", "")
        config = write_pipeline(
            tmp_path / f"{lakehouse.name}.yaml", archive, lakehouse,
            batch={"max_records": 40, "pass_max_records": 80, "sort_on_driver_max_records": limit},
        )
        run = cli("run", str(config), "--finalize")
        assert run.returncode == 0, run.stderr[-3000:]
        assert (ON_CLUSTER in run.stderr) is (route != "driver"), run.stderr[-3000:]
        staged = spark.read.format("delta").load(str(lakehouse / "staging"))
        seen[route] = {
            **snapshot(spark, lakehouse),
            "staging": sorted(map(tuple, staged.select("_file_index", "_line", "_seq", "_batch").collect())),
        }
    assert len(seen["driver"]["staging"]) == 200 and len(seen["driver"]["quarantine"]) == 1
    assert seen["driver"]["window_results"] and seen["driver"]["late_events"]
    assert seen["keys collected, then the cluster"] == seen["driver"]
    assert seen["cluster"] == seen["driver"]
