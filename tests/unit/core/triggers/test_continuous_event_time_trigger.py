"""ContinuousEventTimeTrigger: epoch alignment, the cap at maxTimestamp, the chain, merge, clear."""

from __future__ import annotations

import pytest
from fake_context import FakeContext, time_limit
from pipelines import make_config, records, replay

from spark_jobs.core.durations import MAX_TIMESTAMP
from spark_jobs.core.triggers import ContinuousEventTimeTrigger, TriggerResult
from spark_jobs.core.windows import TimeWindow

T = ContinuousEventTimeTrigger(10)
FIRE_TIME = ContinuousEventTimeTrigger.FIRE_TIME.name


def test_first_fire_time_is_aligned_to_the_epoch_not_to_the_window_start():
    window = TimeWindow(5, 65)  # offset 5
    ctx = FakeContext()
    assert T.on_element(None, 17, window, ctx) is TriggerResult.CONTINUE
    assert ctx.state == {FIRE_TIME: 20}  # 17 - 17 % 10 + 10, not 15 + 10
    assert ctx.event_timers == {20, 64}


def test_first_fire_time_is_capped_at_max_timestamp():
    ctx = FakeContext()
    T.on_element(None, 55, TimeWindow(0, 60), ctx)
    assert ctx.state == {FIRE_TIME: 59} and ctx.event_timers == {59}


def test_the_chain_is_set_by_the_first_record_only():
    window = TimeWindow(0, 60)
    ctx = FakeContext()
    T.on_element(None, 3, window, ctx)
    T.on_element(None, 47, window, ctx)
    assert ctx.state == {FIRE_TIME: 10} and ctx.event_timers == {10, 59}


def test_element_behind_the_watermark_fires_at_once():
    ctx = FakeContext(watermark=59)
    assert T.on_element(None, 3, TimeWindow(0, 60), ctx) is TriggerResult.FIRE
    assert ctx.empty


def test_on_event_time_fires_and_registers_the_next_link_capped():
    window = TimeWindow(0, 60)
    ctx = FakeContext()
    T.on_element(None, 3, window, ctx)
    fired = []
    for time in (10, 20, 30, 40, 50):
        ctx.event_timers.discard(time)  # the operator removes a timer as it fires it
        fired.append(T.on_event_time(time, window, ctx))
        assert ctx.state == {FIRE_TIME: min(time + 10, 59)}
    assert fired == [TriggerResult.FIRE] * 5
    assert ctx.event_timers == {59}
    # The end timer fires without touching the stored fire time; clear removes it.
    assert T.on_event_time(59, window, ctx) is TriggerResult.FIRE
    assert ctx.state == {FIRE_TIME: 59}


def test_on_event_time_other_times_continue():
    window = TimeWindow(0, 60)
    ctx = FakeContext()
    T.on_element(None, 3, window, ctx)
    assert T.on_event_time(15, window, ctx) is TriggerResult.CONTINUE
    assert T.on_event_time(20, window, ctx) is TriggerResult.CONTINUE  # not the stored 10
    assert ctx.state == {FIRE_TIME: 10}
    assert T.on_processing_time(10, window, ctx) is TriggerResult.CONTINUE


def test_clear_removes_the_fire_time_and_its_timer():
    window = TimeWindow(0, 60)
    ctx = FakeContext()
    T.on_element(None, 3, window, ctx)
    T.clear(window, ctx)
    assert not ctx.state and 10 not in ctx.event_timers


def test_clear_deletes_the_end_timer_too():
    window = TimeWindow(0, 60)
    ctx = FakeContext()
    T.on_element(None, 3, window, ctx)
    T.clear(window, ctx)
    assert ctx.empty, ctx.event_timers


def test_no_leak_on_processing_time_windows():
    config = make_config({"type": "tumbling", "size": 60, "time": "processing"},
                         {"type": "continuous_event_time", "interval": 10})
    memory = replay(config, records([(3,), (5,)]), 1)
    assert memory.leaks == []


def test_on_merge_keeps_the_minimum_fire_time_and_registers_it():
    assert T.can_merge()
    ctx = FakeContext()
    ctx.merged = [{FIRE_TIME: 30}, {FIRE_TIME: 20}, {}]
    T.on_merge(TimeWindow(0, 60), ctx)
    assert ctx.state == {FIRE_TIME: 20} and ctx.event_timers == {20}
    assert ctx.merged == [{}, {}, {}]  # moved, not copied
    ctx = FakeContext()
    T.on_merge(TimeWindow(0, 60), ctx)  # nothing stored anywhere: nothing registered
    assert ctx.empty


def test_negative_timestamps_align_like_flink():
    # Flink: -17 - (-17 % 10) = -17 - (-7) = -10, + 10 = 0 (Java's % truncates toward zero).
    ctx = FakeContext()
    T.on_element(None, -17, TimeWindow(-100, 100), ctx)
    assert ctx.state == {FIRE_TIME: 0}


def test_rejects_a_non_positive_interval():
    with pytest.raises(ValueError, match="positive interval"):
        ContinuousEventTimeTrigger(0)


def test_value_semantics():
    assert T == ContinuousEventTimeTrigger.of(10)
    assert repr(T) == "ContinuousEventTimeTrigger(interval=10)"
    assert ContinuousEventTimeTrigger(10_000).to_dict() == {
        "type": "continuous_event_time", "interval": "10s"}


# ---- through the operator ----------------------------------------------------------------------
def test_chained_firing_after_a_watermark_jump_repeats_identical_content():
    config = make_config({"type": "tumbling", "size": 60}, {"type": "continuous_event_time", "interval": 10})
    for batch_size in (1, 2, 3):
        memory = replay(config, records([(3,), (5,), (200,)]), batch_size)
        w0 = [p for _, p in memory.emitted() if p.window.start == 0]
        assert [(p.fire_time, p.timing) for p in w0] == [
            (10, "EARLY"), (20, "EARLY"), (30, "EARLY"), (40, "EARLY"), (50, "EARLY"), (59, "ON_TIME")
        ]
        assert {tuple(p.values[2]) for p in w0} == {("0", "1")}
        assert {p.watermark for p in w0} == {199}  # all fired by the one jump after record 200
        assert [p.pane_index for p in w0] == list(range(6))


def test_a_chain_registered_behind_the_watermark_fires_at_the_next_advance():
    config = make_config({"type": "tumbling", "size": 60}, {"type": "continuous_event_time", "interval": 10})
    rows = [(35, 1, "a"), (5, 1, "b"), (36, 1, "a")]  # b's first fire time 10 < watermark 34
    memory = replay(config, records(rows), 1, finalize=False)
    b = [p for key, p in memory.emitted() if key == ("b",)]
    # Not fired while record b is processed (wm 34): at the advance to 35, with its chain.
    assert [(p.fire_time, p.watermark, p.emit_seq) for p in b] == [(10, 35, 2), (20, 35, 2), (30, 35, 2)]


# The time limit may first interrupt a gc callback, which reports the exception as unraisable.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_global_window_with_a_continuous_trigger_can_be_finalized():
    config = make_config({"type": "global"}, {"type": "continuous_event_time", "interval": "1s"})
    with time_limit(1.5):
        memory = replay(config, records([(1_000,), (5_000,)]), 1, finalize=True)
    assert memory.emitted()


def test_max_timestamp_is_the_global_windows_end():
    from spark_jobs.core.windows import GLOBAL_WINDOW

    assert GLOBAL_WINDOW.max_timestamp == MAX_TIMESTAMP


def test_stored_state_accessors_agree_with_the_hooks():
    """What the vectorised kernel reads of a window's stored state (``fire_time``,
    ``state_names``) is what the hooks keep through a context."""
    ctx = FakeContext()
    assert T.fire_time(ctx.state) is None
    T.on_element(None, 17, TimeWindow(0, 60), ctx)
    assert T.fire_time(ctx.state) == 20 and set(ctx.state) <= T.state_names() == {FIRE_TIME}
