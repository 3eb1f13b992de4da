"""The window operator through MemoryReplay: lateness, sliding partial lateness, sessions, timers."""

from __future__ import annotations

import pytest
from pipelines import ids_timings, late_seqs, make_config, records, replay

from spark_jobs.core.durations import MIN_TIMESTAMP
from spark_jobs.core.engine.keyed import process_key
from spark_jobs.core.rules import EARLY, LATE, ON_TIME, timer_timing
from spark_jobs.core.watermarks import Timeline
from spark_jobs.core.windows import TimeWindow
from spark_jobs.pipeline_spec import operator_spec

TUMBLING = {"type": "tumbling", "size": 10}


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_allowed_lateness_refires_late_and_the_boundary_is_late(batch_size):
    config = make_config(TUMBLING, lateness=5)
    # 12 -> wm 11: [0,10) fires ON_TIME (cleanup at 9 + 5 = 14 > 11). 3 is allowed-late: the
    # window re-fires at once, LATE. 15 -> wm 14 == cleanup time: the window is gone, and 4
    # (maxTimestamp + lateness == watermark) is skipped and a late event.
    memory = replay(config, records([(1,), (12,), (3,), (15,), (4,)]), batch_size)
    assert ids_timings(memory)[:2] == [(0, 0, ON_TIME, ["0"]), (0, 1, LATE, ["0", "2"])]
    assert late_seqs(memory) == {(("a",), 4)}
    assert memory.state == {}


def test_one_millisecond_before_the_boundary_is_still_accepted():
    config = make_config(TUMBLING, lateness=5)
    memory = replay(config, records([(1,), (14,), (4,)]), 1)  # wm 13 < 14: accepted
    assert ids_timings(memory)[:2] == [(0, 0, ON_TIME, ["0"]), (0, 1, LATE, ["0", "2"])]
    assert late_seqs(memory) == set()


def test_without_lateness_maxtimestamp_equal_watermark_is_late():
    memory = replay(make_config(TUMBLING), records([(1,), (10,), (9,)]), 1)  # wm 9 == maxTs 9
    assert ids_timings(memory)[0] == (0, 0, ON_TIME, ["0"])
    assert late_seqs(memory) == {(("a",), 2)}


def test_a_sliding_record_late_for_some_windows_only_is_not_a_late_event():
    config = make_config({"type": "sliding", "size": 20, "slide": 10})
    # 25 -> wm 24: [0,20) is done (cleanup 19), [10,30) is not (29). 15 belongs to both.
    memory = replay(config, records([(5,), (25,), (15,)]), 1)
    by_window = {}
    for start, index, timing, ids in ids_timings(memory):
        by_window.setdefault(start, []).append((index, timing, ids))
    assert by_window[0] == [(0, ON_TIME, ["0"])]
    assert by_window[10] == [(0, ON_TIME, ["1", "2"])]
    assert late_seqs(memory) == set()
    # ... but a record late for all its windows is.
    memory = replay(config, records([(5,), (45,), (15,)]), 1)
    assert late_seqs(memory) == {(("a",), 2)}


def test_a_late_session_record_merged_into_a_live_session_is_accepted():
    config = make_config({"type": "session", "gap": 10})
    # 0 -> [0,10) fires and is cleaned by 30 (wm 29). 20 alone would be [20,30): maxTs 29 <= wm,
    # late; but it touches the live [30,40), so it merges into [20,40) and is accepted.
    memory = replay(config, records([(0,), (30,), (20,)]), 1)
    assert ids_timings(memory) == [(0, 0, ON_TIME, ["0"]), (20, 0, ON_TIME, ["1", "2"])]
    assert late_seqs(memory) == set()
    # 19 would be [19,29): it does not touch [30,40): late.
    memory = replay(config, records([(0,), (30,), (19,)]), 1)
    assert late_seqs(memory) == {(("a",), 2)}


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_a_record_bridging_two_sessions_merges_them(batch_size):
    config = make_config({"type": "session", "gap": 10}, watermark={"max_out_of_orderness": 100})
    memory = replay(config, records([(0, 1), (12, 2), (8, 4)]), batch_size)
    assert ids_timings(memory) == [(0, 0, ON_TIME, ["0", "1", "2"])]
    ((_, pane),) = memory.emitted()
    assert pane.window == TimeWindow(0, 22) and pane.values[:2] == [3, 7]


def test_an_allowed_late_record_extends_a_session_that_already_fired():
    config = make_config({"type": "session", "gap": 10}, lateness=50)
    # [0,10) fires ON_TIME at wm 29; 5 opens [5,15), merging into [0,15): maxTs 14 <= wm, so the
    # event-time trigger fires the merged window at once (LATE) - a new window, pane 0.
    memory = replay(config, records([(0,), (30,), (5,)]), 1, finalize=False)
    assert ids_timings(memory) == [(0, 0, ON_TIME, ["0"]), (0, 0, LATE, ["0", "2"])]
    assert [p.window for _, p in memory.emitted()] == [TimeWindow(0, 10), TimeWindow(0, 15)]


def test_session_merge_carries_the_continuous_chain():
    config = make_config({"type": "session", "gap": 10},
                         {"type": "continuous_event_time", "interval": 4},
                         watermark={"max_out_of_orderness": 100})
    # [9,19) chains from 12, [25,35) from 28; 17 bridges them: the merged [9,35) keeps the
    # minimum stored fire time (12) and chains on to its end.
    for batch_size in (1, 3):
        memory = replay(config, records([(9,), (25,), (17,)]), batch_size)
        panes = [(p.window, p.fire_time, p.timing, p.values[2]) for _, p in memory.emitted()]
        merged = TimeWindow(9, 35)
        assert panes == [(merged, t, EARLY, ["0", "1", "2"]) for t in (12, 16, 20, 24, 28, 32)] + [
            (merged, 34, ON_TIME, ["0", "1", "2"])]
        assert memory.state == {} and memory.leaks == []
    # The new record's own window gets no chain of its own: merging happens before on_element.
    memory = replay(config, records([(9,), (1,)]), 1)
    assert [p.fire_time for _, p in memory.emitted()] == [12, 16, 18]


def test_processing_time_windows_are_assigned_by_the_replay_clock():
    config = make_config({"type": "tumbling", "size": 10, "time": "processing"},
                         {"type": "processing_time"}, ingest=True)
    recs = records([(1_000,), (-50,), (7,)])
    for record, clock in zip(recs, (3, 8, 15), strict=True):
        record.ingest_time = clock
    memory = replay(config, recs, 1)
    assert [(p.window.start, p.values[2]) for _, p in memory.emitted()] == [(0, ["0", "1"]), (10, ["2"])]
    assert late_seqs(memory) == set()  # processing-time windows have no late records


def test_timer_timing():
    window = TimeWindow(0, 10)
    assert [timer_timing(t, window) for t in (5, 9, 14)] == [EARLY, ON_TIME, LATE]


def test_process_key_returns_state_that_resumes_the_same_way():
    config = make_config(TUMBLING)
    spec = operator_spec(config)

    def timeline(seq_start, seq_end, adv_seq, adv_wm, start_wm):
        return Timeline(seq_start, seq_end, start_wm, MIN_TIMESTAMP, adv_seq, adv_wm, [], [])

    first = process_key(spec, timeline(0, 1, [0], [0], MIN_TIMESTAMP), [], [0], [1], [(None, 1, "x")])
    assert first.panes == [] and [row.event_timers for row in first.state] == [[9]]
    second = process_key(spec, timeline(1, 2, [1], [19], 0), first.state, [1], [20], [(None, 1, "y")])
    assert [(p.window, p.timing, p.values[2]) for p in second.panes] == [(TimeWindow(0, 10), ON_TIME, ["x"])]
    assert [row.window for row in second.state] == [TimeWindow(20, 30)]


def test_the_shared_types_are_still_importable_from_operator():
    """Pane, LateRecord and WindowStateRow live in ``model``; code importing them from ``operator``
    (as it did before they moved) gets the very same classes."""
    from spark_jobs.core.engine import model, operator

    assert (operator.Pane, operator.LateRecord, operator.WindowStateRow) == (
        model.Pane, model.LateRecord, model.WindowStateRow)
