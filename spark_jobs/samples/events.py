"""Drawing a sample archive's events (``generator``'s docstring says what they look like): the
archive-wide plan (``Plan``: partitions' shares, keys' popularity, the idle gap) and each
partition's stream of lines (``PartitionStream``), chunk by chunk, as numpy columns (``Chunk``).
Each partition draws from its own seeded stream, so the lines do not depend on thread scheduling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .spec import PAGE_WEIGHTS, PAGES, GeneratorSpec

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

_CART = PAGES.index("/cart")
_CHECKOUT = PAGES.index("/checkout")

# The line kinds of a chunk.
FRESH, DUPLICATE, CORRUPT = 0, 1, 2


class Plan:
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
class Chunk:
    """Columns of consecutive lines of one partition (numpy, one entry per line)."""

    kind: np.ndarray  # FRESH / DUPLICATE / CORRUPT
    offset: np.ndarray
    ingest_ts: np.ndarray
    event_number: np.ndarray  # the n of event_id "e<p>-<n>"
    ts: np.ndarray
    key: np.ndarray  # key id
    page: np.ndarray  # clickstream: index into PAGES
    temperature_centi: np.ndarray  # sensor: hundredths of a degree
    value_centi: np.ndarray  # hundredths
    late: np.ndarray  # bool: very late (fresh lines only)


class PartitionStream:
    """Draws a partition's lines chunk after chunk; carries the clock and event numbering."""

    def __init__(self, plan: Plan, partition: int):
        self.plan = plan
        self.spec = plan.spec
        self.partition = partition
        self.rng = np.random.default_rng([self.spec.seed, partition, 0])
        lines = plan.lines_per_partition[partition]
        active_ms = plan.span_ms - (plan.idle_length_ms if partition == plan.idle_partition else 0.0)
        self.mean_gap_ms = active_ms / lines if lines else 0.0
        self.active_clock_ms = 0.0  # ingest time since the start, idle gap excluded
        self.next_event_number = 0

    def chunk(self, first_offset: int, size: int) -> Chunk:
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

        kind = np.full(size, FRESH, dtype=np.int8)
        kind[kind_draw < spec.corrupt_fraction + spec.duplicate_fraction] = DUPLICATE
        kind[kind_draw < spec.corrupt_fraction] = CORRUPT

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
        fresh_positions = np.flatnonzero(kind == FRESH)
        first_fresh = int(fresh_positions[0]) if fresh_positions.size else size
        leading = kind[:first_fresh]
        leading[leading == DUPLICATE] = FRESH
        fresh = kind == FRESH
        fresh_positions = np.flatnonzero(fresh)
        fresh_before = np.cumsum(fresh) - fresh
        duplicates = np.flatnonzero(kind == DUPLICATE)
        sources = fresh_positions[np.maximum(fresh_before[duplicates] - back_draw[duplicates], 0)]

        numbered = kind != DUPLICATE
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
        late &= kind == FRESH
        return Chunk(
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
