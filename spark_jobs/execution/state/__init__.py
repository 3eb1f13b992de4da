"""Where operator state lives between micro-batches: the Delta tables and the operation journal.
(The in-memory runner used by tests is ``spark_jobs.testing.memory_replay``.)"""
