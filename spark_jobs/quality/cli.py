"""The data-quality commands, ready to be wired into ``spark_jobs.interfaces.cli``:

    replay validate-results PIPELINE.yaml   run the suites and the reconciliation; exit 1 on a failure
    replay report PIPELINE.yaml             the same, then write reports/<pipeline>/<run_id>/index.html

Wiring (one line each in ``build_parser`` / ``COMMANDS``)::

    from .quality import cli as quality_cli
    quality_cli.add_check_arguments(commands.add_parser("validate-results", help=quality_cli.CHECK_HELP))
    quality_cli.add_report_arguments(commands.add_parser("report", help=quality_cli.REPORT_HELP))
    COMMANDS.update({"validate-results": quality_cli.cmd_check, "report": quality_cli.cmd_report})

(or ``COMMANDS.update(quality_cli.register(commands))`` for all of it). Config errors raise
:class:`~spark_jobs.exceptions.ConfigError`, which ``spark_jobs.interfaces.cli.main`` turns into exit
code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

# Imports of the suites, the config and Spark wait inside the commands: the `replay` CLI registers
# these at every start-up (see spark_jobs.interfaces.cli).

CHECK_HELP = "check a pipeline's Delta tables with its data-quality suites (exit 1 on a failure)"
REPORT_HELP = "validate a pipeline's tables and write an offline HTML data-quality report"


def _common(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("pipeline", help="pipeline config (YAML)")
    parser.add_argument("--run-id", default=None, help="name of this validation run (default: UTC time)")
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default: $SPARK_MASTER or local[*])")
    return parser


def add_check_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = (
        "Run the pipeline's Great Expectations suites (window_results, late_events, quarantine) and "
        "the record reconciliation over its committed Delta tables, append the outcomes to "
        "dq_results, print them, and exit 1 when any expectation failed."
    )
    return _common(parser)


def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = (
        "Validate like validate-results, then write a self-contained HTML report (summary, "
        "reconciliation, plots, every expectation) and offline GX Data Docs under "
        "OUT_DIR/<pipeline>/<run_id>/. Exits 1 when any expectation failed (the report is written)."
    )
    _common(parser)
    parser.add_argument("--out-dir", default=None, help="where reports go (default: ./reports)")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when expectations failed")
    return parser


def add_arguments(
    parser: argparse.ArgumentParser, command: str = "validate-results"
) -> argparse.ArgumentParser:
    """The arguments of ``command`` (``validate-results`` or ``report``)."""
    return (add_report_arguments if command == "report" else add_check_arguments)(parser)


def register(commands: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add both sub-commands to an ``add_subparsers()`` object; returns their functions by name."""
    add_check_arguments(commands.add_parser("validate-results", help=CHECK_HELP))
    add_report_arguments(commands.add_parser("report", help=REPORT_HELP))
    return {"validate-results": cmd_check, "report": cmd_report}


def _spark(args: argparse.Namespace, name: str) -> Any:
    from ..execution.spark_session import get_spark

    return get_spark(f"quality-{name}", master=getattr(args, "master", None))


def cmd_check(args: argparse.Namespace) -> int:
    from ..config import load_config
    from .validate import validate_pipeline

    config = load_config(args.pipeline)
    result = validate_pipeline(config, spark=_spark(args, config.name), run_id=args.run_id)
    print(result.describe())
    if not result.success:
        print(_failure_message(result), file=sys.stderr)
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..config import load_config
    from .report import write_report
    from .validate import validate_pipeline

    config = load_config(args.pipeline)
    spark = _spark(args, config.name)
    result = validate_pipeline(config, spark=spark, run_id=args.run_id)
    index = write_report(config, spark=spark, out_dir=args.out_dir, result=result)
    print(result.describe())
    print(f"report: {index}")
    if not result.success:
        print(_failure_message(result), file=sys.stderr)
        return 0 if getattr(args, "no_fail", False) else 1
    return 0


def _failure_message(result: Any) -> str:
    lines = [f"replay: data quality FAILED for {result.pipeline} ({len(result.failures)} expectations):"]
    for outcome in result.failures:
        where = f"column {outcome.column}" if outcome.column else "the table"
        lines.append(
            f"  {outcome.expectation} ({outcome.expectation_type}) on {outcome.table}, {where}: "
            f"observed {outcome.observed_value}"
        )
    return "\n".join(lines)
