"""The semantics, with no Spark, Delta or Airflow below this folder.

Time and durations, window assigners (``windows/``), triggers (``triggers/``), aggregates,
window functions and evictors (``functions``), watermarks, and the engines in ``engine/``.
Everything here runs on plain Python, numpy and Arrow values; ``tests/unit/test_layers.py``
keeps it that way.
"""
