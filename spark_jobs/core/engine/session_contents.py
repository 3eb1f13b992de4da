"""The session kernel's window contents: kept symbolic during the sweep, computed vectorised after.

Which sessions exist, when they fire and what they purge never depends on the aggregates' values
(the kernel takes only built-in aggregates, which no trigger reads). So the sweep
(``session_kernel``) only notes what the operator would do to a window's accumulator, and every
value is computed at the end, for the whole key at once (several keys at once: :func:`evaluate_books`),
by the fixed-window kernel's phase 3
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
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from .window_kernel_aggregates import Pairs, Requests
from .window_kernel_inputs import Decline


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
    at once by :func:`evaluate_books`."""

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

    def likeness(self) -> tuple[Any, ...]:
        """What books must share to be evaluated together: their columns' kinds and types."""
        return (tuple(self.kinds), tuple(None if column is None else column.type for column in self.columns))


def evaluate_books(books: Sequence[Book]) -> list[bool]:
    """Every request of ``books`` (the kernel runs of several keys) evaluated: the books alike
    (``Book.likeness``) together, each level one ``Pairs`` evaluation over all of their contents
    at it, which saves ``Pairs``' fixed cost per key (a third of a session pass's kernel, with
    hundreds of records a key). Per book, whether it has its values: a group that declines is
    evaluated book by book, and a book that declines alone has none (its key goes to the
    per-record operator). The values are the same either way: every aggregate folds each
    contents' own records only."""
    evaluated = [False] * len(books)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, book in enumerate(books):
        groups.setdefault(book.likeness(), []).append(index)
    for members in groups.values():
        try:
            _evaluate([books[index] for index in members])
            for index in members:
                evaluated[index] = True
            continue
        except Decline:
            pass
        for index in members:
            try:
                _evaluate([books[index]])
                evaluated[index] = True
            except Decline:
                pass
    return evaluated


def _evaluate(books: list[Book]) -> None:
    """``books``' requests (alike: ``Book.likeness``), level by level over all of them."""
    pooled = _Pool(books)
    levels: dict[int, list[tuple[int, int]]] = {}
    for b, book in enumerate(books):
        book.values = [None] * len(book.asked)
        for request, (contents, _, _) in enumerate(book.asked):
            levels.setdefault(contents.level, []).append((b, request))
    for level in sorted(levels):
        pooled.evaluate_level(levels[level])


class _Pool:
    """Several books' columns laid end to end: a book's record ``i`` is ``offsets[b] + i``."""

    def __init__(self, books: list[Book]):
        self.books = books
        first = books[0]
        self.pane, self.shape, self.kinds = first.pane, first.shape, first.kinds
        if len(books) == 1:
            self.columns, self.seqs = first.columns, first.seqs
            self.offsets = [0]
            return
        self.columns = [None if column is None else pa.concat_arrays([book.columns[i] for book in books])
                        for i, column in enumerate(first.columns)]
        self.seqs = np.concatenate([book.seqs for book in books])
        self.offsets = np.cumsum([0] + [len(book.seqs) for book in books]).tolist()

    def _base(self, b: int, contents: Contents) -> list[Any] | None:
        if contents.merged is None:
            return contents.restored
        values, acc = self.books[b].values, None
        for request in contents.merged:  # copies: pane.merge folds in place, a value may be asked twice
            value = copy.deepcopy(values[request])
            acc = value if acc is None else self.pane.merge(acc, value)
        return acc

    def evaluate_level(self, requests: list[tuple[int, int]]) -> None:
        """The values of ``requests`` (``(book, request)``), all of one level."""
        books = self.books
        # (book, request, contents, records in, accumulator?)
        entries = [(b, request, *books[b].asked[request]) for b, request in requests]
        # Each contents' records laid out one after another; its requests in order of records in.
        order: dict[int, int] = {}
        layout: list[tuple[int, Contents]] = []
        for b, _, contents, _, _ in entries:
            if id(contents) not in order:
                order[id(contents)] = len(layout)
                layout.append((b, contents))
        entries.sort(key=lambda entry: (order[id(entry[2])], entry[3]))
        lengths = [len(contents.records) for _, contents in layout]
        firsts = np.cumsum([0] + lengths).tolist()
        records = np.fromiter(chain.from_iterable(contents.records for _, contents in layout),
                              dtype=np.int64, count=firsts[-1])
        if len(books) > 1:
            records += np.repeat(np.asarray([self.offsets[b] for b, _ in layout], dtype=np.int64), lengths)
        bases = [self._base(b, contents) for b, contents in layout]
        run = _Level(self, records, len(layout), firsts, bases)
        for _, _, contents, cut, accumulator in entries:
            w = order[id(contents)]
            run.requests.add(w, firsts[w], firsts[w] + cut, bases[w], accumulator)
        for (b, request, _, _, _), value in zip(entries, Pairs(run).evaluate_all(), strict=True):
            books[b].values[request] = value


class _Level:
    """One level's contents as ``Pairs`` reads a kernel run (``window_kernel_aggregates.PairedRun``):
    each contents a window whose pairs are its records, with its base as restored contents."""

    def __init__(self, pool: _Pool, records: np.ndarray, windows: int, firsts: list[int],
                 bases: list[Any]):
        self.shape = pool.shape
        self.columns, self.kinds = pool.columns, pool.kinds
        self.records = records
        self.pair_seqs = pool.seqs[records]
        self.windows = list(range(windows))
        self.grouped = {w: () for w in range(windows) if firsts[w + 1] > firsts[w]}
        self.first_pairs = firsts[:-1]
        self.restored_contents = bases
        self.purge_cuts: list[int] = []
        self.requests = Requests([], [], [], [], [])
