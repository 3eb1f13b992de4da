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

Every evaluation re-reads the archive: a big ingest reads it twice (narrow keys, then the staged
records) rather than caching it, which costs less than filling a cache; a small one collects
every checked line once (``ingest_once``).

zstd files (``.zst``) go the gzip way; CSV files (with a header line) are cut into lines by the
same splitter and parsed line by line (``archive_csv``). A field may be a nested path
(``payload.ts``): JSON Lines and CSV read it from the top-level field's JSON text, Parquet through
its structs (``archive_checks.nested_texts``/``schema_texts``).

Avro files (``archive_avro``) are checked block by block first, then read by Spark's Avro source;
a record's ``_line`` is its 1-based number in its file, and a damaged file keeps the records of
its sound blocks and leaves one ``unreadable_file`` row.

This module is the readers' entry (listing, ``check_archive``, ``accepted``/``rejected``,
``line_count``); the formats are ``archive_jsonl`` (with ``archive_lines``, the line splitter),
``archive_parquet`` and ``archive_csv``, and the typing and checks they share ``archive_checks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..config import local_path
from ..exceptions import ConfigError
from .archive_avro import avro_record_count, read_avro
from .archive_checks import CheckedArchive, empty_checked, glob_escaped, quote
from .archive_csv import read_csv
from .archive_delta import list_delta, partition_columns
from .archive_files import (
    QUARANTINE_FROM_CHECKED,
    QUARANTINE_REASONS,
    ArchiveFile,
    data_suffixes,
    in_archive_order,
    is_data_file,
    list_local_archive,
)
from .archive_jsonl import gzip_lines, plain_and_gzip, read_jsonl
from .archive_parquet import parquet_footers, read_parquet
from .object_store import is_s3, list_s3_archive
from .spark_session import is_connect

if TYPE_CHECKING:
    from ..config import PipelineConfig, SourceConfig

__all__ = [
    "QUARANTINE_COLUMNS", "QUARANTINE_REASONS", "RECORD_COLUMNS", "ArchiveFile", "CheckedArchive",
    "accepted", "check_archive", "line_count", "list_archive", "read_archive", "record_columns",
    "rejected",
]

RECORD_COLUMNS = (
    "_file", "_file_index", "_line", "_event_time", "_ingest_time", "_partition", "_offset", "_id",
    "_raw",
)
QUARANTINE_COLUMNS = ("source_file", "line", "raw", "reason", "detail")


# ---- listing -------------------------------------------------------------------------------------
def list_archive(spark: SparkSession, source: SourceConfig) -> list[ArchiveFile]:
    """The archive's data files, in archive order (``archive_files.in_archive_order``).

    ``source.path`` is a file or a directory walked recursively; which files are data is
    ``archive_files.is_data_file``. A Delta source (``archive_delta``) lists its snapshot's data
    files instead, in commit order.
    """
    if source.format == "delta":
        return list_delta(source).files
    if is_connect(spark):
        return _list_without_jvm(spark, source)
    suffixes = data_suffixes(source.format)
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(source.path)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(root):
        raise ConfigError("source.path", f"no such file or directory: {source.path}")
    # S3A's statuses carry the object's ETag (Hadoop's EtagSource); one more call a file, so
    # only asked of the store that has them.
    etags = fs.getScheme() == "s3a"

    def archive_file(status: Any) -> ArchiveFile:
        return ArchiveFile(status.getPath().toString(), status.getLen(), status.getModificationTime(),
                           (status.getEtag() or None) if etags else None)

    root_status = fs.getFileStatus(root)
    if root_status.isFile():
        path = root_status.getPath().toString()
        if not path.lower().endswith(suffixes):
            raise ConfigError(
                "source.path", f"{path} is not a {source.format} file ({', '.join(suffixes)})"
            )
        return [archive_file(root_status)]
    root_path = root_status.getPath().toString()
    files = []
    # listFiles(recursive) is one flat listing on object stores, unlike a directory-by-directory
    # walk; hidden directories are therefore filtered by the relative path afterwards.
    entries = fs.listFiles(root, True)
    while entries.hasNext():
        status = entries.next()
        if is_data_file(_relative(status.getPath().toString(), root_path), suffixes):
            files.append(archive_file(status))
    return in_archive_order(files, source.layout)


def _list_without_jvm(spark: SparkSession, source: SourceConfig) -> list[ArchiveFile]:
    """``list_archive`` for a Spark Connect client, which has no Hadoop ``FileSystem``: a local
    archive (the disk it shares with a server on this machine) or one on S3 is listed here, named
    and timed as Hadoop names and times it (on S3 without ETags: pyarrow's listing has none, so
    changes are found by size and Last-Modified, as ``pending_work`` finds them); any other is
    listed by the server's file index (``binaryFile`` without its content column, so no file is
    opened)."""
    local = local_path(source.path)
    if local is not None or is_s3(source.path):
        try:
            if local is not None:
                return list_local_archive(local, source.format, source.layout)
            return list_s3_archive(source.path, source.format, source.layout)
        except FileNotFoundError:
            raise ConfigError("source.path", f"no such file or directory: {source.path}") from None
        except ValueError as error:
            raise ConfigError("source.path", str(error)) from None
    suffixes = data_suffixes(source.format)
    listing = (
        spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(source.path)
        .select("path", "length", F.expr("div(unix_micros(modificationTime), 1000)").alias("mtime"))
        .collect()
    )
    files = [
        ArchiveFile(row["path"], int(row["length"]), int(row["mtime"])) for row in listing
        if is_data_file(_relative(row["path"], source.path), suffixes)
    ]
    return in_archive_order(files, source.layout)


def _relative(path: str, root: str) -> str:
    """A listed file's path below the archive's root (its name, if the listing named it some
    other way), for ``is_data_file``."""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path.rsplit("/", 1)[-1]


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
        return CheckedArchive(empty_checked(spark, config), 0)
    if config.source.format == "delta":  # a Delta table's data files are Parquet
        columns = partition_columns(config.source, files)
        return read_parquet(spark, config, files, indexes, only, file_columns=columns)
    if config.source.format == "parquet":
        return read_parquet(spark, config, files, indexes, only)
    if config.source.format == "csv":
        return read_csv(spark, config, files, indexes, only)
    if config.source.format == "avro":
        return read_avro(spark, config, files, indexes, only)
    return read_jsonl(spark, config, files, indexes, only)


def accepted(checked: DataFrame, config: PipelineConfig) -> DataFrame:
    """The accepted records of ``check_archive``'s rows."""
    return checked.where(F.col("_outcome").isNull()).select(*record_columns(config))


def record_columns(config: PipelineConfig) -> list[Column]:
    """A record's columns, as ``accepted`` takes them from ``check_archive``'s rows."""
    return [
        F.col("_file"), F.col("_file_index").cast("int"), F.col("_line").cast("bigint"),
        *[F.col(name) for name in ("_event_time", "_ingest_time", "_partition", "_offset", "_id", "_raw")],
        *[F.col(quote(k)) for k in config.key],
        *[F.col(quote(c)) for c in config.value_columns()],
    ]


def accepted_flag() -> Column:
    """Whether a checked line is a record (its outcome null), as ``_ok``."""
    return F.col("_outcome").isNull().alias("_ok")


def outcome_columns() -> list[Column]:
    """A checked line's outcome as columns: ``_ok`` (``accepted_flag``), ``_reason`` and
    ``_detail`` (why it is quarantined; null for a record)."""
    return [accepted_flag(), F.col("_outcome.r").alias("_reason"), F.col("_outcome.d").alias("_detail")]


def rejected(checked: DataFrame) -> DataFrame:
    """The quarantine rows of ``check_archive``'s rows (``QUARANTINE_FROM_CHECKED``)."""
    lines = checked.where(F.col("_outcome").isNotNull()).select("*", *outcome_columns())
    return lines.select(*(F.col(line).alias(name) for name, line in QUARANTINE_FROM_CHECKED)).withColumn(
        "line", F.col("line").cast("bigint"))


def line_count(spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile]) -> int:
    """At least as many as the records in ``files`` (their lines, or Parquet rows), read without
    parsing anything: a bound for what the driver would have to hold."""
    if not files:
        return 0
    if config.source.format in ("parquet", "delta"):
        return sum(rows for _, rows in parquet_footers(spark, files))
    if config.source.format == "avro":
        return avro_record_count(spark, files)
    if config.source.format == "csv":  # every line, the headers too: an upper bound
        return gzip_lines(spark, files, {f.path: i for i, f in enumerate(files)}).count()
    plain, packed = plain_and_gzip(files)
    count = spark.read.text([glob_escaped(f.path) for f in plain]).count() if plain else 0
    if packed:
        count += gzip_lines(spark, packed, {f.path: i for i, f in enumerate(packed)}).count()
    return count
