"""CountTrigger: fires every n elements, the remainder is dropped at cleanup."""

from __future__ import annotations

import pytest
from fake_context import FakeContext
from pipelines import ids_timings, make_config, records, replay

from spark_jobs.core.triggers import CountTrigger, TriggerResult
from spark_jobs.core.windows import GLOBAL_WINDOW, TimeWindow

T = CountTrigger(3)
W = TimeWindow(0, 10)
COUNT = CountTrigger.COUNT.name


def test_counts_fires_at_n_and_restarts():
    ctx = FakeContext()
    results = [T.on_element(None, t, W, ctx) for t in range(7)]
    assert results == [TriggerResult.CONTINUE, TriggerResult.CONTINUE, TriggerResult.FIRE] * 2 + [
        TriggerResult.CONTINUE]
    assert ctx.state == {COUNT: 1} and not ctx.event_timers and not ctx.processing_timers
    assert T.on_event_time(9, W, ctx) is TriggerResult.CONTINUE
    assert T.on_processing_time(9, W, ctx) is TriggerResult.CONTINUE
    T.clear(W, ctx)
    assert ctx.empty


def test_merge_sums_counts_without_firing():
    assert T.can_merge()
    ctx = FakeContext()
    ctx.state = {COUNT: 1}
    ctx.merged = [{COUNT: 2}, {COUNT: 2}]
    T.on_merge(W, ctx)
    assert ctx.state == {COUNT: 5}  # over n, but only the next element fires
    assert T.on_element(None, 1, W, ctx) is TriggerResult.FIRE


def test_value_semantics():
    assert T == CountTrigger.of(3) and repr(T) == "CountTrigger(count=3)"
    assert T.to_dict() == {"type": "count", "count": 3}
    with pytest.raises(ValueError):
        CountTrigger(0)


@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_the_remainder_is_dropped_at_cleanup_without_a_firing(batch_size):
    config = make_config({"type": "tumbling", "size": 10}, {"type": "count", "count": 2})
    memory = replay(config, records([(1,), (2,), (3,), (4,), (5,)]), batch_size)
    # Accumulating panes; the fifth record (short of n) leaves with the window; nothing at the end.
    assert ids_timings(memory) == [(0, 0, "EARLY", ["0", "1"]), (0, 1, "EARLY", ["0", "1", "2", "3"])]
    assert memory.state == {} and memory.leaks == []


def test_purging_count_panes_discard_and_an_empty_pane_emits_nothing():
    config = make_config({"type": "tumbling", "size": 10}, {"type": "count", "count": 2, "purging": True})
    memory = replay(config, records([(1,), (2,), (3,), (4,), (5,)]), 1)
    assert ids_timings(memory) == [(0, 0, "EARLY", ["0", "1"]), (0, 1, "EARLY", ["2", "3"])]


def test_global_window_keeps_the_remainder_after_finalize():
    """Flink never cleans the global window up (its cleanup time is the end of time), so the
    contents and the count short of n stay in state; no timer is left."""
    config = make_config({"type": "global"}, {"type": "count", "count": 2})
    memory = replay(config, records([(1,), (2,), (3,)]), 1)
    assert ids_timings(memory) == [(GLOBAL_WINDOW.start, 0, "EARLY", ["0", "1"])]
    ((row,),) = memory.state.values()
    assert row.window == GLOBAL_WINDOW and row.is_open
    assert '"count": 1' in row.trigger_state
    assert row.event_timers == [] and row.processing_timers == []
    assert memory.leaks == []


def test_stored_state_accessors_agree_with_the_hooks():
    """What the vectorised kernel reads and writes of a window's stored state (``counted``,
    ``store_counted``, ``state_names``) is what ``on_element`` keeps through a context."""
    ctx = FakeContext()
    assert T.counted(ctx.state) is None and T.counted(ctx.state, 0) == 0
    for t in range(4):
        T.on_element(None, t, W, ctx)
    assert T.counted(ctx.state) == 1 and set(ctx.state) <= T.state_names() == {COUNT}
    stored: dict = {}
    T.store_counted(stored, 1)
    assert stored == ctx.state
    T.on_element(None, 5, W, ctx)
    T.store_counted(stored, 2)
    assert stored == ctx.state
    T.on_element(None, 6, W, ctx)  # fires: nothing kept
    T.store_counted(stored, 0)
    assert stored == ctx.state == {}
