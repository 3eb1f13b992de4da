# The README's two commands are `make demo` and `make test`; both set up what they need first.
.PHONY: setup demo test test-slow test-cluster test-airflow test-all lint bench clean

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

test-all: setup
	$(PYTEST) -q

lint: setup
	.venv/bin/ruff check spark_jobs dags tests bench

bench: setup
	$(PY) -m bench.harness

clean:
	rm -rf lakehouse data reports airflow_home spark-warehouse metastore_db .pytest_cache
