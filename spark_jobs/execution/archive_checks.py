"""Typing and checking an archive's fields with Spark SQL, shared by the JSON Lines and Parquet
readers (``archive_jsonl``, ``archive_parquet``): every line gets exactly one outcome, NULL for an
accepted record, else the quarantine reason and detail (``CheckedArchive``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..config import pattern_has_zone
from ..core.durations import format_timestamp
from .archive_files import KAFKA_CONNECT_NAME, first_record_line

if TYPE_CHECKING:
    from ..config import PipelineConfig

_SPARK_TYPES = {"string": "string", "long": "bigint", "double": "double", "boolean": "boolean"}

_EPOCH_MS = r"^-?[0-9]+$"
_ISO_WITH_ZONE = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
# Spark's timestamp cast wants seconds; ISO-8601 lets them be left out (22:13Z).
_ISO_NO_SECONDS = r"^([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2})(Z|[+-][0-9]{2}:[0-9]{2})$"
_DETAIL_VALUE_CHARS = 200


@dataclass(frozen=True)
class CheckedArchive:
    """``check_archive``'s result."""

    #: Every line (Parquet: row), typed and checked: ``_outcome`` is NULL for an accepted record,
    #: else ``(r, d)``, the quarantine reason and detail.
    frame: DataFrame
    #: At most this many rows (lines or Parquet rows), known without parsing; None when unknown
    #: (gzip files, whose lines are only known once decompressed).
    max_rows: int | None


def empty_checked(spark: SparkSession, config: PipelineConfig) -> DataFrame:
    columns = [
        "_file string", "_file_index int", "_line bigint", "_raw string",
        "_outcome struct<r: string, d: string>", "_event_time bigint", "_ingest_time bigint",
        "_partition string", "_offset bigint", "_id string",
        *[f"{quote(k)} string" for k in config.key],
        *[f"{quote(c)} {_SPARK_TYPES[config.column_type(c)]}" for c in config.value_columns()],
    ]
    return spark.createDataFrame([], ", ".join(columns))


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def glob_escaped(path: str) -> str:
    """Spark expands glob characters in load() paths; a file named ``x[1].jsonl`` must not be."""
    for char in "\\[]{}*?":
        path = path.replace(char, "\\" + char)
    return path


def needed_fields(config: PipelineConfig) -> list[str]:
    source = config.source
    names = [source.event_time, *config.key, source.ingest_time, source.partition, source.offset,
             source.id, *config.value_columns()]
    return list(dict.fromkeys(n for n in names if n))


def root_fields(config: PipelineConfig) -> list[str]:
    """The top-level fields a record's needed fields live in (``payload`` for ``payload.ts``)."""
    return list(dict.fromkeys(config.source.path_of(n)[0] for n in needed_fields(config)))


def nested_texts(config: PipelineConfig, roots: dict[str, Column]) -> dict[str, Column]:
    """Each needed field's text from its top-level field's text (``roots``): a nested one is read
    from that field's JSON (an object's text is its JSON), NULL when any step is absent or null."""
    texts = {}
    for name in needed_fields(config):
        root, *rest = config.source.path_of(name)
        texts[name] = roots[root] if not rest else F.get_json_object(roots[root], _json_path(rest))
    return texts


def _json_path(steps: list[str]) -> str:
    # Bracket notation, so a name may hold any character but the quote (refused by the config).
    return "$" + "".join(f"['{step}']" for step in steps)


def schema_texts(
    config: PipelineConfig, schema: T.StructType,
) -> tuple[dict[str, Column], dict[str, Column]]:
    """``validate``'s ``texts`` and ``parsed_ms`` for a typed source (Parquet): each needed field's
    column by its path through structs, as text; timestamps as epoch ms.

    A path that reaches a string column before its end reads the rest from that string as JSON
    (a JSON payload kept as text); a missing step gives NULL (``missing_field``).
    """
    texts: dict[str, Column] = {}
    event_ms: dict[str, Column] = {}
    for name in needed_fields(config):
        column, kind, rest = _resolve(schema, config.source.path_of(name))
        if column is None:
            texts[name] = F.lit(None).cast("string")
        elif rest:
            texts[name] = (F.get_json_object(column, _json_path(rest))
                           if isinstance(kind, T.StringType) else F.lit(None).cast("string"))
        elif isinstance(kind, T.TimestampType | T.TimestampNTZType):
            # An instant needs no parsing; TIMESTAMP_NTZ is read as UTC, like Flink's TIMESTAMP
            # rowtime (the session time zone must not shift event times).
            if isinstance(kind, T.TimestampType):
                millis = F.unix_millis(column)  # floors sub-millisecond parts, also before 1970
            else:
                sql_name = ".".join(quote(step) for step in config.source.path_of(name))
                micros = f"timestampdiff(MICROSECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {sql_name})"
                millis = F.expr(f"({micros} - pmod({micros}, 1000)) div 1000")
            texts[name] = millis.cast("string")
            event_ms[name] = millis
        elif isinstance(kind, T.StructType | T.ArrayType | T.MapType):
            texts[name] = F.to_json(column)
        else:
            texts[name] = column.cast("string")
    return texts, event_ms


def _resolve(
    schema: T.StructType, path: tuple[str, ...],
) -> tuple[Column | None, T.DataType | None, list[str]]:
    """The column at ``path`` through struct fields, its type, and the steps left when a string
    column is met first; ``(None, None, [])`` when a step is missing."""
    column: Column | None = None
    kind: T.DataType = schema
    for depth, step in enumerate(path):
        if isinstance(kind, T.StringType) and column is not None:
            return column, kind, list(path[depth:])
        if not isinstance(kind, T.StructType) or step not in kind.fieldNames():
            return None, None, []
        column = F.col(quote(step)) if column is None else column.getField(step)
        kind = kind[step].dataType
    return column, kind, []


def required_fields(config: PipelineConfig) -> list[str]:
    """The fields every accepted record has (non-null)."""
    source = config.source
    required = [source.event_time, *config.key]
    required += [n for n in (source.ingest_time, source.partition, source.offset, source.id) if n]
    return list(dict.fromkeys(required))


def validate(
    lines: DataFrame,
    config: PipelineConfig,
    texts: dict[str, Column],
    parsed_ms: dict[str, Column],
) -> DataFrame:
    """Type and check the fields; every row gets exactly one outcome.

    ``texts`` holds each needed field as text (NULL when absent); ``parsed_ms`` time fields that
    are already epoch ms; ``_pre_reason``/``_pre_detail`` what is known before the fields are
    typed (not one JSON object, invalid UTF-8, a damaged file's tail). The first failing check
    names the reason, in the order of the quarantine reasons.
    """
    source = config.source
    required = required_fields(config)

    def time_ms(name: str, pattern: str | None = None) -> Column:
        if name in parsed_ms:
            return parsed_ms[name]
        return _time_ms(texts[name]) if pattern is None else _formatted_time_ms(texts[name], pattern)

    # The typing (regular expressions, casts) is projected once, and the checks and the output
    # read its columns: inlined into one expression, Spark would run it in the filter that keeps
    # the accepted records and again in the projection after it, several times a field (10M
    # records: 7.4 -> 6.0 s a read, warm).
    typing = {"_event_time": time_ms(source.event_time, source.event_time_format)}
    if source.ingest_time:
        typing["_ingest_time"] = time_ms(source.ingest_time)
    if source.offset:
        typing["_offset"] = F.trim(texts[source.offset]).try_cast("bigint")
    named = source.layout == "kafka_connect"
    if named:  # Kafka's partition and offset: the object's name and the record's place in it
        def name_part(group: int) -> Column:
            return F.regexp_extract(F.col("_file"), KAFKA_CONNECT_NAME, group)

        typing["_named_partition"] = F.when(
            name_part(1) != "", F.concat(name_part(1), F.lit("-"), name_part(2)))
        typing["_offset"] = (name_part(3).try_cast("bigint") + F.col("_line")
                             - F.lit(first_record_line(source.format)))
    value_names = {c: f"_typed{i}" for i, c in enumerate(config.value_columns())}
    for column, name in value_names.items():
        typing[name] = _typed_value(texts[column], config.column_type(column))
    text_names = {field: f"_text{i}" for i, field in enumerate(texts)}
    lines = lines.select(
        "_file", "_file_index", "_line", "_raw", "_pre_reason", "_pre_detail",
        *[texts[field].alias(name) for field, name in text_names.items()],
        *[column.alias(name) for name, column in typing.items()],
    )
    texts = {field: F.col(name) for field, name in text_names.items()}

    def shown(name: str) -> Column:
        return F.concat(F.lit(f"{name}='"), F.substring(texts[name], 1, _DETAIL_VALUE_CHARS), F.lit("'"))

    missing = [F.when(texts[n].isNull(), F.lit(n)) for n in required]
    any_missing = reduce(Column.__or__, [texts[n].isNull() for n in required])
    event_ms = F.col("_event_time")
    typed: dict[str, Column] = {}
    type_errors = []
    event_range, ingest_range = config.accepted_times()
    if source.ingest_time:
        typed["_ingest_time"] = F.col("_ingest_time")
        ingest_outside, ingest_words = _out_of_range(typed["_ingest_time"], ingest_range)
        type_errors.append(F.when(typed["_ingest_time"].isNull(), F.concat(
            shown(source.ingest_time), F.lit(" is not epoch ms or ISO-8601 with a zone")))
            .when(ingest_outside, F.concat(shown(source.ingest_time), ingest_words)))
    if source.offset:
        typed["_offset"] = F.col("_offset")
        type_errors.append(F.when(typed["_offset"].isNull(), F.concat(
            shown(source.offset), F.lit(" is not a long"))))
    if named:
        typed["_offset"] = F.col("_offset")
    for column in config.value_columns():
        kind = config.column_type(column)
        value = F.col(value_names[column])
        typed[column] = value
        # Absent or null values are fine (aggregates skip nulls); present and wrong is not.
        type_errors.append(F.when(texts[column].isNotNull() & value.isNull(), F.concat(
            shown(column), F.lit(f" is not a {'finite double' if kind == 'double' else kind}"))))
    any_type_error = reduce(Column.__or__, [e.isNotNull() for e in type_errors], F.lit(False))

    event_outside, event_words = _out_of_range(event_ms, event_range)
    outcome = F.when(F.col("_pre_reason").isNotNull(),
                     F.struct(F.col("_pre_reason").alias("r"), F.col("_pre_detail").alias("d")))
    if named:
        outcome = outcome.when(F.col("_named_partition").isNull(), F.struct(
            F.lit("invalid_object_name").alias("r"),
            F.lit("not named <topic>+<partition>+<startOffset>.<ext> (source.layout kafka_connect)")
            .alias("d")))
    outcome = (
        outcome.when(any_missing, F.struct(
            F.lit("missing_field").alias("r"),
            F.concat(F.lit("missing or null: "), F.concat_ws(", ", *missing)).alias("d")))
        .when(event_ms.isNull(), F.struct(
            F.lit("invalid_timestamp").alias("r"),
            F.concat(shown(source.event_time), F.lit(
                " is not epoch ms or ISO-8601 with a zone (Z or +hh:mm)" if source.event_time_format is None
                else f" does not match event_time_format '{source.event_time_format}'")).alias("d")))
        .when(event_outside, F.struct(
            F.lit("invalid_timestamp").alias("r"),
            F.concat(shown(source.event_time), event_words).alias("d")))
        .when(any_type_error, F.struct(
            F.lit("invalid_type").alias("r"), F.concat_ws("; ", *type_errors).alias("d")))
    )
    checked = lines.select(
        "_file", "_file_index", "_line", "_raw",
        outcome.alias("_outcome"),
        event_ms.alias("_event_time"),
        typed.get("_ingest_time", F.lit(None).cast("bigint")).alias("_ingest_time"),
        (F.col("_named_partition") if named else texts[source.partition] if source.partition
         else F.lit("0")).alias("_partition"),
        typed.get("_offset", F.lit(None).cast("bigint")).alias("_offset"),
        (texts[source.id] if source.id else F.lit(None).cast("string")).alias("_id"),
        *[texts[k].alias(k) for k in config.key],
        *[typed[c].alias(c) for c in config.value_columns()],
    )
    return checked


def _out_of_range(ms: Column, accepted: tuple[int, int]) -> tuple[Column, Column]:
    """Whether a time (epoch ms, not NULL) is outside the ``accepted`` ones
    (``PipelineConfig.accepted_times``), and the detail's words for it."""
    first, last = accepted
    words = (f" is outside the times this pipeline takes, {format_timestamp(first)} to "
             f"{format_timestamp(last)} UTC (its windows must fit the years 0001 to 9999)")
    return (ms < F.lit(first)) | (ms > F.lit(last)), F.lit(words)


def _time_ms(text: Column) -> Column:
    """Epoch ms from an integer string, or from ISO-8601 with an explicit zone; else NULL.

    A zone-less time is refused rather than read in some default zone: the same archive must
    give the same event times wherever it is replayed.
    """
    value = F.trim(text)
    iso = F.regexp_replace(value, _ISO_NO_SECONDS, "$1:00$2")
    return (
        F.when(value.rlike(_EPOCH_MS), value.try_cast("bigint"))
        .when(value.rlike(_ISO_WITH_ZONE), F.unix_millis(iso.try_cast("timestamp")))
    )


def _formatted_time_ms(text: Column, pattern: str) -> Column:
    """Epoch ms from a string in a Spark datetime ``pattern``; else NULL. A pattern without a zone
    reads the time as UTC (an explicit offset is appended), never in the session's zone."""
    value = F.trim(text)
    if not pattern_has_zone(pattern):
        value, pattern = F.concat(value, F.lit(" +0000")), pattern + " xx"
    return F.unix_millis(F.try_to_timestamp(value, F.lit(pattern)))


def _typed_value(text: Column, kind: str) -> Column:
    if kind == "string":
        return text
    if kind == "long":
        return F.trim(text).try_cast("bigint")
    if kind == "double":
        value = F.trim(text).try_cast("double")
        # NaN/Infinity would poison every sum and average downstream: treat them as bad values.
        return F.when(~F.isnan(value) & (F.abs(value) != F.lit(float("inf"))), value)
    # Spark's boolean cast also takes yes/no/1/0/t/f: only JSON's true and false are booleans.
    lowered = F.lower(F.trim(text))
    return F.when(lowered == "true", F.lit(True)).when(lowered == "false", F.lit(False))
