"""The session kernel's window contents: kept symbolic during the sweep, computed vectorised after.

Which sessions exist, when they fire and what they purge never depends on the aggregates' values
(the kernel takes only built-in aggregates, which no trigger reads). So the sweep
(``session_kernel``) only notes what the operator would do to a window's accumulator, and every
value is computed at the end, for the whole key at once, by the fixed-window kernel's phase 3
(``window_kernel_aggregates.Pairs``): one aggregate rule, one home.

A window's contents are a :class:`Contents`: a base (nothing, an accumulator restored from state,
or the merge of other windows' contents) and the records added to it since, in order. A firing or
a state dump asks for its value as it stands (:meth:`Book.ask`: the contents and how many of its
records are in). A merge of several windows' contents is Python's ``pane.merge`` of their values,
so the contents built on it wait for them: contents are computed level by level (level 0: from
nothing or restored state; one level more per merge), each level one ``Pairs`` evaluation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .window_kernel_aggregates import Pairs, Requests


@dataclass(frozen=True)
class AggregateShape:
    """The pane's aggregates: each one's function, and whether it is ``count(*)``."""

    functions: tuple[str, ...]
    counts_all: tuple[bool, ...]


class Contents:
    """A window's accumulator as a base and the records (indices into the key's batch) added to
    it since, in order. Only its window appends to it; a value asked for is a prefix of it."""

    __slots__ = ("restored", "merged", "records", "level")

    def __init__(self, restored: list[Any] | None = None, merged: list[int] | None = None,
                 level: int = 0):
        self.restored = restored  # an accumulator loaded from a state row
        self.merged = merged  # the requests whose values ``pane.merge`` folds into the base
        self.records: list[int] = []
        self.level = level


class Book:
    """The values the sweep asks for (a firing's pane, a state row, a merge's input), computed all
    at once by :meth:`evaluate`."""

    def __init__(self, pane: Any, shape: AggregateShape, columns: list[pa.Array | None],
                 kinds: list[str | None], seqs: np.ndarray):
        self.pane, self.shape = pane, shape
        self.columns, self.kinds, self.seqs = columns, kinds, seqs
        self.asked: list[tuple[Contents, int, bool]] = []  # (contents, records in, accumulator?)
        self.values: list[Any] = []

    def ask(self, contents: Contents, accumulator: bool) -> int:
        """Request ``contents``' value as it stands: the accumulator (a state row, a merge's input)
        or the aggregates' results (a pane); returns the request's index."""
        self.asked.append((contents, len(contents.records), accumulator))
        return len(self.asked) - 1

    def merge(self, merged: list[Contents]) -> Contents:
        """Contents starting from the merge of ``merged`` (in window order), as ``_merge`` folds them."""
        return Contents(merged=[self.ask(contents, True) for contents in merged],
                        level=1 + max(contents.level for contents in merged))

    def evaluate(self) -> list[Any]:
        """Every request's value, level by level (may raise ``Decline``, from ``Pairs``)."""
        self.values = [None] * len(self.asked)
        levels: dict[int, list[int]] = {}
        for request, (contents, _, _) in enumerate(self.asked):
            levels.setdefault(contents.level, []).append(request)
        for level in sorted(levels):
            self._evaluate_level(levels[level])
        return self.values

    def _base(self, contents: Contents) -> list[Any] | None:
        if contents.merged is None:
            return contents.restored
        acc = None
        for request in contents.merged:  # copies: pane.merge folds in place, a value may be asked twice
            value = copy.deepcopy(self.values[request])
            acc = value if acc is None else self.pane.merge(acc, value)
        return acc

    def _evaluate_level(self, requests: list[int]) -> None:
        asked = self.asked
        # Each contents' records laid out one after another; its requests in order of records in.
        order: dict[int, int] = {}
        layout: list[Contents] = []
        for request in requests:
            contents = asked[request][0]
            if id(contents) not in order:
                order[id(contents)] = len(layout)
                layout.append(contents)
        requests = sorted(requests, key=lambda r: (order[id(asked[r][0])], asked[r][1]))
        firsts = np.cumsum([0] + [len(contents.records) for contents in layout]).tolist()
        bases = [self._base(contents) for contents in layout]
        run = _Level(self, layout, firsts, bases)
        for request in requests:
            contents, cut, accumulator = asked[request]
            w = order[id(contents)]
            run.requests.add(w, firsts[w], firsts[w] + cut, bases[w], accumulator)
        for request, value in zip(requests, Pairs(run).evaluate_all(), strict=True):
            self.values[request] = value


class _Level:
    """One level's contents as ``Pairs`` reads a kernel run (``window_kernel_aggregates.PairedRun``):
    each contents a window whose pairs are its records, with its base as restored contents."""

    def __init__(self, book: Book, layout: list[Contents], firsts: list[int], bases: list[Any]):
        self.shape = book.shape
        self.columns, self.kinds = book.columns, book.kinds
        records = [record for contents in layout for record in contents.records]
        self.records = np.asarray(records, dtype=np.int64)
        self.pair_seqs = book.seqs[self.records]
        self.windows = list(range(len(layout)))
        self.grouped = {w: () for w, contents in enumerate(layout) if contents.records}
        self.first_pairs = firsts[:-1]
        self.restored_contents = bases
        self.purge_cuts: list[int] = []
        self.requests = Requests([], [], [], [], [])
