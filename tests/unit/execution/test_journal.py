"""The operation journal on a local lakehouse: what a command records before it changes tables."""

from __future__ import annotations

import json

from spark_jobs.config import parse_config
from spark_jobs.execution.state.journal import (
    JOURNAL_NAME,
    Operation,
    clear_operation,
    read_operation,
    write_operation,
)


def config(tmp_path):
    return parse_config({
        "name": "p", "source": {"path": "archive", "event_time": "ts"}, "key": ["user"],
        "window": {"type": "tumbling", "size": "1m"}, "aggregates": {"n": "count(*)"},
        "output": {"path": str(tmp_path / "lakehouse")},
    })


def test_an_operation_round_trips_through_its_phases_and_is_gone_once_cleared(tmp_path):
    pipeline = config(tmp_path)
    assert read_operation(pipeline) is None
    operation = Operation(kind="reprocess", id="abc", phase="rewind", from_ms=1_000, to_ms=2_000,
                          reason="late upload", from_batch=2, through_batch=8, finalize_batches=[8])
    write_operation(pipeline, operation)
    assert read_operation(pipeline) == operation
    operation.phase = "forward"
    write_operation(pipeline, operation)
    stored = read_operation(pipeline)
    assert stored.phase == "forward" and stored.finalize_batches == [8]
    assert "reprocess of [1970-01-01 00:00:01.000, 1970-01-01 00:00:02.000)" in stored.describe()
    assert "batches 2-8 to replay again, finalizing as before" in stored.describe()
    # Replaced in one rename: no temporary file is left beside it.
    assert sorted(p.name for p in (tmp_path / "lakehouse").iterdir()) == [JOURNAL_NAME]
    clear_operation(pipeline)
    assert read_operation(pipeline) is None
    clear_operation(pipeline)  # clearing twice is harmless (a resumed command may)


def test_a_request_is_the_same_by_range_and_reason(tmp_path):
    operation = Operation(kind="reprocess", id="x", phase="rewind", from_ms=1, to_ms=2, reason="r")
    assert operation.same_request(1, 2, "r")
    assert not operation.same_request(1, 3, "r") and not operation.same_request(1, 2, "other")
    assert not Operation(kind="reset", id="y", phase="drop").same_request(1, 2, "r")


def test_the_journal_is_plain_json_a_person_can_read(tmp_path):
    pipeline = config(tmp_path)
    write_operation(pipeline, Operation(kind="reset", id="r1", phase="drop"))
    data = json.loads((tmp_path / "lakehouse" / JOURNAL_NAME).read_text())
    assert data["kind"] == "reset" and data["phase"] == "drop" and data["started_at"].endswith("Z")


def test_without_a_jvm_a_journal_off_the_local_disk_and_s3_is_a_config_error(tmp_path):
    """No session (a metadata check) or a Spark Connect client reaches the journal on the local
    disk or S3 itself; any other scheme is refused by name before anything is written (it was an
    AttributeError on the missing JVM)."""
    import pytest

    from spark_jobs.exceptions import ConfigError

    pipeline = config(tmp_path)
    pipeline = type(pipeline)(**{**pipeline.__dict__, "output_path": "gs://bucket/lake"})
    for act in (lambda: read_operation(pipeline),
                lambda: write_operation(pipeline, Operation(kind="reset", id="r", phase="drop")),
                lambda: clear_operation(pipeline)):
        with pytest.raises(ConfigError, match=r"local disk or on S3 \(s3a://\) only, not at gs://"):
            act()
