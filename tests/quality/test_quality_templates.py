"""The suite templates, their parameterisation per pipeline, and the pieces that need no Spark:
applicability of the reconciliation, offline Data Docs rewriting, result descriptions, the CLI."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import pytest
from dq_helpers import pipeline_dict

from spark_jobs.config import parse_config
from spark_jobs.quality.suites import SuiteFacts, build_suites, load_templates


@pytest.fixture(scope="module")
def templates():
    return load_templates()


def config(**overrides):
    return parse_config(pipeline_dict(Path("/archive"), Path("/lakehouse"), **overrides))


def by_check(suite):
    return {e["meta"]["check"]: e for e in suite.expectations}


def test_templates_are_gx_suites_named_after_their_tables(templates):
    assert set(templates) == {"window_results", "late_events", "quarantine"}
    for name, suite in templates.items():
        assert suite["name"] == name and suite["meta"]["template_version"] >= 1
        checks = [e["meta"]["check"] for e in suite["expectations"]]
        assert len(checks) == len(set(checks)), f"{name}: check names must be unique"


def test_tumbling_pipeline_gets_concrete_expectations(templates):
    suites = build_suites(config(key=["page", "region"]), SuiteFacts(records_read=242), templates)
    window = by_check(suites["window_results"])
    assert window["key_not_null[page]"]["kwargs"] == {"column": "page"}
    assert window["key_not_null[region]"]["kwargs"] == {"column": "region"}
    assert window["columns_match"]["kwargs"]["column_set"] == [
        "page", "region", "window_start", "window_end", "pane_index", "timing", "watermark",
        "replay_clock", "fire_time", "clicks", "revenue", "batch_id", "emit_seq", "emit_step",
    ]
    assert "<> 60000" in window["window_length_is_size"]["kwargs"]["unexpected_rows_query"]
    assert "GROUP BY `page`, `region`, window_start, window_end" in (
        window["pane_index_gap_free"]["kwargs"]["unexpected_rows_query"]
    )
    assert window["aggregate_range[clicks]"]["kwargs"] == {"column": "clicks", "min_value": 1}
    assert window["output_type[revenue]"]["kwargs"] == {"column": "revenue", "type_": "DoubleType"}
    assert "count_never_decreases[clicks]" in window and "count_positive[clicks]" in window
    assert "window_start_null_for_global_window" not in window and "session_length_at_least_gap" not in window
    late = by_check(suites["late_events"])
    assert late["late_fraction"]["kwargs"] == {"min_value": 0, "max_value": 24}  # 0.1 x 242
    assert "event_time + 20000 > watermark" in late["late_after_cleanup"]["kwargs"]["unexpected_rows_query"]
    assert "(`page` IS NULL OR `region` IS NULL)" in (
        late["required_columns_not_null"]["kwargs"]["unexpected_rows_query"]
    )
    assert by_check(suites["quarantine"])["quarantine_fraction"]["kwargs"]["max_value"] == 4  # 0.02 x 242
    for suite in suites.values():
        assert "__" not in json.dumps([e["kwargs"] for e in suite.expectations]).replace("__batch", "")
        suite.gx_suite()  # every concrete expectation is valid for GX


def test_window_kinds_and_triggers_select_their_expectations(templates):
    facts = SuiteFacts(records_read=10)
    global_config = config(window={"type": "global"}, trigger={"type": "count", "count": 5})
    global_checks = set(by_check(build_suites(global_config, facts, templates)["window_results"]))
    assert {"window_start_null_for_global_window", "window_end_null_for_global_window"} <= global_checks
    assert not {"window_start_not_null", "window_length_is_size", "on_time_fires_at_window_end"} & (
        global_checks
    )
    session = by_check(build_suites(config(window={"type": "session", "gap": "30s"}), facts,
                                    templates)["window_results"])
    assert "< 30000" in session["session_length_at_least_gap"]["kwargs"]["unexpected_rows_query"]
    assert "window_length_is_size" not in session and "window_start_not_null" in session
    sliding = by_check(build_suites(config(window={"type": "sliding", "size": "1m", "slide": "20s"}), facts,
                                    templates)["window_results"])
    assert "pmod(unix_millis(window_start) - 0, 20000)" in sliding["window_aligned"]["kwargs"][
        "unexpected_rows_query"]
    purging = by_check(build_suites(config(trigger={"type": "event_time", "purging": True}), facts,
                                    templates)["window_results"])
    assert "count_never_decreases[clicks]" not in purging and "count_positive[clicks]" in purging


def test_late_reasons_are_the_pipelines_own(templates):
    """An interval join's late records are behind the watermark; every other's windows closed."""
    facts = SuiteFacts(records_read=10)
    windowed = by_check(build_suites(config(), facts, templates)["late_events"])
    assert windowed["reason_in_set"]["kwargs"] == {"column": "reason", "value_set": ["window_closed"]}
    right = {"path": "/right", "event_time": "ts", "ingest_time": "ingest_ts",
             "watermark": {"max_out_of_orderness": "1s"}}
    data = pipeline_dict(Path("/archive"), Path("/lakehouse"),
                         join={"type": "interval", "right": right, "lower": "-1s", "upper": "1s"})
    for windowed_only in ("window", "trigger", "aggregates", "allowed_lateness", "quality"):
        data.pop(windowed_only)
    late = by_check(build_suites(parse_config(data), facts, templates)["late_events"])
    assert late["reason_in_set"]["kwargs"] == {"column": "reason", "value_set": ["behind_watermark"]}


def test_fraction_limits_are_exact():
    assert SuiteFacts(records_read=100).limit(0.29) == 29  # 0.29 * 100 is 28.999... in floats
    assert SuiteFacts(records_read=242).limit(0.05) == 12
    assert SuiteFacts(records_read=0).limit(0.5) == 0


def test_reconciliation_says_when_it_does_not_apply():
    from spark_jobs.quality.reconcile import not_applicable_reason

    assert not_applicable_reason(config()) is None
    assert not_applicable_reason(config(window={"type": "sliding", "size": "1m", "slide": "30s"})) is None
    assert "session windows" in not_applicable_reason(config(window={"type": "session", "gap": "30s"}))
    assert "count trigger" in not_applicable_reason(config(trigger={"type": "count", "count": 3}))
    assert "processing_time trigger" in not_applicable_reason(config(trigger={"type": "processing_time"}))
    assert "count(*)" in not_applicable_reason(config(aggregates={"total": "sum(value)"}))
    assert "drop" in not_applicable_reason(config(late_output="drop"))


GX_INDEX = """<html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>
</head><body>
<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1">
<link rel="shortcut icon" href="../static/images/favicon.ico" type="image/x-icon"/>
<table id="t1" class="table-sm" data-toggle="table">
</table>
<script>
  $('#t1').bootstrapTable(
    Object.assign(
      {
        columns: [{'field': 'validation_success', 'title': 'Status'},
                  {'field': 'run_time', 'title': 'Run Time'}],
        data: [{'validation_success': '<i class="fas fa-times text-danger"></i>', 'run_time': '2026-11-23',
                '_table_row_link_path': 'validations/window_results/r1/x.html'}],
        toolbar: '#t1-toolbar'
      },
      {'search': 'true'}
    )
  );
</script></body></html>"""


def test_data_docs_pages_are_rewritten_to_work_offline():
    from spark_jobs.quality.datadocs import offline_html, remote_references

    assert len(remote_references(GX_INDEX)) == 3
    page = offline_html(GX_INDEX, root="./")
    assert remote_references(page) == []
    assert "<script" not in page and "bootstrapTable" not in page
    assert '<a href="./validations/window_results/r1/x.html">2026-11-23</a>' in page
    assert "<th>Status</th><th>Run Time</th>" in page and 'class="fas fa-times text-danger"' in page
    assert 'src="./static/images/logo-long.png"' in page
    assert 'href="./static/images/favicon.ico"' in page  # GX's wrong depth, re-rooted
    assert '<style id="offline-styles">' in page and ".fa-times::before" in page


def test_a_failed_result_describes_expectation_table_column_and_observed_value():
    from spark_jobs.quality.reconcile import Reconciliation
    from spark_jobs.quality.validate import ExpectationOutcome, QualityResult

    failed = ExpectationOutcome(
        "window_results", "count_positive[clicks]", "unexpected_rows_expectation", "clicks", False,
        "2 offending rows, e.g. {page=/home, clicks=0}", "every pane counts at least one record",
    )
    passed = ExpectationOutcome("quarantine", "reason_in_set", "expect_column_values_to_be_in_set", "reason",
                                True, "0 of 3 rows unexpected")
    result = QualityResult("clicks", "r1", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), (0, 4), [failed, passed],
                           Reconciliation("not_applicable", reason="session windows"))
    assert not result.success and result.failures == [failed]
    text = result.describe()
    assert text.splitlines()[0].startswith("data quality of clicks (run r1, batches 0-4): FAILED, 1 of 2")
    assert ("FAILED window_results.count_positive[clicks] [unexpected_rows_expectation] on window_results, "
            "column clicks (every pane counts at least one record): observed 2 offending rows, e.g. "
            "{page=/home, clicks=0}") in text
    assert "reconciliation: not applicable: session windows" in text


def test_cli_commands_wire_in_with_one_call():
    from spark_jobs.quality import cli

    parser = argparse.ArgumentParser(prog="replay")
    commands = parser.add_subparsers(dest="command", required=True)
    functions = cli.register(commands)
    assert functions == {"validate-results": cli.cmd_check, "report": cli.cmd_report}
    args = parser.parse_args(["report", "p.yaml", "--out-dir", "/tmp/r", "--run-id", "x", "--no-fail"])
    assert (args.pipeline, args.out_dir, args.run_id, args.no_fail) == ("p.yaml", "/tmp/r", "x", True)
    args = parser.parse_args(["validate-results", "p.yaml", "--master", "local[2]"])
    assert (args.pipeline, args.master, args.run_id) == ("p.yaml", "local[2]", None)
