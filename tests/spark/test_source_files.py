"""``source_files`` across releases: a table written before the ``etag`` column gains it at the next
ingest (Delta's schema evolution), its old rows null, and the change check still holds for them."""

from __future__ import annotations

import shutil

import pytest
from replay_helpers import cli, write_archive, write_pipeline

pytestmark = pytest.mark.spark


def test_a_table_of_an_earlier_release_gains_the_etag_column(spark, tmp_path):
    archive = write_archive(tmp_path / "archive", records=40, files=1)
    config = write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "lakehouse")
    assert cli("run", str(config)).returncode == 0
    table = str(tmp_path / "lakehouse" / "source_files")
    # As the release before wrote it: the same rows without `etag`.
    earlier = spark.read.format("delta").load(table).drop("etag").toPandas()
    spark.createDataFrame(earlier).write.format("delta").mode("overwrite") \
        .option("overwriteSchema", "true").save(table)
    assert "etag" not in spark.read.format("delta").load(table).columns

    extra = write_archive(tmp_path / "more", records=4, files=1, seed=9) / "part-000.jsonl"
    shutil.copy(extra, archive / "part-900.jsonl")
    picked = cli("run", str(config))
    assert picked.returncode == 0 and "ingested 1 files" in picked.stderr, picked.stderr[-3000:]
    rows = {r["path"].rsplit("/", 1)[-1]: r for r in spark.read.format("delta").load(table).collect()}
    assert sorted(rows) == ["part-000.jsonl", "part-900.jsonl"]
    assert [rows[name]["etag"] for name in sorted(rows)] == [None, None]  # a local disk has none

    with open(archive / "part-000.jsonl", "a") as handle:  # an old row still guards its file
        handle.write('{"event_id": "sneaky"}\n')
    changed = cli("run", str(config))
    assert changed.returncode == 1 and "changed:" in changed.stderr and "part-000.jsonl" in changed.stderr
