"""The data-quality suites against a real replay in real Delta with real Great Expectations.

One replay (not finalized, so some windows are still open) is shared by the module; the clean
tables must pass every suite and reconcile; a copy with three deliberate corruptions, each in its
own window, must fail exactly the three expectations that guard against them; the offline report
of the clean run must render without network.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from dq_helpers import (
    commit_corrupted,
    committed_version,
    copy_lakehouse,
    pipeline_dict,
    read,
    replay,
    write_archive,
    write_pipeline,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def replayed(spark, tmp_path_factory):
    from spark_jobs.config import load_config

    base = tmp_path_factory.mktemp("dq")
    archive = write_archive(base / "archive")
    path = write_pipeline(base / "dq_clicks.yaml", pipeline_dict(archive, base / "lakehouse"))
    config = load_config(path)
    summary = replay(config, spark)
    assert summary.panes.get("LATE", 0) > 0, "the archive must yield LATE panes"
    assert summary.late > 0, "the archive must yield late events"
    return {"base": base, "path": path, "config": config, "summary": summary}


@pytest.fixture(scope="module")
def clean(spark, replayed):
    from spark_jobs.quality import validate_pipeline

    return validate_pipeline(replayed["config"], spark=spark, run_id="clean-run")


def test_a_clean_replay_passes_every_suite_and_reconciles(clean, replayed):
    assert clean.success, clean.describe()
    assert clean.failures == []
    suites = {o.suite for o in clean.outcomes}
    assert suites == {"window_results", "late_events", "quarantine", "reconciliation"}
    checks = {f"{o.suite}.{o.expectation}" for o in clean.outcomes}
    for expected in (
        "window_results.key_not_null[page]", "window_results.window_length_is_size",
        "window_results.pane_unique", "window_results.pane_index_gap_free",
        "window_results.one_on_time_per_window", "window_results.no_early_after_on_time",
        "window_results.count_positive[clicks]", "window_results.aggregate_range[revenue]",
        "late_events.columns_match", "late_events.late_fraction", "quarantine.reason_in_set",
        "quarantine.quarantine_fraction", "reconciliation.records_reconcile",
    ):
        assert expected in checks
    recon = clean.reconciliation
    summary = replayed["summary"]
    assert recon.status == "ok", recon.summary()
    assert recon.records_read == summary.records_read == 242
    assert recon.quarantined == 2 and recon.late == summary.late > 0
    assert recon.in_flight > 0 and recon.open_windows > 0, "the replay was not finalized: windows stay open"
    accounted = recon.quarantined + recon.late + recon.counted + recon.in_flight + recon.pending
    assert recon.records_read == accounted
    assert "records read 242 = quarantined 2" in clean.describe()


def test_every_outcome_is_appended_to_dq_results(spark, clean, replayed):
    lakehouse = Path(replayed["config"].output_path)
    rows = read(spark, lakehouse, "dq_results").where("run_id = 'clean-run'").collect()
    assert len(rows) == len(clean.outcomes)
    log = read(spark, lakehouse, "replay_log").collect()
    row = next(r for r in rows if r["expectation"] == "records_reconcile")
    assert row["pipeline"] == "dq_clicks" and row["suite"] == "reconciliation" and row["success"]
    batches = [r["batch_id"] for r in log]
    assert (row["batch_min"], row["batch_max"]) == (min(batches), max(batches))
    assert row["observed_value"].startswith("records read 242 = ")
    assert row["run_time"] is not None
    key_check = next(r for r in rows if r["expectation"] == "key_not_null[page]")
    assert key_check["column"] == "page" and key_check["observed_value"].startswith("0 of ")


def test_a_pipeline_not_replayed_yet_validates_as_empty(spark, tmp_path):
    from spark_jobs.config import load_config
    from spark_jobs.quality import validate_pipeline

    config = load_config(write_pipeline(tmp_path / "empty.yaml", pipeline_dict(
        tmp_path / "archive", tmp_path / "lakehouse", name="dq_empty")))
    result = validate_pipeline(config, spark=spark, run_id="empty-run")
    assert result.success, result.describe()
    assert result.reconciliation.status == "nothing_replayed" and result.batch_range == (None, None)
    assert "no batches replayed" in result.describe()
    assert read(spark, tmp_path / "lakehouse", "dq_results").count() == len(result.outcomes)


def _corrupt(spark, lakehouse: Path, config) -> dict[str, tuple]:
    """Three corruptions in three different (key, window)s; returns which window got which."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    version = committed_version(spark, lakehouse, "window_results")
    results = read(spark, lakehouse, "window_results", version).cache()
    state = read(spark, lakehouse, "operator_state", committed_version(spark, lakehouse, "operator_state"))
    open_windows = {(r["page"], r["window_start_ms"]) for r in state.collect()}
    by_window = Window.partitionBy("page", "window_start").orderBy("pane_index")
    panes = results.withColumn("previous", F.lag("clicks").over(by_window)).withColumn(
        "last", F.max("pane_index").over(Window.partitionBy("page", "window_start"))
    ).withColumn("ws", F.unix_millis("window_start")).collect()
    used: set[tuple] = set()

    def pick(condition) -> dict:
        row = next(r for r in panes if (r["page"], r["ws"]) not in used and condition(r))
        used.add((row["page"], row["ws"]))
        return row

    late = pick(lambda r: r["timing"] == "LATE")
    final = pick(lambda r: r["pane_index"] == r["last"] and (r["page"], r["ws"]) not in open_windows
                 and r["clicks"] >= 2 and (r["previous"] is None or r["clicks"] > r["previous"]))
    early = pick(lambda r: r["timing"] == "EARLY" and r["pane_index"] < r["last"])

    def is_pane(row):
        return ((F.col("page") == row["page"]) & (F.col("window_start") == row["window_start"])
                & (F.col("pane_index") == row["pane_index"]))

    corrupted = (
        results.withColumn("timing", F.when(is_pane(late), F.lit("EARLY")).otherwise(F.col("timing")))
        .withColumn("clicks", F.when(is_pane(final), F.col("clicks") - 1).otherwise(F.col("clicks")))
        .unionByName(results.where(is_pane(early)))
    )
    commit_corrupted(spark, lakehouse, "window_results", corrupted)
    return {
        "timing": (late["page"], late["window_start"]),
        "missing": (final["page"], final["ws"]),
        "duplicate": (early["page"], early["window_start"], early["pane_index"]),
    }


def test_corrupted_results_fail_exactly_the_right_expectations(spark, replayed, tmp_path, capsys):
    from spark_jobs.config import load_config
    from spark_jobs.core.durations import format_timestamp
    from spark_jobs.quality import cli

    lakehouse = copy_lakehouse(replayed["config"].output_path, tmp_path / "lakehouse")
    config = load_config(write_pipeline(
        tmp_path / "corrupted.yaml", pipeline_dict(Path(replayed["config"].source.path), lakehouse)
    ))
    where = _corrupt(spark, lakehouse, config)
    parser = cli.add_check_arguments(argparse.ArgumentParser())
    code = cli.cmd_check(parser.parse_args([str(tmp_path / "corrupted.yaml"), "--run-id", "corrupt-run"]))
    out, err = capsys.readouterr()
    assert code == 1
    recorded = read(spark, lakehouse, "dq_results").where("run_id = 'corrupt-run'").collect()
    rows = {r["expectation"]: r for r in recorded}
    failed = sorted(name for name, row in rows.items() if not row["success"])
    assert failed == ["no_early_after_on_time", "pane_unique", "records_reconcile"], out

    duplicate = rows["pane_unique"]
    assert duplicate["suite"] == "window_results"
    assert duplicate["column"] == "page, window_start, window_end, pane_index"
    page, start, pane = where["duplicate"]
    assert duplicate["observed_value"].startswith("2 of ")  # the original and its copy
    assert f"e.g. {{page={page}, window_start={start}, " in duplicate["observed_value"]
    assert f"pane_index={pane}}}" in duplicate["observed_value"]

    timing = rows["no_early_after_on_time"]
    page, start = where["timing"]
    assert timing["observed_value"].startswith("1 offending row, e.g. {page=" + page)
    assert str(start) in timing["observed_value"]

    missing = rows["records_reconcile"]
    page, start_ms = where["missing"]
    assert missing["suite"] == "reconciliation" and missing["column"] == "clicks"
    assert "(+1 unaccounted)" in missing["observed_value"]
    assert f"page={page} window [{format_timestamp(start_ms)}" in missing["observed_value"]
    assert "1 of " in missing["observed_value"] and "windows disagree" in missing["observed_value"]

    # The CLI says which expectation failed, on what, and what it saw.
    assert "data quality FAILED for dq_clicks (3 expectations)" in err
    assert "pane_unique (expect_compound_columns_to_be_unique) on window_results, column page, " in err
    assert "no_early_after_on_time (unexpected_rows_expectation) on window_results" in err
    assert ("records_reconcile (spark_reconciliation) on reconciliation, column clicks: "
            "observed records read 242 != ") in err
    assert "FAILED" in out.splitlines()[0]


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def _remote(tags) -> list[str]:
    found = []
    for tag, attrs in tags:
        url = attrs.get("href") if tag == "link" else attrs.get("src") if tag in ("script", "img") else None
        if url and re.match(r"^(https?:)?//", url):
            found.append(f"{tag} {url}")
    return found


def test_the_report_renders_offline(spark, clean, replayed, tmp_path):
    import matplotlib.image as mpimg

    from spark_jobs.quality import write_report

    index = write_report(replayed["config"], spark=spark, out_dir=tmp_path / "reports", result=clean)
    assert index == tmp_path / "reports" / "dq_clicks" / "clean-run" / "index.html"
    text = index.read_text()
    tags = _tags(text)
    assert _remote(tags) == []
    assert not [t for t, a in tags if t == "script"]
    images = [a["src"] for t, a in tags if t == "img"]
    assert len(images) == 4
    for src in images:
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
        pixels = mpimg.imread(io.BytesIO(png), format="png")
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    stats = clean.stats
    summary = replayed["summary"]
    for label, value in (
        ("records read", 242), ("accepted", 240), ("quarantined", 2), ("late events", summary.late),
        ("EARLY panes", summary.panes["EARLY"]), ("ON_TIME panes", summary.panes["ON_TIME"]),
        ("LATE panes", summary.panes["LATE"]),
    ):
        assert f'data-stat="{label}">{value}<' in text
    assert stats["watermark"] == summary.watermark
    assert 'id="overall">PASSED<' in text
    assert "records read 242 = quarantined 2 + late" in text
    assert text.count('<tr class="ok">') == len(clean.outcomes)

    docs = index.parent / "data_docs" / "index.html"
    assert 'href="data_docs/index.html"' in text and docs.exists()
    pages = list((index.parent / "data_docs").rglob("*.html"))
    assert len(pages) >= 7  # the index, 3 suites, 3 validation results
    for page in pages:
        page_tags = _tags(page.read_text())
        assert _remote(page_tags) == [], page
        assert not [t for t, a in page_tags if t == "script"], page
        for tag, attrs in page_tags:
            if tag in ("img", "link") and (attrs.get("src") or attrs.get("href", "")).startswith("."):
                target = (page.parent / (attrs.get("src") or attrs.get("href"))).resolve()
                assert target.exists(), (page, target)
    docs_text = docs.read_text()
    for suite in ("window_results", "late_events", "quarantine"):
        assert re.search(rf'<a href="\./validations/{suite}/clean-run/[^"]+\.html">', docs_text), suite
    results = json.loads((index.parent / "results.json").read_text())
    assert results["success"] and results["reconciliation"]["status"] == "ok"


def test_sliding_windows_reconcile_records_late_for_some_windows_only(spark, tmp_path):
    """Sliding windows (1 min every 20 s): a record 40 s late misses its oldest window but counts
    in the others; the reconciliation recomputes the watermark per record to know which."""
    from spark_jobs.config import load_config
    from spark_jobs.quality.reconcile import reconcile
    from spark_jobs.quality.tables import Snapshot

    archive = write_archive(tmp_path / "archive", records=150)
    config = load_config(write_pipeline(tmp_path / "sliding.yaml", pipeline_dict(
        archive, tmp_path / "lakehouse", name="dq_sliding", batch={"max_records": 200},
        window={"type": "sliding", "size": "1m", "slide": "20s"},
    )))
    replay(config, spark)

    def reconciled():
        snapshot = Snapshot.read(spark, config)
        try:
            return reconcile(snapshot)
        finally:
            snapshot.release()

    recon = reconciled()  # the GX suites are the same as for tumbling windows: not re-run here
    assert recon.status == "ok" and recon.window == "sliding", recon.summary()
    accepted = recon.replayed - recon.late
    assert recon.expected == recon.counted + recon.in_flight
    assert 2 * accepted < recon.expected < 3 * accepted, "some records must miss some of their windows"

    from pyspark.sql import functions as F

    lakehouse = tmp_path / "lakehouse"
    results = read(spark, lakehouse, "window_results", committed_version(spark, lakehouse, "window_results"))
    closed = results.where("timing = 'ON_TIME' AND clicks >= 2").orderBy("window_start", "page").first()
    target = ((F.col("page") == closed["page"]) & (F.col("window_start") == closed["window_start"])
              & (F.col("pane_index") >= closed["pane_index"]))
    inflated = results.withColumn("clicks", F.when(target, F.col("clicks") + 1).otherwise(F.col("clicks")))
    commit_corrupted(spark, lakehouse, "window_results", inflated)
    broken = reconciled()
    assert broken.status == "mismatch" and broken.mismatched_windows == 1
    assert broken.counted + broken.in_flight == broken.expected + 1
    assert f"page={closed['page']} window [" in broken.examples[0]
    assert "record-windows counted" in broken.summary() and " != " in broken.summary()
