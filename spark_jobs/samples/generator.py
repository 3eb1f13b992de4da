"""Deterministic sample archives: realistic event logs for demos, tests and benchmarks.

``generate_archive(out_dir, spec)`` writes what a Kafka-to-object-store sink leaves behind::

    out_dir/partition=0/part-00000.jsonl      (or .jsonl.gz, .jsonl.zst, .parquet, .csv, .avro)
    out_dir/partition=0/part-00001.jsonl
    out_dir/partition=1/part-00000.jsonl
    ...

Within a partition, the lexicographic listing of its files is the write order and each file is
in offset order (note that ``partition=10`` sorts before ``partition=2``: order by the partition
number, then the name). Each JSON line is one object in the ``json.dumps`` spelling, so
``json.dumps(json.loads(line))`` gives the line back::

    {"event_id": "e0-17", "user_id": "u42", "ts": 1700000001234, "ingest_ts": 1700000003456,
     "partition": 0, "offset": 17, "page": "/checkout", "value": 39.9}

* clickstream: key ``user_id`` (``u<n>``), ``page``, ``value`` (cart price or purchase amount,
  0.0 on every other page); sensor: key ``sensor_id`` (``s<n>``), ``temperature`` (Celsius,
  per-sensor baseline plus a daily cycle and noise) and ``value`` (relative humidity, %).
* ``event_id`` is ``e<partition>-<n>``: unique, except deliberate duplicates.
* ``ingest_ts`` (the broker's append time) is a Poisson process per partition: non-decreasing
  in offset order. ``offset`` counts 0, 1, 2, ... per partition across its files.
* ``ts`` (event time) is ``ingest_ts - delay``. Ordinary records have a delay in
  ``[0, max_out_of_orderness_ms]`` (truncated exponential, mean about a quarter of the bound),
  so a watermark with that out-of-orderness never finds them late (all partitions share one
  ingest clock, so this holds for the combined watermark too). A ``late_fraction`` of the
  records are *very late*: delay = the bound + log-uniform between 1 s and 10 min, i.e. from
  "just behind the watermark" (LATE panes within an allowed lateness) to minutes behind
  (dropped / side output). ``iso_timestamps`` writes ``ts`` as ``2023-11-14T22:13:20.123Z``.
* CSV (``csv``) is the Parquet table written by Arrow's CSV writer: a header line, then one
  line a row, strings quoted, a null as an empty value; its corrupt rows are Parquet's.
* Parquet has the same columns in the same order: strings, ``ts`` int64 (string with
  ``iso_timestamps``), ``ingest_ts`` and ``offset`` int64, ``partition`` int32, doubles.
* Avro (``avro``) is the Parquet table as Avro records (``avro_writer``: deflate, blocks of 4,000
  records, every field nullable, an integer ``ts`` a ``timestamp-millis``); its corrupt rows are
  Parquet's.
* Kafka Connect (``kafka_connect``) is the JSON Lines archive laid out as Kafka Connect's S3 sink
  names objects, ``topics/<kind>/partition=<p>/<kind>+<p>+<first offset, 10 digits>.json``.

Counting (what :class:`GenerateSummary` reports):

* ``events`` is the number of lines (Parquet rows) written, *including* duplicates and corrupt
  lines; every line has its own ``partition``/``offset``/``ingest_ts``.
* ``duplicates``: a producer retry re-emits an earlier record of the same partition (1 to 10
  records back) with the same payload (``event_id``, key, ``ts``, values) but, as a broker would,
  a new offset and ``ingest_ts``. Each duplicate line is drawn with probability
  ``duplicate_fraction``.
* ``corrupt``: lines drawn with probability ``corrupt_fraction`` are mangled, a mix of:
  truncated JSON, non-JSON garbage (an HTML error page, a log line, a CSV row), a JSON array,
  missing ``ts``, unparsable ``ts`` (``"yesterday"``), missing key field and a non-numeric
  ``value``. Parquet cannot hold malformed JSON or mistyped columns, so its corrupt rows have a
  null ``ts`` or key (and, with ``iso_timestamps``, unparsable ``ts`` strings).
* ``late``: records (not duplicates, not corrupt) whose delay exceeds the out-of-orderness
  bound. Whether a pipeline sees each as a LATE pane or a late event depends on its windows.

Traffic: the span of ingest time is ``events / events_per_second``; partition 0 gets
``1 + skew`` times the traffic of each other partition; with ``idle_partition`` and two or more
partitions, the last partition writes nothing from 40 % to 50 % of the span (idle-timeout
demos) and makes up for it at a higher rate the rest of the time. Keys follow a finite Zipf law
(``1 / rank ** zipf_s``) over a seeded shuffle of the key ids, so ``u0`` is not the top user.

Determinism: partition ``p`` draws from ``default_rng([seed, p, ...])`` only, chunk by chunk,
so partitions are written in parallel threads and the bytes do not depend on scheduling. The
clean records do not depend on ``format`` or ``iso_timestamps`` (corruption draws from its own
stream). Same seed and spec give byte-identical files with the same numpy and pyarrow
versions (pinned in ``requirements.lock``); gzip headers carry no name or mtime.

Speed: columns are numpy arrays, JSON lines are assembled by one Arrow
``binary_join_element_wise`` per chunk of 200k rows and written straight from the Arrow buffer
(no Python object per record), and partitions are written by parallel threads (Arrow, numpy and
zlib release the GIL). Memory stays at a few chunks whatever ``events`` is. Measured by hand on
the 2-core dev box, ``GeneratorSpec(events=N, format=F)`` (clickstream, 4 partitions), wall
time on an idle box / while other jobs loaded it, and total file size:

    ======  ==================  ==================  ==================
    events  jsonl               jsonl.gz (level 1)  parquet (snappy)
    ======  ==================  ==================  ==================
    1M      1.5 s / 2.0 s       1.4 s / 2.0 s       1.2 s / 1.7 s
            159 MB, 4 files     21 MB               25 MB
    10M     5.9 s / 9-12 s      7.5 s / 13-17 s     4.4 s / 8.3 s
            1.6 GB, 22 files    213 MB              248 MB
    ======  ==================  ==================  ==================

Peak RSS was about 0.5 GB for 1M and 10M alike (mostly Arrow's memory pool). 10M jsonl cost
6.5 s user + 3.2 s system CPU; sensor records with ISO timestamps are ~15 % slower and larger.

Where it lives: what to generate in ``spec``; drawing the events in ``events``; their JSON lines
and Parquet rows (and corruptions) in ``serialize``; this module writes the files.
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import zstandard

from ..execution.archive_files import kafka_connect_position
from .avro_writer import write_avro
from .events import CORRUPT, DUPLICATE, Chunk, PartitionStream, Plan
from .serialize import Serializer
from .spec import DEMO_SPEC, FORMATS, KINDS, PAGE_WEIGHTS, PAGES, GenerateSummary, GeneratorSpec

# What callers (the CLI, tests, the benchmarks) import from here, besides what this module defines.
__all__ = [
    "DEMO_SPEC", "FORMATS", "KINDS", "PAGES", "PAGE_WEIGHTS", "GenerateSummary", "GeneratorSpec",
    "generate_archive", "truncate_gzip",
]

# Rows built and serialised at a time: large enough that per-call overheads vanish, small enough
# that a chunk's columns and text (~30 MB) times the writer threads stay far below memory.
CHUNK_ROWS = 200_000
# Fastest zlib level: level 6 (gzip's default) makes 10M-event archives ~20 % smaller but ~3x
# slower to write, and nothing downstream depends on the ratio.
GZIP_LEVEL = 1
ZSTD_LEVEL = 3


def generate_archive(out_dir: str | os.PathLike[str], spec: GeneratorSpec) -> GenerateSummary:
    """Write the archive described by ``spec`` under ``out_dir`` and say what was written.

    Files this generator wrote earlier under ``out_dir`` (``partition=*/part-*``) are removed
    first, so a re-generation never leaves a mix of two archives; nothing else is touched. Each
    file is written under a hidden temporary name and renamed when complete, so a reader listing
    the directory meanwhile never sees a half-written file.
    """
    started = time.perf_counter()
    root = Path(out_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if spec.format == "delta":  # a Delta table at out_dir, appended in several commits
        from .delta_table import generate_delta_table

        return generate_delta_table(root, spec, generate_archive)
    _remove_previous_archive(root)
    plan = Plan(spec)
    workers = max(1, min(spec.partitions, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda p: _write_partition(plan, root, p), range(spec.partitions)))
    return GenerateSummary(
        path=str(root),
        files=[name for result in results for name in result.files],
        events=sum(r.lines for r in results),
        duplicates=sum(r.duplicates for r in results),
        corrupt=sum(r.corrupt for r in results),
        late=sum(r.late for r in results),
        seconds=time.perf_counter() - started,
    )


def truncate_gzip(path: str | os.PathLike[str], keep_fraction: float) -> int:
    """Cut a .gz file to ``keep_fraction`` of its bytes in place, as an interrupted upload would.

    At least the 10-byte gzip header and at most all but the last byte are kept, so reading it
    always fails with ``EOFError`` (never "not a gzip file" or a silent success). Returns the
    number of bytes kept.
    """
    if not 0 < keep_fraction < 1:
        raise ValueError(f"keep_fraction must be strictly between 0 and 1, not {keep_fraction}")
    size = os.path.getsize(path)
    header = 10
    if size <= header + 1:
        raise ValueError(f"{path} is too small ({size} bytes) to truncate meaningfully")
    keep = min(size - 1, max(header + 1, int(size * keep_fraction)))
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    return keep


# --------------------------------------------------------------------------------------------
# internals


@dataclass
class _PartitionResult:
    files: list[str] = field(default_factory=list)
    lines: int = 0
    duplicates: int = 0
    corrupt: int = 0
    late: int = 0


def _write_partition(plan: Plan, root: Path, partition: int) -> _PartitionResult:
    spec = plan.spec
    result = _PartitionResult()
    stream = PartitionStream(plan, partition)
    serializer = Serializer(plan, partition)
    directory = root / f"partition={partition}"
    if spec.format == "kafka_connect":
        directory = root / "topics" / spec.kind / f"partition={partition}"
    for index, (first, end) in enumerate(plan.file_bounds(partition)):
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / _file_name(spec, partition, index, first)
        temporary = directory / f".{final.name}.inprogress"
        chunks = _counted(
            (stream.chunk(start, min(CHUNK_ROWS, end - start)) for start in range(first, end, CHUNK_ROWS)),
            result,
        )
        if spec.format == "parquet":
            _write_parquet(temporary, chunks, serializer)
        elif spec.format == "csv":
            _write_csv(temporary, chunks, serializer)
        elif spec.format == "kafka_connect":
            _write_jsonl(temporary, chunks, serializer, codec="")
        elif spec.format == "avro":
            write_avro(temporary, (serializer.table(chunk) for chunk in chunks), final.name)
        else:
            _write_jsonl(temporary, chunks, serializer, codec=spec.format.partition(".")[2])
        temporary.replace(final)
        result.files.append(str(final))
    return result


def _file_name(spec: GeneratorSpec, partition: int, index: int, first_line: int) -> str:
    """``part-<index>.<format>``; Kafka Connect's S3 sink names an object by its topic, partition
    and first record's offset (a line's offset is its number in the partition: ``Chunk.offset``),
    zero-padded to 10 digits as its default ``filename.offset.zero.pad.width`` does."""
    if spec.format == "kafka_connect":
        return f"{spec.kind}+{partition}+{first_line:010d}.json"
    return f"part-{index:05d}.{spec.format}"


def _write_jsonl(path: Path, chunks: Iterator[Chunk], serializer: Serializer, codec: str) -> None:
    """``codec``: "" (plain), "gz" or "zst"."""
    with open(path, "wb") as raw:
        if not codec:
            for chunk in chunks:
                raw.write(serializer.jsonl(chunk))
            return
        if codec == "zst":
            # One frame per file, its content size unknown up front: deterministic bytes.
            with zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(raw, closefd=False) as sink:
                for chunk in chunks:
                    sink.write(serializer.jsonl(chunk))
            return
        # No file name and mtime 0 in the gzip header: the bytes depend on the content only.
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=GZIP_LEVEL) as sink:
            for chunk in chunks:
                sink.write(serializer.jsonl(chunk))


def _write_parquet(path: Path, chunks: Iterator[Chunk], serializer: Serializer) -> None:
    # One row group per chunk; the writer is opened lazily because the schema comes with a table.
    writer: pq.ParquetWriter | None = None
    try:
        for chunk in chunks:
            table = serializer.table(chunk)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="snappy")
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()


def _write_csv(path: Path, chunks: Iterator[Chunk], serializer: Serializer) -> None:
    writer: pcsv.CSVWriter | None = None
    try:
        for chunk in chunks:
            table = serializer.table(chunk)
            if writer is None:
                writer = pcsv.CSVWriter(str(path), table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()


def _counted(chunks: Iterator[Chunk], result: _PartitionResult) -> Iterator[Chunk]:
    for chunk in chunks:
        result.lines += len(chunk.kind)
        result.duplicates += int(np.count_nonzero(chunk.kind == DUPLICATE))
        result.corrupt += int(np.count_nonzero(chunk.kind == CORRUPT))
        result.late += int(np.count_nonzero(chunk.late))
        yield chunk


def _remove_previous_archive(root: Path) -> None:
    for directory in [*root.glob("partition=*"), *root.glob("topics/*/partition=*")]:
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            if entry.is_file() and (entry.name.startswith(("part-", ".part-"))
                                    or kafka_connect_position(entry.name.lstrip(".")) is not None):
                entry.unlink()
        if not any(directory.iterdir()):
            directory.rmdir()
