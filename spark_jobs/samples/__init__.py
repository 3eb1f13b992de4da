"""Sample archives for the demo and the benchmarks (``replay generate``): ``generator`` writes them
(and documents their format) from a ``spec``, drawing ``events`` and ``serialize``-ing them.
"""
