"""The services of the production-topology tier, shared by its modules: one S3 server for the run."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from prod_services import BUCKET, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    """SeaweedFS with one identity (random keys, handed over in the environment) and a bucket;
    stopped at the end, whatever happened."""
    import pyarrow.fs as pafs

    root = tmp_path_factory.mktemp("seaweedfs")
    port = free_port()
    keys = {"AWS_ACCESS_KEY_ID": f"replay{secrets.token_hex(4)}",
            "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16)}
    script = str(ROOT / "scripts" / "services" / "seaweedfs.sh")
    env = {**os.environ, **keys}
    try:
        started = subprocess.run([script, "start", str(root), str(port)], env=env, capture_output=True,
                                 text=True, timeout=900)
        assert started.returncode == 0, started.stdout + started.stderr
        endpoint = f"http://127.0.0.1:{port}"
        fs = pafs.S3FileSystem(access_key=keys["AWS_ACCESS_KEY_ID"], secret_key=keys["AWS_SECRET_ACCESS_KEY"],
                               endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                               allow_bucket_creation=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                fs.create_dir(BUCKET)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        yield {"endpoint": endpoint, "keys": keys, "fs": fs, "root": root}
    finally:
        subprocess.run([script, "stop", str(root)], timeout=60)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """PostgreSQL 15 (Debian's) from ``scripts/services/postgres.sh`` for a module's Airflow, with
    psycopg installed for Airflow's tasks: its URL and the driver's ``PYTHONPATH``; always stopped."""
    script = str(ROOT / "scripts" / "services" / "postgres.sh")
    root = tmp_path_factory.mktemp("postgres")
    driver = subprocess.run([script, "driver"], capture_output=True, text=True, timeout=300)
    assert driver.returncode == 0, driver.stderr
    try:
        started = subprocess.run([script, "start", str(root), str(free_port())],
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        yield {"url": started.stdout.strip().splitlines()[-1], "pythonpath": driver.stdout.strip()}
    finally:
        subprocess.run([script, "stop", str(root)], timeout=120)
