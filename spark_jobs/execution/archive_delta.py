"""A Delta table as an archive (``source.format: delta``): its data files, listed without a JVM.

Delta never rewrites a data file in place: a commit adds files and removes files. So each data
file of the table's snapshot is an immutable ``ArchiveFile`` (its size and its add action's
modification time), ingested once and recorded in ``source_files`` like any archive file, and read
by the Parquet reader (``archive_parquet``: ``_line`` is the row's position in its file, typing and
quarantine as for Parquet). "Changed" for a Delta file means removed by a later commit (DELETE,
UPDATE, MERGE, OPTIMIZE, an overwrite): the ingest then stops with ``ArchiveChangedError`` naming
the commits that removed replayed files.

The replay (arrival) order of the files is the order of the commits that added them, then path
order within a commit; never path order across commits, as Delta names its files at random.
delta-rs (``deltalake``) lists the snapshot: the source's pin (``source.version`` or
``source.timestamp``), else the latest version; the versions before it are walked one by one
(delta-rs applies each commit to the previous snapshot) to learn which commit added each file.

Partition columns, which the data files do not hold, come from each file's add action
(``partition_columns``, typed as the table's schema says). Refused with a ``ConfigError`` before
anything is written: a path that is not a Delta table, column mapping (the Parquet columns are
not the table's names) and deletion vectors (a DELETE would hide rows inside a file that stays
listed: delta-rs does not report the vectors, so the change would go unseen).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..exceptions import ArchiveChangedError, ConfigError
from .archive_files import ArchiveFile, hadoop_local_path
from .object_store import delta_location, delta_uri

if TYPE_CHECKING:
    from ..config import SourceConfig

@dataclass(frozen=True)
class DeltaListing:
    """The data files of one snapshot of a Delta source, in replay order, and where they came from."""

    version: int  #: the snapshot read (the pin, or the latest version)
    files: list[ArchiveFile]
    added: dict[str, int]  #: each file's path -> the version that added it
    removed: dict[str, tuple[int, str]]  #: a removed file's path -> (version, operation) removing it


def _delta_table(path: str, version: int | None = None) -> Any:
    """The Delta source at ``path`` as delta-rs opens it (``object_store.delta_location``; a store
    it leaves to Spark, such as ``gs://``, is tried with delta-rs's own credentials)."""
    from deltalake import DeltaTable

    uri, options = delta_location(path) or (delta_uri(path), None)
    return DeltaTable(uri, version=version, storage_options=options)


def _file_path(source_path: str, relative: str) -> str:
    """A data file's path as Hadoop names it (what ``_metadata.file_path`` decodes to)."""
    from ..config import local_path

    relative = unquote(relative)  # add.path is a URI-encoded path relative to the table's root
    if "://" in relative or relative.startswith("file:"):
        return relative
    local = local_path(source_path)
    if local is not None:
        return hadoop_local_path(os.path.join(local, relative))
    return source_path.rstrip("/") + "/" + relative


def _open(source: SourceConfig, where: str) -> Any:
    from ..config import parse_instant

    try:
        table = _delta_table(source.path)
    except Exception as error:  # TableNotFoundError, or an unreachable store
        raise ConfigError(f"{where}.path", f"{source.path} is not a readable Delta table "
                          f"(no _delta_log?): {type(error).__name__}: {error}") from None
    try:
        if source.version is not None:
            table.load_as_version(source.version)
        elif source.timestamp is not None:
            ms = parse_instant(source.timestamp, f"{where}.timestamp")
            table.load_as_version(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))
    except Exception as error:
        pin = f"version {source.version}" if source.version is not None else f"timestamp {source.timestamp}"
        raise ConfigError(f"{where}.{'version' if source.version is not None else 'timestamp'}",
                          f"cannot load {pin} of {source.path}: {error}") from None
    return table


def _check_supported(table: Any, source: SourceConfig, where: str) -> None:
    metadata = table.metadata()
    mapping = metadata.configuration.get("delta.columnMapping.mode", "none")
    if mapping != "none":
        raise ConfigError(f"{where}.path", f"{source.path} uses column mapping ({mapping}): not supported "
                          "(the data files' column names are not the table's)")
    protocol = table.protocol()
    features = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    if "deletionVectors" in features or "columnMapping" in (protocol.reader_features or ()):
        raise ConfigError(f"{where}.path", f"{source.path} has deletion vectors enabled: not supported "
                          "(a DELETE would hide rows inside files that stay listed, unseen by the "
                          "replay); disable them (delta.enableDeletionVectors=false) and purge them "
                          "(REORG TABLE ... APPLY (PURGE)) or replay a copy")


def _paths(table: Any) -> list[str]:
    import pyarrow as pa

    return pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()


def _operations(table: Any) -> dict[int, str]:
    operations = {}
    for commit in table.history():
        operation = commit.get("operation", "?")
        mode = (commit.get("operationParameters") or {}).get("mode")
        operations[int(commit["version"])] = f"{operation} ({mode})" if mode else operation
    return operations


def list_delta(source: SourceConfig, where: str = "source",
               known: Collection[str] | None = None) -> DeltaListing:
    """The data files of ``source``'s snapshot (its pin, else the latest version), in replay order:
    by the version that added each file, then by path.

    ``known`` (the paths already ingested, any source's) spares the walk over the table's history:
    only the versions that added the files not yet known are looked up, walking back from the
    snapshot (a run that picks up a few appends loads a few versions); which commits removed a
    known file is looked up only when one is missing. Without it (or when nothing is known yet)
    every version is walked forward once, and ``added`` names every file's version."""
    table = _open(source, where)
    _check_supported(table, source, where)
    version = table.version()
    rows = _add_rows(table)
    if not known:
        added, removed = _walk_forward(source, table, version)
    else:
        present = {_file_path(source.path, row["path"]) for row in rows}
        added = _walk_back(source, version, [row["path"] for row in rows
                                             if _file_path(source.path, row["path"]) not in known])
        prefix = _file_path(source.path, "x")[:-1]
        gone = any(path.startswith(prefix) and path not in present for path in known)
        removed = _walk_forward(source, table, version)[1] if gone else {}
    files = [
        ArchiveFile(_file_path(source.path, row["path"]), int(row["size_bytes"]),
                    int(row["modification_time"]))
        for row in sorted(rows, key=lambda r: (added.get(r["path"], -1), r["path"]))
    ]
    return DeltaListing(
        version, files,
        {_file_path(source.path, p): v for p, v in added.items()},
        {_file_path(source.path, p): r for p, r in removed.items()},
    )


def _walk_forward(source: SourceConfig, table: Any, version: int
                  ) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
    """Every version up to ``version``, oldest first (delta-rs applies each commit to the previous
    snapshot): the version that added each file of the snapshot, and the (version, operation) that
    removed each file no longer in it. Starts at the oldest version still loadable: 0, or (once
    old log files were cleaned up) a checkpoint's, whose files all count as added there."""
    operations = _operations(table)
    walker, start = table, version
    for candidate in sorted(v for v in operations if v <= version):
        try:
            walker = _delta_table(source.path, version=candidate)
            start = candidate
            break
        except Exception:  # noqa: BLE001 - its log entry was cleaned up: try the next
            continue
    added: dict[str, int] = {}
    removed: dict[str, tuple[int, str]] = {}
    previous: set[str] = set()
    for current in range(start, version + 1):
        if current != walker.version():
            walker.load_as_version(current)
        paths = set(_paths(walker))
        for path in paths - previous:
            added[path] = current
            removed.pop(path, None)
        for path in previous - paths:
            removed[path] = (current, operations.get(current, "?"))
        previous = paths
    return added, removed


def _walk_back(source: SourceConfig, version: int, wanted: list[str]) -> dict[str, int]:
    """The version that added each of ``wanted`` (files of the snapshot at ``version``): the
    versions are loaded newest first until none of them is in one; a file still there at the
    oldest loadable version counts as added there (as ``_walk_forward`` counts it)."""
    left, added = set(wanted), {}
    if not left:
        return added
    walker = _delta_table(source.path, version=version)
    current = version
    while left and current > 0:
        try:
            walker.load_as_version(current - 1)
        except Exception:  # noqa: BLE001 - its log entry was cleaned up: the rest are older
            break
        before = set(_paths(walker))
        for path in [p for p in left if p not in before]:
            added[path] = current
            left.discard(path)
        current -= 1
    added.update(dict.fromkeys(left, current))
    return added


def _add_rows(table: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    return pa.table(table.get_add_actions(flatten=True)).select(
        ["path", "size_bytes", "modification_time"]).to_pylist()


def check_delta_unchanged(listing: DeltaListing, known: dict[str, dict[str, Any]], path: str) -> None:
    """Refuse to go on when a commit after the replay removed (rewrote) files already replayed;
    the message names the commits. (``ingest.check_archive_unchanged`` then checks the rest.)"""
    prefix = _file_path(path, "x")[:-1]  # the table's root, with its slash
    gone = sorted(p for p in known if p.startswith(prefix) and p not in {f.path for f in listing.files})
    if not gone:
        return
    commits: dict[tuple[int, str], list[str]] = {}
    for name in gone:
        commits.setdefault(listing.removed.get(name, (-1, "")), []).append(name)
    lines = [
        f"version {v} ({operation}) removed {len(names)} replayed file(s), e.g. {names[0]}" if v >= 0 else
        f"{len(names)} replayed file(s) are not in version {listing.version} (added by a later version: "
        f"was the pin moved back?), e.g. {names[0]}"
        for (v, operation), names in sorted(commits.items())
    ]
    raise ArchiveChangedError(
        f"the Delta source {path}, read at version {listing.version}, no longer holds data already "
        "replayed (a non-append commit rewrote it: DELETE, UPDATE, MERGE, OPTIMIZE or an overwrite); "
        "replaying would silently differ from the results already written. Restore the table "
        "(RESTORE TABLE ... TO VERSION AS OF), pin source.version to a version before the rewrite, "
        "or start over with `replay reset`:\n  " + "\n  ".join(lines)
    )


def partition_columns(source: SourceConfig, files: list[ArchiveFile]) -> tuple[Any, dict[str, tuple]] | None:
    """A partitioned table's partition columns, which its data files do not hold: their Spark
    schema (the table's types) and each of ``files``' values, for ``read_parquet``'s
    ``file_columns``; None for a table without partitions."""
    import pyarrow as pa
    from pyspark.sql.types import StructType

    table = _open(source, "source")
    names = table.metadata().partition_columns
    if not names:
        return None
    schema = StructType.fromJson(json.loads(table.schema().to_json()))  # Delta's is Spark's JSON
    actions = pa.table(table.get_add_actions(flatten=True))
    rows = actions.select(["path", *[f"partition.{name}" for name in names]]).to_pylist()
    values = {_file_path(source.path, row["path"]): tuple(row[f"partition.{name}"] for name in names)
              for row in rows}
    gone = [f.path for f in files if f.path not in values]
    if gone:
        raise ArchiveChangedError(f"the Delta source {source.path} changed while it was read: "
                                  f"{len(gone)} listed file(s) are gone, e.g. {gone[0]}")
    return StructType([schema[name] for name in names]), values
