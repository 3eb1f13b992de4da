"""Entry points for ``spark-submit``: each parses arguments, starts Spark and calls one package function."""
