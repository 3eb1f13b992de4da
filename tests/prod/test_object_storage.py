"""Production-topology tier, object storage: the replay reads its archive from, and writes its
Delta tables to, a real S3-compatible server (SeaweedFS's S3 gateway, built from its Go module and
started by ``scripts/services/seaweedfs.sh`` on 127.0.0.1) through Hadoop's S3A connector.

Proves: the results on the bucket equal a local replay row for row; a replay killed before its
commit resumes on the bucket (the lease of the dead run is taken over, Delta RESTORE on S3); a
second writer is refused by the lease; the store enforces ``If-None-Match: *``; a changed archive
object is detected by its size, Last-Modified and ETag. ``make test-prod`` (run on purpose)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from prod_services import BUCKET, s3_connect_server, signed_put

pytestmark = [pytest.mark.slow, pytest.mark.prod, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMPARED = ("window_results", "window_latest", "late_events", "quarantine")
UNTIL = "2023-11-14T22:25:00+00:00"  # the demo's batches 0 and 1 are due before it


@pytest.fixture(scope="module")
def world(store, spark_cluster, tmp_path_factory):
    """A project base with the demo archive, uploaded to the bucket; the replay's environment
    (S3A on, endpoint and keys from the environment only); a local replay to compare with."""
    import pyarrow.fs as pafs

    base = tmp_path_factory.mktemp("prod-base")
    env = {**os.environ, **store["keys"], "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "REPLAY_BASE_DIR": str(base), "REPLAY_S3A_ENDPOINT": store["endpoint"],
           # The tier's standalone cluster (the local replay: local[2]); drivers bind and advertise
           # 127.0.0.1, as the cluster does.
           "SPARK_MASTER": spark_cluster, "SPARK_LOCAL_IP": "127.0.0.1"}

    def run(*args: str, check: bool = True, extra: dict[str, str] | None = None, timeout: float = 600):
        done = subprocess.run(list(args), capture_output=True, text=True, env={**env, **(extra or {})},
                              cwd=base, timeout=timeout)
        if check:
            assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done

    run("replay", "generate", "data/archive/clicks")
    pafs.copy_files(str(base / "data" / "archive" / "clicks"), f"{BUCKET}/archive/clicks",
                    source_filesystem=pafs.LocalFileSystem(), destination_filesystem=store["fs"])
    demo = yaml.safe_load((ROOT / "include" / "pipelines" / "clicks_per_minute.yaml").read_text())

    def pipeline(name: str, source: str, output: str, batch: dict | None = None) -> Path:
        config = {**demo, "source": {**demo["source"], "path": source}, "output": {"path": output}}
        if batch:
            config["batch"] = {**demo.get("batch", {}), **batch}
        path = base / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    local = pipeline("local", "data/archive/clicks", "lakehouse/local")
    started = time.monotonic()
    run("replay", "run", str(local), "--finalize", "--quiet", extra={"SPARK_MASTER": "local[2]"})
    local_seconds = time.monotonic() - started
    return {"run": run, "base": base, "pipeline": pipeline, "env": env, "store": store,
            "expected": tables_local(base / "lakehouse" / "local"), "local_seconds": local_seconds}


def _read(uri: str, options: dict[str, str] | None) -> list[dict]:
    """A Delta table's rows, read with delta-rs (no Spark)."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    query = QueryBuilder()
    query.register("t", DeltaTable(uri, storage_options=options))
    return pa.RecordBatchReader.from_stream(query.execute("SELECT * FROM t")).read_all().to_pylist()


def _rows(uri: str, options: dict[str, str] | None) -> list:
    # The archive's location differs by design (a local path against an s3a:// URI): compare the
    # rest of a quarantined record.
    return sorted(repr({k: v for k, v in row.items() if k not in ("source_file", "file", "path")})
                  for row in _read(uri, options))


def _table(store, key: str) -> list[dict]:
    return _read(f"s3://{BUCKET}/{key}", _options(store))


def _options(store) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": store["endpoint"], "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": store["keys"]["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": store["keys"]["AWS_SECRET_ACCESS_KEY"]}


def tables_local(root: Path) -> dict[str, list]:
    return {t: _rows(str(root / t), None) for t in COMPARED if (root / t / "_delta_log").is_dir()}


def tables_s3(store, prefix: str) -> dict[str, list]:
    options = _options(store)
    found = {}
    for table in COMPARED:
        listing = store["fs"].get_file_info(f"{BUCKET}/{prefix}/{table}/_delta_log")
        if listing.type.name != "NotFound":
            found[table] = _rows(f"s3://{BUCKET}/{prefix}/{table}", options)
    return found


def writers(store, key: str) -> set[str]:
    """Who made a table's commits on the bucket: ``delta-rs`` (a pass's writes and its replay_log
    commit, from the driver or client, and a first pass's creation of its tables) or ``spark``
    (the ingest's staging and quarantine, compactions, recovery)."""
    from deltalake import DeltaTable

    history = DeltaTable(f"s3://{BUCKET}/{key}", storage_options=_options(store)).history()
    return {"delta-rs" if str(h.get("clientVersion", "")).startswith("delta-rs") else "spark"
            for h in history}


def lease(store, prefix: str):
    return store["fs"].get_file_info(f"{BUCKET}/{prefix}/_replay.lock")


def test_replay_on_the_bucket_equals_a_local_replay(world):
    config = world["pipeline"]("s3", f"s3a://{BUCKET}/archive/clicks", f"s3a://{BUCKET}/lakehouse/clicks")
    started = time.monotonic()
    # Two runs (batches 0-1, then the rest and the end of input): the second run's pass appends,
    # MERGEs and overwrites tables that exist, which the driver does with delta-rs on the bucket.
    world["run"]("replay", "run", str(config), "--until", UNTIL, "--quiet")
    world["run"]("replay", "run", str(config), "--finalize", "--quiet")
    seconds = time.monotonic() - started
    print(f"replay run --finalize: local {world['local_seconds']:.0f} s, on the bucket {seconds:.0f} s")
    got = tables_s3(world["store"], "lakehouse/clicks")
    assert set(got) == set(world["expected"]) and got == world["expected"]
    # A pass's own writes, the creation of its tables included, and the ingest's tables (a small
    # ingest read once) are the driver's delta-rs commits on the bucket (conditional PUTs).
    for table in ("window_results", "window_latest", "operator_state", "replay_log", "source_files",
                  "staging", "quarantine"):
        assert writers(world["store"], f"lakehouse/clicks/{table}") == {"delta-rs"}, table
    assert lease(world["store"], "lakehouse/clicks").type.name == "NotFound"  # released
    status = world["run"]("replay", "status", str(config)).stdout
    assert "finalized" in status, status


def test_killed_before_its_commit_resumes_on_the_bucket(world):
    # Its ingest read twice, staged by Spark on the bucket (the other route; the same tables).
    config = world["pipeline"]("killed", f"s3a://{BUCKET}/archive/clicks", f"s3a://{BUCKET}/lakehouse/killed",
                               batch={"stage_on_driver_max_records": 0})
    crashed = world["run"]("replay", "run", str(config), "--finalize", "--quiet", check=False,
                           extra={"REPLAY_CRASH_AT": "batch:2:before-commit"})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    # The dead run's lease is still on the bucket; the next run on this host sees its holder is
    # gone, takes it over, puts the tables back (RESTORE on S3) and finishes.
    assert lease(world["store"], "lakehouse/killed").type.name == "File"
    world["run"]("replay", "run", str(config), "--finalize", "--quiet")
    assert tables_s3(world["store"], "lakehouse/killed") == world["expected"]
    assert writers(world["store"], "lakehouse/killed/staging") == {"spark"}
    assert lease(world["store"], "lakehouse/killed").type.name == "NotFound"


def test_a_second_writer_is_refused(world):
    store = world["store"]
    config = world["pipeline"]("second", f"s3a://{BUCKET}/archive/clicks", f"s3a://{BUCKET}/lakehouse/second")
    # A live holder (this test's own process, on this host) and one on another host: both refused
    # before anything is written, with the lease named.
    with open(f"/proc/{os.getpid()}/stat") as stat:
        start = stat.read().rsplit(")", 1)[1].split()[19]
    for holder in (f"host {socket.gethostname()} pid {os.getpid()}:{start} since now",
                   "host elsewhere pid 1:1 since now"):
        with store["fs"].open_output_stream(f"{BUCKET}/lakehouse/second/_replay.lock") as out:
            out.write(holder.encode())
        refused = world["run"]("replay", "run", str(config), "--quiet", check=False)
        assert refused.returncode != 0
        message = refused.stdout + refused.stderr
        assert "already being replayed" in message and holder.split(" since")[0] in message, message[-2000:]
        assert store["fs"].get_file_info(f"{BUCKET}/lakehouse/second/replay_log").type.name == "NotFound"


def test_the_store_refuses_a_conditional_put_over_an_existing_object(world):
    """What makes the lease safe against two writers racing past S3A's existence check: the store
    itself refuses ``PUT`` with ``If-None-Match: *`` when the object exists (412)."""
    store = world["store"]
    keys = store["keys"]
    codes = [signed_put(store["endpoint"], f"{BUCKET}/conditional/lease", b"holder",
                        keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"], {"If-None-Match": "*"})
             for _ in range(2)]
    assert codes == [200, 412], codes


def test_a_changed_archive_object_is_refused(world):
    """Archive change detection on objects: size, Last-Modified and the ETag, as S3A reports them
    (the ingest records each object's ETag in ``source_files``)."""
    import pyarrow.fs as pafs

    store = world["store"]
    fs = store["fs"]
    pafs.copy_files(str(world["base"] / "data" / "archive" / "clicks"), f"{BUCKET}/archive/changed",
                    source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    config = world["pipeline"]("changed", f"s3a://{BUCKET}/archive/changed", f"s3a://{BUCKET}/lakehouse/changed")
    world["run"]("replay", "run", str(config), "--quiet")
    listing = fs.get_file_info(pafs.FileSelector(f"{BUCKET}/archive/changed", recursive=True))
    files = sorted(i.path for i in listing if i.type.name == "File")
    recorded = {row["path"]: row["etag"] for row in _table(store, "lakehouse/changed/source_files")}
    assert set(recorded) == {f"s3a://{path}" for path in files}
    for path in files:  # the store's own ETag of each object, as a GET returns it
        with fs.open_input_file(path) as handle:
            etag = handle.metadata()["ETag"]
            assert recorded[f"s3a://{path}"] == (etag.decode() if isinstance(etag, bytes) else etag), path
    with fs.open_input_stream(files[0]) as handle:
        content = handle.read()
    time.sleep(1.5)  # Last-Modified has whole seconds: the rewrite is a second later
    with fs.open_output_stream(files[0]) as out:  # same size, new content and Last-Modified
        out.write(content[:-2] + (b"9\n" if content[-2:] != b"9\n" else b"8\n"))
    refused = world["run"]("replay", "run", str(config), "--quiet", check=False)
    message = refused.stdout + refused.stderr
    assert refused.returncode != 0, message[-2000:]
    assert "archive changed" in message and "changed: s3a://" in message, message[-2000:]
    assert "etag " in message, message[-2000:]  # new content, new ETag


@pytest.fixture(scope="module")
def connect_remote(world, tmp_path_factory):
    """A Spark Connect server with S3A on (the store's endpoint and keys in its environment only):
    ``sc://localhost:PORT`` for clients."""
    with s3_connect_server(world["store"], tmp_path_factory.mktemp("connect-s3")) as port:
        yield f"sc://localhost:{port}"


def test_a_spark_connect_client_replays_on_the_bucket(world, connect_remote):
    """Object storage over Spark Connect: the client has no Hadoop file system, so the lease (a
    conditional PUT), the operation journal and a table's drop go through its own S3 calls
    (``object_store``), while the server's S3A reads the archive and writes the tables. A client
    killed before its commit leaves its lease; the next client takes it over (its session's
    operations on the server waited for), puts the tables back and finishes; a reset deletes the
    tables on the bucket; a second writer is refused."""
    store, run = world["store"], world["run"]
    remote = {"SPARK_REMOTE": connect_remote}
    config = world["pipeline"]("connect", f"s3a://{BUCKET}/archive/clicks",
                               f"s3a://{BUCKET}/lakehouse/connect")
    # Batches 0-1 first: the killed pass (batch 2 on) then writes tables that exist, with delta-rs
    # from the client, and the next run puts them back (Spark's RESTORE on the bucket).
    run("replay", "run", str(config), "--until", UNTIL, "--quiet", extra=remote)
    crashed = run("replay", "run", str(config), "--finalize", "--quiet", check=False,
                  extra={**remote, "REPLAY_CRASH_AT": "batch:2:before-commit"})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    held = store["fs"].open_input_stream(f"{BUCKET}/lakehouse/connect/_replay.lock").read().decode()
    assert " connect " in held and " session " in held, held  # the dead client's session is named
    run("replay", "run", str(config), "--finalize", "--quiet", extra=remote)
    assert tables_s3(store, "lakehouse/connect") == world["expected"]
    assert writers(store, "lakehouse/connect/window_latest") == {"spark", "delta-rs"}  # the client's MERGE
    assert lease(store, "lakehouse/connect").type.name == "NotFound"

    with store["fs"].open_output_stream(f"{BUCKET}/lakehouse/connect/_replay.lock") as out:
        out.write(b"host elsewhere pid 1:1 since now")
    refused = run("replay", "run", str(config), "--quiet", check=False, extra=remote)
    assert refused.returncode != 0 and "already being replayed" in refused.stdout + refused.stderr
    store["fs"].delete_file(f"{BUCKET}/lakehouse/connect/_replay.lock")

    run("replay", "reset", str(config), "--yes", extra=remote)
    assert tables_s3(store, "lakehouse/connect") == {}
    left = store["fs"].get_file_info(pafs_selector(f"{BUCKET}/lakehouse/connect"))
    assert [info.path for info in left] == [], left  # tables, journal and lease all gone


def pafs_selector(root: str):
    import pyarrow.fs as pafs

    return pafs.FileSelector(root, recursive=True, allow_not_found=True)
