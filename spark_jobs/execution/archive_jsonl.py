"""Reading JSON Lines archives: plain files through the project's JVM reader (``JsonLinesSource``:
lines, numbers and the strict check of each line as one JSON object in one pass), gzip files cut
into lines on the executors (``archive_lines``) and checked by the same Java code as a UDF; then
the fields are typed and validated (``archive_checks``).
"""

from __future__ import annotations

import json
from functools import reduce
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .archive_checks import CheckedArchive, glob_escaped, nested_texts, required_fields, root_fields, validate
from .archive_files import ArchiveFile
from .archive_lines import LINES_DDL, LineSplitter, is_compressed

if TYPE_CHECKING:
    from ..config import PipelineConfig

# The project's JVM side (spark_jobs/execution/jvm, built by `make setup`).
_JSON_LINES_SOURCE = "replay.ingest.JsonLinesSource"
_JSON_LINE_CHECK = "replay_json_line_check"
_JSON_LINE_CHECK_CLASS = "replay.ingest.JsonLineFields"


def read_jsonl(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], indexes: dict[str, int],
    only: pa.Table | None = None,
) -> CheckedArchive:
    """Plain files through the project's JVM reader (``JsonLinesSource``: lines, numbers and the
    strict check of each line as one JSON object in one pass); gzip files cut into lines by the
    Python splitter, then the same check as a UDF. Then the fields are typed and validated."""
    # The JVM check reads top-level fields; nested paths are read from their field's JSON text.
    fields = root_fields(config)
    plain, packed = plain_and_gzip(files)
    texts = [f"_text{i}" for i in range(len(fields))]
    parts = []
    wanted = _lines_by_file(only)
    if plain:
        inputs: list[list] = [[f.path, indexes[f.path]] for f in plain]
        if wanted is not None:
            inputs = [[path, index, wanted.get(index, [])] for path, index in inputs]
        parts.append(
            spark.read.format(_JSON_LINES_SOURCE)
            .option("files", json.dumps(inputs))
            .option("fields", json.dumps(fields))
            .load()
        )
    if packed:
        spark.udf.registerJavaFunction(_JSON_LINE_CHECK, _JSON_LINE_CHECK_CLASS, _check_type(len(fields)))
        split = gzip_lines(spark, packed, indexes).withColumn(
            "_check", F.call_udf(_JSON_LINE_CHECK, F.col("_raw"), F.lit(json.dumps(fields)))
        )
        # What the splitter already knows (invalid UTF-8, a damaged file's tail) comes first.
        known = F.col("_pre_reason").isNotNull()
        if only is not None:
            split = split.join(F.broadcast(spark.createDataFrame(only)), ["_file_index", "_line"],
                               "left_semi")
        parts.append(split.select(
            "_file", "_file_index", "_line", "_raw",
            F.when(known, F.col("_pre_reason")).otherwise(F.col("_check._pre_reason")).alias("_pre_reason"),
            F.when(known, F.col("_pre_detail")).otherwise(F.col("_check._pre_detail")).alias("_pre_detail"),
            *[F.col(f"_check.{text}").alias(text) for text in texts],
        ))
    lines = reduce(DataFrame.unionByName, parts)
    # A record spells out every required field, so it takes at least this many bytes; a gzip
    # file's size says nothing of its lines.
    shortest = _shortest_record_bytes(config)
    bound = None if packed else sum(f.size // shortest for f in plain)
    return CheckedArchive(
        validate(lines, config, nested_texts(
            config, {name: F.col(text) for name, text in zip(fields, texts, strict=True)}), {}),
        bound,
    )


def _shortest_record_bytes(config: PipelineConfig) -> int:
    """The shortest line an accepted record can be: ``{"a":0,"b":0}`` with its required fields."""
    # A nested field's top-level field counts once, as if it were a scalar (a lower bound).
    names = list(dict.fromkeys(config.source.path_of(n)[0] for n in required_fields(config)))
    return 2 + sum(len(name.encode()) + 4 for name in names) + len(names) - 1


def plain_and_gzip(files: list[ArchiveFile]) -> tuple[list[ArchiveFile], list[ArchiveFile]]:
    return [f for f in files if not is_compressed(f.path)], [f for f in files if is_compressed(f.path)]


def gzip_lines(spark: SparkSession, files: list[ArchiveFile], indexes: dict[str, int]) -> DataFrame:
    """Gzip files' lines (``LINES_DDL``), cut by ``LineSplitter`` from each whole file."""
    return (
        spark.read.format("binaryFile")
        .load([glob_escaped(f.path) for f in files])
        .select("path", "content")
        .mapInArrow(LineSplitter({f.path: indexes[f.path] for f in files}), LINES_DDL)
    )


def _lines_by_file(only: pa.Table | None) -> dict[int, list[int]] | None:
    """``only``'s lines as ``{file index: [line, ...]}``, ascending."""
    if only is None:
        return None
    wanted: dict[int, list[int]] = {}
    files, lines = only.column("_file_index").to_pylist(), only.column("_line").to_pylist()
    for file_index, line in sorted(zip(files, lines, strict=True), key=lambda pair: (pair[0], pair[1] or 0)):
        if line is not None:
            wanted.setdefault(file_index, []).append(line)
    return wanted


def _check_type(width: int) -> T.StructType:
    """What ``JsonLineFields`` returns: the line's problem, if any, then each field's text."""
    return T.StructType(
        [T.StructField("_pre_reason", T.StringType()), T.StructField("_pre_detail", T.StringType())]
        + [T.StructField(f"_text{i}", T.StringType()) for i in range(width)]
    )
