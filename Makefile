# The README's two commands are `make demo` and `make test`; both set up what they need first.
.PHONY: setup demo test test-slow test-cluster test-airflow test-prod test-all lint bench clean

PY := .venv/bin/python
PYTEST := .venv/bin/pytest

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/replay demo

test: setup
	$(PYTEST) -m "not slow" -q

test-slow: setup
	$(PYTEST) -m slow -q

# The standalone-cluster tier (a master and a worker from the pip-installed Spark): CI runs it
# after `make test`.
test-cluster: setup
	$(PYTEST) -m cluster -q

# The README's Airflow section through a real scheduler (`airflow standalone` on SQLite, driven by
# the CLI): CI runs it after the cluster tier.
test-airflow: setup
	$(PYTEST) -m scheduler -q

# The production topology without Docker: archives and Delta tables on a real S3 server (SeaweedFS,
# built once into .cache), Airflow on PostgreSQL; services from scripts/services. CI runs it last.
test-prod: setup
	.venv/bin/python -m spark_jobs.execution.spark_session --fetch-s3a-jars >/dev/null
	$(PYTEST) -m prod -q

test-all: setup
	$(PYTEST) -q

lint: setup
	.venv/bin/ruff check spark_jobs dags tests bench

bench: setup
	$(PY) -m bench.harness

clean:
	rm -rf lakehouse data reports airflow_home spark-warehouse metastore_db .pytest_cache
