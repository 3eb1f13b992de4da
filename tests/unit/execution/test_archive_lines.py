"""Cutting files into numbered lines without Spark (``archive_lines``): chunk and gzip-member
boundaries, CRLF and blank lines, a byte-order mark, invalid UTF-8, truncated gzip. (The readers
that use it run against real files in ``tests/spark/test_sources.py``.)"""

from __future__ import annotations

import gzip

from spark_jobs.execution import archive_lines


def batches(data: bytes, name: str = "f.jsonl") -> list:
    """The record batches ``FileLines`` makes of a file given in pieces (gzip: as decompressed)."""
    lines = archive_lines.FileLines(name, 0)
    view = memoryview(data)
    pieces = archive_lines.gunzip(view, lines) if name.endswith(".gz") else iter([view[:3], view[3:]])
    return list(lines.read(pieces))


def split(data: bytes, name: str = "f.jsonl") -> list[tuple[int, str, str | None]]:
    rows = []
    for batch in batches(data, name):
        part = batch.to_pydict()
        rows += zip(part["_line"], part["_raw"], part["_pre_reason"], strict=True)
    return rows


def test_splitting_across_chunk_and_gzip_boundaries(monkeypatch):
    monkeypatch.setattr(archive_lines, "_CHUNK_BYTES", 7)  # every line crosses a chunk boundary
    monkeypatch.setattr(archive_lines, "_GZIP_INPUT_BYTES", 5)
    monkeypatch.setattr(archive_lines, "_GZIP_OUTPUT_BYTES", 3)
    text = b'{"a":1}\r\n\n  \n{"b":"a long line, longer than a chunk"}\n\r\n{"c":3}'
    # The sizes above are in force: the text is cut chunk by chunk, gzip decompressed 3 bytes at a time.
    assert len(batches(text)) > 1
    pieces = archive_lines.gunzip(memoryview(gzip.compress(text)), archive_lines.FileLines("f.gz", 0))
    assert max(len(piece) for piece in pieces) <= 3
    expected = [(1, '{"a":1}', None), (4, '{"b":"a long line, longer than a chunk"}', None),
                (6, '{"c":3}', None)]
    assert split(text) == expected
    assert split(gzip.compress(text), "f.jsonl.gz") == expected
    assert split(gzip.compress(text[:20]) + gzip.compress(text[20:]) + b"\0\0", "f.gz") == expected
    # Only the CRC trailer is missing: all text decodes, but with no final newline nobody can
    # tell whether the last line is complete, so it is the truncated tail.
    cut = gzip.compress(text)[:-8]
    assert split(cut, "f.gz") == [*expected[:2], (6, '{"c":3}', "truncated_gzip")]
    assert split(gzip.compress(text + b"\n")[:-8], "f.gz") == [*expected, (7, "", "truncated_gzip")]
    assert split(b"\xef\xbb\xbf{}\n\xff{}\n") == [(1, "{}", None), (2, "\ufffd{}", "malformed_json")]
