"""A pipeline's tables hold one set of semantics: a command that would replay more under a
changed config refuses before writing anything; a change that leaves the results alone (paths,
batch sizes, spelling) goes on; tables of a release before the guard gain its column."""

from __future__ import annotations

import pytest
import yaml
from replay_helpers import cli, delta_history, write_archive, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.execution import pass_write
from spark_jobs.execution.operations import run_pipeline

pytestmark = pytest.mark.spark


def changed(path, **sections):
    config = yaml.safe_load(path.read_text())
    config.update(sections)
    path.write_text(yaml.safe_dump(config))


def versions(spark, lakehouse) -> dict:
    return {table: len(delta_history(spark, lakehouse / table))
            for table in ("replay_log", "window_results", "staging", "source_files")}


@pytest.mark.in_process_only  # (a release before the guard is simulated in this process)
def test_a_changed_config_is_refused_before_anything_is_written(spark, tmp_path, monkeypatch):
    archive = write_archive(tmp_path / "archive", records=120, files=2)
    (archive / "part-001.jsonl").rename(tmp_path / "later.jsonl")  # arrives after the first run
    config = write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "lake")
    lakehouse = tmp_path / "lake"
    # The first run as a release before the guard wrote it: replay_log without `semantics`.
    old_schema = pa_without(pass_write.REPLAY_LOG_SCHEMA, "semantics")
    monkeypatch.setattr(pass_write, "REPLAY_LOG_SCHEMA", old_schema)
    run_pipeline(load_config(config), spark=spark, progress=lambda _m: None)
    monkeypatch.undo()
    assert "semantics" not in spark.read.format("delta").load(str(lakehouse / "replay_log")).columns

    # Same semantics spelled otherwise, other batch sizes: not a change; the log gains its column.
    changed(config, window={"type": "tumbling", "size": "60s"}, batch={"max_records": 7})
    (tmp_path / "later.jsonl").rename(archive / "part-001.jsonl")
    done = cli("run", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    log = spark.read.format("delta").load(str(lakehouse / "replay_log"))
    assert log.where("semantics IS NULL").count() == 2 and log.where("semantics IS NOT NULL").count() > 0

    before = versions(spark, lakehouse)
    changed(config, window={"type": "tumbling", "size": "2m"})
    for command in (("run", str(config), "--finalize"),
                    ("reprocess", str(config), "--from", "0", "--to", "9999999999999", "--reason", "x")):
        refused = cli(*command)
        assert refused.returncode == 1, refused.stderr[-3000:]
        assert "its config changed since batch" in refused.stderr
        assert 'window: {"size": "1m", "time": "event", "type": "tumbling"} -> {"size": "2m"' in (
            refused.stderr)
        assert f"replay reset {config} --yes" in refused.stderr
    assert versions(spark, lakehouse) == before

    assert cli("reset", str(config), "--yes").returncode == 0
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]


def test_an_ingest_not_replayed_yet_is_checked_too(spark, tmp_path):
    """A run that only ingested (``--until`` before its first batch) commits no batch, yet
    ``staging`` holds its columns: a new key field would not be among them."""
    archive = write_archive(tmp_path / "archive", records=60, files=1)
    config = write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "lake")
    done = cli("run", str(config), "--until", "2000-01-01T00:00:00Z")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "0 batches" in done.stdout
    changed(config, key=["partition"])
    refused = cli("run", str(config))
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "since ingest 0 was staged into" in refused.stderr
    assert 'key: ["user"] -> ["partition"]' in refused.stderr


def pa_without(schema, name):
    return schema.remove(schema.get_field_index(name))
