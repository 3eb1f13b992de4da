"""Batch replay of archived event logs with Apache Flink's window semantics on Spark and Delta.

Layers, each importing only the ones above it in this list:

- ``core``: the semantics (windows, triggers, watermarks, aggregates, functions, the engines); no
  Spark, Delta or Airflow import.
- ``config``: YAML to typed config, built from ``core``'s parts; ``pipeline_spec``: the engine's
  per-pipeline spec built from a config.
- ``execution``: Spark and Delta drive the engine over whole micro-batches.
- ``interfaces``: the ``replay`` command line, status and the Airflow helpers; ``quality``: data
  quality suites, reconciliation and the report.
- ``testing`` (the in-memory runner) and ``samples`` (the sample archive generator).

``triggers``, ``windows``, ``functions``, ``process`` and ``joins`` at this level re-export the
stable import paths user code and pipeline YAML name; ``contrib`` holds worked examples.
"""

__version__ = "0.1.0"
