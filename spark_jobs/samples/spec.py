"""What a sample archive is made of (``GeneratorSpec``), what was written (``GenerateSummary``) and
the demo's archive (``DEMO_SPEC``); the archive's format is described in ``generator``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import ConfigError

KINDS = ("clickstream", "sensor")
FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "parquet", "csv", "avro", "kafka_connect", "delta")


# Clickstream pages and their share of views; only /cart and /checkout carry a value.
PAGES = ("/home", "/search", "/product", "/cart", "/checkout", "/account", "/help", "/blog")
PAGE_WEIGHTS = (0.30, 0.18, 0.25, 0.10, 0.06, 0.05, 0.03, 0.03)


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate. ``events`` counts every line written, duplicates and corrupt ones too."""

    events: int = 10_000  # lines written, duplicates and corrupt lines included
    seed: int = 42
    kind: str = "clickstream"  # "clickstream" | "sensor"
    format: str = "jsonl"  # one of FORMATS; kafka_connect: JSON Lines objects named as its S3 sink
    # names them; delta: a Delta table
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
