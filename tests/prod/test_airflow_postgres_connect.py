"""Production-topology tier, Airflow over Spark Connect: the same flows as
``test_airflow_postgres.py`` (Airflow on PostgreSQL, the archive and tables on the tier's S3
server), with every Spark task a client of one Spark Connect server that runs on the tier's
standalone cluster with S3A (``REPLAY_SPARK_MODE=connect``, the Spark provider's
``spark_connect_default`` connection): the topology of a warm shared service. ``make test-prod-ci``
(in .ci/run)."""

from __future__ import annotations

import json

import pytest
from airflow_on_postgres import postgres_world, the_readme_flows
from prod_services import s3_connect_server

pytestmark = [pytest.mark.slow, pytest.mark.prod, pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture(scope="module")
def world(store, postgres, spark_cluster, tmp_path_factory):
    with s3_connect_server(store, tmp_path_factory.mktemp("connect-cluster"), master=spark_cluster) as port:
        connection = json.dumps({"conn_type": "spark_connect", "host": "localhost", "port": port})
        with postgres_world(
            store, postgres, tmp_path_factory.mktemp("airflow-home"),
            tmp_path_factory.mktemp("airflow-base"), "airflow-connect",
            REPLAY_SPARK_MODE="connect", AIRFLOW_CONN_SPARK_CONNECT_DEFAULT=connection,
        ) as world:
            yield world


def test_scheduler_on_postgres_as_clients_of_a_server_on_the_cluster(world):
    # Over Connect the first interval's replay skips itself like an in-process one (it only ingests).
    the_readme_flows(world, ["skipped", "skipped", "success", "success", "success", "success"],
                     "Spark Connect")
    logs = [p.read_text(errors="replace") for p in (world["home"] / "logs").rglob("*.log")]
    assert any("Spark Connect server of connection spark_connect_default" in text for text in logs), \
        "no task log names the server"
