"""Batch replay of archived event logs with Apache Flink's window semantics on Spark and Delta.

The pure engine (``windows``, ``triggers``, ``watermarks``, ``aggregates``, ``operator``) has no
Spark, Delta or Airflow import; the Spark side (``session``, ``sources``, ``replay``, ``keyed``)
drives it over whole micro-batches.
"""

__version__ = "0.1.0"
