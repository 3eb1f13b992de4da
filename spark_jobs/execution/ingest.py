"""A run's ingest: the archive files not yet ingested are read, checked (bad lines go to
``quarantine``), numbered in replay order (``_seq``, see ``ordering``), cut into micro-batches and
staged in ``staging``; their ``source_files`` rows, written last, complete the ingest (an ingest
without them is redone from scratch).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa

from ..config import PipelineConfig
from ..exceptions import ArchiveChangedError
from .archive_delta import check_delta_unchanged, list_delta
from .archive_files import change_of
from .faults import crash_point
from .ingest_once import collected_columns, ingested_columns, reads_once, stage_on_driver
from .ordering import (
    driver_key_columns,
    give_back_freed_memory,
    lines_in_replay_order,
    number_records,
    order_columns,
    sort_key_columns,
)
from .passes import Progress, RunSummary, profile
from .recovery import committed_log
from .semantics_guard import semantics_text
from .state.delta import DeltaStore

#: How ``staging`` is written (besides its statistics columns): records are staged in ranges of
#: ``_seq`` and row groups of 2 MB, so a pass of a few thousand records reads little more than its
#: own row groups; raw lines and ids, a value per row, get no dictionary; zstd, as the raw lines
#: are most of the table (10M records: 297 MB against snappy's 598, written as fast).
STAGING_LAYOUT = {"row_group_bytes": 2 << 20, "unique_columns": ("_raw", "_id"), "compression": "zstd"}
#: What reads of ``staging`` filter on: the only columns its files keep statistics of.
STAGING_STATS_COLUMNS = ("_seq", "_batch", "_ingest")

#: An archive whose size allows up to this many times ``batch.sort_on_driver_max_records`` lines
#: (each its shortest possible record) has its keys collected by the first read without counting
#: its lines first: a read of the archive less (2 s of a fresh 10M replay, whose 1.6 GB allow 23M).
DRIVER_SLACK = 1.25

#: Where the quarantined lines are, as the quarantine's own read of the archive takes them.
QUARANTINED_LINES = pa.schema([("_file_index", pa.int32()), ("_line", pa.int64())])

#: ``source_files``' columns, a row per ingested archive file (its ``etag`` came after the first
#: release's tables, which gain it by schema evolution).
SOURCE_FILES_SCHEMA = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("modified_ms", pa.int64()), ("file_index", pa.int32()),
    ("ingest_id", pa.int64()), ("records", pa.int64()), ("quarantined", pa.int64()),
    ("seq_start", pa.int64()), ("seq_end", pa.int64()), ("batch_start", pa.int64()),
    ("batch_end", pa.int64()), ("etag", pa.string()),
    ("semantics", pa.string()),  # what the ingest was staged under (``semantics_guard``)
])


def known_files(store: DeltaStore) -> dict[str, dict[str, Any]]:
    """``source_files``' rows by path. A lakehouse this process reaches (the local disk, S3) is
    read with delta-rs: no Spark job (over Spark Connect it was 2.3 s of a one-batch run on the
    local disk, 0.33 s on S3); elsewhere Spark."""
    from .state.delta_rs import DeltaRsReader

    if DeltaRsReader.reaches(store.config):
        return DeltaRsReader(store.config).source_files()
    if not store.exists("source_files"):
        return {}
    return {row["path"]: row.asDict() for row in store.read("source_files").collect()}


def check_archive_unchanged(files: list[Any], known: dict[str, dict[str, Any]]) -> None:
    """Refuse to go on when a file that was already replayed changed or disappeared."""
    present = {f.path: f for f in files}
    problems = []
    for path, seen in sorted(known.items()):
        current = present.get(path)
        if current is None:
            problems.append(f"removed: {path}")
        elif (change := change_of(seen, current)) is not None:
            problems.append(f"changed: {path} ({change})")
    if problems:
        raise ArchiveChangedError(
            "the archive changed under files that were already replayed; replaying would silently "
            "differ from the results already written. Restore the files, or start over with "
            "`replay reset`:\n  " + "\n  ".join(problems)
        )


class StepClock:
    """Seconds spent in each named step since the previous one (``REPLAY_PROFILE`` output)."""

    def __init__(self) -> None:
        self.mark = time.time()
        self.steps: dict[str, float] = {}

    def step(self, name: str) -> None:
        now = time.time()
        self.steps[name] = now - self.mark
        self.mark = now


@dataclass
class Staged:
    """What staging an ingest gave: records and quarantined lines per archive file index, the
    quarantine's write (a future), and what this run's passes take from the ingest (None: they
    read ``staging``)."""

    per_file_records: np.ndarray
    per_file_bad: np.ndarray
    quarantine: Future
    ingested: tuple[int, int, Any] | None


class NewLines:
    """The new archive files of an ingest, as checked lines: each input's (a join has two)."""

    def __init__(self, spark: Any, config: PipelineConfig, sources: list[Any], files: list[list[Any]],
                 first_index: int):
        self.spark = spark
        self.config = config
        self.sources = sources
        self.files = files
        self.first_index = first_index  # the first new file's index (files are numbered in order)

    def read(self, only: Any = None) -> list[tuple[Any, Callable[[Any], Any]]]:
        """Each input's checked archive (``sources.check_archive``; ``only``: just those lines)
        and a function adding its input number (``_input``, joins) to a frame of its rows."""
        from pyspark.sql import functions as F

        from .sources import check_archive

        parts, first_index = [], self.first_index
        for number, (source, files) in enumerate(zip(self.sources, self.files, strict=True)):
            config = self.config if number == 0 else replace(self.config, source=source)
            checked = check_archive(self.spark, config, files, first_index, only)
            first_index += len(files)

            def tag(frame: Any, number: int = number) -> Any:
                if self.config.join is None:
                    return frame
                return frame.withColumn("_input", F.lit(number).cast("long"))

            parts.append((checked, tag))
        return parts

    @staticmethod
    def union(frames: list[Any]) -> Any:
        return reduce(lambda a, b: a.unionByName(b), frames)


class Ingest:
    """The ingest of one run (``ingest``), with what it reads of the pipeline's tables."""

    def __init__(self, spark: Any, config: PipelineConfig, store: DeltaStore, batch_size: int,
                 pool: Executor, progress: Progress):
        self.spark = spark
        self.config = config
        self.store = store
        self.batch_size = batch_size
        self.pool = pool  # the run's Delta writes: quarantine and source_files beside the rest
        self.progress = progress

    def ingest(
        self, summary: RunSummary, kept_columns: Callable[[int], list[str]]
    ) -> tuple[Future | None, tuple[int, int, Any] | None]:
        """Read the new archive files: number their records into ``staging``, quarantine the rest.
        Returns the commit of their ``source_files`` rows, which completes the ingest, and what the
        passes take from it (``PassComputer.ingested``); both None when there was nothing new.
        ``kept_columns(records)`` names the record columns the passes want kept on the driver.

        A small ingest is read once, its rows collected on the driver (``stage_read_once``); a
        larger one twice by Spark (``stage_read_twice``).
        """
        # sources imports pyspark at module level: kept here so importing the replay stays light.
        from .sources import line_count, list_archive

        sources = self.config.sources()
        known = known_files(self.store)
        # A Delta source's snapshot (archive_delta): its files, and the commits that removed any.
        deltas = {number: list_delta(source, known=known)
                  for number, source in enumerate(sources) if source.format == "delta"}
        listed = [deltas[number].files if number in deltas else list_archive(self.spark, source)
                  for number, source in enumerate(sources)]
        for number, listing in deltas.items():
            check_delta_unchanged(listing, known, sources[number].path)
        check_archive_unchanged([f for files in listed for f in files], known)
        read_versions = {sources[number].path: listing.version for number, listing in deltas.items()}
        for path, version in read_versions.items():
            self.progress(f"[{self.config.name}] Delta source {path}: version {version}")
        new_per_input = [[f for f in files if f.path not in known] for files in listed]
        new = [f for files in new_per_input for f in files]
        if not new:
            return None, None
        clock = StepClock()
        ingest_id = max((v["ingest_id"] for v in known.values()), default=-1) + 1
        seq_base, batch_base = self.next_positions(known)
        new_lines = NewLines(self.spark, self.config, sources, new_per_input, len(known))
        parts = new_lines.read()
        clock.step("listed")
        bound = None if any(c.max_rows is None for c, _ in parts) else sum(c.max_rows for c, _ in parts)
        # Counting the lines reads the archive once more: done only when its size leaves room for
        # more than the driver collects (or says nothing: gzip). Up to that the first read collects
        # the keys anyway, and the records past the limit are then numbered on the cluster all the same.
        if bound is None or bound > self.config.sort_on_driver_max_records * DRIVER_SLACK:
            bound = sum(
                line_count(self.spark, replace(self.config, source=source), files)
                for source, files in zip(sources, new_per_input, strict=True)
            )
        files = len(known) + len(new)
        file_indexes = {f.path: len(known) + i for i, f in enumerate(new)}  # as NewLines numbers them
        stage = self.stage_read_once if self.reads_once(bound, new) else self.stage_read_twice
        staged = stage(new_lines, parts, bound, kept_columns, files, seq_base, batch_base, ingest_id, clock)
        accepted_count = int(staged.per_file_records.sum())
        quarantined = int(staged.per_file_bad.sum())
        clock.step("staged")
        semantics = semantics_text(self.config)
        rows = pa.Table.from_pylist([
            {"path": f.path, "size": f.size, "modified_ms": f.modified_ms,
             "file_index": file_indexes[f.path], "ingest_id": ingest_id,
             "records": int(staged.per_file_records[file_indexes[f.path]]),
             "quarantined": int(staged.per_file_bad[file_indexes[f.path]]),
             "seq_start": seq_base, "seq_end": seq_base + accepted_count, "batch_start": batch_base,
             "batch_end": batch_base + -(-accepted_count // self.batch_size), "etag": f.etag,
             "semantics": semantics}
            for f in new
        ], schema=SOURCE_FILES_SCHEMA)

        def commit() -> None:
            # Written last, once staging and quarantine are: an ingest without its source_files
            # rows is redone from scratch. The Delta sources' versions read go into the commit's
            # info (DESCRIBE HISTORY source_files).
            self.store.settled("staging")  # (a small ingest's is written behind: stage_read_once)
            crash_point("ingest:staged")
            staged.quarantine.result()
            crash_point("ingest:quarantined")
            self.store.replace_rows(
                rows, "source_files", f"ingest_id = {ingest_id}",
                user_metadata=json.dumps({"delta_versions": read_versions}) if read_versions else None,
                merge_schema=True,  # `etag` came after the first release's tables
            )

        logged = self.pool.submit(commit)
        profile(self.progress, "ingest steps", clock.steps)
        summary.files_ingested += len(new)
        summary.wrote("staging", "quarantine", "source_files")
        summary.records_accepted += accepted_count
        summary.records_quarantined += quarantined
        summary.records_read += accepted_count + quarantined
        self.progress(
            f"[{self.config.name}] ingested {len(new)} files: {accepted_count + quarantined} records, "
            f"{accepted_count} accepted, {quarantined} quarantined"
        )
        return logged, staged.ingested

    def reads_once(self, bound: int, new: list[Any]) -> bool:
        """Whether an ingest of at most ``bound`` lines in the ``new`` files is read once
        (``ingest_once``): small enough for the driver to hold and number (within ``DRIVER_SLACK``
        of ``batch.sort_on_driver_max_records``), and its tables within this process's reach."""
        return (bound <= self.config.sort_on_driver_max_records * DRIVER_SLACK
                and reads_once(self.config, bound, new) and self.store.writes_directly("staging"))

    def stage_read_once(
        self, new_lines: NewLines, parts: list[tuple[Any, Any]], bound: int,
        kept_columns: Callable[[int], list[str]], files: int, seq_base: int, batch_base: int,
        ingest_id: int, clock: StepClock,
    ) -> Staged:
        """Stage a small ingest from one read (``ingest_once``): every checked line collected,
        split, numbered and written from the driver. Its staging is written behind
        (``DeltaStore.write_behind``): this run's passes take their records from the ingest, and
        their reads of ``staging`` (late events' raw lines) wait for it, as the ingest's commit does
        (a 1M-line write is 0.9 s, beside a one-pass run's own 1.1 s)."""
        lines = new_lines.union([tag(checked.frame.select(*collected_columns(self.config)))
                                 for checked, tag in parts]).toArrow()
        clock.step("parsed")
        rows = stage_on_driver(lines, self.config, files, seq_base, batch_base, self.batch_size, ingest_id)
        del lines
        ingested = (seq_base, batch_base,
                    ingested_columns(rows.lines, self.config, kept_columns(bound), rows.replay_order))
        clock.step("numbered")
        quarantine = self.pool.submit(
            self.store.replace_rows, rows.quarantined, "quarantine", f"ingest_id = {ingest_id}",
        )
        self.store.write_behind("staging", self.pool.submit(
            lambda: self.store.replace_rows(rows.staged(), "staging", f"_ingest = {ingest_id}",
                                            stats_columns=STAGING_STATS_COLUMNS, **STAGING_LAYOUT),
        ))
        return Staged(rows.per_file_records, rows.per_file_bad, quarantine, ingested)

    def stage_read_twice(
        self, new_lines: NewLines, parts: list[tuple[Any, Any]], bound: int,
        kept_columns: Callable[[int], list[str]], files: int, seq_base: int, batch_base: int,
        ingest_id: int, clock: StepClock,
    ) -> Staged:
        """Stage an ingest read twice by Spark: once for the narrow sort keys and each line's
        outcome, collected on the driver, which numbers the records (with the columns the passes'
        operator reads, when those passes run on the driver: ``PassComputer.kept_record_columns``);
        once more for the full records, staged with their numbers. Quarantined lines, known by
        then, are read a third time on their own. (A cache costs more to fill than a second read.)"""
        from pyspark.sql import functions as F

        from .sources import accepted, accepted_flag, rejected

        limit = self.config.sort_on_driver_max_records
        on_driver = bound <= limit * DRIVER_SLACK
        records = new_lines.union([tag(accepted(checked.frame, self.config)) for checked, tag in parts])
        # One read: every accepted record's sort keys (driver numbering), and where the
        # quarantined lines are; the operator's columns too when this run's passes take their
        # records from here. Past the driver's limit the same read has Spark sort the lines' keys.
        kept = kept_columns(bound) if on_driver else []
        if on_driver:
            wanted = list(dict.fromkeys([*driver_key_columns(self.config), *kept]))
        else:
            wanted = sort_key_columns(self.config)
        probe = new_lines.union([
            tag(checked.frame).select(accepted_flag(), *wanted)
            for checked, tag in parts
        ])
        outcomes = (probe.toArrow() if on_driver
                    else lines_in_replay_order(probe, order_columns(self.config), files))
        for name in kept:  # (encoded before the rows are filtered and reordered: cheaper to copy)
            index = outcomes.schema.get_field_index(name)
            if pa.types.is_string(outcomes.schema.types[index]):
                outcomes = outcomes.set_column(index, name, outcomes.column(index).dictionary_encode())
        ok = outcomes.column("_ok").to_numpy(zero_copy_only=False)
        # The driver sorts the keys it collected; Spark's sort left the lines in replay order.
        keys = outcomes.filter(ok).drop_columns(["_ok"]) if on_driver else None
        ordered = None if on_driver else outcomes
        bad = outcomes.filter(~ok).select(["_file_index", "_line"]).cast(QUARANTINED_LINES)
        del outcomes, ok  # (100 MB at 100M lines, not held through the numbering)
        per_file_bad = np.bincount(bad.column("_file_index").to_numpy(), minlength=files)
        # The quarantined lines, known now, are read again on their own while the driver numbers
        # the records (one core) and then beside the staging write: both writes are idempotent
        # (replaced by ingest id) until source_files commits the ingest.
        if bad.num_rows:
            bad_rows = new_lines.union([tag(rejected(checked.frame)) for checked, tag in new_lines.read(bad)])
            if self.config.join is not None:
                bad_rows = bad_rows.drop("_input")
        else:
            bad_rows = self.spark.createDataFrame(
                [], "source_file string, line bigint, raw string, reason string, detail string"
            )
        quarantine = self.pool.submit(
            self.store.replace_where, bad_rows.withColumn("ingest_id", F.lit(ingest_id).cast("long")),
            "quarantine", f"ingest_id = {ingest_id}",
        )
        if keys is not None and keys.num_rows > limit:  # (collected within DRIVER_SLACK)
            keys = None  # numbered on the cluster
        clock.step("parsed")
        ingested = None
        numbered = number_records(self.spark, self.config, records, seq_base, keys, ordered)
        del ordered
        per_file_records = np.zeros(files, dtype=np.int64)
        for file_index, count in numbered.file_records.items():
            per_file_records[file_index] = count
        numbered_count = int(per_file_records.sum())
        if keys is None and numbered_count:
            self.progress(
                f"[{self.config.name}] {numbered_count} records: numbered on the cluster "
                f"(over batch.sort_on_driver_max_records, {limit})"
            )
        if numbered.replay_order is not None:
            # This run's passes take their watermark timelines (and kept records) from here rather
            # than from staging. (The kept strings are encoded already; _partition, a sort key,
            # only once numbered.)
            columns = ingested_columns(keys, self.config, kept, numbered.replay_order)
            ingested = (seq_base, batch_base, columns)
        del keys
        give_back_freed_memory()  # the collected keys (up to GBs), before the passes take over
        clock.step("numbered")
        batch = F.floor((F.col("_seq") - seq_base) / self.batch_size) + batch_base
        staged = numbered.frame.withColumn("_batch", batch).withColumn("_ingest", F.lit(ingest_id))
        self.store.replace_where(staged, "staging", f"_ingest = {ingest_id}",
                                 stats_columns=STAGING_STATS_COLUMNS, **STAGING_LAYOUT)
        numbered.close()
        return Staged(per_file_records, per_file_bad, quarantine, ingested)

    def next_positions(self, known: dict[str, dict[str, Any]]) -> tuple[int, int]:
        """The next free sequence number and batch id (after staged and committed batches);
        ``known``: what ``known_files`` returns."""
        seq = max((row["seq_end"] or 0 for row in known.values()), default=0)
        batch = max((row["batch_end"] or 0 for row in known.values()), default=0)
        log = committed_log(self.store)
        if log:
            batch = max(batch, log[-1]["batch_id"] + 1)
            seq = max(seq, log[-1]["seq_end"])
        return seq, batch
