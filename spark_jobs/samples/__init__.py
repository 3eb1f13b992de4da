"""Sample archives for the demo and the benchmarks (``replay generate``)."""
