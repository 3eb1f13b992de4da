"""spark_jobs.interfaces.orchestration and the replay_job entry point without Spark: params, schedules,
optional components, spark-submit wiring."""

from __future__ import annotations

import datetime as dt
import json
import sys
import types
from pathlib import Path

import pytest
from airflow_helpers import write_pipeline

from spark_jobs.exceptions import ConfigError
from spark_jobs.interfaces import orchestration as orch

pytestmark = pytest.mark.airflow

PIPELINES = {"clicks": "/p/clicks.yaml", "orders": "/p/orders.yaml"}
GOOD = {"pipeline": "clicks", "from": "2023-11-14T22:10:00Z", "to": "2023-11-14T22:20:00+00:00",
        "reason": "late partner upload"}


def test_reprocess_params_accepted():
    request = orch.parse_reprocess_params(GOOD, PIPELINES)
    assert request == orch.ReprocessRequest("clicks", "/p/clicks.yaml", 1_699_999_800_000,
                                            1_700_000_400_000, "late partner upload")


@pytest.mark.parametrize("change, field, words", [
    ({"pipeline": "nope"}, "pipeline", "must be one of clicks, orders"),
    ({"pipeline": None}, "pipeline", "must be one of"),
    ({"from": "yesterday"}, "from", "not an ISO-8601"),
    ({"from": ""}, "from", "is required"),
    ({"to": "2023-11-14T22:20:00"}, "to", "needs a time zone"),
    ({"to": "2023-11-14T22:10:00Z"}, "to", "must be after from"),
    ({"to": "2023-11-14T22:00:00Z"}, "to", "must be after from"),
    ({"reason": "   "}, "reason", "non-empty"),
    ({"reason": None}, "reason", "non-empty"),
])
def test_reprocess_params_rejected_with_the_field_named(change, field, words):
    with pytest.raises(ConfigError) as raised:
        orch.parse_reprocess_params({**GOOD, **change}, PIPELINES)
    assert raised.value.field == field and words in str(raised.value)


def config_at(tmp_path: Path, name: str = "p", **overrides):
    path = write_pipeline(tmp_path / f"{name}.yaml", name, tmp_path / "archive", tmp_path / "out",
                          **overrides)
    return orch.load_pipeline(path)


def test_schedule_defaults_and_kinds(tmp_path):
    from airflow.sdk import CronDataIntervalTimetable, DeltaDataIntervalTimetable

    hourly = config_at(tmp_path, schedule={"start": "2024-01-01T00:00:00+02:00"})
    assert orch.timetable(hourly).expression == "0 * * * *"
    assert orch.start_date(hourly).isoformat() == "2023-12-31T22:00:00+00:00"
    cron = config_at(tmp_path, schedule={"interval": "*/15 * * * *", "start": "2024-01-01T00:00:00Z"})
    assert isinstance(orch.timetable(cron), CronDataIntervalTimetable)
    delta = config_at(tmp_path, schedule={"interval": "30m", "start": "2024-01-01T00:00:00Z"})
    assert isinstance(orch.timetable(delta), DeltaDataIntervalTimetable)


@pytest.mark.parametrize("schedule, field, words", [
    ({"interval": "@sometimes", "start": "2024-01-01T00:00:00Z"}, "schedule.interval", "must be one of"),
    ({"interval": "61 * * * *", "start": "2024-01-01T00:00:00Z"}, "schedule.interval", "cron"),
    ({"interval": "soon", "start": "2024-01-01T00:00:00Z"}, "schedule.interval", "not a duration"),
    ({"interval": "@daily"}, "schedule.start", "is required"),
    ({"start": "2024-01-01T00:00:00"}, "schedule.start", "needs a time zone"),
    ({"start": "New Year"}, "schedule.start", "not an ISO-8601"),
    ({"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T00:00:00Z"}, "schedule.end", "must be after"),
    ({"start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00"}, "schedule.end", "needs a time zone"),
])
def test_bad_schedules_name_the_field(tmp_path, schedule, field, words):
    with pytest.raises(ConfigError) as raised:
        orch.schedule_settings(config_at(tmp_path, schedule=schedule))
    assert raised.value.field == field and words in str(raised.value)
    assert str(tmp_path) in str(raised.value)  # names the file


def test_schedule_end_is_the_last_interval_and_finalizes(tmp_path):
    """Airflow schedules an interval that starts at the DAG's end date: the end date is set just
    before schedule.end, so the last run is the interval reaching it, and that run finalizes."""
    from airflow.timetables.base import DataInterval, TimeRestriction
    from airflow.timetables.interval import CronDataIntervalTimetable  # the scheduler's side

    config = config_at(tmp_path, schedule={"interval": "@hourly", "start": "2024-01-01T00:00:00Z",
                                           "end": "2024-01-01T03:00:00Z"})
    timetable = CronDataIntervalTimetable(orch.timetable(config).expression, timezone="UTC")
    import pendulum

    restriction = TimeRestriction(earliest=pendulum.instance(orch.start_date(config)),
                                  latest=pendulum.instance(orch.end_date(config)), catchup=True)
    starts, last = [], None
    while (info := timetable.next_dagrun_info(last_automated_data_interval=last,
                                              restriction=restriction)) is not None:
        starts.append(info.data_interval.start.hour)
        last = DataInterval(info.data_interval.start, info.data_interval.end)
    assert starts == [0, 1, 2]
    hour = dt.timedelta(hours=1)
    assert [orch.ends_input(config, last.end - k * hour) for k in (0, 1)] == [True, False]
    assert not orch.ends_input(config_at(tmp_path, schedule={"start": "2024-01-01T00:00:00Z"}), last.end)


def test_unknown_schedule_setting_is_refused(tmp_path):
    with pytest.raises(ConfigError) as raised:
        config_at(tmp_path, schedule={"start": "2024-01-01T00:00:00Z", "stop": "2024-01-02T00:00:00Z"})
    assert raised.value.field == "schedule.stop"


def test_duplicate_pipeline_names_are_refused(tmp_path):
    write_pipeline(tmp_path / "a.yaml", "same", tmp_path / "in", tmp_path / "out")
    write_pipeline(tmp_path / "b.yaml", "same", tmp_path / "in", tmp_path / "out2")
    with pytest.raises(ConfigError, match="also defined in"):
        orch.discover_pipelines(tmp_path)


def test_relative_paths_resolve_against_the_project_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLAY_BASE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    config = orch.load_pipeline(orch.DEFAULT_PIPELINES_DIR / "clicks_per_minute.yaml")
    assert config.output_path == str(orch.PROJECT_ROOT / "lakehouse" / "clicks_per_minute")
    assert orch.output_uri(config) == (orch.PROJECT_ROOT / "lakehouse" / "clicks_per_minute").as_uri()
    assert "REPLAY_BASE_DIR" not in __import__("os").environ


def test_quality_selects_the_triggering_pipelines(tmp_path):
    configs = [config_at(tmp_path, "a"), config_at(tmp_path, "b"), config_at(tmp_path, "c")]
    assets = [orch.pipeline_asset(c) for c in configs]
    assert orch.pipelines_to_check([assets[2], assets[0]], configs) == ["a", "c"]
    assert orch.pipelines_to_check([], configs) == ["a", "b", "c"]  # manual run: all
    assert orch.pipelines_to_check([assets[0]], configs, requested="b") == ["b"]
    with pytest.raises(ConfigError):
        orch.pipelines_to_check([], configs, requested="zzz")


def test_missing_component_fails_clearly():
    with pytest.raises(orch.MissingComponentError, match=r"spark_jobs\.nope_module\.go is not available"):
        orch.optional_function("spark_jobs.nope_module", "go", "a test")


class FakeResult:
    def __init__(self, success: bool):
        self.success = success

    def describe(self) -> str:
        return f"suite window_results: {'passed' if self.success else '1 expectation failed'}"


def test_validate_quality_raises_with_the_report(tmp_path, monkeypatch):
    module = types.ModuleType("spark_jobs.quality")
    module.validate_pipeline = lambda config: FakeResult(config.name != "bad")
    monkeypatch.setitem(sys.modules, "spark_jobs.quality", module)
    good = write_pipeline(tmp_path / "good.yaml", "good", tmp_path / "in", tmp_path / "out")
    bad = write_pipeline(tmp_path / "bad.yaml", "bad", tmp_path / "in", tmp_path / "out")
    assert orch.validate_quality(str(good))["success"] is True
    with pytest.raises(orch.QualityCheckFailed, match="1 expectation failed"):
        orch.validate_quality(str(bad))


def test_spark_mode_from_env(monkeypatch):
    monkeypatch.delenv("REPLAY_SPARK_MODE", raising=False)
    monkeypatch.delenv("AIRFLOW_VAR_REPLAY_SPARK_MODE", raising=False)
    assert orch.spark_mode() == "local"
    monkeypatch.setenv("REPLAY_SPARK_MODE", "submit")
    assert orch.spark_mode() == "submit"
    monkeypatch.setenv("REPLAY_SPARK_MODE", "connect")
    assert orch.spark_mode() == "connect"
    monkeypatch.setenv("REPLAY_SPARK_MODE", "yarn")
    with pytest.raises(ConfigError, match="REPLAY_SPARK_MODE"):
        orch.spark_mode()


def test_connect_mode_fails_clearly_when_the_connections_server_is_down(tmp_path, monkeypatch):
    """In ``connect`` mode a task reaches the server of the Spark provider's ``spark_connect``
    connection; when nothing answers there it fails at once (Airflow then retries it), naming the
    address, before anything is written."""
    import socket

    from spark_jobs.exceptions import SparkServerUnavailableError

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("REPLAY_SPARK_MODE", "connect")
    monkeypatch.setenv("AIRFLOW_CONN_REPLAY_TEST_CONNECT", json.dumps(
        {"conn_type": "spark_connect", "host": "localhost", "port": port, "password": "s3cret"}
    ))
    monkeypatch.setenv("REPLAY_SPARK_CONNECT_CONN_ID", "replay_test_connect")
    path = write_pipeline(tmp_path / "p.yaml", "p", tmp_path / "in", tmp_path / "out")
    with pytest.raises(SparkServerUnavailableError, match=f"sc://localhost:{port}") as raised:
        orch.replay_interval(str(path))
    assert "s3cret" not in str(raised.value)
    with pytest.raises(SparkServerUnavailableError, match=f"sc://localhost:{port}"):
        orch.validate_quality(str(path))  # the quality task is a client of the same server
    assert not (tmp_path / "out").exists()
    assert orch.default_args()["retries"] >= 1


def test_replay_operator_builds_the_spark_submit_command(tmp_path, monkeypatch):
    """In submit mode the backfill's one task resolves the project's jars (Delta's and its own) and
    the finalize param when it runs (after its check, without Spark, found work: a new archive
    file); the master comes from the spark_default connection."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow_helpers import BASE_MS, write_events

    monkeypatch.setenv("REPLAY_SPARK_MODE", "submit")
    monkeypatch.delenv("AIRFLOW_VAR_REPLAY_SPARK_MODE", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "spark://127.0.0.1", '
                       '"port": 7077}')
    jars = ["/jars/delta-spark.jar", "/jars/storage.jar", "/cache/replay.jar"]
    monkeypatch.setattr("spark_jobs.execution.spark_session.project_jars", lambda: jars)
    seen = {}

    def fake_submit(hook, application="", **kwargs):
        seen["command"] = hook._build_spark_submit_command(application)
        seen["env"] = hook._env

    monkeypatch.setattr(SparkSubmitHook, "submit", fake_submit)
    archive = tmp_path / "archive"
    path = str(write_pipeline(tmp_path / "clicks.yaml", "clicks", archive, tmp_path / "out"))
    end = dt.datetime(2023, 11, 14, 23, tzinfo=dt.UTC)
    write_events(archive / "part-000.jsonl", BASE_MS, 10)
    finalizing = {"params": {"finalize": True}, "data_interval_end": end}
    result = orch.replay_operator("replay", path).execute(finalizing)
    command = seen["command"]
    assert command[:3] == ["spark-submit", "--master", "spark://127.0.0.1:7077"]
    assert command[command.index("--jars") + 1] == "/jars/delta-spark.jar,/jars/storage.jar,/cache/replay.jar"
    assert command[-5:] == [str(orch.REPLAY_JOB), path, "--until", "1700002800000", "--finalize"]
    assert result == {"mode": "submit", "application_args": [path, "--until", "1700002800000", "--finalize"]}
    assert seen["env"]["REPLAY_BASE_DIR"] == orch.base_dir()
    assert seen["env"]["PATH"].startswith(str(Path(sys.executable).parent))

    # With object storage on, S3A's jars go to spark-submit too: the driver's JVM starts with them.
    monkeypatch.setenv("REPLAY_S3A_ENDPOINT", "http://127.0.0.1:8333")
    monkeypatch.setattr("spark_jobs.execution.spark_session.s3a_jars", lambda: ["/cache/s3a/hadoop-aws.jar"])
    orch.replay_operator("replay", path).execute(finalizing)
    submitted = seen["command"][seen["command"].index("--jars") + 1].split(",")
    assert submitted == [*jars, "/cache/s3a/hadoop-aws.jar"]


def test_replay_job_runs_the_cli_run_command(monkeypatch, capsys):
    """The job runs what ``replay run`` runs (``run_command``, looked up in the job's module) with
    the same arguments, prints the same summary and ends with the same exit statuses."""
    from spark_jobs.exceptions import ConfigError
    from spark_jobs.execution.jobs import replay_job
    from spark_jobs.execution.passes import RunSummary

    calls = []

    def run_command(pipeline, **options):
        calls.append((pipeline, options))
        if pipeline == "bad.yaml":
            raise ConfigError("--until", "needs a time zone")
        return RunSummary("p", "/out")

    monkeypatch.setattr(replay_job, "run_command", run_command)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert replay_job.main(["p.yaml", "--finalize", "--batch-size", "7", "--until", "1700002800000"]) == 0
    assert "pipeline p: 0 batches" in capsys.readouterr().out
    assert replay_job.main(["p.yaml", "--master", "spark://h:7077"]) == 0
    plain = {"batch_size": None, "finalize": False, "master": None, "quiet": False, "until": None}
    assert calls == [
        ("p.yaml", {**plain, "batch_size": 7, "finalize": True, "until": "1700002800000"}),
        ("p.yaml", {**plain, "master": "spark://h:7077"}),
    ]
    assert replay_job.main(["bad.yaml"]) == 2
    assert "replay: invalid config: --until: needs a time zone" in capsys.readouterr().err
