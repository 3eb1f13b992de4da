"""What an Airflow task of this project imports before it does anything, loaded once per scheduler.

Airflow's LocalExecutor runs each task in a process forked from one of its workers, so a task
pays for every module its worker did not import: a Spark Connect client (PySpark's client,
pandas, pyarrow, gRPC) about 0.55 s, delta-rs and pyarrow (the check of an interval that has
nothing to do) about 0.15 s, on every DAG run of a catch-up. With ``[scheduler] mp_start_method =
forkserver`` and this module in ``[core] mp_forkserver_preload`` (Airflow 3.3), the forkserver
imports them once and every worker and task inherits them (docs/airflow.md, "Time per DAG run").

Only libraries are loaded here, never the project's own modules: a scheduler that ran for days
would otherwise hand tasks the code it started with.
"""

from __future__ import annotations

import contextlib
import importlib

#: A task's libraries: delta-rs and pyarrow (the check), Spark Connect's client (the replay).
LIBRARIES = ("pyarrow", "deltalake", "pyspark.sql.connect.session")

for _name in LIBRARIES:
    # A library missing here only means no head start. PySpark's Connect client checks its
    # dependencies at import, and under a process started with ``python -c`` (the forkserver) it
    # takes its doctest path, which exits when one is missing: never let that stop the forkserver.
    with contextlib.suppress(ImportError, SystemExit):
        importlib.import_module(_name)
