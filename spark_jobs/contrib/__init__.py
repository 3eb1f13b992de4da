"""Worked examples of user-defined pieces (importable on the executors, like any user module)."""
