"""Smoke test of the benchmark harness: ``python -m bench.harness --quick`` runs end to end on
a ~2k-event archive (replay, the plain-batch lower bound and Structured Streaming, in one worker
process) and writes its JSON. No timing assertions: timings belong to BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def test_quick_bench_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "SPARK_MASTER": os.environ.get("SPARK_MASTER", "local[2]")}
    completed = subprocess.run(
        [sys.executable, "-m", "bench.harness", "--quick", "--root", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    report = json.loads((out / "results.json").read_text())
    kinds = {r["kind"]: r for r in report["results"]}
    assert set(kinds) == {"replay", "batch", "sss"}
    assert all(r["ok"] for r in report["results"])
    replay = kinds["replay"]
    assert replay["events"] == 2000
    # every accepted record was replayed, in the planned number of batches (+ the finalize batch)
    assert sum(b["records"] for b in replay["per_batch"]) == replay["records_accepted"]
    assert replay["batches"] == 3
    assert replay["peak_rss_bytes"] > 0 and replay["delta"]["log_files"] > 0
    assert all(b["state_rows"] is not None for b in replay["per_batch"])
    assert kinds["sss"]["batches"] >= 2
    assert kinds["batch"]["result_rows"] > 0
    row = report["analysis"]["comparison"][0]
    assert row["vs_batch"] is not None and row["vs_sss"] is not None
    assert (out / "summary.md").exists() and (out / "bench.png").exists()
