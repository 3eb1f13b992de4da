"""Cutting an archive file's bytes into numbered lines, without Spark: what the executors run for
gzip and zstd files (``LineSplitter``, a ``mapInArrow`` function over ``binaryFile`` rows, see
``archive_jsonl``).

A truncated or corrupt gzip (or zstd) stream is recovered line by line (every complete line before the
damage is kept, the damaged tail is one quarantine row), where Hadoop's codec would fail the job or
drop the file. Blank lines are skipped but counted; invalid UTF-8 is marked for quarantine.
"""

from __future__ import annotations

import urllib.parse
import zlib
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import zstandard

# What the line splitter hands to Spark: a reason is set only for lines that are already known
# bad (invalid UTF-8) and for the one row a damaged file leaves.
LINES_DDL = (
    "_file string, _file_index int, _line bigint, _raw string, _pre_reason string, _pre_detail string"
)

# Line splitting: bytes cut into lines per step (bounds the splitter's memory to a few times
# this whatever the file size), rows per Arrow batch sent back, and gzip input fed per call (a
# corrupt stream loses at most the output of one call).
_CHUNK_BYTES = 16 << 20
_BATCH_ROWS = 1 << 16
_GZIP_INPUT_BYTES = 64 << 10
_GZIP_OUTPUT_BYTES = 4 << 20
_UTF8_BOM = b"\xef\xbb\xbf"
# As in JsonLineCheck.java: the same line is quarantined alike whether the file is gzipped or not.
_INVALID_UTF8 = "not valid UTF-8 (RFC 8259 requires it; invalid bytes are shown as U+FFFD)"
_GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = np.frombuffer(b" \t\r", dtype=np.uint8)  # JSON whitespace but \n, which ends lines


def is_gzip(path: str) -> bool:
    return path.lower().endswith(".gz")


def is_zstd(path: str) -> bool:
    return path.lower().endswith(".zst")


def is_compressed(path: str) -> bool:
    """Whether a file's lines are cut here (compressed) rather than by the JVM reader (plain)."""
    return is_gzip(path) or is_zstd(path)


class LineSplitter:
    """The executor side of ``read_jsonl``: binaryFile rows (whole files) -> numbered lines.

    A callable object rather than a closure, so that what is shipped to the executors is just
    the path -> file index table.
    """

    def __init__(self, indexes: dict[str, int]):
        self.indexes = indexes

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            paths, contents = batch.column(0), batch.column(1)
            for row in range(batch.num_rows):
                path = self.archive_path(paths[row].as_py())
                index = self.indexes[path]
                content = contents[row].as_buffer()
                data = memoryview(content) if content is not None else memoryview(b"")
                lines = FileLines(path, index)
                if is_gzip(path):
                    yield from lines.read(gunzip(data, lines))
                elif is_zstd(path):
                    yield from lines.read(unzstd(data, lines))
                else:
                    yield from lines.read(data[i:i + _CHUNK_BYTES] for i in range(0, len(data), _CHUNK_BYTES))

    def archive_path(self, reported: str) -> str:
        """The listed path of a file as binaryFile reports it (which might be URL-encoded)."""
        if reported in self.indexes:
            return reported
        decoded = urllib.parse.unquote(reported)
        if decoded in self.indexes:
            return decoded
        raise RuntimeError(f"binaryFile read a file that is not in the list: {reported}")


class FileLines:
    """Cuts one file's bytes (given as pieces) into numbered lines, as Arrow record batches.

    Blank lines are skipped but counted, so ``_line`` is the physical line number. ``\\r\\n``
    ends a line like ``\\n``; a missing final newline ends the last line; a UTF-8 byte-order mark
    before the first line is dropped.
    """

    def __init__(self, path: str, index: int):
        self.path = path
        self.index = index
        self.next_line = 1
        self.problem: tuple[str, str] | None = None  # set by the piece source: (reason, detail)

    def read(self, pieces: Iterator[bytes | memoryview]) -> Iterator[pa.RecordBatch]:
        pending: list[bytes | memoryview] = []
        size = 0
        start = True
        for piece in pieces:
            if not len(piece):
                continue
            pending.append(piece)
            size += len(piece)
            if size < _CHUNK_BYTES:
                continue
            data = b"".join(pending)
            if start:
                data, start = _drop_bom(data), False
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # one line longer than a chunk: keep collecting
                pending, size = [data], len(data)
                continue
            yield from self.lines(data[:cut] if cut < len(data) else data, final=False)
            pending = [data[cut:]] if cut < len(data) else []
            size = len(data) - cut
        data = b"".join(pending)
        if start:
            data = _drop_bom(data)
        if self.problem is None:
            yield from self.lines(data, final=True)
            return
        # A damaged file: its complete lines are records, the incomplete tail is one quarantine row.
        cut = data.rfind(b"\n") + 1
        yield from self.lines(data[:cut], final=False)
        reason, detail = self.problem
        yield self.batch(
            pa.array([data[cut:].decode("utf-8", "replace")], pa.string()),
            np.array([self.next_line], dtype="int64"),
            pa.array([reason]), pa.array([detail]),
        )

    def lines(self, raw: bytes, final: bool) -> Iterator[pa.RecordBatch]:
        """Batches of the lines in ``raw``: complete lines, plus an unterminated last one if final."""
        if not raw:
            return
        if b"\r" in raw:
            raw = raw.replace(b"\r\n", b"\n")
            if final and raw.endswith(b"\r"):
                raw = raw[:-1]
        buf = np.frombuffer(raw, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10)
        if final and raw[-1] != 10:
            ends = np.append(ends, len(raw))
        count = len(ends)
        if count == 0:
            return
        starts = np.empty(count, dtype=np.int64)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        lengths = ends - starts
        numbers = self.next_line + np.arange(count, dtype=np.int64)
        self.next_line += count
        # Dropping every newline leaves the lines back to back: exactly an Arrow string array's
        # data buffer, and line i starts i bytes earlier than in ``raw``. One C-speed pass.
        data = raw.replace(b"\n", b"")
        if len(data) >= 2**31:
            raise ValueError("line chunk over 2 GB")  # impossible with _CHUNK_BYTES; guards int32
        offsets = np.empty(count + 1, dtype=np.int32)
        offsets[:count] = starts - np.arange(count)
        offsets[count] = len(data)
        keep = lengths > 0
        # Whitespace-only lines are blank too; only lines starting with whitespace can be.
        maybe = np.flatnonzero(keep & np.isin(buf[np.minimum(starts, len(buf) - 1)], _WHITESPACE))
        for line in maybe:
            if not raw[starts[line]:ends[line]].strip(b" \t\r"):
                keep[line] = False
        texts = pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data))
        reasons = details = None
        try:
            texts.validate(full=True)
        except pa.ArrowInvalid:  # invalid UTF-8 somewhere: find the lines, store them readable
            texts, reasons, details = _mark_invalid_utf8(raw, starts, ends)
        if not keep.all():
            mask = pa.array(keep)
            texts, numbers = texts.filter(mask), numbers[keep]
            if reasons is not None:
                reasons, details = reasons.filter(mask), details.filter(mask)
        for at in range(0, len(texts), _BATCH_ROWS):
            part = slice(at, at + _BATCH_ROWS)
            yield self.batch(
                texts[part], numbers[part],
                None if reasons is None else reasons[part], None if details is None else details[part],
            )

    def batch(
        self, texts: pa.Array, numbers: np.ndarray, reasons: pa.Array | None, details: pa.Array | None
    ) -> pa.RecordBatch:
        rows = len(texts)
        encoded = self.path.encode()
        # The path repeated, built as buffers rather than as `rows` Python strings.
        files = pa.StringArray.from_buffers(
            rows, pa.py_buffer(np.arange(rows + 1, dtype=np.int32) * len(encoded)),
            pa.py_buffer(encoded * rows),
        )
        nulls = pa.nulls(rows, pa.string())
        return pa.RecordBatch.from_arrays(
            [files, pa.array(np.full(rows, self.index, dtype=np.int32)), pa.array(numbers), texts,
             nulls if reasons is None else reasons, nulls if details is None else details],
            names=["_file", "_file_index", "_line", "_raw", "_pre_reason", "_pre_detail"],
        )


def _drop_bom(data: bytes) -> bytes:
    return data[len(_UTF8_BOM):] if data.startswith(_UTF8_BOM) else data


def _mark_invalid_utf8(
    raw: bytes, starts: np.ndarray, ends: np.ndarray
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Per-line UTF-8 check, only for a chunk that failed the fast whole-chunk check.

    Invalid lines are malformed JSON (RFC 8259 requires UTF-8); their raw text keeps the
    replacement character so that it can be stored as a string.
    """
    texts, reasons, details = [], [], []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        line = raw[start:end]
        try:
            texts.append(line.decode("utf-8"))
            reasons.append(None)
            details.append(None)
        except UnicodeDecodeError:
            texts.append(line.decode("utf-8", "replace"))
            reasons.append("malformed_json")
            details.append(_INVALID_UTF8)
    return pa.array(texts, pa.string()), pa.array(reasons, pa.string()), pa.array(details, pa.string())


def gunzip(data: memoryview, lines: FileLines) -> Iterator[bytes]:
    """Decompressed pieces of a gzip file, recovering what a truncated or corrupt file holds.

    zlib's streaming decompressor yields every byte it can decode, so a file cut short still
    gives all its complete lines; the damage is reported through ``lines.problem``. Several gzip
    members in a row (``cat a.gz b.gz``) are one stream, as for ``gzip -d``.
    """
    position, total = 0, len(data)
    decoder = zlib.decompressobj(wbits=31)
    try:
        while True:
            if decoder.eof:
                start = position - len(decoder.unused_data)
                rest = data[start:]
                if bytes(rest[:2]) != _GZIP_MAGIC and not np.frombuffer(rest, dtype=np.uint8).any():
                    return  # end of the last member (zero padding after it is harmless)
                decoder, position = zlib.decompressobj(wbits=31), start
            elif decoder.unconsumed_tail:
                yield decoder.decompress(decoder.unconsumed_tail, _GZIP_OUTPUT_BYTES)
            elif position < total:
                piece = data[position:position + _GZIP_INPUT_BYTES]
                position += len(piece)
                yield decoder.decompress(piece, _GZIP_OUTPUT_BYTES)
            else:
                yield decoder.flush()
                if not decoder.eof:
                    lines.problem = (
                        "truncated_gzip",
                        f"gzip stream ends early (file has {total} bytes); the complete lines before "
                        "the cut were read, this is the incomplete last one",
                    )
                    return
    except zlib.error as error:
        lines.problem = (
            "unreadable_file",
            f"corrupt gzip data near compressed byte {position}: {error}; the complete lines "
            "before it were read, the rest of the file was not",
        )


def unzstd(data: memoryview, lines: FileLines) -> Iterator[bytes]:
    """Decompressed pieces of a zstd file, recovered as ``gunzip`` recovers gzip: every complete
    line before a cut or corrupt block is kept, the damage reported through ``lines.problem``.
    Several frames in a row (``cat a.zst b.zst``) are one stream, as for ``zstd -d``."""
    position, total = 0, len(data)
    decoder = zstandard.ZstdDecompressor().decompressobj()
    try:
        while True:
            if decoder.eof:
                start = position - len(decoder.unused_data)
                if not np.frombuffer(data[start:], dtype=np.uint8).any():
                    return  # end of the last frame (zero padding after it is harmless)
                decoder, position = zstandard.ZstdDecompressor().decompressobj(), start
            elif position < total:
                piece = data[position:position + _GZIP_INPUT_BYTES]
                position += len(piece)
                yield decoder.decompress(bytes(piece))
            else:
                break
        if not decoder.eof:
            lines.problem = (
                "truncated_zstd",
                f"zstd stream ends early (file has {total} bytes); the complete lines before the "
                "cut were read, this is the incomplete last one",
            )
    except zstandard.ZstdError as error:
        lines.problem = (
            "unreadable_file",
            f"corrupt zstd data near compressed byte {position}: {error}; the complete lines "
            "before it were read, the rest of the file was not",
        )
