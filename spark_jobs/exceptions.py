"""Typed errors, so callers catch by meaning rather than by message."""

from __future__ import annotations


class ReplayError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(ReplayError):
    """A pipeline config (or a CLI/DAG parameter) is invalid. Raised before anything is written."""

    def __init__(self, field: str, problem: str, source: str | None = None):
        self.field = field
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {problem}")


class ArchiveChangedError(ReplayError):
    """A file that was already replayed changed or disappeared from the archive."""


class SemanticsChangedError(ReplayError):
    """The pipeline's config changed what its results mean since its tables were written (nothing
    was written)."""


class ConcurrentRunError(ReplayError):
    """Another replay of the same pipeline holds the lock."""


class SparkServerUnavailableError(ReplayError):
    """No Spark Connect server answers at the address a run was told to use (nothing was written;
    an Airflow task fails and is retried)."""


def exit_status(error: ReplayError) -> tuple[int, str]:
    """How a command stopped by ``error`` ends (``replay``, and the ``spark-submit`` job that runs
    ``replay run``): its exit status (2: an invalid config or parameter, refused before anything
    was written; 1: any other refusal) and the line it prints on stderr."""
    if isinstance(error, ConfigError):
        return 2, f"replay: invalid config: {error}"
    return 1, f"replay: {error}"
