"""A killed Spark Connect client's operations: found by its session, interrupted, waited for.

In-process, a killed run's driver JVM dies with it, or is waited for
(``locks._wait_for_orphan_jvm``). Over Spark Connect the server outlives its clients and goes
on executing what a dead client sent (a reattachable execution waits for its client to come back;
a released session's are interrupted without waiting): a Delta commit in flight could land after
the next run's recovery has restored the tables. So the pipeline lock names the session of a
Connect client (``session_holder``: server address, session id, user; never the token), and the
next holder, before recovery, attaches to that session, interrupts all its operations and waits,
through Spark Connect's ``GetStatus``, until none is running (``wait_for_orphan_operations``);
then releases it. TERMINATING is not running: the server maps an execution that has finished,
failed or been cancelled to it until its resources are freed, which for one whose client died
before reading its last response is the detached timeout (five minutes); its work, commits
included, is over.
"""

from __future__ import annotations

import copy
import re
import time
from typing import Any

from ..exceptions import ConcurrentRunError
from .spark_session import is_connect

#: How long a new run waits for a dead client's operations to stop after interrupting them.
ORPHAN_OPERATIONS_WAIT_SECONDS = 120.0

_HOLDER = re.compile(
    r" connect (?P<host>\S+):(?P<port>\d+) session (?P<session>[0-9a-f-]{36})( user (?P<user>\S+))?")


def session_holder(spark: Any) -> str:
    """What the lock records of a Connect client's session (empty in-process)."""
    if spark is None or not is_connect(spark):
        return ""
    client = spark.client
    builder = client._builder  # the connection the session was made with (PySpark 4.2)
    user = f" user {client._user_id}" if client._user_id else ""  # no USER: the server's default
    return f" connect {builder.endpoint} session {client._session_id}{user}"


def wait_for_orphan_operations(previous_holder: str, spark: Any,
                               timeout: float = ORPHAN_OPERATIONS_WAIT_SECONDS) -> None:
    """If the lock's previous holder was a Connect client (now dead: the lock was free), interrupt
    what its session still runs on the server and wait until it has stopped."""
    found = _HOLDER.search(previous_holder)
    if not found:
        return
    host, port, session = found["host"], int(found["port"]), found["session"]
    if spark is not None and is_connect(spark) and spark.client._session_id == session:
        return
    from .connect_server import port_open

    if not port_open(host.strip("[]"), port, timeout=5.0):
        return  # a server that is gone runs nothing
    from pyspark.sql.connect.client.core import SparkConnectClient
    from pyspark.sql.connect.proto import base_pb2 as pb2

    client = SparkConnectClient(_builder(spark, host, port, session, found["user"]))
    active = (pb2.GetStatusResponse.OperationStatus.OPERATION_STATE_RUNNING,)
    try:
        try:
            client.interrupt_all()
        except Exception as error:  # noqa: BLE001 - a closed session has nothing left running
            if "SESSION_CLOSED" in str(error):
                return
            raise
        deadline = time.monotonic() + timeout
        while True:
            # GetStatus (Spark 4.1+): every operation of the session and its state.
            statuses = client._get_operation_statuses().operation_statuses
            running = [s.operation_id for s in statuses if s.state in active]
            if not running:
                break
            if time.monotonic() > deadline:
                raise ConcurrentRunError(
                    f"a killed run's operations ({', '.join(running)}) still run on the Spark Connect "
                    f"server at sc://{host}:{port} {timeout:.0f} s after being interrupted; wait for "
                    "them or restart the server, then run again"
                )
            time.sleep(0.2)
        client.release_session()
    finally:
        client.close()


def _builder(spark: Any, host: str, port: int, session: str, user: str | None) -> Any:
    """A channel to the dead client's session: this run's own channel settings (token included)
    when it is a Connect client, else the server's token from the environment."""
    if spark is not None and is_connect(spark):
        builder = copy.copy(spark.client._builder)
        builder._host, builder._port = host, port
    else:
        from .connect_server import channel_builder

        builder = channel_builder(host, port)
    # Its own parameters: the copy must not change the live session's (PySpark 4.2's ChannelBuilder).
    params = {k: v for k, v in builder._params.items() if k != "user_id"}
    builder._params = {**params, "session_id": session, **({"user_id": user} if user else {})}
    return builder
