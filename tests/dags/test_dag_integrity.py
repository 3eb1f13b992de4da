"""DAG integrity: every file under dags/ imports cleanly, without Spark, and every DAG is wired as
intended (tags, retries, schedule, task ids, params, assets); one backfill DAG per config file."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spark_jobs.interfaces import orchestration as orch

pytestmark = pytest.mark.airflow

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p.name for p in DAGS_FOLDER.glob("*.py"))
BACKFILL_TASKS = {"replay"}


def load_dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_FOLDER))


@pytest.fixture(scope="module")
def dagbag():
    return load_dagbag()


@pytest.fixture(scope="module")
def configs():
    return orch.discover_pipelines()


@pytest.mark.parametrize("name", DAG_FILES)
def test_file_imports_without_errors(dagbag, name):
    errors = {Path(k).name: v for k, v in dagbag.import_errors.items()}
    assert name not in errors, errors.get(name)


@pytest.mark.parametrize("name", DAG_FILES)
def test_dag_files_stay_thin(name):
    lines = (DAGS_FOLDER / name).read_text().count("\n")
    assert lines <= 100, f"{name} has {lines} lines: move logic into spark_jobs/interfaces/orchestration.py"


def test_every_dag_has_tags_owner_retries_timeout(dagbag):
    assert dagbag.dags
    for dag in dagbag.dags.values():
        assert dag.tags and "flink-replay" in dag.tags, dag.dag_id
        assert dag.doc_md, dag.dag_id
        dag.check_cycle()
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag.dag_id}.{task.task_id} retries={task.retries}"
            assert task.owner == orch.OWNER, f"{dag.dag_id}.{task.task_id}"
            assert task.execution_timeout is not None, f"{dag.dag_id}.{task.task_id}"


def test_one_backfill_dag_per_config_file(dagbag, configs):
    files = sorted([*orch.pipelines_dir().glob("*.yaml"), *orch.pipelines_dir().glob("*.yml")])
    assert len(files) == len(configs) >= 1
    backfills = {d for d in dagbag.dag_ids if d.startswith("replay__")}
    assert backfills == {f"replay__{c.name}" for c in configs}
    assert set(dagbag.dag_ids) == backfills | {"replay_reprocess", "replay_quality"}


def test_backfill_dags_schedule_and_tasks(dagbag, configs):
    for config in configs:
        dag = dagbag.dags[orch.dag_id(config)]
        assert {t.task_id for t in dag.tasks} == BACKFILL_TASKS  # one task a run: check, then replay
        assert type(dag.timetable) is type(orch.timetable(config))
        assert dag.catchup is True and dag.max_active_runs == 1
        assert dag.start_date == orch.start_date(config)
        assert dag.end_date == orch.end_date(config) is not None  # every shipped config has an end
        assert dag.is_paused_upon_creation is True  # unpausing starts the catch-up: the user's call
        assert dag.params["finalize"] is False
        asset = orch.pipeline_asset(config)
        task = dag.get_task("replay")
        assert [o.uri for o in task.outlets] == [asset.uri]
        assert task.pool == orch.pool_name(config) == f"replay__{config.name}"
        submit = task  # its spark-submit mode
        assert submit.application.endswith("spark_jobs/execution/jobs/replay_job.py")
        assert submit._conn_id == "spark_default"


def test_shipped_config_schedule(configs):
    """The demo: six 10-minute intervals over the archive's span, the last one ending the input."""
    config = next(c for c in configs if c.name == "clicks_per_minute")
    assert orch.timetable(config).delta == dt.timedelta(minutes=10)
    assert orch.start_date(config) == dt.datetime(2023, 11, 14, 22, tzinfo=dt.UTC)
    assert orch.end_date(config) < dt.datetime(2023, 11, 14, 23, tzinfo=dt.UTC)
    assert not orch.ends_input(config, dt.datetime(2023, 11, 14, 22, 50, tzinfo=dt.UTC))
    assert orch.ends_input(config, dt.datetime(2023, 11, 14, 23, tzinfo=dt.UTC))


def test_reprocess_dag(dagbag, configs):
    dag = dagbag.dags["replay_reprocess"]
    assert dag.schedule is None  # manual trigger only
    per_pipeline = {f"reprocess__{c.name}" for c in configs}
    assert {t.task_id for t in dag.tasks} == {"check_params", "choose_pipeline"} | per_pipeline
    assert dag.get_task("choose_pipeline").downstream_task_ids == per_pipeline
    for config in configs:  # in the pipeline's pool: a reprocess queues behind its backfill runs
        assert dag.get_task(f"reprocess__{config.name}").pool == orch.pool_name(config)
    assert dag.is_paused_upon_creation is False
    assert dag.params.get_param("pipeline").schema["enum"] == sorted(c.name for c in configs)
    assert {"pipeline", "from", "to", "reason"} <= set(dag.params.keys())


def test_quality_dag_is_scheduled_on_pipeline_assets(dagbag, configs):
    dag = dagbag.dags["replay_quality"]
    assert {t.task_id for t in dag.tasks} == {"select_pipelines", "validate"}
    assert dag.is_paused_upon_creation is False and dag.max_active_runs == 1
    scheduled = {a.uri for a in dag.timetable.asset_condition.objects}
    assert scheduled == {orch.pipeline_asset(c).uri for c in configs}


def test_parsing_imports_no_spark_and_touches_nothing(tmp_path):
    """A fresh interpreter parses dags/ without importing pyspark or delta, and writes no files."""
    script = textwrap.dedent(f"""
        import sys
        from airflow.dag_processing.dagbag import DagBag
        bag = DagBag(dag_folder={str(DAGS_FOLDER)!r})
        assert not bag.import_errors, bag.import_errors
        loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'py4j'))
        assert not loaded, loaded
        print(len(bag.dags))
    """)
    env = {**os.environ, "REPLAY_BASE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) >= 3
    assert list(tmp_path.iterdir()) == []


def write_config(path: Path, name: str, **extra) -> Path:
    import yaml

    config = {
        "name": name,
        "source": {"path": "archive", "format": "jsonl", "event_time": "ts"},
        "key": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "output": {"path": f"lakehouse/{name}"},
        "schedule": {"interval": "15m", "start": "2024-01-01T00:00:00Z"},
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_dags_are_generated_from_the_pipelines_dir(tmp_path, monkeypatch):
    from airflow.sdk import DeltaDataIntervalTimetable

    write_config(tmp_path / "a.yaml", "alpha")
    write_config(tmp_path / "b.yaml", "beta",
                 schedule={"interval": "@daily", "start": "2024-02-01T00:00:00Z"})
    monkeypatch.setenv("REPLAY_PIPELINES_DIR", str(tmp_path))
    bag = load_dagbag()
    assert not bag.import_errors
    assert {d for d in bag.dag_ids if d.startswith("replay__")} == {"replay__alpha", "replay__beta"}
    alpha = bag.dags["replay__alpha"]
    assert isinstance(alpha.timetable, DeltaDataIntervalTimetable)
    assert alpha.start_date == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert bag.dags["replay__beta"].timetable.expression == "0 0 * * *"
    assert bag.dags["replay_reprocess"].params.get_param("pipeline").schema["enum"] == ["alpha", "beta"]


def test_a_bad_config_is_an_import_error_naming_the_field(tmp_path, monkeypatch):
    write_config(tmp_path / "a.yaml", "alpha", schedule={"interval": "@sometimes", "start": "2024-01-01Z"})
    monkeypatch.setenv("REPLAY_PIPELINES_DIR", str(tmp_path))
    errors = load_dagbag().import_errors
    assert {Path(k).name for k in errors} == set(DAG_FILES)
    assert all("schedule.interval" in text for text in errors.values())
