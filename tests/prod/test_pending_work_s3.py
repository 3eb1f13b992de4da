"""Production-topology tier: Airflow's per-interval check (``pending_work``) on object storage,
without a JVM. The archive listing read with pyarrow's ``S3FileSystem`` equals what Spark's S3A
listing (``sources.list_archive``) reports for the same objects (paths, sizes, modification times
in ms: any difference would make every interval look "changed"); after a finalized replay of a
bucket pipeline the check says "nothing to do" without starting a JVM, and "work" once a new
object is uploaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from prod_services import BUCKET

pytestmark = [pytest.mark.slow, pytest.mark.prod, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ARCHIVE = f"s3a://{BUCKET}/archive/pending"
FAR_FUTURE = 4_102_444_800_000  # 2100-01-01: every staged batch is due

#: Spark's S3A listing of the archive, as JSON (a subprocess: the session needs the S3A jars and
#: this environment; the test process itself must stay free of a JVM for the other test).
SPARK_LISTING = """
import json, sys
from spark_jobs.config import load_config
from spark_jobs.execution.sources import list_archive
from spark_jobs.execution.spark_session import get_spark
spark = get_spark()
source = load_config(sys.argv[1]).sources()[0]
print(json.dumps([[f.path, f.size, f.modified_ms] for f in list_archive(spark, source)]))
spark.stop()
"""

#: Airflow's check, in a fresh interpreter: its answer, and whether a JVM was started for it
#: (pyspark's gateway launched, or any child process left, e.g. a `java`).
CHECK = """
import json, os, sys
from spark_jobs.config import load_config
from spark_jobs.execution.pending_work import pending_work
answer = pending_work(load_config(sys.argv[1]), int(sys.argv[2]), finalize=True)
children = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    children.append(pid)
        except OSError:
            pass
gateway = None
if "pyspark" in sys.modules:
    from pyspark import SparkContext
    gateway = SparkContext._gateway
print(json.dumps({"work": answer.work, "reason": answer.reason, "children": children,
                  "gateway": gateway is not None}))
"""


@pytest.fixture(scope="module")
def world(store, tmp_path_factory):
    """The demo archive on the bucket (with files the rule skips), and the replay's environment."""
    import pyarrow.fs as pafs

    base = tmp_path_factory.mktemp("pending-base")
    env = {**os.environ, **store["keys"], "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "REPLAY_BASE_DIR": str(base), "REPLAY_S3A_ENDPOINT": store["endpoint"],
           "SPARK_MASTER": os.environ.get("SPARK_MASTER", "local[2]")}

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=base, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done

    run("replay", "generate", "data/archive/clicks")
    fs = store["fs"]
    key = ARCHIVE.removeprefix("s3a://")
    pafs.copy_files(str(base / "data" / "archive" / "clicks"), key,
                    source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    for skipped in ("_SUCCESS", ".part.jsonl.tmp", "_temporary/0/part-x.jsonl", "README.md"):
        with fs.open_output_stream(f"{key}/{skipped}") as out:
            out.write(b"{}\n")
    demo = yaml.safe_load((ROOT / "include" / "pipelines" / "clicks_per_minute.yaml").read_text())
    config = base / "pending.yaml"
    config.write_text(yaml.safe_dump({**demo, "source": {**demo["source"], "path": ARCHIVE},
                                      "output": {"path": f"s3a://{BUCKET}/lakehouse/pending"}}))
    return {"run": run, "env": env, "config": config, "fs": fs, "key": key, "store": store}


def test_the_s3_listing_without_a_jvm_equals_spark_s3a_listing(world, monkeypatch):
    from spark_jobs.config import load_config
    from spark_jobs.execution.object_store import list_s3_archive

    for name in ("REPLAY_S3A_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, world["env"][name])
    source = load_config(world["config"]).sources()[0]
    listed = list_s3_archive(source.path, source.format, source.layout)
    mine = [[f.path, f.size, f.modified_ms] for f in listed]
    spark = json.loads(world["run"](str(BIN / "python"), "-c", SPARK_LISTING,
                                    str(world["config"])).stdout.strip().splitlines()[-1])
    assert mine and mine == spark
    print(f"{len(mine)} objects, {sum(ms % 1000 != 0 for _, _, ms in mine)} with a sub-second Last-Modified")
    assert all(path.startswith(ARCHIVE + "/") and path.endswith(".jsonl") for path, _, _ in mine)
    assert not any("_temporary" in path or "/_" in path or "/." in path for path, _, _ in mine)


def check(world) -> dict:
    started = time.monotonic()
    done = world["run"](str(BIN / "python"), "-c", CHECK, str(world["config"]), str(FAR_FUTURE), timeout=120)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"check: {time.monotonic() - started:.1f} s, {answer}")
    return answer


def test_after_a_finalized_replay_the_check_needs_no_jvm(world):
    first = check(world)
    assert first["work"] and "nothing ingested" in first["reason"], first
    world["run"]("replay", "run", str(world["config"]), "--finalize", "--quiet")

    idle = check(world)
    assert not idle["work"] and "finalized" in idle["reason"], idle
    assert idle["children"] == [] and not idle["gateway"], idle

    # The operation journal is read from the bucket too: an unfinished reset is work.
    journal = f"{BUCKET}/lakehouse/pending/_replay_operation.json"
    with world["fs"].open_output_stream(journal) as out:
        out.write(json.dumps({"kind": "reset", "id": "t", "phase": "drop"}).encode())
    unfinished = check(world)
    assert unfinished["work"] and "unfinished: a reset" in unfinished["reason"], unfinished
    world["fs"].delete_file(journal)

    with world["fs"].open_output_stream(f"{world['key']}/zz-late.jsonl") as out:
        out.write(b'{"user_id": "u1"}\n')
    late = check(world)
    assert late["work"] and "1 new archive file" in late["reason"] and "zz-late.jsonl" in late["reason"], late
    assert late["children"] == [] and not late["gateway"], late
