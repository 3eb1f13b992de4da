"""Runners for tests and debugging: the in-memory replay that drives the same per-key engine as
Spark, without a JVM.
"""
