"""Values at the ends of what the tables hold: a replay writes them, and never crashes on them.
Event times whose windows reach the ends of the years 0001 to 9999 (Python's datetimes, which
read the tables' TIMESTAMPs, end there; a time past them is quarantined), and integer sums past
int64 (they wrap around, as Java's ``long`` does); a user function's output its column cannot hold
stops the run naming it, before anything is committed."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

import pytest
from replay_helpers import cli, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.core.durations import fitting_times
from spark_jobs.core.engine.process import KeyedProcessFunction
from spark_jobs.exceptions import ReplayError
from spark_jobs.execution.operations import run_pipeline

pytestmark = pytest.mark.spark

# For 1-minute windows: 0001-01-02 00:00:59.999 and 9999-12-31 23:58:59.999.
FIRST, LAST = fitting_times(60_000)


def test_times_at_the_ends_and_sums_past_int64(spark, tmp_path):
    from pyspark.sql import functions as F

    archive = tmp_path / "archive"
    archive.mkdir()
    rows = [(FIRST, "a", 2**62), (FIRST, "a", 2**62), (FIRST, "a", 2**62),
            (LAST - 1, "b", -(2**63)), (LAST, "b", -1), (LAST, "b", -1)]
    with open(archive / "part-000.jsonl", "w") as handle:
        for i, (ts, user, value) in enumerate(rows):
            handle.write(json.dumps({"event_id": f"e{i}", "user": user, "ts": ts, "ingest_ts": 1000 + i,
                                     "partition": 0, "offset": i, "value": value}) + "\n")
        handle.write(json.dumps({"event_id": "past", "user": "b", "ts": LAST + 1, "ingest_ts": 2000,
                                 "partition": 0, "offset": 9, "value": 1}) + "\n")
    config = write_pipeline(
        tmp_path / "ends.yaml", archive, tmp_path / "lake",
        source={"path": str(archive), "format": "jsonl", "event_time": "ts", "ingest_time": "ingest_ts",
                "partition": "partition", "offset": "offset", "id": "event_id", "types": {"value": "long"}},
        aggregates={"n": "count(*)", "total": "sum(value)"}, batch={"max_records": 2},
    )
    done = cli("run", str(config), "--finalize")
    assert done.returncode == 0, done.stderr[-3000:]
    status = cli("status", str(config))
    assert status.returncode == 0, status.stderr[-3000:]
    lake = tmp_path / "lake"
    results = spark.read.format("delta").load(str(lake / "window_results"))
    final = {row["user"]: row for row in results.where(F.col("timing") == "ON_TIME").collect()}
    assert (final["a"]["n"], final["a"]["total"]) == (3, -(2**62))  # 3 * 2**62, wrapped
    assert (final["b"]["n"], final["b"]["total"]) == (3, 2**63 - 2)  # -(2**63) - 2, wrapped
    assert final["a"]["window_start"] == datetime(1, 1, 2)  # (naive, in the session zone: UTC)
    assert final["b"]["window_end"] == datetime(9999, 12, 31, 23, 59)
    quarantined = spark.read.format("delta").load(str(lake / "quarantine")).collect()
    assert [(row["reason"], row["line"]) for row in quarantined] == [("invalid_timestamp", 7)]


@dataclass
class Misbehaving(KeyedProcessFunction):
    """Emits a value its declared output type cannot hold, or sets a timer past 64 bits."""

    fault: str = "type"

    def process_element(self, record, ctx):
        if self.fault == "timer":
            ctx.register_event_time_timer(ctx.timestamp + 2**63)
        else:
            ctx.emit({"kind": "x", "seen": "soon" if self.fault == "type" else 2**70})

    def on_timer(self, timestamp, ctx):
        pass


@pytest.mark.in_process_only  # (the function's class is this module's)
@pytest.mark.parametrize(("fault", "message"), [
    ("type", "an output row's seen is 'soon', which its column (long) cannot hold"),
    ("long", "an output row's seen is 1180591620717411303424, which its column (long) cannot hold"),
    ("timer", "a timer at 9223372036854775808 ms is outside the 64-bit times"),
])
def test_a_functions_unstorable_output_stops_the_run_naming_it(spark, tmp_path, fault, message):
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "a.jsonl").write_text(json.dumps({"event_id": "e", "user": "u", "ts": 0, "ingest_ts": 0,
                                                 "partition": 0, "offset": 0, "value": 1}) + "\n")
    config = write_pipeline(
        tmp_path / "p.yaml", archive, tmp_path / "lake", window=None, trigger=None, allowed_lateness=None,
        aggregates=None, process={"class": f"{__name__}.Misbehaving", "params": {"fault": fault},
                                  "output": {"kind": "string", "seen": "long"}},
    )
    with pytest.raises((ReplayError, ValueError), match=re.escape(message)):
        run_pipeline(load_config(config), spark=spark, finalize=True, progress=lambda _m: None)
    assert not (tmp_path / "lake" / "replay_log").exists()  # nothing committed
