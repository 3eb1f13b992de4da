"""Quality tests: one small real replay per module, validated with the real suites.

Puts this directory on ``sys.path`` for the helpers (``dq_helpers``, ``archive_shim``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
