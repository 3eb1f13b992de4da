"""The archive reader against real files: listing, JSON Lines (plain, gzip, damaged), Parquet.

Each archive is read once per module (collected under a non-UTC session time zone, so nothing
may depend on it) and the tests assert on the collected rows.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from spark_jobs.config import SourceConfig, parse_config
from spark_jobs.exceptions import ConfigError
from spark_jobs.execution.sources import (
    QUARANTINE_COLUMNS,
    QUARANTINE_REASONS,
    RECORD_COLUMNS,
    ArchiveFile,
    accepted,
    check_archive,
    line_count,
    list_archive,
    read_archive,
    rejected,
)

pytestmark = pytest.mark.spark

ODD_NAME = "odd name [1]+%41.jsonl"  # a space, glob brackets, a '+' and a literal '%41'

# The clean file: a byte-order mark, \r\n endings, a blank and a whitespace-only line, every
# accepted spelling of the fields, and no newline after the last line.
CLEAN = [
    '{"id":"e1","user":"u1","region":"eu","ts":1700000000000,"ingest":1700000000100,"part":0,'
    '"off":0,"amount":1.5,"n":3,"flag":true,"page":"/a"}',
    "",
    '{"id":"e2","user":"u2","region":"us","ts":"2023-11-14T22:13:20.250Z","ingest":"1700000000200",'
    '"part":"1","off":1,"amount":"2","n":"4","flag":false,"page":7}',
    "   \t",
    '{"id":"e3","user":"u1","region":"eu","ts":"2023-11-14T23:13:20+01:00","ingest":1700000000300,'
    '"part":0,"off":2}',
    '{"id":"e4","user":"u3","region":"eu","ts":-5,"ingest":1,"part":0,"off":3,"amount":null,"n":null,'
    '"flag":null,"page":null,"extra":{"x":[1,2]}}',
    '{"id":"e5","user":42,"region":"eu","ts":"2023-11-14T22:13Z","ingest":"2023-11-14T22:13:20.5Z",'
    '"part":0,"off":4,"amount":-0.5e1}',
]
# line -> (_event_time, _ingest_time, _partition, _offset, _id, user, region, amount, n, flag, page)
CLEAN_RECORDS = {
    1: (1700000000000, 1700000000100, "0", 0, "e1", "u1", "eu", 1.5, 3, True, "/a"),
    3: (1700000000250, 1700000000200, "1", 1, "e2", "u2", "us", 2.0, 4, False, "7"),
    5: (1700000000000, 1700000000300, "0", 2, "e3", "u1", "eu", None, None, None, None),
    6: (-5, 1, "0", 3, "e4", "u3", "eu", None, None, None, None),
    7: (1699999980000, 1700000000500, "0", 4, "e5", "42", "eu", -5.0, None, None, None),
}


def good(ident: str, **changes: object) -> str:
    record = {"id": ident, "user": "u9", "region": "eu", "ts": 1700000000000, "ingest": 1700000000000,
              "part": 0, "off": 7, "amount": 1.0, "n": 1, "flag": True, "page": "/p"}
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not _DROP})


_DROP = object()

# line -> (reason, text the detail must contain); every quarantine reason a line can have.
DIRTY = [
    ('{"id":"d1","user":"u1"', "malformed_json", "not one valid JSON value"),
    ("not json at all", "malformed_json", ""),
    (good("d3") + good("d3b"), "malformed_json", ""),  # two records glued together
    (good("d4") + " trailing", "malformed_json", ""),
    ("{'id':'d5'}", "malformed_json", ""),  # single quotes are not JSON
    ('{"id":"d6","amount":NaN}', "malformed_json", ""),
    ("[1, 2]", "not_an_object", "an array"),
    ('"just a string"', "not_an_object", "a string"),
    ("42", "not_an_object", "a number"),
    ("null", "not_an_object", "null"),
    (good("d11", ts=_DROP), "missing_field", "ts"),
    (good("d12", user=None), "missing_field", "user"),
    (good("d13", off=_DROP, id=_DROP), "missing_field", "off, id"),
    (good("d14", ts="2023-11-14T22:13:20"), "invalid_timestamp", "ts='2023-11-14T22:13:20'"),
    (good("d15", ts="yesterday"), "invalid_timestamp", "yesterday"),
    (good("d16", ts=1.7e12), "invalid_timestamp", "ts="),
    (good("d17", ts="2023-02-30T00:00:00Z"), "invalid_timestamp", "2023-02-30"),
    (good("d18", ts="2023-11-14T22:13:20+0100"), "invalid_timestamp", "+0100"),
    (good("d19", amount="12,50"), "invalid_type", "amount='12,50' is not a finite double"),
    (good("d20", n=1.5), "invalid_type", "n='1.5' is not a long"),
    (good("d21", flag="yes"), "invalid_type", "flag='yes' is not a boolean"),
    (good("d22", off="x"), "invalid_type", "off='x'"),
    (good("d23", ingest="soon"), "invalid_type", "ingest='soon'"),
    (good("d24", amount="NaN"), "invalid_type", "amount"),
    (good("d25", n="9223372036854775808"), "invalid_type", "n="),
    # Times whose (1-minute) windows would leave the years 0001 to 9999 (Python's datetimes).
    (good("d26", ts=2**63 - 1), "invalid_timestamp", "outside the times this pipeline takes, "
     "0001-01-02 00:00:59.999 to 9999-12-31 23:58:59.999 UTC (its windows must fit the years 0001 to 9999)"),
    (good("d27", ts=-(2**63)), "invalid_timestamp", "outside the times"),
    (good("d28", ts=253402300740000), "invalid_timestamp", "outside the times"),
    (good("d29", ingest=-62135510400001), "invalid_type", "ingest='-62135510400001' is outside"),
]
DIRTY_GOOD = [good("g1"), good("g2", ts="1700000000000", region={"nested": [1]}),
              good("g3", ts=253402300739999, ingest="0001-01-02T00:00:00Z")]  # the ranges' ends


def write_gzip_cut(path: Path, complete: bytes, partial: bytes, rest: bytes) -> None:
    """A gzip file cut right after ``complete + partial``: a sync flush makes exactly that prefix
    decodable from the bytes kept, as when an upload stops after a flushed block."""
    compressor = zlib.compressobj(wbits=31)
    head = compressor.compress(complete + partial) + compressor.flush(zlib.Z_SYNC_FLUSH)
    compressor.compress(rest)
    path.write_bytes(head)


def random_dirty_lines(count: int, seed: int) -> list[str]:
    """Seeded mix of good lines and every kind of damage, blank lines included."""
    rng = random.Random(seed)
    lines = []
    for number in range(count):
        line = good(f"r{number}", user=f"u{rng.randrange(5)}", off=number)
        roll = rng.random()
        if roll < 0.05:
            line = line[: rng.randrange(1, len(line) - 1)]
        elif roll < 0.08:
            line = ""
        elif roll < 0.2:
            line = rng.choice(DIRTY)[0]
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive")
    (root / "2024" / "deep").mkdir(parents=True)
    clean = b"\xef\xbb\xbf" + "\r\n".join(CLEAN).encode()
    (root / "2024" / "a.jsonl").write_bytes(clean)
    (root / "2024" / "b.jsonl.gz").write_bytes(gzip.compress(clean))
    (root / "2024" / "deep" / "c.json").write_text(good("c1") + "\n" + good("c2") + "\n")
    dirty = "\n".join(line for line, _, _ in DIRTY) + "\n" + "\n".join(DIRTY_GOOD) + "\n\n"
    dirty_bytes = dirty.encode() + b'{"id":"bad-utf8","user":"\xff\xfe"}\n'
    (root / "dirty.jsonl").write_bytes(dirty_bytes)
    (root / "empty.jsonl").write_bytes(b"")
    (root / "notgzip.jsonl.gz").write_text(good("plain") + "\n")
    (root / ODD_NAME).write_text(good("odd") + "\n")
    lines = [good(f"t{i}") for i in range(5)]
    write_gzip_cut(
        root / "truncated.jsonl.gz",
        complete=("\n".join(lines[:3]) + "\n").encode(),
        partial=lines[3][:20].encode(),
        rest=(lines[3][20:] + "\n" + lines[4] + "\n").encode(),
    )
    # Several gzip members in one file, as `cat a.gz b.gz` makes.
    randoms = random_dirty_lines(1500, seed=7)
    (root / "random.jsonl.gz").write_bytes(
        gzip.compress("\n".join(randoms[:700]).encode() + b"\n")
        + gzip.compress("\n".join(randoms[700:]).encode() + b"\n")
    )
    # Not data: markers, checksums, temporary output, hidden directories, other formats.
    (root / "_SUCCESS").write_text("")
    (root / ".dirty.jsonl.crc").write_text("crc")
    (root / "_temporary" / "0").mkdir(parents=True)
    (root / "_temporary" / "0" / "part-0.jsonl").write_text(good("tmp") + "\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.jsonl").write_text(good("hidden") + "\n")
    (root / "notes.txt").write_text("not data")
    (root / "2024" / "table.parquet").write_bytes(b"PAR1")
    return root


def pipeline(path: Path, fmt: str = "jsonl"):
    return parse_config({
        "name": "sources_test",
        "source": {"path": str(path), "format": fmt, "event_time": "ts", "ingest_time": "ingest",
                   "partition": "part", "offset": "off", "id": "id",
                   "types": {"n": "long", "flag": "boolean"}},
        "key": ["user", "region"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"total": "sum(amount)", "most": "max(n)", "flags": "count_distinct(flag)",
                       "pages": "count_distinct(page)"},
        "output": {"path": str(path.parent / "out")},
    })


def collect_in_other_zone(spark, frames):
    """Collect under a session time zone far from UTC: event times must not depend on it."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        return [[row.asDict() for row in frame.collect()] for frame in frames]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


@pytest.fixture(scope="module")
def jsonl(spark, archive):
    config = pipeline(archive)
    files = list_archive(spark, config.source)
    records, quarantine = read_archive(spark, config, files, first_file_index=5)
    rows, bad = collect_in_other_zone(spark, [records, quarantine])
    return {"config": config, "files": files, "records": records, "quarantine": quarantine,
            "rows": rows, "bad": bad}


def uri(path: Path) -> str:
    return "file:" + str(path)


def by_file(rows: list[dict], path: Path) -> dict[int, dict]:
    """Records or quarantine rows of one file, by line number."""
    file, line = ("_file", "_line") if rows and "_file" in rows[0] else ("source_file", "line")
    return {row[line]: row for row in rows if row[file] == uri(path)}


# ---- listing -------------------------------------------------------------------------------------
def test_listing_is_recursive_sorted_and_skips_hidden_and_foreign_files(spark, archive, jsonl):
    names = [f.path.removeprefix(uri(archive) + "/") for f in jsonl["files"]]
    assert names == [
        "2024/a.jsonl", "2024/b.jsonl.gz", "2024/deep/c.json", "dirty.jsonl", "empty.jsonl",
        "notgzip.jsonl.gz", ODD_NAME, "random.jsonl.gz", "truncated.jsonl.gz",
    ]
    for entry in jsonl["files"]:
        stat = os.stat(entry.path.removeprefix("file:"))
        assert (entry.size, entry.modified_ms) == (stat.st_size, stat.st_mtime_ns // 1_000_000)
    parquet = list_archive(spark, pipeline(archive, "parquet").source)
    assert [f.path for f in parquet] == [uri(archive / "2024" / "table.parquet")]


def test_listing_a_single_file_and_bad_paths(spark, archive):
    single = list_archive(spark, SourceConfig(path=str(archive / "dirty.jsonl"), format="jsonl",
                                              event_time="ts"))
    assert [f.path for f in single] == [uri(archive / "dirty.jsonl")]
    with pytest.raises(ConfigError, match="no such file"):
        list_archive(spark, SourceConfig(path=str(archive / "missing"), format="jsonl", event_time="ts"))
    with pytest.raises(ConfigError, match="not a jsonl file"):
        list_archive(spark, SourceConfig(path=str(archive / "notes.txt"), format="jsonl", event_time="ts"))


# ---- JSON Lines ----------------------------------------------------------------------------------
def test_record_schema_and_types(jsonl):
    schema = [(f.name, f.dataType.simpleString()) for f in jsonl["records"].schema.fields]
    assert schema == [
        ("_file", "string"), ("_file_index", "int"), ("_line", "bigint"), ("_event_time", "bigint"),
        ("_ingest_time", "bigint"), ("_partition", "string"), ("_offset", "bigint"), ("_id", "string"),
        ("_raw", "string"), ("user", "string"), ("region", "string"), ("amount", "double"),
        ("n", "bigint"), ("flag", "boolean"), ("page", "string"),
    ]
    assert tuple(c for c, _ in schema[: len(RECORD_COLUMNS)]) == RECORD_COLUMNS
    assert tuple(jsonl["quarantine"].columns) == QUARANTINE_COLUMNS



def optimized_plan(frame) -> str:
    """The optimized logical plan's text, from ``explain`` (in-process and over Spark Connect)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        frame.explain(extended=True)
    text = printed.getvalue()
    return text.split("== Optimized Logical Plan ==", 1)[1].split("== Physical Plan ==", 1)[0]


def test_each_field_is_typed_once_per_record(jsonl):
    """The typing (patterns, casts) is one projection that the checks and the output read:
    inlined, Spark runs it in the accepted records' filter and again in their projection."""
    plan = optimized_plan(jsonl["records"])
    reads = 2  # the plain files and the gzip ones, a union of two reads
    assert plan.count("Union ") == reads - 1
    # Two time fields (event and ingest time), each tried as epoch ms, then as ISO-8601.
    assert plan.count("RLIKE(") == 4 * reads
    # One double column (amount): parsed, refused when NaN, refused when infinite.
    assert plan.count(" as double)") == 3 * reads

@pytest.mark.parametrize("name", ["2024/a.jsonl", "2024/b.jsonl.gz"])
def test_plain_and_gzip_give_the_same_typed_records(jsonl, archive, name):
    rows = by_file(jsonl["rows"], archive / name)
    assert sorted(rows) == sorted(CLEAN_RECORDS)  # physical line numbers; blank lines skipped
    columns = ["_event_time", "_ingest_time", "_partition", "_offset", "_id", "user", "region",
               "amount", "n", "flag", "page"]
    for line, expected in CLEAN_RECORDS.items():
        row = rows[line]
        assert tuple(row[c] for c in columns) == expected, line
        assert row["_raw"] == CLEAN[line - 1]  # without \r\n or the byte-order mark
    assert not by_file(jsonl["bad"], archive / name)


def test_file_index_follows_the_list_position(jsonl):
    index = {f.path: 5 + position for position, f in enumerate(jsonl["files"])}
    assert {(r["_file"], r["_file_index"]) for r in jsonl["rows"]} <= set(index.items())
    assert {r["_file"] for r in jsonl["rows"]} == set(index) - {
        f.path for f in jsonl["files"] if f.path.endswith(("empty.jsonl", "notgzip.jsonl.gz"))
    }


def test_file_index_of_a_later_read_and_odd_file_names(spark, jsonl, archive):
    files = [f for f in jsonl["files"] if f.path.endswith((ODD_NAME, "c.json"))]
    records, _ = read_archive(spark, jsonl["config"], files, first_file_index=40)
    got = sorted((r["_file"], r["_file_index"], r["_line"], r["_id"]) for r in records.collect())
    assert got == [
        (uri(archive / "2024" / "deep" / "c.json"), 40, 1, "c1"),
        (uri(archive / "2024" / "deep" / "c.json"), 40, 2, "c2"),
        (uri(archive / ODD_NAME), 41, 1, "odd"),
    ]


def test_each_quarantine_reason(jsonl, archive):
    bad = by_file(jsonl["bad"], archive / "dirty.jsonl")
    for line, (text, reason, detail) in enumerate(DIRTY, 1):
        assert (bad[line]["reason"], bad[line]["raw"]) == (reason, text), line
        assert detail in bad[line]["detail"], (line, bad[line]["detail"])
    utf8 = bad[len(DIRTY) + len(DIRTY_GOOD) + 2]
    assert utf8["reason"] == "malformed_json" and "UTF-8" in utf8["detail"]
    assert set(bad) == {*range(1, len(DIRTY) + 1), utf8["line"]}
    records = by_file(jsonl["rows"], archive / "dirty.jsonl")
    first_good = len(DIRTY) + 1
    assert {line: r["_id"] for line, r in records.items()} == {
        first_good: "g1", first_good + 1: "g2", first_good + 2: "g3"}
    ends = records[first_good + 2]
    assert (ends["_event_time"], ends["_ingest_time"]) == (253402300739999, -62135510400000)
    assert records[first_good + 1]["region"] == '{"nested":[1]}'  # a key is any value's JSON text
    # The archive has every reason but those of other formats (tests/spark/test_source_shapes.py).
    others = {"malformed_csv", "truncated_zstd", "invalid_object_name"}
    assert {r["reason"] for r in jsonl["bad"]} == set(QUARANTINE_REASONS) - others


def test_truncated_gzip_keeps_its_complete_lines(jsonl, archive):
    path = archive / "truncated.jsonl.gz"
    assert [r["_id"] for r in sorted(by_file(jsonl["rows"], path).values(),
                                     key=lambda r: r["_line"])] == ["t0", "t1", "t2"]
    (tail,) = by_file(jsonl["bad"], path).values()
    assert (tail["line"], tail["reason"], tail["raw"]) == (4, "truncated_gzip", good("t3")[:20])


def test_a_file_that_is_not_gzip_is_unreadable(jsonl, archive):
    (row,) = by_file(jsonl["bad"], archive / "notgzip.jsonl.gz").values()
    assert (row["line"], row["reason"], row["raw"]) == (1, "unreadable_file", "")
    assert "corrupt gzip data" in row["detail"]


def expected_lines(path: Path) -> set[int]:
    """The numbers of the lines the reader must account for, decoded independently of it."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        decoder, text = zlib.decompressobj(wbits=31), b""
        try:
            while data:
                text += decoder.decompress(data)
                data = decoder.unused_data if decoder.eof else b""
                decoder = zlib.decompressobj(wbits=31) if data else decoder
        except zlib.error:
            return {text.count(b"\n") + 1}  # only the unreadable-file row
        data = text
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return {number for number, line in enumerate(lines, 1) if line.strip(b" \t\r")}


def test_every_line_lands_in_exactly_one_output(jsonl, archive):
    expected = {(f.path, line) for f in jsonl["files"]
                for line in expected_lines(Path(f.path.removeprefix("file:")))}
    seen = [(r["_file"], r["_line"]) for r in jsonl["rows"]]
    seen += [(r["source_file"], r["line"]) for r in jsonl["bad"]]
    assert len(seen) == len(set(seen)) and set(seen) == expected
    assert jsonl["records"].count() + jsonl["quarantine"].count() == len(expected)
    randoms = by_file(jsonl["bad"], archive / "random.jsonl.gz")
    assert len(randoms) > 100 and {r["reason"] for r in randoms.values()} <= set(QUARANTINE_REASONS)


def test_reading_only_the_quarantined_lines_gives_the_same_quarantine(spark, jsonl):
    """The ingest re-reads just the lines it found bad: plain files skip the others in the JVM
    reader, gzip files by a semi-join; the rows must be those of a full read."""
    checked = check_archive(spark, jsonl["config"], jsonl["files"], 5).frame
    bad = checked.where(checked["_outcome"].isNotNull()).select("_file_index", "_line").toArrow()
    again = check_archive(spark, jsonl["config"], jsonl["files"], 5, only=bad).frame
    assert accepted(again, jsonl["config"]).count() == 0
    assert sorted(map(repr, rejected(again).collect())) == sorted(map(repr, jsonl["quarantine"].collect()))


def test_line_count_bounds_the_records(spark, jsonl, archive):
    counted = line_count(spark, jsonl["config"], jsonl["files"])
    expected = sum(len(expected_lines(Path(f.path.removeprefix("file:")))) for f in jsonl["files"])
    assert expected <= counted <= expected + 40  # blank lines and trailing lines are counted too


def test_long_lines_and_line_breaks_across_read_buffers(spark, tmp_path):
    """The JVM reader reads 1 MB at a time: a 3 MB line, and \r\n endings falling anywhere
    across buffer boundaries, read as the gzip path (the Python splitter) reads them."""
    lines = [good(f"b{i}", region="r" * (i * 997 % 4000)) for i in range(2000)]
    lines[700] = good("huge", region="x" * 3_000_000)
    data = ("\r\n".join(lines) + "\r\n").encode()
    (tmp_path / "big.jsonl").write_bytes(data)
    (tmp_path / "big.jsonl.gz").write_bytes(gzip.compress(data))
    config = pipeline(tmp_path)
    files = list_archive(spark, config.source)
    records, quarantine = read_archive(spark, config, files)
    assert quarantine.count() == 0
    rows = records.select("_file_index", "_line", "_raw", "_id", "region").collect()
    by_source: dict[int, dict] = {0: {}, 1: {}}
    for r in rows:
        by_source[r["_file_index"]][r["_line"]] = (r["_raw"], r["_id"], r["region"])
    assert by_source[0] == by_source[1]
    assert [by_source[0][n][0] for n in range(1, 2001)] == lines
    assert by_source[0][701][1:] == ("huge", "x" * 3_000_000)


def test_field_texts_are_what_from_json_gives(spark, tmp_path):
    """The reader takes a string's or an integer's text straight from the line's bytes when it
    can: escapes, non-ASCII text, odd spacing, -0 and big integers must still read as Spark's
    ``from_json`` reads them, in plain and gzip files alike."""
    users = ['a\\"b', "tab\\tx", "\\u00e9\\u20ac", "\u00e9\u20ac\U0001f600", "", "back\\\\slash",
             "\\/", "q\\u0022", "x" * 300]
    lines = [good(f"f{i}").replace('"user": "u9"', f'"user": "{user}"') for i, user in enumerate(users)]
    parts = ["-0", "-12", "123456789012345678901234567890", "0", "7", "1e3", "-0.0", "true", '"3"']
    lines += [good(f"p{i}").replace('"part": 0', f'"part" :  {part} ') for i, part in enumerate(parts)]
    lines.append('{ "ts" : 1700000000000 ,"ingest":1700000000000, "part":0,"off":7,'
                 '"id" :"sp","user":"s","region":"r"}')
    data = ("\n".join(lines) + "\n").encode()
    (tmp_path / "texts.jsonl").write_bytes(data)
    (tmp_path / "texts.jsonl.gz").write_bytes(gzip.compress(data))
    config = pipeline(tmp_path)
    records, quarantine = read_archive(spark, config, list_archive(spark, config.source))
    assert quarantine.count() == 0
    expected = (
        records.select("_file_index", "_line", "_raw", "_id", "user", "_partition")
        .withColumn("j", F.from_json("_raw", "id string, user string, part string"))
        .collect()
    )
    assert len(expected) == 2 * len(lines)
    for row in expected:
        assert (row["_id"], row["user"], row["_partition"]) == (row["j"]["id"], row["j"]["user"],
                                                                row["j"]["part"]), row["_raw"]
    users_read = {r["_id"]: r["user"] for r in expected if r["_file_index"] == 0}
    assert [users_read[f"f{i}"] for i in range(len(users))] == [json.loads(f'"{u}"') for u in users]


def test_parquet_only_reads_the_lines_asked_for(spark, parquet):
    config = pipeline(parquet["root"], "parquet")
    checked = check_archive(spark, config, parquet["files"], 2).frame
    bad = checked.where(checked["_outcome"].isNotNull()).select("_file_index", "_line").toArrow()
    again = check_archive(spark, config, parquet["files"], 2, only=bad).frame
    assert sorted(map(repr, rejected(again).collect())) == sorted(map(repr, rejected(checked).collect()))
    assert accepted(again, config).count() == 0
    assert line_count(spark, config, parquet["files"]) >= accepted(checked, config).count()


def test_no_files_give_empty_frames_with_the_schema(spark, jsonl):
    records, quarantine = read_archive(spark, jsonl["config"], [])
    assert records.schema == jsonl["records"].schema
    assert quarantine.columns == list(QUARANTINE_COLUMNS)


# ---- Parquet -------------------------------------------------------------------------------------
PARQUET_NAME = "x y+[1].parquet"


@pytest.fixture(scope="module")
def parquet(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("parquet")
    utc = pa.timestamp("ms", tz="UTC")
    first = pa.table({
        "id": ["p1", "p2", "p3", "p4", "p5"],
        "user": ["u1", None, "u2", "u3", "u1"],
        "region": ["eu"] * 5,
        "ts": pa.array([1700000000000, 1700000000001, None, -1, 1700000000500], utc),
        # naive timestamps (Spark: TIMESTAMP_NTZ) are read as UTC
        "ingest": pa.array([1700000000000000, 1, 2, 3, 4], pa.timestamp("us")),
        "part": pa.array([0, 0, 0, 1, 1], pa.int32()),
        "off": [0, 1, 2, 3, 4],
        "amount": [1.5, None, 2.0, 3.0, 4.0],
        "n": [1, 2, 3, 4, 5],
        "flag": [True, False, None, True, True],
    })
    pq.write_table(first, root / "a.parquet", row_group_size=2)  # row numbers span row groups
    second = first.slice(0, 2).append_column("page", pa.array(["/x", "/y"]))  # a newer column
    pq.write_table(second.set_column(1, "user", pa.array(["v1", "v2"])), root / PARQUET_NAME)
    (root / "garbage.parquet").write_bytes(b"this is not parquet")
    (root / "half.parquet").write_bytes((root / "a.parquet").read_bytes()[:300])
    data = bytearray((root / "a.parquet").read_bytes())
    footer_length = int.from_bytes(data[-8:-4], "little")
    for at in range(len(data) - 8 - footer_length, len(data) - 8 - footer_length + 20):
        data[at] ^= 0x5A
    (root / "footer.parquet").write_bytes(bytes(data))  # magic numbers fine, footer garbled
    config = pipeline(root, "parquet")
    files = list_archive(spark, config.source)
    records, quarantine = read_archive(spark, config, files, first_file_index=2)
    rows, bad = collect_in_other_zone(spark, [records, quarantine])
    return {"root": root, "files": files, "records": records, "rows": rows, "bad": bad}


def test_parquet_rows_are_typed_and_numbered(parquet):
    root = parquet["root"]
    assert [f.path for f in parquet["files"]] == [
        uri(root / name)
        for name in ("a.parquet", "footer.parquet", "garbage.parquet", "half.parquet", PARQUET_NAME)
    ]
    got = {(r["_file"], r["_line"]): r for r in parquet["rows"]}
    assert sorted(got) == [(uri(root / "a.parquet"), line) for line in (1, 4, 5)] + [
        (uri(root / PARQUET_NAME), 1), (uri(root / PARQUET_NAME), 2)
    ]
    row = got[(uri(root / "a.parquet"), 4)]
    assert (row["_event_time"], row["_ingest_time"], row["_partition"], row["_offset"]) == (-1, 0, "1", 3)
    assert (row["_file_index"], row["_id"], row["user"], row["amount"], row["n"], row["flag"]) == (
        2, "p4", "u3", 3.0, 4, True
    )
    first = got[(uri(root / "a.parquet"), 1)]
    assert (first["_event_time"], first["_ingest_time"], first["page"]) == (
        1700000000000, 1700000000000, None
    )
    assert json.loads(first["_raw"])["id"] == "p1"
    newer = got[(uri(root / PARQUET_NAME), 2)]
    assert (newer["_file_index"], newer["user"], newer["page"]) == (6, "v2", "/y")


def test_parquet_quarantine_and_unreadable_files(parquet):
    root = parquet["root"]
    bad = {(r["source_file"], r["line"]): r for r in parquet["bad"]}
    assert {k: (r["reason"], r["detail"]) for k, r in bad.items() if r["line"] is not None} == {
        (uri(root / "a.parquet"), 2): ("missing_field", "missing or null: user"),
        (uri(root / "a.parquet"), 3): ("missing_field", "missing or null: ts"),
    }
    unreadable = {k[0]: r for k, r in bad.items() if r["line"] is None}
    broken = ("footer.parquet", "garbage.parquet", "half.parquet")
    assert set(unreadable) == {uri(root / name) for name in broken}
    assert all(r["reason"] == "unreadable_file" and r["detail"] for r in unreadable.values())
    assert json.loads(bad[(uri(root / "a.parquet"), 2)]["raw"])["id"] == "p2"


def test_parquet_files_whose_column_types_disagree_are_read_each_as_written(spark, tmp_path):
    """One file's event time a timestamp and another's epoch ms (a long): no one schema merges
    them, so each schema's files are read on their own, through the same checks."""
    as_timestamp = pa.table({"id": ["t1", "t2"], "user": ["u1", "u2"], "region": ["eu", "eu"],
                             "ts": pa.array([1700000000000, 253402300800000], pa.timestamp("ms", "UTC")),
                             "ingest": [1, 2], "part": [0, 0], "off": [0, 1]})
    as_long = as_timestamp.set_column(3, "ts", pa.array([1700000000007, None], pa.int64()))
    as_long = as_long.set_column(0, "id", pa.array(["l1", "l2"]))
    pq.write_table(as_timestamp, tmp_path / "a.parquet")
    pq.write_table(as_long, tmp_path / "b.parquet")
    config = pipeline(tmp_path, "parquet")
    files = list_archive(spark, config.source)
    checked = check_archive(spark, config, files, 0).frame
    records = {r["_id"]: r["_event_time"] for r in accepted(checked, config).collect()}
    assert records == {"t1": 1700000000000, "l1": 1700000000007}
    bad = {(r["source_file"][-9:], r["line"]): r["reason"] for r in rejected(checked).collect()}
    assert bad == {("a.parquet", 2): "invalid_timestamp", ("b.parquet", 2): "missing_field"}
    only = checked.where(checked["_outcome"].isNotNull()).select("_file_index", "_line").toArrow()
    again = check_archive(spark, config, files, 0, only=only).frame
    assert sorted(map(repr, rejected(again).collect())) == sorted(map(repr, rejected(checked).collect()))


def test_archive_file_is_a_value():
    assert ArchiveFile("file:/a", 1, 2) == ArchiveFile("file:/a", 1, 2)
