"""The engines: the per-record reference operator, the two vectorised kernels that must agree with
it, keyed process functions, joins, and the per-key dispatch (``keyed``) every execution path calls.
"""
