"""Property tests: the replay's results do not depend on the micro-batch size, and they equal an
independent per-record reference driver (``reference.py``) of Flink's WindowOperator.

Random archives (several keys and partitions, disorder, very late records, optional ingest
times), every window type, every built-in trigger (and purging), allowed lateness, per-record
and periodic watermarks, idle timeouts. Firings are compared per (key, window): firings of
different keys at one timestamp have no defined order.

Every combination is included: continuous_processing_time on event-time windows (its capped
last segment fires once), the global window with a continuous trigger and ``finalize`` (the chain
stops at +infinity), and the leak check for continuous_event_time on processing-time windows.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pipelines import firings, late_seqs, make_config, reference_firings
from reference import reference_replay

from spark_jobs.core.windows import GLOBAL_WINDOW
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

# UNIT_MAX_EXAMPLES=5000 for a longer hunt; the default keeps tests/unit well under a minute.
EXAMPLES = int(os.environ.get("UNIT_MAX_EXAMPLES", "250"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def archives(draw, ingest: bool):
    """Records in replay order: event times drifting upward with disorder and a few very late
    ones; ingest times (if any) non-decreasing and loosely following event time."""
    n = draw(st.one_of(st.just(0), st.integers(4, 45)))
    keys = draw(st.sampled_from([["a"], ["a", "b"], ["a", "b", "c"]]))
    partitions = draw(st.sampled_from([["p0"], ["p0", "p1"], ["p0", "p1", "p2"]]))
    start = draw(st.integers(-300, 300))
    step = draw(st.integers(0, 25))
    disorder = draw(st.integers(0, 60))
    now, clock, out = start, start + draw(st.integers(0, 40)), []
    for i in range(n):
        now += draw(st.integers(0, step))
        kind = draw(st.sampled_from(["normal"] * 8 + ["very_late", "future"]))
        if kind == "very_late":
            event_time = now - draw(st.integers(100, 600))
        elif kind == "future":
            event_time = now + draw(st.integers(0, 80))
        else:
            event_time = now - draw(st.integers(0, disorder))
        clock += draw(st.integers(0, step + 5))
        out.append(Record(
            (draw(st.sampled_from(keys)),), event_time, (None, draw(st.integers(-5, 9)), str(i)),
            ingest_time=clock if ingest else None, partition=draw(st.sampled_from(partitions)),
        ))
    return out


@st.composite
def pipelines(draw, emits=("per_record", "periodic")):
    kind = draw(st.sampled_from(["tumbling", "sliding", "session", "global"]))
    time = draw(st.sampled_from(["event"] * 3 + ["processing"]))
    if kind == "tumbling":
        size = draw(st.integers(5, 120))
        window = {"type": kind, "size": size, "offset": draw(st.integers(0, size - 1))}
    elif kind == "sliding":
        slide = draw(st.integers(5, 60))
        size = slide * draw(st.integers(1, 4)) + draw(st.sampled_from([0, 0, 3]))
        window = {"type": kind, "size": size, "slide": slide,
                  "offset": draw(st.integers(0, slide - 1))}
    elif kind == "session":
        size = draw(st.integers(1, 60))
        window = {"type": kind, "gap": size}
    else:
        size = 200
        window = {"type": kind}
    window["time"] = time
    triggers = ["event_time", "continuous_event_time", "processing_time", "count",
                "continuous_processing_time"]
    trigger_kind = draw(st.sampled_from(triggers))
    trigger: dict = {"type": trigger_kind, "purging": draw(st.booleans())}
    if trigger_kind.startswith("continuous"):
        trigger["interval"] = draw(st.integers(max(2, size // 12), max(3, size)))
    if trigger_kind == "count":
        trigger["count"] = draw(st.integers(1, 4))
    lateness = 0 if time == "processing" else draw(st.sampled_from([0, 0, 1, 15, 80]))
    emit = draw(st.sampled_from(emits))
    watermark = {"max_out_of_orderness": draw(st.sampled_from([0, 0, 5, 30])), "emit": emit}
    if emit == "periodic":
        watermark["emit"] = f"periodic:{draw(st.integers(1, 40))}ms"
    if draw(st.booleans()):
        watermark["idle_timeout"] = draw(st.integers(1, 80))
    ingest = draw(st.booleans())
    config = make_config(window, trigger, lateness=lateness, watermark=watermark, ingest=ingest)
    finalize = draw(st.sampled_from([True, True, False]))
    return config, ingest, finalize


def run_memory(config, recs, batch_size, finalize):
    memory = MemoryReplay(config, operator_spec(config))
    memory.run(recs, max(1, batch_size), finalize=finalize)
    return memory


def _coverage_events(config, panes, late):
    """What the examples exercised (``pytest --hypothesis-show-statistics``)."""
    event(f"{config.window.time} {config.window.kind} / {config.trigger.to_dict()['type']}")
    timings = {p[1] for firings in panes.values() for p in firings}
    event(f"timings {sorted(timings)}")
    event("some late records" if late else "no late records")
    if config.window.merging:
        merged = any(w.end - w.start > config.window.gap for _, w in panes)
        event("sessions merged" if merged else "no session merged")


@SETTINGS
@given(data=st.data())
def test_batch_size_invariance_and_equality_with_the_reference(data):
    config, ingest, finalize = data.draw(pipelines())
    recs = data.draw(archives(ingest))
    k = data.draw(st.integers(2, 9))
    runs = [run_memory(config, recs, size, finalize) for size in (1, k, len(recs))]
    expected_firings, expected_late = firings(runs[0]), late_seqs(runs[0])
    for memory in runs[1:]:
        assert firings(memory) == expected_firings
        assert late_seqs(memory) == expected_late
        assert memory.state == runs[0].state
        assert memory.watermark == runs[0].watermark

    reference = reference_replay(config, recs, finalize=finalize)
    _coverage_events(config, expected_firings, expected_late)
    assert expected_firings == reference_firings(reference)
    assert expected_late == reference.late

    for memory in runs:
        assert memory.leaks == [] and reference.leaks == []
    if finalize:
        # Everything fired and was cleaned up, except the global window, which Flink never cleans
        # up (its cleanup time is "end of time"): its contents and trigger state (e.g. a count
        # short of n) stay, but no timer is left.
        for rows in runs[0].state.values():
            for row in rows:
                assert row.window == GLOBAL_WINDOW, row
                assert row.event_timers == [] and row.processing_timers == [], row
        assert not reference.event_timers and not reference.processing_timers
        if config.window.kind != "global":
            assert runs[0].state == {}
            assert reference.windows == {} and reference.contents == {}
            assert reference.trigger_state == {}


@settings(SETTINGS, max_examples=max(1, EXAMPLES // 3))
@given(data=st.data())
def test_per_batch_watermarks_match_the_reference_for_the_same_batch_size(data):
    config, ingest, finalize = data.draw(pipelines(emits=("per_batch",)))
    recs = data.draw(archives(ingest))
    k = data.draw(st.integers(1, 9))
    memory = run_memory(config, recs, k, finalize)
    reference = reference_replay(config, recs, finalize=finalize, batch_size=k)
    assert firings(memory) == reference_firings(reference)
    assert late_seqs(memory) == reference.late


def test_per_batch_is_the_one_mode_that_depends_on_the_batch_size():
    """Documented behaviour: with ``per_batch`` the watermark only moves at the end of a
    micro-batch, so a record that is late per record is accepted when it shares the batch with
    the record that would have moved the watermark past it."""
    recs = [Record(("a",), t, (None, 1, str(i))) for i, t in enumerate([5, 25, 7])]
    window = {"type": "tumbling", "size": 10}
    per_batch = make_config(window, watermark={"emit": "per_batch"})
    per_record = make_config(window, watermark={"emit": "per_record"})
    first_window = (("a",), (0, 10))

    def outcome(config, batch_size):
        memory = run_memory(config, recs, batch_size, True)
        return firings(memory)[first_window][0][2][2], late_seqs(memory)

    # Per record (any batch size), and per batch with batches of 1 or 2: 25 moved the watermark
    # to 24 before 7 arrived, so 7 is late and [0, 10) fires with record 0 alone.
    late_7 = (("0",), {(("a",), 2)})
    assert outcome(per_record, 3) == outcome(per_record, 1) == late_7
    assert outcome(per_batch, 1) == outcome(per_batch, 2) == late_7
    assert firings(run_memory(per_batch, recs, 1, True)) == firings(run_memory(per_record, recs, 1, True))
    # One batch of 3: the watermark is only emitted after 7, which lands in its window.
    assert outcome(per_batch, 3) == (("0", "2"), set())


@settings(SETTINGS, max_examples=max(1, EXAMPLES // 3))
@given(data=st.data())
def test_running_several_batches_in_one_pass_changes_nothing(data):
    """The Spark job runs consecutive micro-batches in one pass over their joined timelines;
    every output, down to the emitting record, equals running the batches one by one. Per-batch
    watermarks included: each batch still gets its own timeline."""
    config, ingest, finalize = data.draw(pipelines(emits=("per_record", "periodic", "per_batch")))
    recs = data.draw(archives(ingest))
    batch_size = data.draw(st.integers(1, 9))
    per_pass = data.draw(st.integers(2, 12))
    one_by_one = MemoryReplay(config, operator_spec(config))
    one_by_one.run(recs, batch_size, finalize=finalize)
    grouped = MemoryReplay(config, operator_spec(config))
    grouped.run(recs, batch_size, finalize=finalize, batches_per_pass=per_pass)
    assert sorted_panes(grouped) == sorted_panes(one_by_one)
    assert sorted(grouped.late, key=repr) == sorted(one_by_one.late, key=repr)
    assert grouped.state == one_by_one.state
    assert grouped.watermark == one_by_one.watermark
    assert grouped.leaks == one_by_one.leaks


def sorted_panes(memory: MemoryReplay) -> list:
    """Every pane with its key, emitting record and step (the order keys are run in differs)."""
    return sorted(((key, pane) for key, pane in memory.panes), key=repr)
