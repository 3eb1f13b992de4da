"""What a run reads with delta-rs (``DeltaRsReader``) instead of a Spark job wherever it reaches
the tables (in-process and over Spark Connect): the window state a run starts from, the staged
batches still to replay, a pass's staged records and late records. Each must equal what Spark
reads from the same tables, rows and Arrow types alike (the kernels and ``arrow_frame`` take
either), with a key field whose name has capitals (DataFusion folds unquoted names to lower
case)."""

from __future__ import annotations

import pytest
from replay_helpers import cli, write_archive, write_pipeline

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def replayed(spark, tmp_path_factory):
    """A pipeline replayed without finalizing (windows left open), then given a new file: its
    batches are staged and not replayed."""
    from spark_jobs.config import load_config
    from spark_jobs.execution.recovery import committed_log
    from spark_jobs.execution.state.delta import DeltaStore

    base = tmp_path_factory.mktemp("client-reads")
    archive = write_archive(base / "archive", records=200, keys=4)
    for part in archive.iterdir():
        part.write_text(part.read_text().replace('"user":', '"UserId":'))
    config_path = write_pipeline(base / "pipeline.yaml", archive, base / "lakehouse", key=["UserId"])
    assert cli("run", str(config_path)).returncode == 0
    store = DeltaStore(spark, load_config(config_path))
    last = committed_log(store)[-1]
    # Two more files, staged by a run that replays none of them (its interval ends before).
    more = write_archive(base / "more", records=200, keys=4, seed=9)
    for index, part in enumerate(sorted(more.iterdir())):
        text = part.read_text().replace('"user":', '"UserId":').replace('"event_id": "e', '"event_id": "m')
        (archive / f"later-{index}.jsonl").write_text(text)
    assert cli("run", str(config_path), "--until", "0").returncode == 0
    return store, last


def without_delta_rs(monkeypatch):
    """The store's reads as where delta-rs cannot reach the tables: Spark jobs."""
    from spark_jobs.execution.state import delta_rs

    monkeypatch.setattr(delta_rs.DeltaRsReader, "reaches", staticmethod(lambda config: False))


def test_the_state_a_run_starts_from(replayed, monkeypatch):
    from spark_jobs.execution.spark_batch import state_schema

    store, last = replayed
    schema = state_schema(store.config)
    by_client = store.read_state_rows(last, schema)  # delta-rs: it reaches the local disk
    without_delta_rs(monkeypatch)
    by_spark = store.read_state_rows(last, schema)
    assert by_spark.num_rows and by_spark.column("is_open").to_pylist().count(True)
    assert by_client.schema == by_spark.schema == schema
    order = [("UserId", "ascending"), ("window_start_ms", "ascending")]
    assert by_client.sort_by(order).to_pylist() == by_spark.sort_by(order).to_pylist()


def test_the_staged_batches_still_to_replay(replayed, monkeypatch):
    from spark_jobs.execution.state.delta import staging_clock_column

    store, last = replayed
    clock = staging_clock_column(store.config)
    by_client = store.staged_batches(last["batch_id"], clock)  # delta-rs
    every_client = store.staged_batches(-1, clock)
    without_delta_rs(monkeypatch)
    by_spark = store.staged_batches(last["batch_id"], clock)
    assert len(by_spark) > 1 and by_spark[0]["_batch"] == last["batch_id"] + 1
    assert by_client == by_spark
    assert every_client[-len(by_spark):] == by_spark


def test_a_pass_s_staged_records(replayed, monkeypatch):
    """A pass's staged records (and timeline) come from delta-rs wherever it reaches the tables,
    in-process too, else from Spark: the same rows and types."""
    from spark_jobs.execution.ordering import collect_in_replay_order, in_replay_order
    from spark_jobs.execution.state import delta_rs

    store, last = replayed
    columns = ["_seq", "_event_time", "_ingest_time", "_partition", "UserId", "value", "_raw", "_line"]
    start, end = last["seq_end"] - 30, last["seq_end"] + 50  # committed and staged records
    by_spark = collect_in_replay_order(store.staged_range(start, end), *columns)
    by_client = in_replay_order(delta_rs.DeltaRsReader(store.config).staged_rows(columns, start, end))
    assert by_spark.num_rows == 80
    assert by_client.schema == by_spark.schema
    assert by_client.to_pylist() == by_spark.to_pylist()
    assert store.direct_reader() is not None
    assert store.staged_rows(columns, start, end).equals(by_client)
    without_delta_rs(monkeypatch)
    assert store.direct_reader() is None
    assert store.staged_rows(columns, start, end).equals(by_spark)


@pytest.mark.parametrize("how", ["in-list", "range", "spark"])
def test_a_pass_s_late_records_by_their_numbers(replayed, monkeypatch, how):
    """A big pass's late records are fetched from staging by their numbers: by delta-rs with the
    numbers in the query, or (over ``IN_LIST_MAX``) filtered from their range; by Spark where
    delta-rs cannot reach the tables. The same rows and types each way."""
    import numpy as np

    from spark_jobs.execution.ordering import collect_in_replay_order, in_replay_order
    from spark_jobs.execution.pass_compute import late_source_columns
    from spark_jobs.execution.state import delta_rs

    store, last = replayed
    columns = late_source_columns(store.config)
    seqs = np.array([3, 4, 17, last["seq_end"] - 1, last["seq_end"] + 20], dtype=np.int64)
    if how == "range":
        monkeypatch.setattr(delta_rs, "IN_LIST_MAX", 2)
    if how == "spark":
        without_delta_rs(monkeypatch)
    got = in_replay_order(store.staged_records(columns, seqs))
    expected = collect_in_replay_order(store.staged_range(0, last["seq_end"] + 50), *columns)
    expected = expected.filter(np.isin(expected.column("_seq").to_numpy(), seqs))
    assert got.column("_seq").to_pylist() == seqs.tolist()
    assert got.schema == expected.schema
    assert got.to_pylist() == expected.to_pylist()
