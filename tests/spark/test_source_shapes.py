"""Archives in other shapes than flat JSON Lines give the same replay as flat JSON Lines.

The same generated events (``replay_helpers.write_archive``) are written in each shape, replayed
through the real ``replay run`` code path at two batch sizes, and every output table is compared
row for row with the flat JSON Lines replay (minus ``raw`` and ``source_file``, which name the
archive's own text and files).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import cli, snapshot, write_archive, write_pipeline

from spark_jobs.config import parse_config
from spark_jobs.execution.sources import check_archive, line_count, list_archive, read_archive, rejected

pytestmark = pytest.mark.spark

BATCH_SIZES = (40, 1000)
TIME_FORMAT = "dd/MM/yyyy HH:mm:ss.SSS"
FLAT_SOURCE = {"format": "jsonl", "event_time": "ts", "ingest_time": "ingest_ts",
               "partition": "partition", "offset": "offset", "id": "event_id"}


def flat_records(archive: Path) -> list[list[dict[str, Any]]]:
    """Each file's records of a flat JSON Lines archive, in file order."""
    return [[json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted(archive.glob("*.jsonl"))]


def formatted(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%d/%m/%Y %H:%M:%S.%f")[:-3]


def nested(record: dict[str, Any]) -> dict[str, Any]:
    """The record as an ingestion envelope: event fields under ``payload``, Kafka's under ``kafka``;
    the event time a string in ``TIME_FORMAT``."""
    return {
        "payload": {"id": record["event_id"], "user": record["user"], "ts": formatted(record["ts"]),
                    "value": record["value"]},
        "kafka": {"partition": record["partition"], "offset": record["offset"],
                  "ingest": record["ingest_ts"]},
    }


NESTED_SOURCE = {
    "event_time": "payload.ts", "event_time_format": TIME_FORMAT, "ingest_time": "kafka.ingest",
    "partition": "kafka.partition", "offset": "kafka.offset", "id": "payload.id",
    "fields": {"user": "payload.user", "value": "payload.value", "event_id": "payload.id"},
}


def write_nested_jsonl(flat: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for number, records in enumerate(flat_records(flat)):
        lines = [json.dumps(nested(r)) for r in records]
        (target / f"part-{number:03d}.jsonl").write_text("\n".join(lines) + "\n")
    return target


def write_nested_parquet(flat: Path, target: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target.mkdir(parents=True)
    for number, records in enumerate(flat_records(flat)):
        pq.write_table(pa.Table.from_pylist([nested(r) for r in records]),
                       target / f"part-{number:03d}.parquet")
    return target


def write_zstd_jsonl(flat: Path, target: Path) -> Path:
    """The flat archive's files compressed with zstd, the first as two frames (as ``cat`` makes)."""
    import zstandard

    target.mkdir(parents=True)
    for number, path in enumerate(sorted(flat.glob("*.jsonl"))):
        data = path.read_bytes()
        half = data.index(b"\n", len(data) // 2) + 1
        frames = [data[:half], data[half:]] if number == 0 else [data]
        packed = b"".join(zstandard.ZstdCompressor(level=3).compress(f) for f in frames)
        (target / f"part-{number:03d}.jsonl.zst").write_bytes(packed)
    return target


def write_csv(flat: Path, target: Path) -> Path:
    """The flat archive as CSV with a header, the columns in another order than the JSON's."""
    import csv

    target.mkdir(parents=True)
    for number, records in enumerate(flat_records(flat)):
        with open(target / f"part-{number:03d}.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, ["value", "ts", "user", "event_id", "ingest_ts", "partition",
                                             "offset"])
            writer.writeheader()
            writer.writerows(records)
    return target


def comparable(tables: dict[str, list[tuple]], spark, lakehouse: Path,
               volatile: tuple[str, ...] = ()) -> dict[str, list[tuple]]:
    """``snapshot`` minus what names the archive itself (its text and file names)."""
    from replay_helpers import table_rows

    tables = dict(tables)
    tables["late_events"] = table_rows(spark, lakehouse, "late_events", ("raw", "source_file", *volatile))
    tables.pop("replay_log")  # names the archive's files
    return tables


def replay(spark, tmp_path: Path, name: str, archive: Path, batch_size: int,
           source: dict[str, Any]) -> dict[str, list[tuple]]:
    out = tmp_path / f"{name}-{batch_size}"
    config = write_pipeline(
        tmp_path / f"{name}-{batch_size}.yaml", archive, out,
        source={"path": str(archive), **source},
        batch={"max_records": batch_size, "pass_max_records": 2 * batch_size},
    )
    result = cli("run", str(config))
    assert result.returncode == 0, result.stderr
    # A CSV record's line is one more than its JSON twin's (the header is line 1): the reader test
    # checks that shift; here the line is left out for every shape alike.
    return comparable(snapshot(spark, out), spark, out, ("line",))


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    return write_archive(tmp_path_factory.mktemp("flat") / "archive", records=160, files=2)


@pytest.fixture(scope="module")
def flat_replays(spark, events, tmp_path_factory) -> dict[int, dict[str, list[tuple]]]:
    tmp = tmp_path_factory.mktemp("flat-out")
    return {size: replay(spark, tmp, "flat", events, size, FLAT_SOURCE) for size in BATCH_SIZES}


@pytest.mark.slow  # two full replays a case (~1 min on 2 cores)
@pytest.mark.parametrize("shape", ["nested_jsonl", "nested_parquet", "zstd_jsonl", "csv"])
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_a_shape_replays_like_flat_json_lines(spark, events, flat_replays, tmp_path, shape, batch_size):
    if shape == "nested_jsonl":
        archive, source = write_nested_jsonl(events, tmp_path / "a"), {"format": "jsonl", **NESTED_SOURCE}
    elif shape == "nested_parquet":
        archive, source = write_nested_parquet(events, tmp_path / "a"), {"format": "parquet", **NESTED_SOURCE}
    elif shape == "csv":
        archive, source = write_csv(events, tmp_path / "a"), {**FLAT_SOURCE, "format": "csv"}
    else:
        archive, source = write_zstd_jsonl(events, tmp_path / "a"), FLAT_SOURCE
    got = replay(spark, tmp_path, shape, archive, batch_size, source)
    assert got["window_results"], "the case should fire something"
    assert got == flat_replays[batch_size]


# ---- nested paths and formatted times, record by record -------------------------------------
def test_nested_fields_and_formatted_times_are_typed_and_quarantined(spark, tmp_path):
    lines = [
        {"payload": {"ts": "14/11/2023 22:13:20.250", "user": "u1"}, "n": 1},
        {"payload": {"ts": "14/11/2023 22:13:20", "user": "u1"}},  # no millis: does not match
        {"payload": {"user": "u1"}},  # no time
        {"payload": "not an object", "n": 2},
        {"payload": {"ts": "01/01/1970 00:00:00.001", "user": {"id": 7}}},
        {"payload": {"ts": " 31/12/1969 23:59:59.999 ", "user": None}},
    ]
    path = tmp_path / "nested.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    config = parse_config({
        "name": "nested", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(path), "event_time": "payload.ts", "event_time_format": TIME_FORMAT,
                   "fields": {"user": "payload.user"}},
        "aggregates": {"total": "sum(n)"}, "output": {"path": str(tmp_path / "out")},
    })
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")  # must not matter
    try:
        got = {r["_line"]: (r["_event_time"], r["user"], r["n"]) for r in records.collect()}
        bad = {r["line"]: (r["reason"], r["detail"]) for r in quarantine.collect()}
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert got == {1: (1700000000250, "u1", 1.0), 5: (1, '{"id":7}', None)}
    assert bad[2] == ("invalid_timestamp",
                      f"payload.ts='14/11/2023 22:13:20' does not match event_time_format '{TIME_FORMAT}'")
    assert bad[3][0] == bad[4][0] == bad[6][0] == "missing_field"
    assert "payload.ts" in bad[3][1] and bad[6][1] == "missing or null: user"
    assert set(got) | set(bad) == set(range(1, len(lines) + 1))


def record_fields(spark, archive: Path, source: dict[str, Any]) -> list[tuple]:
    """The typed records of an archive, as the engine gets them (minus the file and raw text)."""
    config = parse_config({
        "name": "shapes", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(archive), **source},
        "aggregates": {"total": "sum(value)", "ids": "collect_list(event_id)"},
        "output": {"path": str(archive.parent / "out")},
    })
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    assert quarantine.count() == 0
    columns = ["_file_index", "_line", "_event_time", "_ingest_time", "_partition", "_offset", "_id",
               "user", "value", "event_id"]
    return sorted(tuple(r) for r in records.select(*columns).collect())


def test_nested_shapes_read_the_same_records_as_flat_json_lines(spark, events, tmp_path):
    flat = record_fields(spark, events, FLAT_SOURCE)
    assert len(flat) == 160
    assert record_fields(spark, write_nested_jsonl(events, tmp_path / "j"), NESTED_SOURCE) == flat
    parquet = write_nested_parquet(events, tmp_path / "p")
    assert record_fields(spark, parquet, {"format": "parquet", **NESTED_SOURCE}) == flat
    assert record_fields(spark, write_zstd_jsonl(events, tmp_path / "z"), FLAT_SOURCE) == flat
    csv = record_fields(spark, write_csv(events, tmp_path / "c"), {**FLAT_SOURCE, "format": "csv"})
    assert [(r[0], r[1] - 1, *r[2:]) for r in csv] == flat  # line 1 of a CSV file is its header


def test_damaged_zstd_files_keep_their_complete_lines(spark, tmp_path):
    import zstandard

    archive = tmp_path / "damaged"
    archive.mkdir()
    lines = [json.dumps({"ts": 1000 + i, "user": "u"}) for i in range(50)]
    packed = zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode())
    (archive / "cut.jsonl.zst").write_bytes(packed[: len(packed) - 8])
    (archive / "corrupt.jsonl.zst").write_bytes(packed + b"not a zstd frame")
    (archive / "plain.json.zst").write_bytes(zstandard.ZstdCompressor().compress(b'{"ts":1,"user":"v"}'))
    config = parse_config({
        "name": "zstd", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(archive), "event_time": "ts"}, "aggregates": {"n": "count(*)"},
        "output": {"path": str(tmp_path / "out")},
    })
    files = list_archive(spark, config.source)
    names = [f.path.rsplit("/", 1)[-1] for f in files]
    assert names == ["corrupt.jsonl.zst", "cut.jsonl.zst", "plain.json.zst"]
    records, quarantine = read_archive(spark, config, files)
    got: dict[str, list[int]] = {}
    for r in records.collect():
        got.setdefault(r["_file"].rsplit("/", 1)[-1], []).append(r["_line"])
    bad = {r["source_file"].rsplit("/", 1)[-1]: (r["line"], r["reason"]) for r in quarantine.collect()}
    assert sorted(got["corrupt.jsonl.zst"]) == list(range(1, 51))
    assert bad["corrupt.jsonl.zst"] == (51, "unreadable_file")
    assert got["plain.json.zst"] == [1]
    # The cut keeps every complete line zstd could decode before it, and one row for the rest.
    cut = sorted(got.get("cut.jsonl.zst", []))
    assert cut == list(range(1, len(cut) + 1)) and bad["cut.jsonl.zst"] == (len(cut) + 1, "truncated_zstd")


def test_csv_rows_are_typed_and_quarantined_line_by_line(spark, tmp_path):
    import gzip

    archive = tmp_path / "csv"
    archive.mkdir()
    (archive / "a.csv").write_text(
        "ts,user,n,payload\r\n"               # 1: the header
        "1000,u1,2,\n"                         # 2: a record (empty payload: NULL)
        "\n"                                   # 3: blank, skipped
        '2000,"u,2",x,"{""k"":""v""}"\n'       # 4: invalid_type (n)
        "3000,u3\n"                            # 5: too few values
        '4000,"u4,3\n'                         # 6: unterminated quote
        ",u5,1,\n"                             # 7: no time
        "2023-11-14T22:13:20Z,u6,,{}\n"        # 8: a record
    )
    (archive / "b.csv.gz").write_bytes(gzip.compress(b"user,ts\nu7,5\n"))
    config = parse_config({
        "name": "csv", "key": ["user"], "window": {"type": "tumbling", "size": "1m"},
        "source": {"path": str(archive), "format": "csv", "event_time": "ts",
                   "types": {"n": "long"}, "fields": {"k": "payload.k"}},
        "aggregates": {"total": "sum(n)", "ks": "collect_list(k)"},
        "output": {"path": str(tmp_path / "out")},
    })
    files = list_archive(spark, config.source)
    records, quarantine = read_archive(spark, config, files)
    got = {(r["_file"].rsplit("/", 1)[-1], r["_line"]): (r["_event_time"], r["user"], r["n"], r["k"])
           for r in records.collect()}
    bad = {r["line"]: (r["reason"], r["raw"]) for r in quarantine.collect()}
    assert got == {
        ("a.csv", 2): (1000, "u1", 2, None), ("a.csv", 8): (1700000000000, "u6", None, None),
        ("b.csv.gz", 2): (5, "u7", None, None),
    }
    assert bad == {4: ("invalid_type", '2000,"u,2",x,"{""k"":""v""}"'), 5: ("malformed_csv", "3000,u3"),
                   6: ("malformed_csv", '4000,"u4,3'), 7: ("missing_field", ",u5,1,")}
    # The ingest re-reads only the lines it found bad; a bound on the records needs no parsing.
    checked = check_archive(spark, config, files).frame
    wanted = checked.where(checked["_outcome"].isNotNull()).select("_file_index", "_line").toArrow()
    again = rejected(check_archive(spark, config, files, only=wanted).frame)
    assert sorted(map(repr, again.collect())) == sorted(map(repr, quarantine.collect()))
    assert 7 <= line_count(spark, config, files) <= 10
