"""object_store: S3 outside the JVM is configured from the S3A settings' environment only."""

from __future__ import annotations

import os

import pytest

from spark_jobs.execution.object_store import delta_location, delta_uri, s3_filesystem, storage_options

KEYS = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}


@pytest.fixture
def env(monkeypatch):
    for name in ("REPLAY_S3A_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN",
                 *KEYS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_local_endpoint_gives_path_style_http_and_the_keys(env):
    env.setenv("REPLAY_S3A_ENDPOINT", "http://127.0.0.1:8333")
    for name, value in KEYS.items():
        env.setenv(name, value)
    assert storage_options("s3a://b/lake") == {
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "AWS_ALLOW_HTTP": "true", **KEYS}
    fs = s3_filesystem()
    assert fs.region == "us-east-1"
    assert delta_uri("s3a://b/lake/t") == "s3://b/lake/t"
    assert delta_location("s3a://b/lake/t") == ("s3://b/lake/t", storage_options("s3a://b/lake"))


def test_aws_itself_and_other_schemes(env):
    env.setenv("AWS_REGION", "eu-west-1")
    assert storage_options("s3a://b/lake") == {"AWS_REGION": "eu-west-1"}  # keys: delta-rs's chain
    assert storage_options("/tmp/lake") is None and storage_options("hdfs://nn/lake") is None
    assert delta_uri("hdfs://nn/lake") == "hdfs://nn/lake"
    # delta-rs opens local tables by their absolute path; HDFS is Spark's alone.
    assert delta_location("lake/t") == (os.path.abspath("lake/t"), None)
    assert delta_location("file:///tmp/lake") == ("/tmp/lake", None)
    assert delta_location("hdfs://nn/lake") is None
