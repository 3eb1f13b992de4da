"""Deterministic sample archives: realistic event logs for demos, tests and benchmarks.

``generate_archive(out_dir, spec)`` writes what a Kafka-to-object-store sink leaves behind::

    out_dir/partition=0/part-00000.jsonl      (or .jsonl.gz, .parquet)
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
* Parquet has the same columns in the same order: strings, ``ts`` int64 (string with
  ``iso_timestamps``), ``ingest_ts`` and ``offset`` int64, ``partition`` int32, doubles.

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
"""

from __future__ import annotations

import gzip
import json
import math
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..exceptions import ConfigError

KINDS = ("clickstream", "sensor")
FORMATS = ("jsonl", "jsonl.gz", "parquet")

# Rows built and serialised at a time: large enough that per-call overheads vanish, small enough
# that a chunk's columns and text (~30 MB) times the writer threads stay far below memory.
CHUNK_ROWS = 200_000
# files_per_partition=0: one file per this many lines, as a size-rolling sink would do.
AUTO_ROWS_PER_FILE = 500_000
# The idle partition's silence, as fractions of the archive's span: long enough (10 %) to
# exceed a typical idle_timeout of a minute in a half-hour demo archive.
IDLE_START_FRACTION = 0.4
IDLE_LENGTH_FRACTION = 0.1
# Very late records are this much later than the out-of-orderness bound (log-uniform).
LATE_EXTRA_MIN_MS = 1_000
LATE_EXTRA_MAX_MS = 600_000
# A duplicate repeats one of the last this-many records of its partition ("shortly after").
DUPLICATE_MAX_BACK = 10
# Fastest zlib level: level 6 (gzip's default) makes 10M-event archives ~20 % smaller but ~3x
# slower to write, and nothing downstream depends on the ratio.
GZIP_LEVEL = 1

# Clickstream pages and their share of views; only /cart and /checkout carry a value.
PAGES = ("/home", "/search", "/product", "/cart", "/checkout", "/account", "/help", "/blog")
PAGE_WEIGHTS = (0.30, 0.18, 0.25, 0.10, 0.06, 0.05, 0.03, 0.03)
_CART = PAGES.index("/cart")
_CHECKOUT = PAGES.index("/checkout")

# The line kinds of a chunk.
_FRESH, _DUPLICATE, _CORRUPT = 0, 1, 2

_GARBAGE_LINES = (
    "<html><head><title>502 Bad Gateway</title></head><body><center>nginx</center></body></html>",
    "2023-11-14 22:13:20,123 ERROR [kafka-producer-network-thread] Connection to node 2 lost",
    "Ã©vÃ©nement reÃ§u ¿? \u00a0{{{ not json",
    "}{",
)
_BAD_TIMESTAMPS = ("yesterday", "2023-02-30T25:61:00Z", "not a time")
_BAD_VALUES = ("abc", "12,50", "N/A")
_JSON_CORRUPTIONS = (
    "truncated", "garbage", "csv", "array", "missing_ts", "bad_ts", "missing_key", "bad_value",
)


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate. ``events`` counts every line written, duplicates and corrupt ones too."""

    events: int = 10_000  # lines written, duplicates and corrupt lines included
    seed: int = 42
    kind: str = "clickstream"  # "clickstream" | "sensor"
    format: str = "jsonl"  # "jsonl" | "jsonl.gz" | "parquet"
    partitions: int = 4
    keys: int = 1000  # distinct keys, Zipf-distributed popularity
    zipf_s: float = 1.2
    start_ms: int = 1_700_000_000_000  # ingest time of the archive's start (2023-11-14T22:13:20Z)
    events_per_second: float = 200.0  # average rate over the archive: sets its time span
    max_out_of_orderness_ms: int = 5_000  # bound of the ordinary event-time delay
    late_fraction: float = 0.01  # records delayed by seconds to minutes beyond the bound
    duplicate_fraction: float = 0.005  # producer retries: same payload, new offset
    corrupt_fraction: float = 0.001  # mangled lines (a mix of kinds)
    idle_partition: bool = True  # the last partition is silent from 40 % to 50 % of the span
    skew: float = 0.5  # partition 0 gets 1 + skew times the traffic of each other partition
    files_per_partition: int = 0  # 0 = one file per 500k lines (at least 1)
    iso_timestamps: bool = False  # ts as ISO-8601 with zone (UTC, "Z") instead of epoch ms

    def __post_init__(self) -> None:
        def require(ok: bool, name: str, problem: str) -> None:
            if not ok:
                raise ConfigError(name, problem, "generator")

        require(self.kind in KINDS, "kind", f"must be one of {', '.join(KINDS)}")
        require(self.format in FORMATS, "format", f"must be one of {', '.join(FORMATS)}")
        require(self.events >= 0, "events", "must not be negative")
        require(self.seed >= 0, "seed", "must not be negative")
        require(self.partitions >= 1, "partitions", "must be at least 1")
        require(self.keys >= 1, "keys", "must be at least 1")
        require(self.zipf_s >= 0, "zipf_s", "must not be negative (0 = uniform keys)")
        require(self.events_per_second > 0, "events_per_second", "must be positive")
        require(self.max_out_of_orderness_ms >= 0, "max_out_of_orderness_ms", "must not be negative")
        for name in ("late_fraction", "duplicate_fraction", "corrupt_fraction"):
            require(0 <= getattr(self, name) <= 1, name, "must be a fraction between 0 and 1")
        require(self.duplicate_fraction + self.corrupt_fraction <= 1, "duplicate_fraction",
                "duplicate_fraction + corrupt_fraction must not exceed 1")
        require(self.skew >= 0, "skew", "must not be negative")
        require(self.files_per_partition >= 0, "files_per_partition", "must not be negative")

    @property
    def key_field(self) -> str:
        """The record field holding the key: ``user_id`` (clickstream) or ``sensor_id``."""
        return "user_id" if self.kind == "clickstream" else "sensor_id"

    @property
    def span_ms(self) -> float:
        """Length of the archive in ingest time."""
        return self.events / self.events_per_second * 1000.0


@dataclass(frozen=True)
class GenerateSummary:
    """What :func:`generate_archive` wrote (see the module docstring for how lines are counted)."""

    path: str  # the archive directory, absolute
    files: list[str]  # absolute paths by partition number, then in write (= name) order
    events: int  # lines written, duplicates and corrupt lines included
    duplicates: int
    corrupt: int
    late: int
    seconds: float


# The `replay demo` archive (include/pipelines/clicks_per_minute.yaml: 1-minute tumbling windows,
# continuous trigger every 10 s, 5 s out-of-orderness, 30 s allowed lateness, idle_timeout 1m).
# 12 events/s spreads 20k events over ~28 minutes (~640 clicks a minute over 8 pages, so every
# window fires EARLY panes), the idle partition is silent ~2.8 min (> idle_timeout), and 2 % of
# records are very late: some land within the 30 s lateness (LATE panes), some beyond it (late
# events). 4 partitions x 1 file = the README's "4 files".
DEMO_SPEC = GeneratorSpec(
    events=20_000,
    seed=7,
    events_per_second=12.0,
    late_fraction=0.02,
)


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
    _remove_previous_archive(root)
    plan = _Plan(spec)
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


class _Plan:
    """Archive-wide constants, computed once and shared (read-only) by the partition threads."""

    def __init__(self, spec: GeneratorSpec):
        self.spec = spec
        self.span_ms = spec.span_ms
        self.lines_per_partition = _split_by_weight(spec.events, self.partition_weights(spec))
        self.idle_partition = spec.partitions - 1 if spec.idle_partition and spec.partitions > 1 else -1
        self.idle_start_ms = self.span_ms * IDLE_START_FRACTION
        self.idle_length_ms = self.span_ms * IDLE_LENGTH_FRACTION
        rng = np.random.default_rng([spec.seed, 2**32 - 1])
        ranks = np.arange(1, spec.keys + 1, dtype=np.float64)
        cdf = np.cumsum(ranks ** -spec.zipf_s)
        self.key_cdf = cdf / cdf[-1]
        # Popularity rank -> key id, shuffled so that the top key is not simply u0.
        self.key_by_rank = rng.permutation(spec.keys)
        page_cdf = np.cumsum(PAGE_WEIGHTS)
        self.page_cdf = page_cdf / page_cdf[-1]
        self.pages = pa.array(PAGES)
        # Sensor baselines per key id: each sensor sits in its own climate.
        self.sensor_temperature = rng.normal(20.0, 6.0, spec.keys)
        self.sensor_humidity = rng.uniform(25.0, 75.0, spec.keys)

    @staticmethod
    def partition_weights(spec: GeneratorSpec) -> list[float]:
        return [1.0 + spec.skew] + [1.0] * (spec.partitions - 1)

    def file_bounds(self, partition: int) -> list[tuple[int, int]]:
        """[first, end) line numbers of each of the partition's files."""
        lines = self.lines_per_partition[partition]
        if lines == 0:
            return []
        files = self.spec.files_per_partition or max(1, math.ceil(lines / AUTO_ROWS_PER_FILE))
        files = min(files, lines)
        edges = [lines * k // files for k in range(files + 1)]
        return list(zip(edges[:-1], edges[1:], strict=True))


def _split_by_weight(total: int, weights: list[float]) -> list[int]:
    """Whole shares of ``total`` proportional to ``weights`` (largest remainder), summing to it."""
    exact = [total * w / sum(weights) for w in weights]
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (shares[i] - exact[i], i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


@dataclass
class _Chunk:
    """Columns of consecutive lines of one partition (numpy, one entry per line)."""

    kind: np.ndarray  # _FRESH / _DUPLICATE / _CORRUPT
    offset: np.ndarray
    ingest_ts: np.ndarray
    event_number: np.ndarray  # the n of event_id "e<p>-<n>"
    ts: np.ndarray
    key: np.ndarray  # key id
    page: np.ndarray  # clickstream: index into PAGES
    temperature_centi: np.ndarray  # sensor: hundredths of a degree
    value_centi: np.ndarray  # hundredths
    late: np.ndarray  # bool: very late (fresh lines only)


@dataclass
class _PartitionResult:
    files: list[str] = field(default_factory=list)
    lines: int = 0
    duplicates: int = 0
    corrupt: int = 0
    late: int = 0


class _PartitionStream:
    """Draws a partition's lines chunk after chunk; carries the clock and event numbering."""

    def __init__(self, plan: _Plan, partition: int):
        self.plan = plan
        self.spec = plan.spec
        self.partition = partition
        self.rng = np.random.default_rng([self.spec.seed, partition, 0])
        lines = plan.lines_per_partition[partition]
        active_ms = plan.span_ms - (plan.idle_length_ms if partition == plan.idle_partition else 0.0)
        self.mean_gap_ms = active_ms / lines if lines else 0.0
        self.active_clock_ms = 0.0  # ingest time since the start, idle gap excluded
        self.next_event_number = 0

    def chunk(self, first_offset: int, size: int) -> _Chunk:
        spec, plan, rng = self.spec, self.plan, self.rng
        # Every draw below happens for every chunk, in this order: the stream stays reproducible.
        kind_draw = rng.random(size)
        back_draw = rng.integers(1, DUPLICATE_MAX_BACK + 1, size)
        gaps = rng.exponential(self.mean_gap_ms, size)
        late_draw = rng.random(size)
        delay_draw = rng.random(size)
        key_draw = rng.random(size)
        page_draw = rng.random(size)
        noise_draw = rng.standard_normal(size)
        amount_draw = rng.standard_normal(size)

        kind = np.full(size, _FRESH, dtype=np.int8)
        kind[kind_draw < spec.corrupt_fraction + spec.duplicate_fraction] = _DUPLICATE
        kind[kind_draw < spec.corrupt_fraction] = _CORRUPT

        # Ingest time: a Poisson process on the partition's active clock, shifted past the gap.
        active = self.active_clock_ms + np.cumsum(gaps)
        if size:
            self.active_clock_ms = float(active[-1])
        if self.partition == plan.idle_partition:
            active = active + plan.idle_length_ms * (active >= plan.idle_start_ms)
        ingest_ts = spec.start_ms + np.floor(active).astype(np.int64)

        # A duplicate repeats one of the DUPLICATE_MAX_BACK ordinary records before it (never a
        # corrupt one: its payload was never valid); those with none before them in the chunk
        # become ordinary records themselves.
        fresh_positions = np.flatnonzero(kind == _FRESH)
        first_fresh = int(fresh_positions[0]) if fresh_positions.size else size
        leading = kind[:first_fresh]
        leading[leading == _DUPLICATE] = _FRESH
        fresh = kind == _FRESH
        fresh_positions = np.flatnonzero(fresh)
        fresh_before = np.cumsum(fresh) - fresh
        duplicates = np.flatnonzero(kind == _DUPLICATE)
        sources = fresh_positions[np.maximum(fresh_before[duplicates] - back_draw[duplicates], 0)]

        numbered = kind != _DUPLICATE
        event_number = self.next_event_number + np.cumsum(numbered) - 1
        self.next_event_number += int(numbered.sum())

        late = late_draw < spec.late_fraction
        bound = spec.max_out_of_orderness_ms
        delay = _truncated_exponential(delay_draw, bound, scale=bound / 4)
        log_min, log_max = math.log(LATE_EXTRA_MIN_MS), math.log(LATE_EXTRA_MAX_MS)
        late_delay = bound + np.exp(log_min + delay_draw * (log_max - log_min))
        delay = np.where(late, late_delay, delay).astype(np.int64)
        ts = ingest_ts - delay

        rank = np.minimum(np.searchsorted(plan.key_cdf, key_draw, side="right"), spec.keys - 1)
        key = plan.key_by_rank[rank]
        page = np.zeros(size, dtype=np.int64)
        temperature_centi = np.zeros(size, dtype=np.int64)
        if spec.kind == "clickstream":
            page = np.minimum(np.searchsorted(plan.page_cdf, page_draw, side="right"), len(PAGES) - 1)
            # Cart additions ~ 25 (item price), checkouts ~ 40 (basket) with a long tail; ~2 % of
            # checkouts are free (coupons): a 0.0 purchase that a revenue check must accept.
            cart = np.exp(math.log(25.0) + 0.7 * amount_draw)
            checkout = np.where(noise_draw < -2.0, 0.0, np.exp(math.log(40.0) + 0.8 * amount_draw))
            value = np.select([page == _CART, page == _CHECKOUT], [cart, checkout], 0.0)
        else:
            day_phase = 2 * np.pi * (ts % 86_400_000) / 86_400_000
            temperature = plan.sensor_temperature[key] + 3.0 * np.sin(day_phase) + 0.5 * noise_draw
            temperature_centi = np.round(temperature * 100).astype(np.int64)
            value = np.clip(plan.sensor_humidity[key] + 2.0 * amount_draw, 0.0, 100.0)
        value_centi = np.round(value * 100).astype(np.int64)

        # Duplicates carry their source's payload; their own offset and ingest time stay.
        for column in (event_number, ts, key, page, temperature_centi, value_centi):
            column[duplicates] = column[sources]
        late &= kind == _FRESH
        return _Chunk(
            kind=kind,
            offset=first_offset + np.arange(size, dtype=np.int64),
            ingest_ts=ingest_ts,
            event_number=event_number,
            ts=ts,
            key=key,
            page=page,
            temperature_centi=temperature_centi,
            value_centi=value_centi,
            late=late,
        )


def _truncated_exponential(uniform: np.ndarray, bound: float, scale: float) -> np.ndarray:
    """Inverse CDF of an exponential(scale) conditioned on [0, bound]: most delays are short."""
    if bound <= 0:
        return np.zeros_like(uniform)
    return -scale * np.log1p(-uniform * (1.0 - math.exp(-bound / scale)))


class _Serializer:
    """Turns a partition's chunks into JSON text or an Arrow table, corrupting the chosen lines.

    The corruption draws come from their own stream, so the clean records are the same whatever
    the format.
    """

    def __init__(self, plan: _Plan, partition: int):
        self.plan = plan
        self.spec = plan.spec
        self.partition = partition
        self.rng = np.random.default_rng([self.spec.seed, partition, 1])
        self.key_prefix = "u" if self.spec.kind == "clickstream" else "s"

    # JSON Lines ------------------------------------------------------------------------------
    def jsonl(self, chunk: _Chunk) -> memoryview:
        """The chunk's lines, newline-terminated, as one buffer (no per-line Python objects)."""
        spec = self.spec
        if spec.iso_timestamps:
            ts_parts: list[str | pa.Array] = ['"', _iso_utc(chunk.ts), '"']
        else:
            ts_parts = [_text(chunk.ts)]
        # The json.dumps spelling (", " and ": "), so the lines round-trip through json exactly.
        parts: list[str | pa.Array] = [
            f'{{"event_id": "e{self.partition}-', _text(chunk.event_number),
            f'", "{spec.key_field}": "{self.key_prefix}', _text(chunk.key),
            '", "ts": ', *ts_parts,
            ', "ingest_ts": ', _text(chunk.ingest_ts),
            f', "partition": {self.partition}, "offset": ', _text(chunk.offset),
        ]
        if spec.kind == "clickstream":
            parts += [', "page": "', self.plan.pages.take(pa.array(chunk.page)), '"']
        else:
            parts += [', "temperature": ', _decimal_text(chunk.temperature_centi)]
        parts += [', "value": ', _decimal_text(chunk.value_centi), "}\n"]
        lines = pc.binary_join_element_wise(*[_as_arrow(part) for part in parts], "")
        corrupt = chunk.kind == _CORRUPT
        if corrupt.any():
            mangled = [self.mangle_line(line) for line in lines.filter(pa.array(corrupt)).to_pylist()]
            lines = pc.replace_with_mask(lines, pa.array(corrupt), pa.array(mangled, pa.string()))
        # A string array's data buffer is exactly the concatenated lines: write it as it is.
        _, offsets, data = lines.buffers()
        bounds = np.frombuffer(offsets, dtype=np.int32, count=lines.offset + len(lines) + 1)
        return memoryview(data)[bounds[lines.offset] : bounds[-1]]

    def mangle_line(self, line: str) -> str:
        """One realistic way a line goes bad; ``line`` is the record's clean JSON line."""
        rng = self.rng
        variant = _JSON_CORRUPTIONS[int(rng.integers(len(_JSON_CORRUPTIONS)))]
        text = line.rstrip("\n")
        if variant == "truncated":  # a writer died mid-line: any proper prefix of an object
            return text[: int(rng.integers(1, len(text) - 1))] + "\n"
        if variant == "garbage":
            return _GARBAGE_LINES[int(rng.integers(len(_GARBAGE_LINES)))] + "\n"
        record = json.loads(text)
        if variant == "csv":  # a producer with the wrong serializer
            return ",".join(str(value) for value in record.values()) + "\n"
        if variant == "array":
            return json.dumps(list(record.values())) + "\n"
        if variant == "missing_ts":
            del record["ts"]
        elif variant == "bad_ts":
            record["ts"] = _BAD_TIMESTAMPS[int(rng.integers(len(_BAD_TIMESTAMPS)))]
        elif variant == "missing_key":
            del record[self.spec.key_field]
        else:
            record["value"] = _BAD_VALUES[int(rng.integers(len(_BAD_VALUES)))]
        return json.dumps(record) + "\n"

    # Parquet ---------------------------------------------------------------------------------
    def table(self, chunk: _Chunk) -> pa.Table:
        """The chunk as typed columns; corrupt rows lose their ``ts`` or key (or get a bad ts)."""
        spec = self.spec
        size = len(chunk.kind)
        variants = ["missing_ts", "missing_key"] + (["bad_ts"] if spec.iso_timestamps else [])
        corrupt = np.flatnonzero(chunk.kind == _CORRUPT)
        chosen = np.array(variants)[self.rng.integers(len(variants), size=corrupt.size)]
        missing_ts = np.zeros(size, dtype=bool)
        missing_ts[corrupt[chosen == "missing_ts"]] = True
        missing_key = np.zeros(size, dtype=bool)
        missing_key[corrupt[chosen == "missing_key"]] = True

        if spec.iso_timestamps:
            ts = _iso_utc(chunk.ts)
            bad = corrupt[chosen == "bad_ts"]
            if bad.size:
                bad_mask = np.zeros(size, dtype=bool)
                bad_mask[bad] = True
                replacements = [_BAD_TIMESTAMPS[i % len(_BAD_TIMESTAMPS)] for i in range(bad.size)]
                ts = pc.replace_with_mask(ts, pa.array(bad_mask), pa.array(replacements, pa.string()))
            ts = pc.if_else(pa.array(missing_ts), pa.scalar(None, pa.string()), ts)
        else:
            ts = pa.array(chunk.ts, pa.int64(), mask=missing_ts)
        key = pc.binary_join_element_wise(pa.scalar(self.key_prefix), _text(chunk.key), "")
        key = pc.if_else(pa.array(missing_key), pa.scalar(None, pa.string()), key)
        columns: dict[str, pa.Array] = {
            "event_id": pc.binary_join_element_wise(
                pa.scalar(f"e{self.partition}-"), _text(chunk.event_number), ""
            ),
            spec.key_field: key,
            "ts": ts,
            "ingest_ts": pa.array(chunk.ingest_ts, pa.int64()),
            # int32 like a Kafka partition number: a reader's schema may say INT, and Parquet
            # readers refuse to narrow an INT64 column.
            "partition": pa.array(np.full(size, self.partition, dtype=np.int32)),
            "offset": pa.array(chunk.offset, pa.int64()),
        }
        if spec.kind == "clickstream":
            columns["page"] = self.plan.pages.take(pa.array(chunk.page))
        else:
            columns["temperature"] = pa.array(chunk.temperature_centi / 100.0)
        columns["value"] = pa.array(chunk.value_centi / 100.0)
        return pa.table(columns)


def _as_arrow(part: str | pa.Array) -> pa.Array | pa.Scalar:
    return pa.scalar(part, pa.string()) if isinstance(part, str) else part


def _text(values: np.ndarray) -> pa.Array:
    """Decimal spelling of integers."""
    return pc.cast(pa.array(values, pa.int64()), pa.string())


def _decimal_text(hundredths: np.ndarray) -> pa.Array:
    """Python's repr of ``hundredths / 100`` (12.5, 0.0, -3.07), built from the integers.

    Exact and vectorised: ``repr`` of a 2-decimal float is its shortest round-trip spelling,
    i.e. the decimal with trailing zeros dropped but one digit kept after the point.
    """
    magnitude = np.abs(hundredths)
    whole, cents = magnitude // 100, magnitude % 100
    fraction = pc.if_else(
        pa.array(cents % 10 == 0),
        _text(cents // 10),
        pc.utf8_lpad(_text(cents), 2, "0"),
    )
    sign = pc.if_else(pa.array(hundredths < 0), pa.scalar("-"), pa.scalar(""))
    return pc.binary_join_element_wise(sign, _text(whole), pa.scalar("."), fraction, "")


def _iso_utc(epoch_ms: np.ndarray) -> pa.Array:
    """``2023-11-14T22:13:20.123Z`` for each epoch ms.

    Arrow's strftime costs ~1 us a value, so it formats only the distinct minutes (a chunk covers
    few) and the seconds and milliseconds are padded integers.
    """
    minute = epoch_ms // 60_000
    distinct, which = np.unique(minute, return_inverse=True)
    prefixes = pc.strftime(
        pa.array(distinct * 60_000, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        format="%Y-%m-%dT%H:%M:",
    ).take(pa.array(which))
    within = epoch_ms - minute * 60_000
    return pc.binary_join_element_wise(
        prefixes,
        pc.utf8_lpad(_text(within // 1000), 2, "0"),
        pa.scalar("."),
        pc.utf8_lpad(_text(within % 1000), 3, "0"),
        pa.scalar("Z"),
        "",
    )


def _write_partition(plan: _Plan, root: Path, partition: int) -> _PartitionResult:
    spec = plan.spec
    result = _PartitionResult()
    stream = _PartitionStream(plan, partition)
    serializer = _Serializer(plan, partition)
    directory = root / f"partition={partition}"
    for index, (first, end) in enumerate(plan.file_bounds(partition)):
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"part-{index:05d}.{spec.format}"
        temporary = directory / f".{final.name}.inprogress"
        chunks = _counted(
            (stream.chunk(start, min(CHUNK_ROWS, end - start)) for start in range(first, end, CHUNK_ROWS)),
            result,
        )
        if spec.format == "parquet":
            _write_parquet(temporary, chunks, serializer)
        else:
            _write_jsonl(temporary, chunks, serializer, compress=spec.format == "jsonl.gz")
        temporary.replace(final)
        result.files.append(str(final))
    return result


def _write_jsonl(path: Path, chunks: Iterator[_Chunk], serializer: _Serializer, compress: bool) -> None:
    with open(path, "wb") as raw:
        if not compress:
            for chunk in chunks:
                raw.write(serializer.jsonl(chunk))
            return
        # No file name and mtime 0 in the gzip header: the bytes depend on the content only.
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=GZIP_LEVEL) as sink:
            for chunk in chunks:
                sink.write(serializer.jsonl(chunk))


def _write_parquet(path: Path, chunks: Iterator[_Chunk], serializer: _Serializer) -> None:
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


def _counted(chunks: Iterator[_Chunk], result: _PartitionResult) -> Iterator[_Chunk]:
    for chunk in chunks:
        result.lines += len(chunk.kind)
        result.duplicates += int(np.count_nonzero(chunk.kind == _DUPLICATE))
        result.corrupt += int(np.count_nonzero(chunk.kind == _CORRUPT))
        result.late += int(np.count_nonzero(chunk.late))
        yield chunk


def _remove_previous_archive(root: Path) -> None:
    for directory in root.glob("partition=*"):
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            if entry.name.startswith(("part-", ".part-")) and entry.is_file():
                entry.unlink()
        if not any(directory.iterdir()):
            directory.rmdir()
