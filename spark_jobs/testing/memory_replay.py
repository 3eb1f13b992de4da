"""An in-memory replay: the same batches, timelines and per-key procedure as the Spark job,
with state held in dictionaries. Used as the test oracle and for replay debugging."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import PipelineConfig
from ..core.engine.keyed import process_key_columns
from ..core.engine.model import LateRecord, Pane, WindowStateRow
from ..core.engine.operator import OperatorSpec
from ..core.watermarks import Timeline, WatermarkState, compute_pass_timelines
from ..pipeline_spec import operator_spec


@dataclass
class Record:
    """One accepted input record, as the engine sees it."""

    key: tuple[str, ...]
    event_time: int
    values: tuple[Any, ...]
    ingest_time: int | None = None
    partition: str = "0"
    fields: dict[str, Any] | None = None
    input: int = 0  # two-input pipelines: 0 left, 1 right


@dataclass
class MemoryReplay:
    """Replays records batch by batch, keeping state between batches like the Delta store."""

    config: PipelineConfig
    spec: OperatorSpec
    watermark: WatermarkState = field(default_factory=WatermarkState)
    state: dict[tuple[str, ...], list[WindowStateRow]] = field(default_factory=dict)
    panes: list[tuple[tuple[str, ...], Pane]] = field(default_factory=list)
    late: list[tuple[tuple[str, ...], LateRecord]] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    sides: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)
    next_seq: int = 0

    def run_batch(self, records: Sequence[Record], finalize: bool = False) -> None:
        self.run_pass([(records, finalize)])

    def run_pass(self, batches: Sequence[tuple[Sequence[Record], bool]]) -> None:
        """Run consecutive batches ``(records, finalize)`` in one go, as the Spark job's pass does:
        each batch gets its own timeline and every key runs once over them joined."""
        inputs = self.config.input_watermarks()
        seq_start = self.next_seq
        records: list[Record] = [record for batch, _ in batches for record in batch]
        ingest = None
        if self.config.source.ingest_time:
            ingest = np.array([r.ingest_time for r in records], dtype=np.int64)
        if inputs is None:
            partitions = [r.partition for r in records]
        else:
            names = list(inputs)
            partitions = [f"{names[r.input]}/{r.partition}" for r in records]
        timelines, states = compute_pass_timelines(
            self.config.watermark,
            self.watermark,
            seq_start,
            np.array([r.event_time for r in records], dtype=np.int64),
            ingest,
            np.array(partitions, dtype=object),
            [(len(batch), finalize) for batch, finalize in batches],
            inputs,
        )
        self.watermark = states[-1]
        timeline = Timeline.concat(timelines)
        by_key: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i, record in enumerate(records):
            by_key[record.key].append(i)
        needs_element = self.spec.needs_element
        for key in sorted(set(by_key) | set(self.state)):
            rows = by_key.get(key, [])
            values = [(records[i].input,) if inputs else records[i].values for i in rows]
            out = process_key_columns(
                self.spec,
                timeline,
                self.state.get(key, []),
                [seq_start + i for i in rows],
                [records[i].event_time for i in rows],
                [list(column) for column in zip(*values, strict=True)],
                [records[i].fields for i in rows] if needs_element else None,
                key,
            )
            self.panes.extend((key, pane) for pane in out.panes)
            self.late.extend((key, late) for late in out.late)
            self.leaks.extend(out.leaks)
            self.sides.extend((key, side) for side in out.sides)
            if out.state:
                self.state[key] = out.state
            else:
                self.state.pop(key, None)
        self.next_seq = seq_start + len(records)

    def run(
        self, records: Sequence[Record], batch_size: int, finalize: bool = True, batches_per_pass: int = 1
    ) -> None:
        batches = [(records[lo : lo + batch_size], False) for lo in range(0, len(records), batch_size)]
        if finalize:
            batches.append(([], True))
        for lo in range(0, len(batches), batches_per_pass):
            self.run_pass(batches[lo : lo + batches_per_pass])

    def emitted(self) -> list[tuple[tuple[str, ...], Pane]]:
        """Panes in emission order (firings of different keys at one timer time: by key)."""
        return sorted(
            self.panes,
            key=lambda kp: (kp[1].emit_seq, kp[1].emit_step, kp[1].fire_time or 0, kp[0], kp[1].window),
        )


__all__ = ["MemoryReplay", "Record", "operator_spec"]
