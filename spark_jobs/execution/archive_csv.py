"""Reading CSV archives with a header line: lines cut by the same splitter as compressed JSON Lines
(``archive_lines``: plain, gzip or zstd, damage recovered line by line), each line parsed as one
CSV record against its file's header on the executors, then typed and validated like every other
format (``archive_checks``).

One record a line: a quoted value may not hold a line break (such a record is quarantined as
``malformed_csv``, its pieces one row each). An empty value is NULL, as in Spark's CSV reader.
The header line is neither a record nor a quarantine row.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .archive_checks import CheckedArchive, glob_escaped, nested_texts, root_fields, validate
from .archive_files import ArchiveFile
from .archive_lines import LINES_DDL, LineSplitter

if TYPE_CHECKING:
    from ..config import PipelineConfig


def read_csv(
    spark: SparkSession, config: PipelineConfig, files: list[ArchiveFile], indexes: dict[str, int],
    only: pa.Table | None = None,
) -> CheckedArchive:
    fields = root_fields(config)
    texts = [f"_text{i}" for i in range(len(fields))]
    schema = LINES_DDL + "".join(f", {text} string" for text in texts)
    rows = (
        spark.read.format("binaryFile").load([glob_escaped(f.path) for f in files])
        .select("path", "content")
        .mapInArrow(CsvRecords({f.path: indexes[f.path] for f in files}, fields), schema)
    )
    if only is not None:
        rows = rows.join(F.broadcast(spark.createDataFrame(only)), ["_file_index", "_line"], "left_semi")
    roots = {name: F.col(text) for name, text in zip(fields, texts, strict=True)}
    return CheckedArchive(validate(rows, config, nested_texts(config, roots), {}), None)


class CsvRecords:
    """The executor side of ``read_csv``: whole files -> numbered lines (``LineSplitter``) -> each
    line's wanted fields by its file's header. A callable object, so only the file table and the
    field names are shipped."""

    def __init__(self, indexes: dict[str, int], fields: list[str]):
        self.splitter = LineSplitter(indexes)
        self.fields = fields

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        header: dict[str, int] | None = None
        current = None
        for batch in self.splitter(batches):
            columns = batch.to_pydict()
            reasons, details = columns["_pre_reason"], columns["_pre_detail"]
            values: list[list[str | None]] = [[] for _ in self.fields]
            keep = []
            for row, (path, raw) in enumerate(zip(columns["_file"], columns["_raw"], strict=True)):
                if path != current:  # the splitter yields one file's lines in order, then the next
                    current, header = path, None
                parsed, problem = _record(raw) if reasons[row] is None else (None, None)
                if header is None and reasons[row] is None:
                    # The first line of a file is its header: not a record.
                    header = {name: i for i, name in enumerate(parsed or [])}
                    keep.append(False)
                    continue
                keep.append(True)
                if reasons[row] is None and problem is None and parsed is not None and header is not None \
                        and len(parsed) != len(header):
                    problem = f"{len(parsed)} values, the header has {len(header)}"
                if reasons[row] is None and problem is not None:
                    reasons[row], details[row] = "malformed_csv", problem
                for number, name in enumerate(self.fields):
                    at = header.get(name) if header is not None and reasons[row] is None else None
                    text = parsed[at] if parsed is not None and at is not None else None
                    values[number].append(text if text != "" else None)
            mask = pa.array(keep)
            out = {
                "_file": pa.array(columns["_file"], pa.string()).filter(mask),
                "_file_index": batch.column("_file_index").filter(mask),
                "_line": batch.column("_line").filter(mask),
                "_raw": batch.column("_raw").filter(mask),
                "_pre_reason": pa.array(reasons, pa.string()).filter(mask),
                "_pre_detail": pa.array(details, pa.string()).filter(mask),
                **{f"_text{i}": pa.array(v, pa.string()) for i, v in enumerate(values)},
            }
            yield pa.RecordBatch.from_pydict(out)


def _record(line: str) -> tuple[list[str] | None, str | None]:
    """One line's values, or why it is not one CSV record (RFC 4180, strict quoting)."""
    try:
        records = list(csv.reader([line], strict=True))
    except csv.Error as error:
        return None, f"not one CSV record: {error}"
    return (records[0] if records else []), None
