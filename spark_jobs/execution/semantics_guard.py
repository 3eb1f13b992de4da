"""A pipeline's tables hold the results of one set of semantics (``PipelineConfig.semantics``):
each ``replay_log`` row records those it was replayed under (each ``source_files`` row those its
ingest was staged under), and a command that would replay more (run, reprocess, finishing a
killed reprocess) under others refuses before writing anything. Replaying on would mix windows,
watermarks or aggregates of both in the same tables, and restore state the new operator does not
expect. ``replay reset`` starts over instead.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import PipelineConfig
from ..exceptions import SemanticsChangedError

#: How much of a changed section the error shows, each side.
_SHOWN_CHARS = 160


def semantics_text(config: PipelineConfig) -> str:
    """``config``'s semantics as ``replay_log`` records them (canonical JSON)."""
    return json.dumps(config.semantics(), sort_keys=True, separators=(",", ":"), default=str)


def check_semantics(config: PipelineConfig, log: list[dict[str, Any]],
                    files: dict[str, dict[str, Any]]) -> None:
    """Refuse to go on from tables written under other semantics than ``config``'s: those the
    last committed batch of ``log`` (``recovery.committed_log``) was replayed under, and those the
    last ingest in ``files`` (``ingest.known_files``) was staged under (``staging``'s columns
    follow the config: its batches may not be replayed yet). Rows written before the semantics
    were recorded are not checked."""
    recorded = []
    if log:
        recorded.append((f"batch {log[-1]['batch_id']} was replayed", log[-1].get("semantics")))
    if files:
        last = max(files.values(), key=lambda row: row["ingest_id"])
        recorded.append((f"ingest {last['ingest_id']} was staged", last.get("semantics")))
    now = json.loads(semantics_text(config))
    for what, text in recorded:
        if not text:
            continue
        before = json.loads(text)
        changed = [
            f"{section}: {_shown(before.get(section))} -> {_shown(now.get(section))}"
            for section in sorted({*before, *now}) if before.get(section) != now.get(section)
        ]
        if changed:
            path = config.config_path or "PIPELINE.yaml"
            raise SemanticsChangedError(
                f"pipeline {config.name}: its config changed since {what} into {config.output_path}:"
                "\n  " + "\n  ".join(changed) + "\nReplaying on would mix results of both in the "
                "same tables. Put the config back, or start over under the new one: "
                f"`replay reset {path} --yes`, then `replay run {path}`."
            )


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."
