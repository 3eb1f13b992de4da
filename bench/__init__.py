"""The benchmark harness (``python -m bench.harness``, ``make bench``) and the profilers: tooling
kept outside the product package ``spark_jobs``; run from the project root."""
