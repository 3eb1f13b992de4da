"""A sample archive's chunks as JSON Lines text or Parquet rows (``Serializer``), with the chosen
lines corrupted in one of several realistic ways. Built with Arrow's vectorised string functions:
no Python object per record.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .events import CORRUPT, Chunk, Plan

_GARBAGE_LINES = (
    "<html><head><title>502 Bad Gateway</title></head><body><center>nginx</center></body></html>",
    "2023-11-14 22:13:20,123 ERROR [kafka-producer-network-thread] Connection to node 2 lost",
    "Ã©vÃ©nement reÃ§u ¿? \u00a0{{{ not json",
    "}{",
)
_BAD_TIMESTAMPS = ("yesterday", "2023-02-30T25:61:00Z", "not a time")
_BAD_VALUES = ("abc", "12,50", "N/A")
_JSON_CORRUPTIONS = (
    "truncated", "garbage", "csv", "array", "missing_ts", "bad_ts", "missing_key", "bad_value",
)


class Serializer:
    """Turns a partition's chunks into JSON text or an Arrow table, corrupting the chosen lines.

    The corruption draws come from their own stream, so the clean records are the same whatever
    the format.
    """

    def __init__(self, plan: Plan, partition: int):
        self.plan = plan
        self.spec = plan.spec
        self.partition = partition
        self.rng = np.random.default_rng([self.spec.seed, partition, 1])
        self.key_prefix = "u" if self.spec.kind == "clickstream" else "s"

    # JSON Lines ------------------------------------------------------------------------------
    def jsonl(self, chunk: Chunk) -> memoryview:
        """The chunk's lines, newline-terminated, as one buffer (no per-line Python objects)."""
        spec = self.spec
        if spec.iso_timestamps:
            ts_parts: list[str | pa.Array] = ['"', _iso_utc(chunk.ts), '"']
        else:
            ts_parts = [_text(chunk.ts)]
        # The json.dumps spelling (", " and ": "), so the lines round-trip through json exactly.
        parts: list[str | pa.Array] = [
            f'{{"event_id": "e{self.partition}-', _text(chunk.event_number),
            f'", "{spec.key_field}": "{self.key_prefix}', _text(chunk.key),
            '", "ts": ', *ts_parts,
            ', "ingest_ts": ', _text(chunk.ingest_ts),
            f', "partition": {self.partition}, "offset": ', _text(chunk.offset),
        ]
        if spec.kind == "clickstream":
            parts += [', "page": "', self.plan.pages.take(pa.array(chunk.page)), '"']
        else:
            parts += [', "temperature": ', _decimal_text(chunk.temperature_centi)]
        parts += [', "value": ', _decimal_text(chunk.value_centi), "}\n"]
        lines = pc.binary_join_element_wise(*[_as_arrow(part) for part in parts], "")
        corrupt = chunk.kind == CORRUPT
        if corrupt.any():
            mangled = [self.mangle_line(line) for line in lines.filter(pa.array(corrupt)).to_pylist()]
            lines = pc.replace_with_mask(lines, pa.array(corrupt), pa.array(mangled, pa.string()))
        # A string array's data buffer is exactly the concatenated lines: write it as it is.
        _, offsets, data = lines.buffers()
        bounds = np.frombuffer(offsets, dtype=np.int32, count=lines.offset + len(lines) + 1)
        return memoryview(data)[bounds[lines.offset] : bounds[-1]]

    def mangle_line(self, line: str) -> str:
        """One realistic way a line goes bad; ``line`` is the record's clean JSON line."""
        rng = self.rng
        variant = _JSON_CORRUPTIONS[int(rng.integers(len(_JSON_CORRUPTIONS)))]
        text = line.rstrip("\n")
        if variant == "truncated":  # a writer died mid-line: any proper prefix of an object
            return text[: int(rng.integers(1, len(text) - 1))] + "\n"
        if variant == "garbage":
            return _GARBAGE_LINES[int(rng.integers(len(_GARBAGE_LINES)))] + "\n"
        record = json.loads(text)
        if variant == "csv":  # a producer with the wrong serializer
            return ",".join(str(value) for value in record.values()) + "\n"
        if variant == "array":
            return json.dumps(list(record.values())) + "\n"
        if variant == "missing_ts":
            del record["ts"]
        elif variant == "bad_ts":
            record["ts"] = _BAD_TIMESTAMPS[int(rng.integers(len(_BAD_TIMESTAMPS)))]
        elif variant == "missing_key":
            del record[self.spec.key_field]
        else:
            record["value"] = _BAD_VALUES[int(rng.integers(len(_BAD_VALUES)))]
        return json.dumps(record) + "\n"

    # Parquet ---------------------------------------------------------------------------------
    def table(self, chunk: Chunk) -> pa.Table:
        """The chunk as typed columns; corrupt rows lose their ``ts`` or key (or get a bad ts)."""
        spec = self.spec
        size = len(chunk.kind)
        variants = ["missing_ts", "missing_key"] + (["bad_ts"] if spec.iso_timestamps else [])
        corrupt = np.flatnonzero(chunk.kind == CORRUPT)
        chosen = np.array(variants)[self.rng.integers(len(variants), size=corrupt.size)]
        missing_ts = np.zeros(size, dtype=bool)
        missing_ts[corrupt[chosen == "missing_ts"]] = True
        missing_key = np.zeros(size, dtype=bool)
        missing_key[corrupt[chosen == "missing_key"]] = True

        if spec.iso_timestamps:
            ts = _iso_utc(chunk.ts)
            bad = corrupt[chosen == "bad_ts"]
            if bad.size:
                bad_mask = np.zeros(size, dtype=bool)
                bad_mask[bad] = True
                replacements = [_BAD_TIMESTAMPS[i % len(_BAD_TIMESTAMPS)] for i in range(bad.size)]
                ts = pc.replace_with_mask(ts, pa.array(bad_mask), pa.array(replacements, pa.string()))
            ts = pc.if_else(pa.array(missing_ts), pa.scalar(None, pa.string()), ts)
        else:
            ts = pa.array(chunk.ts, pa.int64(), mask=missing_ts)
        key = pc.binary_join_element_wise(pa.scalar(self.key_prefix), _text(chunk.key), "")
        key = pc.if_else(pa.array(missing_key), pa.scalar(None, pa.string()), key)
        columns: dict[str, pa.Array] = {
            "event_id": pc.binary_join_element_wise(
                pa.scalar(f"e{self.partition}-"), _text(chunk.event_number), ""
            ),
            spec.key_field: key,
            "ts": ts,
            "ingest_ts": pa.array(chunk.ingest_ts, pa.int64()),
            # int32 like a Kafka partition number: a reader's schema may say INT, and Parquet
            # readers refuse to narrow an INT64 column.
            "partition": pa.array(np.full(size, self.partition, dtype=np.int32)),
            "offset": pa.array(chunk.offset, pa.int64()),
        }
        if spec.kind == "clickstream":
            columns["page"] = self.plan.pages.take(pa.array(chunk.page))
        else:
            columns["temperature"] = pa.array(chunk.temperature_centi / 100.0)
        columns["value"] = pa.array(chunk.value_centi / 100.0)
        return pa.table(columns)


def _as_arrow(part: str | pa.Array) -> pa.Array | pa.Scalar:
    return pa.scalar(part, pa.string()) if isinstance(part, str) else part


def _text(values: np.ndarray) -> pa.Array:
    """Decimal spelling of integers."""
    return pc.cast(pa.array(values, pa.int64()), pa.string())


def _decimal_text(hundredths: np.ndarray) -> pa.Array:
    """Python's repr of ``hundredths / 100`` (12.5, 0.0, -3.07), built from the integers.

    Exact and vectorised: ``repr`` of a 2-decimal float is its shortest round-trip spelling,
    i.e. the decimal with trailing zeros dropped but one digit kept after the point.
    """
    magnitude = np.abs(hundredths)
    whole, cents = magnitude // 100, magnitude % 100
    fraction = pc.if_else(
        pa.array(cents % 10 == 0),
        _text(cents // 10),
        pc.utf8_lpad(_text(cents), 2, "0"),
    )
    sign = pc.if_else(pa.array(hundredths < 0), pa.scalar("-"), pa.scalar(""))
    return pc.binary_join_element_wise(sign, _text(whole), pa.scalar("."), fraction, "")


def _iso_utc(epoch_ms: np.ndarray) -> pa.Array:
    """``2023-11-14T22:13:20.123Z`` for each epoch ms.

    Arrow's strftime costs ~1 us a value, so it formats only the distinct minutes (a chunk covers
    few) and the seconds and milliseconds are padded integers.
    """
    minute = epoch_ms // 60_000
    distinct, which = np.unique(minute, return_inverse=True)
    prefixes = pc.strftime(
        pa.array(distinct * 60_000, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        format="%Y-%m-%dT%H:%M:",
    ).take(pa.array(which))
    within = epoch_ms - minute * 60_000
    return pc.binary_join_element_wise(
        prefixes,
        pc.utf8_lpad(_text(within // 1000), 2, "0"),
        pa.scalar("."),
        pc.utf8_lpad(_text(within % 1000), 3, "0"),
        pa.scalar("Z"),
        "",
    )
