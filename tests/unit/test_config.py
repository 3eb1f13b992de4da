"""parse_config: typed values, and every error names the field it is about."""

from __future__ import annotations

import copy

import pytest

from spark_jobs.config import load_config, parse_config
from spark_jobs.core.durations import format_duration, format_timestamp, parse_duration
from spark_jobs.core.triggers import ContinuousEventTimeTrigger, PurgingTrigger
from spark_jobs.core.windows import SlidingWindows
from spark_jobs.exceptions import ConfigError

BASE = {
    "name": "clicks",
    "source": {"path": "archive", "event_time": "ts", "ingest_time": "ingest", "partition": "p"},
    "key": ["user"],
    "watermark": {"max_out_of_orderness": "5s", "emit": "periodic:200ms", "idle_timeout": "1m"},
    "window": {"type": "sliding", "size": "1h", "slide": "5m"},
    "trigger": {"type": "continuous_event_time", "interval": "10s", "purging": True},
    "allowed_lateness": "30s",
    "aggregates": {"n": "count(*)", "spent": "sum(amount)"},
    "output": {"path": "/lake/clicks"},
}


def with_(path: str, value):
    data = copy.deepcopy(BASE)
    *parents, leaf = path.split(".")
    node = data
    for name in parents:
        node = node.setdefault(name, {})
    if value is _DELETE:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return data


_DELETE = object()


def test_a_full_config_parses_into_typed_values():
    config = parse_config(BASE)
    assert config.key == ("user",)
    assert config.window == SlidingWindows(3_600_000, 300_000)
    assert config.trigger == PurgingTrigger(ContinuousEventTimeTrigger(10_000))
    assert config.allowed_lateness == 30_000
    wm = config.watermark
    assert (wm.max_out_of_orderness, wm.emit, wm.interval) == (5_000, "periodic", 200)
    assert wm.idle_timeout == 60_000
    assert wm.emit_spec == "periodic:200ms"
    assert [a.to_text() for a in config.aggregates] == ["count(*)", "sum(amount)"]
    assert config.output_path == "/lake/clicks"
    assert config.outputs() == [("n", "long"), ("spent", "double")]
    assert not config.uses_processing_time


def test_defaults():
    config = parse_config(with_("trigger", _DELETE) | {"watermark": {}})
    assert config.trigger.to_dict() == {"type": "event_time"}
    assert config.watermark.emit == "per_record" and config.watermark.max_out_of_orderness == 0
    assert config.watermark.idle_timeout is None
    assert config.pass_max_records == 1_000_000 and config.sort_on_driver_max_records == 20_000_000
    assert config.driver_pass_max_records == 1_000_000
    assert parse_config(with_("batch.sort_on_driver_max_records", 0)).sort_on_driver_max_records == 0
    assert parse_config(with_("batch.driver_pass_max_records", 0)).driver_pass_max_records == 0
    assert config.driver_processes == 2
    assert parse_config(with_("batch.driver_processes", 1)).driver_processes == 1
    assert config.stage_on_driver_max_records == 2_500_000
    assert parse_config(with_("batch.stage_on_driver_max_records", 0)).stage_on_driver_max_records == 0


@pytest.mark.parametrize(("path", "value", "field"), [
    ("watermark.max_out_of_orderness", "5 seconds", "watermark.max_out_of_orderness"),
    ("allowed_lateness", "-1s", "allowed_lateness"),
    ("window.size", "1x", "window"),
    ("window.size", _DELETE, "window"),
    ("window.type", "hopping", "window"),
    ("trigger.type", "eventually", "trigger"),
    ("trigger.interval", _DELETE, "trigger"),
    ("trigger.purging", "yes", "trigger"),
    ("watermark.emit", "sometimes", "watermark.emit"),
    ("watermark.emit", "periodic", "watermark.emit"),
    ("watermark.idle_timeout", 0, "watermark.idle_timeout"),
    ("source.event_time", _DELETE, "source.event_time"),
    ("source.format", "xml", "source.format"),
    ("source.colour", "red", "source.colour"),
    ("output.path", _DELETE, "output.path"),
    ("aggregates.spent", "median(amount)", "aggregates.spent"),
    ("aggregates.n", "sum(user)", "aggregates.n"),
    ("late_output", "email", "late_output"),
    ("name", "9lives", "name"),
    ("key", [], "key"),
    ("windows", {"type": "tumbling"}, "windows"),
    ("batch.max_records", 0, "batch.max_records"),
    ("batch.sort_on_driver_max_records", -1, "batch.sort_on_driver_max_records"),
    ("batch.sort_on_driver_max_records", True, "batch.sort_on_driver_max_records"),
    ("batch.driver_pass_max_records", -1, "batch.driver_pass_max_records"),
    ("batch.driver_pass_max_records", "all", "batch.driver_pass_max_records"),
    ("batch.driver_processes", 0, "batch.driver_processes"),
    ("batch.stage_on_driver_max_records", -1, "batch.stage_on_driver_max_records"),
    ("batch.stage_on_driver_max_records", "1M", "batch.stage_on_driver_max_records"),
    ("batch.sort_on_cluster", True, "batch.sort_on_cluster"),
    ("maintenance.vacuum_retention_hours", 24, "maintenance.vacuum_retention_hours"),
])
def test_errors_name_the_field(path, value, field):
    with pytest.raises(ConfigError) as error:
        parse_config(with_(path, value))
    assert error.value.field == field
    assert str(error.value).startswith(f"{field}: ")


def test_messages_say_what_is_wrong():
    with pytest.raises(ConfigError, match="tumbling windows need 'size'"):
        parse_config(with_("window", {"type": "tumbling"}))
    with pytest.raises(ConfigError, match="type must be one of event_time, continuous_event_time"):
        parse_config(with_("trigger", {"type": "eventually"}))
    with pytest.raises(ConfigError, match=r"windows: unknown setting \(known: "):
        parse_config(with_("windows", {}))
    with pytest.raises(ConfigError, match="refuses less than a week"):
        parse_config(with_("maintenance.vacuum_retention_hours", 0))
    with pytest.raises(ConfigError, match="not a duration: '1x'"):
        parse_config(with_("window.size", "1x"))


def test_cross_checks():
    processing = with_("window", {"type": "tumbling", "size": "1m", "time": "processing"})
    with pytest.raises(ConfigError) as error:
        parse_config(processing)
    assert error.value.field == "allowed_lateness"
    with pytest.raises(ConfigError) as error:
        parse_config(with_("source.event_time", "user"))
    assert error.value.field == "key"


@pytest.mark.parametrize(("output", "source_format", "refused"), [
    ("archive/lake", "parquet", True), ("archive", "parquet", True), ("archive/", "parquet", True),
    ("archive2", "parquet", False), (".", "parquet", False),
    ("archive/lake", "jsonl", False),  # its listing never reads a table's files (nor _delta_log/)
])
def test_the_tables_may_not_be_inside_a_parquet_archive(output, source_format, refused):
    """Its listing would read the tables' own Parquet files as records."""
    config = with_("output.path", output)
    config["source"]["format"] = source_format
    if not refused:
        assert parse_config(config).output_path.endswith(output.strip("/.") or "")
        return
    with pytest.raises(ConfigError) as error:
        parse_config(config)
    assert error.value.field == "output.path" and "is inside source.path" in error.value.problem


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "missing.yaml")
    assert error.value.field == "(file)"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xd6\x00\xff")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(binary)
    good = tmp_path / "good.yaml"
    good.write_text("name: x\nsource: {path: a, event_time: ts}\nkey: k\nwindow: {type: global}\n"
                    "output: {path: /o}\nunknown: 1\n")
    with pytest.raises(ConfigError) as error:
        load_config(good)
    assert error.value.field == "unknown" and error.value.source == str(good)


@pytest.mark.parametrize(("text", "ms"), [
    ("500ms", 500), ("10s", 10_000), ("1m", 60_000), ("2h", 7_200_000), ("1d", 86_400_000),
    (" 3 s ", 3_000), (250, 250), (0, 0),
])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["", "1", "1.5s", "-1s", "1 min", True, -5, 2**50 + 1, "13100000d"])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_format_timestamp_spells_times_past_year_9999_in_ms():
    assert format_timestamp(253402300799999) == "9999-12-31 23:59:59.999"
    assert format_timestamp(253402300800000) == "253402300800000 ms"
    assert (format_timestamp(-(2**63)), format_timestamp(2**63 - 1)) == ("-inf", "+inf")


def test_format_duration_is_the_shortest_exact_spelling():
    assert [format_duration(ms) for ms in (0, 1, 1_500, 60_000, 90_000, 86_400_000)] == [
        "0ms", "1ms", "1500ms", "1m", "90s", "1d"]


def test_nested_paths_fields_and_event_time_format():
    data = with_("source.event_time", "payload.ts")
    data["source"].update({"event_time_format": "yyyy-MM-dd'T'HH:mm:ss", "partition": "kafka.p",
                           "fields": {"user": "payload.user", "amount": "payload.amount"}})
    source = parse_config(data).source
    assert source.event_time_format == "yyyy-MM-dd'T'HH:mm:ss"
    assert source.path_of("user") == ("payload", "user")
    assert source.path_of("payload.ts") == ("payload", "ts")
    assert source.path_of("ingest") == ("ingest",)


@pytest.mark.parametrize("path, value, field, message", [
    ("source.event_time", "payload..ts", "source.event_time", "dot-separated path"),
    ("source.id", "a.'b'", "source.id", "dot-separated path"),
    ("source.event_time_format", "HH:mm", "source.event_time_format", "year"),
    ("source.event_time_format", "YYYY-ww", "source.event_time_format", "'Y'"),
    ("source.event_time_format", "", "source.event_time_format", "datetime pattern"),
    ("source.fields", ["payload.user"], "source.fields", "must map"),
    ("source.fields", {"user": "payload."}, "source.fields.user", "dot-separated path"),
    ("source.fields", {"a.b": "payload.user"}, "source.fields", "not a field name"),
    ("key", ["payload.user"], "key", "name it in source.fields"),
    ("aggregates", {"s": "sum(payload.amount)"}, "aggregates", "name it in source.fields"),
])
def test_nested_path_errors(path, value, field, message):
    with pytest.raises(ConfigError) as error:
        parse_config(with_(path, value))
    assert error.value.field == field and message in str(error.value)
