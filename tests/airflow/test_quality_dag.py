"""replay_quality through real Airflow (dag.test): one mapped validate task per pipeline, failing
visibly when a suite fails or when spark_jobs.quality is missing. The suites themselves are
stubbed here (no Spark); the real ones run where spark_jobs.quality exists."""

from __future__ import annotations

import sys
import types

import pytest
from airflow_helpers import load_dag, task_states, write_pipeline, xcom

pytestmark = pytest.mark.airflow


class Result:
    def __init__(self, success: bool, name: str):
        self.success, self.name = success, name

    def describe(self) -> str:
        return f"{self.name}: " + ("all expectations met" if self.success else "clicks >= 1 failed on 2 rows")


@pytest.fixture
def pipelines(tmp_path, monkeypatch, airflow_db):
    for name in ("good_pipe", "bad_pipe"):
        write_pipeline(tmp_path / f"{name}.yaml", name, tmp_path / "archive", tmp_path / name)
    monkeypatch.setenv("REPLAY_PIPELINES_DIR", str(tmp_path))
    return tmp_path


def fake_quality(monkeypatch):
    module = types.ModuleType("spark_jobs.quality")
    module.validate_pipeline = lambda config: Result(config.name != "bad_pipe", config.name)
    monkeypatch.setitem(sys.modules, "spark_jobs.quality", module)


def mapped_states(dagrun) -> dict[int, str]:
    return {ti.map_index: str(ti.state) for ti in dagrun.get_task_instances() if ti.task_id == "validate"}


def test_one_pipeline_passes(pipelines, monkeypatch):
    fake_quality(monkeypatch)
    run = load_dag("replay_quality").test(run_conf={"pipeline": "good_pipe"})
    assert str(run.state) == "success", task_states(run)
    assert xcom(run, "select_pipelines") == ["good_pipe"]
    assert xcom(run, "validate", map_index=0)["report"] == "good_pipe: all expectations met"


def test_a_failing_suite_fails_its_task_and_the_run(pipelines, monkeypatch):
    fake_quality(monkeypatch)
    run = load_dag("replay_quality").test()  # manual run with no asset events: every pipeline
    assert xcom(run, "select_pipelines") == ["bad_pipe", "good_pipe"]
    assert mapped_states(run) == {0: "failed", 1: "success"}
    assert str(run.state) == "failed"


def test_missing_quality_module_fails_clearly(pipelines, monkeypatch, capfd):
    monkeypatch.setitem(sys.modules, "spark_jobs.quality", None)  # as if it were not installed
    run = load_dag("replay_quality").test(run_conf={"pipeline": "good_pipe"})
    assert str(run.state) == "failed"
    assert mapped_states(run) == {0: "failed"}
    logged = "".join(capfd.readouterr())
    assert "AirflowFailException: spark_jobs.quality.validate_pipeline is not available" in logged
