"""The archive reader: list an archive's files and parse them into typed records + quarantine.

``list_archive`` walks the archive through Hadoop's ``FileSystem`` (so ``s3a://``, ``abfss://``
and ``hdfs://`` work exactly like local paths). ``check_archive`` turns a list of those files
into one lazy DataFrame of checked rows, every row with its outcome (``_outcome``: NULL for an
accepted record, else the quarantine reason and detail); ``accepted`` and ``rejected`` project
it into

* records: ``RECORD_COLUMNS`` followed by the key fields (STRING) and the value columns (typed
  per ``config.column_type``);
* quarantine: ``source_file, line, raw, reason, detail`` (the caller adds ``ingest_id``).

Every non-blank input line (Parquet: row) lands in exactly one of the two. Besides those, a file
that cannot be read to its end leaves one extra quarantine row: ``truncated_gzip`` (the stream
stops early; ``raw`` is the incomplete last line, possibly empty) or ``unreadable_file`` (corrupt
gzip data, or a Parquet file whose footer cannot be read; the complete lines before the damage
are kept).

Plain JSON Lines are read by the project's JVM reader (``spark_jobs/execution/jvm``, ``JsonLinesSource``,
one task per file through Hadoop's ``FileSystem``): it cuts the lines, numbers them and checks
that each is exactly one JSON object with Jackson, in one pass (Spark SQL's ``from_json`` costs
about three times as much per line). Gzip files are read whole with the ``binaryFile`` source and
cut into lines on the executors with numpy (their damage, a truncated or corrupt stream, is
recovered line by line, where Hadoop's codec would fail the job or drop the file), then checked
by the same Java code as a UDF. The fields are then typed and validated by Spark SQL. Files are
read as they are (no ``ignoreCorruptFiles``, which would silently drop data).

Every evaluation re-reads the archive: the ingest reads it twice (narrow keys, then the staged
records) rather than caching it, which costs less than filling a cache.
"""

from __future__ import annotations

import json
import urllib.parse
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..exceptions import ConfigError
from .archive_files import ArchiveFile, data_suffixes, is_data_file

if TYPE_CHECKING:
    from ..config import PipelineConfig, SourceConfig

RECORD_COLUMNS = (
    "_file", "_file_index", "_line", "_event_time", "_ingest_time", "_partition", "_offset", "_id",
    "_raw",
)
QUARANTINE_COLUMNS = ("source_file", "line", "raw", "reason", "detail")
QUARANTINE_REASONS = (
    "malformed_json", "not_an_object", "missing_field", "invalid_type", "invalid_timestamp",
    "truncated_gzip", "unreadable_file",
)

_SPARK_TYPES = {"string": "string", "long": "bigint", "double": "double", "boolean": "boolean"}
# What the line splitter hands to Spark: a reason is set only for lines that are already known
# bad (invalid UTF-8) and for the one row a damaged file leaves.
_LINES_DDL = (
    "_file string, _file_index int, _line bigint, _raw string, _pre_reason string, _pre_detail string"
)
_LINES_COLUMNS = ("_file", "_file_index", "_line", "_raw", "_pre_reason", "_pre_detail")

_EPOCH_MS = r"^-?[0-9]+$"
_ISO_WITH_ZONE = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
# Spark's timestamp cast wants seconds; ISO-8601 lets them be left out (22:13Z).
_ISO_NO_SECONDS = r"^([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2})(Z|[+-][0-9]{2}:[0-9]{2})$"
_DETAIL_VALUE_CHARS = 200

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
# The project's JVM side (spark_jobs/execution/jvm, built by `make setup`).
_JSON_LINES_SOURCE = "replay.ingest.JsonLinesSource"
_JSON_LINE_CHECK = "replay_json_line_check"
_JSON_LINE_CHECK_CLASS = "replay.ingest.JsonLineFields"
_GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = np.frombuffer(b" \t\r", dtype=np.uint8)  # JSON whitespace but \n, which ends lines


@dataclass(frozen=True)
class CheckedArchive:
    """``check_archive``'s result."""

    #: Every line (Parquet: row), typed and checked: ``_outcome`` is NULL for an accepted record,
    #: else ``(r, d)``, the quarantine reason and detail.
    frame: DataFrame
    #: At most this many rows (lines or Parquet rows), known without parsing; None when unknown
    #: (gzip files, whose lines are only known once decompressed).
    max_rows: int | None


# ---- listing -------------------------------------------------------------------------------------
def list_archive(spark: SparkSession, source: SourceConfig) -> list[ArchiveFile]:
    """The archive's data files, sorted by path.

    ``source.path`` is a file or a directory walked recursively; which files are data is
    ``archive_files.is_data_file``.
    """
    suffixes = data_suffixes(source.format)
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(source.path)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(root):
        raise ConfigError("source.path", f"no such file or directory: {source.path}")
    root_status = fs.getFileStatus(root)
    if root_status.isFile():
        path = root_status.getPath().toString()
        if not path.lower().endswith(suffixes):
            raise ConfigError(
                "source.path", f"{path} is not a {source.format} file ({', '.join(suffixes)})"
            )
        return [ArchiveFile(path, root_status.getLen(), root_status.getModificationTime())]
    prefix = root_status.getPath().toString().rstrip("/") + "/"
    files = []
    # listFiles(recursive) is one flat listing on object stores, unlike a directory-by-directory
    # walk; hidden directories are therefore filtered by the relative path afterwards.
    entries = fs.listFiles(root, True)
    while entries.hasNext():
        status = entries.next()
        path = status.getPath().toString()
        relative = path[len(prefix):] if path.startswith(prefix) else path.rsplit("/", 1)[-1]
        if is_data_file(relative, suffixes):
            files.append(ArchiveFile(path, status.getLen(), status.getModificationTime()))
    return sorted(files, key=lambda f: f.path)


# ---- reading -------------------------------------------------------------------------------------
def read_archive(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], first_file_index: int = 0,
) -> tuple[DataFrame, DataFrame]:
    """``(records, quarantine)`` for ``files``; ``_file_index`` is ``first_file_index`` + position.

    Both come from one lazy plan (see ``check_archive``), each re-reading the archive when
    evaluated.
    """
    checked = check_archive(spark, config, files, first_file_index).frame
    return accepted(checked, config), rejected(checked)


def check_archive(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], first_file_index: int = 0,
    only: pa.Table | None = None,
) -> CheckedArchive:
    """Every line (Parquet: row) of ``files``, typed and checked (see ``CheckedArchive``).

    Lazy, but for the footer reads of Parquet files. ``only`` (``_file_index, _line`` rows)
    restricts it to those lines before anything is parsed, and keeps the rows of damaged files.
    """
    indexes = {f.path: first_file_index + number for number, f in enumerate(files)}
    if not files:
        return CheckedArchive(_empty_checked(spark, config), 0)
    if config.source.format == "parquet":
        return _read_parquet(spark, config, files, indexes, only)
    return _read_jsonl(spark, config, files, indexes, only)


def accepted(checked: DataFrame, config: PipelineConfig) -> DataFrame:
    """The accepted records of ``check_archive``'s rows."""
    return checked.where(F.col("_outcome").isNull()).select(
        F.col("_file"), F.col("_file_index").cast("int"), F.col("_line").cast("bigint"),
        "_event_time", "_ingest_time", "_partition", "_offset", "_id", "_raw",
        *[F.col(_quote(k)) for k in config.key],
        *[F.col(_quote(c)) for c in config.value_columns()],
    )


def rejected(checked: DataFrame) -> DataFrame:
    """The quarantine rows of ``check_archive``'s rows."""
    return checked.where(F.col("_outcome").isNotNull()).select(
        F.col("_file").alias("source_file"),
        F.col("_line").cast("bigint").alias("line"),
        F.col("_raw").alias("raw"),
        F.col("_outcome.r").alias("reason"),
        F.col("_outcome.d").alias("detail"),
    )


def _empty_checked(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    columns = [
        "_file string", "_file_index int", "_line bigint", "_raw string",
        "_outcome struct<r: string, d: string>", "_event_time bigint", "_ingest_time bigint",
        "_partition string", "_offset bigint", "_id string",
        *[f"{_quote(k)} string" for k in config.key],
        *[f"{_quote(c)} {_SPARK_TYPES[config.column_type(c)]}" for c in config.value_columns()],
    ]
    return spark.createDataFrame([], ", ".join(columns))


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _glob_escaped(path: str) -> str:
    """Spark expands glob characters in load() paths; a file named ``x[1].jsonl`` must not be."""
    for char in "\\[]{}*?":
        path = path.replace(char, "\\" + char)
    return path


def _needed_fields(config: PipelineConfig) -> list[str]:
    source = config.source
    names = [source.event_time, *config.key, source.ingest_time, source.partition, source.offset,
             source.id, *config.value_columns()]
    return list(dict.fromkeys(n for n in names if n))


# ---- JSON Lines ----------------------------------------------------------------------------------
def _read_jsonl(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], indexes: dict[str, int],
    only: pa.Table | None = None,
) -> CheckedArchive:
    """Plain files through the project's JVM reader (``JsonLinesSource``: lines, numbers and the
    strict check of each line as one JSON object in one pass); gzip files cut into lines by the
    Python splitter, then the same check as a UDF. Then the fields are typed and validated."""
    fields = _needed_fields(config)
    plain, packed = _plain_and_gzip(files)
    texts = [f"_text{i}" for i in range(len(fields))]
    parts = []
    wanted = _lines_by_file(only)
    if plain:
        inputs: list[list] = [[f.path, indexes[f.path]] for f in plain]
        if wanted is not None:
            inputs = [[path, index, wanted.get(index, [])] for path, index in inputs]
        parts.append(
            spark.read.format(_JSON_LINES_SOURCE)
            .option("files", json.dumps(inputs))
            .option("fields", json.dumps(fields))
            .load()
        )
    if packed:
        spark.udf.registerJavaFunction(_JSON_LINE_CHECK, _JSON_LINE_CHECK_CLASS, _check_type(len(fields)))
        split = _gzip_lines(spark, packed, indexes).withColumn(
            "_check", F.call_udf(_JSON_LINE_CHECK, F.col("_raw"), F.lit(json.dumps(fields)))
        )
        # What the splitter already knows (invalid UTF-8, a damaged file's tail) comes first.
        known = F.col("_pre_reason").isNotNull()
        if only is not None:
            split = split.join(F.broadcast(spark.createDataFrame(only)), ["_file_index", "_line"],
                               "left_semi")
        parts.append(split.select(
            "_file", "_file_index", "_line", "_raw",
            F.when(known, F.col("_pre_reason")).otherwise(F.col("_check._pre_reason")).alias("_pre_reason"),
            F.when(known, F.col("_pre_detail")).otherwise(F.col("_check._pre_detail")).alias("_pre_detail"),
            *[F.col(f"_check.{text}").alias(text) for text in texts],
        ))
    lines = reduce(DataFrame.unionByName, parts)
    # A record spells out every required field, so it takes at least this many bytes; a gzip
    # file's size says nothing of its lines.
    shortest = _shortest_record_bytes(config)
    bound = None if packed else sum(f.size // shortest for f in plain)
    return CheckedArchive(
        _validate(lines, config, {name: F.col(text) for name, text in zip(fields, texts, strict=True)}, {}),
        bound,
    )


def _required_fields(config: PipelineConfig) -> list[str]:
    """The fields every accepted record has (non-null)."""
    source = config.source
    required = [source.event_time, *config.key]
    required += [n for n in (source.ingest_time, source.partition, source.offset, source.id) if n]
    return list(dict.fromkeys(required))


def _shortest_record_bytes(config: PipelineConfig) -> int:
    """The shortest line an accepted record can be: ``{"a":0,"b":0}`` with its required fields."""
    names = _required_fields(config)
    return 2 + sum(len(name.encode()) + 4 for name in names) + len(names) - 1


def line_count(spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile]) -> int:
    """At least as many as the records in ``files`` (their lines, or Parquet rows), read without
    parsing anything: a bound for what the driver would have to hold."""
    if not files:
        return 0
    if config.source.format == "parquet":
        return sum(rows for _, rows in _parquet_footers(spark, files))
    plain, packed = _plain_and_gzip(files)
    count = spark.read.text([_glob_escaped(f.path) for f in plain]).count() if plain else 0
    if packed:
        count += _gzip_lines(spark, packed, {f.path: i for i, f in enumerate(packed)}).count()
    return count


def _plain_and_gzip(files: list[ArchiveFile]) -> tuple[list[ArchiveFile], list[ArchiveFile]]:
    return [f for f in files if not _is_gzip(f.path)], [f for f in files if _is_gzip(f.path)]


def _is_gzip(path: str) -> bool:
    return path.lower().endswith(".gz")


def _gzip_lines(spark: SparkSession, files: list[ArchiveFile], indexes: dict[str, int]) -> DataFrame:
    """Gzip files' lines (``_LINES_DDL``), cut by ``_LineSplitter`` from each whole file."""
    return (
        spark.read.format("binaryFile")
        .load([_glob_escaped(f.path) for f in files])
        .select("path", "content")
        .mapInArrow(_LineSplitter({f.path: indexes[f.path] for f in files}), _LINES_DDL)
    )


def _lines_by_file(only: pa.Table | None) -> dict[int, list[int]] | None:
    """``only``'s lines as ``{file index: [line, ...]}``, ascending."""
    if only is None:
        return None
    wanted: dict[int, list[int]] = {}
    files, lines = only.column("_file_index").to_pylist(), only.column("_line").to_pylist()
    for file_index, line in sorted(zip(files, lines, strict=True), key=lambda pair: (pair[0], pair[1] or 0)):
        if line is not None:
            wanted.setdefault(file_index, []).append(line)
    return wanted


def _check_type(width: int) -> T.StructType:
    """What ``JsonLineFields`` returns: the line's problem, if any, then each field's text."""
    return T.StructType(
        [T.StructField("_pre_reason", T.StringType()), T.StructField("_pre_detail", T.StringType())]
        + [T.StructField(f"_text{i}", T.StringType()) for i in range(width)]
    )


class _LineSplitter:
    """The executor side of ``_read_jsonl``: binaryFile rows (whole files) -> numbered lines.

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
                lines = _FileLines(path, index)
                if _is_gzip(path):
                    yield from lines.read(_gunzip(data, lines))
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


class _FileLines:
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


def _gunzip(data: memoryview, lines: _FileLines) -> Iterator[bytes]:
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


# ---- Parquet -------------------------------------------------------------------------------------
def _read_parquet(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], indexes: dict[str, int],
    only: DataFrame | None = None,
) -> CheckedArchive:
    """Parquet rows through the same validation; an unreadable file becomes one quarantine row.

    Each footer is read first (on the driver, through Hadoop, so any file system works): a file
    whose footer is unreadable (truncated upload, not Parquet at all) is left out of the scan and
    reported instead of failing the whole read. Damage inside a file with a good footer is not
    detected here and fails the job loudly.
    """
    readable, broken = [], []
    # Footer reads are round trips to the file system (object stores: ~50 ms each): overlap them.
    footers = _parquet_footers(spark, files)
    for f, (problem, _) in zip(files, footers, strict=True):
        if problem is None:
            readable.append(f)
        else:
            broken.append((f.path, indexes[f.path], ("unreadable_file", problem)))
    broken_df = spark.createDataFrame(
        broken, "_file string, _file_index int, _outcome struct<r: string, d: string>"
    )
    rows_bound = sum(rows for _, rows in footers) + len(broken)
    if not readable:
        return CheckedArchive(
            _empty_checked(spark, config).unionByName(broken_df, allowMissingColumns=True), rows_bound
        )
    # mergeSchema: a column added to later files must not be read as null from the first file's
    # schema alone.
    table = spark.read.option("mergeSchema", "true").parquet(*[_glob_escaped(f.path) for f in readable])
    data_columns = table.columns
    types = {field.name: field.dataType for field in table.schema.fields}
    index_rows = spark.createDataFrame(
        [(f.path, indexes[f.path]) for f in readable], "_file string, _file_index int"
    )
    # _metadata.file_path is URL-encoded ("a%20b.parquet"); decoding it gives the listed path.
    # url_decode would also turn '+' into a space, which a URI never means: protect it first.
    decoded = F.try_url_decode(F.regexp_replace(F.col("_metadata.file_path"), r"\+", "%2B"))
    rows = (
        table.select(
            *[F.col(_quote(c)) for c in data_columns],
            decoded.alias("_file"),
            (F.col("_metadata.row_index") + 1).alias("_line"),
            F.to_json(F.struct(*[F.col(_quote(c)) for c in data_columns])).alias("_raw"),
        )
        .join(F.broadcast(index_rows), "_file", "left")
        # A path that does not map back would silently lose its file's order: fail instead.
        .withColumn("_file_index", F.coalesce(F.col("_file_index"), F.raise_error(
            F.concat(F.lit("Parquet row from a file not in the list: "), F.col("_file"))).cast("int")))
        .withColumn("_pre_reason", F.lit(None).cast("string"))
        .withColumn("_pre_detail", F.lit(None).cast("string"))
    )
    if only is not None:
        rows = rows.join(F.broadcast(spark.createDataFrame(only)), ["_file_index", "_line"], "left_semi")
    texts: dict[str, Column] = {}
    event_ms: dict[str, Column] = {}
    for name in _needed_fields(config):
        kind = types.get(name)
        column = F.col(_quote(name))
        if kind is None:
            texts[name] = F.lit(None).cast("string")
        elif isinstance(kind, T.TimestampType | T.TimestampNTZType):
            # An instant needs no parsing; TIMESTAMP_NTZ is read as UTC, like Flink's TIMESTAMP
            # rowtime (the session time zone must not shift event times).
            if isinstance(kind, T.TimestampType):
                millis = F.unix_millis(column)  # floors sub-millisecond parts, also before 1970
            else:
                micros = f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {_quote(name)})"
                millis = F.expr(f"({micros} - pmod({micros}, 1000)) div 1000")
            texts[name] = millis.cast("string")
            event_ms[name] = millis
        elif isinstance(kind, T.StructType | T.ArrayType | T.MapType):
            texts[name] = F.to_json(column)
        else:
            texts[name] = column.cast("string")
    checked = _validate(rows, config, texts, event_ms)
    return CheckedArchive(checked.unionByName(broken_df, allowMissingColumns=True), rows_bound)


def _parquet_footers(spark: SparkSession, files: list[ArchiveFile]) -> list[tuple[str | None, int]]:
    """``_parquet_footer`` of each file, read side by side (each is a round trip to storage)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda f: _parquet_footer(spark, f.path), files))


def _parquet_footer(spark: SparkSession, path: str) -> tuple[str | None, int]:
    """``(problem, rows)``: why the file's Parquet footer cannot be read (None when it can), and
    the rows it declares.

    Only a damaged or foreign file is a problem to report; an I/O failure (a missing file, a
    network error, throttling) is raised, since quarantining the file would lose it for good.
    """
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    conf = spark._jsc.hadoopConfiguration()
    try:
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
            jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf)
        )
        rows = reader.getRecordCount()
        reader.close()
    except Py4JJavaError as error:
        java = error.java_exception
        kind, message = java.getClass().getName(), str(java.getMessage())
        # Parquet reports a bad magic number or a too-short file as a bare RuntimeException and
        # an undecodable footer as an IOException about its Thrift classes.
        if kind == "java.lang.RuntimeException" or kind.startswith("org.apache.parquet") or (
            "org.apache.parquet.format" in message
        ):
            return f"not a readable Parquet file: {message}", 0
        raise
    return None, rows


# ---- validation (shared) -------------------------------------------------------------------------
def _validate(
    lines: DataFrame,
    config: PipelineConfig,
    texts: dict[str, Column],
    parsed_ms: dict[str, Column],
) -> DataFrame:
    """Type and check the fields; every row gets exactly one outcome.

    ``texts`` holds each needed field as text (NULL when absent); ``parsed_ms`` time fields that
    are already epoch ms; ``_pre_reason``/``_pre_detail`` what is known before the fields are
    typed (not one JSON object, invalid UTF-8, a damaged file's tail). The first failing check
    names the reason, in the order of the quarantine reasons.
    """
    source = config.source
    required = _required_fields(config)

    def time_ms(name: str) -> Column:
        return parsed_ms[name] if name in parsed_ms else _time_ms(texts[name])

    # The typing (regular expressions, casts) is projected once, and the checks and the output
    # read its columns: inlined into one expression, Spark would run it in the filter that keeps
    # the accepted records and again in the projection after it, several times a field (10M
    # records: 7.4 -> 6.0 s a read, warm).
    typing = {"_event_time": time_ms(source.event_time)}
    if source.ingest_time:
        typing["_ingest_time"] = time_ms(source.ingest_time)
    if source.offset:
        typing["_offset"] = F.trim(texts[source.offset]).try_cast("bigint")
    value_names = {c: f"_typed{i}" for i, c in enumerate(config.value_columns())}
    for column, name in value_names.items():
        typing[name] = _typed_value(texts[column], config.column_type(column))
    text_names = {field: f"_text{i}" for i, field in enumerate(texts)}
    lines = lines.select(
        "_file", "_file_index", "_line", "_raw", "_pre_reason", "_pre_detail",
        *[texts[field].alias(name) for field, name in text_names.items()],
        *[column.alias(name) for name, column in typing.items()],
    )
    texts = {field: F.col(name) for field, name in text_names.items()}

    def shown(name: str) -> Column:
        return F.concat(F.lit(f"{name}='"), F.substring(texts[name], 1, _DETAIL_VALUE_CHARS), F.lit("'"))

    missing = [F.when(texts[n].isNull(), F.lit(n)) for n in required]
    any_missing = reduce(Column.__or__, [texts[n].isNull() for n in required])
    event_ms = F.col("_event_time")
    typed: dict[str, Column] = {}
    type_errors = []
    if source.ingest_time:
        typed["_ingest_time"] = F.col("_ingest_time")
        type_errors.append(F.when(typed["_ingest_time"].isNull(), F.concat(
            shown(source.ingest_time), F.lit(" is not epoch ms or ISO-8601 with a zone"))))
    if source.offset:
        typed["_offset"] = F.col("_offset")
        type_errors.append(F.when(typed["_offset"].isNull(), F.concat(
            shown(source.offset), F.lit(" is not a long"))))
    for column in config.value_columns():
        kind = config.column_type(column)
        value = F.col(value_names[column])
        typed[column] = value
        # Absent or null values are fine (aggregates skip nulls); present and wrong is not.
        type_errors.append(F.when(texts[column].isNotNull() & value.isNull(), F.concat(
            shown(column), F.lit(f" is not a {'finite double' if kind == 'double' else kind}"))))
    any_type_error = reduce(Column.__or__, [e.isNotNull() for e in type_errors], F.lit(False))

    outcome = F.when(F.col("_pre_reason").isNotNull(),
                     F.struct(F.col("_pre_reason").alias("r"), F.col("_pre_detail").alias("d")))
    outcome = (
        outcome.when(any_missing, F.struct(
            F.lit("missing_field").alias("r"),
            F.concat(F.lit("missing or null: "), F.concat_ws(", ", *missing)).alias("d")))
        .when(event_ms.isNull(), F.struct(
            F.lit("invalid_timestamp").alias("r"),
            F.concat(shown(source.event_time),
                     F.lit(" is not epoch ms or ISO-8601 with a zone (Z or +hh:mm)")).alias("d")))
        .when(any_type_error, F.struct(
            F.lit("invalid_type").alias("r"), F.concat_ws("; ", *type_errors).alias("d")))
    )
    checked = lines.select(
        "_file", "_file_index", "_line", "_raw",
        outcome.alias("_outcome"),
        event_ms.alias("_event_time"),
        typed.get("_ingest_time", F.lit(None).cast("bigint")).alias("_ingest_time"),
        (texts[source.partition] if source.partition else F.lit("0")).alias("_partition"),
        typed.get("_offset", F.lit(None).cast("bigint")).alias("_offset"),
        (texts[source.id] if source.id else F.lit(None).cast("string")).alias("_id"),
        *[texts[k].alias(k) for k in config.key],
        *[typed[c].alias(c) for c in config.value_columns()],
    )
    return checked


def _time_ms(text: Column) -> Column:
    """Epoch ms from an integer string, or from ISO-8601 with an explicit zone; else NULL.

    A zone-less time is refused rather than read in some default zone: the same archive must
    give the same event times wherever it is replayed.
    """
    value = F.trim(text)
    iso = F.regexp_replace(value, _ISO_NO_SECONDS, "$1:00$2")
    return (
        F.when(value.rlike(_EPOCH_MS), value.try_cast("bigint"))
        .when(value.rlike(_ISO_WITH_ZONE), F.unix_millis(iso.try_cast("timestamp")))
    )


def _typed_value(text: Column, kind: str) -> Column:
    if kind == "string":
        return text
    if kind == "long":
        return F.trim(text).try_cast("bigint")
    if kind == "double":
        value = F.trim(text).try_cast("double")
        # NaN/Infinity would poison every sum and average downstream: treat them as bad values.
        return F.when(~F.isnan(value) & (F.abs(value) != F.lit(float("inf"))), value)
    # Spark's boolean cast also takes yes/no/1/0/t/f: only JSON's true and false are booleans.
    lowered = F.lower(F.trim(text))
    return F.when(lowered == "true", F.lit(True)).when(lowered == "false", F.lit(False))
