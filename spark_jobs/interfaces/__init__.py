"""How people and schedulers reach the product: the ``replay`` command line, status, and the
Airflow-facing helpers the DAG files call (kept light: no Spark at DAG-parse time).
"""
