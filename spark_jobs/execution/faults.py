"""Fault injection for the kill-and-resume tests: SIGKILL this process at a named point.

``REPLAY_CRASH_AT=batch:3:state`` kills the replay right after batch 3's state write; no cleanup
runs, exactly as if the machine had died there. The points are named where they are placed
(``ingest``, ``pass_write``, ``maintenance``, ``recovery``, ``operations``); the tests list them.
"""

from __future__ import annotations

import os


def crash_point(name: str) -> None:
    if os.environ.get("REPLAY_CRASH_AT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
