"""Reading Parquet archives: rows through the same validation as JSON Lines (``archive_checks``);
a file whose footer cannot be read becomes one quarantine row instead of failing the read.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from .archive_checks import CheckedArchive, empty_checked, glob_escaped, quote, schema_texts, validate
from .archive_files import ArchiveFile
from .spark_session import is_connect

if TYPE_CHECKING:
    from ..config import PipelineConfig

def read_parquet(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], indexes: dict[str, int],
    only: DataFrame | None = None, file_columns: tuple[StructType, dict[str, tuple]] | None = None,
) -> CheckedArchive:
    """Parquet rows through the same validation; an unreadable file becomes one quarantine row.

    ``file_columns`` (a Delta table's partition columns, ``archive_delta``): columns whose value is
    the same for a whole file, not stored in it: their schema and each file's values.

    Each footer is read first (on the driver, through Hadoop, so any file system works): a file
    whose footer is unreadable (truncated upload, not Parquet at all) is left out of the scan and
    reported instead of failing the whole read. Damage inside a file with a good footer is not
    detected here and fails the job loudly.
    """
    readable, broken = [], []
    # Footer reads are round trips to the file system (object stores: ~50 ms each): overlap them.
    footers = parquet_footers(spark, files)
    for f, (problem, _) in zip(files, footers, strict=True):
        if problem is None:
            readable.append(f)
        else:
            broken.append((f.path, indexes[f.path], ("unreadable_file", problem)))
    broken_df = spark.createDataFrame(
        broken, "_file string, _file_index int, _outcome struct<r: string, d: string>"
    )
    rows_bound = sum(rows for _, rows in footers) + len(broken)
    if not readable:
        return CheckedArchive(
            empty_checked(spark, config).unionByName(broken_df, allowMissingColumns=True), rows_bound
        )
    try:
        checked = _checked_rows(spark, config, readable, indexes, only, file_columns)
    except Exception:
        # Files whose columns' types disagree (a column long in some, a timestamp in others)
        # cannot be read as one table: each schema's files are read and checked on their own.
        groups: dict[str, list[ArchiveFile]] = {}
        for f in readable:
            groups.setdefault(spark.read.parquet(glob_escaped(f.path)).schema.json(), []).append(f)
        if len(groups) < 2:
            raise
        checked = reduce(DataFrame.unionByName, [
            _checked_rows(spark, config, group, indexes, only, file_columns) for group in groups.values()
        ])
    return CheckedArchive(checked.unionByName(broken_df, allowMissingColumns=True), rows_bound)


def _checked_rows(
    spark: SparkSession, config: PipelineConfig, readable: list[ArchiveFile], indexes: dict[str, int],
    only: DataFrame | None, file_columns: tuple[StructType, dict[str, tuple]] | None,
) -> DataFrame:
    """``readable``'s rows (files whose footers read), typed and checked (``validate``)."""
    # mergeSchema: a column added to later files must not be read as null from the first file's
    # schema alone.
    table = spark.read.option("mergeSchema", "true").parquet(*[glob_escaped(f.path) for f in readable])
    extra, values = file_columns or (StructType([]), {})
    data_columns = [c for c in table.columns if c not in extra.fieldNames()]
    index_rows = spark.createDataFrame(
        [(f.path, indexes[f.path], *values.get(f.path, ())) for f in readable],
        StructType([StructField("_file", StringType()), StructField("_file_index", IntegerType()),
                    *extra.fields]),
    )
    columns = [*data_columns, *extra.fieldNames()]
    # _metadata.file_path is URL-encoded ("a%20b.parquet"); decoding it gives the listed path.
    # url_decode would also turn '+' into a space, which a URI never means: protect it first.
    decoded = F.try_url_decode(F.regexp_replace(F.col("_metadata.file_path"), r"\+", "%2B"))
    rows = (
        table.select(
            *[F.col(quote(c)) for c in data_columns],
            decoded.alias("_file"),
            (F.col("_metadata.row_index") + 1).alias("_line"),
        )
        .join(F.broadcast(index_rows), "_file", "left")
        .withColumn("_raw", F.to_json(F.struct(*[F.col(quote(c)) for c in columns])))
        # A path that does not map back would silently lose its file's order: fail instead.
        .withColumn("_file_index", F.coalesce(F.col("_file_index"), F.raise_error(
            F.concat(F.lit("Parquet row from a file not in the list: "), F.col("_file"))).cast("int")))
        .withColumn("_pre_reason", F.lit(None).cast("string"))
        .withColumn("_pre_detail", F.lit(None).cast("string"))
    )
    if only is not None:
        rows = rows.join(F.broadcast(spark.createDataFrame(only)), ["_file_index", "_line"], "left_semi")
    schema = StructType([table.schema[c] for c in data_columns] + list(extra.fields))
    texts, event_ms = schema_texts(config, schema)
    return validate(rows, config, texts, event_ms)


#: The footer reader of the project's jar (``jvm/replay/ingest/ParquetFooter.java``).
_FOOTER_CLASS = "replay.ingest.ParquetFooter"
_FOOTER_FUNCTION = "replay_parquet_footer"


def parquet_footers(spark: SparkSession, files: list[ArchiveFile]) -> list[tuple[str | None, int]]:
    """Each file's ``(problem, rows)``: why its Parquet footer cannot be read (None when it can),
    and the rows it declares; an I/O failure is raised (see ``ParquetFooter.java``).

    Read on the driver, side by side (each is a round trip to storage); a Spark Connect client,
    which has no JVM, asks the server's executors to read them instead."""
    if is_connect(spark):
        spark.udf.registerJavaFunction(_FOOTER_FUNCTION, _FOOTER_CLASS, "struct<problem:string,rows:bigint>")
        paths = spark.createDataFrame([(f.path,) for f in files], "path string")
        rows = paths.select(F.call_udf(_FOOTER_FUNCTION, F.col("path")).alias("f")).collect()
        return [(row["f"]["problem"], int(row["f"]["rows"])) for row in rows]
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()

    def footer(path: str) -> tuple[str | None, int]:
        problem, rows = jvm.replay.ingest.ParquetFooter.read(conf, path)
        return problem, int(rows)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda f: footer(f.path), files))
