"""Arrow tables held on the driver, made into Spark DataFrames the same way in every mode."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .spark_session import is_connect


def arrow_frame(spark: Any, table: pa.Table) -> Any:
    """``spark.createDataFrame(table)``; over Spark Connect an empty table gets its schema
    passed along, since a Connect session will not infer one from no rows (an in-process session
    reads it from the Arrow schema either way)."""
    if not table.num_rows:
        # One empty chunk per column: PySpark fails on a timestamp column of no chunks (what
        # ``take`` or ``filter`` of no rows may give).
        table = pa.Table.from_arrays([pa.array([], field.type) for field in table.schema],
                                     schema=table.schema)
    if table.num_rows or not is_connect(spark):
        return spark.createDataFrame(table)
    from pyspark.sql.pandas.types import from_arrow_schema

    return spark.createDataFrame(table, schema=from_arrow_schema(table.schema))
