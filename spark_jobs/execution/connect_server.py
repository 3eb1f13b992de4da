"""A Spark Connect server the product starts, checks and stops (``replay server start|stop|status``).

The server is Spark's own ``SparkConnectServer`` (its jar, ``spark-connect_2.13``, ships in
PySpark's ``jars/``), run by the pip-installed ``spark-submit`` with the settings every replay
driver gets (``spark_session.session_conf``: Delta's and the project's jars, Delta's SQL
extension and catalog), detached from the command that starts it. Its pid, address and log live
in a state directory (default ``.cache/connect``, or ``REPLAY_CONNECT_DIR``, or ``--dir``).

Safe by default: a Connect server runs whatever its clients send, so it binds 127.0.0.1 unless
told otherwise, and on any other address it refuses to start without Spark Connect's shared
token in the environment (``SPARK_CONNECT_AUTHENTICATE_TOKEN``, read by the server from its own
environment: never written to a file or onto a command line). With the variable set, the server
requires the token on any address, loopback included.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError, ReplayError
from .spark_session import PROJECT_ROOT, session_conf

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 15002
#: Spark 4.2's names (``org.apache.spark.sql.connect.config.Connect``): the bind address (unset,
#: the server binds every interface), the port, and the environment variable both the server
#: and PySpark's client read the shared token from.
BIND_ADDRESS_CONF = "spark.connect.grpc.binding.address"
BIND_PORT_CONF = "spark.connect.grpc.binding.port"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
STATE_FILE = "server.json"
PID_FILE = "server.pid"
LOG_FILE = "server.log"


class ServerError(ReplayError):
    """The Connect server could not be started or stopped."""


@dataclass(frozen=True)
class ServerState:
    running: bool
    pid: int | None
    host: str
    port: int
    log: Path
    token_required: bool = False

    @property
    def url(self) -> str:
        """The address clients use (``SPARK_REMOTE``); a wildcard bind is reached on localhost."""
        return f"sc://{_client_host(self.host)}:{self.port}"

    def describe(self) -> str:
        auth = ", token required" if self.token_required else ""
        if self.running:
            return (f"Spark Connect server running at {self.url} (pid {self.pid}, bound to "
                    f"{self.host}:{self.port}{auth}); log: {self.log}")
        return f"Spark Connect server not running (last log: {self.log})"


def state_dir(directory: str | Path | None = None) -> Path:
    return Path(directory or os.environ.get("REPLAY_CONNECT_DIR") or PROJECT_ROOT / ".cache" / "connect")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve to anything


def check_safe(host: str, port: int) -> None:
    """Refuse, before anything starts, a bind the server must not make."""
    if not 0 < port < 65536:
        raise ConfigError("--port", f"must be between 1 and 65535, not {port}")
    if not is_loopback(host) and not os.environ.get(TOKEN_ENV, "").strip():
        raise ConfigError(
            "--host", f"{host} is not a loopback address: a Spark Connect server runs any code its "
            f"clients send, so on {host} it needs the shared token; set {TOKEN_ENV} in the "
            "environment (never in a file or on the command line) and start again",
        )


def server_status(directory: str | Path | None = None) -> ServerState:
    folder = state_dir(directory)
    log = folder / LOG_FILE
    try:
        saved = json.loads((folder / STATE_FILE).read_text())
    except (OSError, ValueError):
        return ServerState(False, None, DEFAULT_HOST, DEFAULT_PORT, log)
    pid = int(saved["pid"])
    return ServerState(_alive(pid), pid, saved["host"], int(saved["port"]), log,
                       bool(saved.get("token_required")))


def start_server(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, directory: str | Path | None = None,
                 timeout: float = 180.0, conf: dict[str, str] | None = None) -> tuple[ServerState, bool]:
    """Start the server detached and wait until it answers a Connect query. ``conf``: Spark
    settings of the server's own (``server_command``).

    Returns its state and whether this call started it (False: one was already running there).
    """
    check_safe(host, port)
    check_conf(conf)
    current = server_status(directory)
    if current.running:
        return current, False
    folder = state_dir(directory)
    folder.mkdir(parents=True, exist_ok=True)
    if port_open(_client_host(host), port):
        raise ServerError(f"{host}:{port} is already in use by another process; choose --port")
    log = folder / LOG_FILE
    command, env = server_command(host, port, conf)
    token_required = bool(env.get(TOKEN_ENV, "").strip())
    with open(log, "ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} replay server start "
                  f"{host}:{port}\n".encode())
        out.flush()
        # Its own session (process group): no terminal signal reaches it, and stop ends the group.
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env=env, cwd=os.getcwd(), start_new_session=True)
    (folder / PID_FILE).write_text(f"{process.pid}\n")
    (folder / STATE_FILE).write_text(json.dumps(
        {"pid": process.pid, "host": host, "port": port, "log": str(log),
         "token_required": token_required, "started": time.time()}))
    state = ServerState(True, process.pid, host, port, log, token_required)
    try:
        _wait_ready(state, process, timeout)
    except BaseException:
        _terminate(process.pid, 10.0)
        _forget(folder)
        raise
    return state, True


def check_conf(conf: dict[str, str] | None) -> None:
    """Refuse, before anything starts, a server setting that is not Spark's, that would move the
    address the safety check (``check_safe``) was made for, or that carries a secret on the
    command line (the token comes from the environment only)."""
    for key in conf or {}:
        if not key.startswith("spark."):
            raise ConfigError("--conf", f"{key} is not a Spark setting (spark.*)")
        if key in (BIND_ADDRESS_CONF, BIND_PORT_CONF):
            raise ConfigError("--conf", f"{key}: use --host / --port")
        if key.startswith("spark.connect.authenticate"):
            raise ConfigError("--conf", f"{key}: the token comes from {TOKEN_ENV} in the environment, "
                                        "never from the command line")


def server_command(host: str, port: int,
                   conf: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The ``spark-submit`` command line and environment of a server bound to ``host:port``, with
    every replay driver's settings (``session_conf``), then ``conf`` (which wins): e.g.
    ``spark.cores.max`` on a standalone cluster that the server shares with other applications
    (left alone, a long-lived server holds every core of the cluster)."""
    master = os.environ.get("SPARK_MASTER", "local[*]")
    settings: dict[str, object] = {BIND_ADDRESS_CONF: host, BIND_PORT_CONF: port}
    if master.startswith("local"):
        # Left alone, the driver's own RPC and block-manager ports listen on the address the host
        # name resolves to (here a non-loopback one): a local server needs them on loopback only.
        settings.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"})
    settings.update(conf or {})
    command = [_spark_submit(), "--master", master,
               "--name", "replay-connect", "--class", SERVER_CLASS]
    for key, value in session_conf(settings).items():
        command += ["--conf", f"{key}={value}"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           # The driver's log4j level (spark_session's log config reads it): warnings and errors.
           "REPLAY_SPARK_LOG_LEVEL": os.environ.get("REPLAY_CONNECT_LOG_LEVEL", "WARN")}
    return command, env


def run_server_in_foreground(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                             conf: dict[str, str] | None = None) -> None:
    """Become the server (for a container or a service manager, which supervise and stop it):
    the same safety check and settings as ``start_server``, its log on this process's output."""
    check_safe(host, port)
    check_conf(conf)
    command, env = server_command(host, port, conf)
    os.execvpe(command[0], command, env)


def stop_server(directory: str | Path | None = None, timeout: float = 30.0) -> ServerState | None:
    """SIGTERM the server's process group, SIGKILL it after ``timeout``; None if none was running."""
    folder = state_dir(directory)
    state = server_status(folder)
    if state.pid is None:
        return None
    was_running = state.running
    if was_running:
        _terminate(state.pid, timeout)
    _forget(folder)
    return state if was_running else None


def _forget(folder: Path) -> None:
    for name in (STATE_FILE, PID_FILE):
        (folder / name).unlink(missing_ok=True)


def _terminate(pid: int, timeout: float) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                return
            time.sleep(0.2)
    if _group_alive(pid):
        raise ServerError(f"the Spark Connect server (pid {pid}) did not exit after SIGKILL")


def _group_alive(pgid: int) -> bool:
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Members may be zombies of this process (a server started by it): those are gone.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry)
            if fields and int(fields[2]) == pgid and _running(int(entry.name)):
                return True
    return False


def _running(pid: int) -> bool:
    """Whether any thread of ``pid`` still runs. A JVM's leader thread can be a zombie while its
    other threads still stop the server and hold its port: the process is not gone until they are."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    return any(fields and fields[0] not in ("Z", "X") for fields in map(_stat_fields, tasks))


def _alive(pid: int) -> bool:
    """Whether ``pid`` is still this server (not a dead one's pid reused by another program)."""
    _reap(pid)
    if not _running(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return SERVER_CLASS.encode() in cmdline


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child (the usual case: started by another command)


def _stat_fields(proc: Path) -> list[str] | None:
    """A ``/proc/<pid>`` (or ``/proc/<pid>/task/<tid>``) entry's ``stat`` after the command name:
    state, ppid, pgrp, ..."""
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _wait_ready(state: ServerState, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    host = _client_host(state.host)
    while not port_open(host, state.port):
        if process.poll() is not None:
            raise ServerError(f"the Spark Connect server exited with status {process.returncode} "
                              f"before listening; {state.log} ends with:\n{_tail(state.log)}")
        if time.monotonic() > deadline:
            raise ServerError(f"the Spark Connect server did not listen on {state.host}:{state.port} "
                              f"within {timeout:.0f} s; {state.log} ends with:\n{_tail(state.log)}")
        time.sleep(0.25)
    try:
        probe(state.host, state.port)
    except Exception as error:  # noqa: BLE001 - any failure of the first query is the answer
        raise ServerError(f"the Spark Connect server at {state.url} listens but did not answer a "
                          f"query ({error}); {state.log} ends with:\n{_tail(state.log)}") from error


def probe(host: str, port: int) -> None:
    """One trivial query over a new Connect session, with the token from the environment if any.

    PySpark's client sends a token only over TLS, or to the literal host ``localhost`` (gRPC local
    credentials), and Spark 4.2's server speaks no TLS: the probe runs on the server's own machine
    and, for a specific non-loopback address, sends the bearer header over plaintext to its own
    host (never leaving it).
    """
    from pyspark.sql.connect.session import SparkSession

    spark = SparkSession.builder.channelBuilder(channel_builder(host, port)).create()
    try:
        if spark.sql("SELECT 1 AS one").collect()[0].one != 1:
            raise ServerError("SELECT 1 did not return 1")
    finally:
        spark.client.close()


def channel_builder(host: str, port: int) -> Any:
    """A channel to a server on this machine bound to ``host``, with the token from the
    environment if any (see ``probe``)."""
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    token = os.environ.get(TOKEN_ENV, "").strip() or None
    client_host = _client_host(host)
    if token is None or client_host == "localhost":
        return DefaultChannelBuilder(f"sc://{client_host}:{port}" + (f"/;token={token}" if token else ""))
    return _plaintext_bearer(f"sc://{client_host}:{port}", token)


def _plaintext_bearer(url: str, token: str):
    """A channel builder that sends the token as a header without TLS (PySpark's own sends it only
    over TLS); the class is built here because pyspark's Connect client is imported on first use."""
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    class PlaintextBearer(DefaultChannelBuilder):
        @property
        def token(self):  # no TLS channel: the header goes in the metadata instead
            return None

        def metadata(self):
            return [*super().metadata(), ("authorization", f"Bearer {token}")]

    return PlaintextBearer(url)


def _client_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to ``host``."""
    if host in ("0.0.0.0", "::", "127.0.0.1", "localhost", "::1"):
        return "localhost"
    return host


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts a TCP connection at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
