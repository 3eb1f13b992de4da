"""The Airflow home and DAG folder for these tests are set in tests/conftest.py."""
