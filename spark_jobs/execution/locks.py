"""The pipeline lock: one replay (or reprocess, reset, maintenance) of a pipeline at a time.

On a local lakehouse, ``flock`` on a file naming its holder, which the OS releases even on
SIGKILL. On object storage, which has no ``flock``, a lease object created only if absent (a
conditional PUT) and taken over when its holder on this host is gone (``_lease``). A killed
driver's Spark JVM outlives it for a moment (it exits when its parent's pipe closes) and may
finish a commit in flight, as a killed Spark Connect client's operations may on the server: the
next holder waits for those to be gone first (``connect_orphans`` for the latter).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from ..config import PipelineConfig, local_path
from ..exceptions import ConcurrentRunError
from .connect_orphans import session_holder, wait_for_orphan_operations
from .object_store import create_exclusive, delete, read_text, require_reachable_without_jvm
from .spark_session import is_connect

LOCK_NAME = "_replay.lock"


@contextlib.contextmanager
def pipeline_lock(config: PipelineConfig, spark: Any = None) -> Iterator[None]:
    """Hold the pipeline's lock for the duration of the block, or raise ConcurrentRunError."""
    path = config.output_path
    local = local_path(path)
    if local is not None:
        os.makedirs(local, exist_ok=True)
        with _flock(os.path.join(local, LOCK_NAME), config.name, _jvm_pid(spark), spark):
            yield
    else:
        with _lease(spark, f"{path.rstrip('/')}/{LOCK_NAME}", config.name):
            yield


#: How long a new run waits for a killed run's JVM to exit by itself before killing it.
ORPHAN_JVM_WAIT_SECONDS = 60.0


def _jvm_pid(spark: Any) -> int | None:
    """The pid of the session's driver JVM (None without a session, or over Spark Connect, where
    the server's JVM outlives every client)."""
    if spark is None or is_connect(spark):
        return None
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def _process_start(pid: int) -> str | None:
    """When a live process started (clock ticks since boot): with its pid, names it across pid
    reuse. None if it is gone or a zombie (or on systems without ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] == "Z" else fields[19]


def _wait_for_orphan_jvm(previous_holder: str, own_jvm: int | None) -> None:
    """A previous holder's driver JVM, if still alive (its Python process was killed), may still
    commit what it was writing: wait until it exits, killing it after ``ORPHAN_JVM_WAIT_SECONDS``."""
    import re
    import signal

    found = re.search(r"jvm (\d+):(\d+)", previous_holder)
    if not found or int(found.group(1)) == own_jvm:
        return
    pid, start = int(found.group(1)), found.group(2)
    deadline = time.time() + ORPHAN_JVM_WAIT_SECONDS
    while _process_start(pid) == start:
        if time.time() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


@contextlib.contextmanager
def _flock(lock_path: str, name: str, jvm_pid: int | None = None, spark: Any = None) -> Iterator[None]:
    """The lock on a local lakehouse: ``flock`` on a file naming its holder. A holder killed
    mid-run leaves its name, and what it may still be running is waited for: its driver JVM, or
    its Spark Connect session's operations (``connect_orphans``)."""
    import fcntl

    handle = open(lock_path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConcurrentRunError(
                f"pipeline {name} is already being replayed ({holder}); "
                f"wait for it to finish (lock: {lock_path})"
            ) from None
        handle.seek(0)
        previous = handle.read()
        _wait_for_orphan_jvm(previous, jvm_pid)
        wait_for_orphan_operations(previous, spark)
        handle.seek(0)
        handle.truncate()
        jvm = f" jvm {jvm_pid}:{_process_start(jvm_pid)}" if jvm_pid is not None else ""
        handle.write(f"pid {os.getpid()}{jvm}{session_holder(spark)} "
                     f"since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        handle.flush()
        try:
            yield
        finally:
            # Released by this process, its writes done: no JVM of this run to wait for.
            handle.seek(0)
            handle.truncate()
            handle.flush()
    finally:
        handle.close()


@contextlib.contextmanager
def _lease(spark: Any, lock_uri: str, name: str) -> Iterator[None]:
    """The lock on object storage (``s3a://``), which has no ``flock``: a lease object.

    Created only if absent (``create``: a conditional PUT, ``If-None-Match: *``), so
    the store itself lets only one of two racing writers create it. The lease names its holder
    (host, pid, driver JVM or Spark Connect session); one left by a holder that is gone from this
    host is taken over (after its JVM, or its session's operations on the server, are gone too),
    one from another host is not: only a person can tell whether that run is still alive.
    """
    import socket

    lease = lease_object(spark, lock_uri)
    own_jvm = _jvm_pid(spark)
    host = socket.gethostname()
    holder = (f"host {host} pid {os.getpid()}:{_process_start(os.getpid())}"
              + (f" jvm {own_jvm}:{_process_start(own_jvm)}" if own_jvm is not None else "")
              + session_holder(spark)
              + f" since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    for attempt in (1, 2):
        if lease.create(holder.encode()):
            break
        previous = lease.read()
        if attempt == 1 and _holder_gone(previous, host):
            _wait_for_orphan_jvm(previous, own_jvm)
            wait_for_orphan_operations(previous, spark)
            lease.delete()
            continue
        raise ConcurrentRunError(
            f"pipeline {name} is already being replayed ({previous or 'lease being written'}; "
            f"lease {lock_uri}); wait for it to finish. If no replay is running (a run on "
            "another host was killed), delete that object"
        )
    try:
        yield
    finally:
        lease.delete()


def lease_object(spark: Any, uri: str) -> _LeaseObject | _S3LeaseObject:
    """The lease object at ``uri``: through Hadoop in-process, else on S3 without a JVM (a Spark
    Connect client, which has no Hadoop ``FileSystem``; other schemes are a ConfigError)."""
    if spark is not None and not is_connect(spark):
        return _LeaseObject(spark, uri)
    require_reachable_without_jvm(uri)
    return _S3LeaseObject(uri)


class _LeaseObject:
    """The lease object through Hadoop's ``FileSystem`` (in-process: any file system Spark
    reaches)."""

    def __init__(self, spark: Any, uri: str):
        self.path = spark._jvm.org.apache.hadoop.fs.Path(uri)
        self.fs = self.path.getFileSystem(spark._jsc.hadoopConfiguration())

    def create(self, data: bytes) -> bool:
        """Create the lease with ``data`` only if it does not exist: False if it does.

        Hadoop's conditional create (``fs.option.create.conditional.overwrite``: S3A sends the PUT
        with ``If-None-Match: *`` and skips its own existence check). A file system without the
        option (or S3A with ``fs.s3a.create.conditional.enabled=false``) falls back to
        ``create(path, overwrite=False)``: check, then put, a few milliseconds apart."""
        try:
            try:
                builder = (self.fs.createFile(self.path).overwrite(False)
                           .must("fs.option.create.conditional.overwrite", True)  # If-None-Match: *
                           .opt("fs.s3a.create.performance", True))  # no HEAD first: the store decides
                stream = builder.build()
            except Exception:  # noqa: BLE001 - the option is not supported here (or turned off)
                stream = self.fs.create(self.path, False)
            stream.write(data)
            stream.close()  # S3A PUTs on close: a conditional PUT that lost fails here (412)
        except Exception:  # noqa: BLE001 - FileAlreadyExistsException, or 412 from the store
            return False
        return True

    def read(self) -> str:
        try:
            stream = self.fs.open(self.path)
            try:
                data = bytearray()
                while (byte := stream.read()) != -1 and len(data) < 4096:
                    data.append(byte)
                return data.decode(errors="replace").strip()
            finally:
                stream.close()
        except Exception:  # noqa: BLE001 - deleted meanwhile, or not yet written
            return ""

    def delete(self) -> None:
        self.fs.delete(self.path, False)


class _S3LeaseObject:
    """The lease object on S3 without a JVM (``object_store``: boto3's conditional PUT, pyarrow)."""

    def __init__(self, uri: str):
        self.uri = uri

    def create(self, data: bytes) -> bool:
        return create_exclusive(self.uri, data)

    def read(self) -> str:
        return (read_text(self.uri) or "").strip()[:4096]

    def delete(self) -> None:
        delete(self.uri)


def _holder_gone(holder: str, host: str) -> bool:
    """Whether a lease's holder was a process of this host that is no longer running."""
    import re

    found = re.match(r"host (\S+) pid (\d+):(\S+)", holder)
    return bool(found) and found.group(1) == host and _process_start(int(found.group(2))) != found.group(3)
