"""``replay_quality``: data-quality suites, run after every backfill or reprocess.

Scheduled on the pipelines' output assets: each run checks the pipelines whose assets were
updated (all pipelines when triggered by hand, or the one named by the ``pipeline`` param),
one mapped ``validate`` task per pipeline, failing visibly when a suite fails.
"""

from __future__ import annotations

from airflow.sdk import DAG, AssetAny, Param, task
from airflow.sdk.exceptions import AirflowFailException

from spark_jobs.interfaces import orchestration as orch

CONFIGS = orch.discover_pipelines()
PATHS = {config.name: config.config_path for config in CONFIGS}
ASSETS = [orch.pipeline_asset(config) for config in CONFIGS]

with DAG(
    dag_id="replay_quality",
    description="Great Expectations suites over each pipeline's Delta tables",
    schedule=AssetAny(*ASSETS) if ASSETS else None,
    catchup=False,
    # Unpaused from the start: it only runs on asset events (or by hand), and paused it would
    # silently skip the checks of every backfill and reprocess until someone noticed.
    is_paused_upon_creation=False,
    max_active_runs=1,  # each run starts Spark; asset events queued meanwhile are checked together
    default_args=orch.default_args(),
    tags=orch.tags("quality"),
    doc_md=__doc__,
    params={"pipeline": Param("", type="string", description="Only this pipeline (manual runs)")},
):

    @task(task_id="select_pipelines")
    def select_pipelines(**context) -> list[str]:
        events = context.get("triggering_asset_events") or {}
        return orch.pipelines_to_check(list(events), CONFIGS, context["params"].get("pipeline") or None)

    @task(task_id="validate")
    def validate(pipeline: str) -> dict:
        try:
            return orch.validate_quality(PATHS[pipeline])
        except (orch.MissingComponentError, orch.QualityCheckFailed) as error:
            raise AirflowFailException(str(error)) from error

    validate.expand(pipeline=select_pipelines())
