"""The offline data-quality report of one validation run.

``reports/<pipeline>/<run_id>/index.html`` is one self-contained page (inline CSS, plots embedded as
base64 PNG, no script): summary numbers, the reconciliation, four plots (lateness, watermark lag per
batch, panes per window by timing, quarantine reasons), every expectation's result, and a link to
the run's GX Data Docs in ``data_docs/`` (rewritten to work offline, see :mod:`.datadocs`).
``results.json`` next to it holds the same results as data.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import PipelineConfig, resolve_path
from ..core.durations import MAX_TIMESTAMP, MIN_TIMESTAMP, format_timestamp
from ..execution.ordering import collect_in_replay_order
from ..execution.spark_session import get_spark
from .tables import Snapshot
from .validate import QualityResult, _jsonable, validate_pipeline

#: Above this many replayed records the accepted-record lateness is computed on a sample.
MAX_DRIVER_RECORDS = 2_000_000
MAX_WINDOW_BARS = 60

REPORT_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #1f2328;
  margin: 2rem auto; max-width: 1200px; padding: 0 1rem; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.25rem; margin-top: 2rem;
  border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; }
.muted { color: #656d76; font-size: .9rem; }
.status { display: inline-block; padding: .15rem .6rem; border-radius: 4px; font-weight: bold; }
.pass { background: #dafbe1; color: #1a7f37; } .fail { background: #ffebe9; color: #cf222e; }
.na { background: #eef1f4; color: #57606a; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; margin: .5rem 0; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.numbers { display: grid; grid-template-columns: repeat(auto-fill, minmax(11rem, 1fr)); gap: .6rem; }
.number { border: 1px solid #d0d7de; border-radius: 6px; padding: .5rem .7rem; }
.number .label { color: #656d76; font-size: .8rem; } .number .value { font-size: 1.3rem; font-weight: 600; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 1rem; }
.plots figure { margin: 0; border: 1px solid #d0d7de; border-radius: 6px; padding: .5rem; }
.plots img { width: 100%; height: auto; }
figcaption { font-size: .85rem; color: #656d76; }
code { background: #f6f8fa; padding: .05rem .3rem; border-radius: 3px; }
tr.failed td { background: #fff5f5; }
"""


@dataclass
class Plot:
    name: str
    title: str
    caption: str
    png: bytes


def write_report(
    config: PipelineConfig,
    spark: Any = None,
    out_dir: str | os.PathLike[str] | None = None,
    run_id: str | None = None,
    result: QualityResult | None = None,
) -> Path:
    """Validate (unless ``result`` is given) and write ``<out_dir>/<pipeline>/<run_id>/index.html``.

    ``out_dir`` defaults to ``reports`` under ``REPLAY_BASE_DIR`` (or the current directory).
    Returns the path of ``index.html``.
    """
    spark = spark or get_spark(f"quality-{config.name}")
    result = result or validate_pipeline(config, spark=spark, run_id=run_id)
    directory = Path(out_dir or resolve_path("reports")) / config.name / result.run_id
    directory.mkdir(parents=True, exist_ok=True)
    docs_index = None
    try:
        docs_index = result.build_data_docs(directory / "data_docs")
    except Exception as error:  # the report is still useful without Data Docs; say so in it
        docs_error = f"{type(error).__name__}: {error}"
    else:
        docs_error = None
    snapshot = Snapshot.read(spark, config)
    try:
        plots = build_plots(snapshot)
    finally:
        snapshot.release()
    page = render_html(config, result, plots, docs_index, directory, docs_error)
    index = directory / "index.html"
    index.write_text(page, encoding="utf-8")
    (directory / "results.json").write_text(json.dumps(results_dict(result), indent=2, sort_keys=True))
    return index


def results_dict(result: QualityResult) -> dict[str, Any]:
    return _jsonable({
        "pipeline": result.pipeline,
        "run_id": result.run_id,
        "run_time": result.run_time,
        "batch_range": list(result.batch_range),
        "success": result.success,
        "stats": result.stats,
        "reconciliation": result.reconciliation.to_dict(),
        "outcomes": [outcome.__dict__ for outcome in result.outcomes],
    })


# ---- plots ---------------------------------------------------------------------------------------
def build_plots(snapshot: Snapshot) -> list[Plot]:
    import matplotlib

    matplotlib.use("Agg")
    return [
        _lateness_plot(snapshot),
        _watermark_lag_plot(snapshot),
        _panes_plot(snapshot),
        _quarantine_plot(snapshot),
    ]


def _figure(width: float = 7.0, height: float = 3.6, ncols: int = 1) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(width, height), dpi=100)


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#656d76")
    ax.set_xticks([])
    ax.set_yticks([])


def _lateness_plot(snapshot: Snapshot) -> Plot:
    from pyspark.sql import functions as F

    fig, (left, right) = _figure(10.0, 3.6, ncols=2)
    late = snapshot.frame("late_events")
    values = np.array([], dtype=float)
    if late is not None:
        rows = late.where(F.col("watermark") < MAX_TIMESTAMP).select(
            ((F.col("watermark") - F.col("event_time")) / 1000.0).alias("s")
        ).toArrow()
        values = rows.column("s").to_numpy()
    if len(values):
        left.hist(values, bins=min(40, max(5, len(values) // 3)), color="#cf222e")
        left.set_xlabel("watermark - event time (s)")
        left.set_ylabel("late events")
    else:
        _empty(left, "no late events")
    left.set_title(f"late events ({len(values)})", fontsize=10)
    behind = accepted_lateness(snapshot)
    if len(behind):
        right.hist(behind / 1000.0, bins=40, color="#0969da")
        right.set_yscale("log")
        right.set_xlabel("max event time so far - event time (s)")
        right.set_ylabel("records (log)")
    else:
        _empty(right, "no replayed records")
    right.set_title(f"out-of-orderness of replayed records ({len(behind)})", fontsize=10)
    return Plot(
        "lateness", "Lateness",
        "Left: how far behind the watermark each late event was. Right: for every replayed record, "
        "how far its event time trails the largest event time replayed before it (0 = in order).",
        _png(fig),
    )


def accepted_lateness(snapshot: Snapshot) -> np.ndarray:
    """max-so-far(event time) - event time per replayed record, in replay order (ms)."""
    from pyspark.sql import functions as F

    staging = snapshot.frame("staging")
    if staging is None or not snapshot.log:
        return np.array([], dtype=np.int64)
    replayed = staging.where(F.col("_seq") < snapshot.replayed_seq_end)
    count = replayed.count()
    if count == 0:
        return np.array([], dtype=np.int64)
    if count > MAX_DRIVER_RECORDS:
        # Contiguous stretches keep the running maximum meaningful; take the first records.
        replayed = replayed.where(F.col("_seq") < snapshot.replayed_seq_end - count + MAX_DRIVER_RECORDS)
    table = collect_in_replay_order(replayed, "_seq", "_event_time")
    ts = table.column("_event_time").to_numpy().astype(np.int64)
    return np.maximum.accumulate(ts) - ts


def _watermark_lag_plot(snapshot: Snapshot) -> Plot:
    fig, ax = _figure()
    points = [
        (row["batch_id"], (row["clock_after"] - row["watermark_after"]) / 1000.0)
        for row in snapshot.log
        if MIN_TIMESTAMP < row["watermark_after"] < MAX_TIMESTAMP
        and MIN_TIMESTAMP < row["clock_after"] < MAX_TIMESTAMP
    ]
    if points:
        ids, lags = zip(*points, strict=True)
        ax.bar([str(i) for i in ids], lags, color="#8250df")
        ax.set_xlabel("batch id")
        ax.set_ylabel("replay clock - watermark (s)")
        if len(ids) > 30:
            ax.set_xticks(ax.get_xticks()[:: max(1, len(ids) // 15)])
    else:
        _empty(ax, "no batch with a finite watermark and clock")
    ax.set_title("watermark lag at the end of each batch", fontsize=10)
    return Plot(
        "watermark_lag", "Watermark lag per batch",
        "replay_log.clock_after - watermark_after: how far event-time progress trailed the replay "
        "clock (ingest time) when each batch committed. Finalize batches (+inf) are left out.",
        _png(fig),
    )


def _panes_plot(snapshot: Snapshot) -> Plot:
    from pyspark.sql import functions as F

    fig, ax = _figure(10.0, 3.8)
    results = snapshot.frame("window_results")
    counts: dict[Any, dict[str, int]] = {}
    if results is not None:
        for row in results.groupBy(F.unix_millis("window_start").alias("ws"), "timing").count().collect():
            counts.setdefault(row["ws"], {})[row["timing"]] = row["count"]
    if counts:
        groups = sorted(counts, key=lambda w: (w is None, w or 0))
        if len(groups) > MAX_WINDOW_BARS:
            size = -(-len(groups) // MAX_WINDOW_BARS)
            buckets = [groups[i:i + size] for i in range(0, len(groups), size)]
        else:
            buckets = [[w] for w in groups]
        labels = [_window_label(b[0]) + ("" if len(b) == 1 else f" (+{len(b) - 1})") for b in buckets]
        bottom = np.zeros(len(buckets))
        colors = {"EARLY": "#54aeff", "ON_TIME": "#1a7f37", "LATE": "#bf8700"}
        for timing, color in colors.items():
            heights = np.array([sum(counts[w].get(timing, 0) for w in b) for b in buckets], dtype=float)
            ax.bar(range(len(buckets)), heights, bottom=bottom, color=color, label=timing)
            bottom += heights
        step = max(1, len(buckets) // 12)
        ax.set_xticks(range(0, len(buckets), step))
        ax.set_xticklabels(labels[::step], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("panes (all keys)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        _empty(ax, "no panes")
    ax.set_title("panes per window by timing", fontsize=10)
    return Plot(
        "panes", "Panes per window by timing",
        "Firings per window start, summed over keys and stacked by timing (EARLY / ON_TIME / LATE); "
        "with many windows, neighbouring windows share a bar.",
        _png(fig),
    )


def _window_label(start_ms: int | None) -> str:
    if start_ms is None:
        return "global"
    return format_timestamp(start_ms)[5:16]


def _quarantine_plot(snapshot: Snapshot) -> Plot:
    fig, ax = _figure()
    quarantine = snapshot.frame("quarantine")
    reasons = {}
    if quarantine is not None:
        reasons = {row["reason"]: row["count"] for row in quarantine.groupBy("reason").count().collect()}
    if reasons:
        names = sorted(reasons, key=lambda r: -reasons[r])
        ax.barh([str(n) for n in names], [reasons[n] for n in names], color="#bc4c00")
        ax.invert_yaxis()
        ax.set_xlabel("records")
    else:
        _empty(ax, "no quarantined records")
    ax.set_title("quarantine reasons", fontsize=10)
    return Plot("quarantine", "Quarantine reasons", "Quarantined records by reason.", _png(fig))


# ---- HTML ----------------------------------------------------------------------------------------
def render_html(
    config: PipelineConfig,
    result: QualityResult,
    plots: list[Plot],
    docs_index: Path | None,
    directory: Path,
    docs_error: str | None = None,
) -> str:
    esc = html.escape
    stats = result.stats
    panes = stats.get("panes", {})
    recon = result.reconciliation
    status = ("pass", "PASSED") if result.success else ("fail", "FAILED")
    lo, hi = result.batch_range
    numbers = [
        ("records read", stats.get("records_read", 0)),
        ("accepted", stats.get("accepted", 0)),
        ("quarantined", stats.get("quarantined", 0)),
        ("replayed", stats.get("replayed", 0)),
        ("EARLY panes", panes.get("EARLY", 0)),
        ("ON_TIME panes", panes.get("ON_TIME", 0)),
        ("LATE panes", panes.get("LATE", 0)),
        ("late events", stats.get("late", 0)),
        ("open windows", stats.get("open_windows", 0)),
        ("batches", stats.get("batches", 0)),
        ("watermark", format_timestamp(stats.get("watermark", MIN_TIMESTAMP))
         + (" (finalized)" if stats.get("finalized") else "")),
    ]
    number_html = "".join(
        f'<div class="number"><div class="label">{esc(label)}</div>'
        f'<div class="value" data-stat="{esc(label)}">{esc(str(value))}</div></div>'
        for label, value in numbers
    )
    recon_class = {"ok": "pass", "mismatch": "fail"}.get(recon.status, "na")
    examples = "".join(f"<li>{esc(e)}</li>" for e in recon.examples)
    problems = "".join(f"<li>{esc(p)}</li>" for p in recon.problems)
    recon_html = (
        f'<p><span class="status {recon_class}">{esc(recon.status.replace("_", " "))}</span> '
        f"{esc(recon.summary() if recon.status != 'ok' else recon.equation())}</p>"
        + (f"<p>Problems:</p><ul>{problems}</ul>" if problems else "")
        + (f"<p>Windows that disagree (first {len(recon.examples)}):</p><ul>{examples}</ul>"
           if examples else "")
        + (f'<p class="muted">windows checked {recon.windows}, open {recon.open_windows}; counted with '
           f"<code>{esc(str(recon.count_column))}</code></p>" if recon.applicable else "")
    )
    plot_html = "".join(
        f'<figure id="plot-{esc(p.name)}"><img alt="{esc(p.title)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.png).decode("ascii")}">'
        f"<figcaption><b>{esc(p.title)}.</b> {esc(p.caption)}</figcaption></figure>"
        for p in plots
    )
    ordered = sorted(result.outcomes, key=lambda o: (o.success, o.suite, o.expectation))
    rows = "".join(
        f'<tr class="{"ok" if o.success else "failed"}"><td>'
        f'<span class="status {"pass" if o.success else "fail"}">'
        f'{"ok" if o.success else "FAILED"}</span></td>'
        f"<td>{esc(o.suite)}</td><td>{esc(o.expectation)}<br><span class=\"muted\">"
        f"{esc(o.expectation_type)}</span></td><td>{esc(o.column or '')}</td>"
        f"<td>{esc(o.observed_value)}</td><td class=\"muted\">{esc(o.description)}</td></tr>"
        for o in ordered
    )
    if docs_index is not None:
        link = os.path.relpath(docs_index, directory)
        docs_html = (f'<p><a href="{esc(link)}">Great Expectations Data Docs of this run</a> '
                     '(rewritten to render offline).</p>')
    else:
        docs_html = f"<p>Data Docs could not be built: {esc(docs_error or 'unknown error')}</p>"
    counts = ", ".join(
        f"{esc(suite)} {sum(o.success for o in items)}/{len(items)}"
        for suite, items in result.by_suite().items()
    )
    setup = (
        f"window {esc(json.dumps(config.window.to_dict()))}, "
        f"trigger {esc(json.dumps(config.trigger.to_dict()))}, "
        f"allowed lateness {config.allowed_lateness} ms, key {esc(', '.join(config.key))}"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Data quality: {esc(result.pipeline)} {esc(result.run_id)}</title>
<style>{REPORT_CSS}</style></head>
<body>
<h1>Data quality: {esc(result.pipeline)} <span class="status {status[0]}" id="overall">{status[1]}</span></h1>
<p class="muted">run <code>{esc(result.run_id)}</code> at {esc(f"{result.run_time:%Y-%m-%d %H:%M:%S} UTC")};
{esc("no batches replayed" if lo is None else f"batches {lo}-{hi}")}; {setup};
output <code>{esc(config.output_path)}</code></p>
<h2>Summary</h2>
<div class="numbers">{number_html}</div>
<h2>Reconciliation</h2>
{recon_html}
<h2>Plots</h2>
<div class="plots">{plot_html}</div>
<h2>Expectations</h2>
<p>{len(result.outcomes) - len(result.failures)} of {len(result.outcomes)} passed ({counts}).
Results are also appended to <code>dq_results</code> under the output path.</p>
<table id="results"><thead><tr><th>status</th><th>suite (table)</th><th>expectation</th><th>column</th>
<th>observed</th><th>meaning</th></tr></thead><tbody>{rows}</tbody></table>
<h2>Data Docs</h2>
{docs_html}
</body></html>
"""
