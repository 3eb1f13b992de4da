"""The trigger contract, after Flink's ``Trigger`` and Beam's ``TriggerFn``.

A trigger is a small state machine. It never stores state on itself: per-window state goes
through the context (declared as :class:`StateDescriptor` class attributes) and so do timers.
Each hook returns a :class:`TriggerResult` and the operator acts on it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..windows.base import TimeWindow


class TriggerResult(enum.Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    def __init__(self, fire: bool, purge: bool):
        # Plain attributes, not properties: read once per record on the hot path.
        self.is_fire = fire
        self.is_purge = purge


@dataclass(frozen=True)
class StateDescriptor:
    """A named per-(key, window) trigger state value and how two values merge."""

    name: str
    merge: Callable[[Any, Any], Any]


class TriggerContext(Protocol):
    """What a trigger may see and do; the operator points it at one (key, window) at a time."""

    def current_watermark(self) -> int: ...
    def current_processing_time(self) -> int: ...
    def register_event_time_timer(self, time: int) -> None: ...
    def register_processing_time_timer(self, time: int) -> None: ...
    def delete_event_time_timer(self, time: int) -> None: ...
    def delete_processing_time_timer(self, time: int) -> None: ...
    def get_state(self, descriptor: StateDescriptor) -> Any: ...
    def set_state(self, descriptor: StateDescriptor, value: Any) -> None: ...
    def clear_state(self, descriptor: StateDescriptor) -> None: ...
    def merge_state(self, descriptor: StateDescriptor) -> None:
        """In ``on_merge`` only: fold the merged windows' values into this window's."""


class Trigger:
    """Base class: every hook answers CONTINUE and holds nothing.

    Subclasses are frozen dataclasses so that a trigger spec is a value: comparable, printable
    and round-tripped through ``to_dict`` / ``trigger_from_dict``.
    """

    #: Built-ins name themselves; a user-defined trigger is ``custom`` and round-trips by import path.
    kind: ClassVar[str] = "custom"
    #: Set to True when ``on_element`` reads the record (custom triggers); built-ins don't, and
    #: the operator then skips building the record mapping.
    needs_element: ClassVar[bool] = False

    def on_element(
        self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(
        self, time: int, window: TimeWindow, ctx: TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        """Delete every timer and state value this trigger created for ``window``."""

    def state_names(self) -> frozenset[str]:
        """The names of the per-window state values this trigger keeps: its
        :class:`StateDescriptor` class attributes. A window's stored trigger state (what the
        operator persists) holds values under these names only."""
        return frozenset(
            value.name for klass in type(self).__mro__ for value in vars(klass).values()
            if isinstance(value, StateDescriptor)
        )

    def to_dict(self) -> dict[str, Any]:
        if self.kind != "custom":
            return {"type": self.kind}
        params = (
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
            if dataclasses.is_dataclass(self)
            else {}
        )
        cls = type(self)
        return {"type": "custom", "class": f"{cls.__module__}.{cls.__qualname__}", "params": params}


def min_merge(a: int, b: int) -> int:
    return a if a <= b else b


def sum_merge(a: int, b: int) -> int:
    return a + b
