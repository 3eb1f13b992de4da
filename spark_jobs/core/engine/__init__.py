"""The engines: the per-record reference operator, the two vectorised kernels that must agree with
it, keyed process functions, joins, the per-key dispatch (``keyed``) every execution path calls,
and the types they all share (``model``: panes, late records, state rows, a key's output).
"""
