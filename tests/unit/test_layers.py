"""The package's layers hold: no import cycle anywhere in ``spark_jobs`` (counting imports inside
functions, so none can hide one), no module imports a layer above its own (``LAYERS``), and
``core/`` imports nothing but itself, the shared errors, the standard library and the numeric
libraries.

Read from the source with ``ast``, so the check needs no Spark and sees every import, even ones
in functions that a test never calls.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spark_jobs"
# What core may import besides itself: the typed errors, and the libraries the engines compute with.
CORE_ALLOWED = {"spark_jobs.exceptions"}
CORE_LIBRARIES = {"numpy", "pyarrow", "pandas"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def absolute(package: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement in ``package`` reads from, as an absolute name."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str) -> set[str]:
    """Every module ``name`` imports, at module level or inside a function, as absolute names
    (``from package import submodule`` counts as importing the submodule)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = absolute(package, node)
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names
                         if f"{target}.{alias.name}" in MODULES)
    return found


def internal_graph() -> dict[str, set[str]]:
    """Module -> the spark_jobs modules it imports (a package's ``__init__`` is the package)."""
    return {name: {target for target in imports_of(name) if target in MODULES and target != name}
            for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_spark_jobs_has_no_import_cycle() -> None:
    assert find_cycle(internal_graph()) is None


def test_the_cycle_check_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


# The layers, lowest first: a module may import its own layer and the ones below it, never above
# (execution never reaches for the command line, the quality suites or the sample generator).
LAYERS = {
    "exceptions": 0, "core": 0,
    "config": 1, "pipeline_spec": 1,
    "triggers": 1, "windows": 1, "functions": 1, "process": 1, "joins": 1, "contrib": 1,
    "execution": 2, "testing": 2, "samples": 2,
    "quality": 3,
    "interfaces": 4,
}


def layer_of(name: str) -> str:
    """``spark_jobs.execution.replay`` -> ``execution``; the package itself is its own."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of a module in a higher layer than the importer's."""
    return sorted(
        (name, target) for name, targets in graph.items() for target in targets
        if layer_of(name) in LAYERS and LAYERS.get(layer_of(target), 0) > LAYERS[layer_of(name)]
    )


def test_each_layer_imports_only_its_own_and_the_layers_below() -> None:
    assert set(map(layer_of, MODULES)) - {"spark_jobs"} <= set(LAYERS), "a new folder needs a layer"
    assert upward_imports(internal_graph()) == []


def test_the_layer_check_sees_an_upward_import() -> None:
    graph = {"spark_jobs.execution.jobs.replay_job": {"spark_jobs.interfaces.cli"}}
    assert upward_imports(graph) == [("spark_jobs.execution.jobs.replay_job", "spark_jobs.interfaces.cli")]


def test_core_imports_only_core_the_errors_and_numeric_libraries() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = {}
    for name in MODULES:
        if not name.startswith("spark_jobs.core"):
            continue
        outside = sorted(
            target for target in imports_of(name)
            if not target.startswith("spark_jobs.core") and target not in CORE_ALLOWED
            and target.split(".")[0] not in stdlib | CORE_LIBRARIES
        )
        if outside:
            bad[name] = outside
    assert bad == {}, "core must not import Spark, Delta, Airflow or the layers above it"


# In a fresh interpreter (it loads pyspark, though it starts no JVM): import every module, then
# resolve every name its imports take from spark_jobs, inside functions too, which nothing else
# runs until that function is called.
RESOLVE = """
import importlib, json, sys
missing = []
for module, target, name in json.loads(sys.argv[1]):
    importlib.import_module(module)
    found = importlib.import_module(target)
    if not hasattr(found, name):
        try:
            importlib.import_module(f"{target}.{name}")
        except ImportError:
            missing.append(f"{module}: {target}.{name}")
print(json.dumps(missing))
"""


def internal_names() -> list[tuple[str, str, str]]:
    """(module, imported module, name) for every ``from spark_jobs... import name`` in the package."""
    triples = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                target = absolute(package, node)
                if target.startswith("spark_jobs"):
                    triples += [(name, target, alias.name) for alias in node.names]
    return triples


def test_every_module_imports_and_every_imported_name_exists() -> None:
    done = subprocess.run([sys.executable, "-c", RESOLVE, json.dumps(internal_names())], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(done.stdout) == []


def test_the_user_import_paths_are_the_core_objects() -> None:
    """The stable paths users and pipeline YAML name re-export core's very objects."""
    from spark_jobs import functions, joins, process
    from spark_jobs.core import functions as core_functions
    from spark_jobs.core.engine import joins as core_joins
    from spark_jobs.core.engine import process as core_process
    from spark_jobs.core.triggers.base import Trigger
    from spark_jobs.core.windows.tumbling import TumblingWindows
    from spark_jobs.triggers.base import Trigger as UserTrigger
    from spark_jobs.windows.tumbling import TumblingWindows as UserTumbling

    assert UserTrigger is Trigger and UserTumbling is TumblingWindows
    assert functions.AggregateFunction is core_functions.AggregateFunction
    assert functions.ProcessWindowFunction is core_functions.ProcessWindowFunction
    assert functions.WindowInfo is core_functions.WindowInfo
    assert process.KeyedProcessFunction is core_process.KeyedProcessFunction
    assert process.ProcessContext is core_process.ProcessContext
    assert joins.JoinFunction is core_joins.JoinFunction
