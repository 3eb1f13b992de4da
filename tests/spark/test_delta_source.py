"""``source.format: delta``: a Delta table written by Spark in several commits replays like the
same events as flat JSON Lines; later runs pick up appended versions, a pin ignores them, and a
rewrite (DELETE, OPTIMIZE) of replayed data stops the run with nothing written; resume after a
kill and reprocess give the same tables.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from replay_helpers import cli, delta_history, run_cli, snapshot, table_rows, write_archive, write_pipeline

from spark_jobs.config import parse_config
from spark_jobs.exceptions import ArchiveChangedError, ConfigError
from spark_jobs.execution.archive_delta import list_delta
from spark_jobs.execution.sources import list_archive, read_archive

pytestmark = pytest.mark.spark

BATCH_SIZES = (40, 1000)
#: No ingest_time: the replay order is the arrival order, (file, line), so commit order matters.
ARRIVAL_SOURCE = {"event_time": "ts", "partition": "partition", "offset": "offset", "id": "event_id"}
SCHEMA = ("event_id string, user string, ts long, ingest_ts long, partition long, offset long, "
          "value double")
COLUMNS = ["event_id", "user", "ts", "ingest_ts", "partition", "offset", "value"]
#: How the events are cut into commits, and how many files each commit writes.
COMMITS = [(30, 1), (50, 2), (10, 1), (40, 2), (30, 1)]


def flat_records(archive: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(archive.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def append(spark, table: Path, records: list[dict[str, Any]], files: int) -> list[str]:
    """One Spark commit of ``records`` in ``files`` data files (in record order: range partitions
    of the record's position, which Spark numbers part-00000, part-00001 ...); returns the data
    files it added, in path order."""
    before = data_files(spark, table) if (table / "_delta_log").exists() else set()
    rows = [(n, *[r[c] for c in COLUMNS]) for n, r in enumerate(records)]
    frame = spark.createDataFrame(rows, "_n long, " + SCHEMA)
    frame = frame.repartitionByRange(files, "_n").sortWithinPartitions("_n").drop("_n")
    frame.write.format("delta").mode("append").save(str(table))
    added = data_files(spark, table) - before
    assert len(added) == files
    return sorted(added)


def data_files(spark, table: Path) -> set[str]:
    """The table's data files as Spark's Delta reader names them (decoded, as Hadoop names them)."""
    from pyspark.sql import functions as F

    rows = spark.read.format("delta").load(str(table)).select(
        F.url_decode("_metadata.file_path").alias("p")).distinct().collect()
    return {r["p"] for r in rows}


def write_delta(spark, records: list[dict[str, Any]], table: Path,
                commits: list[tuple[int, int]] = COMMITS) -> list[list[str]]:
    """The records as a Delta table, one commit per ``commits`` entry: each commit's files."""
    added, start = [], 0
    for count, files in commits:
        added.append(append(spark, table, records[start:start + count], files))
        start += count
    assert start == len(records)
    return added


def comparable(spark, lakehouse: Path) -> dict[str, list[tuple]]:
    tables = snapshot(spark, lakehouse)
    tables["late_events"] = table_rows(spark, lakehouse, "late_events", ("raw", "source_file", "line"))
    tables["quarantine"] = table_rows(spark, lakehouse, "quarantine", ("raw", "source_file", "line"))
    tables.pop("replay_log")  # names the archive's files
    return tables


def pipeline(tmp_path: Path, name: str, archive: Path, batch_size: int = 40, **source: Any) -> Path:
    return write_pipeline(
        tmp_path / f"{name}.yaml", archive, tmp_path / name,
        source={"path": str(archive), **ARRIVAL_SOURCE, **source},
        batch={"max_records": batch_size, "pass_max_records": 2 * batch_size},
    )


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    return write_archive(tmp_path_factory.mktemp("flat") / "archive", records=160, files=2)


@pytest.fixture(scope="module")
def bronze(spark, events, tmp_path_factory) -> tuple[Path, list[list[str]]]:
    table = tmp_path_factory.mktemp("bronze") / "events"
    return table, write_delta(spark, flat_records(events), table)


# ---- listing ---------------------------------------------------------------------------------
def test_files_are_listed_in_commit_order_then_path_order(spark, bronze):
    table, commits = bronze
    config = parse_config({
        "name": "d", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(table), "format": "delta", **ARRIVAL_SOURCE},
        "aggregates": {"n": "count(*)"}, "output": {"path": str(table.parent / "out")},
    })
    listed = [f.path for f in list_archive(spark, config.source)]
    assert listed == [path for files in commits for path in files]
    listing = list_delta(config.source)
    assert listing.version == len(COMMITS) - 1 and not listing.removed
    assert [listing.added[p] for p in listed] == [v for v, files in enumerate(commits) for _ in files]
    # Pinned: only the files of the versions up to the pin.
    pinned = list_delta(parse_config({**config.raw, "source": {**config.raw["source"], "version": 1}}).source)
    assert [f.path for f in pinned.files] == commits[0] + commits[1] and pinned.version == 1
    # Every row read, in its file's order, nothing quarantined.
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    assert quarantine.count() == 0
    ordered = records.orderBy("_file_index", "_line").collect()
    assert [r["_id"] for r in ordered] == [f"e{i}" for i in range(160)]


def test_knowing_the_ingested_files_spares_the_walk_and_keeps_the_order(tmp_path):
    """With the ingested files known, only the versions that added the others are looked up
    (walking back from the snapshot): the same order for those as the full walk's."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = tmp_path / "t"
    for i in range(12):
        write_deltalake(str(table), pa.table({"ts": [i, i], "user": ["u", "v"]}), mode="append")
    source = parse_config({
        "name": "d", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(table), "format": "delta", "event_time": "ts"},
        "aggregates": {"n": "count(*)"}, "output": {"path": str(tmp_path / "out")},
    }).source
    full = [f.path for f in list_delta(source).files]
    for known in (set(full[:9]), set(full[::3]), set(full)):
        listing = list_delta(source, known=known)
        new = [f.path for f in listing.files if f.path not in known]
        assert new == [p for p in full if p not in known]
        assert set(listing.added) == set(full) - known and not listing.removed


def test_pins_and_non_delta_paths_are_refused_clearly(tmp_path, events):
    base = {"name": "d", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
            "aggregates": {"n": "count(*)"}, "output": {"path": str(tmp_path / "out")}}
    source = {"path": str(events), "format": "delta", **ARRIVAL_SOURCE}
    with pytest.raises(ConfigError, match="source.version: and timestamp both pin"):
        parse_config({**base, "source": {**source, "version": 1, "timestamp": "2024-01-01T00:00:00Z"}})
    with pytest.raises(ConfigError, match="source.version: pins a Delta table's snapshot: only with"):
        parse_config({**base, "source": {**source, "format": "jsonl", "version": 1}})
    with pytest.raises(ConfigError, match="source.version: must be a table version"):
        parse_config({**base, "source": {**source, "version": -1}})
    with pytest.raises(ConfigError, match="source.timestamp"):
        parse_config({**base, "source": {**source, "timestamp": "yesterday"}})
    # A directory of JSON Lines is no Delta table: the run stops before writing anything.
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({**base, "source": source}))
    done = cli("run", str(config))
    assert done.returncode != 0 and "is not a readable Delta table" in done.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["_replay.lock"]  # no table


def test_deletion_vector_tables_are_refused(spark, tmp_path):
    rows = [(f"e{i}", "u", 1000 * i, 0, 0, i, 1.0) for i in range(4)]
    spark.createDataFrame(rows, SCHEMA).write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(str(tmp_path / "dv"))
    config = parse_config({
        "name": "d", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(tmp_path / "dv"), "format": "delta", **ARRIVAL_SOURCE},
        "aggregates": {"n": "count(*)"}, "output": {"path": str(tmp_path / "out")},
    })
    with pytest.raises(ConfigError, match="deletion vectors"):
        list_archive(spark, config.source)


def test_partition_columns_come_from_the_log_typed(spark, events, tmp_path):
    """The data files of a partitioned table do not hold the partition columns: each file's values
    (a key, a long, a NULL partition) come from its add action, typed as the table says."""
    records = flat_records(events)
    records[5]["user"] = None  # a NULL partition value: the record misses its key
    table = tmp_path / "partitioned"
    spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in records], SCHEMA) \
        .write.format("delta").partitionBy("user", "partition").save(str(table))
    config = parse_config({
        "name": "d", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(table), "format": "delta", **ARRIVAL_SOURCE},
        "aggregates": {"total": "sum(value)"}, "output": {"path": str(tmp_path / "out")},
    })
    files = list_archive(spark, config.source)
    assert all("/user=" in f.path for f in files)
    got, quarantine = read_archive(spark, config, files)
    assert [(r["reason"], json.loads(r["raw"])["event_id"]) for r in quarantine.collect()] == [
        ("missing_field", "e5")]
    assert sorted((r["_id"], r["user"], r["_partition"], r["_offset"], r["_event_time"], r["value"])
                  for r in got.collect()) == sorted(
        (r["event_id"], r["user"], str(r["partition"]), r["offset"], r["ts"], r["value"])
        for r in records if r["user"] is not None)


def test_rows_that_cannot_be_typed_are_quarantined(spark, tmp_path):
    table = tmp_path / "bad"
    rows = [("e0", "u", "1700000000000", "1.5"), ("e1", "u", "not a time", "2"),
            ("e2", None, "1700000001000", "3"), ("e3", "u", "1700000002000", "x")]
    spark.createDataFrame(rows, "event_id string, user string, ts string, value string").coalesce(1) \
        .write.format("delta").save(str(table))
    config = parse_config({
        "name": "d", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(table), "format": "delta", "event_time": "ts", "id": "event_id",
                   "types": {"value": "double"}},
        "aggregates": {"total": "sum(value)"}, "output": {"path": str(tmp_path / "out")},
    })
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    assert [(r["_line"], r["value"]) for r in records.collect()] == [(1, 1.5)]
    bad = {r["line"]: r["reason"] for r in quarantine.collect()}
    assert bad == {2: "invalid_timestamp", 3: "missing_field", 4: "invalid_type"}


# ---- same results as flat JSON Lines ------------------------------------------------------------
@pytest.fixture(scope="module")
def flat_replays(spark, events, tmp_path_factory) -> dict[int, dict[str, list[tuple]]]:
    tmp = tmp_path_factory.mktemp("flat-out")
    replays = {}
    for size in BATCH_SIZES:
        done = cli("run", str(pipeline(tmp, f"flat-{size}", events, size, format="jsonl")))
        assert done.returncode == 0, done.stderr[-3000:]
        replays[size] = comparable(spark, tmp / f"flat-{size}")
    return replays


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_a_delta_source_replays_like_flat_json_lines(spark, bronze, flat_replays, tmp_path, batch_size):
    table, _ = bronze
    done = cli("run", str(pipeline(tmp_path, "delta", table, batch_size, format="delta")))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Delta source {table}: version {len(COMMITS) - 1}" in done.stderr
    got = comparable(spark, tmp_path / "delta")
    assert got["window_results"], "the case should fire something"
    assert got == flat_replays[batch_size]
    # The version read is in source_files' commit.
    [commit] = [c for c in delta_history(spark, tmp_path / "delta" / "source_files") if c["userMetadata"]]
    assert json.loads(commit["userMetadata"]) == {"delta_versions": {str(table): len(COMMITS) - 1}}


# ---- new versions, pins, rewrites ---------------------------------------------------------------
def source_files(spark, lakehouse: Path) -> list[str]:
    frame = spark.read.format("delta").load(str(lakehouse / "source_files"))
    return [r["path"] for r in frame.orderBy("file_index").collect()]


@pytest.mark.slow  # five replays: about 2.5 minutes here
def test_later_runs_pick_up_appended_versions_and_a_pin_ignores_them(spark, events, tmp_path):
    from spark_jobs.config import load_config
    from spark_jobs.execution.pending_work import pending_work

    records = flat_records(events)
    table = tmp_path / "bronze"
    first = write_delta(spark, records[:80], table, [(50, 1), (30, 2)])
    latest = pipeline(tmp_path, "latest", table, format="delta")
    pinned = pipeline(tmp_path, "pinned", table, format="delta", version=1)
    for config in (latest, pinned):
        assert cli("run", str(config)).returncode == 0
    later = write_delta(spark, records[80:], table, [(40, 1), (40, 2)])
    # Airflow's check (no JVM) sees the new versions for the unpinned pipeline only.
    assert pending_work(load_config(latest)).work
    assert not pending_work(load_config(pinned)).work, pending_work(load_config(pinned)).reason
    picked = cli("run", str(latest), "--finalize")
    assert picked.returncode == 0 and "ingested 3 files" in picked.stderr, picked.stderr[-3000:]
    assert "version 3" in picked.stderr
    assert source_files(spark, tmp_path / "latest") == [p for files in first + later for p in files]
    again = cli("run", str(pinned), "--finalize")
    assert again.returncode == 0 and "ingested" not in again.stderr
    assert source_files(spark, tmp_path / "pinned") == [p for files in first for p in files]
    # A timestamp pin reads the version committed at or before it. A version's time is its commit
    # file's modification time (as for Delta's timestampAsOf), not commitInfo.timestamp (earlier):
    # halfway between versions 1 and 2.
    import datetime as dt

    moments = [(table / "_delta_log" / f"{v:020d}.json").stat().st_mtime for v in (1, 2)]
    at = dt.datetime.fromtimestamp(sum(moments) / 2, dt.UTC).isoformat()
    by_time = pipeline(tmp_path, "by-time", table, format="delta", timestamp=at)
    done = cli("run", str(by_time))
    assert done.returncode == 0 and "version 1" in done.stderr, done.stderr[-3000:]
    assert source_files(spark, tmp_path / "by-time") == [p for files in first for p in files]


@pytest.mark.parametrize("rewrite", ["DELETE FROM delta.`{t}` WHERE user = 'u1'", "OPTIMIZE delta.`{t}`"])
def test_a_rewritten_replayed_version_stops_the_run_with_nothing_written(spark, events, tmp_path, rewrite):
    table = tmp_path / "bronze"
    write_delta(spark, flat_records(events)[:60], table, [(20, 1), (20, 1), (20, 1)])
    config = pipeline(tmp_path, "lakehouse", table, format="delta")
    assert cli("run", str(config)).returncode == 0
    before = {t: len(delta_history(spark, tmp_path / "lakehouse" / t))
              for t in ("source_files", "staging", "replay_log", "window_results")}
    spark.sql(rewrite.format(t=table))
    operation = delta_history(spark, table, 1)[0]["operation"]
    assert operation in ("DELETE", "OPTIMIZE")
    stopped = cli("run", str(config))
    assert stopped.returncode == 1
    assert f"version 3 ({operation}) removed" in stopped.stderr, stopped.stderr[-3000:]
    after = {t: len(delta_history(spark, tmp_path / "lakehouse" / t)) for t in before}
    assert after == before
    with pytest.raises(ArchiveChangedError):
        from spark_jobs.execution.archive_delta import check_delta_unchanged

        listing = list_delta(parse_config(yaml.safe_load(config.read_text())).source)
        known = {p: {} for p in source_files(spark, tmp_path / "lakehouse")}
        check_delta_unchanged(listing, known, str(table))


# ---- kill and resume, reprocess -----------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(spark, bronze, tmp_path_factory):
    """One uninterrupted, finalized replay of the Delta source (kept unchanged)."""
    table, _ = bronze
    root = tmp_path_factory.mktemp("delta-reference")
    config = pipeline(root, "lakehouse", table, format="delta")
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copytree(root / "lakehouse", root / "finalized")
    return table, root / "finalized", snapshot(spark, root / "lakehouse")


@pytest.mark.slow  # a killed process (its own JVM) and a resume: about a minute each here
@pytest.mark.parametrize("crash_at", ["ingest:staged", "batch:2:state"])
def test_kill_and_resume_equals_uninterrupted_run(spark, tmp_path, reference, crash_at):
    table, _, expected = reference
    config = pipeline(tmp_path, "lakehouse", table, format="delta")
    crashed = run_cli("run", str(config), "--finalize", env={"REPLAY_CRASH_AT": crash_at})
    assert crashed.returncode == -signal.SIGKILL, f"never reached {crash_at}: {crashed.stderr[-2000:]}"
    resumed = cli("run", str(config), "--finalize")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert snapshot(spark, tmp_path / "lakehouse") == expected


def test_reprocess_of_a_range_gives_the_same_tables(spark, tmp_path, reference):
    table, finalized, expected = reference
    shutil.copytree(finalized, tmp_path / "lakehouse")
    config = pipeline(tmp_path, "lakehouse", table, format="delta")
    done = cli("reprocess", str(config), "--from", "1700000100000", "--to", "1700000140000",
               "--reason", "delta test")
    assert done.returncode == 0, done.stderr[-3000:]
    assert snapshot(spark, tmp_path / "lakehouse") == expected
    history = spark.read.format("delta").load(str(tmp_path / "lakehouse" / "reprocess_history")).first()
    assert history["reason"] == "delta test" and history["from_batch"] > 0


# ---- replay generate --format delta -------------------------------------------------------------
def test_generate_writes_the_sample_events_as_a_delta_table_in_several_commits(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    done = cli("generate", str(tmp_path / "parquet"), "--events", "3000", "--format", "parquet")
    assert done.returncode == 0, done.stderr
    for _ in range(2):  # generating again replaces the table
        done = cli("generate", str(tmp_path / "delta"), "--events", "3000", "--format", "delta")
        assert done.returncode == 0, done.stderr
    table = DeltaTable(str(tmp_path / "delta"))
    assert table.version() == 3 and [c["operation"] for c in table.history()] == ["WRITE"] * 4
    parquet = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "parquet").rglob("*.parquet")))
    rows = pa.table(table.to_pyarrow_table())
    assert sorted(map(repr, rows.to_pylist())) == sorted(map(repr, parquet.to_pylist()))
    # The demo pipeline reads it as a Delta source: the generator's corrupt rows are quarantined.
    config = parse_config({
        "name": "d", "key": ["page"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(tmp_path / "delta"), "format": "delta", "event_time": "ts",
                   "ingest_time": "ingest_ts", "partition": "partition", "offset": "offset",
                   "id": "event_id"},
        "aggregates": {"clicks": "count(*)"}, "output": {"path": str(tmp_path / "out")},
    })
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    assert records.count() + quarantine.count() == 3000 and quarantine.count() >= 1


@pytest.mark.slow  # two replays of the demo pipeline: about 1.5 minutes here
def test_the_generated_delta_table_replays_like_the_generated_parquet_archive(spark, tmp_path):
    """The demo pipeline on ``generate --format delta`` and on ``--format parquet`` (same events,
    duplicates and corrupt rows included): the same tables."""
    demo = Path(__file__).parents[2] / "include" / "pipelines" / "clicks_per_minute.yaml"
    base = yaml.safe_load(demo.read_text())
    base.pop("schedule", None)
    got = {}
    for fmt in ("parquet", "delta"):
        assert cli("generate", str(tmp_path / fmt), "--events", "5000", "--format", fmt).returncode == 0
        config = tmp_path / f"{fmt}.yaml"
        config.write_text(yaml.safe_dump({
            **base, "source": {**base["source"], "path": str(tmp_path / fmt), "format": fmt},
            "output": {"path": str(tmp_path / f"out-{fmt}")}}))
        done = cli("run", str(config), "--finalize")
        assert done.returncode == 0, done.stderr[-3000:]
        got[fmt] = comparable(spark, tmp_path / f"out-{fmt}")
    assert got["delta"]["window_results"] and got["delta"]["quarantine"]
    assert got["delta"] == got["parquet"]
