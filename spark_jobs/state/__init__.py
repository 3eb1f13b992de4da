"""Where operator state lives between micro-batches: in memory (tests) or in Delta tables."""
