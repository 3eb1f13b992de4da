"""End to end through real Airflow (dag.test, SQLite metadata DB) and real Spark + Delta: a
generated backfill DAG replays its pipeline interval by interval, re-running an interval adds
nothing, the last interval finalizes, each success emits the pipeline's asset; the reprocess DAG
refuses bad params before touching anything and, with good ones, rewinds and replays."""

from __future__ import annotations

import datetime as dt
import importlib.util

import pytest
from airflow_helpers import (
    BASE_MS,
    asset_event_count,
    load_dag,
    snapshot_files,
    task_states,
    write_events,
    write_pipeline,
    xcom,
)

from spark_jobs.interfaces import orchestration as orch

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.skipif(importlib.util.find_spec("spark_jobs.execution.sources") is None,
                       reason="the archive reader spark_jobs.execution.sources has not landed: "
                       "run_pipeline cannot read an archive yet"),
]

NAME = "e2e_clicks"
HOUR = dt.timedelta(hours=1)
FIRST = dt.datetime.fromtimestamp(BASE_MS / 1000, dt.UTC)  # 2023-11-14T23:00Z, the config's start


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, airflow_db):
    root = tmp_path_factory.mktemp("backfill")
    archive, lakehouse = root / "archive", root / "lakehouse"
    # Two hours of archive, 100 events each (the config's batch size): batch 0 is the first hour,
    # batch 1 the second.
    write_events(archive / "part-000.jsonl", BASE_MS, 100, step_ms=30_000)
    write_events(archive / "part-001.jsonl", BASE_MS + 3_600_000, 100, step_ms=30_000, first_id=100)
    config = write_pipeline(root / "pipelines" / f"{NAME}.yaml", NAME, archive, lakehouse / NAME)
    patch = pytest.MonkeyPatch()
    patch.setenv("REPLAY_PIPELINES_DIR", str(root / "pipelines"))
    patch.setenv("REPLAY_SPARK_MODE", "local")
    patch.delenv("AIRFLOW_VAR_REPLAY_SPARK_MODE", raising=False)
    yield {"root": root, "archive": archive, "output": lakehouse / NAME, "config": config}
    patch.undo()


def run_interval(start: dt.datetime, **conf):
    """One backfill run of the interval [start, start + 1h); its summary, None when its one task
    ended skipped (nothing to do, found without Spark, or no batch due).

    dag.test infers a manual run's data interval as the last complete one before its logical
    date, so the logical date passed is the interval's end.
    """
    run = load_dag(f"replay__{NAME}").test(logical_date=start + HOUR, run_conf=conf or None)
    assert str(run.state) == "success", task_states(run)
    states = task_states(run)
    assert set(states) == {"replay"}
    if states["replay"] == "skipped":
        return None
    summary = xcom(run, "replay")
    assert summary["mode"] == "local"
    assert summary["interval_start_ms"] == int(start.timestamp() * 1000)
    assert summary["interval_end_ms"] == int((start + HOUR).timestamp() * 1000)
    return summary


def rows(spark, output, table: str) -> list[tuple]:
    if not (output / table / "_delta_log").exists():
        return []
    frame = spark.read.format("delta").load(str(output / table))
    return sorted(tuple(r) for r in frame.collect())


def batch_ids(summary) -> list[int]:
    return [b["batch_id"] for b in summary["batches"]]


def test_backfill_two_intervals_rerun_and_finalize(spark, pipeline):
    output, asset = pipeline["output"], orch.pipeline_asset(orch.load_pipeline(pipeline["config"]))
    assert asset_event_count(asset.uri) == 0

    first = run_interval(FIRST)  # ingests both files, replays only the first hour's batch
    assert first["records_accepted"] == 200 and batch_ids(first) == [0]
    results, log = rows(spark, output, "window_results"), rows(spark, output, "replay_log")
    assert results and len(log) == 1
    ends = spark.read.format("delta").load(str(output / "window_results")).agg({"window_end": "max"})
    assert ends.first()[0] <= (FIRST + HOUR).replace(tzinfo=None)
    assert asset_event_count(asset.uri) == 1

    # The same interval again: its batch is committed and no archive file is new, which the check
    # tells from metadata: the run ends there, Spark unused, no asset event.
    assert run_interval(FIRST) is None
    assert rows(spark, output, "window_results") == results
    assert rows(spark, output, "replay_log") == log
    assert asset_event_count(asset.uri) == 1

    last = run_interval(FIRST + HOUR, finalize=True)  # the last interval ends the input
    assert batch_ids(last) == [1, 2] and last["finalized"] and last["watermark"] == 2**63 - 1
    assert len(rows(spark, output, "window_results")) > len(results)
    final_log = spark.read.format("delta").load(str(output / "replay_log")).orderBy("batch_id").collect()
    assert [(r["batch_id"], r["finalize"]) for r in final_log] == [(0, False), (1, False), (2, True)]
    assert asset_event_count(asset.uri) == 2  # the first and the last interval; the re-run none


REPROCESS = {"pipeline": NAME, "from": "2023-11-15T00:10:00Z", "to": "2023-11-15T00:20:00Z",
             "reason": "e2e test"}  # in the second hour: rewinds to batch 1


@pytest.mark.parametrize("change, words", [
    ({"from": "2023-11-15T00:30:00Z"}, "to: must be after from"),
    ({"to": "2023-11-15T00:20:00"}, None),  # no zone: refused by the param's schema
    ({"pipeline": "not_a_pipeline"}, None),
    ({"reason": ""}, None),
])
def test_reprocess_with_bad_params_touches_nothing(spark, pipeline, change, words, capfd):
    from airflow.sdk.exceptions import ParamValidationError

    before = snapshot_files(pipeline["root"])
    dag = load_dag("replay_reprocess")
    if words is None:
        with pytest.raises(ParamValidationError):  # refused when the run is created
            dag.test(run_conf={**REPROCESS, **change})
    else:
        run = dag.test(run_conf={**REPROCESS, **change})
        assert str(run.state) == "failed"
        assert task_states(run) == {"check_params": "failed", "choose_pipeline": "upstream_failed",
                                    f"reprocess__{NAME}": "upstream_failed"}
        assert f"invalid reprocessing params: {words}" in "".join(capfd.readouterr())
    assert snapshot_files(pipeline["root"]) == before


def test_reprocess_rewinds_and_replays_to_the_same_tables(spark, pipeline):
    output, asset = pipeline["output"], orch.pipeline_asset(orch.load_pipeline(pipeline["config"]))
    if not (output / "replay_log").exists():  # run alone (-k): backfill both intervals first
        run_interval(FIRST)
        run_interval(FIRST + HOUR, finalize=True)
    before = {t: rows(spark, output, t) for t in ("window_results", "late_events", "operator_state")}
    events = asset_event_count(asset.uri)
    run = load_dag("replay_reprocess").test(run_conf=REPROCESS)
    assert str(run.state) == "success", task_states(run)
    result = xcom(run, f"reprocess__{NAME}")
    assert result["reprocessed"] and [b["batch_id"] for b in result["batches"]] == [1, 2]
    assert {t: rows(spark, output, t) for t in before} == before  # same archive: same results
    history = spark.read.format("delta").load(str(output / "reprocess_history")).collect()
    assert [(r["reason"], r["from_ms"], r["from_batch"]) for r in history] == [
        ("e2e test", BASE_MS + 4_200_000, 1)]
    assert asset_event_count(asset.uri) == events + 1  # through the alias: quality is scheduled


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("spark_jobs.quality") is None,
                    reason="spark_jobs.quality (validate_pipeline) has not landed")
def test_quality_dag_validates_the_replayed_pipeline(spark, pipeline):
    """The real suites over the tables the backfill wrote (as after the asset event). Slow tier:
    the DAG's wiring is covered by test_quality_dag.py, the suites by tests/quality."""
    if not (pipeline["output"] / "replay_log").exists():  # run alone (-k)
        run_interval(FIRST)
    run = load_dag("replay_quality").test(run_conf={"pipeline": NAME})
    assert str(run.state) == "success", task_states(run)
    report = xcom(run, "validate", map_index=0)
    assert report["pipeline"] == NAME and report["success"]


def test_reprocess_retry_after_a_killed_attempt_finishes_it(spark, pipeline):
    """The reprocess task's first attempt is killed (SIGKILL, a real process running the task's
    callable) after the commit log was rewound; the retry, the same task with the same params,
    finishes the reprocess: the same tables, one history row, and the asset event."""
    import os
    import signal
    import subprocess
    import sys

    output, asset = pipeline["output"], orch.pipeline_asset(orch.load_pipeline(pipeline["config"]))
    if not (output / "replay_log").exists():  # run alone (-k): backfill both intervals first
        run_interval(FIRST)
        run_interval(FIRST + HOUR, finalize=True)
    before = {t: rows(spark, output, t) for t in ("window_results", "late_events", "operator_state")}
    conf = {**REPROCESS, "reason": "retried after a kill"}
    attempt = subprocess.run(
        [sys.executable, "-c", (
            "from spark_jobs.interfaces import orchestration as orch\n"
            "pipelines = {c.name: c.config_path for c in orch.discover_pipelines()}\n"
            f"orch.reprocess_range(orch.parse_reprocess_params({conf!r}, pipelines))\n"
        )],
        env={**os.environ, "REPLAY_CRASH_AT": "reprocess:log-rewound", "SPARK_MASTER": "local[2]"},
        capture_output=True, text=True, timeout=600,
    )
    assert attempt.returncode == -signal.SIGKILL, attempt.stderr[-3000:]
    assert (output / "_replay_operation.json").exists()
    events = asset_event_count(asset.uri)

    run = load_dag("replay_reprocess").test(run_conf=conf)  # the retry
    assert str(run.state) == "success", task_states(run)
    result = xcom(run, f"reprocess__{NAME}")
    assert result["reprocessed"] and [b["batch_id"] for b in result["batches"]] == [1, 2]
    assert {t: rows(spark, output, t) for t in before} == before
    assert not (output / "_replay_operation.json").exists()
    history = spark.read.format("delta").load(str(output / "reprocess_history")).collect()
    reasons = [row["reason"] for row in history]
    assert reasons.count("retried after a kill") == 1
    assert asset_event_count(asset.uri) == events + 1
