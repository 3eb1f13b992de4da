"""The ingest numbers its records on the driver up to ``batch.sort_on_driver_max_records`` and on
the cluster past it: after collecting their keys when the archive's size left room for that many
(within ``DRIVER_SLACK``), or straight away when its lines' count is well over. Up to
``batch.stage_on_driver_max_records`` it reads the archive once and writes its tables from the
driver (``ingest_once``). Every route stages the same rows, with the same types, and replays the
same."""

from __future__ import annotations

import shutil
import signal
import time

import pytest
from replay_helpers import BASE_TS, cli, run_cli, snapshot, table_rows, write_archive, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.execution.operations import run_pipeline
from spark_jobs.execution.state.delta import DeltaStore

pytestmark = pytest.mark.spark

ON_CLUSTER = "numbered on the cluster"


def test_every_numbering_route_replays_the_same(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=200, files=3)
    with open(archive / "part-001.jsonl", "a") as handle:
        handle.write("not json\n")  # a quarantined line counts towards the lines, not the records
    routes = {  # (sort limit, read-once limit): 200 records in 201 lines
        "read once": (200, 1000),
        "driver": (200, 0),
        "keys collected, then the cluster": (190, 0),  # 201 lines within DRIVER_SLACK of 190
        "cluster": (100, 0),  # 201 lines are over 125
    }
    seen = {}
    for route, (limit, once) in routes.items():
        lakehouse = tmp_path / route.replace(" ", "_").replace(",", "")
        config = write_pipeline(
            tmp_path / f"{lakehouse.name}.yaml", archive, lakehouse,
            batch={"max_records": 40, "pass_max_records": 80, "sort_on_driver_max_records": limit,
                   "stage_on_driver_max_records": once},
        )
        run = cli("run", str(config), "--finalize")
        assert run.returncode == 0, run.stderr[-3000:]
        assert (ON_CLUSTER in run.stderr) is (limit < 200), run.stderr[-3000:]
        assert written_by_delta_rs(lakehouse / "staging") is (route == "read once")
        seen[route] = staged_tables(spark, lakehouse)
    assert len(seen["driver"]["staging"]) == 200 and len(seen["driver"]["quarantine"]) == 1
    assert seen["driver"]["window_results"] and seen["driver"]["late_events"]
    for route in routes:
        assert seen[route] == seen["driver"], route


@pytest.mark.in_process_only  # kills a replay process of its own
def test_ingests_of_either_route_mix_and_a_killed_one_is_redone_by_the_other(spark, tmp_path):
    """One table holds ingests staged by both routes; an ingest killed once staged (before its
    source_files rows) is redone from scratch, whichever route redoes it."""
    archive = write_archive(tmp_path / "archive", records=240, files=3)
    later = tmp_path / "part-002.jsonl"
    shutil.move(archive / "part-002.jsonl", later)  # the second ingest's file

    def pipeline(lakehouse, once: bool):
        batch = {"max_records": 40, "pass_max_records": 80,
                 "stage_on_driver_max_records": 1000 if once else 0}
        path = tmp_path / f"{lakehouse.name}-{once}.yaml"
        return str(write_pipeline(path, archive, lakehouse, batch=batch))

    seen = {}
    for name, routes in (("twice", (False, False)), ("mixed", (True, False, True))):
        lakehouse = tmp_path / name
        if len(routes) == 3:  # the first ingest, read once, killed once staged
            crashed = run_cli("run", pipeline(lakehouse, routes[0]), env={"REPLAY_CRASH_AT": "ingest:staged"})
            assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
            assert written_by_delta_rs(lakehouse / "staging")
        first = cli("run", pipeline(lakehouse, routes[-2]))
        assert first.returncode == 0, first.stderr[-3000:]
        shutil.copy(later, archive / "part-002.jsonl")
        second = cli("run", pipeline(lakehouse, routes[-1]), "--finalize")
        assert second.returncode == 0, second.stderr[-3000:]
        (archive / "part-002.jsonl").unlink()
        seen[name] = staged_tables(spark, lakehouse)
    assert len(seen["twice"]["staging"]) == 240 and len(seen["twice"]["replay_log"]) > 1
    assert seen["mixed"] == seen["twice"]


@pytest.mark.parametrize("pending", [False, True], ids=["first run", "batches left pending"])
def test_reads_of_staging_wait_for_a_small_ingest_written_behind(spark, tmp_path, monkeypatch, pending):
    """A read-once ingest's staging is written while the run's passes go on, however slow the
    write: the late events' raw lines (every pass here has late records) and, after a run that
    left batches pending, the staged batches and the pass spanning them and the new ingest's
    wait for it. The same tables as an ingest staged before the passes."""
    archive = write_archive(tmp_path / "archive", records=240, files=3)
    later = tmp_path / "part-002.jsonl"
    shutil.move(archive / "part-002.jsonl", later)
    replace_rows = DeltaStore.replace_rows

    def slow_staging(store, rows, table, *args, **kwargs):
        if table == "staging":
            time.sleep(3)  # longer than the run takes to reach its first read of staging
        return replace_rows(store, rows, table, *args, **kwargs)

    seen = {}
    for name, once in (("before", 0), ("behind", 1000)):
        lakehouse = tmp_path / name
        batch = {"max_records": 40, "pass_max_records": 80, "stage_on_driver_max_records": once}
        path = write_pipeline(tmp_path / f"{name}.yaml", archive, lakehouse, batch=batch)
        if pending:  # 160 records staged, batch 0 replayed (its clock is before the interval's end)
            first = cli("run", str(path), "--until", str(BASE_TS + 60_000))
            assert first.returncode == 0, first.stderr[-3000:]
        shutil.copy(later, archive / "part-002.jsonl")
        with monkeypatch.context() as patch:
            patch.setattr(DeltaStore, "replace_rows", slow_staging)
            summary = run_pipeline(load_config(path), spark=spark, finalize=True, progress=lambda _m: None)
        (archive / "part-002.jsonl").unlink()
        assert summary.finalized and summary.files_ingested == (1 if pending else 3)
        seen[name] = staged_tables(spark, lakehouse)
    assert written_by_delta_rs(tmp_path / "behind" / "staging")
    assert len(seen["before"]["staging"]) == 240 and seen["before"]["late_events"]
    assert seen["behind"] == seen["before"]


def staged_tables(spark, lakehouse) -> dict:
    """What a replay produced, ``staging`` included, and the staged tables' schemas."""
    schemas = {
        f"{table} schema": spark.read.format("delta").load(str(lakehouse / table)).schema.simpleString()
        for table in ("staging", "quarantine")
    }
    return {**snapshot(spark, lakehouse), "staging": table_rows(spark, lakehouse, "staging"), **schemas}


def written_by_delta_rs(table) -> bool:
    """Whether the table's first commit was delta-rs's (Spark's name their engine Apache-Spark)."""
    return "delta-rs" in (table / "_delta_log" / f"{0:020d}.json").read_text()
