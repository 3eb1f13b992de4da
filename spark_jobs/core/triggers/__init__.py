"""Triggers, one module per Flink trigger. Pure Python: no Spark, Delta or Airflow import."""

from __future__ import annotations

import importlib
from typing import Any

from ..durations import parse_duration
from .base import StateDescriptor, Trigger, TriggerContext, TriggerResult
from .continuous_event_time import ContinuousEventTimeTrigger
from .continuous_processing_time import ContinuousProcessingTimeTrigger
from .count import CountTrigger
from .event_time import EventTimeTrigger
from .processing_time import ProcessingTimeTrigger
from .purging import PurgingTrigger

__all__ = [
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountTrigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "StateDescriptor",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "trigger_from_dict",
]

TRIGGER_TYPES = (
    "event_time",
    "continuous_event_time",
    "processing_time",
    "continuous_processing_time",
    "count",
    "custom",
)


def trigger_from_dict(spec: dict[str, Any] | None) -> Trigger:
    """Build a trigger from its config form; inverse of ``Trigger.to_dict``.

    ``{type: custom, class: pkg.module.Class, params: {...}}`` loads a user-defined trigger.
    Raises ``ValueError`` naming the problem.
    """
    spec = dict(spec or {"type": "event_time"})
    purging = spec.pop("purging", False)
    if not isinstance(purging, bool):
        raise ValueError(f"purging must be true or false, not {purging!r}")
    trigger = _base_trigger(spec)
    return PurgingTrigger(trigger) if purging else trigger


def _base_trigger(spec: dict[str, Any]) -> Trigger:
    kind = spec.get("type", "event_time")
    if kind == "event_time":
        return EventTimeTrigger()
    if kind == "processing_time":
        return ProcessingTimeTrigger()
    if kind == "continuous_event_time":
        return ContinuousEventTimeTrigger(parse_duration(_required(spec, "interval")))
    if kind == "continuous_processing_time":
        return ContinuousProcessingTimeTrigger(parse_duration(_required(spec, "interval")))
    if kind == "count":
        count = _required(spec, "count")
        if not isinstance(count, int) or isinstance(count, bool):
            raise ValueError(f"count must be a whole number, not {count!r}")
        return CountTrigger(count)
    if kind == "custom":
        return load_custom_trigger(_required(spec, "class"), spec.get("params") or {})
    raise ValueError(f"type must be one of {', '.join(TRIGGER_TYPES)}, not {kind!r}")


def load_custom_trigger(path: str, params: dict[str, Any]) -> Trigger:
    """Import ``package.module.ClassName`` and build it from ``params``."""
    module_name, _, class_name = str(path).rpartition(".")
    if not module_name:
        raise ValueError(f"class must be an import path like pkg.module.Class, not {path!r}")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import trigger {path!r}: {error}") from error
    if not (isinstance(cls, type) and issubclass(cls, Trigger)):
        raise ValueError(f"{path!r} is not a Trigger subclass")
    try:
        return cls(**params)
    except TypeError as error:
        raise ValueError(f"bad params for {path}: {error}") from error


def _required(spec: dict[str, Any], name: str) -> Any:
    if name not in spec:
        raise ValueError(f"{spec.get('type')} trigger needs '{name}'")
    return spec[name]
