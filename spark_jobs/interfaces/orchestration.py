"""Airflow-facing logic: what the DAGs under ``dags/`` wire, so that DAG files stay thin.

Nothing here touches Spark or Delta when a DAG file is parsed. Parse-time helpers
(``discover_pipelines``, ``timetable``, ``pipeline_asset`` ...) only read the pipeline YAML files;
the task callables (``replay_interval``, ``reprocess_range``, ``validate_quality``) import the
engine lazily and run when a task runs.

* **Backfill** (``replay__<name>``, one DAG per file in ``REPLAY_PIPELINES_DIR``): the run of a
  data interval ingests what is new in the archive, then replays the staged batches whose replay
  clock is before the interval's end (``run_pipeline(until_ms=...)``, ``replay run --until``);
  later batches wait for their interval. Committed batches are skipped, so re-running an interval
  is a no-op. ``finalize=True`` ends the input (watermark to +infinity) once every staged batch
  is replayed.
* **Reprocess** (``replay_reprocess``): validated params, then ``spark_jobs.execution.operations.reprocess``
  (resumable: a retry after a kill finishes the interrupted reprocess).
* **Quality** (``replay_quality``): scheduled on the pipelines' assets; calls
  ``spark_jobs.quality.validate_pipeline`` and fails the task when a suite fails.
* **Spark mode**: ``REPLAY_SPARK_MODE`` (Airflow Variable, else environment) is ``local`` (default:
  an in-process session from ``spark_jobs.execution.spark_session.get_spark``) or ``submit``
  (``spark-submit`` of ``spark_jobs/execution/jobs/replay_job.py`` through the ``spark_default``
  connection, whose host/port is the master, e.g. ``spark://spark-master:7077`` or ``local[2]``)
  or ``connect`` (the task is a thin client of a warm Spark Connect server, ``replay server
  start``, at the Spark provider's ``spark_connect`` connection ``spark_connect_default``, or the
  one ``REPLAY_SPARK_CONNECT_CONN_ID`` names; its password is the server's token).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import PipelineConfig, load_config, parse_instant
from ..exceptions import ConfigError

# The Spark side (operations, the session factory, the CLI) is imported inside the task callables:
# the DAG files import this module at every parse, which must not load pyspark or start a JVM.

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"
REPLAY_JOB = Path(__file__).resolve().parents[1] / "execution" / "jobs" / "replay_job.py"
DEFAULT_INTERVAL = "@hourly"
OWNER = "data-platform"
TAGS = ("flink-replay",)
SPARK_MODES = ("local", "submit", "connect")
MODE_VARIABLE = "REPLAY_SPARK_MODE"
SPARK_CONN_ID = "spark_default"
_CRON_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")


# ---- parse time: configs, schedules, assets (no Spark, no Delta, no Airflow DB) -------------------
def pipelines_dir() -> Path:
    """Where the pipeline configs are: ``REPLAY_PIPELINES_DIR``, default ``include/pipelines``."""
    return Path(os.environ.get("REPLAY_PIPELINES_DIR") or DEFAULT_PIPELINES_DIR)


def base_dir() -> str:
    """What relative paths in configs resolve against: ``REPLAY_BASE_DIR``, default the project.

    An Airflow worker's working directory is arbitrary, so the CLI's default (the current
    directory) would scatter tables; the project root is the stable equivalent.
    """
    return os.environ.get("REPLAY_BASE_DIR") or str(PROJECT_ROOT)


@contextlib.contextmanager
def _base_dir_env() -> Iterator[None]:
    previous = os.environ.get("REPLAY_BASE_DIR")
    os.environ["REPLAY_BASE_DIR"] = base_dir()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("REPLAY_BASE_DIR", None)
        else:
            os.environ["REPLAY_BASE_DIR"] = previous


def load_pipeline(path: str | os.PathLike[str]) -> PipelineConfig:
    """``load_config`` with relative paths resolved against :func:`base_dir`."""
    with _base_dir_env():
        return load_config(path)


def discover_pipelines(directory: str | os.PathLike[str] | None = None) -> list[PipelineConfig]:
    """Every ``*.yaml``/``*.yml`` config in the directory, sorted by file name, fully validated.

    A bad file raises ConfigError naming the file and field (the DAG file then shows an import
    error) rather than silently losing that pipeline's schedule.
    """
    folder = Path(directory) if directory is not None else pipelines_dir()
    files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
    configs, seen = [], {}
    for path in files:
        config = load_pipeline(path)
        schedule_settings(config)  # validate the schedule too, before any DAG is built
        if config.name in seen:
            raise ConfigError("name", f"pipeline {config.name!r} is also defined in {seen[config.name]}",
                              str(path))
        seen[config.name] = str(path)
        configs.append(config)
    return configs


def dag_id(config: PipelineConfig) -> str:
    return f"replay__{config.name}"


@dataclass(frozen=True)
class ScheduleSettings:
    interval: str
    start: dt.datetime
    #: Where the archive ends (``schedule.end``): the interval that reaches it is the last one.
    end: dt.datetime | None = None


def schedule_settings(config: PipelineConfig) -> ScheduleSettings:
    """The validated ``schedule:`` of a config: interval (default @hourly) and an aware start."""
    source = config.config_path
    interval = (config.schedule.interval or DEFAULT_INTERVAL).strip()
    if interval.startswith("@") and interval not in _CRON_PRESETS:
        raise ConfigError("schedule.interval", f"must be one of {', '.join(_CRON_PRESETS)}, a cron "
                          f"expression or a duration such as 15m, not {interval!r}", source)
    if not interval.startswith("@") and len(interval.split()) != 5:
        _interval_delta(interval, source)
    else:
        _check_cron(interval, source)
    if not config.schedule.start:
        raise ConfigError("schedule.start", "is required to schedule the pipeline in Airflow: the "
                          "first interval's start, ISO-8601 with a zone (e.g. 2023-11-14T22:00:00Z)",
                          source)
    start = _schedule_time(config.schedule.start, "schedule.start", source)
    end = None
    if config.schedule.end:
        end = _schedule_time(config.schedule.end, "schedule.end", source)
        if end <= start:
            raise ConfigError("schedule.end", f"must be after schedule.start ({config.schedule.end} <= "
                              f"{config.schedule.start})", source)
    return ScheduleSettings(interval, start, end)


def _schedule_time(text: str, field: str, source: str | None) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise ConfigError(field, f"not an ISO-8601 time: {text!r}", source) from error
    if moment.tzinfo is None:
        raise ConfigError(field, "needs a time zone, e.g. 2023-11-14T22:00:00Z", source)
    return moment.astimezone(dt.UTC)


def _interval_delta(interval: str, source: str | None) -> dt.timedelta:
    from ..core.durations import parse_duration

    try:
        ms = parse_duration(interval)
    except ValueError as error:
        raise ConfigError("schedule.interval", f"{error}; or use a cron preset/expression",
                          source) from error
    if ms <= 0:
        raise ConfigError("schedule.interval", "must be positive", source)
    return dt.timedelta(milliseconds=ms)


def _check_cron(expression: str, source: str | None) -> None:
    from airflow.sdk import CronDataIntervalTimetable

    try:
        CronDataIntervalTimetable(expression, timezone="UTC").validate()
    except Exception as error:  # AirflowTimetableInvalid; croniter's own errors vary by version
        raise ConfigError("schedule.interval", f"not a valid cron expression: {error}", source) from error


def timetable(config: PipelineConfig) -> Any:
    """A data-interval timetable: each run covers ``[data_interval_start, data_interval_end)``."""
    from airflow.sdk import CronDataIntervalTimetable, DeltaDataIntervalTimetable

    settings = schedule_settings(config)
    if settings.interval.startswith("@") or len(settings.interval.split()) == 5:
        return CronDataIntervalTimetable(settings.interval, timezone="UTC")
    return DeltaDataIntervalTimetable(_interval_delta(settings.interval, config.config_path))


def start_date(config: PipelineConfig) -> dt.datetime:
    return schedule_settings(config).start


def end_date(config: PipelineConfig) -> dt.datetime | None:
    """The DAG's ``end_date``: just before ``schedule.end``. Airflow still schedules an interval
    that *starts* at its end date, so the end date itself would add one interval past the archive;
    a microsecond before it, the last run is the interval that reaches ``schedule.end``."""
    end = schedule_settings(config).end
    return None if end is None else end - dt.timedelta(microseconds=1)


def ends_input(config: PipelineConfig, interval_end: Any) -> bool:
    """Whether a run of this data interval is the schedule's last: it finalizes the pipeline (the
    end of input: watermark to +infinity, every pending window fires), so a backfill ends by itself."""
    end = schedule_settings(config).end
    end_ms = _ms(interval_end)
    return end is not None and end_ms is not None and end_ms >= int(end.timestamp() * 1000)


def run_finalizes(config: PipelineConfig, requested: Any, interval_end: Any) -> bool:
    """Whether a backfill run finalizes: asked to (the ``finalize`` param), or its interval is the
    schedule's last (``ends_input``). What the check and the local replay use."""
    return bool(requested) or ends_input(config, interval_end)


def pool_name(config: PipelineConfig) -> str:
    """The one-slot Airflow pool every task that changes this pipeline's tables runs in, so runs of
    a pipeline (scheduled, ``backfill create``, reprocess) queue instead of overlapping."""
    return f"replay__{config.name}"


def ensure_pools(configs: Iterable[PipelineConfig]) -> list[str]:
    """Create (or set back to one slot) each pipeline's pool in Airflow's metadata database, as
    ``airflow pools set`` does; returns what was done, a line per pool."""
    from airflow.api.client import get_current_api_client

    client = get_current_api_client()
    done = []
    for config in configs:
        name = pool_name(config)
        client.create_pool(name=name, slots=1, include_deferred=False,
                           description=f"runs of pipeline {config.name}, one at a time")
        done.append(f"pool {name}: 1 slot")
    return done


def output_uri(config: PipelineConfig) -> str:
    path = config.output_path
    return path if "://" in path else Path(path).as_uri()


def pipeline_asset(config: PipelineConfig) -> Any:
    """The Airflow asset standing for a pipeline's output tables (updated by backfill/reprocess)."""
    from airflow.sdk import Asset

    return Asset(name=f"replay_output__{config.name}", uri=output_uri(config), group="flink-replay",
                 extra={"pipeline": config.name})


def reprocessed_alias() -> Any:
    """Reprocessing emits the chosen pipeline's asset event through this alias at run time."""
    from airflow.sdk import AssetAlias

    return AssetAlias("replay_reprocessed")


def default_args(**overrides: Any) -> dict[str, Any]:
    args = {
        "owner": OWNER,
        "retries": 2,
        "retry_delay": dt.timedelta(minutes=2),
        "retry_exponential_backoff": 2.0,
        "execution_timeout": dt.timedelta(hours=2),
    }
    args.update(overrides)
    return args


def tags(*extra: str) -> list[str]:
    return [*TAGS, *extra]


def backfill_doc(config: PipelineConfig) -> str:
    settings = schedule_settings(config)
    description = config.raw.get("description") or ""
    ends = (f"to {settings.end.isoformat()} (`schedule.end`): the run of the interval that reaches it "
            "is the last and finalizes the pipeline (watermark to +infinity, every pending window "
            "fires)" if settings.end else
            "with no `schedule.end`: the schedule runs on toward today; trigger a run with "
            '`{"finalize": true}` to end the input')
    return f"""\
### Replay `{config.name}` ({config.config_path})

{description}

Each run ingests what is new in the archive `{config.source.path}` and replays the batches whose
replay clock is before the end of its data interval into the Delta tables under
`{config.output_path}` (asset `{output_uri(config)}`), interval `{settings.interval}` from
{settings.start.isoformat()} {ends}.

The run's one task, `replay`, first decides from metadata, without Spark, whether the interval has
anything to do (a new archive file, a batch due, the end of input); when it has not, it ends there
in a second, skipped, with no asset event. Committed batches are skipped, so re-running an interval
is a no-op. The task runs in the one-slot pool `{pool_name(config)}` (create it with `replay pools`),
which every run of this pipeline shares, reprocessing included: runs queue, never overlap.

Spark mode: Variable/env `{MODE_VARIABLE}` = `local` (default, in-process session) or `submit`
(`spark-submit` through connection `{SPARK_CONN_ID}`). Backfill a range:
`airflow backfill create --dag-id {dag_id(config)} --from-date A --to-date B`.
"""


# ---- run time: the task callables --------------------------------------------------------------
def spark_mode() -> str:
    """``local``, ``submit`` or ``connect``: Airflow Variable ``REPLAY_SPARK_MODE``, else the env
    variable."""
    value = os.environ.get(MODE_VARIABLE) or "local"
    with contextlib.suppress(Exception):  # no Airflow context (plain Python) or no metadata DB
        from airflow.sdk import Variable

        value = Variable.get(MODE_VARIABLE, default=value)
    mode = str(value).strip().lower()
    if mode not in SPARK_MODES:
        raise ConfigError(MODE_VARIABLE, f"must be one of {', '.join(SPARK_MODES)}, not {value!r}")
    return mode


#: The Airflow connection (type ``spark_connect``) of ``connect`` mode, unless this names another.
CONNECT_CONN_ENV = "REPLAY_SPARK_CONNECT_CONN_ID"


@contextlib.contextmanager
def _task_session(config: PipelineConfig, spark: Any = None, mode: str | None = None) -> Iterator[Any]:
    """The task's Spark session: the caller's, else an in-process one (``local``), else, in
    ``connect`` mode, a session of its own on the server the ``spark_connect`` connection names,
    released when the task ends (an unreachable server fails the task, which Airflow retries).
    ``mode``: the task's ``spark_mode()`` when it read it already (None: read here)."""
    from ..execution.spark_session import get_spark

    if spark is not None or (mode or spark_mode()) != "connect":
        yield spark or get_spark(f"replay-{config.name}")
        return
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    conn_id = os.environ.get(CONNECT_CONN_ENV) or SparkConnectHook.default_conn_name
    url = SparkConnectHook(conn_id).get_connection_url()
    log.info("replay %s: Spark Connect server of connection %s (%s)", config.name, conn_id,
             url.split(";")[0].rstrip("/"))  # (never the token)
    session = get_spark(f"replay-{config.name}", remote=url)
    try:
        yield session
    finally:
        session.stop()


def summary_dict(summary: Any) -> dict[str, Any]:
    """A RunSummary as plain JSON (for XCom and logs)."""
    return {
        "pipeline": summary.pipeline,
        "output_path": summary.output_path,
        "files_ingested": summary.files_ingested,
        "records_read": summary.records_read,
        "records_accepted": summary.records_accepted,
        "records_quarantined": summary.records_quarantined,
        "batches": [
            {"batch_id": b.batch_id, "records": b.records, "panes": dict(b.panes), "late": b.late,
             "watermark": b.watermark, "seconds": round(b.seconds, 3)}
            for b in summary.batches
        ],
        "finalized": summary.finalized,
        "watermark": summary.watermark,
        "seconds": round(summary.seconds, 3),
    }


def _ms(moment: Any) -> int | None:
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = dt.datetime.fromisoformat(moment.replace("Z", "+00:00"))
    return int(moment.timestamp() * 1000)


def replay_interval(
    pipeline_path: str,
    finalize: bool = False,
    interval_start: Any = None,
    interval_end: Any = None,
    batch_size: int | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Replay the archive slice of one data interval, in-process; returns the RunSummary as a dict.

    Ingests new archive files, then replays the staged batches whose replay clock is before
    ``interval_end`` (all of them without one). Idempotent: committed batches are skipped, so
    re-running an interval adds nothing.
    """
    return _replay_interval(load_pipeline(pipeline_path), finalize, interval_start, interval_end,
                            batch_size, spark)


def _replay_interval(
    config: PipelineConfig, finalize: bool, interval_start: Any, interval_end: Any,
    batch_size: int | None = None, spark: Any = None, mode: str | None = None,
) -> dict[str, Any]:
    """``replay_interval`` for a loaded config (``mode``: the task's Spark mode, if read already)."""
    from ..core.durations import format_timestamp
    from ..execution.operations import run_pipeline

    start_ms, end_ms = _ms(interval_start), _ms(interval_end)
    finalize = run_finalizes(config, finalize, interval_end)
    log.info("replay %s for interval %s: archive %s -> %s (finalize=%s)", config.name,
             _interval_text(start_ms, end_ms), config.source.path, config.output_path, finalize)
    with _task_session(config, spark, mode) as session:
        summary = run_pipeline(config, spark=session, batch_size=batch_size, finalize=bool(finalize),
                               progress=log.info, until_ms=end_ms)
    result = summary_dict(summary)
    result.update(interval_start_ms=start_ms, interval_end_ms=end_ms)
    ids = [b["batch_id"] for b in result["batches"]]
    if ids:
        log.info("replay %s: ran %d batches (ids %s), %d records, panes %s, watermark %s%s",
                 config.name, len(ids), ids, summary.records_replayed, summary.panes,
                 format_timestamp(summary.watermark), " (finalized)" if summary.finalized else "")
    else:
        log.info("replay %s: no batch to replay for this interval: every batch before its end was "
                 "already committed (watermark %s)", config.name, format_timestamp(summary.watermark))
    if finalize and not summary.finalized:
        log.warning("replay %s: not finalized: staged batches remain after %s (schedule.end before "
                    "the archive's end?); trigger a run with {\"finalize\": true} to end the input",
                    config.name, format_timestamp(end_ms))
    return result


def _interval_text(start_ms: int | None, end_ms: int | None) -> str:
    from ..core.durations import format_timestamp

    if start_ms is None or end_ms is None:
        return "(no data interval)"
    return f"[{format_timestamp(start_ms)}, {format_timestamp(end_ms)})"


def interval_has_work(
    pipeline_path: str, finalize: bool = False, interval_start: Any = None, interval_end: Any = None
) -> bool:
    """Whether the run of this data interval would ingest, repair or replay anything, decided from
    metadata without Spark (``execution.pending_work``): False ends the run there, with no Spark
    started and no asset event (so no quality run follows)."""
    return _interval_has_work(load_pipeline(pipeline_path), finalize, interval_start, interval_end)


def _interval_has_work(
    config: PipelineConfig, finalize: bool, interval_start: Any, interval_end: Any
) -> bool:
    from ..execution.pending_work import pending_work

    finalize = run_finalizes(config, finalize, interval_end)
    answer = pending_work(config, _ms(interval_end), finalize)
    log.info("replay %s, interval %s: %s", config.name,
             _interval_text(_ms(interval_start), _ms(interval_end)), answer.reason)
    return answer.work


@dataclass(frozen=True)
class ReprocessRequest:
    pipeline: str
    pipeline_path: str
    from_ms: int
    to_ms: int
    reason: str


def parse_reprocess_params(params: Mapping[str, Any], pipelines: Mapping[str, str]) -> ReprocessRequest:
    """Check the reprocessing params; raises ConfigError naming the param. Touches nothing."""
    name = params.get("pipeline")
    if name not in pipelines:
        known = ", ".join(sorted(pipelines)) or "(no pipelines configured)"
        raise ConfigError("pipeline", f"must be one of {known}, not {name!r}")
    values = {}
    for field in ("from", "to"):
        text = params.get(field)
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(field, "is required: an ISO-8601 timestamp with a zone, e.g. "
                              "2023-11-14T22:10:00Z")
        values[field] = parse_instant(text, field)
    if values["from"] >= values["to"]:
        raise ConfigError("to", f"must be after from ({params['from']} >= {params['to']})")
    reason = params.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError("reason", "must be a non-empty text saying why (it is recorded)")
    return ReprocessRequest(name, pipelines[name], values["from"], values["to"], reason.strip())


def optional_function(module: str, name: str, what: str) -> Any:
    """Import ``module.name`` lazily; raise a clear error if that part of the engine is missing."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise MissingComponentError(
            f"{module}.{name} is not available in this installation ({error}); {what} needs it. "
            "Deploy a version of flink-replay that includes it."
        ) from error


class MissingComponentError(RuntimeError):
    """A module another part of the project provides is not installed yet."""


def reprocess_range(request: ReprocessRequest, spark: Any = None) -> dict[str, Any]:
    """Rewind and replay ``[from_ms, to_ms)`` of a pipeline with ``spark_jobs.execution.operations.reprocess``
    (a retry of the task finishes a reprocess its killed attempt left unfinished)."""
    from ..core.durations import format_timestamp

    reprocess = optional_function("spark_jobs.execution.operations", "reprocess", "replay_reprocess")
    config = load_pipeline(request.pipeline_path)
    log.info("reprocess %s [%s, %s): %s", config.name, format_timestamp(request.from_ms),
             format_timestamp(request.to_ms), request.reason)
    with _task_session(config, spark) as session:
        outcome = reprocess(config, request.from_ms, request.to_ms, request.reason, spark=session,
                            progress=log.info)
    if outcome.message:
        log.info("reprocess %s: %s", config.name, outcome.message)
    result = summary_dict(outcome.summary)
    result["reprocessed"] = outcome.reprocessed
    log.info("reprocess %s: replayed %d batches (ids %s)", config.name, len(result["batches"]),
             [b["batch_id"] for b in result["batches"]])
    return result


def pipelines_to_check(
    triggering_assets: Iterable[Any], configs: Iterable[PipelineConfig], requested: str | None = None
) -> list[str]:
    """The pipelines whose assets triggered the quality run (all of them for a manual run)."""
    by_asset = {pipeline_asset(c).name: c.name for c in configs}
    if requested:
        if requested not in by_asset.values():
            raise ConfigError("pipeline", f"must be one of {', '.join(sorted(by_asset.values()))}")
        return [requested]
    names = sorted({by_asset[a.name] for a in triggering_assets if getattr(a, "name", None) in by_asset})
    return names or sorted(by_asset.values())


class QualityCheckFailed(RuntimeError):
    """A data-quality suite failed for a pipeline."""


def validate_quality(pipeline_path: str) -> dict[str, Any]:
    """Run the pipeline's data-quality suites; raise QualityCheckFailed (with the report) if any fail."""
    validate_pipeline = optional_function("spark_jobs.quality", "validate_pipeline", "replay_quality")
    config = load_pipeline(pipeline_path)
    if spark_mode() == "connect":  # a client of the warm server, like the replay and reprocess
        with _task_session(config, mode="connect") as session:
            result = validate_pipeline(config, spark=session)
    else:
        result = validate_pipeline(config)  # its own in-process session, started when needed
    report = result.describe()
    if not result.success:
        raise QualityCheckFailed(f"data quality failed for {config.name}:\n{report}")
    log.info("data quality passed for %s:\n%s", config.name, report)
    return {"pipeline": config.name, "success": True, "report": str(report)}


# ---- spark-submit mode -------------------------------------------------------------------------
def submit_environment() -> dict[str, str]:
    """Environment of the spark-submit process: the venv's binaries and Python, the base dir."""
    python_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{python_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        "REPLAY_BASE_DIR": base_dir(),
    }


def submit_arguments(
    pipeline_path: str, finalize: bool, until: Any = None, batch_size: int | None = None
) -> list[str]:
    args = [str(pipeline_path)]
    if until is not None:
        args += ["--until", str(_ms(until))]
    if finalize:
        args.append("--finalize")
    if batch_size:
        args += ["--batch-size", str(batch_size)]
    return args


def replay_operator(task_id: str, pipeline_path: str, **kwargs: Any) -> Any:
    """A backfill interval as one task (each task costs a DAG run about a second of scheduling and
    start): first, without Spark, whether the interval has anything to do (no: skipped, no asset
    event, no Spark started); then the replay in ``REPLAY_SPARK_MODE``: in the task process
    (``local``, ``connect``) or by spark-submit of ``spark_jobs/execution/jobs/replay_job.py`` with
    the Delta jars (resolved when it runs) through connection ``spark_default``. A
    SparkSubmitOperator, so that killing the task kills the submitted driver too."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    class ReplayIntervalOperator(SparkSubmitOperator):
        """Check, then replay one data interval in-process or by spark-submit."""

        def execute(self, context: Any) -> dict[str, Any]:
            from airflow.sdk.exceptions import AirflowSkipException

            finalize = bool((context.get("params") or {}).get("finalize"))
            start, end = context.get("data_interval_start"), context.get("data_interval_end")
            config = load_pipeline(pipeline_path)  # read once: the check and the replay
            if not _interval_has_work(config, finalize, start, end):
                raise AirflowSkipException("nothing to ingest, repair or replay before the interval's end")
            mode = spark_mode()
            if mode != "submit":
                result = _replay_interval(config, finalize, start, end, mode=mode)
                if not result["batches"]:  # the results did not change: no asset event, no quality run
                    raise AirflowSkipException("no batch was due before the interval's end")
                return {"mode": mode, **result}
            from ..execution.spark_session import driver_jars

            self.jars = ",".join(driver_jars())  # resolved here, never when the DAG is parsed
            finalize = finalize or ends_input(config, end)
            self.application_args = submit_arguments(pipeline_path, finalize, until=end)
            self.env_vars = {**submit_environment(), **(self.env_vars or {})}
            log.info("spark-submit %s %s (connection %s)", self.application,
                     " ".join(self.application_args), SPARK_CONN_ID)
            super().execute(context)
            return {"mode": mode, "application_args": self.application_args}

    from ..execution.spark_session import JVM_OPTIONS

    ReplayIntervalOperator.__module__ = __name__
    return ReplayIntervalOperator(
        task_id=task_id,
        application=str(REPLAY_JOB),
        conn_id=SPARK_CONN_ID,
        name=f"replay-{Path(pipeline_path).stem}",
        # The JVMs start before the job's own session settings apply: their options go here.
        conf={"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
              "spark.driver.extraJavaOptions": JVM_OPTIONS, "spark.executor.extraJavaOptions": JVM_OPTIONS},
        **kwargs,
    )
