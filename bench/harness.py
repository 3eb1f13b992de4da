"""Benchmarks: this product's replay against plain Spark and Spark Structured Streaming.

``python -m bench.harness`` (``make bench``) generates archives with the project's generator
(fixed seed), then measures, each in a fresh process (its own JVM) while this process samples the
memory of the whole process tree (driver Python, JVM, Python workers) from ``/proc``:

* ``replay``: ``run_pipeline`` (with ``--finalize``) on the scenarios in ``bench/pipelines/``
  (``tumbling``: 1 min + continuous 10 s trigger + 5 s out-of-orderness + 30 s lateness;
  ``sliding``: 1 min every 10 s; ``session``: 30 s gap per user) at several batch sizes;
* ``batch``: the lower bound, a plain Spark job computing the final per-window aggregates of the
  same archive into Delta (no triggers, no lateness);
* ``sss``: Spark Structured Streaming over the same records split, in replay order, into as many
  files as the replay has batches, read with ``maxFilesPerTrigger=1`` and
  ``Trigger.AvailableNow``: ``withWatermark`` (out-of-orderness + allowed lateness, so state lives
  as long as the replay's), the windowed aggregation in update mode, ``foreachBatch`` MERGE into
  Delta; the same number of micro-batches as the replay;
* ``flat``: hundreds of small replay batches (and the same count of SSS micro-batches): per-batch
  time against batch number and against the open-window state (``operator_state`` rows).

* ``flink``: Apache Flink's own Java ``WindowOperator`` on the same records, each scenario
  (``bench/flink``: a DataStream job with the scenario's window assigner and trigger, allowed
  lateness and a late side output, reading the archive as one file in replay order), when Maven
  and Java are on the PATH: the job and its jars are built and resolved from Maven Central into
  ``.cache/m2`` on first use.

Results go to
``bench/results/<run>/results.json`` (plus ``summary.md`` and ``bench.png``); ``--plot`` also
writes the committed plot. ``--quick`` is the smoke size (2k events, one scenario).

Replay runs are instrumented without touching the engine: Spark accumulators time the per-key
function (``make_cogroup_function``'s ``run``) and the pure operator (``process_keys_columns``) on the
workers, ``DeltaStore`` calls are timed on the driver, ``REPLAY_PROFILE`` step times are parsed,
and ``--profile`` adds Spark event logs (job time per batch), cProfile of the per-key function
on the workers and, when ``py-spy`` is on the path (or ``PY_SPY``), a py-spy sampling profile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PIPELINES = PROJECT_ROOT / "bench" / "pipelines"
RESULTS = PROJECT_ROOT / "bench" / "results"
PLOT_PATH = PROJECT_ROOT / "docs" / "bench" / "bench.png"
FLINK_PROJECT = PROJECT_ROOT / "bench" / "flink"
MAVEN_REPOSITORY = PROJECT_ROOT / ".cache" / "m2"  # Flink's jars: resolved once, never committed
FLINK_PARALLELISM = 2  # the windows' parallelism: one subtask per core
SEED = 42
SCENARIOS = ("tumbling", "sliding", "session")
# The archive's clickstream fields; corrupt lines parse to nulls and are filtered out.
ARCHIVE_SCHEMA = (
    "event_id STRING, user_id STRING, ts LONG, ingest_ts LONG, `partition` INT, `offset` LONG, "
    "page STRING, value DOUBLE"
)
OUT_OF_ORDERNESS_S = 5
ALLOWED_LATENESS_S = 30
# Bumped when split_archive's output changes, so that cached splits are rebuilt (2: ties in ingest
# time go by partition, as in the replay, not by offset).
_SPLIT_VERSION = 2
_STEPS = re.compile(r"^\s*steps: (.*)$")
_INGEST_TS = re.compile(rb'"ingest_ts": (\d+)')
_OFFSET = re.compile(rb'"offset": (\d+)')


# ---- archives -------------------------------------------------------------------------------------
def prepare_archive(root: Path, events: int, seed: int, fmt: str) -> dict[str, Any]:
    """Generate (once: cached by spec) the archive of ``events`` events."""
    from spark_jobs.samples.generator import GeneratorSpec, generate_archive

    path = root / "archives" / f"clicks-{events}-s{seed}-{fmt.replace('.', '')}"
    marker = path / "_generated.json"
    if marker.exists():
        return json.loads(marker.read_text())
    if path.exists():
        shutil.rmtree(path)
    summary = generate_archive(path / "data", GeneratorSpec(events=events, seed=seed, format=fmt))
    info = {
        "path": str(path / "data"),
        "events": summary.events,
        "duplicates": summary.duplicates,
        "corrupt": summary.corrupt,
        "late": summary.late,
        "files": len(summary.files),
        "bytes": sum(os.path.getsize(f) for f in summary.files),
        "generate_seconds": round(summary.seconds, 2),
        "format": fmt,
        "seed": seed,
    }
    marker.write_text(json.dumps(info))
    return info


def split_archive(archive: dict[str, Any], parts: int) -> str:
    """The archive's lines in replay order (ingest time, partition, offset), cut into ``parts``
    files of equal line counts whose modification times follow that order: one file per
    Structured Streaming micro-batch with ``maxFilesPerTrigger=1``. Cached."""
    root = Path(archive["path"]).parent
    out = root / f"split-{parts}"
    marker = out / "_split.json"
    if marker.exists() and json.loads(marker.read_text()).get("version") == _SPLIT_VERSION:
        return str(out / "files")
    if out.exists():
        shutil.rmtree(out)
    files_dir = out / "files"
    files_dir.mkdir(parents=True)
    if archive["format"] == "parquet":
        _split_parquet(archive, parts, files_dir)
    else:
        _split_jsonl(archive, parts, files_dir)
    marker.write_text(json.dumps({"parts": parts, "version": _SPLIT_VERSION}))
    return str(files_dir)


def _partition_lines(directory: Path):
    """One partition's lines (offset order across its files) with their replay-order keys."""
    import gzip

    previous = (0, 0)
    for file in sorted(directory.iterdir()):
        opener = gzip.open if file.name.endswith(".gz") else open
        with opener(file, "rb") as handle:
            for line in handle:
                ingest, offset = _INGEST_TS.search(line), _OFFSET.search(line)
                if ingest and offset:
                    previous = (int(ingest.group(1)), int(offset.group(1)))
                # A corrupt line without them stays next to its neighbour in offset order.
                yield previous, line if line.endswith(b"\n") else line + b"\n"


def _replay_keyed(partition: int, lines: Any) -> Any:
    """``(ingest time, partition, offset), line``: the replay's sort key. (A function, not a
    generator expression in a comprehension, which would read the loop's last partition lazily.)"""
    for (ingest, offset), line in lines:
        yield (ingest, partition, offset), line


def _split_jsonl(archive: dict[str, Any], parts: int, files_dir: Path) -> None:
    import heapq

    partitions = sorted(p for p in Path(archive["path"]).iterdir() if p.is_dir())
    streams = [_replay_keyed(number, _partition_lines(p)) for number, p in enumerate(partitions)]
    per_file = -(-archive["events"] // parts)
    merged = heapq.merge(*streams, key=lambda item: item[0])
    base = time.time() - parts - 10
    for index in range(parts):
        target = files_dir / f"batch-{index:06d}.jsonl"
        with open(target, "wb") as handle:
            for _ in range(per_file):
                item = next(merged, None)
                if item is None:
                    break
                handle.write(item[1])
        os.utime(target, (base + index, base + index))


def _split_parquet(archive: dict[str, Any], parts: int, files_dir: Path) -> None:
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    table = ds.dataset(archive["path"], format="parquet").to_table()
    table = table.sort_by([("ingest_ts", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    per_file = -(-table.num_rows // parts)
    base = time.time() - parts - 10
    for index in range(parts):
        target = files_dir / f"batch-{index:06d}.parquet"
        pq.write_table(table.slice(index * per_file, per_file), target)
        os.utime(target, (base + index, base + index))


# ---- process-tree memory sampling -----------------------------------------------------------------
class TreeSampler(threading.Thread):
    """Samples RSS (every ``interval`` s) and PSS (every 5th sample) of a process and all its
    descendants: the driver Python, the JVM, the PySpark daemon and its workers. Also totals the
    tree's CPU time and the machine's, so interference from other processes can be reported."""

    def __init__(self, pid: int, interval: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.stop_event = threading.Event()
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_parts: dict[str, int] = {}
        self.series: list[tuple[float, int]] = []
        self.cpu: dict[int, float] = {}
        self.started = time.time()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        count = 0
        while not self.stop_event.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            total, pss, parts = 0, 0, {"driver_python": 0, "jvm": 0, "python_workers": 0}
            with_pss = count % 5 == 0
            names: dict[int, str] = {}
            for proc in procs:
                try:
                    with proc.oneshot():
                        name, parent = proc.name(), proc.ppid()
                        names[proc.pid] = name
                        times = proc.cpu_times()
                        # The JVM forks short-lived helpers (Hadoop's chmod, jspawnhelper) that
                        # share its pages until they exec: not counted, or the JVM counts twice.
                        if proc.pid == self.pid:
                            part = "driver_python"
                        elif "java" in name and "java" not in names.get(parent, ""):
                            part = "jvm"
                        elif "python" in name:
                            part = "python_workers"
                        else:
                            continue
                        rss = proc.memory_info().rss
                        if with_pss:
                            pss += proc.memory_full_info().pss
                except psutil.Error:
                    continue
                self.cpu[proc.pid] = times.user + times.system
                total += rss
                parts[part] += rss
            if total > self.peak_rss:
                self.peak_rss, self.peak_parts = total, parts
            self.peak_pss = max(self.peak_pss, pss)
            if count % 5 == 0:
                self.series.append((round(time.time() - self.started, 1), total))
            count += 1
            self.stop_event.wait(self.interval)

    def finish(self) -> dict[str, Any]:
        self.stop_event.set()
        self.join(timeout=5)
        return {
            "peak_rss_bytes": self.peak_rss,
            "peak_pss_bytes": self.peak_pss,
            "peak_rss_parts": self.peak_parts,
            "tree_cpu_seconds": round(sum(self.cpu.values()), 1),
            "rss_series": self.series,
        }


def run_measurement(
    specs: list[dict[str, Any]], workdir: Path, timeout: float, py_spy: str | None = None
) -> list[dict[str, Any]]:
    """Run measurements in one fresh ``python -m bench.harness _worker`` process (normally one;
    ``--quick`` runs its few tiny ones in one process to start a single JVM) while sampling the
    process tree's memory and CPU."""
    import psutil

    workdir.mkdir(parents=True, exist_ok=True)
    specs = [{**spec, "workdir": str(workdir / f"m{i}")} for i, spec in enumerate(specs)]
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps({"result_path": str(workdir / "result.json"), "specs": specs}))
    command = [sys.executable, "-m", "bench.harness", "_worker", str(spec_path)]
    flink = specs[0]["kind"] == "flink"
    if flink:  # the Flink job is its own process: only its JVM is sampled
        [spec] = specs
        command = flink_command(spec)
    if py_spy:
        command = [py_spy, "record", "--subprocesses", "--rate", "50", "--format", "raw",
                   "--output", str(workdir / "py-spy.txt"), "--", *command]
    env = {**os.environ, "REPLAY_PROFILE": "1", "PYTHONUNBUFFERED": "1"}
    env.setdefault("SPARK_MASTER", "local[2]")
    load_before = os.getloadavg()
    cpu_before = psutil.cpu_times()
    started = time.time()
    with open(workdir / "worker.log", "w") as log:
        proc = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    memory = sampler.finish()
    elapsed = time.time() - started
    cpu_after = psutil.cpu_times()
    busy = sum(
        getattr(cpu_after, f) - getattr(cpu_before, f)
        for f in ("user", "system", "nice", "irq", "softirq", "steal")
        if hasattr(cpu_after, f)
    )
    result_path = workdir / "result.json"
    if flink and code == 0:
        result_path.write_text(json.dumps([flink_result(spec)]))
    if code == 0 and result_path.exists():
        results = [{**r, "ok": True} for r in json.loads(result_path.read_text())]
    else:
        tail = (workdir / "worker.log").read_text(errors="replace")[-3000:]
        results = [{"kind": spec["kind"], "scenario": spec.get("scenario"), "events": spec["events"],
                    "batch_size": spec.get("batch_size"), "label": spec.get("label"), "ok": False,
                    "error": f"exit code {code}: {tail}"} for spec in specs]
        if len(specs) == 1 and specs[0]["kind"] == "replay":
            with contextlib.suppress(Exception):  # a stopped replay: its batches so far
                results[0].update(salvage_measurement(Path(specs[0]["workdir"])))
    for result in results:
        result.update(memory)
        if flink:  # the whole JVM's, its start included: the job does not measure its own
            result["cpu_seconds"] = memory["tree_cpu_seconds"]
        result["shared_process"] = len(specs) > 1
        result["process_seconds"] = round(elapsed, 2)
        result["load_avg_before"] = [round(x, 2) for x in load_before]
        result["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        # CPU-seconds the machine spent on other processes meanwhile (other engineers' tests).
        result["foreign_cpu_seconds"] = round(max(0.0, busy - memory["tree_cpu_seconds"]), 1)
    return results


# ---- workers (run in the measured process) --------------------------------------------------------
def worker(spec_path: str) -> int:
    job = json.loads(Path(spec_path).read_text())
    specs = job["specs"]
    conf: dict[str, Any] = {"spark.sql.streaming.numRecentProgressUpdates": 100_000}
    if any(spec.get("event_log") for spec in specs):
        log_dir = Path(specs[0]["workdir"]) / "eventlog"
        log_dir.mkdir(parents=True, exist_ok=True)
        conf.update({
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(log_dir),
            "spark.eventLog.compress": "false",
        })
    from spark_jobs.execution.spark_session import get_spark

    started = time.time()
    spark = get_spark(f"bench-{specs[0]['kind']}", conf=conf)
    session_seconds = time.time() - started
    results = []
    for spec in specs:
        workdir = Path(spec["workdir"])
        out = workdir / "out"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        run = {"replay": _replay_worker, "batch": _batch_worker, "sss": _sss_worker}[spec["kind"]]
        cpu_before = _tree_cpu()
        result = run(spark, spec, out)
        # CPU-seconds of the process tree during the measurement: unlike wall time, barely
        # inflated when other processes compete for the cores.
        result["cpu_seconds"] = round(_tree_cpu(cpu_before) - sum(cpu_before.values()), 2)
        result.update({
            "kind": spec["kind"],
            "scenario": spec["scenario"],
            "events": spec["events"],
            "session_start_seconds": round(session_seconds, 2),
            "delta": delta_file_counts(out),
            "label": spec.get("label"),
            "batch_size": spec.get("batch_size"),
        })
        result["events_per_second"] = round(spec["events"] / result["wall_seconds"], 1)
        if spec.get("event_log") and result.get("batch_windows"):
            result["event_log"] = event_log_profile(Path(specs[0]["workdir"]) / "eventlog",
                                                    result["batch_windows"])
        if not spec.get("keep_output"):
            shutil.rmtree(out, ignore_errors=True)
        results.append(result)
        Path(job["result_path"]).write_text(json.dumps(results))
    spark.stop()
    return 0


def _tree_cpu(before: dict[int, float] | None = None) -> Any:
    """CPU time (user + system) of this process and its descendants, per pid; with ``before``,
    the total, counting processes that are gone since ``before`` at their last value."""
    import psutil

    me = psutil.Process()
    seen: dict[int, float] = {}
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            seen[proc.pid] = times.user + times.system
    if before is None:
        return seen
    return sum({**before, **seen}.values())


def _scenario_config(spec: dict[str, Any], out: Path, batch_size: int):
    import yaml

    from spark_jobs.config import parse_config

    data = yaml.safe_load((PIPELINES / f"{spec['scenario']}.yaml").read_text())
    data["source"]["path"] = spec["archive"]
    data["source"]["format"] = "parquet" if spec["format"] == "parquet" else "jsonl"
    data["output"] = {**data.get("output", {}), "path": str(out / "lakehouse")}
    data["batch"] = {"max_records": batch_size}
    if spec.get("pass_max_records"):
        data["batch"]["pass_max_records"] = spec["pass_max_records"]
    return parse_config(data, source=f"bench:{spec['scenario']}")


class _Instruments:
    """Timing of the engine's pieces without editing it: accumulators around the per-key function
    (on the Python workers) and wrappers around ``DeltaStore``'s methods (on the driver)."""

    DELTA_METHODS = ("append_rows", "overwrite_rows", "replace_rows", "merge_latest_panes", "replace_where",
                     "read", "version", "exists", "optimize", "vacuum")

    def __init__(self, spark: Any, cprofile_dir: str | None):
        from spark_jobs.core.engine import keyed
        from spark_jobs.execution import pass_compute, spark_batch
        from spark_jobs.execution.state import delta

        context = spark.sparkContext
        self.acc = {name: context.accumulator(0.0) for name in ("udf_s", "operator_s", "keys", "records")}
        self.delta_seconds: dict[str, float] = {}
        self.delta_calls: dict[str, int] = {}
        self.lock = threading.Lock()
        acc = self.acc
        if not _ORIGINALS:  # patch the engine's originals once per process, however many runs
            _ORIGINALS.update({name: getattr(delta.DeltaStore, name) for name in self.DELTA_METHODS})
            _ORIGINALS["process_keys_columns"] = keyed.process_keys_columns
            _ORIGINALS["make"] = spark_batch.make_cogroup_function
        original_process_keys = _ORIGINALS["process_keys_columns"]
        original_make = _ORIGINALS["make"]

        def timed_process_keys(*args: Any, **kwargs: Any) -> Any:
            mark = time.process_time()
            try:
                return original_process_keys(*args, **kwargs)
            finally:
                acc["operator_s"].add(time.process_time() - mark)

        def timed_make(config: Any, spec: Any, timeline: Any, batches: Any = None) -> Any:
            inner = original_make(config, spec, timeline, batches)

            def many(groups: list[Any]) -> Any:
                mark = time.process_time()
                if cprofile_dir:
                    out = _profiled_call(cprofile_dir, inner.many, groups)
                else:
                    out = inner.many(groups)
                acc["udf_s"].add(time.process_time() - mark)
                acc["keys"].add(len(groups))
                acc["records"].add(sum(records.num_rows for _, records, _ in groups))
                return out

            def run(key: Any, records: Any, state: Any) -> Any:
                return many([(key, records, state)])

            run.many = many  # as the engine's own: a driver pass hands a share's keys over at once
            return run

        # ``run`` (pickled by value) looks ``process_keys_columns`` up in spark_batch's globals.
        spark_batch.process_keys_columns = timed_process_keys
        pass_compute.make_cogroup_function = timed_make  # where compute_pass looks it up
        for name in self.DELTA_METHODS:
            setattr(delta.DeltaStore, name, self._timed(name, _ORIGINALS[name]))

    def _timed(self, name: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                # Per table where the method names one (its first string argument): a pass's
                # writes run side by side, and which of them is longest is what matters.
                table = next((a for a in args[1:3] if isinstance(a, str)), None)
                key = f"{name} {table}" if table else name
                with self.lock:
                    self.delta_seconds[key] = self.delta_seconds.get(key, 0.0) + time.perf_counter() - mark
                    self.delta_calls[key] = self.delta_calls.get(key, 0) + 1

        return wrapper

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                **{name: acc.value for name, acc in self.acc.items()},
                "delta": dict(self.delta_seconds),
                "delta_calls": dict(self.delta_calls),
            }


_ORIGINALS: dict[str, Any] = {}
_WORKER_PROFILE: dict[str, Any] = {}


def _profiled_call(directory: str, function: Any, *args: Any) -> Any:
    """cProfile one per-key call on a Python worker; stats accumulate per worker process and are
    dumped at most every 2 s (``<dir>/<pid>.prof``)."""
    import cProfile

    profiler = _WORKER_PROFILE.get("profiler")
    if profiler is None:
        profiler = _WORKER_PROFILE["profiler"] = cProfile.Profile()
        _WORKER_PROFILE["dumped"] = 0.0
    profiler.enable()
    try:
        return function(*args)
    finally:
        profiler.disable()
        if time.time() - _WORKER_PROFILE["dumped"] > 2.0:
            profiler.dump_stats(os.path.join(directory, f"{os.getpid()}.prof"))
            _WORKER_PROFILE["dumped"] = time.time()


def _replay_worker(spark: Any, spec: dict[str, Any], out: Path) -> dict[str, Any]:
    from spark_jobs.execution.operations import run_pipeline

    batch_size = spec["batch_size"]
    config = _scenario_config(spec, out, batch_size)
    cprofile_dir = None
    if spec.get("cprofile"):
        cprofile_dir = str(Path(spec["workdir"]) / "cprofile")
        os.makedirs(cprofile_dir, exist_ok=True)
    instruments = _Instruments(spark, cprofile_dir)
    steps: list[dict[str, float]] = []
    marks: list[dict[str, Any]] = []
    lines: list[str] = []
    previous = instruments.snapshot()
    cpu_mark = [_tree_cpu()]

    def progress(message: str) -> None:
        nonlocal previous
        lines.append(message)
        print(message, flush=True)  # worker.log: progress while the measurement runs
        match = _STEPS.match(message)
        if match:
            parts = (item.rsplit(" ", 1) for item in match.group(1).split(", "))
            steps.append({name: float(value.rstrip("s")) for name, value in parts})
        elif "] ingested " in message:
            previous = instruments.snapshot()  # batch figures exclude the ingest's writes
            cpu_mark[0] = _tree_cpu()
        elif "] pass " in message:
            now = instruments.snapshot()
            cpu = _tree_cpu(cpu_mark[0])
            marks.append({"end": time.time(), "cpu": cpu - sum(cpu_mark[0].values()),
                          **_difference(now, previous)})
            cpu_mark[0] = _tree_cpu()
            previous = now
            with open(Path(spec["workdir"]) / "batches.jsonl", "a") as log:  # for salvage()
                log.write(json.dumps({**marks[-1], "steps": steps[-1] if steps else {}}) + "\n")

    started = time.time()
    summary = run_pipeline(config, spark, batch_size=batch_size, finalize=True, progress=progress)
    wall = time.time() - started
    batch_seconds = sum(b.seconds for b in summary.batches)
    state_rows = _commit_rows(out / "lakehouse" / "operator_state")
    result_rows = _commit_rows(out / "lakehouse" / "window_results")
    per_batch = []
    windows = []
    by_id = {batch.batch_id: batch for batch in summary.batches}
    # One entry per Spark pass (a pass runs and commits one or more micro-batches).
    for index, run in enumerate(summary.passes):
        mark = marks[index] if index < len(marks) else {}
        batches = [by_id[i] for i in range(run.first_batch, run.last_batch + 1)]
        entry = {
            "batch": index,
            "batch_id": run.last_batch,
            "batches_in_pass": len(batches),
            "records": run.records,
            "seconds": round(run.seconds, 4),
            "panes": sum(sum(b.panes.values()) for b in batches),
            "late": sum(b.late for b in batches),
            "state_rows": state_rows.get(run.last_batch),
            "result_rows": result_rows.get(run.last_batch, 0),
            "steps": steps[index] if index < len(steps) else {},
            # CPU-seconds of the whole process tree (driver, JVM, Python workers) in the pass
            "cpu_seconds": round(mark["cpu"], 3) if "cpu" in mark else None,
            "udf_cpu_seconds": round(mark.get("udf_s", 0.0), 4),
            "operator_cpu_seconds": round(mark.get("operator_s", 0.0), 4),
            "keys": int(mark.get("keys", 0)),
            "delta_seconds": {k: round(v, 4) for k, v in mark.get("delta", {}).items()},
        }
        per_batch.append(entry)
        if "end" in mark:
            windows.append([mark["end"] - run.seconds, mark["end"]])
    totals = instruments.snapshot()
    return {
        "batch_size": batch_size,
        "batches": len(summary.batches),
        "passes": len(summary.passes),
        "pass_max_records": config.pass_max_records,
        "wall_seconds": round(wall, 3),
        "batch_seconds": round(batch_seconds, 3),
        "ingest_seconds": round(wall - batch_seconds, 3),
        "records_accepted": summary.records_accepted,
        "records_quarantined": summary.records_quarantined,
        "panes": summary.panes,
        "late": summary.late,
        "per_batch": per_batch,
        "batch_windows": windows,
        "udf_cpu_seconds": round(totals["udf_s"], 3),
        "operator_cpu_seconds": round(totals["operator_s"], 3),
        "udf_calls": int(totals["keys"]),
        "delta_seconds": {k: round(v, 3) for k, v in totals["delta"].items()},
        "delta_calls": totals["delta_calls"],
        "progress_tail": lines[-3:],
    }


def _difference(now: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    diff = {k: now[k] - before.get(k, 0.0) for k in ("udf_s", "operator_s", "keys", "records")}
    diff["delta"] = {k: v - before["delta"].get(k, 0.0) for k, v in now["delta"].items()}
    return diff


def _commit_rows(table: Path) -> dict[int, int]:
    """Rows written per batch (``userMetadata: batch=N``) from a Delta table's commit metadata;
    for ``operator_state`` (overwritten each batch) that is the open-window state after batch N."""
    rows: dict[int, int] = {}
    log = table / "_delta_log"
    if not log.exists():
        return rows
    for file in sorted(log.glob("*.json")):
        for line in file.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if not info:
                continue
            meta = info.get("userMetadata") or ""
            if meta.startswith("batch=") and info.get("operation") == "WRITE":
                written = int(info.get("operationMetrics", {}).get("numOutputRows", 0))
                batch_id = int(meta[6:])
                rows[batch_id] = rows.get(batch_id, 0) + written
    return rows


def delta_file_counts(root: Path) -> dict[str, int]:
    """Files under ``root``: Delta data files, Delta log files (commits, checkpoints, crc) and the
    rest (e.g. a streaming checkpoint), with bytes."""
    counts = {"data_files": 0, "log_files": 0, "other_files": 0, "bytes": 0}
    if not root.exists():
        return counts
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        counts["bytes"] += path.stat().st_size
        parts = path.parts
        if "_delta_log" in parts:
            counts["log_files"] += 1
        elif path.suffix == ".parquet" and not any(p.startswith("_checkpoint") for p in parts):
            counts["data_files"] += 1
        else:
            counts["other_files"] += 1
    return counts


def _read_archive_frame(spark: Any, path: str, fmt: str, streaming: bool = False):
    from pyspark.sql import functions as F

    if streaming:
        reader = spark.readStream.schema(ARCHIVE_SCHEMA).option("maxFilesPerTrigger", 1)
    else:
        reader = spark.read.schema(ARCHIVE_SCHEMA).option("recursiveFileLookup", "true")
    frame = reader.parquet(path) if fmt == "parquet" else reader.json(path)
    return frame.where(F.col("ts").isNotNull() & F.col("page").isNotNull() & F.col("user_id").isNotNull())


def _window_aggregation(frame: Any, scenario: str, exact_distinct: bool):
    """Group ``frame`` (with ``event_time``) like the scenario's pipeline and aggregate."""
    from pyspark.sql import functions as F

    if scenario == "session":
        key, window, distinct = "user_id", F.session_window("event_time", "30 seconds"), "page"
    elif scenario == "sliding":
        key, window, distinct = "page", F.window("event_time", "1 minute", "10 seconds"), "user_id"
    else:
        key, window, distinct = "page", F.window("event_time", "1 minute"), "user_id"
    window_column = "session_window" if scenario == "session" else "window"
    # Streaming aggregations refuse DISTINCT: a set per window (what the replay keeps) instead.
    count_distinct = F.count_distinct(distinct) if exact_distinct else F.size(F.collect_set(distinct))
    return (
        frame.groupBy(key, window)
        .agg(F.count("*").alias("clicks"), F.sum("value").alias("revenue"),
             count_distinct.alias("distinct_" + distinct))
        .select(key, F.col(f"{window_column}.start").alias("window_start"),
                F.col(f"{window_column}.end").alias("window_end"), "clicks", "revenue",
                "distinct_" + distinct)
    ), key


def _batch_worker(spark: Any, spec: dict[str, Any], out: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.time()
    frame = _read_archive_frame(spark, spec["archive"], spec["format"])
    frame = frame.withColumn("event_time", F.timestamp_millis("ts"))
    aggregated, _ = _window_aggregation(frame, spec["scenario"], exact_distinct=True)
    aggregated.write.format("delta").mode("overwrite").save(str(out / "window_final"))
    wall = time.time() - started
    rows = spark.read.format("delta").load(str(out / "window_final")).count()
    return {"wall_seconds": round(wall, 3), "batches": 1, "result_rows": rows}


def _sss_worker(spark: Any, spec: dict[str, Any], out: Path) -> dict[str, Any]:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    table = str(out / "window_latest")
    frame = _read_archive_frame(spark, spec["split"], spec["format"], streaming=True)
    delay = f"{OUT_OF_ORDERNESS_S + ALLOWED_LATENESS_S} seconds"
    frame = frame.withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", delay)
    aggregated, key = _window_aggregation(frame, spec["scenario"], exact_distinct=False)
    batch_seconds: list[float] = []

    def merge(batch: Any, epoch: int) -> None:
        mark = time.time()
        batch = batch.withColumn("batch_id", F.lit(epoch).cast("long"))
        if not DeltaTable.isDeltaTable(batch.sparkSession, table):
            batch.write.format("delta").mode("append").save(table)
        else:
            (
                DeltaTable.forPath(batch.sparkSession, table).alias("t")
                .merge(batch.alias("s"), f"t.{key} = s.{key} AND t.window_start = s.window_start "
                       "AND t.window_end = s.window_end")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )
        batch_seconds.append(time.time() - mark)

    mode = spec.get("output_mode", "update")
    started = time.time()
    query = (
        aggregated.writeStream.outputMode(mode)
        .foreachBatch(merge)
        .option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.time() - started
    per_batch = []
    for index, progress in enumerate(query.recentProgress):
        durations = progress.get("durationMs", {}) if isinstance(progress, dict) else progress.durationMs
        operators = progress["stateOperators"] if isinstance(progress, dict) else progress.stateOperators
        rows = progress["numInputRows"] if isinstance(progress, dict) else progress.numInputRows
        state = sum(op["numRowsTotal"] if isinstance(op, dict) else op.numRowsTotal for op in operators)
        per_batch.append({
            "batch": index,
            "records": rows,
            "seconds": round(durations.get("triggerExecution", 0) / 1000, 4),
            "steps": {k: v / 1000 for k, v in durations.items()},
            "state_rows": state,
        })
    return {
        "wall_seconds": round(wall, 3),
        "batches": len(per_batch),
        "batch_seconds": round(sum(b["seconds"] for b in per_batch), 3),
        "merge_seconds": round(sum(batch_seconds), 3),
        "per_batch": per_batch,
        "output_mode": mode,
    }


# ---- Apache Flink ---------------------------------------------------------------------------------
class FlinkBuildError(RuntimeError):
    """Maven could not build the Flink job (e.g. Maven Central unreachable): that measurement fails,
    the others still run."""


def flink_available() -> bool:
    """Whether the Flink reference can run here: it is built with Maven and runs on Java."""
    return bool(shutil.which("mvn") and shutil.which("java"))


def flink_build_stale(jar: Path, listing: Path, sources: list[Path]) -> bool:
    """Whether the Flink job needs building: its jar or classpath listing is missing or older than
    its sources, or the listing names a jar that is gone (a moved or cleaned Maven cache)."""
    if not (jar.exists() and listing.exists()):
        return True
    if min(jar.stat().st_mtime, listing.stat().st_mtime) < max(p.stat().st_mtime for p in sources):
        return True
    return not all(Path(entry).exists() for entry in listing.read_text().strip().split(os.pathsep) if entry)


def flink_classpath() -> str:
    """The Flink job's classpath: its jar and its dependencies, built and resolved (from Maven
    Central into ``.cache/m2``) when the job's sources are newer than the last build."""
    target = FLINK_PROJECT / "target"
    jar, listing = target / "flink-reference-1.jar", target / "classpath.txt"
    sources = [FLINK_PROJECT / "pom.xml", *(FLINK_PROJECT / "src").rglob("*.java")]
    if flink_build_stale(jar, listing, sources):
        print("[bench] building the Flink reference job (Maven; the first build downloads Flink)", flush=True)
        build = subprocess.run(
            ["mvn", "-q", "-B", f"-Dmaven.repo.local={MAVEN_REPOSITORY}", "package",
             "dependency:build-classpath", f"-Dmdep.outputFile={listing}"],
            cwd=FLINK_PROJECT, capture_output=True, text=True,
        )
        if build.returncode != 0:
            output = build.stdout[-3000:] + build.stderr[-3000:]
            raise FlinkBuildError(f"building bench/flink failed:\n{output}")
        for built_file in (jar, listing):  # Maven leaves files it finds up to date untouched
            built_file.touch()
    return os.pathsep.join([str(jar), listing.read_text().strip()])


def flink_command(spec: dict[str, Any]) -> list[str]:
    """The java command line of the measurement, the scenario's parameters taken from its pipeline
    config (the one the replay runs); its output directory is emptied first (the row counts are of
    every CSV file in it)."""
    from spark_jobs.core.triggers.continuous_event_time import ContinuousEventTimeTrigger
    from spark_jobs.core.triggers.event_time import EventTimeTrigger
    from spark_jobs.core.windows.session import SessionWindows
    from spark_jobs.core.windows.sliding import SlidingWindows
    from spark_jobs.core.windows.tumbling import TumblingWindows

    out = Path(spec["workdir"]) / "out"
    if out.exists():
        shutil.rmtree(out)
    config = _scenario_config(spec, out, batch_size=1)
    window, trigger = config.window, config.trigger
    if isinstance(window, TumblingWindows) and not window.offset:
        window_arg = f"tumbling:{window.size}"
    elif isinstance(window, SlidingWindows) and not window.offset:
        window_arg = f"sliding:{window.size}:{window.slide}"
    elif isinstance(window, SessionWindows):
        window_arg = f"session:{window.gap}"
    else:
        raise ValueError(f"the Flink reference has no counterpart for {window}")
    if isinstance(trigger, ContinuousEventTimeTrigger):
        trigger_arg = f"continuous:{trigger.interval}"
    elif isinstance(trigger, EventTimeTrigger):
        trigger_arg = "event_time"
    else:
        raise ValueError(f"the Flink reference has no counterpart for {trigger}")
    watermark = config.watermark
    if watermark.emit != "per_record":
        raise ValueError("the Flink reference emits a watermark after every record")
    idle = watermark.idle_timeout if watermark.idle_timeout is not None else 2**63 - 1
    [key] = config.key
    [distinct] = [a.column for a in config.aggregates if a.function == "count_distinct"]
    return ["java", "-cp", spec["classpath"], "replay.bench.FlinkReference", spec["split"], str(out),
            str(FLINK_PARALLELISM), window_arg, trigger_arg, str(config.allowed_lateness),
            str(watermark.max_out_of_orderness), str(idle), key, distinct]


def flink_result(spec: dict[str, Any]) -> dict[str, Any]:
    """The Flink job's measurement: its own timing of the job, plus how many panes and late
    records it wrote (one CSV per subtask of each). Flink labels no pane EARLY/ON_TIME/LATE."""
    out = Path(spec["workdir"]) / "out"
    info = json.loads((out / "result.json").read_text())
    panes = sum(len(part.read_text().splitlines()) for part in out.glob("panes.csv-*"))
    late = sum(len(part.read_text().splitlines()) for part in out.glob("late.csv-*"))
    result = {
        "kind": "flink", "scenario": spec["scenario"], "events": spec["events"], "batch_size": None,
        "label": None, "batches": 1, "wall_seconds": info["wall_seconds"],
        "events_per_second": round(spec["events"] / info["wall_seconds"], 1),
        "records_accepted": info["records"], "records_rejected": info["rejected"],
        "panes_total": panes, "late": late, "flink_version": info["flink_version"],
        "delta": delta_file_counts(out),
    }
    shutil.rmtree(out, ignore_errors=True)
    return result


# ---- Spark event logs ---------------------------------------------------------------------------
def event_log_profile(directory: Path, windows: list[list[float]]) -> dict[str, Any]:
    """Per replay batch, from the Spark event log: how long Spark jobs ran (their union: the rest
    of the batch is driver-side work such as Delta log commits, planning and py4j), how many jobs,
    and the executors' task time, split by what started the job."""
    # Spark 4 writes ``eventlog_v2_<app>/events_<n>_<app>`` (rolling) files.
    files = sorted((p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".")),
                   key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
    if not files:
        return {}
    jobs: dict[int, dict[str, Any]] = {}
    stage_job: dict[int, int] = {}
    for line in (line for file in files for line in file.open()):
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            props = event.get("Properties", {}) or {}
            stages = event.get("Stage Infos") or [{}]
            what = (props.get("spark.job.description") or props.get("callSite.short")
                    or stages[-1].get("Stage Name") or "?")
            jobs[event["Job ID"]] = {"start": event["Submission Time"] / 1000, "end": None,
                                     "what": _job_label(what), "task_s": 0.0, "tasks": 0}
            for stage in event.get("Stage IDs", []):
                stage_job[stage] = event["Job ID"]
        elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
            jobs[event["Job ID"]]["end"] = event["Completion Time"] / 1000
        elif kind == "SparkListenerTaskEnd":
            job = jobs.get(stage_job.get(event.get("Stage ID"), -1))
            metrics = event.get("Task Metrics") or {}
            if job is not None:
                job["task_s"] += (metrics.get("Executor Run Time", 0)
                                  + metrics.get("Executor Deserialize Time", 0)) / 1000
                job["tasks"] += 1
    per_batch = []
    for start, end in windows:
        inside = [
            j for j in jobs.values() if j["end"] and j["start"] >= start - 0.05 and j["end"] <= end + 0.05
        ]
        busy = _union([(j["start"], j["end"]) for j in inside])
        by_what: dict[str, float] = {}
        for job in inside:
            by_what[job["what"]] = by_what.get(job["what"], 0.0) + job["end"] - job["start"]
        per_batch.append({
            "seconds": round(end - start, 3),
            "jobs": len(inside),
            "job_wall_seconds": round(busy, 3),
            "driver_only_seconds": round(end - start - busy, 3),
            "task_seconds": round(sum(j["task_s"] for j in inside), 3),
            "tasks": sum(j["tasks"] for j in inside),
            "job_seconds_by_kind": {k: round(v, 3) for k, v in sorted(by_what.items())},
        })
    return {"per_batch": per_batch, "jobs_total": len(jobs)}


def _job_label(text: str) -> str:
    text = text.split("\n")[0]
    if text.startswith("Delta:"):
        return re.sub(r"\d+", "N", text)[:60]
    return re.sub(r" at [^ ]+:\d+$", "", text)[:60]


def _union(intervals: list[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


# ---- the plan ---------------------------------------------------------------------------------------
def default_batch_sizes(events: int, quick: bool) -> list[int]:
    if quick:
        return [max(1, events // 2)]
    if events >= 10_000_000:
        return [1_000_000]
    return sorted({max(1, events // 100), max(1, events // 10), events})


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every measurement to run, in order."""
    items: list[dict[str, Any]] = []
    for events in args.events:
        sizes = sorted(set(args.batch_sizes or default_batch_sizes(events, args.quick)))
        # Tumbling at every batch size; the other scenarios at every size asked for, and by
        # default at the middle one and the largest (events/10 and events).
        others = sizes if args.batch_sizes else sorted({sizes[len(sizes) // 2], sizes[-1]})
        for scenario in args.scenarios:
            items.append({"kind": "batch", "scenario": scenario, "events": events})
            scenario_sizes = sizes if scenario == "tumbling" else others
            if events >= 10_000_000 and scenario != "tumbling":
                scenario_sizes = [max(sizes)]
            for size in scenario_sizes:
                items.append({"kind": "replay", "scenario": scenario, "events": events, "batch_size": size})
                items.append({"kind": "sss", "scenario": scenario, "events": events, "batch_size": size,
                              "parts": -(-events // size)})
    if args.flink:
        for events in args.events:
            for scenario in args.scenarios:
                items.append({"kind": "flink", "scenario": scenario, "events": events})
    if args.flat and not args.quick:
        count, size = args.flat
        events = count * size
        # One batch per pass (the per-batch fixed cost, as an hourly Airflow run pays it), then the
        # default passes (how a backfill of many small batches runs).
        scenario = args.flat_scenario
        items.append({"kind": "replay", "scenario": scenario, "events": events, "batch_size": size,
                      "label": "flat", "pass_max_records": size})
        items.append({"kind": "replay", "scenario": scenario, "events": events, "batch_size": size,
                      "label": "flat"})
        items.append({"kind": "sss", "scenario": scenario, "events": events, "batch_size": size,
                      "parts": count, "label": "flat"})
    return items


def _spec(item: dict[str, Any], args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    archive = prepare_archive(args.root, item["events"], args.seed, args.format)
    spec = {**item, "archive": archive["path"], "format": args.format}
    if item["kind"] == "flink":
        spec["split"] = split_archive(archive, 1)
        spec["classpath"] = flink_classpath()
    if item["kind"] == "sss":
        spec["split"] = split_archive(archive, item["parts"])
        if item["scenario"] == "session":
            spec["output_mode"] = args.session_mode
    if args.profile and item["kind"] == "replay":
        spec.update({"event_log": True, "cprofile": args.cprofile})
    return spec, archive


def _name(index: int, item: dict[str, Any]) -> str:
    label = f"-{item['label']}" if item.get("label") else ""
    size = item.get("batch_size", "all")
    return f"{index:02d}-{item['kind']}-{item['scenario']}-{item['events']}-{size}{label}"


def _print(name: str, result: dict[str, Any], run: str = "") -> None:
    status = "ok" if result.get("ok") else "FAILED"
    print(f"[bench] {name}{run}: {status} wall {result.get('wall_seconds', float('nan')):.1f}s "
          f"({result.get('events_per_second') or 0:,.0f} ev/s), "
          f"peak RSS {result.get('peak_rss_bytes', 0) / 2**30:.2f} GiB, "
          f"load {result.get('load_avg_before', [0])[0]:.2f}", flush=True)
    if not result.get("ok"):
        print(result.get("error", ""), flush=True)


def _measure(item: dict[str, Any], args: argparse.Namespace, index: int) -> dict[str, Any]:
    name = _name(index, item)
    try:
        spec, archive = _spec(item, args)
    except FlinkBuildError as error:
        failed = {**item, "ok": False, "error": str(error)}
        _print(name, failed)
        return failed
    runs = []
    for repeat in range(args.repeats):
        py_spy = args.py_spy if (args.profile and item["kind"] == "replay" and repeat == 0) else None
        [result] = run_measurement([spec], args.work / f"{name}-r{repeat}", args.timeout, py_spy)
        runs.append(result)
        _print(name, result, f" run {repeat + 1}/{args.repeats}")
        if not result.get("ok"):
            break
    ok = [r for r in runs if r.get("ok")]
    best = sorted(ok, key=lambda r: r["wall_seconds"])[len(ok) // 2] if ok else runs[-1]
    best = {**best, "archive": archive, "repeats": [r.get("wall_seconds") for r in runs]}
    if args.profile and item["kind"] == "replay":
        best["profile"] = collect_profiles(args.work / f"{name}-r0")
    return best


def _measure_together(items: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--quick``: every measurement in one worker process (one JVM start)."""
    prepared = [_spec(item, args) for item in items]
    results = run_measurement([spec for spec, _ in prepared], args.work / "quick", args.timeout)
    for index, (result, (_, archive)) in enumerate(zip(results, prepared, strict=True)):
        result["archive"] = archive
        result["repeats"] = [result.get("wall_seconds")]
        _print(_name(index, items[index]), result)
    return results


def collect_profiles(work: Path) -> dict[str, Any]:
    """Summaries of the cProfile dumps of the per-key function and of the py-spy samples."""
    profile: dict[str, Any] = {}
    cdir = work / "m0" / "cprofile"
    if cdir.exists() and any(cdir.iterdir()):
        import pstats

        stats = pstats.Stats(*[str(p) for p in cdir.glob("*.prof")])
        rows = []
        for (file, line, function), (_, calls, tottime, cumtime, _) in stats.stats.items():
            rows.append({"function": f"{Path(file).name}:{line}:{function}", "calls": calls,
                         "tottime": round(tottime, 3), "cumtime": round(cumtime, 3)})
        rows.sort(key=lambda r: -r["tottime"])
        profile["cprofile_top_tottime"] = rows[:25]
        profile["cprofile_total_tottime"] = round(sum(r["tottime"] for r in rows), 3)
    spy = work / "py-spy.txt"
    if spy.exists():
        profile["py_spy"] = summarize_py_spy(spy)
    return profile


def summarize_py_spy(path: Path) -> dict[str, Any]:
    """Collapsed py-spy stacks: samples per process and per (innermost project or library) frame."""
    per_process: dict[str, int] = {}
    leaf: dict[str, int] = {}
    project: dict[str, int] = {}
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        process = frames[0][:60]
        per_process[process] = per_process.get(process, 0) + n
        leaf[frames[-1][:100]] = leaf.get(frames[-1][:100], 0) + n
        ours = [f for f in frames if "spark_jobs" in f]
        if ours:
            project[ours[-1][:100]] = project.get(ours[-1][:100], 0) + n
    top = lambda d: sorted(d.items(), key=lambda kv: -kv[1])[:20]  # noqa: E731
    return {"samples": total, "per_process": top(per_process), "leaf": top(leaf),
            "innermost_project": top(project)}


# ---- analysis -------------------------------------------------------------------------------------
def analyse(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios against the batch lower bound and SSS at the same batch count, fixed overhead."""
    ok = [r for r in results if r.get("ok")]
    lower = {(r["scenario"], r["events"]): r for r in ok if r["kind"] == "batch"}
    sss = {
        (r["scenario"], r["events"], r.get("batch_size"), r.get("label")): r for r in ok if r["kind"] == "sss"
    }
    flink = {(r["scenario"], r["events"]): r for r in ok if r["kind"] == "flink"}
    rows = []
    for r in ok:
        if r["kind"] != "replay":
            continue
        base = lower.get((r["scenario"], r["events"]))
        reference = flink.get((r["scenario"], r["events"]))
        twin = sss.get((r["scenario"], r["events"], r["batch_size"], r.get("label")))
        rows.append({
            "scenario": r["scenario"],
            "events": r["events"],
            "batch_size": r["batch_size"],
            "batches": r["batches"],
            "passes": r.get("passes"),
            "label": r.get("label"),
            "replay_wall": r["wall_seconds"],
            "replay_eps": r["events_per_second"],
            "ingest_seconds": r["ingest_seconds"],
            "batch_wall": base["wall_seconds"] if base else None,
            "sss_wall": twin["wall_seconds"] if twin else None,
            "sss_batches": twin["batches"] if twin else None,
            "vs_batch": round(r["wall_seconds"] / base["wall_seconds"], 2) if base else None,
            "vs_sss": round(r["wall_seconds"] / twin["wall_seconds"], 2) if twin else None,
            "flink_wall": reference["wall_seconds"] if reference else None,
            "vs_flink": round(r["wall_seconds"] / reference["wall_seconds"], 2) if reference else None,
            "flink_peak_rss_gib": round(reference["peak_rss_bytes"] / 2**30, 2) if reference else None,
            "replay_cpu": r.get("cpu_seconds"),
            "batch_cpu": base.get("cpu_seconds") if base else None,
            "sss_cpu": twin.get("cpu_seconds") if twin else None,
            "cpu_vs_batch": _ratio(r.get("cpu_seconds"), base.get("cpu_seconds") if base else None),
            "cpu_vs_sss": _ratio(r.get("cpu_seconds"), twin.get("cpu_seconds") if twin else None),
            "foreign_cpu_seconds": r.get("foreign_cpu_seconds"),
            "load_avg": r.get("load_avg_before", [None])[0],
            "peak_rss_gib": round(r["peak_rss_bytes"] / 2**30, 2),
            "sss_peak_rss_gib": round(twin["peak_rss_bytes"] / 2**30, 2) if twin else None,
            "batch_peak_rss_gib": round(base["peak_rss_bytes"] / 2**30, 2) if base else None,
            "delta_files": r["delta"]["data_files"] + r["delta"]["log_files"],
            "sss_delta_files": (twin["delta"]["data_files"] + twin["delta"]["log_files"]) if twin else None,
        })
    overhead = fixed_overhead(ok)
    return {"comparison": rows, "fixed_overhead": overhead, "flat": flat_stats(ok)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


#: The largest batch at least this many times the smallest for ``fixed_overhead`` to fit a line.
FIT_MIN_SPREAD = 4


def fixed_overhead(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per scenario, over every replay batch of every run (finalize batches excluded): least squares
    ``seconds = a + b * records``; ``a`` is the fixed per-batch cost, ``b`` the cost per record.
    Also on the batches' process-tree CPU-seconds, which other load inflates far less.

    Fitted only when the batches' sizes spread by ``FIT_MIN_SPREAD``: passes of 999,021 and
    1,000,000 records (the 1M and 10M runs of a scenario) give a line through noise."""
    out = {}
    groups: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for r in results:
        if r["kind"] != "replay":
            continue
        group = groups.setdefault(r["scenario"], {"wall": [], "cpu": []})
        for b in r["per_batch"]:
            if b["records"]:
                group["wall"].append((b["records"], b["seconds"]))
                if b.get("cpu_seconds") is not None:
                    group["cpu"].append((b["records"], b["cpu_seconds"]))
    for name, group in groups.items():
        entry: dict[str, Any] = {}
        for metric, points in group.items():
            if not points:
                continue
            entry[f"{metric}_batches"] = len(points)
            entry[f"{metric}_median_seconds"] = round(statistics.median(y for _, y in points), 3)
            sizes = [x for x, _ in points]
            if max(sizes) < FIT_MIN_SPREAD * min(sizes):
                continue
            n = len(points)
            mx = sum(x for x, _ in points) / n
            my = sum(y for _, y in points) / n
            sxx = sum((x - mx) ** 2 for x, _ in points)
            b = sum((x - mx) * (y - my) for x, y in points) / sxx
            entry[f"{metric}_fixed_seconds"] = round(my - b * mx, 3)
            entry[f"{metric}_microseconds_per_record"] = round(b * 1e6, 2)
        out[name] = entry
    return out


def flat_stats(results: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for r in results:
        if r.get("label") != "flat" or not r.get("per_batch"):
            continue
        times = [b["seconds"] for b in r["per_batch"] if b["records"]]
        if len(times) < 4:
            continue
        name = r["kind"]
        if r["kind"] == "replay":
            name = "replay, one batch per pass" if r.get("pass_max_records") == r["batch_size"] else "replay"
        if r["scenario"] != "tumbling":
            name = f"{r['scenario']}: {name}"
        tenth = max(1, len(times) // 10)
        first, last = times[:tenth], times[-tenth:]
        states = [b.get("state_rows") or 0 for b in r["per_batch"] if b["records"]]
        out[name] = {
            "batches": len(times),
            "median_seconds": round(statistics.median(times), 3),
            "p90_seconds": round(sorted(times)[int(0.9 * (len(times) - 1))], 3),
            "max_seconds": round(max(times), 3),
            "first_tenth_median": round(statistics.median(first), 3),
            "last_tenth_median": round(statistics.median(last), 3),
            "slope_ms_per_100_batches": round(_slope(times) * 100 * 1000, 1),
            "state_rows_min": min(states),
            "state_rows_max": max(states),
        }
        cpu = [b["cpu_seconds"] for b in r["per_batch"] if b["records"] and b.get("cpu_seconds") is not None]
        if len(cpu) >= 4:
            tenth = max(1, len(cpu) // 10)
            out[name].update({
                "cpu_median_seconds": round(statistics.median(cpu), 3),
                "cpu_first_tenth_median": round(statistics.median(cpu[:tenth]), 3),
                "cpu_last_tenth_median": round(statistics.median(cpu[-tenth:]), 3),
                "cpu_slope_ms_per_100_batches": round(_slope(cpu) * 100 * 1000, 1),
            })
    return out


def _slope(values: list[float]) -> float:
    n = len(values)
    mx = (n - 1) / 2
    my = sum(values) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / sxx if sxx else 0.0


# ---- report -----------------------------------------------------------------------------------------
def summary_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Benchmark run {report['run']}", "",
             f"command: `{report['command']}`", f"machine: {report['machine']}", ""]
    lines += ["| scenario | events | batch size | batches | replay s | ev/s | ingest s | batch s | SSS s "
              "| replay/batch | replay/SSS | RSS GiB (replay/SSS/batch) | Delta files (replay/SSS) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["analysis"]["comparison"]:
        lines.append(
            f"| {row['scenario']}{' (flat)' if row['label'] == 'flat' else ''} | {row['events']:,} | "
            f"{row['batch_size']:,} | {row['batches']} in {row['passes'] or '?'} passes | "
            f"{row['replay_wall']:.1f} | "
            f"{_fmt(row['replay_eps'], 0)} | "
            f"{_fmt(row['ingest_seconds'])} | {_fmt(row['batch_wall'])} | {_fmt(row['sss_wall'])} | "
            f"{_fmt(row['vs_batch'], 2)}x | {_fmt(row['vs_sss'], 2)}x | {row['peak_rss_gib']}/"
            f"{_fmt(row['sss_peak_rss_gib'], 2)}/{_fmt(row['batch_peak_rss_gib'], 2)} | "
            f"{row['delta_files']}/{_fmt(row['sss_delta_files'], 0)} |"
        )
    flink_rows = [r for r in report["analysis"]["comparison"] if r.get("flink_wall")]
    if flink_rows:
        lines += ["", "Apache Flink (its Java WindowOperator, same records in replay order):", "",
                  "| scenario | events | batch size | replay s | Flink s | replay/Flink "
                  "| RSS GiB (replay/Flink) |",
                  "|---|---|---|---|---|---|---|"]
        for row in flink_rows:
            lines.append(
                f"| {row['scenario']} | {row['events']:,} | {row['batch_size']:,} | "
                f"{row['replay_wall']:.1f} | {row['flink_wall']:.1f} | {row['vs_flink']:.2f}x | "
                f"{row['peak_rss_gib']}/{row['flink_peak_rss_gib']} |"
            )
    lines += ["", "CPU-seconds of each measured process tree (less sensitive to other load than wall):", "",
              "| scenario | events | batch size | replay CPU s | batch CPU s | SSS CPU s | replay/batch "
              "| replay/SSS | load avg | foreign CPU s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["analysis"]["comparison"]:
        lines.append(
            f"| {row['scenario']}{' (flat)' if row['label'] == 'flat' else ''} | {row['events']:,} | "
            f"{row['batch_size']:,} | {_fmt(row['replay_cpu'])} | {_fmt(row['batch_cpu'])} | "
            f"{_fmt(row['sss_cpu'])} | {_fmt(row['cpu_vs_batch'], 2)}x | {_fmt(row['cpu_vs_sss'], 2)}x | "
            f"{_fmt(row['load_avg'], 2)} | {_fmt(row['foreign_cpu_seconds'])} |"
        )
    lines += ["", "fixed per-batch overhead (least squares over batches):", "```",
              json.dumps(report["analysis"]["fixed_overhead"], indent=1), "```",
              "flat test:", "```", json.dumps(report["analysis"]["flat"], indent=1), "```"]
    lines += ["", "replay step totals (seconds summed over batches):", ""]
    for r in report["results"]:
        if r.get("kind") == "replay" and r.get("ok"):
            totals: dict[str, float] = {}
            for b in r["per_batch"]:
                for k, v in b["steps"].items():
                    totals[k] = totals.get(k, 0.0) + v
            lines.append(
                f"* {r['scenario']} {r['events']:,} x {r['batch_size']:,}: "
                + ", ".join(f"{k} {v:.1f}" for k, v in totals.items())
                + f"; batch total {r['batch_seconds']:.1f}; per-key function CPU "
                f"{_fmt(r.get('udf_cpu_seconds'))} (operator {_fmt(r.get('operator_cpu_seconds'))}) over "
                f"{r.get('udf_calls', '?')} calls"
            )
    return "\n".join(lines) + "\n"


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _default_passes(result: dict[str, Any]) -> bool:
    """A replay that ran with the default passes (not one batch per pass)."""
    return result["kind"] == "replay" and result.get("pass_max_records") != result["batch_size"]


def _events_at(results: list[dict[str, Any]], batch_size: int) -> int:
    return next(r["events"] for r in results if r.get("batch_size") == batch_size)


def pass_kinds(results: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The passes plot (d) compares, labelled: the flat test's one-batch passes, then each
    scenario's passes over the largest archive (finalize passes, which hold no records, left out)."""
    def passes_of(r: dict[str, Any]) -> list[dict[str, Any]]:
        return [b for b in r["per_batch"] if b["records"] and b.get("steps")]

    replays = [r for r in results if r["kind"] == "replay" and passes_of(r)]
    chosen = [(f"flat test\n{r['batch_size']:,} a pass", passes_of(r))
              for r in replays if r.get("label") == "flat" and not _default_passes(r)]
    plain = [r for r in replays if r.get("label") != "flat"]
    if plain:
        events = max(r["events"] for r in plain)
        largest = sorted((r for r in plain if r["events"] == events),
                         key=lambda r: (r["scenario"], r["batch_size"]))
        for r in largest:
            passes = passes_of(r)
            chosen.append((f"{r['scenario']}, {events:,}\n{passes[0]['records']:,} a pass", passes))
    return chosen


def plot(report: dict[str, Any], paths: list[Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in report["results"] if r.get("ok")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    # (a) throughput per system and batch count, largest archive with a tumbling replay
    ax = axes[0][0]
    tumbling = [r for r in results if r["scenario"] == "tumbling" and r.get("label") != "flat"]
    if tumbling:
        # The archive measured at the most batch sizes (then the largest), plus the flat test's
        # default-pass replay as the many-batches point.
        def sizes_of(events: int) -> int:
            return len({r["batch_size"] for r in tumbling if r["events"] == events and r["kind"] == "replay"})

        events = max({r["events"] for r in tumbling}, key=lambda e: (sizes_of(e), e))
        chosen = [r for r in tumbling if r["events"] == events]
        chosen += [r for r in results
                   if r.get("label") == "flat" and (r["kind"] == "sss" or _default_passes(r))]
        sizes = sorted({r["batch_size"] for r in chosen if r["kind"] == "replay"}, reverse=True)
        width = 0.38
        for offset, kind, color in ((-width / 2, "replay", "tab:blue"), (width / 2, "sss", "tab:orange")):
            values = []
            for size in sizes:
                match = [r for r in chosen if r["kind"] == kind and r.get("batch_size") == size]
                values.append(match[0]["events_per_second"] if match else 0)
            ax.bar([i + offset for i in range(len(sizes))], values, width, label=kind, color=color)
        lower = [r for r in chosen if r["kind"] == "batch"]
        if lower:
            ax.axhline(lower[0]["events_per_second"], color="tab:green", ls="--",
                       label="plain batch (lower bound)")
        flink = [r for r in chosen if r["kind"] == "flink"]
        if flink:
            ax.axhline(flink[0]["events_per_second"], color="tab:purple", ls=":",
                       label="Apache Flink (its Java operator)")
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([f"{-(-_events_at(chosen, s) // s)} batches\nof {s:,}" for s in sizes])
        ax.set_ylabel("events/s (wall, ingest included)")
        ax.set_title(f"tumbling, {events:,} events (and the flat test's archive)")
        ax.legend()
    # (b) per-batch time vs batch number (flat test)
    ax = axes[0][1]
    flats = [r for r in results if r.get("label") == "flat" and not _default_passes(r)] or [
        max((r for r in results if r["kind"] == "replay"), key=lambda r: r["batches"], default=None)
    ]
    for r in flats:
        if not r:
            continue
        batches = [b for b in r["per_batch"] if b["records"]]
        name = "replay" if r["kind"] == "replay" else "SSS"
        ax.plot([b["batch"] for b in batches], [b["seconds"] for b in batches], ".", ms=3,
                label=f"{name} wall ({r['batch_size']:,}/batch)")
        cpu = [b for b in batches if b.get("cpu_seconds") is not None]
        if cpu:
            ax.plot([b["batch"] for b in cpu], [b["cpu_seconds"] for b in cpu], "x", ms=3,
                    label=f"{name} CPU-seconds (process tree)")
    ax.set_xlabel("batch number")
    ax.set_ylabel("seconds per batch (log)")
    ax.set_yscale("log")
    ax.set_title("per-batch time across batches")
    ax.legend()
    # (c) per-batch time vs open-window state
    ax = axes[1][0]
    for r in flats:
        if not r:
            continue
        batches = [b for b in r["per_batch"] if b["records"] and b.get("state_rows") is not None]
        ax.plot([b["state_rows"] for b in batches], [b["seconds"] for b in batches], ".", ms=3,
                label="replay (operator_state rows)" if r["kind"] == "replay" else "SSS (state store rows)")
        cpu = [b for b in batches if b.get("cpu_seconds") is not None]
        if cpu:
            ax.plot([b["state_rows"] for b in cpu], [b["cpu_seconds"] for b in cpu], "x", ms=3,
                    label="replay CPU-seconds")
    ax.set_xlabel("open-window state rows after the batch")
    ax.set_ylabel("seconds per batch (log)")
    ax.set_yscale("log")
    ax.set_title("per-batch time vs state size")
    ax.legend()
    # (d) where a pass's time goes: the flat test's one-batch passes, and the largest archive's
    # passes per scenario. Side by side, not stacked: a pass's writes and commit overlap the next
    # pass's steps.
    ax = axes[1][1]
    passes = pass_kinds(results)
    if passes:
        names = ["timeline_read", "timelines", "records_read", "operator", "writes", "commit"]
        width = 0.8 / len(names)
        for n, name in enumerate(names):
            ax.bar([i - 0.4 + (n + 0.5) * width for i in range(len(passes))],
                   [statistics.mean(b["steps"].get(name, 0.0) for b in batches) for _, batches in passes],
                   width, label=name)
        for i, (_, batches) in enumerate(passes):
            ax.hlines(statistics.mean(b["seconds"] for b in batches), i - 0.45, i + 0.45, color="black",
                      label="the pass (mean)" if i == 0 else None)
        ax.set_xticks(range(len(passes)))
        ax.set_xticklabels([label for label, _ in passes], fontsize=8)
        ax.set_ylabel("mean seconds per pass (log; finalize excluded)")
        ax.set_yscale("log")
        ax.set_title("replay pass: time per step (writes and commit overlap the next pass)")
        ax.legend(fontsize=7)
    fig.suptitle(f"flink-replay benchmarks ({report['run']}, {report['machine']})", fontsize=10)
    fig.tight_layout()
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=80)
    plt.close(fig)


def machine() -> str:
    cores = os.cpu_count()
    try:
        import psutil

        memory = f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        memory = "?"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cores} cores, {memory}, load {load} at start"


# ---- command line --------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.harness", description=__doc__.split("\n")[0])
    ints = lambda text: [int(float(x)) for x in text.split(",") if x]  # noqa: E731
    parser.add_argument("--events", type=ints, default=None, help="archive sizes (default 1000000,10000000)")
    parser.add_argument("--batch-sizes", type=ints, default=None,
                        help="replay batch sizes (default: events/100, events/10, events; 10M: 1M); "
                             "sliding and session run at each size given, by default at the two largest")
    parser.add_argument("--scenarios", type=lambda t: t.split(","), default=list(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="smoke size: 2000 events, tumbling only")
    parser.add_argument("--flat", type=lambda t: tuple(int(x) for x in t.split("x")), default=(300, 2000),
                        help="flat test: BATCHESxSIZE (default 300x2000; 0x0 to skip)")
    parser.add_argument("--flat-scenario", default="tumbling", choices=list(SCENARIOS),
                        help="the flat test's scenario (session: ~1,000 keys and merging windows)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per measurement (median reported)")
    parser.add_argument("--format", default="jsonl", choices=["jsonl", "jsonl.gz", "parquet"])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--session-mode", default="append", choices=["update", "append"],
                        help="SSS output mode for session windows")
    parser.add_argument("--profile", action="store_true",
                        help="replay runs with Spark event logs (+ --cprofile, + py-spy if found)")
    parser.add_argument("--cprofile", action="store_true", help="with --profile: cProfile per-key calls")
    parser.add_argument("--root", type=Path, default=RESULTS, help="archives and runs go here")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default root/run-<time>)")
    parser.add_argument("--plot", type=Path, default=None,
                        help=f"also write the plot here (e.g. {PLOT_PATH})")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="per-measurement timeout (s)")
    parser.add_argument("--only", default=None, help="run only plan items whose name contains this")
    parser.add_argument("--no-flink", action="store_true",
                        help="skip Apache Flink (run when mvn and java are found; not --quick or Parquet)")
    args = parser.parse_args(argv)
    if args.events is None:
        args.events = [2000] if args.quick else [1_000_000, 10_000_000]
    if args.quick:
        args.scenarios = [s for s in args.scenarios if s == "tumbling"] or ["tumbling"]
    if args.flat == (0, 0):
        args.flat = None
    args.py_spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    # Flink reads the archive's lines: JSON Lines (plain or gzip, which the split decompresses).
    args.flink = not (args.quick or args.no_flink) and args.format != "parquet" and flink_available()
    return args


def salvage(lakehouse: Path) -> dict[str, Any]:
    """Per-batch figures of a replay from its Delta logs alone (no Spark): for a measurement that
    had to be stopped before it finished. A batch's end is its ``replay_log`` commit; its start
    the previous batch's commit (the first: the ingest's ``source_files`` commit)."""

    def commits(table: str) -> list[dict[str, Any]]:
        found = []
        for file in sorted((lakehouse / table / "_delta_log").glob("*.json")):
            info: dict[str, Any] = {}
            for line in file.read_text().splitlines():
                action = json.loads(line)
                if "commitInfo" in action:
                    info.update(action["commitInfo"])
                elif "add" in action and action["add"].get("stats"):
                    info.setdefault("stats", []).append(json.loads(action["add"]["stats"]))
            found.append(info)
        return found

    start = max(c["timestamp"] for c in commits("source_files")) / 1000
    state_rows = _commit_rows(lakehouse / "operator_state")
    per_batch = []
    for info in commits("replay_log"):
        meta = info.get("userMetadata") or ""
        if not meta.startswith("batch="):
            continue
        batch_id = int(meta[6:])
        stats = (info.get("stats") or [{}])
        records = next((s["minValues"]["records"] for s in stats if s.get("numRecords")), None)
        end = info["timestamp"] / 1000
        per_batch.append({"batch": len(per_batch), "batch_id": batch_id, "records": records,
                          "seconds": round(end - start, 3), "state_rows": state_rows.get(batch_id),
                          "steps": {}})
        start = end
    return {"per_batch": per_batch, "batches": len(per_batch), "salvaged": True}


def salvage_measurement(workdir: Path) -> dict[str, Any]:
    """A replay measurement stopped (timeout) before the end: its per-batch figures from the Delta
    logs, with the worker's per-batch marks (steps, CPU) where it wrote them."""
    result = salvage(workdir / "out" / "lakehouse")
    marks_path = workdir / "batches.jsonl"
    marks = [json.loads(line) for line in marks_path.read_text().splitlines()] if marks_path.exists() else []
    for entry, mark in zip(result["per_batch"], marks, strict=False):
        entry["steps"] = mark.get("steps", {})
        entry["cpu_seconds"] = round(mark["cpu"], 3) if "cpu" in mark else None
        entry["udf_cpu_seconds"] = round(mark.get("udf_s", 0.0), 4)
        entry["operator_cpu_seconds"] = round(mark.get("operator_s", 0.0), 4)
    result["ok"] = bool(result["per_batch"])
    result["wall_seconds"] = round(sum(b["seconds"] for b in result["per_batch"]), 3)
    result["batch_seconds"] = result["wall_seconds"]
    result["ingest_seconds"] = None
    result["events_per_second"] = None
    result["delta"] = delta_file_counts(workdir / "out")
    return result


#: What makes two results the same measurement.
_IDENTITY = ("kind", "scenario", "events", "batch_size", "label", "pass_max_records", "parts")


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' results as one run's. The same measurement in several runs (re-measured
    after a change): the first run named keeps it, so that a summary compares each system once."""
    results: dict[str, dict[str, Any]] = {}
    for report in reports:
        for result in report["results"]:
            identity = {key: result.get(key) for key in _IDENTITY}
            results.setdefault(json.dumps(identity, sort_keys=True), result)
    return {
        "run": " + ".join(r["run"] for r in reports),
        "command": " ; ".join(r["command"] for r in reports),
        "machine": reports[0]["machine"],
        "results": list(results.values()),
    }


def report_only(argv: list[str]) -> int:
    """``python -m bench.harness report RUN_DIR... [--plot PNG]``: merge the results of runs
    made separately (e.g. the 1M comparison and the flat test) into one summary and plot."""
    parser = argparse.ArgumentParser(prog="python -m bench.harness report")
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    merged = merge_reports([json.loads((run / "results.json").read_text()) for run in args.runs])
    merged["analysis"] = analyse(merged["results"])
    if args.plot:
        plot(merged, [args.plot])
    print(summary_markdown(merged))
    return 0


def join_drift(argv: list[str]) -> int:
    """How an interval join's state grows when the inputs' event times drift apart.

    Two inputs of ``--records`` each at 100 records/s of event time over ``--keys`` keys; the
    right input trails the left by the drift. Runs the engine's per-key procedure (the one the
    Spark job runs) through the in-memory runner and measures the buffered records and the JSON
    bytes ``operator_state`` would hold after the last batch (before finalize).
    """
    from spark_jobs.config import parse_config
    from spark_jobs.core.durations import parse_duration
    from spark_jobs.testing.memory_replay import MemoryReplay, Record, operator_spec

    parser = argparse.ArgumentParser(prog="python -m bench.harness join-drift")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--drifts", default="0s,1s,10s,60s,300s")
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args(argv)
    config = parse_config({
        "name": "drift", "source": {"path": "l", "event_time": "ts"}, "key": "k",
        "watermark": {"max_out_of_orderness": "1s"}, "output": {"path": "o"},
        "join": {"type": "interval", "lower": "-5s", "upper": "5s",
                 "right": {"path": "r", "event_time": "ts"}},
    })
    print("| drift between inputs | buffered records | state JSON bytes | state rows | seconds |")
    print("|---|---|---|---|---|")
    for text in args.drifts.split(","):
        drift = parse_duration(text)
        records = []
        for i in range(args.records):
            key = (f"k{i % args.keys}",)
            records.append(Record(key, i * 10, (), input=0, fields={"i": i}))
            records.append(Record(key, i * 10 - drift, (), input=1, fields={"i": i}))
        memory = MemoryReplay(config, operator_spec(config))
        started = time.time()
        memory.run(records, args.batch_size, finalize=False)
        seconds = time.time() - started
        rows = [row for state in memory.state.values() for row in state]
        buffered = sum(
            len(bucket) for row in rows for side in json.loads(row.contents).values()
            for bucket in side.values()
        )
        size = sum(len(row.contents) for row in rows)
        print(f"| {text} | {buffered:,} | {size:,} | {len(rows)} | {seconds:.1f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        return worker(argv[1])
    if argv[:1] == ["join-drift"]:
        return join_drift(argv[1:])
    if argv[:1] == ["report"]:
        return report_only(argv[1:])
    args = parse_args(argv)
    run = time.strftime("%Y%m%d-%H%M%S")
    run_dir = args.out or args.root / f"run-{run}"
    run_dir.mkdir(parents=True, exist_ok=True)
    args.work = run_dir / "work"
    items = plan(args)
    if args.only:
        items = [i for i in items if args.only in json.dumps(i)]
    command = "python -m bench.harness " + " ".join(argv)
    report: dict[str, Any] = {"run": run, "command": command.strip(), "machine": machine(),
                              "plan": items, "results": []}
    print(f"[bench] {len(items)} measurements -> {run_dir}", flush=True)
    if args.quick:
        report["results"] = _measure_together(items, args)
    for index, item in enumerate([] if args.quick else items):
        report["results"].append(_measure(item, args, index))
        report["analysis"] = analyse(report["results"])
        report["load_avg_end"] = os.getloadavg()
        (run_dir / "results.json").write_text(json.dumps(report, indent=1, default=str))
    report["analysis"] = analyse(report["results"])
    (run_dir / "results.json").write_text(json.dumps(report, indent=1, default=str))
    (run_dir / "summary.md").write_text(summary_markdown(report))
    with contextlib.suppress(Exception):
        plot(report, [run_dir / "bench.png", *([args.plot] if args.plot else [])])
    print(summary_markdown(report))
    failed = [r for r in report["results"] if not r.get("ok")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
