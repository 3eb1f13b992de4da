"""Keyed process functions with timers, on the same timeline driver as the window operator."""

from __future__ import annotations

import pytest

from spark_jobs.config import parse_config
from spark_jobs.exceptions import ConfigError
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

PROCESS = {"class": "spark_jobs.contrib.process.InactivityAlert", "params": {"gap": 10_000, "big": 9.0},
           "output": {"kind": "string", "last_seen": "long", "events": "long"}}
# (key, ts, value): u1 has two sessions, u2 one; ts 100_000 of u2 moves the watermark past them.
ROWS = [("u1", 1_000, 1.0), ("u1", 4_000, 9.5), ("u2", 5_000, 2.0), ("u1", 30_000, 1.0),
        ("u1", 33_000, 1.0), ("u2", 100_000, 1.0)]


def run(batch_size: int, finalize: bool = True):
    config = parse_config({"name": "p", "source": {"path": "x", "event_time": "ts"}, "key": "user",
                           "process": PROCESS, "output": {"path": "o"}})
    records = [Record((k,), ts, (), fields={"event_id": f"e{i}", "ts": ts, "value": v})
               for i, (k, ts, v) in enumerate(ROWS)]
    memory = MemoryReplay(config, operator_spec(config))
    memory.run(records, batch_size, finalize=finalize)
    emitted = [(key[0], p.values, p.timing, p.fire_time, p.watermark) for key, p in memory.emitted()]
    return emitted, memory


@pytest.mark.parametrize("batch_size", [1, 2, 6])
def test_inactivity_timers_fire_on_the_watermark_whatever_the_batch_size(batch_size):
    emitted, memory = run(batch_size)
    # u1's record at 30 s is processed before the watermark it causes (29.999 s) passes its 14 s
    # timer, so it re-arms the timer: one session of 4 events. u2's 15 s timer fires at 29.999 s.
    assert emitted == [
        ("u2", ["session_end", 5_000, 1], "TIMER", 15_000, 29_999),
        ("u1", ["session_end", 33_000, 4], "TIMER", 43_000, 99_999),
        ("u2", ["session_end", 100_000, 1], "TIMER", 110_000, 2**63 - 1),  # at finalize
    ]
    assert [(k[0], s.tag) for k, s in memory.sides] == [("u1", "big_spend")]
    assert not memory.state, "the function clears its state and timers: nothing is left per key"


def test_state_and_timers_survive_between_batches():
    emitted, memory = run(3, finalize=False)
    assert len(emitted) == 2
    assert list(memory.state) == [("u2",)]  # u2's pending timer and state wait for the next run


def test_process_excludes_window_settings():
    with pytest.raises(ConfigError, match="window"):
        parse_config({"name": "p", "source": {"path": "x", "event_time": "ts"}, "key": "user",
                      "process": PROCESS, "window": {"type": "tumbling", "size": "1m"},
                      "output": {"path": "o"}})
