"""Unit tests of the pure-Python engine: no Spark, Delta or Airflow.

Puts this directory on ``sys.path`` so tests in sub-folders can import the shared helpers
(``reference``, ``fake_context``, ``pipelines``) by plain name.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
