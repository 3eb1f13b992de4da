"""number_records: the narrow sort keys sorted on the driver and on the cluster number every
record the same, for each replay order, whatever the partitioning of the records."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from replay_helpers import write_archive, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.execution.ordering import number_records, sort_key_columns

pytestmark = pytest.mark.spark


def numbering(config, frame, seq_base):
    """{(file index, line): seq} on the driver (from the collected sort keys) and on the cluster."""
    result = {}
    for where, keys in (("driver", frame.select(*sort_key_columns(config)).toArrow()), ("cluster", None)):
        numbered = number_records(frame.sparkSession, config, frame, seq_base, keys)
        rows = numbered.frame.select("_file_index", "_line", "_seq").collect()
        numbered.close()
        result[where] = {(row[0], row[1]): row[2] for row in rows}
    return result


def test_archive_in_ingest_time_order(spark, tmp_path):
    from spark_jobs.execution.sources import list_archive, read_archive

    archive = write_archive(tmp_path / "archive", records=500, partitions=3, files=4, seed=3)
    config = load_config(write_pipeline(tmp_path / "p.yaml", archive, tmp_path / "out"))
    records, _ = read_archive(spark, config, list_archive(spark, config.source))
    records = records.repartition(3).persist()  # three partitions, each across the whole order
    got = numbering(config, records, seq_base=1_000)
    spark.catalog.clearCache()
    assert got["driver"] == got["cluster"]
    assert sorted(got["driver"].values()) == list(range(1_000, 1_000 + len(got["driver"])))
    # By the definition: ingest time, then partition (as text), offset, file and line.
    rows = records.select("_ingest_time", "_partition", "_offset", "_file_index", "_line").collect()
    expected = sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3], r[4]))
    assert [got["driver"][(r[3], r[4])] for r in expected] == list(range(1_000, 1_000 + len(rows)))


@pytest.mark.parametrize("ingest_time", [True, False])
def test_two_inputs(spark, tmp_path, ingest_time):
    """Join inputs: by ingest time, or merged by the running maximum event time per input."""
    from spark_jobs.execution.ordering import order_columns

    rng = random.Random(7)
    rows = []
    for file_index in range(4):
        for line in range(1, 120):
            rows.append((file_index % 2, file_index, line, rng.randrange(0, 50_000),
                         rng.randrange(0, 20), str(rng.randrange(12)), line))
    frame = (
        spark.createDataFrame(rows, "_input long, _file_index int, _line bigint, _event_time bigint, "
                                    "_ingest_time bigint, _partition string, _offset bigint")
        .repartition(5).persist()
    )
    config = load_config(write_pipeline(tmp_path / "p.yaml", tmp_path, tmp_path / "out"))
    source = config.source if ingest_time else replace(config.source, ingest_time=None)
    config = replace(config, source=source, join=object())  # only "is there a join" matters here
    assert ("_running_max" in order_columns(config)) is not ingest_time
    got = numbering(config, frame, seq_base=0)
    frame.unpersist()
    assert got["driver"] == got["cluster"] and len(got["driver"]) == len(rows)


def test_no_records(spark, tmp_path):
    """An ingest whose every record was quarantined numbers nothing, on either side."""
    config = load_config(write_pipeline(tmp_path / "p.yaml", tmp_path, tmp_path / "out"))
    frame = spark.createDataFrame([], "_file_index int, _line bigint, _ingest_time bigint, "
                                      "_partition string, _offset bigint")
    assert numbering(config, frame, seq_base=5) == {"driver": {}, "cluster": {}}


@pytest.mark.parametrize("ingest_time", [True, False])
def test_rejected_lines_sorted_with_the_records_leave_their_order_alone(spark, tmp_path, ingest_time):
    """Past the driver's limit the ingest sorts every checked line's keys at once: the rejected
    lines (with whatever keys they have: a far-future event time would raise a running maximum)
    fall out, and the accepted ones are in the order the driver gives them alone."""
    import numpy as np

    from spark_jobs.execution.ordering import lines_in_replay_order, order_columns, replay_positions

    rng = random.Random(11)
    rows = []
    for file_index in range(4):
        for line in range(1, 90):
            ok = rng.random() > 0.2
            event_time = rng.randrange(0, 50_000) if ok else rng.choice([None, 10**12])
            rows.append((ok, file_index % 2, file_index, line, event_time,
                         rng.randrange(0, 20), str(rng.randrange(12)), line))
    lines = spark.createDataFrame(rows, "_ok boolean, _input long, _file_index int, _line bigint, "
                                        "_event_time bigint, _ingest_time bigint, _partition string, "
                                        "_offset bigint").repartition(3)
    config = load_config(write_pipeline(tmp_path / "p.yaml", tmp_path, tmp_path / "out"))
    source = config.source if ingest_time else replace(config.source, ingest_time=None)
    config = replace(config, source=source, join=object())
    order = order_columns(config)
    got = lines_in_replay_order(lines, order)
    ok = got.column("_ok").to_numpy(zero_copy_only=False)
    assert got.num_rows == len(rows) and (~ok).sum() == sum(1 for row in rows if not row[0])
    accepted = [row for row in rows if row[0]]
    keys = spark.createDataFrame(accepted, lines.schema).drop("_ok").toArrow()
    positions = replay_positions(keys, order)
    expected = [(row[2], row[3]) for row in np.array(accepted, dtype=object)[np.argsort(positions)]]
    found = got.filter(ok)
    assert list(zip(found.column("_file_index").to_pylist(), found.column("_line").to_pylist(),
                    strict=True)) == expected
