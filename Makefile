# The README's two commands are `make demo` and `make test`; both set up what they need first.
.PHONY: setup demo test test-slow test-cluster test-airflow test-connect test-all lint bench clean

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

# The Spark tests again, every session a Spark Connect client of one server (`replay server start`)
# that the run starts and stops; the same assertions, so the same tables as in-process.
test-connect: setup
	REPLAY_TEST_CONNECT=1 $(PYTEST) -m "spark and not slow" -q tests/spark tests/quality \
		--ignore=tests/spark/test_connect_server.py --ignore=tests/spark/test_session_start.py

test-all: setup
	$(PYTEST) -q

lint: setup
	.venv/bin/ruff check spark_jobs dags tests bench

bench: setup
	$(PY) -m bench.harness

clean:
	rm -rf lakehouse data reports airflow_home spark-warehouse metastore_db .pytest_cache
