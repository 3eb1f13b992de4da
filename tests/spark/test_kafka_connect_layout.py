"""Kafka Connect's object layout (``source.layout: kafka_connect``): Kafka's partition and offset
come from each object's name (``<topic>+<partition>+<startOffset>.<ext>``) and the record's place in
it, not from the record.

The same generated events (``replay_helpers.write_archive``) are written as Kafka Connect's S3 sink
writes them, without their partition and offset fields, and replayed through the real ``replay``
code path; every output table must equal the replay of a flat JSON Lines archive whose records
carry those fields (``<topic>-<partition>`` and the offset), at several batch sizes, with and
without an ingest time. A run killed mid-way, a later run over new objects and a reprocess of a
range end with the same tables.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import cli, run_cli, snapshot, table_rows, write_archive, write_pipeline

from spark_jobs.config import parse_config
from spark_jobs.execution.sources import check_archive, list_archive

pytestmark = pytest.mark.spark

TOPIC = "clicks"
BATCH_SIZES = (40, 1000)
KAFKA_CONNECT_SOURCE = {"format": "jsonl", "layout": "kafka_connect", "event_time": "ts", "id": "event_id"}
FLAT_SOURCE = {"format": "jsonl", "event_time": "ts", "partition": "partition", "offset": "offset",
               "id": "event_id"}


def archive_records(flat: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(flat.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def kafka_order(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: (r["partition"], r["offset"]))


def write_kafka_connect(records: list[dict[str, Any]], target: Path, per_object: int = 7,
                        upto: int | None = None, since: int = 0) -> Path:
    """Objects of ``per_object`` records as the S3 sink names them, records without partition and
    offset; partition 0 zero-padded (the sink's default), partition 1 not (``+14`` sorts before
    ``+7`` as text). Only offsets in [``since``, ``upto``)."""
    by_partition: dict[int, list[dict[str, Any]]] = {}
    for record in kafka_order(records):
        if since <= record["offset"] and (upto is None or record["offset"] < upto):
            by_partition.setdefault(record["partition"], []).append(record)
    for partition, rows in by_partition.items():
        directory = target / "topics" / TOPIC / f"partition={partition}"
        directory.mkdir(parents=True, exist_ok=True)
        for first in range(0, len(rows), per_object):
            chunk = rows[first:first + per_object]
            start = f"{chunk[0]['offset']:010d}" if partition == 0 else str(chunk[0]["offset"])
            lines = [json.dumps({k: v for k, v in r.items() if k not in ("partition", "offset")})
                     for r in chunk]
            (directory / f"{TOPIC}+{partition}+{start}.json").write_text("\n".join(lines) + "\n")
    return target


def write_flat(records: list[dict[str, Any]], target: Path) -> Path:
    """The same records, in the given order, with Kafka's partition as Kafka Connect's layout
    names it (``<topic>-<partition>``)."""
    target.mkdir(parents=True)
    lines = [json.dumps({**r, "partition": f"{TOPIC}-{r['partition']}"}) for r in records]
    (target / "part-000.jsonl").write_text("\n".join(lines) + "\n")
    return target


def pipeline(path: Path, archive: Path, out: Path, source: dict[str, Any], batch_size: int = 40,
             ingest_time: bool = True) -> Path:
    return write_pipeline(
        path, archive, out,
        source={"path": str(archive), **source, **({"ingest_time": "ingest_ts"} if ingest_time else {})},
        batch={"max_records": batch_size, "pass_max_records": 2 * batch_size},
    )


def comparable(spark, lakehouse: Path) -> dict[str, list[tuple]]:
    """``snapshot`` minus what names the archive itself (its text, files and lines)."""
    tables = snapshot(spark, lakehouse)
    tables["late_events"] = table_rows(spark, lakehouse, "late_events", ("raw", "source_file", "line"))
    tables.pop("replay_log")  # names the archive's files
    return tables


def replayed(spark, tmp_path: Path, name: str, archive: Path, source: dict[str, Any], batch_size: int,
             ingest_time: bool) -> dict[str, list[tuple]]:
    out = tmp_path / name
    config = pipeline(tmp_path / f"{name}.yaml", archive, out, source, batch_size, ingest_time)
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    return comparable(spark, out)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict[str, Any]]:
    return archive_records(write_archive(tmp_path_factory.mktemp("flat") / "archive", records=160, files=2))


# ---- the reader: names, positions, order ------------------------------------------------------
def test_partition_and_offset_come_from_object_names(spark, records, tmp_path):
    archive = write_kafka_connect(records, tmp_path / "kc")
    stray = archive / "topics" / TOPIC / "partition=0" / "export-0001.json"  # not the sink's name
    stray.write_text(json.dumps(records[0]) + "\n" + json.dumps(records[2]) + "\n")
    config = parse_config({**_config(archive), "source": {"path": str(archive), **KAFKA_CONNECT_SOURCE}})
    files = list_archive(spark, config.source)
    names = [f.path.rsplit("/", 1)[1] for f in files]
    # Numeric order of start offsets in each partition (not text order), a stray object last.
    assert names[:3] == [f"{TOPIC}+0+{start:010d}.json" for start in (0, 7, 14)]
    assert names[12:15] == [f"{TOPIC}+1+0.json", f"{TOPIC}+1+7.json", f"{TOPIC}+1+14.json"]
    assert names[-1] == "export-0001.json" and len(names) == 2 * 12 + 1

    rows = check_archive(spark, config, files).frame.select(
        "_file", "_outcome", "_partition", "_offset", "_id").collect()
    accepted = {r["_id"]: (r["_partition"], r["_offset"]) for r in rows if r["_outcome"] is None}
    assert accepted == {r["event_id"]: (f"{TOPIC}-{r['partition']}", r["offset"]) for r in records}
    stray_rows = [r for r in rows if r["_file"].endswith("export-0001.json")]
    assert [r["_outcome"]["r"] for r in stray_rows] == ["invalid_object_name"] * 2
    assert len(rows) == len(records) + 2  # every line has one outcome: nothing lost


def test_a_csv_object_counts_its_records_after_the_header(spark, records, tmp_path):
    import csv

    directory = tmp_path / "kc" / "topics" / TOPIC / "partition=3"
    directory.mkdir(parents=True)
    with open(directory / f"{TOPIC}+3+1000.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["ts", "user", "event_id", "value"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records[:5])
    config = parse_config({**_config(tmp_path / "kc"),
                           "source": {"path": str(tmp_path / "kc"), **KAFKA_CONNECT_SOURCE, "format": "csv"}})
    rows = check_archive(spark, config, list_archive(spark, config.source)).frame.collect()
    assert [(r["_outcome"], r["_partition"], r["_offset"]) for r in rows] == [
        (None, f"{TOPIC}-3", 1000 + i) for i in range(5)]


def test_a_parquet_object_counts_its_rows(spark, records, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = tmp_path / "kc" / "topics" / TOPIC / "partition=2"
    directory.mkdir(parents=True)
    rows = [{k: v for k, v in r.items() if k not in ("partition", "offset")} for r in records[:6]]
    pq.write_table(pa.Table.from_pylist(rows), directory / f"{TOPIC}+2+0000000050.snappy.parquet",
                   row_group_size=4)
    config = parse_config({**_config(tmp_path / "kc"), "source": {
        "path": str(tmp_path / "kc"), **KAFKA_CONNECT_SOURCE, "format": "parquet"}})
    checked = check_archive(spark, config, list_archive(spark, config.source)).frame.collect()
    assert sorted((r["_outcome"], r["_partition"], r["_offset"], r["_id"]) for r in checked) == [
        (None, f"{TOPIC}-2", 50 + i, r["event_id"]) for i, r in enumerate(records[:6])]


def test_an_avro_object_counts_its_records(spark, records, tmp_path):
    """Kafka Connect's S3 sink writes Avro objects most often (AvroFormat)."""
    import fastavro

    directory = tmp_path / "kc" / "topics" / TOPIC / "partition=4"
    directory.mkdir(parents=True)
    schema = {"type": "record", "name": "Click", "fields": [
        {"name": "event_id", "type": "string"}, {"name": "user", "type": "string"},
        {"name": "ts", "type": "long"}, {"name": "value", "type": "double"}]}
    rows = [{k: r[k] for k in ("event_id", "user", "ts", "value")} for r in records[:9]]
    with open(directory / f"{TOPIC}+4+0000000700.avro", "wb") as handle:
        fastavro.writer(handle, schema, rows, codec="deflate", sync_interval=200)  # several blocks
    config = parse_config({**_config(tmp_path / "kc"), "source": {
        "path": str(tmp_path / "kc"), **KAFKA_CONNECT_SOURCE, "format": "avro"}})
    checked = check_archive(spark, config, list_archive(spark, config.source)).frame.collect()
    assert sorted((r["_outcome"], r["_partition"], r["_offset"], r["_id"]) for r in checked) == [
        (None, f"{TOPIC}-4", 700 + i, r["event_id"]) for i, r in enumerate(records[:9])]


def test_a_delta_source_has_no_object_names(tmp_path):
    from spark_jobs.exceptions import ConfigError

    with pytest.raises(ConfigError, match="source.layout"):
        parse_config({**_config(tmp_path), "source": {"path": str(tmp_path), **KAFKA_CONNECT_SOURCE,
                                                       "format": "delta"}})


def test_the_layout_refuses_partition_and_offset_fields(tmp_path):
    from spark_jobs.exceptions import ConfigError

    with pytest.raises(ConfigError, match="source.partition.*object names"):
        parse_config({**_config(tmp_path), "source": {"path": str(tmp_path), **KAFKA_CONNECT_SOURCE,
                                                       "partition": "p"}})
    with pytest.raises(ConfigError, match="source.layout"):
        parse_config({**_config(tmp_path), "source": {"path": str(tmp_path), "event_time": "ts",
                                                       "layout": "hive"}})


def _config(archive: Path) -> dict[str, Any]:
    return {"name": "kc", "source": {"path": str(archive), "event_time": "ts"}, "key": ["user"],
            "window": {"type": "tumbling", "size": "1m"}, "aggregates": {"n": "count(*)"},
            "output": {"path": str(archive.parent / "out")}}


# ---- whole replays ----------------------------------------------------------------------------
@pytest.mark.slow  # two replays a case
@pytest.mark.parametrize("ingest_time", [True, False], ids=["ingest_time", "arrival_order"])
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_kafka_connect_objects_replay_like_flat_json_lines(spark, records, tmp_path, batch_size, ingest_time):
    """Without an ingest time, records arrive object by object: Kafka's (partition, offset) order."""
    kc = write_kafka_connect(records, tmp_path / "kc")
    flat = write_flat(records if ingest_time else kafka_order(records), tmp_path / "flat")
    got = replayed(spark, tmp_path, "kc-out", kc, KAFKA_CONNECT_SOURCE, batch_size, ingest_time)
    expected = replayed(spark, tmp_path, "flat-out", flat, FLAT_SOURCE, batch_size, ingest_time)
    assert got["window_results"] and got["late_events"], "the case should fire and drop something"
    assert got == expected


@pytest.mark.slow  # three runs in processes of their own
def test_killed_resumed_appended_and_reprocessed_kafka_connect_replay(spark, records, tmp_path):
    """New objects appended after a first run are picked up by the next; a run killed mid-pass
    resumes; a reprocessed range and a reprocess killed half-way end with the one-shot tables."""
    whole = write_kafka_connect(records, tmp_path / "whole")
    clean = pipeline(tmp_path / "clean.yaml", whole, tmp_path / "clean", KAFKA_CONNECT_SOURCE)
    assert cli("run", str(clean), "--finalize").returncode == 0
    expected = comparable(spark, tmp_path / "clean")

    growing = write_kafka_connect(records, tmp_path / "growing", upto=40)
    config = pipeline(tmp_path / "growing.yaml", growing, tmp_path / "out", KAFKA_CONNECT_SOURCE)
    killed = run_cli("run", str(config), env={"REPLAY_CRASH_AT": "batch:1:before-commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert cli("run", str(config)).returncode == 0
    write_kafka_connect(records, growing, since=40)  # the sink's next objects
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    assert comparable(spark, tmp_path / "out") == expected

    shutil.copytree(tmp_path / "out", tmp_path / "before-reprocess")
    reprocess = ["reprocess", "--from", "1700000100000", "--to", "1700000140000", "--reason", "test"]
    killed = run_cli(reprocess[0], str(config), *reprocess[1:], env={"REPLAY_CRASH_AT": "reprocess:forward"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    done = cli(reprocess[0], str(config), *reprocess[1:])
    assert done.returncode == 0, done.stderr[-3000:]
    assert comparable(spark, tmp_path / "out") == expected
