"""The expectation suites: versioned templates in a file-backed GX project, made concrete per pipeline.

``expectations/gx/`` (a GX project, opened with ``gx.get_context(mode="file",
project_root_dir="expectations")``) holds one suite per Delta table, named after it:
``window_results``, ``late_events``, ``quarantine``. They are templates, plain GX JSON:

* ``__KEY__`` / ``__AGG__`` in a ``column`` kwarg: the expectation is repeated per key field or
  per aggregate (``meta.for_each``: ``key``, ``output``, ``count_star`` or ``range``);
* ``"__KEYS__"`` / ``"__OUTPUTS__"`` in a column list stand for all key / output columns;
* in SQL (``unexpected_rows_query``) ``__KEYS__``, ``__AGG__`` become quoted column lists,
  ``__ANY_KEY_NULL__`` the test "some key field is null", and
  ``__SIZE_MS__``, ``__SLIDE_MS__``, ``__OFFSET_MS__``, ``__GAP_MS__``, ``__LATENESS_MS__`` the
  window's numbers in milliseconds;
* ``{"$PARAMETER": name}`` values are filled from the pipeline config and this run's facts
  (``max_late_rows``, ``max_quarantine_rows``, ``late_reasons``, ``range_min``, ``range_max``);
* ``meta.when`` keeps an expectation only for some pipelines: ``window`` (kinds), ``purging``,
  ``evictor``, ``event_time`` (booleans).

:func:`build_suites` returns the concrete suites as GX ``ExpectationSuite`` objects (not saved in
the template project, which stays unchanged).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

from ..config import PipelineConfig

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The GX project's root (``project_root_dir``): the context itself lives in its ``gx/``.
EXPECTATIONS_DIR = Path(os.environ.get("REPLAY_EXPECTATIONS_DIR") or PROJECT_ROOT / "expectations")
TABLE_SUITES = ("window_results", "late_events", "quarantine")
TIMINGS = ("EARLY", "ON_TIME", "LATE")
SPARK_TYPE_NAMES = {
    "string": "StringType", "long": "LongType", "double": "DoubleType", "boolean": "BooleanType",
}
_TOKEN = re.compile(r"__[A-Z][A-Z_]*?__")


@dataclass(frozen=True)
class SuiteFacts:
    """Run-time numbers the suites are parameterised with."""

    records_read: int = 0

    def limit(self, fraction: float) -> int:
        """The largest row count whose share of the records read is <= ``fraction`` (exact)."""
        value = Decimal(str(fraction)) * self.records_read
        return int(value.to_integral_value(rounding=ROUND_FLOOR))


@dataclass
class ConcreteSuite:
    table: str
    version: int
    expectations: list[dict[str, Any]] = field(default_factory=list)

    def gx_suite(self) -> Any:
        """A fresh GX ``ExpectationSuite`` (unsaved) holding these expectations."""
        import great_expectations as gx
        from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

        expectations = [
            ExpectationConfiguration(
                type=e["type"], kwargs=e["kwargs"], meta=e.get("meta"), description=e.get("description"),
            ).to_domain_obj()
            for e in self.expectations
        ]
        return gx.ExpectationSuite(
            name=self.table, expectations=expectations,
            meta={"template_version": self.version, "table": self.table},
        )

    def checks(self) -> list[str]:
        return [e["meta"]["check"] for e in self.expectations]


def template_context(project_dir: str | os.PathLike[str] | None = None) -> Any:
    """The versioned GX project (file mode) holding the template suites."""
    import great_expectations as gx

    root = Path(project_dir or EXPECTATIONS_DIR)
    if not (root / "gx" / "great_expectations.yml").exists():
        raise FileNotFoundError(f"no GX project at {root} (expected {root}/gx/great_expectations.yml)")
    return gx.get_context(mode="file", project_root_dir=str(root))


def load_templates(project_dir: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Each table's template suite as GX's JSON dict, read through the file-backed context."""
    context = template_context(project_dir)
    return {name: context.suites.get(name).to_json_dict() for name in TABLE_SUITES}


def build_suites(
    config: PipelineConfig,
    facts: SuiteFacts,
    templates: dict[str, dict[str, Any]] | None = None,
) -> dict[str, ConcreteSuite]:
    """The pipeline's concrete suites: templates filtered, expanded and parameterised."""
    templates = templates if templates is not None else load_templates()
    shape = PipelineShape.of(config)
    params = {
        "max_late_rows": facts.limit(config.quality.max_late_fraction),
        "max_quarantine_rows": facts.limit(config.quality.max_quarantine_fraction),
        "late_reasons": [config.late_reason],
    }
    suites = {}
    for table in TABLE_SUITES:
        template = templates[table]
        suite = ConcreteSuite(table, int((template.get("meta") or {}).get("template_version", 1)))
        for expectation in template["expectations"]:
            meta = expectation.get("meta") or {}
            if not shape.matches(meta.get("when") or {}):
                continue
            for item, item_params in shape.items(meta.get("for_each")):
                suite.expectations.append(
                    shape.concrete(expectation, table, item, {**params, **item_params})
                )
        suites[table] = suite
    return suites


@dataclass(frozen=True)
class PipelineShape:
    """What of a pipeline config the templates depend on."""

    keys: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]
    count_star: tuple[str, ...]
    ranges: dict[str, dict[str, float]]
    window: str
    size: int | None
    slide: int | None
    offset: int
    gap: int | None
    lateness: int
    purging: bool
    evictor: bool
    event_time: bool

    @classmethod
    def of(cls, config: PipelineConfig) -> PipelineShape:
        window = config.window
        size = getattr(window, "size", None)
        return cls(
            keys=tuple(config.key),
            outputs=tuple(output_columns(config)),
            count_star=tuple(count_star_columns(config)),
            ranges=dict(config.quality.ranges),
            window=window.kind,
            size=size,
            slide=getattr(window, "slide", size),
            offset=getattr(window, "offset", 0),
            gap=getattr(window, "gap", None),
            lateness=config.allowed_lateness,
            purging=config.trigger.kind == "purging",
            evictor=getattr(config, "evictor", None) is not None,
            event_time=window.is_event_time,
        )

    def matches(self, when: dict[str, Any]) -> bool:
        for name, wanted in when.items():
            if name == "window":
                if self.window not in wanted:
                    return False
            elif name in ("purging", "evictor", "event_time"):
                if getattr(self, name) != wanted:
                    return False
            else:
                raise ValueError(f"unknown meta.when condition {name!r} in a suite template")
        return True

    def items(self, for_each: str | None) -> list[tuple[str | None, dict[str, Any]]]:
        if for_each is None:
            return [(None, {})]
        if for_each == "key":
            return [(key, {}) for key in self.keys]
        if for_each == "output":
            return [(name, {"__AGG_TYPE__": spark_type_name(kind)}) for name, kind in self.outputs]
        if for_each == "count_star":
            return [(name, {}) for name in self.count_star]
        if for_each == "range":
            items = []
            for name, bounds in self.ranges.items():
                bounds = bounds or {}
                if bounds.get("min") is None and bounds.get("max") is None:
                    continue
                items.append((name, {"range_min": bounds.get("min"), "range_max": bounds.get("max")}))
            return items
        raise ValueError(f"unknown meta.for_each {for_each!r} in a suite template")

    def concrete(
        self, template: dict[str, Any], table: str, item: str | None, params: dict[str, Any]
    ) -> dict[str, Any]:
        meta = dict(template.get("meta") or {})
        check = meta["check"] + (f"[{item}]" if item else "")
        sql_tokens = {
            "__KEYS__": ", ".join(quote(k) for k in self.keys),
            "__ANY_KEY_NULL__": "(" + " OR ".join(f"{quote(k)} IS NULL" for k in self.keys) + ")",
            "__SIZE_MS__": str(self.size),
            "__SLIDE_MS__": str(self.slide),
            "__OFFSET_MS__": str(self.offset),
            "__GAP_MS__": str(self.gap),
            "__LATENESS_MS__": str(self.lateness),
        }
        if item is not None:
            sql_tokens["__AGG__"] = quote(item)
        plain_tokens = {"__KEY__": item, "__AGG__": item, "__AGG_TYPE__": params.get("__AGG_TYPE__")}
        lists = {"__KEYS__": list(self.keys), "__OUTPUTS__": [name for name, _ in self.outputs]}

        def fill(value: Any) -> Any:
            if isinstance(value, dict):
                if set(value) == {"$PARAMETER"}:
                    name = value["$PARAMETER"]
                    if name not in params:
                        raise ValueError(f"suite {table}: no value for parameter {name!r}")
                    return params[name]
                return {k: fill(v) for k, v in value.items()}
            if isinstance(value, list):
                out: list[Any] = []
                for element in value:
                    if isinstance(element, str) and element in lists:
                        out.extend(lists[element])
                    else:
                        out.append(fill(element))
                return out
            if isinstance(value, str):
                if value in plain_tokens:
                    return plain_tokens[value]
                return _TOKEN.sub(lambda m: sql_tokens.get(m.group(0), m.group(0)), value)
            return value

        kwargs = fill(copy.deepcopy(template["kwargs"]))
        for bound in ("min_value", "max_value"):
            if bound in kwargs and kwargs[bound] is None:
                del kwargs[bound]
        leftover = _TOKEN.findall(repr(kwargs))
        if leftover:
            raise ValueError(f"suite {table}, {check}: unfilled template token {leftover[0]}")
        meta.update({"check": check, "table": table, "template_id": template.get("id")})
        meta.pop("when", None)
        meta.pop("for_each", None)
        return {
            "type": template["type"],
            "kwargs": kwargs,
            "meta": meta,
            "description": template.get("description"),
        }


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def output_columns(config: PipelineConfig) -> list[tuple[str, str]]:
    """Each firing's value columns with their types (``config.outputs()``)."""
    return list(config.outputs())


def count_star_columns(config: PipelineConfig) -> list[str]:
    """Names of the ``count(*)`` aggregates: the columns the reconciliation can count records with."""
    return [spec.name for spec in config.aggregates if spec.function == "count" and spec.column is None]


def spark_type_name(kind: str) -> str:
    """The PySpark type class name GX compares against (``array<...>`` -> ``ArrayType``)."""
    if kind.startswith("array<"):
        return "ArrayType"
    return SPARK_TYPE_NAMES[kind]
