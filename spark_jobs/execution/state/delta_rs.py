"""A pipeline's tables read without a JVM: delta-rs (``deltalake``) and its DataFusion SQL.

What answers in a second must not start Spark: ``replay status``, and whether an Airflow interval
has anything to do (``execution.pending_work``). And a run reads what it needs of its tables
on the driver with it rather than a Spark job each (``DeltaStore.direct_reader``), in-process or
over Spark Connect: the window state, the staged batches still due, a pass's staged records and
late records (and, over Connect, the tables' versions and log). delta-rs reads them straight from
the Delta log and the Parquet files, several times faster than a Spark job collected to the
driver. Reads go through
``QueryBuilder`` (DataFusion), which also reads the one table with deletion vectors
(``window_latest``), and come back through the Arrow C stream (``RecordBatchReader.from_stream``:
``pyarrow.table()`` on the same stream imports pandas, 2 s), with DataFusion's view string types
cast to the plain ones Spark gives. Tables on the local disk, and on ``s3a://`` object storage,
read as ``s3://`` with ``object_store.storage_options`` (the S3A settings' environment):
``reaches``.

Never writes: the writes a pass makes with delta-rs are in ``delta_rs_writes``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from ...config import PipelineConfig, local_path
from ..object_store import delta_location, is_s3, list_names, reachable_without_jvm, s3_filesystem

#: The most record numbers ``staged_records`` puts in one query's IN list.
IN_LIST_MAX = 5_000


class DeltaRsReader:
    """Reads one pipeline's Delta tables (on the local disk, or on S3) without Spark."""

    def __init__(self, config: PipelineConfig) -> None:
        root = local_path(config.output_path)
        self.remote = root is None and is_s3(config.output_path)
        if root is None and not self.remote:
            raise ValueError(f"{config.output_path} is neither on the local disk nor on S3")
        self.config = config
        self.root = root if root is not None else config.output_path.rstrip("/")
        self._fs: Any = None

    @staticmethod
    def reaches(config: PipelineConfig) -> bool:
        """Tables this reader can read: on the local disk or on S3."""
        return reachable_without_jvm(config.output_path)

    def path(self, table: str) -> str:
        return f"{self.root}/{table}" if self.remote else os.path.join(self.root, table)

    def table(self, name: str, version: int | None = None) -> Any:
        from deltalake import DeltaTable

        uri, options = delta_location(self.path(name))
        return DeltaTable(uri, version=version, storage_options=options)

    def exists(self, table: str) -> bool:
        """Whether the table has a first commit (a directory alone may be a write killed early)."""
        if self.remote:
            if self._fs is None:
                self._fs = s3_filesystem()
            log = f"{self.path(table)}/_delta_log"
            return any(name.endswith(".json") for name in list_names(log, self._fs))
        log = os.path.join(self.path(table), "_delta_log")
        return os.path.isdir(log) and any(name.endswith(".json") for name in os.listdir(log))

    def versions(self, tables: list[str] | tuple[str, ...]) -> dict[str, int]:
        """The latest version of each of these tables that exists (as ``DeltaStore.versions``)."""
        from deltalake.exceptions import TableNotFoundError

        found = {}
        for table in tables:
            if self.exists(table):
                with contextlib.suppress(TableNotFoundError):  # deleted meanwhile
                    found[table] = self.table(table).version()
        return found

    def restored_to(self, table: str) -> int | None:
        """The version the table's latest commit restored it to, if that commit is a RESTORE."""
        latest = self.table(table).history(1)[0]
        if latest.get("operation") != "RESTORE":
            return None
        return int((latest.get("operationParameters") or {}).get("version", -1))

    def arrow(self, sql: str, tables: dict[str, int | None]) -> Any:
        """The result of a SQL query over these tables (each at its version, or the latest), as
        Arrow with Spark's plain string and binary types (``plain_types``)."""
        import pyarrow as pa
        from deltalake import QueryBuilder

        query = QueryBuilder()
        for table, version in tables.items():
            query.register(table, self.table(table, version))
        return plain_types(pa.RecordBatchReader.from_stream(query.execute(sql)).read_all())

    def rows(self, sql: str, tables: dict[str, int | None]) -> list[dict[str, Any]]:
        """The rows of a SQL query over these tables (each at its version, or the latest)."""
        return self.arrow(sql, tables).to_pylist()

    def committed_log(self) -> list[dict[str, Any]]:
        """``replay_log``'s rows by batch id, as ``recovery.committed_log`` returns them."""
        return self._log_rows("")

    def last_committed(self) -> dict[str, Any] | None:
        """The last committed batch's row (what a check needs, without reading the whole log)."""
        rows = self._log_rows(" DESC LIMIT 1")
        return rows[0] if rows else None

    def _log_rows(self, order: str) -> list[dict[str, Any]]:
        if not self.exists("replay_log"):
            return []
        # committed_at as text: a zoned timestamp turned into Python imports pandas (1.5 s).
        rows = self.rows(
            "SELECT * EXCEPT (committed_at), CAST(committed_at AS VARCHAR) AS committed_at "
            f"FROM replay_log ORDER BY batch_id{order}",
            {"replay_log": None},
        )
        for row in rows:  # an Arrow map comes back as (key, value) pairs
            row["table_versions"] = dict(row["table_versions"] or [])
        return rows

    def source_files(self) -> dict[str, dict[str, Any]]:
        """``source_files``' rows by path (as ``ingest.known_files`` returns them)."""
        if not self.exists("source_files"):
            return {}
        return {row["path"]: row for row in self.rows("SELECT * FROM source_files", {"source_files": None})}

    def files_summary(self) -> tuple[int, int, int] | None:
        """(files, records accepted, lines quarantined) ingested; None before the first ingest."""
        if not self.exists("source_files"):
            return None
        row = self.rows(
            "SELECT count(*) AS n, sum(records) AS r, sum(quarantined) AS q FROM source_files",
            {"source_files": None},
        )[0]
        return row["n"], row["r"] or 0, row["q"] or 0

    def state_summary(self, last: dict[str, Any]) -> tuple[int, int]:
        """(state rows, open windows) as the committed row ``last`` left ``operator_state``
        (the snapshot of its pass, at the version it records: as ``DeltaStore.read_state``)."""
        version = last["table_versions"].get("operator_state")
        row = self.rows(
            "SELECT count(*) AS n, sum(CAST(is_open AS INT)) AS o FROM operator_state "
            f"WHERE batch_id = {int(last['batch_id'])}",
            {"operator_state": version},
        )[0]
        return row["n"], row["o"] or 0

    def state_snapshot(self, last: dict[str, Any]) -> Any:
        """``operator_state``'s snapshot as the committed row ``last`` left it (Arrow; as
        ``DeltaStore.read_state``)."""
        return self.arrow(
            f"SELECT * FROM operator_state WHERE batch_id = {int(last['batch_id'])}",
            {"operator_state": last["table_versions"].get("operator_state")},
        )

    def staged_batches(self, after_batch: int, clock_column: str) -> list[dict[str, Any]]:
        """Per staged batch after ``after_batch``: its first and last ``_seq`` and latest replay
        clock (as ``DeltaStore.staged_batches``)."""
        if not self.exists("staging"):
            return []
        clock = _quoted(clock_column)
        return self.rows(
            f"SELECT _batch, min(_seq) AS lo, max(_seq) AS hi, max({clock}) AS clock FROM staging "
            f"WHERE _batch > {int(after_batch)} GROUP BY _batch ORDER BY _batch",
            {"staging": None},
        )

    def staged_rows(self, columns: list[str], seq_start: int, seq_end: int) -> Any:
        """``columns`` of the staged records ``seq_start`` to ``seq_end`` (exclusive), as Arrow
        in file order (as ``DeltaStore.staged_rows`` before its sort)."""
        names = ", ".join(_quoted(column) for column in columns)
        return self.arrow(
            f"SELECT {names} FROM staging WHERE _seq >= {int(seq_start)} AND _seq < {int(seq_end)}",
            {"staging": None},
        )

    def staged_records(self, columns: list[str], seqs: Any) -> Any:
        """``columns`` (``_seq`` among them) of the staged records numbered ``seqs`` (ascending
        int64, not empty), as Arrow in file order: a pass's late records. Up to ``IN_LIST_MAX``
        numbers go into the query (0.25 s for 3,682 of 1M staged records, against 1.2-2.8 s for
        Spark's broadcast join); more are filtered here from their whole range (DataFusion
        aborts the process on an IN list of 100,000)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = ", ".join(_quoted(column) for column in columns)
        where = f"_seq >= {int(seqs[0])} AND _seq <= {int(seqs[-1])}"
        if len(seqs) <= IN_LIST_MAX:
            wanted = ", ".join(str(seq) for seq in seqs.tolist())
            return self.arrow(f"SELECT {names} FROM staging WHERE {where} AND _seq IN ({wanted})",
                              {"staging": None})
        rows = self.arrow(f"SELECT {names} FROM staging WHERE {where}", {"staging": None})
        return rows.filter(pc.is_in(rows.column("_seq"), value_set=pa.array(seqs, pa.int64())))

    def staged_batch_clock(self, batch_id: int, clock_column: str) -> int | None:
        """The latest replay clock among the staged records of one batch; None when that batch is
        not staged (yet). File statistics on ``_batch`` keep this to the files holding it."""
        if not self.exists("staging"):
            return None
        row = self.rows(
            f"SELECT count(*) AS n, max({clock_column}) AS clock FROM staging WHERE _batch = {int(batch_id)}",
            {"staging": None},
        )[0]
        return row["clock"] if row["n"] else None


def _quoted(column: str) -> str:
    """A column name as DataFusion's SQL names it exactly (unquoted names are folded to lower case)."""
    return '"{}"'.format(column.replace('"', '""'))


def plain_types(table: Any) -> Any:
    """``table`` with DataFusion's view and large string and binary types cast to the plain ones,
    which is what Spark's ``toArrow`` gives for the same columns."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.string(), pa.large_string(): pa.string(),
             pa.binary_view(): pa.binary(), pa.large_binary(): pa.binary()}
    fields = [field.with_type(plain.get(field.type, field.type)) for field in table.schema]
    return table.cast(pa.schema(fields))
