"""Summarise a JFR recording of a replay: where the JVM's CPU samples fall, by kind of work.

Record a measurement with Java Flight Recorder (every JVM the command starts records), then
summarise its execution samples, optionally only those inside a time window (a pass's
``batch_windows`` in the run's ``results.json``):

    JAVA_TOOL_OPTIONS="-XX:StartFlightRecording=filename=/tmp/replay.jfr,settings=profile" \\
        REPLAY_PROFILE=1 .venv/bin/python -m bench.harness --events 10000000 \\
        --batch-sizes 1000000 --scenarios session --flat 0x0 --no-flink \\
        --only '"kind": "replay"' --out /tmp/session-jfr
    .venv/bin/python bench/profile_jfr.py /tmp/replay.jfr
    .venv/bin/python bench/profile_jfr.py /tmp/replay.jfr --passes /tmp/session-jfr/results.json

A sample counts towards the first kind whose marker appears in its top frames (``--depth``); the
top frames themselves are listed too. JFR samples Java code only: the driver's and the Python
workers' own CPU is not in it (py-spy, ``bench/profile_operator.py``).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: Kinds of work, each by substrings of its frames (the first kind that matches wins).
KINDS = {
    "string to double casts": ["FloatingDecimal", "Double.valueOf", "Double.parseDouble"],
    "regular expressions": ["java.util.regex"],
    "JSON line check (Jackson)": ["JsonLineCheck", "jackson"],
    "line reader": ["JsonLinesSource"],
    "Parquet dictionaries": ["DictionaryValuesWriter", "Object2Int", "Long2Int"],
    "Parquet writing": ["parquet.column", "parquet.hadoop", "ParquetWriteSupport", "MessageColumnIO",
                        "parquet.bytes", "parquet.io"],
    "Parquet reading": ["VectorizedParquet", "VectorizedColumnReader", "VectorizedRle", "vectorized"],
    "Arrow": ["arrow", "Arrow"],
    "shuffle and sort": ["Shuffle", "Sorter", "UnsafeSortDataFormat"],
    "query planning": ["catalyst.analysis", "catalyst.optimizer", "catalyst.trees", "catalyst.plans"],
    "code generation": ["janino", "codehaus", "CodeGenerator"],
    "Delta": ["sql.delta"],
    "UTF8String": ["UTF8String"],
}
_FRAME = re.compile(r"^[\w$.<>]+\(.*\)\s+line:")
_START = re.compile(r"^startTime = (\d+):(\d+):(\d+\.\d+)")


def samples(recording: Path, day: datetime.date) -> list[tuple[float | None, list[str]]]:
    """Each execution sample's time (epoch seconds, UTC) and frames, innermost first."""
    jfr = shutil.which("jfr") or str(Path(shutil.which("java") or "java").resolve().parent / "jfr")
    printed = subprocess.run(
        [jfr, "print", "--stack-depth", "64", "--events", "jdk.ExecutionSample", str(recording)],
        capture_output=True, text=True, check=True,
    ).stdout
    midnight = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC).timestamp()
    result: list[tuple[float | None, list[str]]] = []
    for line in printed.splitlines():
        line = line.strip()
        if line.startswith("jdk.ExecutionSample"):
            result.append((None, []))
        elif (start := _START.match(line)) and result:
            hours, minutes, seconds = start.groups()
            result[-1] = (midnight + int(hours) * 3600 + int(minutes) * 60 + float(seconds), result[-1][1])
        elif _FRAME.match(line) and result:
            result[-1][1].append(line.split("(")[0])
    return [(at, frames) for at, frames in result if frames]


def kind_of(frames: list[str], depth: int) -> str:
    top = " ".join(frames[:depth])
    return next((kind for kind, markers in KINDS.items() if any(m in top for m in markers)), "other")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--passes", type=Path, help="a bench results.json: only samples while its "
                        "first measurement's passes ran")
    parser.add_argument("--day", default=datetime.date.today().isoformat(),
                        help="the recording's day (UTC; JFR prints times of day)")
    parser.add_argument("--depth", type=int, default=4, help="top frames a kind is looked for in")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    found = samples(args.recording, datetime.date.fromisoformat(args.day))
    if args.passes:
        windows = json.loads(args.passes.read_text())["results"][0]["batch_windows"]
        start, end = windows[0][0], windows[-1][1]
        found = [(at, frames) for at, frames in found if at is not None and start <= at <= end]
    if not found:
        print("no samples", file=sys.stderr)
        return 1
    kinds = collections.Counter(kind_of(frames, args.depth) for _, frames in found)
    tops = collections.Counter(".".join(frames[0].split(".")[-2:]) for _, frames in found)
    print(f"{len(found)} samples")
    for kind, count in kinds.most_common():
        print(f"{100 * count / len(found):5.1f} %  {kind}")
    print("top frames:")
    for frame, count in tops.most_common(args.top):
        print(f"{100 * count / len(found):5.1f} %  {frame}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
