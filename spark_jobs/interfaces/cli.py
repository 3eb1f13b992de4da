"""The ``replay`` command line.

    replay generate DIR           write a deterministic sample archive
    replay validate PIPELINE.yaml check a pipeline config (exit 2 on a bad one)
    replay run PIPELINE.yaml      replay what has not been replayed yet
    replay status PIPELINE.yaml   what has been replayed: batches, watermark, tables
    replay validate-results PIPELINE.yaml   data-quality suites + reconciliation (exit 1 on failure)
    replay report PIPELINE.yaml   the same, and an offline HTML report
    replay reset PIPELINE.yaml --yes
    replay reprocess PIPELINE.yaml --from T1 --to T2 --reason TEXT
    replay demo                   generate the sample archive, replay it, print a summary
    replay pools [DIR]            create each pipeline's one-slot Airflow pool
    replay server start|stop|status   a Spark Connect server with Delta (docs/spark-connect.md)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError, ReplayError, exit_status
from ..samples.spec import FORMATS as SAMPLE_FORMATS

# Each command imports what it runs inside its function: `replay --help` and a config error must
# answer without loading numpy, Spark or the replay (the operations pull in pyspark).

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_PIPELINE = PROJECT_ROOT / "include" / "pipelines" / "clicks_per_minute.yaml"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replay",
        description="Replay archived event logs through Spark with Apache Flink's window semantics "
        "(watermarks, triggers, allowed lateness), keeping state and results in Delta tables.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `replay COMMAND --help` for each command's options.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    gen = commands.add_parser(
        "generate", help="write a deterministic sample archive",
        description="Write a realistic sample archive (clickstream or sensor events with Zipf keys, "
        "skewed partitions, one idle partition, out-of-order and very late records, duplicates and "
        "corrupt lines), byte-identical for the same seed.",
    )
    gen.add_argument("out", help="directory to write the archive into")
    gen.add_argument("--events", type=int, default=20_000, help="lines to write (default 20000)")
    gen.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    gen.add_argument("--kind", choices=["clickstream", "sensor"], default="clickstream")
    gen.add_argument("--format", choices=list(SAMPLE_FORMATS), default="jsonl")
    gen.add_argument("--partitions", type=int, default=4)
    gen.add_argument("--keys", type=int, default=1000, help="distinct keys (Zipf-distributed)")
    gen.add_argument("--events-per-second", type=float, default=None,
                     help="event rate; sets the archive's time span")
    gen.add_argument("--corrupt-fraction", type=float, default=None)
    gen.add_argument("--late-fraction", type=float, default=None)

    for name, text in (
        ("validate", "check a pipeline config without running anything"),
        ("run", "replay what has not been replayed yet, then stop"),
        ("status", "show what has been replayed: batches, watermark, table versions"),
    ):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument("pipeline", help="pipeline config (YAML)")
        if name == "run":
            sub.add_argument("--batch-size", type=int, default=None,
                             help="records per micro-batch (default: the config's batch.max_records)")
            sub.add_argument("--finalize", action="store_true",
                             help="end of input: take the watermark and clock to +infinity, firing "
                             "every pending window")
            sub.add_argument("--master", default=None,
                             help="Spark master URL (default: $SPARK_MASTER or local[*])")
            sub.add_argument("--remote", default=None,
                             help="Spark Connect server to run on, e.g. sc://localhost:15002 "
                             "(default: $SPARK_REMOTE; unset: Spark in this process); see "
                             "`replay server start`")
            sub.add_argument("--quiet", action="store_true", help="no per-batch progress lines")
            sub.add_argument("--until", default=None,
                             help="replay only batches whose replay clock is before this time "
                             "(ISO-8601 with zone or epoch ms), e.g. an Airflow data interval's end")

    reset = commands.add_parser(
        "reset", help="delete every table of a pipeline (asks for --yes)",
        description="Delete all of a pipeline's Delta tables (results, state, logs, quarantine), so "
        "the next run replays the archive from the beginning.",
    )
    reset.add_argument("pipeline", help="pipeline config (YAML)")
    reset.add_argument("--yes", action="store_true", help="really delete (required)")

    reprocess = commands.add_parser(
        "reprocess", help="rewind a time range and replay it again",
        description="Bring state and outputs back to just before the first batch holding a record "
        "with event time in [FROM, TO) (Delta RESTORE to the versions in the replay log), then "
        "replay forward. The result equals a clean replay.",
    )
    reprocess.add_argument("pipeline", help="pipeline config (YAML)")
    reprocess.add_argument("--from", dest="start", required=True,
                           help="start of the range: ISO-8601 with zone, or epoch ms")
    reprocess.add_argument("--to", dest="end", required=True, help="end of the range (exclusive)")
    reprocess.add_argument("--reason", required=True, help="why (recorded in reprocess_history)")

    pools = commands.add_parser(
        "pools", help="create each pipeline's one-slot Airflow pool (runs of a pipeline queue)",
        description="Create, in Airflow's metadata database ($AIRFLOW_HOME, as `airflow pools set` "
        "does), the one-slot pool `replay__<name>` of every pipeline config in the directory: every "
        "Airflow task that changes a pipeline's tables runs in it, so runs of one pipeline (scheduled, "
        "backfill, reprocess) queue instead of overlapping. Idempotent.",
    )
    pools.add_argument("directory", nargs="?", default=None,
                       help="pipeline configs (default: $REPLAY_PIPELINES_DIR or include/pipelines)")

    server = commands.add_parser(
        "server", help="start, stop or check the Spark Connect server (Delta loaded)",
        description="A long-lived Spark Connect server with Delta's and the project's jars, detached, "
        "its pid, address and log under a state directory. It binds 127.0.0.1 unless --host says "
        "otherwise; any other address needs SPARK_CONNECT_AUTHENTICATE_TOKEN in the environment, "
        "which the server then requires of every client (see docs/spark-connect.md).",
    )
    server.add_argument("action", choices=["start", "stop", "status", "run"],
                        help="run: the server in the foreground, for a container or a service "
                        "manager (no state directory; stop it with a signal)")
    server.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    server.add_argument("--port", type=int, default=None, help="port (default 15002)")
    server.add_argument("--dir", default=None,
                        help="state directory: pid, address, log (default $REPLAY_CONNECT_DIR or "
                        ".cache/connect)")
    server.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait: for start, until it answers (180); for stop, before "
                        "SIGKILL (30)")
    server.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the server's (start, run; repeatable), after the "
                        "replay's own: e.g. spark.cores.max=1 on a cluster the server shares")

    from ..quality import cli as quality_cli

    COMMANDS.update(quality_cli.register(commands))

    demo = commands.add_parser(
        "demo", help="generate a sample archive, replay it and print a summary",
        description="Generate the sample clickstream archive, replay it through "
        f"{DEMO_PIPELINE.relative_to(PROJECT_ROOT)} and print what came out.",
    )
    demo.add_argument("--events", type=int, default=20_000)
    demo.add_argument("--fresh", action="store_true", help="delete earlier demo output first")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ReplayError as error:
        status, message = exit_status(error)
        print(message, file=sys.stderr)
        return status


def cmd_generate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..samples.generator import DEMO_SPEC, generate_archive

    overrides: dict[str, Any] = {
        "events": args.events, "seed": args.seed, "kind": args.kind, "format": args.format,
        "partitions": args.partitions, "keys": args.keys,
    }
    for name in ("events_per_second", "corrupt_fraction", "late_fraction"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = value
    for name, value in overrides.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            raise ConfigError(name.replace("_", "-"), "must not be negative")
    spec = replace(DEMO_SPEC, **overrides)  # defaults: the demo archive the demo config expects
    summary = generate_archive(args.out, spec)
    print(
        f"wrote {summary.events} lines ({summary.duplicates} duplicates, {summary.corrupt} corrupt, "
        f"{summary.late} very late) in {len(summary.files)} files under {summary.path} "
        f"in {summary.seconds:.1f}s"
    )
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from ..config import load_config

    config = load_config(args.pipeline)
    print(f"{args.pipeline}: ok")
    print(f"  pipeline   {config.name}")
    print(f"  source     {config.source.path} ({config.source.format})")
    print(f"  key        {', '.join(config.key)}")
    print(f"  window     {config.window.to_dict()}")
    print(f"  trigger    {config.trigger.to_dict()}")
    print(f"  watermark  out-of-orderness {config.watermark.max_out_of_orderness} ms, "
          f"emit {config.watermark.emit_spec}")
    print(f"  output     {config.output_path}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ..execution.operations import run_command
    from ..execution.passes import format_summary

    summary = run_command(
        args.pipeline, batch_size=args.batch_size, finalize=args.finalize, master=args.master,
        quiet=args.quiet, until=args.until, remote=args.remote,
    )
    print(format_summary(summary))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from ..config import load_config
    from .status import pipeline_status

    config = load_config(args.pipeline)
    print(pipeline_status(config))
    return 0


def cmd_pools(args: argparse.Namespace) -> int:
    from .orchestration import discover_pipelines, ensure_pools

    for line in ensure_pools(discover_pipelines(args.directory)):
        print(line)
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..execution.operations import reset

    config = load_config(args.pipeline)
    if not args.yes:
        raise ConfigError("--yes", f"reset deletes every table under {config.output_path}; "
                          "add --yes to confirm")
    dropped = reset(config)
    print(f"reset {config.name}: deleted {', '.join(dropped) if dropped else 'nothing (no tables)'}")
    return 0


def cmd_reprocess(args: argparse.Namespace) -> int:
    from ..config import load_config, parse_instant
    from ..execution.operations import reprocess
    from ..execution.passes import format_summary

    config = load_config(args.pipeline)
    start, end = parse_instant(args.start, "--from"), parse_instant(args.end, "--to")
    if start >= end:
        raise ConfigError("--to", "must be after --from")
    if not args.reason.strip():
        raise ConfigError("--reason", "must not be empty")
    outcome = reprocess(config, start, end, args.reason)
    if outcome.summary.batches or outcome.reprocessed:
        print(format_summary(outcome.summary))
    if outcome.message:
        print(f"reprocess {config.name}: {outcome.message}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import shutil

    from ..config import load_config
    from ..execution.operations import run_pipeline
    from ..execution.passes import format_summary
    from ..execution.spark_session import get_spark
    from ..samples.generator import DEMO_SPEC, generate_archive

    config = load_config(DEMO_PIPELINE)
    archive = Path(config.source.path)
    if args.fresh:
        shutil.rmtree(archive, ignore_errors=True)
        shutil.rmtree(config.output_path, ignore_errors=True)
    if not archive.exists():
        from dataclasses import replace

        generated = generate_archive(archive, replace(DEMO_SPEC, events=args.events))
        print(f"generated {generated.events} events in {len(generated.files)} files under {archive}")
    spark = get_spark(f"replay-{config.name}")
    summary = run_pipeline(config, spark=spark, finalize=True)
    print(format_summary(summary))
    from ..quality.report import write_report
    from ..quality.validate import validate_pipeline
    from .status import pane_examples

    print(pane_examples(spark, config))
    result = validate_pipeline(config, spark=spark)
    report = write_report(config, spark=spark, result=result)
    passed = sum(outcome.success for outcome in result.outcomes)
    print(f"data quality: {passed}/{len(result.outcomes)} expectations passed; "
          f"report: {report}")
    return 0 if result.success else 1


def cmd_server(args: argparse.Namespace) -> int:
    from ..execution import connect_server as server

    host = args.host or server.DEFAULT_HOST
    port = server.DEFAULT_PORT if args.port is None else args.port
    conf = {}
    for setting in args.conf:
        key, equals, value = setting.partition("=")
        if not equals or not key.strip():
            raise ConfigError("--conf", f"expected KEY=VALUE, got {setting!r}")
        conf[key.strip()] = value
    if conf and args.action not in ("start", "run"):
        raise ConfigError("--conf", f"only for start and run; {args.action} reads the state directory")
    if args.action == "run":
        server.run_server_in_foreground(host, port, conf)  # replaces this process
    if args.action == "start":
        state, started = server.start_server(host, port, args.dir, timeout=args.timeout or 180.0,
                                             conf=conf)
        if not started:
            print(f"already running: {state.describe()}")
            return 0
        print(f"started: {state.describe()}")
        print(f"clients: SPARK_REMOTE={state.url}")
        if not server.is_loopback(state.host):
            print("note: PySpark sends the token only over TLS or to the host `localhost`, and the "
                  "server has no TLS: clients on other machines need a TLS proxy or an SSH tunnel "
                  "(docs/spark-connect.md)")
        return 0
    if args.host is not None or args.port is not None:
        raise ConfigError("--host/--port", f"only for start and run; {args.action} reads the state directory")
    if args.action == "stop":
        stopped = server.stop_server(args.dir, timeout=args.timeout or 30.0)
        print(f"stopped the Spark Connect server at {stopped.url} (pid {stopped.pid})" if stopped
              else "Spark Connect server not running")
        return 0
    state = server.server_status(args.dir)
    print(state.describe())
    return 0 if state.running else 3


COMMANDS = {
    "generate": cmd_generate,
    "validate": cmd_validate,
    "run": cmd_run,
    "status": cmd_status,
    "demo": cmd_demo,
    "reset": cmd_reset,
    "reprocess": cmd_reprocess,
    "pools": cmd_pools,
    "server": cmd_server,
}


if __name__ == "__main__":
    raise SystemExit(main())
