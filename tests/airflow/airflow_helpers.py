"""Helpers for the Airflow tests: parse dags/ under the current env, run a DAG with dag.test,
read task states, XComs and asset events back from the metadata DB, write small archives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def load_dag(dag_id: str):
    """Parse dags/ now (with the current REPLAY_PIPELINES_DIR) and return one DAG."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


def task_states(dagrun) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}


def xcom(dagrun, task_id: str, map_index: int = -1) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=dagrun.run_id, dag_ids=dagrun.dag_id, task_ids=task_id,
                                   key="return_value", map_indexes=map_index)
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def asset_event_count(uri: str) -> int:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(
            select(func.count()).select_from(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id).where(AssetModel.uri == uri)
        )


BASE_MS = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000 + 3_600_000  # 2023-11-14T23:00:00Z


def write_events(path: Path, start_ms: int, count: int, step_ms: int = 20_000, keys: int = 3,
                 first_id: int = 0) -> Path:
    """``count`` events starting at ``start_ms``, one every ``step_ms``, a few out of order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for i in range(count):
            ingest = start_ms + i * step_ms
            delay = (i * 7919) % 4 * 1_000  # 0-3 s out of order, deterministic
            n = first_id + i
            handle.write(json.dumps({
                "event_id": f"e{n}", "user": f"u{n % keys}", "ts": ingest - delay,
                "ingest_ts": ingest, "partition": 0, "offset": n, "value": n % 10,
            }) + "\n")
    return path


def write_pipeline(path: Path, name: str, archive: Path, output: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "name": name,
        "source": {"path": str(archive), "format": "jsonl", "event_time": "ts",
                   "ingest_time": "ingest_ts", "partition": "partition", "offset": "offset",
                   "id": "event_id", "types": {"value": "long"}},
        "key": ["user"],
        "watermark": {"max_out_of_orderness": "5s"},
        "window": {"type": "tumbling", "size": "10m"},
        "allowed_lateness": "1m",
        "aggregates": {"n": "count(*)", "total": "sum(value)"},
        "batch": {"max_records": 100},
        "output": {"path": str(output)},
        "schedule": {"interval": "@hourly", "start": "2023-11-14T23:00:00Z"},
        **overrides,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def snapshot_files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime: equal snapshots mean nothing was written."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}
