"""The pipeline lock's fence against a killed run's Spark JVM: that JVM outlives its Python
driver for a moment and may still commit; the next holder waits for it to be gone."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from spark_jobs.execution import locks


def orphan(seconds: float) -> subprocess.Popen:
    """A process standing in for a killed run's JVM: alive for ``seconds``."""
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def left_by_killed_run(lock_path, process: subprocess.Popen) -> None:
    start = locks._process_start(process.pid)
    assert start is not None
    lock_path.write_text(f"pid 999999 jvm {process.pid}:{start} since 2026-11-24T00:00:00Z")


def test_next_holder_waits_for_the_killed_runs_jvm(tmp_path):
    lock_path = tmp_path / "_replay.lock"
    process = orphan(1.5)
    left_by_killed_run(lock_path, process)
    started = time.time()
    with locks._flock(str(lock_path), "p", jvm_pid=12345):
        assert process.poll() is not None  # gone before the lock was granted
        assert "jvm 12345:" in lock_path.read_text()
    assert time.time() - started >= 1.0
    assert process.returncode == 0  # it exited by itself
    assert lock_path.read_text() == ""  # released in order: nothing to wait for next time


def test_an_orphan_that_does_not_exit_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "ORPHAN_JVM_WAIT_SECONDS", 0.5)
    lock_path = tmp_path / "_replay.lock"
    process = orphan(60)
    left_by_killed_run(lock_path, process)
    with locks._flock(str(lock_path), "p"):
        pass
    assert process.wait(timeout=10) < 0  # killed by a signal


@pytest.mark.parametrize("content", ["", "pid 1 since 2026-11-24T00:00:00Z", "pid 1 jvm 1:0 since x"])
def test_no_wait_without_a_live_jvm_of_a_previous_run(tmp_path, content):
    lock_path = tmp_path / "_replay.lock"
    lock_path.write_text(content)  # released in order, older format, or a pid reused since
    started = time.time()
    with locks._flock(str(lock_path), "p"):
        pass
    assert time.time() - started < 0.5


def test_own_jvm_is_not_waited_for(tmp_path):
    """Runs in one process share its JVM: a failed run there leaves nothing to wait for."""
    lock_path = tmp_path / "_replay.lock"
    process = orphan(30)
    try:
        left_by_killed_run(lock_path, process)
        started = time.time()
        with locks._flock(str(lock_path), "p", jvm_pid=process.pid):
            pass
        assert time.time() - started < 0.5 and process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_without_a_jvm_the_lease_is_only_on_s3():
    """A Spark Connect client (or no session) has no Hadoop file system: it writes the lease on S3
    itself, and refuses any other object store clearly, before anything is written."""
    from spark_jobs.exceptions import ConfigError

    assert isinstance(locks.lease_object(None, "s3a://bucket/lake/_replay.lock"),
                      locks._S3LeaseObject)
    with pytest.raises(ConfigError, match="local disk or on S3"):
        locks.lease_object(None, "gs://bucket/lake/_replay.lock")
