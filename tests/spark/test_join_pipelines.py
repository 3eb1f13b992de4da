"""Joins of two archives through the real CLI into Delta: interval and window joins give the
same rows for every batch size, equal the in-memory oracle fed the same replay order, and every
input line is accounted for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_helpers import cli, table_rows, write_archive, write_pipeline

from spark_jobs.config import load_config
from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

pytestmark = pytest.mark.spark

INTERVAL = {"type": "interval", "lower": "-3s", "upper": "5s"}
WINDOW = {"type": "window"}
WINDOW_SETTINGS = {
    "window": {"type": "tumbling", "size": "20s"},
    "trigger": {"type": "custom", "class": "spark_jobs.contrib.triggers.ThresholdTrigger",
                "params": {"field": "value", "threshold": 30}},
    "allowed_lateness": "5s",
    "evictor": {"type": "count", "count": 6},
}
NOT_WINDOWED = {"window": None, "trigger": None, "allowed_lateness": None}


def archives(tmp_path: Path) -> tuple[Path, Path]:
    left = write_archive(tmp_path / "left", records=160, keys=3, seed=11, files=2)
    right = write_archive(tmp_path / "right", records=120, keys=3, seed=12, files=3)
    return left, right


def right_source(right: Path) -> dict:
    """The join's second input, with its own ingest times and watermark."""
    return {"path": str(right), "format": "jsonl", "event_time": "ts", "ingest_time": "ingest_ts",
            "partition": "partition", "offset": "offset", "id": "event_id",
            "watermark": {"max_out_of_orderness": "8s"}}


def pipeline(tmp_path: Path, name: str, join: dict, left: Path, right: Path, **settings) -> Path:
    return write_pipeline(
        tmp_path / f"{name}.yaml", left, tmp_path / name, name=name, aggregates=None,
        join={**join, "right": right_source(right)}, **settings,
    )


def oracle(config_path: Path, left: Path, right: Path) -> list[tuple]:
    """The in-memory replay of the same records in the documented replay order."""
    config = load_config(config_path)
    rows = []
    for number, archive in enumerate((left, right)):
        for file_index, path in enumerate(sorted(archive.glob("*.jsonl"))):
            for line, text in enumerate(path.read_text().splitlines(), 1):
                record = json.loads(text)
                order = (record["ingest_ts"], number, str(record["partition"]), record["offset"],
                         file_index, line)
                rows.append((order, Record((record["user"],), record["ts"], (), record["ingest_ts"],
                                           str(record["partition"]), record, number)))
    rows.sort(key=lambda row: row[0])
    memory = MemoryReplay(config, operator_spec(config))
    memory.run([record for _, record in rows], 1000)
    names = [name for name, _ in config.outputs()]
    return sorted(
        (key[0], *[pane.values[names.index(n)] for n in names])
        for key, pane in memory.panes
    )


def table_rows_dicts(path: Path) -> list[dict]:
    from spark_jobs.execution.spark_session import get_spark

    spark = get_spark("replay-tests")  # the run's session (a Connect one in connect mode)
    return [row.asDict() for row in spark.read.format("delta").load(str(path)).collect()]


@pytest.mark.parametrize(("join", "settings"), [(INTERVAL, NOT_WINDOWED), (WINDOW, WINDOW_SETTINGS)],
                         ids=["interval", "window"])
def test_join_of_two_archives_is_batch_size_invariant_and_equals_the_oracle(spark, tmp_path, join, settings):
    left, right = archives(tmp_path)
    outputs = {}
    for batch_size in (9, 1000):
        name = f"{join['type']}_{batch_size}"
        config = pipeline(tmp_path, name, join, left, right, **settings)
        result = cli("run", str(config), "--batch-size", str(batch_size), "--finalize", "--quiet")
        assert result.returncode == 0, result.stderr
        outputs[batch_size] = {
            table: table_rows(spark, tmp_path / name, table, drop=("batch_id",))
            for table in ("join_results", "late_events", "quarantine")
        }
        lines = sum(1 for archive in (left, right) for p in archive.glob("*.jsonl")
                    for _ in p.read_text().splitlines())
        staged = spark.read.format("delta").load(str(tmp_path / name / "staging")).count()
        quarantined = spark.read.format("delta").load(str(tmp_path / name / "quarantine")).count()
        assert staged + quarantined == lines  # every line of both archives: replayed or quarantined
        assert spark.read.format("delta").load(str(tmp_path / name / "operator_state")).count() == 0
    assert outputs[9] == outputs[1000]
    assert outputs[9]["join_results"], "the archives share keys and times: some pairs must join"
    assert outputs[9]["late_events"], "write_archive makes a few very late records"

    config_path = tmp_path / f"{join['type']}_9.yaml"
    config = load_config(config_path)
    names = [name for name, _ in config.outputs()]
    results = table_rows_dicts(tmp_path / f"{join['type']}_9" / "join_results")
    spark_rows = sorted((row["user"], *[row[n] for n in names]) for row in results)
    assert spark_rows == oracle(config_path, left, right)


def test_example_join_pipeline_runs_from_the_cli(spark, tmp_path):
    """include/pipelines/clicks_with_ads.yaml (custom trigger + window join) on generated archives."""
    import yaml

    clicks, ads = tmp_path / "clicks", tmp_path / "ads"
    assert cli("generate", str(clicks), "--events", "3000", "--seed", "7").returncode == 0
    assert cli("generate", str(ads), "--events", "600", "--seed", "8",
               "--events-per-second", "40").returncode == 0
    example = yaml.safe_load(Path("include/pipelines/clicks_with_ads.yaml").read_text())
    example["source"]["path"] = str(clicks)
    example["join"]["right"]["path"] = str(ads)
    example["output"]["path"] = str(tmp_path / "out")
    config = tmp_path / "clicks_with_ads.yaml"
    config.write_text(yaml.safe_dump(example))
    result = cli("run", str(config), "--finalize")
    assert result.returncode == 0, result.stderr
    rows = table_rows_dicts(tmp_path / "out" / "join_results")
    assert rows and {row["timing"] for row in rows} >= {"EARLY", "ON_TIME"}
    assert all(row["left_page"] == row["right_page"] for row in rows)  # keyed by user and page
    # The summary speaks of pairs and names the tables the run wrote (a join has no window_latest).
    assert f"  pairs      {len(rows)} joined pairs\n" in result.stdout, result.stdout
    from spark_jobs.execution.state.delta import ALL_TABLES

    written = result.stdout.split("  tables     ", 1)[1].strip()
    assert written.startswith(f"{tmp_path / 'out'}/{{"), written
    names = written.split("{", 1)[1].rstrip("}").split(",")
    assert set(names) == {t for t in ALL_TABLES if (tmp_path / "out" / t / "_delta_log").exists()}
    assert "join_results" in names and "window_results" not in names and "window_latest" not in names


def greedy_merge(inputs: list[list[Record]]) -> list[Record]:
    """The documented order without ingest times, by its definition: always take the input whose
    next record has the earlier event time (ties: the left input)."""
    left, right = inputs
    merged, i, j = [], 0, 0
    while i < len(left) or j < len(right):
        if j == len(right) or (i < len(left) and left[i].event_time <= right[j].event_time):
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    return merged


def test_join_without_ingest_times_interleaves_by_event_time(spark, tmp_path):
    """No ingest_time: the Spark sort by running maximum equals the timestamp-synchronised merge."""
    left, right = archives(tmp_path)
    name = "no_ingest"  # (batch-size invariance of joins: the test above)
    right_input = {"path": str(right), "format": "jsonl", "event_time": "ts", "id": "event_id",
                   "watermark": {"max_out_of_orderness": "8s"}}
    config = write_pipeline(
        tmp_path / f"{name}.yaml", left, tmp_path / name, name=name, aggregates=None,
        join={**INTERVAL, "right": right_input}, **NOT_WINDOWED,
        source={"path": str(left), "format": "jsonl", "event_time": "ts", "id": "event_id"},
    )
    result = cli("run", str(config), "--batch-size", "9", "--finalize", "--quiet")
    assert result.returncode == 0, result.stderr

    loaded = load_config(config)
    inputs = []
    for number, archive in enumerate((left, right)):
        records = []
        for path in sorted(archive.glob("*.jsonl")):
            for text in path.read_text().splitlines():
                row = json.loads(text)
                records.append(Record((row["user"],), row["ts"], (), None, "0", row, number))
        inputs.append(records)
    memory = MemoryReplay(loaded, operator_spec(loaded))
    memory.run(greedy_merge(inputs), 1000)
    names = [name for name, _ in loaded.outputs()]
    expected = sorted((key[0], *[pane.values[names.index(n)] for n in names]) for key, pane in memory.panes)
    got = sorted((row["user"], *[row[n] for n in names])
                 for row in table_rows_dicts(tmp_path / name / "join_results"))
    assert got == expected and got
