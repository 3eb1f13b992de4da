"""Production-topology tier, Airflow with spark-submit: ``airflow standalone`` (scheduler, DAG
processor, API server, triggerer) on PostgreSQL started by ``scripts/services/postgres.sh``, the
demo pipeline's archive and tables on the S3 server of this tier, every replay ``spark-submit``ted
to the tier's standalone cluster through the ``spark_default`` connection (as docker-compose.yml),
driven by the README's CLI commands (``airflow_on_postgres.the_readme_flows``). About 18 minutes
here (each interval's driver waits for the cluster's cores): ``make test-prod``, run on purpose;
CI runs the Spark Connect flavour (``test_airflow_postgres_connect.py``)."""

from __future__ import annotations

import pytest
from airflow_on_postgres import postgres_world, the_readme_flows

pytestmark = [pytest.mark.slow, pytest.mark.prod, pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture(scope="module")
def world(store, postgres, spark_cluster, tmp_path_factory):
    with postgres_world(
        store, postgres, tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("airflow-base"),
        "airflow",
        # The replay is spark-submitted to the cluster; the quality and reprocess tasks' in-process
        # sessions use the cluster too.
        SPARK_MASTER=spark_cluster, REPLAY_SPARK_MODE="submit", AIRFLOW_CONN_SPARK_DEFAULT=spark_cluster,
    ) as world:
        yield world


def test_scheduler_on_postgres_with_tables_on_the_bucket(world):
    # The first interval only ingests (no batch is due before its end): in-process that task skips
    # itself; a spark-submitted job cannot, so it succeeds. The second has nothing to do at all.
    the_readme_flows(world, ["success", "skipped", "success", "success", "success", "success"],
                     "spark-submit")
