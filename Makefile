# The README's two commands are `make demo` and `make test`; both set up what they need first.
.PHONY: setup demo test test-slow test-cluster test-airflow test-airflow-connect test-connect test-connect-smoke test-prod test-prod-ci test-all lint bench bench-backfill clean

PY := .venv/bin/python
PYTEST := .venv/bin/pytest

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/replay demo

# Two pytest-xdist workers, a test file each at a time (module fixtures stay in one process):
# 15.7 min against 20.5 min in one process on this 2-core machine. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: setup
	$(PYTEST) -m "not slow" -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

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

# The same Airflow section with every Spark task a client of one warm Spark Connect server
# (REPLAY_SPARK_MODE=connect), on SQLite and the local disk: run on purpose (about 4 minutes here);
# CI runs the same flows over Connect on PostgreSQL and the bucket (test-prod-ci).
test-airflow-connect: setup
	$(PYTEST) -q tests/airflow/test_scheduler_connect.py

# The Spark and data-quality tests again, every session a Spark Connect client of one server (`replay server start`)
# that the run starts and stops; the same assertions, so the same tables as in-process. Two
# workers, each with its own server (as `make test` runs two in-process): 7-17 minutes here, in CI.
# Tests marked in_process_only (long runs whose Spark calls other tests already make over Connect)
# run in-process only.
CONNECT_TESTS ?= tests/spark tests/quality
test-connect: setup
	REPLAY_TEST_CONNECT=1 $(PYTEST) -m "spark and not slow and not in_process_only" -q -n 2 --dist loadfile $(CONNECT_TESTS) \
		--ignore=tests/spark/test_connect_server.py --ignore=tests/spark/test_session_start.py

test-connect-smoke: setup
	$(MAKE) test-connect CONNECT_TESTS="tests/spark/test_worked_example.py tests/spark/test_pending_work.py tests/spark/test_connect_orphans.py"

# The production topology without Docker: archives and Delta tables on a real S3 server (SeaweedFS,
# built once into .cache), Airflow on PostgreSQL, replays on a Spark standalone cluster; services from
# scripts/services. Too slow for CI's 45 minutes here (about 23 minutes alone, plus a first build of
# SeaweedFS, ~4.5 minutes): run it on purpose. CI runs all of it but the spark-submit flavour of the
# Airflow flows (test-prod-ci, below).
test-prod: setup
	.venv/bin/python -m spark_jobs.execution.spark_session --fetch-s3a-jars >/dev/null
	$(PYTEST) -m prod -q

# What CI runs of it (last): the object-storage modules (SeaweedFS's S3 and the Spark cluster,
# in-process and over Spark Connect; no Airflow) and the Airflow flows on PostgreSQL with every
# Spark task a client of a Spark Connect server on the cluster. The spark-submit flavour of the
# Airflow flows (about 18 minutes) is `make test-prod`'s only.
PROD_CI_TESTS := tests/prod/test_object_storage.py tests/prod/test_pending_work_s3.py \
	tests/prod/test_airflow_postgres_connect.py
test-prod-ci: setup
	.venv/bin/python -m spark_jobs.execution.spark_session --fetch-s3a-jars >/dev/null
	$(PYTEST) -m prod -q $(PROD_CI_TESTS)

test-all: setup
	$(PYTEST) -q

lint: setup
	.venv/bin/ruff check spark_jobs dags tests bench

bench: setup
	$(PY) -m bench.harness

# Issue 30's backfill figure: 48 hourly intervals through a real scheduler, every Spark task a
# client of one warm Spark Connect server, against one `replay run` of the same archive; prints the
# times (about 12 minutes here).
bench-backfill: setup
	$(PYTEST) -q -s tests/airflow/test_backfill_hourly_connect.py

clean:
	rm -rf lakehouse data reports airflow_home spark-warehouse metastore_db .pytest_cache
