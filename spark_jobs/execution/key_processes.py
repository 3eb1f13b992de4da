"""A big driver pass's keys shared with helper processes, so that its operator runs on more than
the driver's one core (``batch.driver_processes``).

The keys are independent: each helper gets a share of the keys (their records and state rows,
``share_keys``), runs the same per-key function over them (``run_keys_on_driver``) and sends its
rows back; the driver runs the last share itself meanwhile, and the outputs are joined in key
order, so the rows are those of one process. A helper is a plain ``python -m`` child speaking
length-prefixed pickles over its stdin and stdout (no ``multiprocessing``: its start method would
import the caller's ``__main__``, an Airflow task or pytest); it exits when its stdin closes, so a
driver that is killed leaves none behind. A helper that fails, or dies, has its keys run on the
driver instead: the same rows, at the cost of one core.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, BinaryIO

#: Passes smaller than this run on the driver's core alone: a helper's share would cost more to
#: send and receive than it saves.
MIN_SHARED_RECORDS = 100_000

#: Each key's fixed cost in the per-key function, as records (~1.5 ms against ~1.5 us a record,
#: the session kernel's on a 1M pass, measured): how a pass's keys are cut into shares of equal work.
KEY_COST_RECORDS = 1000

#: The driver's share of a pass's keys, over a helper's: a helper's starts once the share is sent
#: and unpickled, and its rows are sent back (0.4-0.5 s of a 1M session pass's 1.5 s shares).
DRIVER_EXTRA_SHARE = 0.3

_LENGTH = struct.Struct("<Q")


def usable_processes(wanted: int) -> int:
    """``wanted``, no more than the cores this process may run on."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(wanted, cores))


def _write(stream: BinaryIO, payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _read(stream: BinaryIO) -> bytes | None:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    payload = stream.read(size)
    return payload if len(payload) == size else None


def share_keys(weights: list[int], shares: int, last_extra: float = 0.0) -> list[list[int]]:
    """Which keys (indexes into ``weights``, their costs) each of ``shares`` processes runs, the
    last one ``1 + last_extra`` times as much as each other: the heaviest key first, each to the
    share that would finish it first (so one big key of a skewed few does not leave a contiguous
    cut lopsided: sliding windows' eight pages, one of them 30 % of the records). Each share's
    keys in ascending order; a share may be empty."""
    capacity = [1.0] * (shares - 1) + [1.0 + last_extra]
    loads = [0.0] * shares
    chosen: list[list[int]] = [[] for _ in range(shares)]
    for index in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        share = min(range(shares), key=lambda s: ((loads[s] + weights[index]) / capacity[s], -s))
        loads[share] += weights[index]
        chosen[share].append(index)
    return [sorted(keys) for keys in chosen]


class KeyHelpers:
    """Up to ``processes - 1`` helper processes, started when first wanted (``start``), stopped
    by ``close``."""

    def __init__(self, processes: int):
        self.processes = usable_processes(processes)
        self.children: list[subprocess.Popen] = []
        self.lock = threading.Lock()
        self.failed = False

    @property
    def enabled(self) -> bool:
        """Whether passes share their keys: not after a helper failed (its failure would repeat
        each pass: a function it cannot import, say), for the rest of the run."""
        return self.processes > 1 and not self.failed

    def start(self) -> None:
        """Start the helpers (without waiting for them: they import while the driver works)."""
        with self.lock:
            if self.children or not self.enabled:
                return
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[2]), *(p for p in sys.path if p)]
            )}
            for _ in range(self.processes - 1):
                self.children.append(subprocess.Popen(
                    [sys.executable, "-m", "spark_jobs.execution.key_processes"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                ))

    def run(self, shares: list[tuple[Any, ...]], local: Any) -> list[Any]:
        """Each of ``shares`` (``(runner, *its arguments)``: ``spark_batch.run_keys_on_driver``,
        sent by reference) in a helper, ``local()`` here meanwhile; the helpers' outputs in order,
        then ``local``'s. A share whose helper fails runs here after.

        Shares are sent before ``local`` starts and answers read after it ends, with no thread
        beside it: a thread's pipe writes would wait for the GIL at every pipe-full (64 KB) while
        ``local`` runs, seconds for a share of 30 MB."""
        from pyspark import cloudpickle

        self.start()
        sent = [self._send(child, _request(cloudpickle, *share))
                for child, share in zip(self.children, shares, strict=False)]
        mine = local()
        outputs = []
        for index, share in enumerate(shares):
            answer = self._receive(self.children[index]) if index < len(sent) and sent[index] else None
            if answer is None:
                self.failed = True
                answer = share[0](*share[1:])
            outputs.append(answer)
        return [*outputs, mine]

    @staticmethod
    def _send(child: subprocess.Popen, request: bytes) -> bool:
        try:
            _write(child.stdin, request)
            return True
        except OSError:  # (BrokenPipeError: it died)
            _report_gone()
            return False

    @staticmethod
    def _receive(child: subprocess.Popen) -> Any:
        """The helper's rows, or None when it failed (reported on stderr)."""
        import pickle

        try:
            payload = _read(child.stdout)
        except OSError:
            payload = None
        if payload is None:
            _report_gone()
            return None
        ok, value = pickle.loads(payload)
        if not ok:
            print(f"key helper failed; its keys run on the driver:\n{value}", file=sys.stderr, flush=True)
            return None
        return _table(value)

    def close(self) -> None:
        with self.lock:
            for child in self.children:
                try:
                    child.stdin.close()
                except OSError:
                    pass
            for child in self.children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
                child.stdout.close()
            self.children = []


def _report_gone() -> None:
    print("key helper: gone; its keys run on the driver", file=sys.stderr, flush=True)


def _request(
    cloudpickle: Any, runner: Any, function: Any, keys: list[str], records: Any, state: Any, schema: Any
) -> bytes:
    """A share as sent: the tables as Arrow IPC, which writes a slice's own rows only (a pickled
    slice carries all of its parent's buffers: the whole pass, once per key)."""
    return cloudpickle.dumps((runner, function, keys, _ipc(records), _ipc(state), schema), protocol=5)


def _ipc(table: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: bytes) -> Any:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """A helper's loop: run each share sent (its runner imported as it is unpickled), answer
    ``(True, rows)`` or ``(False, traceback)``; stop when the driver closes the pipe."""
    import pickle

    # Imported before the first share comes, as the driver has them: what unpickling a share's
    # function (pyspark's cloudpickle, 0.4 s) and running the kernels (pandas, 0.3 s) import.
    import pandas  # noqa: F401
    import pyarrow.compute  # noqa: F401
    from pyspark import cloudpickle  # noqa: F401

    from ..core.engine import keyed, session_kernel, window_kernel  # noqa: F401

    while (request := _read(requests)) is not None:
        try:
            runner, function, keys, records, state, schema = pickle.loads(request)
            answer = (True, _ipc(runner(function, keys, _table(records), _table(state), schema)))
        except Exception:  # reported to the driver, which runs the share itself
            answer = (False, traceback.format_exc())
        try:
            _write(answers, pickle.dumps(answer, protocol=5))
        except BrokenPipeError:  # the driver is gone
            return


if __name__ == "__main__":
    # Answers go to the real stdout; anything else printed goes to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, answers)
