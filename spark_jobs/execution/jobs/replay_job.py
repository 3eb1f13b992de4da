"""``spark-submit spark_jobs/execution/jobs/replay_job.py PIPELINE.yaml [--until T] [--finalize]
[--batch-size N]``.

The application the Airflow ``replay`` task submits (``REPLAY_SPARK_MODE=submit``); it does exactly what
``replay run PIPELINE.yaml`` does (same code path: ``operations.run_command``, the same summary and
exit statuses), without importing the command line: the execution layer does not depend on
``interfaces``. Under ``spark-submit`` the master comes from ``--master`` of spark-submit (the
Airflow connection), so it is read back from the running JVM and handed on, instead of the CLI's
``$SPARK_MASTER`` or ``local[*]`` default. Also runnable as
``python -m spark_jobs.execution.jobs.replay_job``.
"""

from __future__ import annotations

import argparse
import os
import sys

from spark_jobs.exceptions import ReplayError, exit_status
from spark_jobs.execution.operations import run_command
from spark_jobs.execution.passes import format_summary


def submitted_master() -> str | None:
    """The ``spark.master`` spark-submit was given, or None when not launched by spark-submit."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts no new one
    return SparkConf().get("spark.master", None)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replay_job", description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", help="pipeline config (YAML)")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--finalize", action="store_true")
    parser.add_argument("--until", default=None, help="replay only batches before T (interval end)")
    parser.add_argument("--master", default=None, help="default: spark-submit's master")
    parser.add_argument("--quiet", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    master = args.master or submitted_master()
    command = ["run", args.pipeline]  # the equivalent `replay` command, for the task's log
    if master:
        command += ["--master", master]
    if args.batch_size is not None:
        command += ["--batch-size", str(args.batch_size)]
    if args.until is not None:
        command += ["--until", args.until]
    if args.finalize:
        command.append("--finalize")
    if args.quiet:
        command.append("--quiet")
    print(f"replay_job: replay {' '.join(command)}", file=sys.stderr, flush=True)
    try:
        summary = run_command(
            args.pipeline, batch_size=args.batch_size, finalize=args.finalize, master=master or None,
            quiet=args.quiet, until=args.until,
        )
    except ReplayError as error:
        status, message = exit_status(error)
        print(message, file=sys.stderr)
        return status
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
