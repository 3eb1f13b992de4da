"""``source.format: avro``: Avro container files written by Spark itself and by a second writer
(fastavro), several codecs, nested records and ``timestamp-millis`` event times, give the same
records and the same replay as the same events in flat JSON Lines; exact record positions across
Spark's splits of one file; a damaged file keeps the records before its damage and leaves one
quarantine row, and the run goes on.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import BASE_TS, cli, table_rows, write_archive, write_pipeline
from test_source_shapes import BATCH_SIZES, FLAT_SOURCE, flat_records, record_fields, replay

from spark_jobs.config import parse_config
from spark_jobs.execution.sources import check_archive, line_count, list_archive, read_archive, rejected

pytestmark = pytest.mark.spark

fastavro = pytest.importorskip("fastavro")

#: The fastavro archive's schema: Kafka's fields and the event's in nested records, the event
#: time a ``timestamp-millis``.
NESTED_SCHEMA = {
    "type": "record", "name": "Envelope", "namespace": "test.replay",
    "fields": [
        {"name": "payload", "type": {"type": "record", "name": "Payload", "fields": [
            {"name": "id", "type": "string"},
            {"name": "user", "type": "string"},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "value", "type": ["null", "double"]},
        ]}},
        {"name": "kafka", "type": {"type": "record", "name": "Kafka", "fields": [
            {"name": "partition", "type": "int"},
            {"name": "offset", "type": "long"},
            {"name": "ingest", "type": "long"},
        ]}},
    ],
}
NESTED_SOURCE = {
    "format": "avro", "event_time": "payload.ts", "ingest_time": "kafka.ingest",
    "partition": "kafka.partition", "offset": "kafka.offset", "id": "payload.id",
    "fields": {"user": "payload.user", "value": "payload.value", "event_id": "payload.id"},
}


def envelope(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "payload": {"id": record["event_id"], "user": record["user"],
                    "ts": dt.datetime.fromtimestamp(record["ts"] / 1000, dt.UTC), "value": record["value"]},
        "kafka": {"partition": record["partition"], "offset": record["offset"],
                  "ingest": record["ingest_ts"]},
    }


def write_fastavro(flat: Path, target: Path, codec: str, sync_interval: int = 16000) -> Path:
    """The flat archive's files as nested Avro records, written by fastavro with ``codec``."""
    target.mkdir(parents=True)
    schema = fastavro.parse_schema(NESTED_SCHEMA)
    for number, records in enumerate(flat_records(flat)):
        with open(target / f"part-{number:03d}.avro", "wb") as handle:
            fastavro.writer(handle, schema, [envelope(r) for r in records], codec=codec,
                            sync_interval=sync_interval)
    return target


def write_spark_avro(spark, flat: Path, target: Path, codec: str = "snappy") -> Path:
    """The flat archive's files written by Spark's Avro source (one directory a file, as a Spark
    job leaves them: ``part-…avro`` beside ``_SUCCESS`` and ``.crc`` files)."""
    for number, records in enumerate(flat_records(flat)):
        frame = spark.createDataFrame(
            records, "event_id string, user string, ts long, ingest_ts long, partition long, "
                     "offset long, value double")
        frame.coalesce(1).write.format("avro").option("compression", codec).save(
            str(target / f"part-{number:03d}"))
    return target


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    return write_archive(tmp_path_factory.mktemp("flat") / "archive", records=160, files=2)


def test_avro_of_two_writers_and_six_codecs_reads_like_flat_json_lines(spark, events, tmp_path):
    flat = record_fields(spark, events, FLAT_SOURCE)
    assert len(flat) == 160
    for codec in ("snappy", "deflate", "zstandard", "xz", "bzip2"):
        archive = write_spark_avro(spark, events, tmp_path / f"spark-{codec}", codec)
        assert record_fields(spark, archive, {**FLAT_SOURCE, "format": "avro"}) == flat, codec
    for codec in ("null", "deflate"):  # fastavro's zstandard codec wants another library
        # Small blocks: several a file, so positions run across blocks.
        archive = write_fastavro(events, tmp_path / f"fastavro-{codec}", codec, sync_interval=500)
        assert record_fields(spark, archive, NESTED_SOURCE) == flat, codec


@pytest.fixture(scope="module")
def flat_replays(spark, events, tmp_path_factory) -> dict[int, dict[str, list[tuple]]]:
    tmp = tmp_path_factory.mktemp("flat-out")
    return {size: replay(spark, tmp, "flat", events, size, FLAT_SOURCE) for size in BATCH_SIZES}


@pytest.mark.slow  # two full replays a case (~1 min on 2 cores)
@pytest.mark.parametrize("writer", ["spark_snappy", "fastavro_deflate_nested"])
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_avro_replays_like_flat_json_lines(spark, events, flat_replays, tmp_path, writer, batch_size):
    if writer == "spark_snappy":
        archive, source = write_spark_avro(spark, events, tmp_path / "a"), {**FLAT_SOURCE, "format": "avro"}
    else:
        archive, source = write_fastavro(events, tmp_path / "a", "deflate", 500), NESTED_SOURCE
    got = replay(spark, tmp_path, writer, archive, batch_size, source)
    assert got["window_results"], "the case should fire something"
    assert got == flat_replays[batch_size]


# ---- positions ----------------------------------------------------------------------------------
def test_positions_are_exact_when_spark_splits_a_file(spark, tmp_path):
    archive = tmp_path / "big"
    archive.mkdir()
    schema = fastavro.parse_schema({"type": "record", "name": "R", "fields": [
        {"name": "seq", "type": "long"}, {"name": "user", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "pad", "type": "string"},
    ]})
    count = 6000
    rows = [{"seq": i + 1, "user": f"u{i % 5}", "ts": dt.datetime.fromtimestamp(1_700_000_000 + i, dt.UTC),
             "pad": "x" * (i % 37)} for i in range(count)]
    path = archive / "big.avro"
    with open(path, "wb") as handle:
        fastavro.writer(handle, schema, rows, codec="deflate", sync_interval=2000)
    # A small second file, so that one task may read splits of both; named as Kafka Connect names
    # its objects ('+' must survive Spark's URL-encoded _metadata.file_path), with a space.
    small = "clicks+0+0000000100 x.avro"
    with open(archive / small, "wb") as handle:
        fastavro.writer(handle, schema, rows[:7], codec="null")
    config = parse_config({
        "name": "splits", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(archive), "format": "avro", "event_time": "ts"},
        "aggregates": {"total": "sum(seq)"}, "output": {"path": str(tmp_path / "out")},
    })
    size = path.stat().st_size
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(size // 5))
    spark.conf.set("spark.sql.files.openCostInBytes", "1024")
    try:
        splits = spark.read.format("avro").load(str(path)).select("_metadata.file_block_start").distinct()
        assert splits.count() >= 4, "the file should be read in several splits"
        records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
        got = [(r["_file"].rsplit("/", 1)[-1], r["_line"], r["seq"], r["_event_time"])
               for r in records.select("_file", "_line", "seq", "_event_time").collect()]
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    assert quarantine.count() == 0
    big = sorted(g for g in got if g[0] == "big.avro")
    assert [(line, seq) for _, line, seq, _ in big] == [(i, i) for i in range(1, count + 1)]
    assert all(ms == (1_700_000_000 + seq - 1) * 1000 for _, _, seq, ms in big)  # timestamp-millis
    assert sorted(line for name, line, _, _ in got if name == small) == list(range(1, 8))


# ---- damage -------------------------------------------------------------------------------------
def _sync_offsets(data: bytes, marker: bytes) -> list[int]:
    found, at = [], data.find(marker)
    while at >= 0:
        found.append(at)
        at = data.find(marker, at + 1)
    return found


def write_damaged(target: Path) -> dict[str, int]:
    """Avro files with damage of each kind; returns each file's records before its damage."""
    target.mkdir(parents=True)
    schema = fastavro.parse_schema(NESTED_SCHEMA)
    records = [envelope({"event_id": f"e{i}", "user": f"u{i % 3}", "ts": BASE_TS + 1000 * i,
                         "value": float(i), "partition": 0, "offset": i, "ingest_ts": BASE_TS + 1000 * i})
               for i in range(100)]
    with open(target / "sound.avro", "wb") as handle:
        fastavro.writer(handle, schema, records[:10], codec="deflate")
    import io

    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, records, codec="deflate", sync_interval=300)
    data = buffer.getvalue()
    marker = data[_sync_offsets(data, data[-16:])[0]:][:16]
    syncs = _sync_offsets(data, marker)  # the header's, then one after each block
    assert len(syncs) > 5
    reader = fastavro.block_reader(io.BytesIO(data))
    counts = [block.num_records for block in reader]
    # Cut inside the fourth block: three blocks are sound.
    (target / "cut.avro").write_bytes(data[: syncs[3] + 16 + 20])
    # A flipped run of bytes inside the third block's deflate data (its header and sync intact).
    corrupt = bytearray(data)
    middle = (syncs[2] + syncs[3]) // 2
    corrupt[middle:middle + 8] = b"\xff" * 8
    (target / "corrupt.avro").write_bytes(bytes(corrupt))
    # The second block's sync marker overwritten.
    wrong_sync = bytearray(data)
    wrong_sync[syncs[2]:syncs[2] + 16] = b"\x00" * 16
    (target / "sync.avro").write_bytes(bytes(wrong_sync))
    (target / "not-avro.avro").write_bytes(b"this is not an Avro file\n")
    # Uncompressed blocks: the third block's first string length made wrong, so its records no
    # longer fit the block. Spark returns garbled records of it before it fails (seen: 8 of the
    # block's 10 with ignoreCorruptFiles): they must be cut, not accepted.
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, records, codec="null", sync_interval=300)
    plain = bytearray(buffer.getvalue())
    plain_syncs = _sync_offsets(bytes(plain), bytes(plain[-16:]))
    plain_counts = [block.num_records for block in fastavro.block_reader(io.BytesIO(bytes(plain)))]
    at = plain_syncs[2] + 16
    for _ in range(2):  # past the block's record count and byte size (varints)
        while plain[at] & 0x80:
            at += 1
        at += 1
    plain[at] = 0x7E  # payload.id's length: 63 bytes instead of 3 or 4
    (target / "garbled.avro").write_bytes(bytes(plain))
    return {"sound.avro": 10, "cut.avro": sum(counts[:3]), "corrupt.avro": sum(counts[:2]),
            "sync.avro": sum(counts[:1]), "not-avro.avro": 0, "garbled.avro": sum(plain_counts[:2])}


def test_damaged_avro_files_keep_the_records_before_the_damage(spark, tmp_path):
    archive = tmp_path / "damaged"
    expected = write_damaged(archive)
    config = parse_config({
        "name": "damaged", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {k: v for k, v in {**NESTED_SOURCE, "path": str(archive)}.items()},
        "aggregates": {"total": "sum(value)"}, "output": {"path": str(tmp_path / "out")},
    })
    files = list_archive(spark, config.source)
    records, quarantine = read_archive(spark, config, files)
    got: dict[str, list[int]] = {}
    for r in records.collect():
        got.setdefault(r["_file"].rsplit("/", 1)[-1], []).append(r["_line"])
    bad = {r["source_file"].rsplit("/", 1)[-1]: r for r in quarantine.collect()}
    for name, sound in expected.items():
        assert sorted(got.get(name, [])) == list(range(1, sound + 1)), name
    assert set(bad) == set(expected) - {"sound.avro"}
    for name, row in bad.items():
        assert (row["line"], row["reason"]) == (expected[name] + 1, "unreadable_file"), name
        assert row["raw"] and all(c in "0123456789abcdef" for c in row["raw"]), name
        assert f"the {expected[name]} records before it were read" in row["detail"], row["detail"]
    assert "cut short" in bad["cut.avro"]["detail"]
    assert "sync marker" in bad["sync.avro"]["detail"]
    assert "does not decode" in bad["corrupt.avro"]["detail"]
    assert bad["not-avro.avro"]["raw"] == b"this is not an Avro file\n".hex()
    # The counts reconcile: every sound record and one row a damaged file.
    assert line_count(spark, config, files) == sum(expected.values()) + len(bad)
    # The ingest re-reads only the rows it found bad.
    checked = check_archive(spark, config, files).frame
    wanted = checked.where(checked["_outcome"].isNotNull()).select("_file_index", "_line").toArrow()
    again = rejected(check_archive(spark, config, files, only=wanted).frame)
    assert sorted(map(repr, again.collect())) == sorted(map(repr, quarantine.collect()))


def test_a_run_over_damaged_avro_goes_on_and_reconciles(spark, tmp_path):
    archive = tmp_path / "damaged"
    expected = write_damaged(archive)
    out = tmp_path / "out"
    config = write_pipeline(tmp_path / "p.yaml", archive, out, source={**NESTED_SOURCE, "path": str(archive)})
    result = cli("run", str(config))
    assert result.returncode == 0, result.stderr
    # Per file: the sound records accepted, one quarantine row a damaged file; nothing else.
    logged = {r["path"].rsplit("/", 1)[-1]: (r["records"], r["quarantined"])
              for r in spark.read.format("delta").load(str(out / "source_files")).collect()}
    assert logged == {name: (sound, int(name != "sound.avro")) for name, sound in expected.items()}
    reasons = spark.read.format("delta").load(str(out / "quarantine")).select("reason").collect()
    assert [r["reason"] for r in reasons] == ["unreadable_file"] * (len(expected) - 1)
    assert table_rows(spark, out, "window_results"), "the sound records should fire windows"


# ---- replay generate --format avro --------------------------------------------------------------
def test_a_generated_avro_archive_reads_like_its_parquet_twin(spark, tmp_path):
    """``replay generate --format avro`` writes the Parquet archive's rows (its corrupt ones too:
    a null ``ts`` or key); the reader gives the same records and the same quarantine reasons."""
    def read(fmt: str) -> tuple[list[tuple], list[tuple]]:
        archive = tmp_path / fmt
        result = cli("generate", str(archive), "--events", "3000", "--format", fmt,
                     "--corrupt-fraction", "0.02", "--partitions", "2")
        assert result.returncode == 0, result.stderr
        config = parse_config({
            "name": "generated", "key": ["user_id"], "window": {"type": "tumbling", "size": "1m"},
            "source": {"path": str(archive), "format": fmt, "event_time": "ts", "ingest_time": "ingest_ts",
                       "partition": "partition", "offset": "offset", "id": "event_id"},
            "aggregates": {"total": "sum(value)"}, "output": {"path": str(tmp_path / f"out-{fmt}")},
        })
        records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
        columns = ["_file_index", "_line", "_event_time", "_ingest_time", "_partition", "_offset", "_id",
                   "user_id", "value"]
        return (sorted(tuple(r) for r in records.select(*columns).collect()),
                sorted((r["line"], r["reason"]) for r in quarantine.collect()))

    avro_records, avro_bad = read("avro")
    parquet_records, parquet_bad = read("parquet")
    assert len(avro_records) > 2500 and avro_bad, "some corrupt rows should be quarantined"
    assert avro_records == parquet_records
    assert avro_bad == parquet_bad and {reason for _, reason in avro_bad} == {"missing_field"}


def test_files_of_different_writer_schemas_keep_their_own_fields(spark, tmp_path):
    """Schema evolution: a later file adds a field and writes the event time as a plain long; each
    file is read with its own schema, so neither the new field nor any record is lost."""
    archive = tmp_path / "evolved"
    archive.mkdir()
    old = fastavro.parse_schema({"type": "record", "name": "E", "fields": [
        {"name": "user", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ]})
    new = fastavro.parse_schema({"type": "record", "name": "E", "fields": [
        {"name": "user", "type": "string"}, {"name": "ts", "type": "long"},
        {"name": "n", "type": ["null", "long"], "default": None},
    ]})
    with open(archive / "a.avro", "wb") as handle:
        moment = dt.datetime.fromtimestamp(1_700_000_000.5, dt.UTC)
        fastavro.writer(handle, old, [{"user": "u1", "ts": moment}])
    with open(archive / "b.avro", "wb") as handle:
        fastavro.writer(handle, new, [{"user": "u2", "ts": 1_700_000_001_000, "n": 5},
                                      {"user": "u3", "ts": 1_700_000_002_000, "n": None}])
    config = parse_config({
        "name": "evolved", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(archive), "format": "avro", "event_time": "ts", "types": {"n": "long"}},
        "aggregates": {"total": "sum(n)"}, "output": {"path": str(tmp_path / "out")},
    })
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    got = sorted((r["_file"].rsplit("/", 1)[-1], r["_line"], r["user"], r["_event_time"], r["n"])
                 for r in records.collect())
    assert quarantine.count() == 0
    assert got == [("a.avro", 1, "u1", 1_700_000_000_500, None), ("b.avro", 1, "u2", 1_700_000_001_000, 5),
                   ("b.avro", 2, "u3", 1_700_000_002_000, None)]
