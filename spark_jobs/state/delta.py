"""The Delta-backed store of one pipeline: every table it writes, named by table verbs.

The only module that talks to Delta directly. Each write of a micro-batch carries Delta's
idempotent-write identity (``txnAppId`` = pipeline/epoch/table, ``txnVersion`` = batch id), so a
batch that is retried after a crash writes nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import PipelineConfig

TABLES = (
    "window_results",
    "window_latest",
    "late_events",
    "quarantine",
    "operator_state",
    "replay_log",
    "source_files",
    "staging",
)


@dataclass
class DeltaStore:
    spark: Any
    config: PipelineConfig
    epoch: int = 0

    def path(self, table: str) -> str:
        return self.config.table_path(table)

    def exists(self, table: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, self.path(table))

    def read(self, table: str, version: int | None = None):
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(self.path(table))

    def version(self, table: str) -> int | None:
        from delta.tables import DeltaTable

        if not self.exists(table):
            return None
        return int(DeltaTable.forPath(self.spark, self.path(table)).history(1).collect()[0]["version"])

    def _app_id(self, table: str) -> str:
        return f"{self.config.name}:{self.epoch}:{table}"

    def append_batch(self, df, table: str, batch_id: int) -> None:
        """Append idempotently: a retry of the same batch is skipped by Delta."""
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", self._app_id(table))
            .option("txnVersion", batch_id)
            .option("mergeSchema", "false")
            .save(self.path(table))
        )

    def overwrite_batch(self, df, table: str, batch_id: int) -> None:
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("txnAppId", self._app_id(table))
            .option("txnVersion", batch_id)
            .save(self.path(table))
        )

    def replace_where(self, df, table: str, predicate: str) -> None:
        """Overwrite just the rows matching ``predicate``: idempotent by replacement."""
        writer = df.write.format("delta").mode("overwrite")
        if self.exists(table):
            writer = writer.option("replaceWhere", predicate)
        writer.save(self.path(table))

    def merge_latest_panes(self, panes, keys: list[str], batch_id: int) -> None:
        """Upsert each (key, window)'s newest pane into ``window_latest`` with Delta MERGE."""
        from delta.tables import DeltaTable

        table = "window_latest"
        if not self.exists(table):
            (
                DeltaTable.createIfNotExists(self.spark)
                .location(self.path(table))
                .addColumns(panes.schema)
                .property("delta.enableChangeDataFeed", "true")
                .execute()
            )
        match = " AND ".join(
            [f"t.`{k}` = s.`{k}`" for k in keys]
            + ["t.window_start <=> s.window_start", "t.window_end <=> s.window_end"]
        )
        conf = self.spark.conf
        conf.set("spark.databricks.delta.write.txnAppId", self._app_id(table))
        conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            (
                DeltaTable.forPath(self.spark, self.path(table))
                .alias("t")
                .merge(panes.alias("s"), match)
                .whenMatchedUpdateAll(condition="s.pane_index > t.pane_index OR s.batch_id > t.batch_id")
                .whenNotMatchedInsertAll()
                .execute()
            )
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
