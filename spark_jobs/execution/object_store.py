"""Object storage (``s3a://``) reached without a JVM: delta-rs's storage options, a pyarrow
``S3FileSystem``, an archive listing as Hadoop's S3A names and times it, small objects (read,
written, created only if absent, deleted) and a table's prefix deleted. What a Spark Connect
client, which has no Hadoop ``FileSystem``, does on a bucket: the lease, the journal, a drop.

One home for the settings, taken from the same environment as the S3A connector's
(``spark_session.s3a_conf``), never from a config file: ``REPLAY_S3A_ENDPOINT`` (an S3-compatible
server: path-style requests, plain http allowed for an ``http://`` endpoint), ``AWS_REGION``
(default ``us-east-1``, as S3A's), and the keys ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
(``AWS_SESSION_TOKEN``). Without an endpoint, AWS itself.

Only ``s3a://`` (and ``s3://``) is served here; any other scheme returns None / raises, and the
callers (``pending_work``) then answer "work": Spark's file systems decide.
"""

from __future__ import annotations

import os
from typing import Any

from ..config import local_path
from ..exceptions import ConfigError
from .archive_files import ArchiveFile, data_suffixes, in_archive_order, is_data_file

S3_SCHEMES = ("s3a://", "s3://")


def is_s3(path: str) -> bool:
    return path.startswith(S3_SCHEMES)


def reachable_without_jvm(path: str) -> bool:
    """Whether a process without Hadoop's ``FileSystem`` (no session, or a Spark Connect client)
    reaches ``path``: the local disk, which a client shares with its server, or S3 (here)."""
    return local_path(path) is not None or is_s3(path)


def require_reachable_without_jvm(path: str, field: str = "output.path") -> None:
    """A clear ConfigError, before anything is written, for a path a Spark Connect client cannot
    reach itself (its lease, journal and drops): ``gs://``, ``hdfs://``, ``abfss://`` ..."""
    if not reachable_without_jvm(path):
        raise ConfigError(field, f"a Spark Connect client keeps a pipeline's lock and journal on the "
                                 f"local disk or on S3 (s3a://) only, not at {path}; run it in-process "
                                 f"(without --remote / SPARK_REMOTE) or move the output")


def _region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def delta_uri(path: str) -> str:
    """A table's location for delta-rs: ``s3a://`` is Hadoop's name for ``s3://``."""
    return "s3://" + path.removeprefix("s3a://") if path.startswith("s3a://") else path


#: A Delta table as delta-rs opens it: its URI and ``storage_options``.
DeltaLocation = tuple[str, dict[str, str] | None]


def delta_location(path: str) -> DeltaLocation | None:
    """Where delta-rs finds the Delta table at ``path``: its URI and ``storage_options``, or None
    when a process without a JVM cannot reach it (HDFS, ``gs://``, ...: Spark's alone)."""
    local = local_path(path)
    if local is not None:
        return os.path.abspath(local), None
    return (delta_uri(path), storage_options(path)) if is_s3(path) else None


def storage_options(path: str) -> dict[str, str] | None:
    """delta-rs's ``storage_options`` for a table at ``path``: None off object storage (delta-rs's
    own defaults), else the endpoint, path-style, http and region of the S3A settings and the keys."""
    if not is_s3(path):
        return None
    options = {"AWS_REGION": _region()}
    endpoint = os.environ.get("REPLAY_S3A_ENDPOINT")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"  # fs.s3a.path.style.access=true
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if os.environ.get(name):
            options[name] = os.environ[name]
    return options


def s3_filesystem() -> Any:
    """A pyarrow ``S3FileSystem`` with the same settings (keys: explicit, else the SDK's chain)."""
    import pyarrow.fs as pafs

    kwargs: dict[str, Any] = {"region": _region()}
    endpoint = os.environ.get("REPLAY_S3A_ENDPOINT")
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs.update(endpoint_override=host.rstrip("/") if host else scheme,
                      scheme=scheme if host else "https", force_virtual_addressing=False)
    keys = _explicit_keys()
    if keys is not None:
        kwargs.update(access_key=keys[0], secret_key=keys[1], session_token=keys[2])
    return pafs.S3FileSystem(**kwargs)


def _explicit_keys() -> tuple[str, str, str | None] | None:
    """The access key, secret and session token from the environment when both keys are set;
    None: the client's own credential chain (an instance profile, ``~/.aws``)."""
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        return (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                os.environ.get("AWS_SESSION_TOKEN"))
    return None


def _key(path: str) -> str:
    """``bucket/key`` (pyarrow's path) from ``s3a://bucket/key``."""
    if not is_s3(path):
        raise ValueError(f"{path} is not on S3")
    return path.split("://", 1)[1].rstrip("/")


def _mtime_ms(info: Any) -> int:
    # S3A reports the object's Last-Modified as epoch milliseconds (listing: the XML's
    # LastModified; a single object: the HEAD's header, whole seconds).
    return info.mtime_ns // 1_000_000


def list_s3_archive(path: str, source_format: str, layout: str | None = None,
                    fs: Any = None) -> list[ArchiveFile]:
    """The data files of an archive on S3, in archive order, with the path strings
    (``s3a://bucket/key``), sizes and modification times (ms) ``sources.list_archive`` gets from
    S3A for the same objects. Raises FileNotFoundError / ValueError as ``list_local_archive``."""
    import pyarrow.fs as pafs

    fs = fs or s3_filesystem()
    scheme = path.split("://", 1)[0]
    root = _key(path)
    suffixes = data_suffixes(source_format)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(path)
    if info.type == pafs.FileType.File:
        if not root.lower().endswith(suffixes):
            raise ValueError(f"{path} is not a {source_format} file ({', '.join(suffixes)})")
        return [ArchiveFile(f"{scheme}://{root}", info.size, _mtime_ms(info))]
    files = []
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if entry.type != pafs.FileType.File:
            continue
        if is_data_file(entry.path[len(root) + 1:], suffixes):
            files.append(ArchiveFile(f"{scheme}://{entry.path}", entry.size, _mtime_ms(entry)))
    return in_archive_order(files, layout)


def read_text(path: str, fs: Any = None) -> str | None:
    """A small object's text; None when it does not exist."""
    import pyarrow.fs as pafs

    fs = fs or s3_filesystem()
    if fs.get_file_info(_key(path)).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(_key(path)) as stream:
        return stream.read().decode()


def list_names(path: str, fs: Any = None) -> list[str]:
    """The names directly below ``path`` (a "directory"); empty when there is none."""
    import pyarrow.fs as pafs

    fs = fs or s3_filesystem()
    root = _key(path)
    selector = pafs.FileSelector(root, allow_not_found=True, recursive=False)
    return [entry.base_name for entry in fs.get_file_info(selector)]


def write_text(path: str, text: str, fs: Any = None) -> None:
    """Write a small object (one PUT: a reader sees the old object or the new one)."""
    fs = fs or s3_filesystem()
    with fs.open_output_stream(_key(path)) as stream:
        stream.write(text.encode())


def delete(path: str, fs: Any = None) -> None:
    """Delete an object; nothing to do when it does not exist."""
    import pyarrow.fs as pafs

    fs = fs or s3_filesystem()
    if fs.get_file_info(_key(path)).type == pafs.FileType.File:
        fs.delete_file(_key(path))


def delete_tree(path: str, fs: Any = None) -> None:
    """Delete every object below ``path`` (a table's prefix); nothing to do when there is none."""
    import pyarrow.fs as pafs

    fs = fs or s3_filesystem()
    if fs.get_file_info(_key(path)).type != pafs.FileType.NotFound:
        fs.delete_dir(_key(path))


def create_exclusive(path: str, data: bytes) -> bool:
    """Create an object only if none exists: a PUT with ``If-None-Match: *``, so the store itself
    lets one of two racing writers win (what S3A's conditional create sends). True when created,
    False when the object exists. pyarrow cannot send the header: boto3's client, with the same
    settings as ``s3_filesystem``."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    kwargs: dict[str, Any] = {"region_name": _region()}
    endpoint = os.environ.get("REPLAY_S3A_ENDPOINT")
    if endpoint:
        kwargs.update(endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
    keys = _explicit_keys()
    if keys is not None:
        kwargs.update(aws_access_key_id=keys[0], aws_secret_access_key=keys[1], aws_session_token=keys[2])
    bucket, _, key = _key(path).partition("/")
    try:
        boto3.client("s3", **kwargs).put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except ClientError as error:
        # 412: the object exists; 409: another conditional PUT of it is in flight (AWS).
        if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
            return False
        raise
    return True
