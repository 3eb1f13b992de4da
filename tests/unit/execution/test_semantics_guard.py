"""``semantics_guard``: which config changes count (what the results depend on) and how a
refusal reads; rows written before the guard are not checked."""

from __future__ import annotations

import copy

import pytest

from spark_jobs.config import parse_config
from spark_jobs.exceptions import SemanticsChangedError
from spark_jobs.execution.semantics_guard import check_semantics, semantics_text

BASE = {
    "name": "clicks",
    "source": {"path": "archive", "event_time": "ts", "ingest_time": "ingest", "partition": "p"},
    "key": ["user"],
    "watermark": {"max_out_of_orderness": "5s", "idle_timeout": "1m"},
    "window": {"type": "tumbling", "size": "1m"},
    "trigger": {"type": "continuous_event_time", "interval": "10s"},
    "allowed_lateness": "30s",
    "aggregates": {"n": "count(*)", "spent": "sum(amount)"},
    "output": {"path": "/lake/clicks"},
}


def config(**changes):
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = data
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return parse_config(data)


def log_of(written):
    return [{"batch_id": 0}, {"batch_id": 1, "semantics": semantics_text(written)}]


def files_of(written, ingest_id=1):
    """``source_files`` rows: an ingest before the guard (0), and one under ``written``."""
    return {"a": {"ingest_id": 0, "semantics": None},
            "b": {"ingest_id": ingest_id, "semantics": semantics_text(written)}}


@pytest.mark.parametrize("changes", [
    {"window__size": "60s", "allowed_lateness": 30_000},  # spelled otherwise
    {"source__path": "s3a://bucket/archive", "output__path": "/elsewhere", "name": "renamed"},
    {"batch": {"max_records": 7, "pass_max_records": 14, "driver_pass_max_records": 0}},
    {"quality": {"max_late_fraction": 0.1}, "maintenance": {"optimize_every": 3}},
])
def test_what_leaves_the_results_alone_goes_on(changes):
    check_semantics(config(**changes), log_of(config()), files_of(config()))


@pytest.mark.parametrize(("changes", "section"), [
    ({"window__size": "2m"}, "window"),
    ({"trigger": {"type": "event_time"}}, "trigger"),
    ({"watermark__max_out_of_orderness": "6s"}, "watermark"),
    ({"allowed_lateness": "31s"}, "allowed_lateness"),
    ({"aggregates": {"n": "count(*)"}}, "aggregates"),
    ({"key": ["user", "page"]}, "key"),
    ({"source__types": {"amount": "long"}}, "source"),
    ({"source__ingest_time": None}, "source"),
])
def test_what_changes_the_results_is_refused_naming_it(changes, section):
    with pytest.raises(SemanticsChangedError) as refused:
        check_semantics(config(**changes), log_of(config()), {})
    message = str(refused.value)
    assert f"\n  {section}: " in message and "since batch 1 was replayed into /lake/clicks" in message
    assert message.count("\n  ") == 1  # only that section
    assert "replay reset" in message


def test_an_ingest_not_replayed_yet_is_checked_too():
    """``staging``'s columns follow the config (a new key would not be there)."""
    with pytest.raises(SemanticsChangedError, match="since ingest 3 was staged into /lake/clicks:\n  key: "):
        check_semantics(config(key=["page"]), [], files_of(config(), ingest_id=3))


def test_rows_before_the_guard_and_no_rows_are_not_checked():
    legacy_log = [{"batch_id": 0}, {"batch_id": 1, "semantics": None}]
    check_semantics(config(window__size="2m"), legacy_log, {"a": {"ingest_id": 0, "semantics": None}})
    check_semantics(config(window__size="2m"), [], {})
