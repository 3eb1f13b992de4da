"""ingest_once: a small ingest's lines split, numbered and cut into batches on the driver, against
a plain-Python definition; which ingests are small enough."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.execution.archive_files import ArchiveFile
from spark_jobs.execution.ingest_once import (
    STAGE_ON_DRIVER_MAX_BYTES,
    ingested_columns,
    reads_once,
    stage_on_driver,
)

CONFIG = SimpleNamespace(source=SimpleNamespace(ingest_time="ingest_ts", format="jsonl"), join=None,
                         stage_on_driver_max_records=1_000)


@st.composite
def checked_lines(draw):
    """Checked lines of a few files: some quarantined, replay keys with ties."""
    cells = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 30)), max_size=50, unique=True))
    rows = []
    for file_index, line in cells:
        ok = draw(st.booleans()) or draw(st.booleans())
        rows.append({
            "_ok": ok, "_reason": None if ok else "bad_json", "_detail": None if ok else "x",
            "_file": f"part-{file_index}", "_file_index": file_index, "_line": line,
            "_event_time": draw(st.integers(0, 9)), "_ingest_time": draw(st.integers(0, 4)),
            "_partition": draw(st.sampled_from(["0", "1", "10", "9"])), "_offset": draw(st.integers(0, 3)),
            "_id": f"e{file_index}-{line}", "_raw": f"line {line} of {file_index}", "user": "u",
        })
    schema = pa.schema([
        ("_ok", pa.bool_()), ("_reason", pa.string()), ("_detail", pa.string()), ("_file", pa.string()),
        ("_file_index", pa.int32()), ("_line", pa.int64()), ("_event_time", pa.int64()),
        ("_ingest_time", pa.int64()), ("_partition", pa.string()), ("_offset", pa.int64()),
        ("_id", pa.string()), ("_raw", pa.string()), ("user", pa.string()),
    ])
    return pa.Table.from_pylist(rows, schema=schema)


@settings(max_examples=60, deadline=None)
@given(checked_lines(), st.integers(0, 100), st.integers(0, 7), st.integers(1, 9))
def test_records_numbered_in_replay_order_and_cut_into_batches(lines, seq_base, batch_base, batch_size):
    rows = stage_on_driver(lines, CONFIG, 4, seq_base, batch_base, batch_size, ingest_id=3)
    accepted = [row for row in lines.to_pylist() if row["_ok"]]
    # Replay order by ingest time: ingest time, partition (as UTF-8 bytes), offset, file, line.
    accepted.sort(key=lambda r: (r["_ingest_time"], r["_partition"].encode(), r["_offset"],
                                 r["_file_index"], r["_line"]))
    kept = ["user"]
    taken = ingested_columns(rows.lines, CONFIG, kept, rows.replay_order)  # (before staged() lets go)
    staged_rows = rows.staged()
    assert rows.lines is None
    staged = staged_rows.to_pylist()
    where = [(r["_file_index"], r["_line"]) for r in staged]
    assert where == [(r["_file_index"], r["_line"]) for r in accepted]
    assert [r["_seq"] for r in staged] == list(range(seq_base, seq_base + len(accepted)))
    assert [r["_batch"] for r in staged] == [batch_base + i // batch_size for i in range(len(accepted))]
    assert staged_rows.schema.field("_ingest").type == pa.int32() and {r["_ingest"] for r in staged} <= {3}
    outcome = ("_ok", "_reason", "_detail")
    assert staged_rows.column_names[:-3] == [n for n in lines.column_names if n not in outcome]
    bad = [row for row in lines.to_pylist() if not row["_ok"]]
    assert sorted(rows.quarantined.to_pylist(), key=lambda r: (r["source_file"], r["line"])) == sorted(
        ({"source_file": r["_file"], "line": r["_line"], "raw": r["_raw"], "reason": r["_reason"],
          "detail": r["_detail"], "ingest_id": 3} for r in bad), key=lambda r: (r["source_file"], r["line"]))
    assert rows.per_file_records.tolist() == [sum(r["_file_index"] == f for r in accepted) for f in range(4)]
    assert rows.per_file_bad.tolist() == [sum(r["_file_index"] == f for r in bad) for f in range(4)]
    # What the passes take from the ingest: the staged rows' columns, taken from the lines.
    assert taken.to_pylist() == ingested_columns(staged_rows, CONFIG, kept).to_pylist()


def test_only_small_ingests_are_read_once():
    plain = [ArchiveFile("file:/a/part-0.jsonl", 10_000, 0)]
    assert reads_once(CONFIG, 1_000, plain)
    assert not reads_once(CONFIG, 1_001, plain)  # more lines than batch.stage_on_driver_max_records
    assert not reads_once(SimpleNamespace(**{**vars(CONFIG), "stage_on_driver_max_records": 0}), 0, plain)
    big = [ArchiveFile("file:/a/part-0.jsonl", STAGE_ON_DRIVER_MAX_BYTES // 2 + 1, 0)] * 2
    assert not reads_once(CONFIG, 10, big)  # too many bytes for the driver, however few lines
    # Compressed files count for what they expand to.
    packed = [ArchiveFile("file:/a/part-0.jsonl.gz", STAGE_ON_DRIVER_MAX_BYTES // 4, 0)]
    assert reads_once(CONFIG, 10, [ArchiveFile("file:/a/part-0.jsonl", STAGE_ON_DRIVER_MAX_BYTES // 4, 0)])
    assert not reads_once(CONFIG, 10, packed)
