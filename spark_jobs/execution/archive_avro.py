"""Reading Avro archives (``source.format: avro``): object container files as Kafka Connect's S3
sink or a Flink file sink write them, any codec Avro's Java library has (null, deflate, snappy,
zstandard, xz, bzip2), through Spark's own Avro source (``spark-avro``, loaded from the project's
jar cache like Delta's jars); then typed and validated like every other format (``archive_checks``).

Why this design (and not decoding the files ourselves on the executors):

* **Records** are read by Spark's Avro source, so nested records are structs and logical types
  Spark types (``timestamp-millis``/``-micros`` are TIMESTAMP, read as epoch ms without parsing):
  field paths such as ``payload.ts`` go through ``schema_texts`` exactly as for Parquet.
* **Damage** is found first, by a block-level check on the executors (``AvroBlocks.java``, a SQL
  function, one call a file): the header, then each block's record count, byte size and 16-byte
  sync marker, and each block decompressed and its records skipped with the writer's schema (no
  objects built). A file cut short or with a corrupt block keeps the records of the blocks before
  the damage and leaves one ``unreadable_file`` quarantine row (its ``line`` is the first record
  not read, ``raw`` up to 64 bytes of the damaged part in hex, ``detail`` what and where). Sound
  files are read as they are, so damage the check did not see still fails the run loudly; only
  the files the check found damaged are read with ``ignoreCorruptFiles`` (their rows past the
  sound blocks are then cut by position), so nothing is dropped without a quarantine row.
  Records after a damaged block are not read: their positions would not be exact.
* **Positions.** Spark's Avro source has no ``_metadata.row_index`` (Parquet's only), and splits a
  large file into several tasks at sync markers. Each split's rows come in file order, and the
  splits of a file hold consecutive blocks in the order of their starts, so a record's position
  (``_line``, 1-based) is its row number in the file ordered by the split's start
  (``_metadata.file_block_start``) and by ``monotonically_increasing_id`` (ascending in read order
  within a task). That costs one shuffle of the narrow rows (the texts and ``_raw``), by file.
* **Schemas.** Spark reads a set of Avro files with one reader schema; files of different
  writer schemas (schema evolution: a Kafka Connect sink starts a new file) are read one scan per
  schema, each with its own schema (``avroSchema``, so nothing is inferred), and meet as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from .archive_checks import (
    CheckedArchive,
    empty_checked,
    glob_escaped,
    needed_fields,
    quote,
    schema_texts,
    validate,
)
from .archive_files import ArchiveFile

if TYPE_CHECKING:
    from ..config import PipelineConfig

#: The block check of the project's jar (``jvm/replay/ingest/AvroBlocks.java``).
_BLOCKS_CLASS = "replay.ingest.AvroBlocks"
_BLOCKS_FUNCTION = "replay_avro_blocks"
_BLOCKS_TYPE = "struct<problem:string,at:bigint,raw:string,records:bigint,schema:string>"


@dataclass(frozen=True)
class AvroCheck:
    """``AvroBlocks``' verdict on one file."""

    problem: str | None  #: the damage; None for a sound file
    at: int  #: byte offset where the damaged part starts (the file's size when sound)
    raw: str | None  #: up to 64 bytes of the damaged part, in hex
    records: int  #: records in the sound blocks (before the damage)
    schema: str | None  #: the writer's schema (JSON); None when the header is unreadable


#: Checks already made in this process, by file (path, size, modification time): an ingest reads
#: its files more than once (the bound, the records, the quarantined rows again), and a listed
#: file that changes is a new key. Bounded: cleared when it grows past _CHECKED_MAX.
_CHECKED: dict[ArchiveFile, AvroCheck] = {}
_CHECKED_MAX = 100_000


def avro_checks(spark: SparkSession, files: list[ArchiveFile]) -> list[AvroCheck]:
    """Each file's ``AvroCheck``, in ``files``' order; computed on the executors (one Spark job
    for the files not checked before by this process)."""
    found = {f: _CHECKED[f] for f in files if f in _CHECKED}
    todo = list(dict.fromkeys(f for f in files if f not in found))
    if todo:
        spark.udf.registerJavaFunction(_BLOCKS_FUNCTION, _BLOCKS_CLASS, _BLOCKS_TYPE)
        paths = spark.createDataFrame([(i, f.path) for i, f in enumerate(todo)], "i int, path string")
        rows = paths.select("i", F.call_udf(_BLOCKS_FUNCTION, F.col("path")).alias("c")).collect()
        for row in rows:
            c = row["c"]
            found[todo[row["i"]]] = AvroCheck(c["problem"], int(c["at"]), c["raw"], int(c["records"]),
                                              c["schema"])
        if len(_CHECKED) + len(todo) > _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED.update((f, found[f]) for f in todo)
    return [found[f] for f in files]


def avro_record_count(spark: SparkSession, files: list[ArchiveFile]) -> int:
    """The records of ``files`` (sound blocks), plus one for each damaged file's quarantine row."""
    return sum(c.records + (c.problem is not None) for c in avro_checks(spark, files))


def read_avro(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], indexes: dict[str, int],
    only: pa.Table | None = None,
) -> CheckedArchive:
    """Every record of ``files`` (up to a file's damage) typed and checked, and one quarantine row
    a damaged file. The block check runs now (one Spark job); the rest is lazy."""
    checks = avro_checks(spark, files)
    broken = [
        (f.path, indexes[f.path], c.records + 1, c.raw, ("unreadable_file", c.problem))
        for f, c in zip(files, checks, strict=True) if c.problem is not None
    ]
    broken_df = spark.createDataFrame(broken, "_file string, _file_index int, _line bigint, _raw string, "
                                              "_outcome struct<r: string, d: string>")
    bound = sum(c.records for c in checks) + len(broken)
    # Files with records to read, by writer schema, then sound or damaged.
    groups: dict[tuple[str, bool], list[ArchiveFile]] = {}
    for f, c in zip(files, checks, strict=True):
        if c.records > 0 and c.schema is not None:
            groups.setdefault((c.schema, c.problem is not None), []).append(f)
    if not groups:
        empty = empty_checked(spark, config)
        return CheckedArchive(empty.unionByName(broken_df, allowMissingColumns=True), bound)
    names = needed_fields(config)
    scans = [_scan(spark, config, members, schema, damaged) for (schema, damaged), members in groups.items()]
    # A time field typed in every scan is epoch ms already; else its text (epoch ms where typed).
    typed = [n for i, n in enumerate(names) if all(typed_ms[i] for _, typed_ms in scans)]
    rows = reduce(DataFrame.unionByName, [frame for frame, _ in scans])
    limits = spark.createDataFrame(
        [(f.path, indexes[f.path], c.records) for f, c in zip(files, checks, strict=True) if c.records > 0],
        "_file string, _file_index int, _limit bigint",
    )
    in_file_order = Window.partitionBy("_file").orderBy("_split", "_seq")
    rows = (
        rows.withColumn("_line", F.row_number().over(in_file_order).cast("bigint"))
        .join(F.broadcast(limits), "_file", "left")
        # A path that does not map back would silently lose its file's order: fail instead.
        .withColumn("_file_index", F.coalesce(F.col("_file_index"), F.raise_error(
            F.concat(F.lit("Avro record from a file not in the list: "), F.col("_file"))).cast("int")))
        # A damaged file's rows past its sound blocks (read with ignoreCorruptFiles) are left out.
        .where(F.col("_line") <= F.col("_limit"))
        .withColumn("_pre_reason", F.lit(None).cast("string"))
        .withColumn("_pre_detail", F.lit(None).cast("string"))
    )
    if only is not None:
        rows = rows.join(F.broadcast(spark.createDataFrame(only)), ["_file_index", "_line"], "left_semi")
    texts = {name: F.col(f"_text{i}") for i, name in enumerate(names)}
    parsed_ms = {name: F.col(f"_ms{names.index(name)}") for name in typed}
    checked = validate(rows, config, texts, parsed_ms)
    return CheckedArchive(checked.unionByName(broken_df, allowMissingColumns=True), bound)


def _scan(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], schema: str, damaged: bool,
) -> tuple[DataFrame, list[bool]]:
    """One Spark Avro scan of files of one writer ``schema``, projected to what ``validate`` needs
    as text (``_text<i>``, ``_ms<i>`` for typed times), ``_raw`` (the record as JSON) and what
    orders a file's rows (``_split``, ``_seq``); and which needed fields are typed times here."""
    reader = spark.read.format("avro").option("avroSchema", schema)
    if damaged:
        # Only files the block check found damaged: Spark stops at the damage instead of failing,
        # and the rows after the sound blocks are cut by position (see read_avro).
        reader = reader.option("ignoreCorruptFiles", "true")
    table = reader.load([glob_escaped(f.path) for f in files])
    columns = table.columns
    texts, event_ms = schema_texts(config, table.schema)
    names = needed_fields(config)
    # _metadata.file_path is URL-encoded ("a%20b.avro"); decoding it gives the listed path.
    # url_decode would also turn '+' into a space, which a URI never means: protect it first.
    decoded = F.try_url_decode(F.regexp_replace(F.col("_metadata.file_path"), r"\+", "%2B"))
    ms: list[Column] = [event_ms.get(n, F.lit(None).cast("bigint")) for n in names]
    frame = table.select(
        decoded.alias("_file"),
        F.col("_metadata.file_block_start").alias("_split"),
        F.monotonically_increasing_id().alias("_seq"),
        F.to_json(F.struct(*[F.col(quote(c)) for c in columns])).alias("_raw"),
        *[texts[n].alias(f"_text{i}") for i, n in enumerate(names)],
        *[m.alias(f"_ms{i}") for i, m in enumerate(ms)],
    )
    return frame, [n in event_ms for n in names]
