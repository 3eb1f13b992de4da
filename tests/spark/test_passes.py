"""Several micro-batches per Spark pass: the tables are those of one batch per pass, row for row
(batch ids, watermarks and commit-log rows included); only the number of commits shrinks, and a
reprocess rewinds to a pass boundary. Running a pass's keys on the executors (a shuffle by key)
instead of on the driver changes nothing either."""

from __future__ import annotations

import pytest
from replay_helpers import (
    INACTIVITY_ALERT,
    REPLAY_LOG_VOLATILE,
    cli,
    delta_history,
    snapshot,
    table_rows,
    write_archive,
    write_pipeline,
)

pytestmark = pytest.mark.spark


def tables(spark, lakehouse) -> dict:
    """Every table, with the commit log minus ``latest_through``: which rows record a
    ``window_latest`` MERGE is the one column that follows the passes (a MERGE starts in a pass
    and is recorded by a later one)."""
    return {
        **snapshot(spark, lakehouse),
        "replay_log": table_rows(spark, lakehouse, "replay_log", (*REPLAY_LOG_VOLATILE, "latest_through")),
    }


def delta_commits(spark, table) -> int:
    return len(delta_history(spark, table))


# Pass sizes are the engine's own; over Connect the same passes run in the other tests here.
@pytest.mark.in_process_only
def test_batches_per_pass_change_no_row_only_the_commits(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=120, keys=3, seed=5)
    runs = {}
    for name, per_pass, on_driver in (
        ("one_per_pass", 20, 1_000_000), ("three_per_pass", 60, 1_000_000), ("on_executors", 60, 0),
    ):
        config = write_pipeline(
            tmp_path / f"{name}.yaml", archive, tmp_path / name,
            batch={"max_records": 20, "pass_max_records": per_pass, "driver_pass_max_records": on_driver},
        )
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = tables(spark, tmp_path / name)
    assert runs["three_per_pass"] == runs["one_per_pass"]
    assert runs["on_executors"] == runs["one_per_pass"]
    log = runs["one_per_pass"]["replay_log"]
    assert len(log) == 7 and len({row[0] for row in log}) == 7  # 6 batches and the finalize
    results = spark.read.format("delta").load(str(tmp_path / "three_per_pass" / "window_results"))
    assert results.select("batch_id").distinct().count() >= 5  # rows keep their own batch's id
    # One state commit per pass: 6 passes (the finalize batch has no records and joins the last
    # pass) against 2 (batches 0-2, then 3-5 and the finalize).
    assert delta_commits(spark, tmp_path / "one_per_pass" / "operator_state") == 6
    assert delta_commits(spark, tmp_path / "three_per_pass" / "operator_state") == 2
    assert delta_commits(spark, tmp_path / "three_per_pass" / "replay_log") == 2
    # Every table a run creates checkpoints every 100 commits, not every 10 (a pass commits to
    # each of its tables once).
    for table in ("window_results", "operator_state", "replay_log", "staging", "source_files"):
        path = tmp_path / "one_per_pass" / table
        properties = dict(spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect())
        assert properties.get("delta.checkpointInterval") == "100", table

    # Reprocessing a range whose first record is in batch 4 (records 80-99, one a second) rewinds
    # to the first batch of its pass, 3.
    config = tmp_path / "three_per_pass.yaml"
    start, end = 1_700_000_080_000, 1_700_000_100_000
    done = cli("reprocess", str(config), "--from", str(start), "--to", str(end), "--reason", "pass test")
    assert done.returncode == 0, done.stderr[-3000:]
    assert tables(spark, tmp_path / "three_per_pass") == runs["one_per_pass"]
    history = spark.read.format("delta").load(str(tmp_path / "three_per_pass" / "reprocess_history"))
    assert history.first()["from_batch"] == 3


def test_state_snapshots_between_overwrites_and_an_interrupted_run(spark, tmp_path, monkeypatch):
    """Passes append their state snapshot between overwrites: a run stopped after a commit leaves
    several in ``operator_state``, and maybe one of a pass written but not committed. What reads
    the state takes the last committed batch's (the resumed run gives the uninterrupted run's
    tables) and a completed run leaves only that one."""
    from pyspark.sql import functions as F

    from spark_jobs.config import load_config
    from spark_jobs.execution import pass_write
    from spark_jobs.execution.state.delta import DeltaStore
    from spark_jobs.interfaces.status import pipeline_status
    from spark_jobs.quality.tables import Snapshot

    archive = write_archive(tmp_path / "archive", records=120, keys=3, seed=5)
    batch = {"max_records": 20, "pass_max_records": 20}
    clean = write_pipeline(tmp_path / "clean.yaml", archive, tmp_path / "clean", batch=batch)
    assert cli("run", str(clean), "--finalize").returncode == 0
    config_path = write_pipeline(tmp_path / "stopped.yaml", archive, tmp_path / "stopped", batch=batch)
    # No window_latest MERGE before the end of the run (and no state overwrite: that comes with
    # compaction, every 100 batches).
    config_path.write_text(config_path.read_text().replace("latest_every: 3", "latest_every: 100"))

    class Stop(Exception):
        pass

    real_crash_point = pass_write.crash_point  # where the commit's points are placed

    def stop_after_batch_3(name: str) -> None:
        if name == "batch:3:committed":
            raise Stop(name)
        real_crash_point(name)

    monkeypatch.setattr(pass_write, "crash_point", stop_after_batch_3)
    try:
        stopped = cli("run", str(config_path), "--finalize")
        assert stopped.returncode != 0
    except Stop:
        pass
    monkeypatch.setattr(pass_write, "crash_point", real_crash_point)

    state = spark.read.format("delta").load(str(tmp_path / "stopped" / "operator_state"))
    # The next pass writes its tables while batch 3 commits: its snapshot may be there, uncommitted.
    snapshots = {r[0] for r in state.select("batch_id").distinct().collect()}
    assert {0, 1, 2, 3} <= snapshots <= {0, 1, 2, 3, 4}
    config = load_config(config_path)
    current = Snapshot.read(spark, config).frame("operator_state")
    assert {r[0] for r in current.select("batch_id").distinct().collect()} == {3}
    open_windows = current.where(F.col("is_open")).count()
    assert f"{open_windows} open windows in {current.count()} state rows" in pipeline_status(config, spark)

    # The resumed run ingests nothing: its small passes read their records ahead, and their
    # timelines with them, in one staging read.
    reads = []
    # A pass reads staging through this: its records ahead (with their timelines), or its
    # timelines alone.
    real_rows = DeltaStore.staged_rows

    def counted_rows(store, columns, *bounds):
        reads.append(columns)
        return real_rows(store, columns, *bounds)

    monkeypatch.setattr(DeltaStore, "staged_rows", counted_rows)
    resumed = cli("run", str(config_path), "--finalize")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert len(reads) == 1, reads
    assert tables(spark, tmp_path / "stopped") == tables(spark, tmp_path / "clean")


def test_each_commit_row_records_what_window_latest_holds(spark, tmp_path):
    """window_latest's MERGEs run beside later passes; what the last commit row of each pass
    records (the table's version and ``latest_through``; a pass is the unit of restart) is exactly
    the newest pane of every window through that batch."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    archive = write_archive(tmp_path / "archive", records=240, keys=3, seed=7)
    one_batch_per_pass = {"max_records": 20, "pass_max_records": 20}  # a MERGE every 3rd batch
    config = write_pipeline(tmp_path / "latest.yaml", archive, tmp_path / "latest", batch=one_batch_per_pass)
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    lakehouse = tmp_path / "latest"
    results = spark.read.format("delta").load(str(lakehouse / "window_results"))
    window = ["user", "window_start", "window_end"]
    newest = Window.partitionBy(*window).orderBy(F.col("pane_index").desc())
    log = spark.read.format("delta").load(str(lakehouse / "replay_log")).orderBy("batch_id").collect()
    recorded = set()
    # The rows of one pass record the same versions.
    ends = [row for row, after in zip(log, [*log[1:], None], strict=True) if after is None
            or after["table_versions"] != row["table_versions"]]
    assert len(ends) == 12  # one batch per pass; the finalize batch joins the last pass
    for row in ends:
        through, version = row["latest_through"], row["table_versions"].get("window_latest")
        recorded.add(through)
        expected = sorted(
            results.where(F.col("batch_id") <= through).withColumn("_rank", F.row_number().over(newest))
            .where("_rank = 1").select(*window, "pane_index", "batch_id").collect()
        )
        if version is None:
            assert expected == [], row["batch_id"]
            continue
        latest = spark.read.format("delta").option("versionAsOf", version).load(
            str(lakehouse / "window_latest")
        )
        assert sorted(latest.select(*window, "pane_index", "batch_id").collect()) == expected, row["batch_id"]
    # MERGEs start in the passes of batches 2, 5 and 8, and rows record each from the next MERGE's
    # pass on; the last pass (batches 11 and the finalize 12) waits for batch 8's and for its own.
    assert recorded == {-1, 2, 5, 12}


def test_big_passes_take_their_records_from_the_ingest(spark, tmp_path, monkeypatch):
    """Passes that run on the driver and are too big to read ahead take their records from what
    the ingest's first read collected beside the sort keys, not from ``staging``: the same rows
    (columns, types, order, values) as staging holds, and so the same tables. Those the ingest
    did not cover read their timeline's and records' columns from ``staging`` at once."""
    from spark_jobs.execution import pass_compute

    archive = write_archive(tmp_path / "archive", records=120, keys=3, seed=5)
    with open(archive / "part-001.jsonl", "a") as handle:
        handle.write('{"event_id": "bad", "user": "u1", "ts": "soon"}\n')  # quarantined, not kept
    monkeypatch.setattr(pass_compute, "READ_AHEAD_RECORDS", 30)
    taken = []
    real_ingested_records = pass_compute.PassComputer.ingested_records

    def compared(self, timeline, seq_start, seq_end):
        rows = real_ingested_records(self, timeline, seq_start, seq_end)
        if rows is not None:
            # (Over Spark Connect the client reads staging itself, with delta-rs: same types.)
            staged = self.store.staged_rows(self.record_columns(), seq_start, seq_end)
            assert rows.schema.types == staged.schema.types
            assert rows.to_pydict() == staged.to_pydict()
            taken.append((seq_start, seq_end))
        return rows

    monkeypatch.setattr(pass_compute.PassComputer, "ingested_records", compared)
    read_once = []
    real_staged_rows = pass_compute.DeltaStore.staged_rows

    def staged_rows(self, columns, seq_start, seq_end):
        if "_partition" in columns and "user" in columns:  # a timeline's and a record's columns
            read_once.append((seq_start, seq_end))
        return real_staged_rows(self, columns, seq_start, seq_end)

    monkeypatch.setattr(pass_compute.DeltaStore, "staged_rows", staged_rows)
    runs = {}
    for name in ("kept", "staged", "read once"):
        if name == "staged":
            monkeypatch.setattr(pass_compute.PassComputer, "kept_record_columns", lambda self, records: [])
        if name == "read once":  # as a run that did not ingest its passes' records (resumed, later)
            monkeypatch.setattr(pass_compute.PassComputer, "ingested_timeline", lambda self, *seqs: None)
        config = write_pipeline(
            tmp_path / f"{name}.yaml", archive, tmp_path / name,
            batch={"max_records": 20, "pass_max_records": 60}, late_output="side_output",
        )
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = tables(spark, tmp_path / name)
    assert taken == [(0, 60), (60, 120)]  # the "kept" run's two passes; the "staged" run's none
    assert read_once == [(0, 60), (60, 120)]  # the last run's: one staging read a pass
    assert runs["kept"] == runs["staged"] == runs["read once"]
    assert len(runs["kept"]["late_events"]) > 0 and len(runs["kept"]["quarantine"]) == 1


SHARED_CASES = {
    "session kernel": {"window": {"type": "session", "gap": "5s"}, "trigger": {"type": "event_time"}},
    "per-record operator": {"process": INACTIVITY_ALERT, "window": None, "trigger": None, "aggregates": None,
                            "allowed_lateness": None},
    "window kernel": {},  # tumbling, ~0.3 us a record: cheaper on the driver than sent to a helper
    "window kernel, sliding": {"window": {"type": "sliding", "size": "1m", "slide": "10s"}},  # 6 a record
}


@pytest.mark.parametrize("case", list(SHARED_CASES))
def test_driver_passes_share_their_keys_with_helper_processes(spark, tmp_path, monkeypatch, case):
    """A big pass on the driver runs shares of its keys in helper processes (``driver_processes``)
    unless its operator is the fixed windows' kernel over tumbling windows: the same tables as the
    driver alone; a helper that dies has its keys run on the driver."""
    from spark_jobs.execution import key_processes, pass_compute

    archive = write_archive(tmp_path / "archive", records=240, keys=9, seed=11)
    monkeypatch.setattr(pass_compute, "MIN_SHARED_RECORDS", 0)  # every pass could share its keys
    monkeypatch.setattr(key_processes, "usable_processes", lambda wanted: wanted)  # (on any machine)
    answered, sent, killing = [], [], []
    real_receive, real_send = key_processes.KeyHelpers._receive, key_processes.KeyHelpers._send

    def receive(child):
        answer = real_receive(child)
        answered.append(answer is not None and answer.num_rows > 0)
        return answer

    def send(child, request):
        if sent and killing:  # the helper dies after its first share
            child.kill()
            child.wait()
        sent.append(len(request))
        return real_send(child, request)

    monkeypatch.setattr(key_processes.KeyHelpers, "_receive", staticmethod(receive))
    monkeypatch.setattr(key_processes.KeyHelpers, "_send", staticmethod(send))
    shares = case != "window kernel"
    runs = {}
    # (a pass that shares nothing has no helper to lose: no "killed" run)
    for name, processes in (("alone", 1), ("shared", 2), ("killed", 2))[:3 if shares else 2]:
        killing[:] = [True] if name == "killed" else []
        config = write_pipeline(
            tmp_path / f"{name}.yaml", archive, tmp_path / name, late_output="side_output",
            **{**SHARED_CASES[case],
               "batch": {"max_records": 20, "pass_max_records": 60, "driver_processes": processes}},
        )
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = {**tables(spark, tmp_path / name), **{
            table: table_rows(spark, tmp_path / name, table) for table in ("process_results", "side_outputs")
            if (tmp_path / name / table).exists()
        }}
        if name == "shared":  # every pass: 240 records in 4 (the finalize joins the last)
            assert len(sent) == (4 if shares else 0) and all(answered), (sent, answered)
        if name == "killed" and shares:
            assert "key helper: gone; its keys run on the driver" in done.stderr
            assert len(sent) == 2  # none after the helper failed
        sent.clear()
    assert runs["shared"] == runs["alone"]
    if shares:
        assert runs["killed"] == runs["alone"]
    produced = "process_results" if case == "per-record operator" else "window_results"
    assert runs["alone"][produced]
