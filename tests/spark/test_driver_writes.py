"""A pass's own writes (results, late events, state, side outputs, ``window_latest``'s MERGE) are
made by delta-rs on the driver when it reaches the tables (the local disk, S3: the prod tier),
else by Spark (HDFS, ...), as are its reads (staged records, late records, the panes a MERGE takes
from earlier passes): the same tables either way, for passes on the driver, passes on the executors
(late records fetched from ``staging``) and a keyed process function (side outputs)."""

from __future__ import annotations

import pytest
from replay_helpers import (
    INACTIVITY_ALERT,
    delta_history,
    snapshot,
    table_rows,
    write_archive,
    write_pipeline,
)

from spark_jobs.config import load_config
from spark_jobs.execution.operations import run_pipeline
from spark_jobs.execution.state import delta

pytestmark = pytest.mark.spark

CASES = {
    "windows on the driver": {},
    "windows on the executors": {"batch": {"max_records": 40, "pass_max_records": 80,
                                           "driver_pass_max_records": 0}},
    "process function": {"process": INACTIVITY_ALERT, "window": None, "trigger": None, "aggregates": None,
                         "allowed_lateness": None},
}


def engines(spark, lakehouse, table: str) -> set[str]:
    """Which writers committed to a table after its creation: "delta-rs" or "spark"."""
    history = delta_history(spark, lakehouse / table)[:-1]  # (newest first; Spark creates it)
    return {"delta-rs" if "delta-rs" in (row["engineInfo"] or "") else "spark" for row in history}


@pytest.mark.parametrize("case", list(CASES))
def test_tables_written_on_the_driver_equal_spark_s(spark, tmp_path, monkeypatch, case):
    archive = write_archive(tmp_path / "archive", records=240, keys=3, seed=11)
    written, made_by = {}, {}
    for writer in ("delta-rs", "spark"):
        if writer == "spark":  # as for tables the driver cannot reach itself: written and read by Spark
            monkeypatch.setattr(delta, "delta_location", lambda path: None)
            monkeypatch.setattr(delta.DeltaStore, "direct_reader", lambda store: None)
        lakehouse = tmp_path / writer
        config = load_config(write_pipeline(tmp_path / f"{writer}.yaml", archive, lakehouse, **CASES[case]))
        run_pipeline(config, spark=spark, finalize=True, progress=lambda _message: None)
        written[writer] = {**snapshot(spark, lakehouse),
                           "side_outputs": table_rows(spark, lakehouse, "side_outputs")}
        table = "process_results" if case == "process function" else "window_results"
        made_by[writer] = engines(spark, lakehouse, table) | engines(spark, lakehouse, "operator_state")
    assert written["delta-rs"] == written["spark"]
    assert made_by == {"delta-rs": {"delta-rs"}, "spark": {"spark"}}
    if case == "process function":
        assert written["spark"]["side_outputs"]
    else:
        assert written["spark"]["late_events"] and written["spark"]["window_latest"]
