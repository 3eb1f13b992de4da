"""``replay_reprocess``: rewind one pipeline's time range and replay it, on manual trigger only.

Params are validated twice before anything is touched: by their JSON schema when the run is
created (enum of pipelines, ISO-8601 timestamps, non-empty reason) and by ``check_params``
(from < to, zones); an invalid run fails there, and no reprocess starts. The reprocess then runs
as the chosen pipeline's own task (``reprocess__<name>``), in that pipeline's one-slot pool, so it
queues behind a backfill run of the same pipeline instead of colliding with it. On success the
pipeline's output asset is updated (through an alias), which schedules ``replay_quality``.
Unpaused from the start: it only runs when triggered.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowFailException

from spark_jobs.interfaces import orchestration as orch

CONFIGS = orch.discover_pipelines()
PIPELINES = {config.name: config.config_path for config in CONFIGS}
ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$"
TIME = {"type": "string", "format": "date-time", "pattern": ISO}

with DAG(
    dag_id="replay_reprocess",
    description="Rewind a pipeline's event-time range [from, to) and replay it",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=False,
    default_args=orch.default_args(),
    tags=orch.tags("reprocess"),
    doc_md=__doc__,
    params={
        "pipeline": Param(None, type="string", enum=sorted(PIPELINES) or [""],
                          description="Pipeline (config name) to reprocess"),
        "from": Param(None, **TIME, description="Start of the range, e.g. 2023-11-14T22:10:00Z"),
        "to": Param(None, **TIME, description="End of the range (exclusive)"),
        "reason": Param(None, type="string", minLength=1, pattern=r"\S",
                        description="Why (recorded in reprocess_history)"),
    },
):

    @task(task_id="check_params")
    def check_params(**context) -> dict:
        try:
            request = orch.parse_reprocess_params(context["params"], PIPELINES)
        except orch.ConfigError as error:
            raise AirflowFailException(f"invalid reprocessing params: {error}") from error
        return request.__dict__

    @task.branch(task_id="choose_pipeline")
    def choose_pipeline(request: dict) -> str:
        return f"reprocess__{request['pipeline']}"

    def reprocess_task(config):
        @task(task_id=f"reprocess__{config.name}", outlets=[orch.reprocessed_alias()],
              pool=orch.pool_name(config))
        def reprocess(request: dict, **context) -> dict:
            try:
                result = orch.reprocess_range(orch.ReprocessRequest(**request))
            except orch.MissingComponentError as error:
                raise AirflowFailException(str(error)) from error
            if result["reprocessed"]:
                context["outlet_events"][orch.reprocessed_alias()].add(
                    orch.pipeline_asset(config), extra={"reason": request["reason"]})
            return result

        return reprocess

    request = check_params()
    chosen = choose_pipeline(request)
    for config in CONFIGS:
        chosen >> reprocess_task(config)(request)
