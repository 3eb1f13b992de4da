"""When an ingested archive file counts as changed (one rule for the run and the JVM-free check)."""

from __future__ import annotations

from spark_jobs.execution.archive_files import ArchiveFile, change_of

SEEN = {"size": 1200, "modified_ms": 1_700_000_000_000}


def test_the_same_size_and_time_is_no_change():
    assert change_of(SEEN, ArchiveFile("s3a://b/a.jsonl", 1200, 1_700_000_000_000)) is None


def test_a_new_size_or_time_is_a_change_and_says_which():
    assert change_of(SEEN, ArchiveFile("s3a://b/a.jsonl", 1300, 1_700_000_000_000)) == (
        "size 1200 -> 1300, modified 1700000000000 -> 1700000000000")
    assert "modified 1700000000000 -> 1700000001000" in change_of(
        SEEN, ArchiveFile("s3a://b/a.jsonl", 1200, 1_700_000_001_000))


def test_an_etag_counts_when_both_listings_have_one():
    seen = {**SEEN, "etag": '"0f3a"'}
    same_second = ArchiveFile("s3a://b/a.jsonl", 1200, 1_700_000_000_000, '"9c1d"')
    assert change_of(seen, same_second) == 'etag "0f3a" -> "9c1d"'  # size and time say nothing
    assert change_of(seen, ArchiveFile("s3a://b/a.jsonl", 1200, 1_700_000_000_000, '"0f3a"')) is None
    # A listing without ETags (pyarrow's, a local disk), or a row written before the column: size and time.
    assert change_of(seen, ArchiveFile("s3a://b/a.jsonl", 1200, 1_700_000_000_000)) is None
    assert change_of(SEEN, same_second) is None
    both = change_of(seen, ArchiveFile("s3a://b/a.jsonl", 1300, 1_700_000_000_000, '"9c1d"'))
    assert both.startswith("size 1200 -> 1300") and both.endswith('etag "0f3a" -> "9c1d"')
