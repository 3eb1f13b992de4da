"""`replay server start|stop|status`: a Spark Connect server with Delta, started and stopped safely.

The servers here run in their own JVM (one at a time), on a free port, with a state directory
under the test's tmp_path; every test that starts one stops it, whatever happens.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from airflow_standalone import free_port

from spark_jobs.execution import connect_server
from spark_jobs.execution.connect_server import TOKEN_ENV


def _replay(*args: str, env: dict[str, str] | None = None, timeout: float = 300
            ) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "spark_jobs.interfaces.cli", *args], env=environment,
                          capture_output=True, text=True, timeout=timeout)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            # A zombie leader whose other threads still run (a JVM shutting down) counts.
            if int(fields[2]) == pgid and connect_server._running(int(entry.name)):
                members.append(int(entry.name))
    return members


def _start(state: Path, port: int, env: dict[str, str] | None = None, *extra: str) -> int:
    started = _replay("server", "start", "--port", str(port), "--dir", str(state), *extra, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert f"sc://localhost:{port}" in started.stdout
    assert str(state / "server.log") in started.stdout
    return int((state / "server.pid").read_text())


def _stop_and_check_gone(state: Path, port: int, pid: int) -> None:
    stopped = _replay("server", "stop", "--dir", str(state))
    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {pid}" in stopped.stdout
    assert _group_members(pid) == [], "stop leaves no process of the server's group"
    if _listening(port):
        holders = subprocess.run(["ss", "-ltnp", f"sport = :{port}"], capture_output=True, text=True)
        pytest.fail(f"port {port} still listened on after stop:\n{holders.stdout}")
    assert not (state / "server.pid").exists()


def test_a_non_loopback_host_without_token_is_refused_before_anything_starts(tmp_path):
    port = free_port()
    state = tmp_path / "connect"
    for host in ("0.0.0.0", "192.0.2.10", "example.com"):
        refused = _replay("server", "start", "--host", host, "--port", str(port), "--dir", str(state))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"{host} is not a loopback address" in refused.stderr
        assert TOKEN_ENV in refused.stderr
    assert not state.exists(), "nothing was written"
    assert not _listening(port)
    # An empty token is no token.
    refused = _replay("server", "start", "--host", "0.0.0.0", "--dir", str(state), env={TOKEN_ENV: " "})
    assert refused.returncode == 2
    # The foreground form (a container's command) applies the same rule before it starts Spark.
    refused = _replay("server", "run", "--host", "0.0.0.0", "--port", str(port))
    assert refused.returncode == 2 and TOKEN_ENV in refused.stderr
    assert not _listening(port)


def test_a_bad_server_setting_is_refused_before_anything_starts(tmp_path):
    port = free_port()
    state = tmp_path / "connect"
    for setting, said in [("spark.cores.max", "expected KEY=VALUE"),
                          ("cores=1", "not a Spark setting"),
                          (f"spark.connect.grpc.binding.port={port + 1}", "use --host / --port"),
                          ("spark.connect.authenticate.token=secret", TOKEN_ENV)]:
        for action in ("start", "run"):
            refused = _replay("server", action, "--port", str(port), "--dir", str(state), "--conf", setting)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert said in refused.stderr, refused.stderr
    refused = _replay("server", "status", "--dir", str(state), "--conf", "spark.cores.max=1")
    assert refused.returncode == 2 and "only for start and run" in refused.stderr
    assert not state.exists(), "nothing was written"
    assert not _listening(port)


def test_server_settings_come_after_the_replays_own():
    command, _ = connect_server.server_command("127.0.0.1", 15002, {"spark.cores.max": "1",
                                                                     "spark.sql.shuffle.partitions": "8"})
    settings = [command[i + 1] for i, part in enumerate(command) if part == "--conf"]
    assert "spark.cores.max=1" in settings and "spark.sql.shuffle.partitions=8" in settings
    assert "spark.sql.shuffle.partitions=4" not in settings  # the replay's default, overridden


def test_loopback_addresses():
    assert all(connect_server.is_loopback(h) for h in ("127.0.0.1", "127.0.0.5", "::1", "localhost"))
    assert not any(connect_server.is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "spark.internal"))


def test_status_and_stop_when_down(tmp_path):
    status = _replay("server", "status", "--dir", str(tmp_path))
    assert status.returncode == 3
    assert "not running" in status.stdout
    stop = _replay("server", "stop", "--dir", str(tmp_path))
    assert stop.returncode == 0
    assert "not running" in stop.stdout


@pytest.mark.spark
@pytest.mark.slow  # a server JVM each: about 80 s for both on this 2-core machine
def test_delta_sql_over_connect_then_stop(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    from pyspark.sql import SparkSession

    port, state = free_port(), tmp_path / "connect"
    pid = _start(state, port, None, "--conf", "spark.sql.shuffle.partitions=3")
    try:
        status = _replay("server", "status", "--dir", str(state))
        assert status.returncode == 0 and "running at sc://localhost" in status.stdout
        assert f"pid {pid}" in status.stdout
        again = _replay("server", "start", "--port", str(port), "--dir", str(state))
        assert again.returncode == 0 and again.stdout.startswith("already running"), again.stdout
        assert int((state / "server.pid").read_text()) == pid

        spark = SparkSession.builder.remote(f"sc://localhost:{port}").create()
        try:
            # The server's own setting (--conf) wins over the replay's default (4).
            assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
            table = str(tmp_path / "table")
            spark.range(5).selectExpr("id", "id * 10 AS v").write.format("delta").save(table)
            spark.sql(f"""MERGE INTO delta.`{table}` t
                          USING (SELECT id, -1 AS v FROM range(3, 7)) s ON t.id = s.id
                          WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *""")
            merged = {r.id: r.v for r in spark.read.format("delta").load(table).collect()}
            assert merged == {0: 0, 1: 10, 2: 20, 3: -1, 4: -1, 5: -1, 6: -1}
            history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
            assert [(r.version, r.operation) for r in history] == [(0, "WRITE"), (1, "MERGE")]
            spark.sql(f"RESTORE TABLE delta.`{table}` TO VERSION AS OF 0")
            restored = {r.id: r.v for r in spark.read.format("delta").load(table).collect()}
            assert restored == {i: i * 10 for i in range(5)}
            assert spark.sql(f"DESCRIBE HISTORY delta.`{table}`").first().operation == "RESTORE"
        finally:
            spark.stop()
    finally:
        _stop_and_check_gone(state, port, pid)
    status = _replay("server", "status", "--dir", str(state))
    assert status.returncode == 3 and "not running" in status.stdout


@pytest.mark.spark
@pytest.mark.slow  # a server JVM each: about 80 s for both on this 2-core machine
def test_a_server_started_with_a_token_refuses_clients_without_it(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    from pyspark.sql import SparkSession

    token = secrets.token_urlsafe(24)
    port, state = free_port(), tmp_path / "connect"
    pid = _start(state, port, env={TOKEN_ENV: token})
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline, "the token is not on the server's command line"
        assert token not in (state / "server.json").read_text()
        assert "token required" in _replay("server", "status", "--dir", str(state)).stdout

        for refused_url in (f"sc://localhost:{port}", f"sc://localhost:{port}/;token=not-{token}"):
            refused = SparkSession.builder.remote(refused_url).create()
            try:
                with pytest.raises(Exception, match="(?i)unauthenticated|authentication"):
                    refused.sql("SELECT 1").collect()
            finally:
                # Closed, not stopped (no RPC): a client left open calls its server at exit and,
                # the server gone, retries for about ten minutes before the process ends.
                refused.client.close()
        # PySpark sends a token only over TLS or to the literal host `localhost` (gRPC local
        # credentials); Spark 4.2's server has no TLS, so a client on this machine says localhost.
        client = SparkSession.builder.remote(f"sc://localhost:{port}/;token={token}").create()
        try:
            assert client.sql("SELECT 41 + 1 AS answer").first().answer == 42
        finally:
            client.stop()
    finally:
        _stop_and_check_gone(state, port, pid)


@pytest.mark.spark
@pytest.mark.slow  # a server JVM and three client processes: about two minutes here
def test_two_pipelines_share_one_server_and_one_pipeline_twice_is_refused(spark, tmp_path, monkeypatch):
    """Two pipelines replayed at once as clients of one server, each in its own session, give the
    tables an in-process replay gives; a second run of a pipeline that is running is refused
    (the lock is the client's); a server that is down is a clear error naming its address."""
    import time

    from replay_helpers import run_cli, snapshot, write_archive, write_pipeline

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    archive = write_archive(tmp_path / "archive", records=3_000, keys=5, files=3)
    configs = {
        name: write_pipeline(tmp_path / f"{name}.yaml", archive, tmp_path / name,
                             name=name, batch={"max_records": 300})
        for name in ("first", "second", "local")
    }
    assert run_cli("run", str(configs["local"]), "--finalize").returncode == 0
    port, state = free_port(), tmp_path / "connect"
    pid = _start(state, port)
    remote = f"sc://localhost:{port}"
    try:
        env = {**os.environ, "SPARK_REMOTE": remote}
        env.pop("SPARK_MASTER", None)
        runs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "spark_jobs.interfaces.cli", "run", str(configs[name]), "--finalize"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for name in ("first", "second")
        }
        lock = tmp_path / "first" / "_replay.lock"
        deadline = time.time() + 120
        while time.time() < deadline and not (lock.exists() and lock.read_text().strip()):
            time.sleep(0.1)
        again = _replay("run", str(configs["first"]), "--remote", remote)
        finished = {name: run.communicate(timeout=600) for name, run in runs.items()}
        for name, run in runs.items():
            assert run.returncode == 0, finished[name]
        overlapped = "already being replayed" in again.stderr
        assert again.returncode == (1 if overlapped else 0), again.stderr
    finally:
        _stop_and_check_gone(state, port, pid)
    expected = snapshot(spark, tmp_path / "local")
    assert expected["window_results"]
    assert snapshot(spark, tmp_path / "first") == expected
    assert snapshot(spark, tmp_path / "second") == expected
    down = _replay("run", str(configs["first"]), "--remote", remote)
    assert down.returncode == 1 and f"no Spark Connect server answers at sc://localhost:{port}" in down.stderr
    if not overlapped:  # the first run ended before the overlapping one asked for the lock
        pytest.skip("the overlapping run came too late to meet the lock (the rest was checked)")


@pytest.mark.spark
@pytest.mark.slow  # two server JVMs and three client processes: about three minutes here
def test_a_server_killed_mid_pass_leaves_exactly_once_to_the_next_run(spark, tmp_path, monkeypatch):
    """The server dies (SIGKILL to its process group) while a client's run is mid-way through its
    passes; a new server, and the same run again, end with the tables of an in-process replay."""
    import signal
    import time

    from replay_helpers import run_cli, snapshot, write_archive, write_pipeline

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    archive = write_archive(tmp_path / "archive", records=3_000, keys=5, files=3)
    configs = {name: write_pipeline(tmp_path / f"{name}.yaml", archive, tmp_path / name, name=name,
                                    batch={"max_records": 300, "pass_max_records": 300})
               for name in ("killed", "local")}
    assert run_cli("run", str(configs["local"]), "--finalize").returncode == 0
    commits = tmp_path / "killed" / "replay_log" / "_delta_log"
    for attempt, kill in (("first", True), ("again", False)):
        port, state = free_port(), tmp_path / f"connect-{attempt}"
        pid = _start(state, port)
        env = {**os.environ, "SPARK_REMOTE": f"sc://localhost:{port}"}
        env.pop("SPARK_MASTER", None)
        client = subprocess.Popen(
            [sys.executable, "-m", "spark_jobs.interfaces.cli", "run", str(configs["killed"]), "--finalize"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if kill:  # after the second commit: passes done and passes to come
                deadline = time.time() + 300
                while (len(list(commits.glob("*.json"))) < 2 and client.poll() is None
                       and time.time() < deadline):
                    time.sleep(0.2)
                assert client.poll() is None, "the run ended before the server could be killed"
                os.killpg(pid, signal.SIGKILL)
                try:  # the client fails (or retries the address for a while: then it is killed too)
                    client.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    client.kill()
                assert client.wait() != 0
                while _group_members(pid):
                    time.sleep(0.2)
            else:
                out, err = client.communicate(timeout=900)
                assert client.returncode == 0, err[-3000:]
        finally:
            if client.poll() is None:
                client.kill()
            if not kill:
                _stop_and_check_gone(state, port, pid)
    expected = snapshot(spark, tmp_path / "local")
    assert expected["window_results"]
    assert snapshot(spark, tmp_path / "killed") == expected
