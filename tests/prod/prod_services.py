"""Helpers of the production-topology tier."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_standalone import free_port

__all__ = ["BUCKET", "free_port", "s3_connect_server", "signed_put"]

BUCKET = "replay"


def signed_put(endpoint: str, key: str, body: bytes, access: str, secret: str,
               headers: dict[str, str] | None = None, region: str = "us-east-1") -> int:
    """A PUT of one object (path-style ``/bucket/key``) signed with AWS Signature V4; its HTTP status.
    (What S3A sends, without the SDK: to check the store's own answer to a header.)"""
    host = endpoint.split("://", 1)[1]
    now = dt.datetime.now(dt.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    signed = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp,
              **{k.lower(): v for k, v in (headers or {}).items()}}
    names = sorted(signed)
    canonical = "\n".join(["PUT", "/" + key, "", *(f"{n}:{signed[n]}" for n in names), "",
                           ";".join(names), payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signing = f"AWS4{secret}".encode()
    for part in (day, region, "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(f"{endpoint}/{key}", data=body, method="PUT", headers={
        **{k: v for k, v in signed.items() if k != "host"},
        "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                         f"SignedHeaders={';'.join(names)}, Signature={signature}",
    })
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@contextlib.contextmanager
def s3_connect_server(store: dict, state: Path, master: str | None = None) -> Iterator[int]:
    """A Spark Connect server (``replay server start``'s code) with S3A on, the store's endpoint and
    keys in its environment only, on ``master`` (default ``local[*]``): its port, for
    ``sc://localhost:PORT``; stopped at the end."""
    from spark_jobs.execution import connect_server

    port = free_port()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**store["keys"], "REPLAY_S3A_ENDPOINT": store["endpoint"],
                            "SPARK_LOCAL_IP": "127.0.0.1"}.items():
            patch.setenv(name, value)
        patch.delenv(connect_server.TOKEN_ENV, raising=False)
        if master:
            patch.setenv("SPARK_MASTER", master)
        else:
            patch.delenv("SPARK_MASTER", raising=False)
        connect_server.start_server(port=port, directory=state)
    try:
        yield port
    finally:
        connect_server.stop_server(state)
