"""``replay generate --format delta``: the sample events as a Delta table, in several commits.

The events are generated as Parquet (the same rows, corrupt ones included) into a temporary
directory, then appended to a Delta table at ``out_dir`` with delta-rs (no JVM) in ``COMMITS``
commits: commit ``k`` holds the ``k``-th slice of every partition's rows, so the table's versions
are successive stretches of the stream, as an ingestion job appending to a bronze table leaves
them (a replay of version 1 sees the first two stretches; a later run picks up the rest).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .spec import GenerateSummary, GeneratorSpec

#: How many appends (table versions 0 .. COMMITS - 1) the sample table is written in.
COMMITS = 4


def generate_delta_table(
    root: Path, spec: GeneratorSpec, generate_archive: Callable[[str, GeneratorSpec], GenerateSummary],
) -> GenerateSummary:
    """The table at ``root``, from the Parquet archive ``generate_archive`` (the generator's own,
    passed in: it dispatches here) writes of ``spec``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    started = time.perf_counter()
    _remove_previous_table(root)
    with tempfile.TemporaryDirectory(prefix=".delta-sample-", dir=root) as scratch:
        summary = generate_archive(scratch, replace(spec, format="parquet"))
        tables = [pq.read_table(path) for path in sorted(summary.files)]
        for commit in range(COMMITS):
            parts = []
            for table in tables:
                start, end = (table.num_rows * k // COMMITS for k in (commit, commit + 1))
                parts.append(table.slice(start, end - start))
            write_deltalake(str(root), pa.concat_tables(parts), mode="append")
    from deltalake import DeltaTable

    files = DeltaTable(str(root)).file_uris()
    return replace(summary, path=str(root), files=files, seconds=time.perf_counter() - started)


def _remove_previous_table(root: Path) -> None:
    """A table this generator wrote earlier: its log and its data files, nothing else."""
    if not (root / "_delta_log").is_dir():
        return
    shutil.rmtree(root / "_delta_log")
    for entry in root.iterdir():
        if entry.name.startswith("part-") and entry.name.endswith(".parquet") and entry.is_file():
            entry.unlink()
