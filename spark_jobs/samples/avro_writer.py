"""A small Avro object container writer for the sample archives (``replay generate --format avro``):
the sample's Arrow tables (``Serializer.table``) as Avro records, deflate-compressed, in blocks of
``BLOCK_RECORDS`` records, as Kafka Connect's S3 sink or a Flink file sink write them.

The project reads Avro through Spark's Avro source; writing it needs no library here (fastavro is
a test dependency only, the second writer of the Avro tests): the sample columns are strings,
longs, ints and doubles, each nullable (``["null", T]``: Parquet's corrupt rows lose their ``ts``
or key), whose binary encoding is a few lines (Avro 1.12 specification, "Binary Encoding" and
"Object Container Files"). An integer ``ts`` is a ``timestamp-millis``, as a Kafka Connect sink
writes a Connect ``Timestamp``. The sync marker is derived from the file's name and schema, so the
same spec gives the same bytes.

Speed: a Python call or two a value (6 to 9 s a 100,000 records on the 2-core box while Spark
tests ran beside it); meant for samples and tests.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

MAGIC = b"Obj\x01"
BLOCK_RECORDS = 4000
_DOUBLE = struct.Struct("<d")
_AVRO_TYPES = {pa.string(): "string", pa.int64(): "long", pa.int32(): "int", pa.float64(): "double"}


def avro_schema(schema: pa.Schema) -> dict:
    """The Avro record schema of a sample table: every field nullable; ``ts`` of int64 a
    ``timestamp-millis``."""
    fields = []
    for field in schema:
        kind: str | dict = _AVRO_TYPES[field.type]
        if field.name == "ts" and kind == "long":
            kind = {"type": "long", "logicalType": "timestamp-millis"}
        fields.append({"name": field.name, "type": ["null", kind], "default": None})
    return {"type": "record", "name": "Event", "namespace": "replay.sample", "fields": fields}


def write_avro(path: Path, tables: Iterator[pa.Table], name: str) -> None:
    """Write ``tables`` (one schema) to ``path`` as one Avro file; ``name`` seeds the sync marker."""
    with open(path, "wb") as handle:
        sync = b""
        for table in tables:
            if not sync:
                schema = json.dumps(avro_schema(table.schema), separators=(",", ":"))
                sync = hashlib.sha256(f"{name}\n{schema}".encode()).digest()[:16]
                handle.write(_header(schema, sync))
            # Each value encoded column by column (one type test a column, not a value), then
            # the rows' values joined block by block.
            columns = [_encoded(f.type, table.column(i).to_pylist()) for i, f in enumerate(table.schema)]
            rows = [b"".join(values) for values in zip(*columns, strict=True)]
            for start in range(0, table.num_rows, BLOCK_RECORDS):
                handle.write(_block(rows[start:start + BLOCK_RECORDS], sync))
        if not sync:
            raise ValueError(f"no rows to write to {path}: an Avro file needs its schema from a table")


def _encoded(kind: pa.DataType, values: list) -> list[bytes]:
    """Each value's binary encoding as the ``["null", T]`` union's branch 0 (null) or 1."""
    if kind == pa.string():
        return [b"\x00" if v is None else b"\x02" + _bytes(v.encode()) for v in values]
    if kind == pa.float64():
        return [b"\x00" if v is None else b"\x02" + _DOUBLE.pack(v) for v in values]
    return [b"\x00" if v is None else b"\x02" + _long(v) for v in values]


def _header(schema: str, sync: bytes) -> bytes:
    meta = {"avro.schema": schema.encode(), "avro.codec": b"deflate"}
    out = bytearray(MAGIC)
    out += _long(len(meta))
    for key, value in meta.items():
        out += _bytes(key.encode()) + _bytes(value)
    out += _long(0) + sync
    return bytes(out)


def _block(rows: list[bytes], sync: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)  # raw deflate, as Avro's deflate codec
    packed = compressor.compress(b"".join(rows)) + compressor.flush()
    return _long(len(rows)) + _long(len(packed)) + packed + sync


def _long(value: int) -> bytes:
    """Avro's zig-zag varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _bytes(data: bytes) -> bytes:
    return _long(len(data)) + data
