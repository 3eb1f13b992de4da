"""Pipeline configs: the YAML contract users write, parsed into typed values.

Every problem is reported as a :class:`ConfigError` naming the field, before anything runs.
Relative paths resolve against ``REPLAY_BASE_DIR`` (default: the current directory); URIs
such as ``s3a://bucket/path`` are kept as they are.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .aggregates import NUMERIC_FUNCTIONS, AggregateSpec
from .durations import MIN_TIMESTAMP, parse_duration
from .exceptions import ConfigError
from .triggers import Trigger, trigger_from_dict
from .windows import WindowAssigner, assigner_from_dict

FORMATS = ("jsonl", "parquet")
TYPES = ("string", "long", "double", "boolean")
LATE_OUTPUTS = ("side_output", "drop")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_TOP_LEVEL = {
    "name", "source", "key", "watermark", "window", "trigger", "allowed_lateness",
    "late_output", "aggregates", "batch", "output", "quality", "maintenance", "schedule",
    "description", "evictor", "aggregate_function", "process_function", "process",
}
_WINDOWED_ONLY = ("window", "trigger", "aggregates", "evictor", "aggregate_function",
                  "process_function", "allowed_lateness")
_OUTPUT_TYPE = re.compile(r"^(string|long|double|boolean|array<(string|long|double|boolean)>)$")


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


@dataclass(frozen=True)
class WatermarkConfig:
    max_out_of_orderness: int = 0
    emit: str = "per_record"  # per_record | periodic | per_batch
    interval: int | None = None  # for periodic
    idle_timeout: int | None = None

    @property
    def emit_spec(self) -> str:
        return f"periodic:{self.interval}ms" if self.emit == "periodic" else self.emit


@dataclass(frozen=True)
class QualityConfig:
    max_late_fraction: float = 0.5
    max_quarantine_fraction: float = 0.5
    ranges: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class MaintenanceConfig:
    optimize_every: int = 100  # batches; 0 disables
    vacuum_every: int = 0  # batches; 0 disables
    vacuum_retention_hours: int = 168


@dataclass(frozen=True)
class ScheduleConfig:
    interval: str | None = None  # cron preset / cron expression / duration, for the Airflow DAG
    start: str | None = None


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
    latest_every: int = 10
    evictor: Any = None
    aggregate_function: UserFunction | None = None
    process_function: UserFunction | None = None
    #: A keyed process function replaces windows, triggers and aggregates altogether.
    keyed_process: UserFunction | None = None
    quality: QualityConfig = field(default_factory=QualityConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    config_path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def uses_processing_time(self) -> bool:
        return self.window.time == "processing" or "processing" in self.trigger.to_dict()["type"]

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

    def outputs(self) -> list[tuple[str, str]]:
        """The named values each firing emits, with their types, in column order."""
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
        if keyed_process is not None:
            clash = [name for name in _WINDOWED_ONLY if data.get(name) is not None]
            if clash:
                raise self.fail(clash[0], "does not apply to a keyed process function (process:)")
            data = {**data, "window": {"type": "global"}}
        window = self.build("window", assigner_from_dict, self.mapping(data, "window", required=True))
        trigger = self.build("trigger", trigger_from_dict, self.mapping(data, "trigger") or None)
        lateness = self.duration(data, "allowed_lateness", "allowed_lateness", default=0)
        late_output = data.get("late_output", "side_output")
        if late_output not in LATE_OUTPUTS:
            raise self.fail("late_output", f"must be one of {', '.join(LATE_OUTPUTS)}")
        process_function = self.parse_function(data, "process_function")
        aggregate_function = self.parse_function(data, "aggregate_function")
        if keyed_process is not None or (
            process_function is not None and data.get("aggregates") is None and aggregate_function is None
        ):
            aggregates = []  # full-window form: the process function sees every record
        else:
            aggregates = self.parse_aggregates(data.get("aggregates"))
        evictor = None
        if data.get("evictor") is not None:
            from .functions import evictor_from_dict

            evictor = self.build("evictor", evictor_from_dict, self.mapping(data, "evictor"))
            if aggregate_function is not None:
                raise self.fail("evictor", "cannot be combined with an incremental aggregate_function")
        batch = self.mapping(data, "batch")
        max_records = batch.get("max_records", 100_000)
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
            raise self.fail("batch.max_records", "must be a whole number >= 1")
        output = self.mapping(data, "output", required=True)
        output_path = output.get("path")
        if not isinstance(output_path, str) or not output_path:
            raise self.fail("output.path", "is required: where the Delta tables go")
        latest_every = output.get("latest_every", 10)
        if not isinstance(latest_every, int) or isinstance(latest_every, bool) or latest_every < 1:
            raise self.fail("output.latest_every", "must be a whole number of batches >= 1")
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
            output_path=resolve_path(output_path),
            latest_every=latest_every,
            evictor=evictor,
            aggregate_function=aggregate_function,
            process_function=process_function,
            keyed_process=keyed_process,
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
        if config.window.time == "processing" and config.allowed_lateness:
            raise self.fail("allowed_lateness", "applies to event-time windows only")

    def parse_source(self, data: dict[str, Any]) -> SourceConfig:
        path = data.get("path")
        if not isinstance(path, str) or not path:
            raise self.fail("source.path", "is required: a file or directory of the archive")
        fmt = data.get("format", "jsonl")
        if fmt not in FORMATS:
            raise self.fail("source.format", f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
        event_time = data.get("event_time")
        if not isinstance(event_time, str) or not event_time:
            raise self.fail("source.event_time", "is required: the field holding event time")
        names = {}
        for opt in ("ingest_time", "partition", "offset", "id"):
            value = data.get(opt)
            if value is not None and (not isinstance(value, str) or not value):
                raise self.fail(f"source.{opt}", "must be a field name")
            names[opt] = value
        types = data.get("types") or {}
        if not isinstance(types, dict):
            raise self.fail("source.types", "must map field names to types")
        for name, kind in types.items():
            if kind not in TYPES:
                raise self.fail(f"source.types.{name}", f"must be one of {', '.join(TYPES)}")
        unknown = sorted(set(data) - {"path", "format", "event_time", "types", *names})
        if unknown:
            raise self.fail(f"source.{unknown[0]}", "unknown setting")
        return SourceConfig(resolve_path(path), fmt, event_time, types=dict(types), **names)

    def parse_watermark(self, data: dict[str, Any]) -> WatermarkConfig:
        delay = self.duration(data, "max_out_of_orderness", "watermark.max_out_of_orderness", 0)
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
        idle_ms = None if idle is None else self.duration(data, "idle_timeout", "watermark.idle_timeout")
        if idle_ms == 0:
            raise self.fail("watermark.idle_timeout", "must be positive (omit it to never idle)")
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

    def parse_function(self, data: dict[str, Any], name: str) -> UserFunction | None:
        spec = self.mapping(data, name)
        if not spec:
            return None
        from .functions import AggregateFunction, ProcessWindowFunction, load_object
        from .process import KeyedProcessFunction

        base = {"aggregate_function": AggregateFunction, "process": KeyedProcessFunction}.get(
            name, ProcessWindowFunction
        )
        path, params, output = spec.get("class"), spec.get("params") or {}, spec.get("output")
        if not isinstance(path, str):
            raise self.fail(f"{name}.class", "is required: the import path of the class")
        if not isinstance(output, dict) or not output:
            raise self.fail(f"{name}.output", "must declare the outputs, e.g. {total: double}")
        for column, kind in output.items():
            if not isinstance(kind, str) or not _OUTPUT_TYPE.match(kind):
                raise self.fail(f"{name}.output.{column}", "type must be string, long, double, "
                                "boolean or array<...> of them")
        try:
            instance = load_object(path, params, base)
        except ValueError as error:
            raise self.fail(f"{name}.class", str(error)) from error
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
        for name in ("optimize_every", "vacuum_every", "vacuum_retention_hours"):
            if name in data:
                value = data[name]
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise self.fail(f"maintenance.{name}", "must be a whole number >= 0")
                values[name] = value
        return MaintenanceConfig(**values)

    def parse_schedule(self, data: dict[str, Any]) -> ScheduleConfig:
        return ScheduleConfig(
            interval=None if data.get("interval") is None else str(data["interval"]),
            start=None if data.get("start") is None else str(data["start"]),
        )

    # helpers -------------------------------------------------------------------------------
    def required(self, data: dict[str, Any], name: str) -> Any:
        if name not in data or data[name] in (None, ""):
            raise self.fail(name, "is required")
        return data[name]

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


def _deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


__all__ = ["MIN_TIMESTAMP", "PipelineConfig", "load_config", "parse_config"]
