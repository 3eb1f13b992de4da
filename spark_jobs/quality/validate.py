"""Validate a pipeline's Delta tables: the GX suites, the reconciliation, the ``dq_results`` table.

:func:`validate_pipeline` reads the committed tables (:class:`~.tables.Snapshot`), builds the
pipeline's concrete suites from the versioned templates, runs each against its table with Great
Expectations (an in-memory context; Spark DataFrames as batches), adds the record reconciliation
as one more expectation-like outcome, appends every outcome to ``<output>/dq_results`` and returns
a :class:`QualityResult`. Any failed expectation makes ``success`` False.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import PipelineConfig
from ..execution.spark_session import get_spark
from .datadocs import make_offline
from .reconcile import Reconciliation, reconcile
from .suites import TABLE_SUITES, ConcreteSuite, SuiteFacts, build_suites
from .tables import Snapshot

log = logging.getLogger(__name__)
# Great Expectations logs hundreds of INFO lines per validation (its docs decorators, default
# values of every expectation): an Airflow task's log was 377 such lines out of 401. Its warnings
# stay; a user who wants the rest sets the logger's level again.
if logging.getLogger("great_expectations").level == logging.NOTSET:
    logging.getLogger("great_expectations").setLevel(logging.WARNING)

DQ_RESULTS = "dq_results"
DQ_RESULTS_SCHEMA = (
    "pipeline STRING, run_id STRING, batch_min BIGINT, batch_max BIGINT, suite STRING, "
    "suite_version INT, expectation STRING, expectation_type STRING, `column` STRING, "
    "success BOOLEAN, observed_value STRING, details STRING, run_time TIMESTAMP"
)
RECONCILIATION_SUITE = "reconciliation"
RECONCILIATION_CHECK = "records_reconcile"
SAMPLE_ROWS = 3


@dataclass
class ExpectationOutcome:
    """One expectation's result, in the terms ``dq_results`` and the report use."""

    suite: str
    expectation: str  # the check's stable name, e.g. ``pane_unique`` or ``key_not_null[page]``
    expectation_type: str  # the GX expectation type
    column: str | None
    success: bool
    observed_value: str
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    suite_version: int = 1

    @property
    def table(self) -> str:
        return self.suite

    def describe(self) -> str:
        status = "ok" if self.success else "FAILED"
        where = f"column {self.column}" if self.column else "the table"
        what = f" ({self.description})" if self.description else ""
        return (
            f"{status} {self.suite}.{self.expectation} [{self.expectation_type}] on {self.suite}, "
            f"{where}{what}: observed {self.observed_value}"
        )


@dataclass
class QualityResult:
    pipeline: str
    run_id: str
    run_time: dt.datetime
    batch_range: tuple[int | None, int | None]
    outcomes: list[ExpectationOutcome]
    reconciliation: Reconciliation
    stats: dict[str, Any] = field(default_factory=dict)
    _gx: Any = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        return all(outcome.success for outcome in self.outcomes)

    @property
    def failures(self) -> list[ExpectationOutcome]:
        return [outcome for outcome in self.outcomes if not outcome.success]

    def by_suite(self) -> dict[str, list[ExpectationOutcome]]:
        suites: dict[str, list[ExpectationOutcome]] = {}
        for outcome in self.outcomes:
            suites.setdefault(outcome.suite, []).append(outcome)
        return suites

    def describe(self) -> str:
        lo, hi = self.batch_range
        batches = "no batches replayed" if lo is None else f"batches {lo}-{hi}"
        counts = ", ".join(
            f"{suite} {sum(o.success for o in items)}/{len(items)}"
            for suite, items in self.by_suite().items()
        )
        head = (
            f"data quality of {self.pipeline} (run {self.run_id}, {batches}): "
            + ("passed" if self.success else f"FAILED, {len(self.failures)} of {len(self.outcomes)} failed")
            + f" [{counts}]"
        )
        lines = [head]
        lines += [f"  {outcome.describe()}" for outcome in self.failures]
        lines.append(f"  reconciliation: {self.reconciliation.summary()}")
        return "\n".join(lines)

    def build_data_docs(self, directory: str | Path) -> Path:
        """Render GX Data Docs of this run into ``directory``, made readable offline."""
        if self._gx is None:
            raise RuntimeError("this result holds no GX context to build Data Docs from")
        directory = Path(directory)
        context = self._gx
        site = f"{self.pipeline} {self.run_id}"
        if site in context.get_site_names():  # rendered before: start that site afresh
            context.delete_data_docs_site(site)
        context.add_data_docs_site(
            site_name=site,
            site_config={
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                                  "base_directory": str(directory)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        context.build_data_docs(site_names=[site])
        make_offline(directory)
        return directory / "index.html"


def new_run_id() -> str:
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def validate_pipeline(
    config: PipelineConfig,
    spark: Any = None,
    run_id: str | None = None,
    record: bool = True,
) -> QualityResult:
    """Run every suite and the reconciliation over the pipeline's committed tables.

    Appends one ``dq_results`` row per outcome (unless ``record`` is False) and returns the result;
    ``success`` is False when any expectation failed.
    """
    spark = spark or get_spark(f"quality-{config.name}")
    run_id = run_id or new_run_id()
    run_time = dt.datetime.now(dt.UTC)
    snapshot = Snapshot.read(spark, config)
    try:
        recon = reconcile(snapshot)
        suites = build_suites(config, SuiteFacts(records_read=recon.records_read))
        outcomes, context = _run_suites(snapshot, suites, run_id, run_time)
        outcomes.append(reconciliation_outcome(recon))
        stats = pipeline_stats(snapshot, recon)
    finally:
        snapshot.release()
    result = QualityResult(
        config.name, run_id, run_time, snapshot.batch_range, outcomes, recon, stats, context
    )
    if record:
        append_results(spark, config, result)
    return result


def reconciliation_outcome(recon: Reconciliation) -> ExpectationOutcome:
    return ExpectationOutcome(
        suite=RECONCILIATION_SUITE,
        expectation=RECONCILIATION_CHECK,
        expectation_type="spark_reconciliation",
        column=recon.count_column,
        success=recon.success,
        observed_value=recon.summary(),
        description="every record read is quarantined, late, counted in its windows' final panes, "
        "held by an open window or not yet replayed: exactly once",
        details={k: v for k, v in recon.to_dict().items() if k != "summary"},
    )


# ---- Great Expectations --------------------------------------------------------------------------
def _gx_context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _run_suites(
    snapshot: Snapshot, suites: dict[str, ConcreteSuite], run_id: str, run_time: dt.datetime
) -> tuple[list[ExpectationOutcome], Any]:
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    context = _gx_context()
    source = context.data_sources.add_or_update_spark(name=f"replay_{snapshot.config.name}", persist=False)
    # GX's engine would otherwise find a session of its own: over Spark Connect a new one, which
    # cannot see the temporary view the row rules (unexpected_rows) query. GX's datasource hands
    # its private session to the engine it builds.
    source._spark = snapshot.spark
    identifier = RunIdentifier(run_name=run_id, run_time=run_time)
    outcomes: list[ExpectationOutcome] = []
    for table in TABLE_SUITES:
        if table == "window_results" and snapshot.config.results_table != table:
            continue  # joins and process functions write other tables (no windowed panes)
        concrete = suites[table]
        frame = snapshot.frame_or_empty(table)
        asset = source.add_dataframe_asset(name=table)
        batch_definition = asset.add_batch_definition_whole_dataframe(f"{table}_committed")
        suite = context.suites.add(concrete.gx_suite())
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"{table}_suite", data=batch_definition, suite=suite)
        )
        result = definition.run(
            batch_parameters={"dataframe": frame}, result_format="SUMMARY", run_id=identifier
        )
        for expectation_result in result.results:
            outcomes.append(_outcome(table, concrete.version, expectation_result, snapshot, frame))
    return outcomes, context


def _outcome(table: str, version: int, result: Any, snapshot: Snapshot, frame: Any) -> ExpectationOutcome:
    configuration = result.expectation_config
    kwargs = dict(configuration.kwargs)
    meta = configuration.meta or {}
    column = kwargs.get("column")
    if column is None:
        for name in ("column_list", "column_set"):
            if name in kwargs:
                column = ", ".join(kwargs[name])
                break
    if column is None and "column_A" in kwargs:
        column = f"{kwargs['column_A']}, {kwargs['column_B']}"
    details: dict[str, Any] = {
        "kwargs": {k: v for k, v in kwargs.items() if k not in ("batch_id",)},
    }
    observed = _observed(result, details)
    if not result.success and configuration.type == "unexpected_rows_expectation":
        rows = _sample_rows(snapshot, frame, kwargs["unexpected_rows_query"])
        if rows:
            details["sample_rows"] = _jsonable(rows)
            observed += ", e.g. " + "; ".join(_format_row(row) for row in rows)
    return ExpectationOutcome(
        suite=table,
        expectation=meta.get("check", configuration.type),
        expectation_type=configuration.type,
        column=column,
        success=bool(result.success),
        observed_value=observed,
        description=configuration.description or "",
        details=details,
        suite_version=version,
    )


def _observed(result: Any, details: dict[str, Any]) -> str:
    info = result.exception_info or {}
    if info.get("raised_exception"):
        details["exception"] = info.get("exception_message")
        return f"error: {info.get('exception_message')}"
    body = result.result or {}
    if result.expectation_config.type == "unexpected_rows_expectation":
        count = body.get("observed_value")
        return f"{count} offending row{'s' if count != 1 else ''}"
    if "unexpected_count" in body:
        details["partial_unexpected_list"] = _jsonable(body.get("partial_unexpected_list") or [])[:10]
        text = f"{body.get('unexpected_count')} of {body.get('element_count')} rows unexpected"
        sample = body.get("partial_unexpected_list") or []
        if sample and not result.success:
            text += ", e.g. " + ", ".join(_format_value(v) for v in sample[:SAMPLE_ROWS])
        return text
    if "observed_value" in body:
        return _format_value(body["observed_value"])
    return json.dumps(_jsonable(body), sort_keys=True) if body else "(no value)"


def _sample_rows(snapshot: Snapshot, frame: Any, query: str) -> list[dict[str, Any]]:
    """The first offending rows of a failed row query (GX returns only their count for Spark)."""
    view = f"dq_{uuid.uuid4().hex[:12]}"
    frame.createOrReplaceTempView(view)
    try:
        rows = snapshot.spark.sql(query.replace("{batch}", view)).limit(SAMPLE_ROWS).collect()
        return [row.asDict() for row in rows]
    except Exception as error:  # diagnostics only: never fail the validation over them
        log.warning("could not fetch offending rows: %s", error)
        return []
    finally:
        snapshot.spark.catalog.dropTempView(view)


def _format_row(row: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={_format_value(v)}" for k, v in row.items()) + "}"


def _format_value(value: Any) -> str:
    if isinstance(value, dict):
        return _format_row(value)
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


# ---- numbers for the report ---------------------------------------------------------------------
def pipeline_stats(snapshot: Snapshot, recon: Reconciliation) -> dict[str, Any]:
    from pyspark.sql import functions as F

    panes = {timing: 0 for timing in ("EARLY", "ON_TIME", "LATE")}
    results = snapshot.frame("window_results")
    if results is not None:
        for row in results.groupBy("timing").count().collect():
            panes[row["timing"]] = row["count"]
    late = snapshot.frame("late_events")
    state = snapshot.frame("operator_state")
    open_windows = 0
    if state is not None:
        open_windows = state.where(F.col("contents").isNotNull()).count()
    lo, hi = snapshot.batch_range
    staging = snapshot.frame("staging")
    replayed = 0
    if staging is not None and snapshot.log:
        replayed = staging.where(F.col("_seq") < snapshot.replayed_seq_end).count()
    return {
        "records_read": recon.records_read,
        "accepted": recon.accepted,
        "quarantined": recon.quarantined,
        "replayed": replayed,
        "panes": panes,
        "late": late.count() if late is not None else 0,
        "watermark": snapshot.watermark,
        "finalized": snapshot.finalized,
        "batches": len(snapshot.log),
        "batch_min": lo,
        "batch_max": hi,
        "open_windows": open_windows,
    }


# ---- dq_results ----------------------------------------------------------------------------------
def append_results(spark: Any, config: PipelineConfig, result: QualityResult) -> None:
    """Append one row per outcome to the pipeline's ``dq_results`` Delta table."""
    lo, hi = result.batch_range
    rows = [
        (
            result.pipeline, result.run_id, lo, hi, outcome.suite, outcome.suite_version,
            outcome.expectation, outcome.expectation_type, outcome.column, outcome.success,
            outcome.observed_value, json.dumps(_jsonable(outcome.details), sort_keys=True),
            result.run_time,
        )
        for outcome in result.outcomes
    ]
    frame = spark.createDataFrame(rows, DQ_RESULTS_SCHEMA)
    frame.write.format("delta").mode("append").option("userMetadata", f"dq_run={result.run_id}").save(
        config.table_path(DQ_RESULTS)
    )


def read_results(spark: Any, config: PipelineConfig, run_id: str | None = None) -> Any:
    """The ``dq_results`` rows (of one run when ``run_id`` is given)."""
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(config.table_path(DQ_RESULTS))
    return frame.where(F.col("run_id") == run_id) if run_id else frame
