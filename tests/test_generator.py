"""The sample-data generator: determinism, the counts it reports, and the properties the replay
demos rely on (Zipf keys, ordered offsets and ingest times, bounded disorder, late records,
corrupt lines of every kind). No Spark: the archives are read back with json/gzip/pyarrow."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_jobs.exceptions import ConfigError
from spark_jobs.samples.generator import (
    DEMO_SPEC,
    PAGES,
    GenerateSummary,
    GeneratorSpec,
    generate_archive,
    truncate_gzip,
)

# Higher fractions than the defaults so that every property shows up in a small, fast archive.
SPEC = GeneratorSpec(
    events=40_000,
    seed=3,
    keys=500,
    late_fraction=0.05,
    duplicate_fraction=0.02,
    corrupt_fraction=0.01,
    events_per_second=50.0,
)


def read_lines(summary: GenerateSummary) -> list[tuple[str, str]]:
    """(file, line without newline) for every line of a JSON Lines archive, in listing order."""
    lines = []
    for name in summary.files:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(name, "rt", encoding="utf-8", newline="\n") as handle:
            lines.extend((name, line.removesuffix("\n")) for line in handle)
    return lines


def problem(line: str, spec: GeneratorSpec) -> str | None:
    """Why a line is unusable (in the quarantine table's words), or None for a valid record."""
    try:
        record = json.loads(line)
    except ValueError:
        return "malformed_json"
    if not isinstance(record, dict):
        return "not_an_object"
    fields = ["event_id", spec.key_field, "ts", "ingest_ts", "partition", "offset", "value"]
    fields += ["page"] if spec.kind == "clickstream" else ["temperature"]
    if any(name not in record for name in fields):
        return "missing_field"
    if spec.iso_timestamps:
        try:
            moment = dt.datetime.fromisoformat(record["ts"])
        except (TypeError, ValueError):
            return "invalid_timestamp"
        if moment.tzinfo is None:
            return "invalid_timestamp"
    elif type(record["ts"]) is not int:
        return "invalid_timestamp"
    numbers = {"value": float, "ingest_ts": int, "partition": int, "offset": int, "temperature": float}
    for name, kind in numbers.items():
        if name in record and type(record[name]) is not kind:
            return "invalid_type"
    return None


def epoch_ms(ts: Any) -> int:
    if isinstance(ts, int):
        return ts
    return round(dt.datetime.fromisoformat(ts).timestamp() * 1000)


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenerateSummary, list[tuple[str, str]]]:
    summary = generate_archive(tmp_path_factory.mktemp("clicks"), SPEC)
    return summary, read_lines(summary)


@pytest.fixture(scope="module")
def valid(archive: tuple[GenerateSummary, list[tuple[str, str]]]) -> list[dict[str, Any]]:
    return [json.loads(line) for _, line in archive[1] if problem(line, SPEC) is None]


def originals(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the re-emitted duplicates (first occurrence of each event_id)."""
    seen: set[str] = set()
    firsts = []
    for record in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        if record["event_id"] not in seen:
            seen.add(record["event_id"])
            firsts.append(record)
    return firsts


# --- determinism ----------------------------------------------------------------------------


@pytest.mark.parametrize("file_format", ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "csv", "avro"])
def test_same_seed_gives_identical_bytes_and_another_seed_differs(tmp_path: Path, file_format: str) -> None:
    spec = replace(SPEC, events=5_000, format=file_format, files_per_partition=2)
    first = generate_archive(tmp_path / "a", spec)
    second = generate_archive(tmp_path / "b", spec)
    other = generate_archive(tmp_path / "c", replace(spec, seed=spec.seed + 1))

    def contents(summary: GenerateSummary) -> list[tuple[str, bytes]]:
        return [(str(Path(f).relative_to(summary.path)), Path(f).read_bytes()) for f in summary.files]

    assert contents(first) == contents(second)
    assert [name for name, _ in contents(other)] == [name for name, _ in contents(first)]
    assert all(a != b for (_, a), (_, b) in zip(contents(first), contents(other), strict=True))


def test_clean_records_do_not_depend_on_the_format(tmp_path: Path) -> None:
    spec = replace(SPEC, events=5_000)
    plain = generate_archive(tmp_path / "plain", spec)
    zipped = generate_archive(tmp_path / "zipped", replace(spec, format="jsonl.gz"))
    table = generate_archive(tmp_path / "table", replace(spec, format="parquet"))
    assert [line for _, line in read_lines(plain)] == [line for _, line in read_lines(zipped)]
    rows = [row for f in table.files for row in pq.read_table(f).to_pylist()]
    records = [json.loads(line) for _, line in read_lines(plain) if problem(line, spec) is None]
    clean_rows = [row for row in rows if row["ts"] is not None and row["user_id"] is not None]
    assert clean_rows == records
    assert len(rows) == plain.events and len(rows) - len(clean_rows) == table.corrupt == plain.corrupt


# --- what the summary reports ---------------------------------------------------------------


def test_summary_counts_match_the_lines_written(archive, valid) -> None:
    summary, lines = archive
    assert summary.events == len(lines) == SPEC.events
    invalid = [line for _, line in lines if problem(line, SPEC) is not None]
    assert summary.corrupt == len(invalid) > 0
    repeats = sum(n - 1 for n in Counter(r["event_id"] for r in valid).values())
    assert summary.duplicates == repeats > 0
    bound = SPEC.max_out_of_orderness_ms
    late = [r for r in originals(valid) if r["ingest_ts"] - r["ts"] > bound]
    assert summary.late == len(late)
    # The counts are draws with the spec's probabilities.
    assert summary.corrupt == pytest.approx(SPEC.events * SPEC.corrupt_fraction, rel=0.25)
    assert summary.duplicates == pytest.approx(SPEC.events * SPEC.duplicate_fraction, rel=0.15)
    assert summary.late == pytest.approx(SPEC.events * SPEC.late_fraction, rel=0.15)


def test_layout_naming_and_file_rolling(tmp_path: Path) -> None:
    summary = generate_archive(tmp_path, replace(SPEC, events=9_000, files_per_partition=3))
    relative = [str(Path(f).relative_to(tmp_path)) for f in summary.files]
    assert relative == sorted(relative)  # partition numbers below 10 sort as numbers
    assert relative[:3] == [f"partition=0/part-0000{k}.jsonl" for k in range(3)]
    assert len(relative) == 3 * SPEC.partitions
    assert not list(tmp_path.rglob(".*"))  # no temporary file left behind
    automatic = generate_archive(tmp_path / "auto", replace(SPEC, events=9_000))
    assert len(automatic.files) == SPEC.partitions  # well under 500k lines per partition


def test_files_are_listed_by_partition_number(tmp_path: Path) -> None:
    summary = generate_archive(tmp_path, replace(SPEC, events=2_400, partitions=12))
    numbers = [int(Path(f).parent.name.removeprefix("partition=")) for f in summary.files]
    assert numbers == list(range(12))


def test_regenerating_replaces_the_previous_archive(tmp_path: Path) -> None:
    generate_archive(tmp_path, replace(SPEC, events=2_000, partitions=4))
    (tmp_path / "notes.txt").write_text("not the generator's")
    summary = generate_archive(tmp_path, replace(SPEC, events=2_000, partitions=2))
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted([str(Path(f).relative_to(tmp_path)) for f in summary.files] + ["notes.txt"])


def test_no_events_writes_no_files(tmp_path: Path) -> None:
    summary = generate_archive(tmp_path, replace(SPEC, events=0))
    assert summary.files == [] and summary.events == 0


# --- record properties ----------------------------------------------------------------------


def test_keys_follow_a_zipf_law(valid) -> None:
    counts = Counter(r["user_id"] for r in valid)
    frequencies = sorted(counts.values(), reverse=True)
    assert frequencies[0] > 20 * np.median(frequencies)
    assert len(counts) > SPEC.keys * 0.8  # the long tail is there too
    assert all(key.startswith("u") and key[1:].isdigit() for key in counts)


def test_offsets_count_up_per_partition_and_ingest_time_never_decreases(archive) -> None:
    summary, lines = archive
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for name, line in lines:
        partition = int(Path(name).parent.name.removeprefix("partition="))
        # Corrupt lines keep their place in the log; read offsets from those that parse.
        try:
            record = json.loads(line)
            offset, ingest = record["offset"], record["ingest_ts"]
        except (ValueError, TypeError, KeyError):
            continue
        assert record["partition"] == partition
        by_partition.setdefault(partition, []).append((offset, ingest))
    assert sorted(by_partition) == list(range(SPEC.partitions))
    for rows in by_partition.values():
        offsets = np.array([offset for offset, _ in rows])
        ingest = np.array([ingest for _, ingest in rows])
        assert offsets[0] < 5 and np.all(np.diff(offsets) > 0)
        assert np.all(np.diff(ingest) >= 0)


def test_every_offset_is_written_once(valid, archive) -> None:
    # Including corrupt lines: a line of partition p at file position i has offset i.
    per_partition = Counter(Path(name).parent.name for name, _ in archive[1])
    for record in valid:
        assert record["offset"] < per_partition[f"partition={record['partition']}"]
    offsets = Counter((r["partition"], r["offset"]) for r in valid)
    assert max(offsets.values()) == 1


def test_disorder_is_bounded_except_for_the_late_records(valid) -> None:
    bound = SPEC.max_out_of_orderness_ms
    delays = np.array([r["ingest_ts"] - r["ts"] for r in originals(valid)])
    ordinary = delays[delays <= bound]
    assert delays.min() >= 0
    assert np.median(ordinary) < bound / 2  # most records are only a little out of order
    late = delays[delays > bound]
    assert late.max() > bound + 60_000  # minutes late ...
    assert late.min() < bound + 30_000  # ... down to barely behind the watermark
    # Per partition, an ordinary record is never behind the largest event time seen so far
    # by more than the bound, so a watermark with that out-of-orderness finds it on time.
    for partition in range(SPEC.partitions):
        records = sorted((r for r in valid if r["partition"] == partition), key=lambda r: r["offset"])
        ts = np.array([r["ts"] for r in records])
        delay = np.array([r["ingest_ts"] - r["ts"] for r in records])
        seen_before = np.maximum.accumulate(np.concatenate([[ts[0]], ts[:-1]]))
        on_time = delay <= bound
        assert np.all(seen_before[on_time] - ts[on_time] <= bound)


def test_duplicates_repeat_a_recent_record_with_a_new_offset(valid) -> None:
    by_id: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(valid, key=lambda r: (r["partition"], r["offset"])):
        by_id.setdefault(record["event_id"], []).append(record)
    repeated = [copies for copies in by_id.values() if len(copies) > 1]
    assert repeated
    for first, *again in repeated:
        for copy in again:
            payload = {k: v for k, v in copy.items() if k not in ("offset", "ingest_ts")}
            assert payload == {k: v for k, v in first.items() if k not in ("offset", "ingest_ts")}
            assert 0 < copy["offset"] - first["offset"] <= 40  # "shortly after"
            assert copy["ingest_ts"] >= first["ingest_ts"]


def test_lines_are_spelled_as_json_dumps_would(archive) -> None:
    for _, line in archive[1]:
        if problem(line, SPEC) is None:
            assert json.dumps(json.loads(line)) == line


def test_clickstream_values(valid) -> None:
    pages = Counter(r["page"] for r in valid)
    assert set(pages) == set(PAGES) and pages.most_common(1)[0][0] == "/home"
    for record in valid:
        if record["page"] not in ("/cart", "/checkout"):
            assert record["value"] == 0.0
    purchases = [r["value"] for r in valid if r["page"] == "/checkout"]
    assert min(purchases) == 0.0 and np.median(purchases) > 10


def test_partition_skew_and_the_idle_partition(valid) -> None:
    per_partition = Counter(r["partition"] for r in valid)
    assert per_partition[0] > 1.3 * per_partition[1]
    span = SPEC.span_ms
    for partition in range(SPEC.partitions):
        ingest = np.sort([r["ingest_ts"] for r in valid if r["partition"] == partition])
        assert ingest[0] - SPEC.start_ms < 1_000 and abs(ingest[-1] - SPEC.start_ms - span) < 0.05 * span
        gaps = np.diff(ingest)
        longest_silence = gaps.max()
        if partition == SPEC.partitions - 1:  # silent in the middle: from 40 % to 50 % of the span
            assert longest_silence >= 0.09 * span
            silence_starts = ingest[gaps.argmax()] - SPEC.start_ms
            assert 0.39 * span < silence_starts <= 0.4 * span
        else:
            assert longest_silence < 0.01 * span


# --- corrupt lines --------------------------------------------------------------------------


def test_corrupt_lines_are_varied_and_really_unusable(archive) -> None:
    reasons = Counter(problem(line, SPEC) for _, line in archive[1])
    del reasons[None]
    assert set(reasons) == {
        "malformed_json", "not_an_object", "missing_field", "invalid_timestamp", "invalid_type",
    }
    lines = [line for _, line in archive[1]]
    assert any(line.startswith('{"event_id": "e') and problem(line, SPEC) == "malformed_json"
               for line in lines)  # truncated mid-record
    assert any(line.startswith("<html>") for line in lines)
    assert any('"ts": "yesterday"' in line for line in lines)
    assert any('"value": "abc"' in line for line in lines)
    assert all("\n" not in line and line for line in lines)


def test_corrupt_parquet_rows_lack_a_required_field(tmp_path: Path) -> None:
    spec = replace(SPEC, events=5_000, format="parquet", iso_timestamps=True)
    summary = generate_archive(tmp_path, spec)
    rows = [row for f in summary.files for row in pq.read_table(f).to_pylist()]
    bad = [r for r in rows if r["user_id"] is None or problem(json.dumps(r), spec) is not None]
    assert len(bad) == summary.corrupt > 0
    kinds = {"no ts" if r["ts"] is None else "no key" if r["user_id"] is None else "bad ts" for r in bad}
    assert kinds == {"no ts", "no key", "bad ts"}


# --- formats and options --------------------------------------------------------------------


def test_gzip_archive_reads_back_and_can_be_truncated(tmp_path: Path) -> None:
    summary = generate_archive(tmp_path, replace(SPEC, events=5_000, format="jsonl.gz"))
    assert all(f.endswith(".jsonl.gz") for f in summary.files)
    assert len(read_lines(summary)) == summary.events
    target = summary.files[0]
    size = Path(target).stat().st_size
    kept = truncate_gzip(target, 0.5)
    assert kept == size // 2 == Path(target).stat().st_size
    with pytest.raises(EOFError), gzip.open(target, "rb") as handle:
        handle.read()
    truncate_gzip(target, 0.001)  # even a cut inside the first block is a truncation, not garbage
    with pytest.raises(EOFError):
        gzip.decompress(Path(target).read_bytes())
    with pytest.raises(ValueError):
        truncate_gzip(target, 1.0)


def test_zstd_and_csv_archives_hold_the_same_records(tmp_path: Path) -> None:
    import pyarrow.csv as pcsv
    import zstandard

    spec = replace(SPEC, events=3_000)
    plain = generate_archive(tmp_path / "plain", spec)
    packed = generate_archive(tmp_path / "zst", replace(spec, format="jsonl.zst"))
    assert all(f.endswith(".jsonl.zst") for f in packed.files)
    decompress = zstandard.ZstdDecompressor().stream_reader
    unpacked = b"".join(decompress(Path(f).read_bytes()).read() for f in packed.files)
    assert unpacked == b"".join(Path(f).read_bytes() for f in plain.files)
    table = generate_archive(tmp_path / "parquet", replace(spec, format="parquet"))
    text = generate_archive(tmp_path / "csv", replace(spec, format="csv"))
    assert all(f.endswith(".csv") for f in text.files)
    rows = [row for f in table.files for row in pq.read_table(f).to_pylist()]
    read = [row for f in text.files for row in pcsv.read_csv(f, convert_options=pcsv.ConvertOptions(
        column_types=pq.read_table(table.files[0]).schema, strings_can_be_null=True)).to_pylist()]
    assert read == rows and Path(text.files[0]).read_text().startswith('"event_id","user_id","ts"')


def test_kafka_connect_objects_are_named_by_their_first_offset(tmp_path: Path) -> None:
    """The sink's names: the topic (the kind), the partition and the first line's offset, which is
    what the record's own ``offset`` says; the lines are the plain JSON Lines archive's."""
    import json

    spec = replace(SPEC, events=3_000, files_per_partition=2)
    plain = generate_archive(tmp_path / "plain", spec)
    objects = generate_archive(tmp_path / "kc", replace(spec, format="kafka_connect"))
    relative = [str(Path(f).relative_to(tmp_path / "kc")) for f in objects.files]
    assert relative[0] == f"topics/{spec.kind}/partition=0/{spec.kind}+0+0000000000.json"
    for path in objects.files:
        first = json.loads(Path(path).read_text().splitlines()[0])
        assert Path(path).name == f"{spec.kind}+{first['partition']}+{first['offset']:010d}.json"
    assert b"".join(Path(f).read_bytes() for f in objects.files) == b"".join(
        Path(f).read_bytes() for f in plain.files)
    again = generate_archive(tmp_path / "kc", replace(spec, format="kafka_connect", partitions=1))
    assert sorted(str(p) for p in (tmp_path / "kc").rglob("*.json")) == sorted(again.files)


@pytest.mark.parametrize("iso", [False, True])
def test_avro_archive_holds_the_parquet_rows(tmp_path: Path, iso: bool) -> None:
    fastavro = pytest.importorskip("fastavro")  # the second Avro implementation: a test dependency
    spec = replace(SPEC, events=3_000, corrupt_fraction=0.01, iso_timestamps=iso)
    table = generate_archive(tmp_path / "parquet", replace(spec, format="parquet"))
    avro = generate_archive(tmp_path / "avro", replace(spec, format="avro"))
    assert all(f.endswith(".avro") for f in avro.files) and avro.corrupt == table.corrupt > 0
    records = []
    for f in avro.files:
        with open(f, "rb") as handle:
            reader = fastavro.reader(handle)
            assert reader.codec == "deflate"
            ts_type = next(field["type"] for field in reader.writer_schema["fields"] if field["name"] == "ts")
            millis = {"type": "long", "logicalType": "timestamp-millis"}
            assert ts_type == ["null", "string" if iso else millis]
            records += list(reader)
    for record in records:  # fastavro gives a timestamp-millis as a datetime
        if isinstance(record["ts"], dt.datetime):
            record["ts"] = round(record["ts"].timestamp() * 1000)
    assert records == [row for f in table.files for row in pq.read_table(f).to_pylist()]


def test_parquet_archive_has_typed_columns(tmp_path: Path) -> None:
    summary = generate_archive(tmp_path, replace(SPEC, events=5_000, format="parquet"))
    table = pq.read_table(summary.files[0])
    assert table.schema.names == ["event_id", "user_id", "ts", "ingest_ts", "partition", "offset",
                                  "page", "value"]
    assert [str(t) for t in table.schema.types] == ["string", "string", "int64", "int64", "int32",
                                                    "int64", "string", "double"]
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in summary.files) == summary.events


def test_iso_timestamps_spell_the_same_instants(tmp_path: Path) -> None:
    spec = replace(SPEC, events=3_000, corrupt_fraction=0.0)
    epoch = [json.loads(line) for _, line in read_lines(generate_archive(tmp_path / "ms", spec))]
    iso_spec = replace(spec, iso_timestamps=True)
    iso = [json.loads(line) for _, line in read_lines(generate_archive(tmp_path / "iso", iso_spec))]
    assert all(r["ts"].endswith("Z") and len(r["ts"]) == 24 for r in iso)
    assert [epoch_ms(r["ts"]) for r in iso] == [r["ts"] for r in epoch]


def test_sensor_records(tmp_path: Path) -> None:
    spec = replace(SPEC, events=5_000, kind="sensor")
    summary = generate_archive(tmp_path, spec)
    records = [json.loads(line) for _, line in read_lines(summary) if problem(line, spec) is None]
    assert records and all("user_id" not in r and "page" not in r for r in records)
    assert all(r["sensor_id"].startswith("s") for r in records)
    temperatures = np.array([r["temperature"] for r in records])
    assert -20 < temperatures.min() and temperatures.max() < 60
    assert all(0.0 <= r["value"] <= 100.0 for r in records)


@pytest.mark.parametrize(
    "change",
    [{"events": -1}, {"kind": "logs"}, {"format": "xml"}, {"partitions": 0}, {"late_fraction": 1.5},
     {"events_per_second": 0}, {"duplicate_fraction": 0.6, "corrupt_fraction": 0.6}],
)
def test_invalid_specs_are_refused_naming_the_field(change: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as error:
        replace(GeneratorSpec(), **change)
    assert error.value.field in change


# --- the demo -------------------------------------------------------------------------------


def test_demo_spec_makes_early_on_time_and_late_panes_possible(tmp_path: Path) -> None:
    """Replays the demo archive through a small reference model of the demo pipeline's
    watermark (5 s out-of-orderness, per record, idle timeout 1 min) and 1-minute windows with
    30 s allowed lateness: some records must fall within the lateness (LATE panes) and some
    beyond it (late events), and the archive must span 20 to 60 minutes."""
    summary = generate_archive(tmp_path, DEMO_SPEC)
    assert len(summary.files) == 4
    records = [json.loads(line) for _, line in read_lines(summary) if problem(line, DEMO_SPEC) is None]
    records.sort(key=lambda r: (r["ingest_ts"], r["partition"], r["offset"]))
    span_minutes = (records[-1]["ingest_ts"] - records[0]["ingest_ts"]) / 60_000
    assert 20 <= span_minutes <= 60

    out_of_orderness, lateness, size, idle_timeout = 5_000, 30_000, 60_000, 60_000
    max_ts: dict[int, int] = {}
    last_seen: dict[int, int] = {}
    watermark = -(2**63)
    within_lateness = beyond_lateness = 0
    for record in records:
        window_end = (record["ts"] // size + 1) * size
        if window_end - 1 + lateness <= watermark:
            beyond_lateness += 1
        elif window_end - 1 <= watermark:
            within_lateness += 1
        partition, clock = record["partition"], record["ingest_ts"]
        max_ts[partition] = max(max_ts.get(partition, -(2**63)), record["ts"])
        last_seen[partition] = clock
        active = [max_ts[p] - out_of_orderness - 1 for p in max_ts if clock - last_seen[p] < idle_timeout]
        watermark = max(watermark, min(active))
    assert within_lateness >= 10 and beyond_lateness >= 10
    assert beyond_lateness / len(records) < 0.05  # the demo's quality gate (max_late_fraction)
    # Every page sees clicks in every 10-second step of a minute: EARLY panes fire.
    per_page_minute = Counter((r["page"], r["ts"] // size) for r in records)
    assert np.median(list(per_page_minute.values())) > 10
