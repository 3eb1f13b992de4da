"""Issue 30's backfill target, measured: 48 hourly intervals of the demo pipeline (its archive
generated over 48 hours, about 2,000 events an hour, so every interval replays a batch) run through
a real scheduler, every Spark task a client of one warm Spark Connect server, against one
``replay run --finalize`` over the same archive, in-process and over the same server.

Prints the figures (docs/airflow.md, BENCHMARKS.md); asserts outcomes only: every DAG run
succeeded and the tables equal the single runs'. ``replay_quality`` is paused: run after every
interval, the quality checks would share the two cores with the backfill being measured.

``make bench-backfill`` (slow, not in CI: about 12 minutes on 2 cores)."""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time

import pytest
import yaml
from airflow_standalone import delta_tables, demo_world, parse_time, pipeline_config, run_seconds

pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark]

DAG_ID = "replay__clicks_per_minute"
HOURS = 48
START = dt.datetime(2023, 11, 14, 22, tzinfo=dt.UTC)  # the generator's first hour
EVENTS = 96_000


@pytest.fixture(scope="module")
def world(tmp_path_factory, warm_connect_server):
    port = warm_connect_server
    connection = json.dumps({"conn_type": "spark_connect", "host": "localhost", "port": port})
    # Spread over 47 hours: the generator's partitions end up to about an hour apart, and the
    # archive must end before the schedule's last interval does (which finalizes).
    rate = EVENTS / ((HOURS - 1) * 3600)
    schedule = {"interval": "1h", "start": START.isoformat(),
                "end": (START + dt.timedelta(hours=HOURS)).isoformat()}
    with demo_world(tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("replay-base"),
                    generate=("--events", str(EVENTS), "--events-per-second", f"{rate:.6f}"),
                    schedule=schedule, REPLAY_SPARK_MODE="connect",
                    AIRFLOW_CONN_SPARK_CONNECT_DEFAULT=connection) as world:
        yield {**world, "port": port}


def single_run(world, mode: str, *options: str) -> tuple[float, dict]:
    """One ``replay run --finalize`` of the whole archive into its own output: seconds, tables."""
    base = world["base"]
    config = yaml.safe_load((world["pipelines"] / "clicks_per_minute.yaml").read_text())
    config["output"]["path"] = f"lakehouse/{mode}"
    path = base / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    world["run"]("replay", "run", str(path), "--finalize", "--quiet", *options, timeout=1800)
    return time.monotonic() - started, delta_tables(pipeline_config(base, path))


def test_48_hourly_intervals_through_the_scheduler_over_a_warm_server(world):
    run, airflow = world["run"], world["airflow"]
    in_process, expected = single_run(world, "in_process")
    over_connect, tables = single_run(world, "connect", "--remote", f"sc://localhost:{world['port']}")
    assert tables == expected and expected["window_results"]

    run("airflow", "dags", "pause", "replay_quality")
    run("airflow", "dags", "unpause", DAG_ID)
    runs = airflow.wait(DAG_ID, HOURS, timeout=5400)
    assert len(runs) == HOURS and {r["state"] for r in runs} == {"success"}, runs
    seconds = [run_seconds(r) for r in runs]
    wall = (max(parse_time(r["end_date"]) for r in runs)
            - min(parse_time(r["start_date"]) for r in runs)).total_seconds()
    # Runs whose task replayed a batch, and runs whose task's check found nothing due (skipped).
    replayed = {r["run_id"]: airflow.task_states(DAG_ID, r["run_id"])["replay"] for r in runs}
    busy = [run_seconds(r) for r in runs if replayed[r["run_id"]]["state"] == "success"]
    idle = [run_seconds(r) for r in runs if replayed[r["run_id"]]["state"] != "success"]
    tasks = [run_seconds(t) for t in replayed.values() if t["state"] == "success"]
    print(f"\none replay run --finalize of {EVENTS:,} events: in-process {in_process:.1f} s, "
          f"over the warm server {over_connect:.1f} s")
    print(f"{HOURS} hourly DAG runs over the warm server: {wall:.0f} s from the first start to the "
          f"last end = {wall / over_connect:.1f}x the run over the server, {wall / in_process:.1f}x "
          f"the in-process run; the DAG runs' own time {sum(seconds):.0f} s")
    print(f"{len(busy)} runs that replayed a batch: median {statistics.median(busy):.1f} s "
          f"({min(busy):.1f}-{max(busy):.1f}), their replay task {statistics.median(tasks):.1f} s; "
          f"{len(idle)} with nothing due: median {statistics.median(idle):.1f} s "
          f"({min(idle):.1f}-{max(idle):.1f})")
    config = pipeline_config(world["base"], world["pipelines"] / "clicks_per_minute.yaml")
    assert delta_tables(config) == expected
