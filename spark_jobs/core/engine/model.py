"""What one key's run gives back, shared by the dispatch (``keyed``) and the kernels it calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .operator import LateRecord, Pane, WindowStateRow


@dataclass
class KeyOutput:
    """A key's panes, late records, state rows to keep, leak notes and side outputs, in order."""

    panes: list[Pane]
    late: list[LateRecord]
    state: list[WindowStateRow]
    leaks: list[str]
    sides: list[Any] = field(default_factory=list)
