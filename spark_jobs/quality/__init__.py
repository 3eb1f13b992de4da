"""Data quality of a pipeline's Delta tables: GX suites, record reconciliation, offline reports.

``validate_pipeline(config)`` runs the versioned suites in ``expectations/`` (one per table) and
the reconciliation over the committed tables and appends the outcomes to ``dq_results``;
``write_report(config)`` also writes ``reports/<pipeline>/<run_id>/index.html``. Nothing here is
imported by the replay engine itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExpectationOutcome", "QualityResult", "validate_pipeline", "write_report"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package must not pull in Spark, GX or matplotlib.
    if name in ("validate_pipeline", "QualityResult", "ExpectationOutcome"):
        from . import validate

        return getattr(validate, name)
    if name == "write_report":
        from .report import write_report

        return write_report
    raise AttributeError(name)
