"""The contract's worked example (semantics.md), in memory, for several micro-batch sizes.

The seed's log is in UTC+8, so "[23:02, 23:03)" is the minute starting at epoch ms
1662303720000 (15:02 UTC).
"""

from __future__ import annotations

import pytest
from reference import reference_replay

from spark_jobs.config import parse_config
from spark_jobs.core.durations import MAX_TIMESTAMP
from spark_jobs.core.windows import TimeWindow
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

# id, frequency, event time (epoch ms), in arrival order.
RECORDS = [
    (1, 2, 1662303772840), (2, 1, 1662303770844), (3, 3, 1662303773848), (4, 2, 1662303774866),
    (5, 1, 1662303777839), (6, 2, 1662303784887), (7, 3, 1662303776894), (8, 1, 1662303786891),
    (9, 5, 1662303778877), (10, 4, 1662303791904), (11, 1, 1662303795918), (12, 6, 1662303779883),
    (13, 2, 1662303846254),
]
MINUTE, D = 60_000, 5_000
W1 = TimeWindow(1662303720000, 1662303720000 + MINUTE)  # [23:02, 23:03) local
W2 = TimeWindow(W1.end, W1.end + MINUTE)
W3 = TimeWindow(W2.end, W2.end + MINUTE)


def ts(record_id: int) -> int:
    return RECORDS[record_id - 1][2]


def wm_after(record_id: int) -> int:
    """The watermark emitted after a record: max event time so far - D - 1."""
    return max(r[2] for r in RECORDS[:record_id]) - D - 1


CONFIG = parse_config({
    "name": "we", "source": {"path": "x", "event_time": "ts", "types": {"frequency": "long"}},
    "key": "word", "window": {"type": "tumbling", "size": "1m"},
    "trigger": {"type": "continuous_event_time", "interval": "10s"},
    "watermark": {"max_out_of_orderness": "5s", "emit": "per_record"},
    "aggregates": {"ids": "collect_list(id)", "frequency": "sum(frequency)"},
    "output": {"path": "o"},
})
INPUT = [Record(("a",), t, (str(i), f)) for i, f, t in RECORDS]

W2_IDS = ["6", "8", "10", "11"]
# (window, pane_index, timing, ids, sum, fire time, watermark, clock)
EXPECTED = [
    # W1 fires once, ON_TIME, after record 8 moves the watermark past 23:02:59.999.
    (W1, 0, "ON_TIME", ["1", "2", "3", "4", "5", "7"], 12, W1.end - 1, wm_after(8), ts(8)),
    # W2's 10 s timer fires after record 11 (wm 23:03:10.917), with record 11 already inside.
    (W2, 0, "EARLY", W2_IDS, 8, W2.start + 10_000, wm_after(11), ts(11)),
    # Record 13 jumps the watermark to 23:04:01.253: the chain fires four more times and the
    # end timer, all with identical content.
    *[(W2, k, "EARLY", W2_IDS, 8, W2.start + 10_000 * (k + 1), wm_after(13), ts(13))
      for k in range(1, 5)],
    (W2, 5, "ON_TIME", W2_IDS, 8, W2.end - 1, wm_after(13), ts(13)),
    # W3 only fires at finalize (watermark and clock at +infinity).
    *[(W3, k, "EARLY", ["13"], 2, W3.start + 10_000 * (k + 1), MAX_TIMESTAMP, MAX_TIMESTAMP)
      for k in range(5)],
    (W3, 5, "ON_TIME", ["13"], 2, W3.end - 1, MAX_TIMESTAMP, MAX_TIMESTAMP),
]


@pytest.mark.parametrize("batch_size", [1, 3, 13, len(RECORDS) + 7])
def test_worked_example_reproduced_for_every_batch_size(batch_size):
    memory = MemoryReplay(CONFIG, operator_spec(CONFIG))
    memory.run(INPUT, batch_size)
    got = [
        (p.window, p.pane_index, p.timing, p.values[0], p.values[1], p.fire_time, p.watermark,
         p.replay_clock)
        for _, p in memory.emitted()
    ]
    assert got == EXPECTED
    assert sorted(late.seq + 1 for _, late in memory.late) == [9, 12]
    assert [late.watermark for _, late in memory.late] == [wm_after(8), wm_after(11)]
    assert memory.state == {} and memory.leaks == []


def test_worked_example_without_finalize_leaves_w3_waiting():
    memory = MemoryReplay(CONFIG, operator_spec(CONFIG))
    memory.run(INPUT, 5, finalize=False)
    assert {p.window for _, p in memory.emitted()} == {W1, W2}
    (rows,) = memory.state.values()
    assert [row.window for row in rows] == [W3]
    # The end timer and the chain's next fire time (23:04:10) wait for the next run.
    assert rows[0].event_timers == [W3.start + 10_000, W3.end - 1]


def test_reference_driver_reproduces_the_worked_example():
    result = reference_replay(CONFIG, INPUT)
    got = [
        (window, p.pane_index, p.timing, list(p.values[0]), p.values[1], p.fire_time, p.watermark,
         p.clock)
        for (_, window), panes in sorted(result.panes.items()) for p in panes
    ]
    assert got == EXPECTED
    assert sorted(seq + 1 for _, seq in result.late) == [9, 12]
