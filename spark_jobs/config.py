"""Pipeline configs: the YAML contract users write, parsed into typed values.

Every problem is reported as a :class:`ConfigError` naming the field, before anything runs.
Relative paths resolve against ``REPLAY_BASE_DIR`` (default: the current directory); URIs
such as ``s3a://bucket/path`` are kept as they are.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .core.aggregates import NUMERIC_FUNCTIONS, AggregateSpec
from .core.durations import MIN_TIMESTAMP, fitting_times, parse_duration
from .core.engine.joins import DEFAULT_JOIN_OUTPUT, INTERVAL_LATE_REASON, JoinFunction
from .core.engine.operator import LATE_REASON
from .core.engine.process import KeyedProcessFunction
from .core.functions import AggregateFunction, ProcessWindowFunction, evictor_from_dict, load_object
from .core.triggers import Trigger, trigger_from_dict
from .core.watermarks import WatermarkConfig
from .core.windows import WindowAssigner, assigner_from_dict
from .exceptions import ConfigError

FORMATS = ("jsonl", "parquet", "csv", "avro", "delta")
#: How an archive's objects are named: ``kafka_connect`` = Kafka Connect's sink objects,
#: ``<topic>+<partition>+<startOffset>.<ext>``, whose records carry neither partition nor offset.
LAYOUTS = ("kafka_connect",)
TYPES = ("string", "long", "double", "boolean")
LATE_OUTPUTS = ("side_output", "drop")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_TOP_LEVEL = {
    "name", "source", "key", "watermark", "window", "trigger", "allowed_lateness",
    "late_output", "aggregates", "batch", "output", "quality", "maintenance", "schedule",
    "description", "evictor", "aggregate_function", "process_function", "process", "join",
}
_WINDOWED_ONLY = ("window", "trigger", "aggregates", "evictor", "aggregate_function",
                  "process_function", "allowed_lateness")
# A field or a nested path to one (payload.ts): dot-separated names, none empty, no quote (the
# JSON path it becomes quotes each name).
_FIELD_PATH = re.compile(r"^[^.'\\]+(\.[^.'\\]+)*$")
_PATH_PROBLEM = "a nested field is written as a dot-separated path (payload.ts) without quotes"
# Spark's datetime pattern letters that parse (Spark 3+ refuses week-based ones: Y w W e c).
_PATTERN_LETTERS = set("GyuDMLdQqEFahKkHmsSnVzOXxZ")
_ZONE_LETTERS = set("VzOXxZ")
_OUTPUT_TYPE = re.compile(r"^(string|long|double|boolean|array<(string|long|double|boolean)>)$")


def _pattern_letters(pattern: str) -> list[str]:
    """The pattern letters of a Spark datetime pattern, quoted literals ('T') left out."""
    letters, quoted = [], False
    for char in pattern:
        if char == "'":
            quoted = not quoted
        elif not quoted and char.isascii() and char.isalpha():
            letters.append(char)
    return letters


def datetime_pattern_problem(pattern: Any) -> str | None:
    """Why ``pattern`` is not a usable ``event_time_format``, or None."""
    if not isinstance(pattern, str) or not pattern.strip():
        return "must be a Spark datetime pattern, e.g. yyyy-MM-dd HH:mm:ss.SSS"
    letters = _pattern_letters(pattern)
    bad = sorted(set(letters) - _PATTERN_LETTERS)
    if bad:
        return f"pattern letter {bad[0]!r} is not one Spark can parse with"
    if not {"y", "u"} & set(letters):
        return "must contain the year (y)"
    return None


def pattern_has_zone(pattern: str) -> bool:
    """Whether a datetime pattern reads a zone or offset (else the time is taken as UTC)."""
    return bool(_ZONE_LETTERS & set(_pattern_letters(pattern)))


@dataclass(frozen=True)
class UserFunction:
    """A user-defined window function named in the config: its instance and declared outputs."""

    path: str
    params: dict[str, Any]
    output: dict[str, str]
    instance: Any = field(compare=False)


@dataclass(frozen=True)
class SourceConfig:
    path: str
    format: str
    event_time: str
    ingest_time: str | None = None
    partition: str | None = None
    offset: str | None = None
    id: str | None = None
    types: dict[str, str] = field(default_factory=dict)
    #: A Spark datetime pattern for a string event time (``dd/MM/yyyy HH:mm:ss``); a pattern
    #: without a zone reads the time as UTC. None: epoch ms or ISO-8601 with a zone.
    event_time_format: str | None = None
    #: Field names (keys, aggregated columns) read from a nested path: ``{user: payload.user}``.
    fields: dict[str, str] = field(default_factory=dict)
    #: One of ``LAYOUTS``, or None: partition and offset then come from the object's name.
    layout: str | None = None
    #: A Delta source's pin (``format: delta``; at most one): the table's version, or a time
    #: (epoch ms or ISO-8601 with a zone) whose latest version is read. Neither: the latest version.
    version: int | None = None
    timestamp: str | None = None

    def path_of(self, name: str) -> tuple[str, ...]:
        """The path of a field in a record: ``fields``' entry, else the name, split at dots."""
        return tuple(self.fields.get(name, name).split("."))


@dataclass(frozen=True)
class JoinConfig:
    """A time-based join of the main ``source`` (the left input) with a second archive.

    ``interval``: Flink's interval join (left.ts + lower <= right.ts <= left.ts + upper, bounds
    already made inclusive); ``window``: both inputs in the pipeline's windows, every (left,
    right) pair of a firing pane. ``function`` maps a pair to an output row (default: both
    records as JSON and their times).
    """

    type: str  # interval | window
    right: SourceConfig
    right_watermark: WatermarkConfig
    lower: int = 0
    upper: int = 0
    function: UserFunction | None = None

    #: The names of the two inputs, as ``_input`` 0 and 1 and as watermark partition prefixes.
    INPUTS = ("left", "right")


@dataclass(frozen=True)
class QualityConfig:
    max_late_fraction: float = 0.5
    max_quarantine_fraction: float = 0.5
    ranges: dict[str, dict[str, float]] = field(default_factory=dict)


#: Delta's VACUUM refuses a shorter retention (``retentionDurationCheck``, on in every session).
MIN_VACUUM_RETENTION_HOURS = 168


@dataclass(frozen=True)
class MaintenanceConfig:
    optimize_every: int = 100  # batches; 0 disables
    vacuum_every: int = 0  # batches; 0 disables
    vacuum_retention_hours: int = 168  # MIN_VACUUM_RETENTION_HOURS at least


@dataclass(frozen=True)
class ScheduleConfig:
    interval: str | None = None  # cron preset / cron expression / duration, for the Airflow DAG
    start: str | None = None
    #: Where the archive ends: the interval that reaches it is the DAG's last, and finalizes.
    end: str | None = None


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    source: SourceConfig
    key: tuple[str, ...]
    watermark: WatermarkConfig
    window: WindowAssigner
    trigger: Trigger
    allowed_lateness: int
    late_output: str
    aggregates: tuple[AggregateSpec, ...]
    batch_max_records: int
    output_path: str
    #: Consecutive micro-batches run as one Spark pass (one Delta commit per table) up to this
    #: many records; results are those of the micro-batches, only the restart point is coarser.
    pass_max_records: int = 1_000_000
    #: An ingest of up to this many records is sorted into replay order on the driver (narrow
    #: keys, ~70 bytes of driver memory a record); a larger one sorts its full rows on the cluster.
    sort_on_driver_max_records: int = 20_000_000
    #: A pass of up to this many records runs its keys on the driver (one read of its records, no
    #: shuffle, no Python workers); a larger one runs them on the executors, grouped by key.
    #: Pipelines on the per-record operator (not the vectorised kernel): up to a tenth of it.
    driver_pass_max_records: int = 1_000_000
    #: How many processes a big pass on the driver shares its keys between (the driver and
    #: helpers; no more than the driver's cores). 1: the driver alone.
    driver_processes: int = 2
    #: An ingest of up to this many lines (as bounded before it is read) is read once: its rows
    #: are collected on the driver, numbered there and written to ``staging`` and ``quarantine``
    #: by delta-rs, where this process reaches the tables; a larger one is read twice by Spark.
    stage_on_driver_max_records: int = 2_500_000
    latest_every: int = 10
    evictor: Any = None
    aggregate_function: UserFunction | None = None
    process_function: UserFunction | None = None
    #: A keyed process function replaces windows, triggers and aggregates altogether.
    keyed_process: UserFunction | None = None
    join: JoinConfig | None = None
    quality: QualityConfig = field(default_factory=QualityConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    config_path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def uses_processing_time(self) -> bool:
        return self.window.time == "processing" or "processing" in self.trigger.to_dict()["type"]

    def accepted_times(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The first and last event time, and ingest time, a record may have: in years 0001 to
        9999, narrowed for the times the windows are over (the replay clock's for processing-time
        windows) so that every window fits them (``durations.fitting_times``)."""
        reach = self.window.reach
        on_clock = self.window.time == "processing"
        clock_is_ingest = on_clock and bool(self.source.ingest_time)
        return fitting_times(0 if clock_is_ingest else reach), fitting_times(reach if on_clock else 0)

    @property
    def late_reason(self) -> str:
        """``late_events.reason`` of this pipeline's late records: an interval join's are behind
        the watermark (Flink's ``IntervalJoinOperator``); everyone else's windows had closed."""
        if self.join is not None and self.join.type == "interval":
            return INTERVAL_LATE_REASON
        return LATE_REASON

    def semantics(self) -> dict[str, Any]:
        """What the results depend on, in canonical form (durations in ms, defaults filled in):
        ``replay_log`` records it with every batch, and a run refuses to go on from tables
        written under other semantics (``execution.semantics_guard``). Left out: where things are
        (paths, a Delta source's pin), batch and pass sizes (the results do not depend on them;
        ``watermark.emit: per_batch`` says so itself), names, maintenance, schedule and quality."""
        def source(config: SourceConfig) -> dict[str, Any]:
            return {k: v for k, v in asdict(config).items() if k not in ("path", "version", "timestamp")}

        def function(user: UserFunction | None) -> dict[str, Any] | None:
            return None if user is None else {"path": user.path, "params": user.params, "output": user.output}

        join = self.join
        return {
            "source": source(self.source),
            "key": list(self.key),
            "watermark": asdict(self.watermark),
            "window": self.window.to_dict(),
            "trigger": self.trigger.to_dict(),
            "allowed_lateness": self.allowed_lateness,
            "late_output": self.late_output,
            "aggregates": {spec.name: spec.to_text() for spec in self.aggregates},
            "evictor": None if self.evictor is None else {"type": type(self.evictor).__name__,
                                                          **asdict(self.evictor)},
            "aggregate_function": function(self.aggregate_function),
            "process_function": function(self.process_function),
            "process": function(self.keyed_process),
            "join": None if join is None else {
                "type": join.type, "right": source(join.right),
                "right_watermark": asdict(join.right_watermark), "lower": join.lower, "upper": join.upper,
                "function": function(join.function),
            },
        }

    def value_columns(self) -> list[str]:
        """Source fields the aggregates read, each once, in first-use order."""
        seen: list[str] = []
        for spec in self.aggregates:
            if spec.column and spec.column not in seen:
                seen.append(spec.column)
        return seen

    def column_type(self, column: str) -> str:
        """The declared type of a value column; numeric aggregates default to double."""
        if column in self.source.types:
            return self.source.types[column]
        numeric = any(s.column == column and s.function in NUMERIC_FUNCTIONS for s in self.aggregates)
        return "double" if numeric else "string"

    @property
    def results_table(self) -> str:
        """The table a firing's rows go to."""
        if self.join is not None:
            return "join_results"
        return "process_results" if self.keyed_process is not None else "window_results"

    def input_watermarks(self) -> dict[str, WatermarkConfig] | None:
        """Per-input watermark settings of a two-input pipeline (None: one input)."""
        if self.join is None:
            return None
        return dict(zip(JoinConfig.INPUTS, (self.watermark, self.join.right_watermark), strict=True))

    def sources(self) -> list[SourceConfig]:
        """The archives this pipeline reads: the source, and the join's right input if any."""
        return [self.source] if self.join is None else [self.source, self.join.right]

    def outputs(self) -> list[tuple[str, str]]:
        """The named values each firing emits, with their types, in column order."""
        if self.join is not None:
            function = self.join.function
            return list((function.output if function else DEFAULT_JOIN_OUTPUT).items())
        if self.keyed_process is not None:
            return list(self.keyed_process.output.items())
        if self.process_function is not None:
            return list(self.process_function.output.items())
        outputs = []
        for spec in self.aggregates:
            column_type = self.column_type(spec.column) if spec.column else "long"
            if spec.function in ("count", "count_distinct"):
                kind = "long"
            elif spec.function == "avg":
                kind = "double"
            elif spec.function == "sum":
                kind = "long" if column_type == "long" else "double"
            elif spec.function == "collect_list":
                kind = f"array<{column_type}>"
            else:
                kind = column_type
            outputs.append((spec.name, kind))
        if self.aggregate_function is not None:
            outputs += list(self.aggregate_function.output.items())
        return outputs

    def table_path(self, table: str) -> str:
        return join_path(self.output_path, table)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


def join_path(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def local_path(path: str) -> str | None:
    """A path (or ``file:`` URI) on the local file system as a plain path; None for a URI another
    file system serves (``s3a://``, ``hdfs://`` ...), which only Hadoop's FileSystem can reach."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    if path.startswith("file:"):
        return path.removeprefix("file:")
    return None if "://" in path else path


def parse_instant(text: str, field: str) -> int:
    """Epoch milliseconds from ``1700000000000`` or ISO-8601 with a zone (a command's or a
    param's time); raises ConfigError naming ``field``."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:
        raise ConfigError(field, f"not an ISO-8601 time or epoch ms: {text!r}") from error
    if moment.tzinfo is None:
        raise ConfigError(field, f"needs a time zone (e.g. {value}Z): {text!r}")
    return int(moment.timestamp() * 1000)


def _within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or below it (as written, once resolved)."""
    path, folder = path.rstrip("/"), folder.rstrip("/")
    return path == folder or path.startswith(folder + "/")


def resolve_path(path: str) -> str:
    if "://" in path or path.startswith("/"):
        return path
    base = Path(os.environ.get("REPLAY_BASE_DIR") or os.getcwd())
    return str((base / path).resolve())


def load_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Read and validate a pipeline YAML file. Raises ConfigError naming the bad field."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError as error:
        raise ConfigError("(file)", f"no such file: {path}", source) from error
    except IsADirectoryError as error:
        raise ConfigError("(file)", f"is a directory, not a pipeline's YAML file: {path}", source) from error
    except OSError as error:
        raise ConfigError("(file)", f"cannot be read: {error.strerror or error}", source) from error
    except UnicodeDecodeError as error:
        problem = f"not UTF-8 text: {error.reason} at byte {error.start}"
        raise ConfigError("(file)", problem, source) from error
    except yaml.YAMLError as error:
        raise ConfigError("(file)", f"not valid YAML: {error}", source) from error
    return parse_config(data, source=source, overrides=overrides)


def parse_config(
    data: Any, source: str | None = None, overrides: dict[str, Any] | None = None
) -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError("(file)", "must be a mapping of settings", source)
    data = _deep_merge(data, overrides or {})
    return _Parser(source).parse(data)


class _Parser:
    def __init__(self, source: str | None):
        self.source = source

    def fail(self, field_name: str, problem: str) -> ConfigError:
        return ConfigError(field_name, problem, self.source)

    def parse(self, data: dict[str, Any]) -> PipelineConfig:
        unknown = sorted(set(data) - _TOP_LEVEL)
        if unknown:
            raise self.fail(unknown[0], f"unknown setting (known: {', '.join(sorted(_TOP_LEVEL))})")
        name = self.required(data, "name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise self.fail("name", "must start with a letter and use letters, digits, _ or -")
        source = self.parse_source(self.mapping(data, "source", required=True))
        key = data.get("key", [])
        key = [key] if isinstance(key, str) else key
        if not isinstance(key, list) or not all(isinstance(k, str) and k for k in key) or not key:
            raise self.fail("key", "must be a field name or a non-empty list of field names")
        watermark = self.parse_watermark(self.mapping(data, "watermark"))
        keyed_process = self.parse_function(data, "process")
        join = self.parse_join(self.mapping(data, "join"), watermark, source)
        if keyed_process is not None:
            clash = [name for name in _WINDOWED_ONLY if data.get(name) is not None]
            if join is not None:
                clash.insert(0, "join")
            if clash:
                raise self.fail(clash[0], "does not apply to a keyed process function (process:)")
            data = {**data, "window": {"type": "global"}}
        if join is not None and join.type == "interval":
            clash = [name for name in _WINDOWED_ONLY if data.get(name) is not None]
            if clash:
                raise self.fail(clash[0], "does not apply to an interval join (join.type: interval)")
            data = {**data, "window": {"type": "global"}}
        if join is not None and (data.get("aggregates") is not None or data.get("aggregate_function")
                                 or data.get("process_function")):
            name = next(n for n in ("aggregates", "aggregate_function", "process_function") if data.get(n))
            raise self.fail(name, "a join emits joined pairs (join.function), not aggregates")
        window = self.build("window", assigner_from_dict, self.mapping(data, "window", required=True))
        trigger = self.build("trigger", trigger_from_dict, self.mapping(data, "trigger") or None)
        lateness = self.duration(data, "allowed_lateness", "allowed_lateness", default=0)
        late_output = data.get("late_output", "side_output")
        if late_output not in LATE_OUTPUTS:
            raise self.fail("late_output", f"must be one of {', '.join(LATE_OUTPUTS)}")
        process_function = self.parse_function(data, "process_function")
        aggregate_function = self.parse_function(data, "aggregate_function")
        if keyed_process is not None or join is not None or (
            process_function is not None and data.get("aggregates") is None and aggregate_function is None
        ):
            aggregates = []  # full-window form: the process function sees every record
        else:
            aggregates = self.parse_aggregates(data.get("aggregates"))
        evictor = None
        if data.get("evictor") is not None:
            evictor = self.build("evictor", evictor_from_dict, self.mapping(data, "evictor"))
            if aggregate_function is not None:
                raise self.fail("evictor", "cannot be combined with an incremental aggregate_function")
        batch = self.mapping(data, "batch")
        max_records = self.whole_number(batch, "batch", "max_records", 100_000)
        pass_max_records = self.whole_number(batch, "batch", "pass_max_records", 1_000_000)
        sort_on_driver_max_records = self.whole_number(
            batch, "batch", "sort_on_driver_max_records", 20_000_000, minimum=0
        )
        driver_pass_max_records = self.whole_number(
            batch, "batch", "driver_pass_max_records", 1_000_000, minimum=0
        )
        driver_processes = self.whole_number(batch, "batch", "driver_processes", 2, minimum=1)
        stage_on_driver_max_records = self.whole_number(
            batch, "batch", "stage_on_driver_max_records", 2_500_000, minimum=0
        )
        unknown = sorted(set(batch) - {
            "max_records", "pass_max_records", "sort_on_driver_max_records", "driver_pass_max_records",
            "driver_processes", "stage_on_driver_max_records",
        })
        if unknown:
            raise self.fail(f"batch.{unknown[0]}", "unknown setting")
        output = self.mapping(data, "output", required=True)
        output_path = output.get("path")
        if not isinstance(output_path, str) or not output_path:
            raise self.fail("output.path", "is required: where the Delta tables go")
        latest_every = self.whole_number(output, "output", "latest_every", 10, unit=" of batches")
        unknown = sorted(set(output) - {"path", "latest_every"})
        if unknown:
            raise self.fail(f"output.{unknown[0]}", "unknown setting")
        config = PipelineConfig(
            name=name,
            source=source,
            key=tuple(key),
            watermark=watermark,
            window=window,
            trigger=trigger,
            allowed_lateness=lateness,
            late_output=late_output,
            aggregates=tuple(aggregates),
            batch_max_records=max_records,
            pass_max_records=pass_max_records,
            sort_on_driver_max_records=sort_on_driver_max_records,
            driver_pass_max_records=driver_pass_max_records,
            driver_processes=driver_processes,
            stage_on_driver_max_records=stage_on_driver_max_records,
            output_path=resolve_path(output_path),
            latest_every=latest_every,
            evictor=evictor,
            aggregate_function=aggregate_function,
            process_function=process_function,
            keyed_process=keyed_process,
            join=join,
            quality=self.parse_quality(self.mapping(data, "quality")),
            maintenance=self.parse_maintenance(self.mapping(data, "maintenance")),
            schedule=self.parse_schedule(self.mapping(data, "schedule")),
            config_path=self.source,
            raw=data,
        )
        self.cross_checks(config)
        return config

    def cross_checks(self, config: PipelineConfig) -> None:
        reserved = set(config.key)
        src = config.source
        for spec in config.aggregates:
            if spec.column in reserved:
                raise self.fail(f"aggregates.{spec.name}", "cannot aggregate a key field")
            if spec.name in reserved:
                raise self.fail(f"aggregates.{spec.name}", "name clashes with a key field")
        if config.window.kind == "session" and not config.trigger.can_merge():
            raise self.fail("trigger", f"{config.trigger.kind} cannot be used with session windows")
        if src.event_time in reserved:
            raise self.fail("key", "the event-time field cannot be a key")
        # Keys and value columns become output columns, whose names must stay plain: a nested
        # one is named in source.fields (why: a dot in a Spark column name means a struct field).
        for name in [*config.key, *config.value_columns()]:
            if "." in name:
                raise self.fail("key" if name in reserved else "aggregates",
                                f"{name!r} is a nested path: name it in source.fields "
                                f"({name.rsplit('.', 1)[-1]}: {name}) and use that name")
        if config.window.time == "processing" and config.allowed_lateness:
            raise self.fail("allowed_lateness", "applies to event-time windows only")
        # The tables' data files are Parquet (their logs sit in _delta_log/, which listings skip):
        # a Parquet archive around them would take them for records.
        for where, source in (("source.path", src), ("join.right.path", config.join and config.join.right)):
            if source is not None and source.format == "parquet" and _within(config.output_path, source.path):
                raise self.fail("output.path", f"{config.output_path} is inside {where} ({source.path}), "
                                "a Parquet archive: its listing would read the tables' own Parquet files")

    def parse_source(self, data: dict[str, Any], where: str = "source",
                     extra: tuple[str, ...] = ()) -> SourceConfig:
        path = data.get("path")
        if not isinstance(path, str) or not path:
            raise self.fail(f"{where}.path", "is required: a file or directory of the archive")
        fmt = data.get("format", "jsonl")
        if fmt not in FORMATS:
            raise self.fail(f"{where}.format", f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
        event_time = data.get("event_time")
        if not isinstance(event_time, str) or not event_time:
            raise self.fail(f"{where}.event_time", "is required: the field holding event time")
        if not _FIELD_PATH.match(event_time):
            raise self.fail(f"{where}.event_time", _PATH_PROBLEM)
        names = {}
        for opt in ("ingest_time", "partition", "offset", "id"):
            value = data.get(opt)
            if value is not None and (not isinstance(value, str) or not _FIELD_PATH.match(value)):
                raise self.fail(f"{where}.{opt}", f"must be a field name; {_PATH_PROBLEM}")
            names[opt] = value
        time_format = data.get("event_time_format")
        if time_format is not None:
            problem = datetime_pattern_problem(time_format)
            if problem:
                raise self.fail(f"{where}.event_time_format", problem)
        fields = data.get("fields") or {}
        if not isinstance(fields, dict):
            raise self.fail(f"{where}.fields", "must map field names to nested paths (user: payload.user)")
        for name, nested_path in fields.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise self.fail(f"{where}.fields", f"{name!r} is not a field name ({_NAME.pattern})")
            if not isinstance(nested_path, str) or not _FIELD_PATH.match(nested_path):
                raise self.fail(f"{where}.fields.{name}", _PATH_PROBLEM)
        types = data.get("types") or {}
        if not isinstance(types, dict):
            raise self.fail(f"{where}.types", "must map field names to types")
        for name, kind in types.items():
            if kind not in TYPES:
                raise self.fail(f"{where}.types.{name}", f"must be one of {', '.join(TYPES)}")
        layout = data.get("layout")
        if layout is not None:
            if layout not in LAYOUTS:
                raise self.fail(f"{where}.layout", f"must be one of {', '.join(LAYOUTS)}, not {layout!r}")
            if fmt == "delta":
                raise self.fail(f"{where}.layout", "names archive files; a Delta table has none of its own")
            named = [opt for opt in ("partition", "offset") if names[opt]]
            if named:
                raise self.fail(f"{where}.{named[0]}", f"comes from the object names with layout {layout} "
                                "(<topic>+<partition>+<startOffset>.<ext>): leave it out")
        pin = self.parse_delta_pin(data, where, fmt)
        unknown = sorted(set(data) - {"path", "format", "event_time", "types", "event_time_format",
                                      "fields", "layout", *names, *pin, *extra})
        if unknown:
            raise self.fail(f"{where}.{unknown[0]}", "unknown setting")
        return SourceConfig(resolve_path(path), fmt, event_time, types=dict(types),
                            event_time_format=time_format, fields=dict(fields), layout=layout,
                            **names, **pin)

    def parse_delta_pin(self, data: dict[str, Any], where: str, fmt: str) -> dict[str, Any]:
        """``version`` or ``timestamp`` of a Delta source (``archive_delta``), as given."""
        pin = {name: data[name] for name in ("version", "timestamp") if data.get(name) is not None}
        if pin and fmt != "delta":
            raise self.fail(f"{where}.{next(iter(pin))}",
                            f"pins a Delta table's snapshot: only with format delta, not {fmt}")
        if len(pin) == 2:
            raise self.fail(f"{where}.version", "and timestamp both pin the snapshot: give one of them")
        version = pin.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
            raise self.fail(f"{where}.version", f"must be a table version (an integer >= 0), not {version!r}")
        if "timestamp" in pin:
            pin["timestamp"] = str(pin["timestamp"])
            parse_instant(pin["timestamp"], f"{where}.timestamp")
        return pin

    def parse_join(self, data: dict[str, Any], left_watermark: WatermarkConfig,
                   left: SourceConfig) -> JoinConfig | None:
        if not data:
            return None
        kind = data.get("type")
        if kind not in ("interval", "window"):
            raise self.fail("join.type", "must be interval or window")
        right_data = self.mapping(data, "right", required=True) if "right" in data else None
        if right_data is None:
            raise self.fail("join.right", "is required: the second archive (a source mapping)")
        right = self.parse_source(right_data, "join.right", extra=("watermark",))
        if right.path == left.path:
            raise self.fail("join.right.path", "must be a different archive than source.path")
        if bool(right.ingest_time) != bool(left.ingest_time):
            raise self.fail("join.right.ingest_time", "both inputs need an ingest_time, or neither: "
                            "it is the replay clock that interleaves them")
        own = self.mapping(right_data, "watermark")
        unknown = sorted(set(own) - {"max_out_of_orderness", "idle_timeout"})
        if unknown:
            raise self.fail(f"join.right.watermark.{unknown[0]}",
                            "unknown setting (the emit mode is the pipeline's watermark.emit)")
        parsed = self.parse_watermark({"emit": left_watermark.emit_spec, **own}, "join.right.watermark")
        inherited = left_watermark
        right_watermark = WatermarkConfig(
            parsed.max_out_of_orderness if "max_out_of_orderness" in own else inherited.max_out_of_orderness,
            inherited.emit, inherited.interval,
            parsed.idle_timeout if "idle_timeout" in own else inherited.idle_timeout,
        )
        lower = upper = 0
        allowed = {"type", "right", "function"}
        if kind == "interval":
            allowed |= {"lower", "upper", "lower_inclusive", "upper_inclusive"}
            for name in ("lower", "upper"):
                if name not in data:
                    raise self.fail(f"join.{name}", "is required for an interval join (e.g. -5s, 10s)")
            try:
                lower, upper = _signed_duration(data["lower"]), _signed_duration(data["upper"])
            except ValueError as error:
                raise self.fail("join.lower/upper", str(error)) from error
            for name in ("lower_inclusive", "upper_inclusive"):
                if not isinstance(data.get(name, True), bool):
                    raise self.fail(f"join.{name}", "must be true or false")
            # Flink's IntervalJoin: exclusive bounds become inclusive ones one millisecond in.
            lower += 0 if data.get("lower_inclusive", True) else 1
            upper -= 0 if data.get("upper_inclusive", True) else 1
            if lower > upper:
                raise self.fail("join.lower", f"must not be above join.upper ({lower} > {upper} ms)")
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise self.fail(f"join.{unknown[0]}", f"unknown setting for a {kind} join")
        function = self.parse_function(data, "function", "join.function")
        return JoinConfig(kind, right, right_watermark, lower, upper, function)

    def parse_watermark(self, data: dict[str, Any], where: str = "watermark") -> WatermarkConfig:
        delay = self.duration(data, "max_out_of_orderness", f"{where}.max_out_of_orderness", 0)
        emit = str(data.get("emit", "per_record"))
        interval = None
        if emit.startswith("periodic"):
            _, _, text = emit.partition(":")
            try:
                interval = parse_duration(text.strip() or data.get("interval", ""))
            except ValueError as error:
                raise self.fail("watermark.emit", f"periodic needs an interval: {error}") from error
            if interval <= 0:
                raise self.fail("watermark.emit", "periodic interval must be positive")
            emit = "periodic"
        elif emit not in ("per_record", "per_batch"):
            raise self.fail("watermark.emit", "must be per_record, periodic:<interval> or per_batch")
        idle = data.get("idle_timeout")
        idle_ms = None if idle is None else self.duration(data, "idle_timeout", f"{where}.idle_timeout")
        if idle_ms == 0:
            raise self.fail(f"{where}.idle_timeout", "must be positive (omit it to never idle)")
        return WatermarkConfig(delay, emit, interval, idle_ms)

    def parse_aggregates(self, data: Any) -> list[AggregateSpec]:
        if data is None:
            data = {"count": "count(*)"}
        if not isinstance(data, dict) or not data:
            raise self.fail("aggregates", "must map output names to functions, e.g. {n: count(*)}")
        specs = []
        for name, text in data.items():
            if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise self.fail(f"aggregates.{name}", "output names must be identifiers")
            try:
                specs.append(AggregateSpec.parse(name, text))
            except ValueError as error:
                raise self.fail(f"aggregates.{name}", str(error)) from error
        return specs

    def parse_function(
        self, data: dict[str, Any], name: str, where: str | None = None
    ) -> UserFunction | None:
        where = where or name
        spec = data.get(name)
        if spec is not None and not isinstance(spec, dict):
            raise self.fail(where, "must be a mapping with class, params and output")
        if not spec:
            return None
        base = {"aggregate_function": AggregateFunction, "process": KeyedProcessFunction,
                "function": JoinFunction}.get(name, ProcessWindowFunction)
        path, params, output = spec.get("class"), spec.get("params") or {}, spec.get("output")
        if not isinstance(path, str):
            raise self.fail(f"{where}.class", "is required: the import path of the class")
        if not isinstance(output, dict) or not output:
            raise self.fail(f"{where}.output", "must declare the outputs, e.g. {total: double}")
        for column, kind in output.items():
            if not isinstance(kind, str) or not _OUTPUT_TYPE.match(kind):
                raise self.fail(f"{where}.output.{column}", "type must be string, long, double, "
                                "boolean or array<...> of them")
        try:
            instance = load_object(path, params, base)
        except ValueError as error:
            raise self.fail(f"{where}.class", str(error)) from error
        return UserFunction(path, dict(params), dict(output), instance)

    def parse_quality(self, data: dict[str, Any]) -> QualityConfig:
        values = {}
        for name in ("max_late_fraction", "max_quarantine_fraction"):
            if name in data:
                value = data[name]
                if not isinstance(value, int | float) or not 0 <= value <= 1:
                    raise self.fail(f"quality.{name}", "must be a fraction between 0 and 1")
                values[name] = float(value)
        ranges = data.get("ranges") or {}
        if not isinstance(ranges, dict):
            raise self.fail("quality.ranges", "must map aggregate names to {min, max}")
        return QualityConfig(**values, ranges=dict(ranges))

    def parse_maintenance(self, data: dict[str, Any]) -> MaintenanceConfig:
        values = {}
        for name in ("optimize_every", "vacuum_every"):
            if name in data:
                values[name] = self.whole_number(data, "maintenance", name, None, minimum=0)
        if "vacuum_retention_hours" in data:
            # Delta refuses a shorter VACUUM retention (its retention check), mid-run: say so before
            # anything is written. Rewinds (recovery, reprocess) need the files it keeps.
            values["vacuum_retention_hours"] = self.whole_number(
                data, "maintenance", "vacuum_retention_hours", None, minimum=MIN_VACUUM_RETENTION_HOURS,
                unit=" of hours (Delta's VACUUM refuses less than a week)",
            )
        return MaintenanceConfig(**values)

    def parse_schedule(self, data: dict[str, Any]) -> ScheduleConfig:
        unknown = sorted(set(data) - {"interval", "start", "end"})
        if unknown:
            raise self.fail(f"schedule.{unknown[0]}", "unknown setting (known: end, interval, start)")
        return ScheduleConfig(
            interval=None if data.get("interval") is None else str(data["interval"]),
            start=None if data.get("start") is None else str(data["start"]),
            end=None if data.get("end") is None else str(data["end"]),
        )

    # helpers -------------------------------------------------------------------------------
    def required(self, data: dict[str, Any], name: str) -> Any:
        if name not in data or data[name] in (None, ""):
            raise self.fail(name, "is required")
        return data[name]

    def whole_number(
        self, data: dict[str, Any], section: str, name: str, default: int | None, minimum: int = 1,
        unit: str = "",
    ) -> int:
        """``data[name]`` (or ``default``) as an int >= ``minimum``; booleans are refused."""
        value = data.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.fail(f"{section}.{name}", f"must be a whole number{unit} >= {minimum}")
        return value

    def mapping(self, data: dict[str, Any], name: str, required: bool = False) -> dict[str, Any]:
        value = data.get(name)
        if value is None:
            if required:
                raise self.fail(name, "is required")
            return {}
        if not isinstance(value, dict):
            raise self.fail(name, "must be a mapping")
        return value

    def duration(self, data: dict[str, Any], key: str, field_name: str, default: Any = None) -> int:
        try:
            return parse_duration(data.get(key, default))
        except ValueError as error:
            raise self.fail(field_name, str(error)) from error

    def build(self, field_name: str, factory: Any, spec: Any) -> Any:
        try:
            return factory(spec)
        except (ValueError, TypeError) as error:
            raise self.fail(field_name, str(error)) from error


def _signed_duration(value: Any) -> int:
    """A duration that may be negative (interval join bounds): ``-5s``, ``10s``, ``-500``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.startswith("-"):
        return -parse_duration(text[1:].strip())
    return parse_duration(text)


def _deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


__all__ = ["MIN_TIMESTAMP", "PipelineConfig", "load_config", "parse_config"]
