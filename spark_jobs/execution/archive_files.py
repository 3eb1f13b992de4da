"""Which files of an archive are data: the one rule, and a listing of a local archive without a JVM.

``sources.list_archive`` lists an archive through Hadoop's ``FileSystem`` (any file system Spark
reaches); ``list_local_archive`` lists one on the local disk with the same rule and the same
path strings, so that deciding whether an Airflow interval has anything to do needs no Spark.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
PARQUET_SUFFIXES = (".parquet",)
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.zst")
AVRO_SUFFIXES = (".avro",)
_SUFFIXES = {"jsonl": JSONL_SUFFIXES, "parquet": PARQUET_SUFFIXES, "csv": CSV_SUFFIXES, "avro": AVRO_SUFFIXES}


#: Every quarantine ``reason`` (the readers' and the quality suite's one list; here, free of Spark).
QUARANTINE_REASONS = (
    "malformed_json", "malformed_csv", "not_an_object", "missing_field", "invalid_type",
    "invalid_timestamp", "truncated_gzip", "truncated_zstd", "unreadable_file", "invalid_object_name",
)

#: A quarantine row's columns (the ingest adds ``ingest_id``), each taken from its checked line's
#: (``_reason`` and ``_detail``: the line's outcome), whichever route stages the ingest: one mapping.
QUARANTINE_FROM_CHECKED = (
    ("source_file", "_file"), ("line", "_line"), ("raw", "_raw"), ("reason", "_reason"),
    ("detail", "_detail"),
)

#: Kafka Connect's sink object name, ``<topic>+<partition>+<startOffset>.<ext>`` (a topic name is
#: ``[A-Za-z0-9._-]``, so ``+`` only separates); a Java regular expression too (Spark SQL reads it).
KAFKA_CONNECT_NAME = r"(?:^|/)([A-Za-z0-9._-]+)\+([0-9]+)\+([0-9]+)\.[^/]*$"
_KAFKA_CONNECT_NAME = re.compile(KAFKA_CONNECT_NAME)


@dataclass(frozen=True)
class ArchiveFile:
    """One archive file as the file system reports it; ``path`` is the qualified Hadoop path.
    ``etag``: an object store's entity tag, where the listing gives one (S3A; None elsewhere)."""

    path: str
    size: int
    modified_ms: int
    etag: str | None = None


def change_of(seen: Mapping[str, Any], current: ArchiveFile) -> str | None:
    """How an ingested file (``seen``: its ``source_files`` row) differs from the listing's
    ``current``, or None when it does not. Size and modification time (on S3 the object's size and
    ``Last-Modified``, which every rewrite sets, in whole seconds), and the ETag when both the
    ingest's listing and this one have it (S3A's): a rewrite to the same size within the second
    of the ingest's listing changes only that."""
    changes = []
    if current.size != seen["size"] or current.modified_ms != seen["modified_ms"]:
        changes.append(f"size {seen['size']} -> {current.size}, "
                       f"modified {seen['modified_ms']} -> {current.modified_ms}")
    known_etag = seen.get("etag")
    if known_etag and current.etag and known_etag != current.etag:
        changes.append(f"etag {known_etag} -> {current.etag}")
    return "; ".join(changes) or None


def data_suffixes(source_format: str) -> tuple[str, ...]:
    return _SUFFIXES[source_format]


def is_data_file(relative: str, suffixes: tuple[str, ...]) -> bool:
    """Whether a file below the archive's root (``relative``: its path from there, ``/``-separated)
    is data. Files and directories whose name starts with ``_`` or ``.`` are skipped, as Spark and
    Hadoop writers use them for markers, checksums and temporary output (``_SUCCESS``, ``.crc``,
    ``_temporary/``); only the format's extensions count, so a README or a ``.tmp`` is never parsed."""
    if any(part.startswith(("_", ".")) for part in relative.split("/")):
        return False
    return relative.lower().endswith(suffixes)


def first_record_line(source_format: str) -> int:
    """The line (Parquet: row) number of a file's first record: CSV files start with a header."""
    return 2 if source_format == "csv" else 1


def kafka_connect_position(path: str) -> tuple[str, int, int] | None:
    """``(topic, partition, start offset)`` from a Kafka Connect object's name, or None."""
    named = _KAFKA_CONNECT_NAME.search(path)
    return (named[1], int(named[2]), int(named[3])) if named else None


def in_archive_order(files: list[ArchiveFile], layout: str | None) -> list[ArchiveFile]:
    """``files`` in the order they arrived, which is the replay order of records without an ingest
    time: by path; with the ``kafka_connect`` layout by topic, partition and start offset as
    numbers (Kafka Connect pads offsets to 10 digits by default, but need not), objects whose name
    does not parse last, by path (their records are quarantined)."""
    if layout != "kafka_connect":
        return sorted(files, key=lambda f: f.path)

    def position(f: ArchiveFile) -> tuple:
        named = kafka_connect_position(f.path)
        return (0, *named, f.path) if named else (1, "", 0, 0, f.path)

    return sorted(files, key=position)


def hadoop_local_path(path: str) -> str:
    """The string Hadoop's local file system gives a path: ``file:`` and the absolute path."""
    return "file:" + os.path.abspath(path)


def list_local_archive(root: str, source_format: str, layout: str | None = None) -> list[ArchiveFile]:
    """The data files of an archive on the local disk, in archive order (``in_archive_order``),
    named and timed as ``sources.list_archive`` names and times them. Raises FileNotFoundError
    when ``root`` is missing and ValueError when it is a file of another format."""
    suffixes = data_suffixes(source_format)
    if os.path.isfile(root):
        if not root.lower().endswith(suffixes):
            raise ValueError(f"{root} is not a {source_format} file ({', '.join(suffixes)})")
        return [_archive_file(root)]
    if not os.path.isdir(root):
        raise FileNotFoundError(root)
    files = []
    for directory, _subdirectories, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if is_data_file(os.path.relpath(path, root).replace(os.sep, "/"), suffixes):
                files.append(_archive_file(path))
    return in_archive_order(files, layout)


def _archive_file(path: str) -> ArchiveFile:
    status = os.stat(path)
    # Hadoop's local file system reports File.lastModified(): whole milliseconds, truncated.
    return ArchiveFile(hadoop_local_path(path), status.st_size, status.st_mtime_ns // 1_000_000)
