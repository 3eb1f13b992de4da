"""The session kernel against the per-record operator it replaces for session windows.

For random session pipelines (gaps, event-time, continuous and count triggers, purging, allowed
lateness, every watermark mode, several keys and partitions, disorder, very late records that
still bridge open sessions, nulls, every built-in aggregate) and random batch and pass splits,
every key of every pass runs through both engines from the same state: panes (as multisets), late
records and the dumped state rows must be identical, and which engine's state the next pass starts
from must not matter. The generated inputs never call for a decline, so the kernel must take every
one of them (a kernel that declined would pass the comparison vacuously).
"""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from test_window_kernel import SETTINGS, archives, pipelines, run_both, split

from spark_jobs.core.engine import session_kernel
from spark_jobs.core.engine.keyed import process_key, process_key_columns
from spark_jobs.core.engine.model import WindowStateRow
from spark_jobs.core.watermarks import Timeline
from spark_jobs.core.windows import TimeWindow


@st.composite
def session_windows(draw):
    gap = draw(st.integers(1, 90))
    return {"type": "session", "gap": gap}, gap


def kernel(spec, timeline, state, seqs, timestamps, values, key):
    """The kernel called with the records' values as columns, as ``process_key_columns`` calls it."""
    columns = [list(column) for column in zip(*values, strict=True)]
    columns = columns or [[]] * len(spec.pane.aggregation.specs)
    return session_kernel.process_key(spec, timeline, state, seqs, timestamps, columns, key)


@SETTINGS
@given(data=st.data())
def test_the_session_kernel_equals_the_per_record_operator_pass_by_pass(data):
    config, ingest = data.draw(pipelines(session_windows()))
    records = data.draw(archives(config, ingest))
    passes = split(data.draw, records)
    event(config.trigger.to_dict()["type"])
    first = run_both(config, records, passes, lambda: True, kernel=kernel)
    # Alternating engines between passes (the next pass starting from either's state) changes nothing.
    pattern = data.draw(st.lists(st.booleans(), min_size=1, max_size=8))
    turns = iter(pattern * 1000)
    assert run_both(config, records, passes, lambda: next(turns), kernel=kernel) == first


# ---- scope and fallback -------------------------------------------------------------------------
SESSION = {"type": "session", "gap": 10}


def spec_of(window=SESSION, trigger=None, **extra):
    from test_window_kernel import spec_of as window_spec_of

    return window_spec_of(window, trigger, **extra)


@pytest.mark.parametrize("window, trigger", [
    ({"type": "tumbling", "size": 10}, None),
    ({"type": "session", "gap": 10, "time": "processing"}, None),
    (SESSION, {"type": "processing_time"}),
    (SESSION, {"type": "continuous_processing_time", "interval": 5}),
])
def test_the_kernel_leaves_other_pipelines_to_the_operator(window, trigger):
    assert not session_kernel.supports(spec_of(window, trigger))


def test_the_kernel_covers_the_event_time_triggers():
    assert session_kernel.supports(spec_of())
    assert session_kernel.supports(spec_of(trigger={"type": "continuous_event_time", "interval": 5,
                                                    "purging": True}))
    assert session_kernel.supports(spec_of(trigger={"type": "count", "count": 2}))


def one_line(watermarks, records=None):
    """A timeline whose watermark advances after each of the first records to the given values."""
    return Timeline(0, records or len(watermarks), -(2**63), 0, list(range(len(watermarks))),
                    list(watermarks), [], [])


def test_the_kernel_declines_state_it_does_not_reproduce():
    spec, line = spec_of(), one_line([5])
    row = WindowStateRow(TimeWindow(0, 10), True, 0, None, None, [9, 9 + 0], [])
    assert session_kernel.process_key(spec, line, [row], [0], [1], [[None]]) is not None
    with_processing = row._replace(processing_timers=[3])
    assert session_kernel.process_key(spec, line, [with_processing], [0], [1], [[None]]) is None
    intersecting = [row, row._replace(window=TimeWindow(10, 20), event_timers=[19])]
    assert session_kernel.process_key(spec, line, intersecting, [0], [1], [[None]]) is None
    assert session_kernel.process_key(spec, line, [], [0], [2**63 - 2**60], [[None]]) is None


def test_process_key_columns_runs_sessions_through_the_kernel(monkeypatch):
    spec, line = spec_of(), one_line([0, 3, 20])
    calls = []
    original = session_kernel.process_key

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(session_kernel, "process_key", counting)
    out = process_key_columns(spec, line, [], [0, 1, 2], [1, 8, 30], [[None, None, None]])
    assert len(calls) == 1
    assert [(pane.window, pane.values) for pane in out.panes] == [(TimeWindow(1, 18), [2])]
    assert [row.window for row in out.state] == [TimeWindow(30, 40)]


def test_a_session_is_late_exactly_when_its_cleanup_time_is_reached():
    # Watermark 45 after the first record; gap 10, lateness 5: [31, 41) is cleaned up at 45, so it
    # is late and so is its record; [32, 42) at 46, so it is taken and fires at once (late pane).
    spec = spec_of(allowed_lateness=5)
    line = one_line([45], records=3)
    args = (spec, line, [], [0, 1, 2], [50, 31, 32])
    fast, slow = session_kernel.process_key(*args, [[None] * 3]), process_key(*args, [(None,)] * 3)
    assert [(late.seq, late.watermark) for late in fast.late] == [(1, 45)]
    assert [(pane.window, pane.timing, pane.values) for pane in fast.panes] == [
        (TimeWindow(32, 42), "LATE", [1])]
    assert (repr(fast.panes), repr(fast.late), repr(fast.state)) == (
        repr(slow.panes), repr(slow.late), repr(slow.state))
