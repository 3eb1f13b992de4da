"""The window kernel's phase 3 (``window_kernel``'s doc): every firing's aggregates, vectorised.

Phase 2 leaves :class:`Requests`: per firing (or state dump), a window's pairs ``[segment, cut)``.
:class:`Pairs` computes each aggregate over them for all requests at once, with Python's
arithmetic (floats summed in order, a set keeping the first of equal values), so the values are
the per-record operator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .window_kernel_inputs import Decline


@dataclass
class Requests:
    """What phase 3 computes: per firing (or state dump), a window's pairs ``[segment, cut)``
    (indices into the sorted pairs) and, when the segment is the window's first, its restored
    contents too."""

    window: list[int]
    segment: list[int]
    cut: list[int]
    restored: list[list[Any] | None]  # the restored contents the segment starts from, if any
    dump: list[bool]  # the Python accumulator (for the state row) rather than the result

    def add(self, window: int, segment: int, cut: int, restored: list[Any] | None, dump: bool) -> int:
        self.window.append(window)
        self.segment.append(segment)
        self.cut.append(cut)
        self.restored.append(restored)
        self.dump.append(dump)
        return len(self.cut) - 1


class AggregateShape(Protocol):
    """The aggregates of a kernel run: each one's function, and whether it is ``count(*)``."""

    @property
    def functions(self) -> tuple[str, ...]: ...

    @property
    def counts_all(self) -> tuple[bool, ...]: ...


class PairedRun(Protocol):
    """What phase 3 reads of a key's run once phase 2 is done (``window_kernel``'s run)."""

    @property
    def shape(self) -> AggregateShape: ...

    requests: Requests
    records: np.ndarray  # per accepted pair (window by window, replay order within): its record
    pair_seqs: np.ndarray  # per accepted pair: its record's seq
    columns: list[pa.Array | None]  # per aggregate: its column (None: count(*))
    kinds: list[str | None]  # per aggregate: its column's kind (``column_kind``)
    windows: list[int]  # window starts, ascending: restored or with pairs
    grouped: dict[int, tuple[int, ...]]  # the windows with pairs: start -> (first pair, ...)
    first_pairs: list[int]  # per window: its first pair
    restored_contents: list[list[Any] | None]  # per window: its restored accumulators
    purge_cuts: list[int]  # pairs at which a purge starts a new segment


class Pairs:
    """Phase 3: the aggregates over the accepted pairs (window by window, replay order within) for
    every request, one aggregate at a time, with Python's results."""

    def __init__(self, run: PairedRun):
        requests = run.requests
        self.run = run
        self.records = run.records
        self.count = len(run.records)
        self.window = np.asarray(requests.window, dtype=np.int64)
        self.segment = np.asarray(requests.segment, dtype=np.int64)
        self.cut = np.asarray(requests.cut, dtype=np.int64)
        self.contents = requests.restored
        self.dump = requests.dump
        # Requests of one segment come one after another, their cuts not decreasing. A segment is
        # its window, its first pair and whether it starts from restored contents: a purge right at
        # the first pair starts a new segment at the same pair.
        fresh = np.asarray([contents is None for contents in self.contents], dtype=bool)
        change = ((self.window[1:] != self.window[:-1]) | (self.segment[1:] != self.segment[:-1])
                  | (fresh[1:] != fresh[:-1]))
        self.runs = np.flatnonzero(np.concatenate(([True], change))).tolist() + [len(self.cut)]
        self._valid_before: dict[int, np.ndarray] = {}

    def evaluate_all(self) -> list[list[Any]]:
        """Per request: the pane's values, or (for a dump) the aggregation's accumulator list."""
        if not len(self.cut):
            return []
        per_function = [self.evaluate(i, function) for i, function in enumerate(self.run.shape.functions)]
        return [list(values) for values in zip(*per_function, strict=True)]

    def evaluate(self, i: int, function: str) -> list[Any]:
        kind = self.run.kinds[i]
        if function == "count":
            return self._count(i)
        if function == "sum":
            return self._sum(i, kind)
        if function == "avg":
            return self._avg(i, kind)
        if function in ("min", "max"):
            return self._extreme(i, kind, np.minimum if function == "min" else np.maximum)
        if function == "count_distinct":
            return self._count_distinct(i, kind)
        if function in ("first", "last"):
            return self._end(i, function == "first")
        return self._collect(i)

    # -- per column ------------------------------------------------------------------------------
    def column(self, i: int) -> pa.Array:
        return self.run.columns[i]

    def valid_before(self, i: int) -> np.ndarray:
        """How many pairs before each pair index (0..count) have a value (not null) in column ``i``."""
        if i not in self._valid_before:
            column = self.column(i)
            if column.null_count == 0:
                before = np.arange(self.count + 1, dtype=np.int64)
            else:
                valid = np.asarray(column.is_valid())[self.records]
                before = np.concatenate(([0], np.cumsum(valid, dtype=np.int64)))
            self._valid_before[i] = before
        return self._valid_before[i]

    def valid_pairs(self, i: int) -> np.ndarray:
        """The pairs with a value in column ``i``, in order."""
        before = self.valid_before(i)
        return np.flatnonzero(before[1:] > before[:-1])

    def numbers(self, i: int, dtype: Any) -> np.ndarray:
        """Column ``i``'s values at its valid pairs, in order."""
        column = self.column(i)
        if pa.types.is_null(column.type):
            return np.zeros(0, dtype=dtype)
        filled = pc.fill_null(column, 0) if column.null_count else column
        values = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=dtype)
        return values[self.records[self.valid_pairs(i)]]

    def python_values(self, i: int, pairs: np.ndarray) -> list[Any]:
        return self.column(i).take(pa.array(self.records[pairs], pa.int64())).to_pylist()

    def restored(self, i: int) -> list[Any]:
        """Per request, the restored accumulator its segment starts from (None: a fresh one)."""
        return [None if contents is None else contents[i] for contents in self.contents]

    def added(self, i: int) -> np.ndarray:
        """How many values each request's segment adds (for count(*): pairs)."""
        if self.run.shape.counts_all[i]:
            return self.cut - self.segment
        before = self.valid_before(i)
        return before[self.cut] - before[self.segment]

    def _int_totals(self, i: int) -> list[int]:
        """Exact integer sums of each request's segment (int64 prefix sums, declined if they could
        overflow: Python's ints never do)."""
        values = self.numbers(i, np.int64)
        if len(values) and float(np.abs(values.astype(np.float64)).max()) * len(values) >= 2.0**62:
            raise Decline
        prefix = np.concatenate(([0], np.cumsum(values)))
        before = self.valid_before(i)
        return (prefix[before[self.cut]] - prefix[before[self.segment]]).tolist()

    # -- per function ------------------------------------------------------------------------------
    def _count(self, i: int) -> list[Any]:
        return [a if base is None else base + a
                for a, base in zip(self.added(i).tolist(), self.restored(i), strict=True)]

    def _sum(self, i: int, kind: str) -> list[Any]:
        bases = self.restored(i)
        if kind != "int":
            return self._running(i, np.add, self.numbers(i, np.float64), bases)
        return [
            (total if a else None) if base is None else base + total
            for total, a, base in zip(self._int_totals(i), self.added(i).tolist(), bases, strict=True)
        ]

    def _avg(self, i: int, kind: str) -> list[Any]:
        starts = [[0, 0] if base is None else base for base in self.restored(i)]
        if kind == "int":
            sums = [start[0] + total for start, total in zip(starts, self._int_totals(i), strict=True)]
        else:  # Python's 0 + v1 + v2 ...: a float fold from the start value
            sums = self._running(i, np.add, self.numbers(i, np.float64), [start[0] for start in starts])
        out: list[Any] = []
        for total, a, start, dump in zip(sums, self.added(i).tolist(), starts, self.dump, strict=True):
            n = start[1] + a
            out.append([total, n] if dump else (total / n if n else None))
        return out

    def _extreme(self, i: int, kind: str, ufunc: Any) -> list[Any]:
        bases = self.restored(i)
        if kind == "str":
            ranks, ordered, base_ranks = self._ranks(i, bases)
            return [None if rank is None else ordered[rank]
                    for rank in self._running(i, ufunc, ranks, base_ranks)]
        values = self.numbers(i, np.int64 if kind == "int" else np.float64)
        if kind == "float" and (np.isnan(values).any() or any(b != b for b in bases if b is not None)):
            raise Decline  # Python's comparisons with NaN are false both ways: no running min/max
        # Of equal values Python keeps the first: only 0.0 vs -0.0 can tell.
        return self._running(i, ufunc, values, bases, first_zero=kind == "float")

    def _ranks(self, i: int, bases: list[Any]) -> tuple[np.ndarray, list[str], list[Any]]:
        """Strings as ranks in code-point order (UTF-8 byte order, which Arrow sorts by): the valid
        pairs' ranks, the strings by rank, the bases' ranks."""
        column = self.column(i).cast(pa.string())
        extra = [b for b in bases if b is not None]
        encoded = pa.concat_arrays([column, pa.array(extra, pa.string())]).dictionary_encode()
        if not len(encoded.dictionary):  # nothing but nulls
            return np.zeros(0, dtype=np.int64), [], [None] * len(bases)
        order = np.asarray(pc.sort_indices(encoded.dictionary), dtype=np.int64)
        rank_of = np.empty(len(order), dtype=np.int64)
        rank_of[order] = np.arange(len(order))
        ranks = rank_of[np.asarray(pc.fill_null(encoded.indices, 0), dtype=np.int64)]
        extra_ranks = iter(ranks[len(column):].tolist())
        base_ranks = [None if b is None else next(extra_ranks) for b in bases]
        ordered = encoded.dictionary.take(pa.array(order)).to_pylist()
        return ranks[: len(column)][self.records[self.valid_pairs(i)]], ordered, base_ranks

    def _running(self, i: int, ufunc: Any, values: np.ndarray, bases: list[Any],
                 first_zero: bool = False) -> list[Any]:
        """``ufunc`` folded in order (``accumulate`` is sequential, unlike a pairwise ``sum``) over
        each request's segment values up to its cut, starting from the request's base (None: from
        the first value), as Python's loop does; the base itself while nothing was added.

        ``first_zero`` (min and max of floats): a result equal to zero is the first zero of the
        segment, as Python's ``if value < acc`` never replaces a zero by another one."""
        before = self.valid_before(i)
        lows, cuts = before[self.segment], before[self.cut]
        runs = self.runs
        firsts, ends = runs[:-1], runs[1:]
        # Each run of requests (one segment) is a row: its base (if any), then its values, padded.
        # ``accumulate`` along a row is sequential, so a row folds as the loop below would; with
        # many short segments (sessions) one call beats one per segment.
        first_index = np.asarray(firsts, dtype=np.int64)
        row_low = lows[first_index]
        row_top = cuts[np.asarray(ends, dtype=np.int64) - 1]
        sizes = row_top - row_low
        has_base = np.asarray([bases[first] is not None for first in firsts], dtype=np.int64)
        width = int((sizes + has_base).max()) if len(firsts) else 0
        if len(firsts) > 1 and len(firsts) * width <= 4 * (int(sizes.sum()) + len(firsts)) + 1024:
            return self._running_rows(ufunc, values, bases, lows, cuts, first_zero, row_low, sizes,
                                      has_base, width)
        out: list[Any] = [None] * len(self.cut)
        for first, end in zip(firsts, ends, strict=True):
            base = bases[first]
            low, top = int(lows[first]), int(cuts[end - 1])
            if low == top:  # nothing added (perhaps a column of nulls): the base as it was
                out[first:end] = [base] * (end - first)
                continue
            chunk = values[low:top]
            if base is not None:
                chunk = np.concatenate((np.asarray([base], dtype=values.dtype), chunk))
            folded = ufunc.accumulate(chunk)
            if first_zero and (zeros := np.flatnonzero(chunk == 0)).size:
                folded = np.where(folded == 0, chunk[zeros[0]], folded)
            folded = folded.tolist()
            for r, k in zip(range(first, end), (cuts[first:end] - low).tolist(), strict=True):
                if base is None:
                    out[r] = folded[k - 1] if k else None
                else:
                    out[r] = folded[k] if k else base
        return out

    def _running_rows(self, ufunc: Any, values: np.ndarray, bases: list[Any], lows: np.ndarray,
                      cuts: np.ndarray, first_zero: bool, row_low: np.ndarray, sizes: np.ndarray,
                      has_base: np.ndarray, width: int) -> list[Any]:
        """:meth:`_running` with every segment a row of one matrix, folded in one ``accumulate``."""
        rows = len(row_low)
        matrix = np.zeros((rows, max(1, width)), dtype=values.dtype)
        based = np.flatnonzero(has_base & (sizes > 0))  # a row with nothing added reads its base as is
        if len(based):
            runs = self.runs
            matrix[based, 0] = np.asarray([bases[runs[r]] for r in based.tolist()], dtype=values.dtype)
        row_of = np.repeat(np.arange(rows), sizes)
        starts = np.cumsum(sizes) - sizes
        within = np.arange(len(row_of)) - np.repeat(starts, sizes)
        matrix[row_of, within + has_base[row_of]] = values[np.repeat(row_low, sizes) + within]
        folded = ufunc.accumulate(matrix, axis=1)
        if first_zero:
            # A result equal to zero is the row's first zero (Python keeps the first of equal values).
            zeros = (matrix == 0) & (np.arange(matrix.shape[1]) < (sizes + has_base)[:, None])
            found = zeros.any(axis=1)
            first = matrix[np.arange(rows), zeros.argmax(axis=1)]
            folded = np.where(found[:, None] & (folded == 0), first[:, None], folded)
        # Each request reads its row at its cut: k values in, after the base if any (none in: the
        # base as it was).
        runs = np.asarray(self.runs, dtype=np.int64)
        row_of_request = np.repeat(np.arange(rows), np.diff(runs))
        k = cuts - lows
        picked = folded[row_of_request, np.maximum(k - 1 + has_base[row_of_request], 0)].tolist()
        firsts = runs[:-1][row_of_request].tolist()
        return [value if count else bases[first]
                for value, count, first in zip(picked, k.tolist(), firsts, strict=True)]

    def _count_distinct(self, i: int, kind: str) -> list[Any]:
        bases = self.restored(i)
        column = self.column(i)
        valid = self.valid_pairs(i)
        if not len(valid):  # nothing added (a column of nulls, or no records): the sets as they were
            return [(set(base) if base else set()) if dump else (len(base) if base else 0)
                    for base, dump in zip(bases, self.dump, strict=True)]
        # Each window's restored set, added before any of its pairs (in its first segment).
        restored = [(w, contents[i]) for w, contents in enumerate(self.run.restored_contents)
                    if contents is not None and contents[i]]
        extra = [v for _, members in restored for v in members]
        # Values keyed under Python's equality: -0.0 == 0.0 (so 0.0 stands for both); NaN declined.
        if kind == "float":
            numbers = np.asarray(pc.fill_null(column, 0.0), dtype=np.float64)
            if np.isnan(numbers[self.records[valid]]).any():
                raise Decline
            keyed = pa.concat_arrays([pa.array(numbers + 0.0), pa.array(np.asarray(extra, np.float64) + 0.0)])
        else:
            arrow_type = pa.int64() if kind == "int" else pa.string()
            keyed = pa.concat_arrays([column.cast(arrow_type), pa.array(extra, arrow_type)])
        encoded = keyed.dictionary_encode()
        codes = np.asarray(pc.fill_null(encoded.indices, 0), dtype=np.int64)
        distinct = max(1, len(encoded.dictionary))
        epochs = len(self.run.purge_cuts) + 1  # segment key: window * epochs + purges before it
        if float(len(self.run.windows)) * epochs * distinct >= 2.0**62:
            raise Decline
        extra_segments = np.repeat(np.asarray([w * epochs for w, _ in restored], dtype=np.int64),
                                   np.asarray([len(members) for _, members in restored], dtype=np.int64))
        pair_segments = self._segment_keys(epochs)[valid]
        keys = np.concatenate((extra_segments * distinct + codes[len(column):],
                               pair_segments * distinct + codes[: len(column)][self.records[valid]]))
        new = np.zeros(self.count, dtype=np.int64)  # 1 where a pair adds a value new to its segment
        new[valid] = _first_occurrences(keys)[len(extra):]
        new_before = np.concatenate(([0], np.cumsum(new)))
        out: list[Any] = []
        for r, (a, base) in enumerate(zip((new_before[self.cut] - new_before[self.segment]).tolist(), bases,
                                           strict=True)):
            if not self.dump[r]:
                out.append(a + (len(base) if base else 0))
                continue
            members = set(base) if base else set()
            members.update(self.python_values(i, np.flatnonzero(new[self.segment[r]:self.cut[r]])
                                              + self.segment[r]))
            out.append(members)
        return out

    def _segment_keys(self, epochs: int) -> np.ndarray:
        """Each pair's segment as ``window * epochs + purges in its window up to it`` (0: the
        window's first segment, which starts from the restored contents)."""
        first_pairs, windows = self.run.first_pairs, self.run.windows
        with_pairs = [w for w, start in enumerate(windows) if start in self.run.grouped]
        lows = np.asarray([first_pairs[w] for w in with_pairs], dtype=np.int64)
        sizes = np.diff(np.append(lows, self.count))
        window_of = np.repeat(np.asarray(with_pairs, dtype=np.int64), sizes)
        cuts = np.sort(np.asarray(self.run.purge_cuts, dtype=np.int64))
        purges = (np.searchsorted(cuts, np.arange(self.count), side="right")
                  - np.searchsorted(cuts, np.repeat(lows, sizes), side="left"))
        return window_of * epochs + purges

    def _end(self, i: int, first: bool) -> list[Any]:
        before = self.valid_before(i)
        lows, cuts = before[self.segment], before[self.cut]
        found = cuts > lows
        picked = self.valid_pairs(i)[np.where(found, lows if first else cuts - 1, 0)[found]]
        values = iter(self.python_values(i, picked))
        seqs = iter(self.run.pair_seqs[picked].tolist())
        out: list[Any] = []
        for has, base, dump in zip(found.tolist(), self.restored(i), self.dump, strict=True):
            acc = [next(seqs), next(values)] if has else None
            if base is not None and (first or acc is None):
                acc = base  # first: a restored value came before every pair of this batch
            out.append(acc if dump or acc is None else acc[1])
        return out

    def _collect(self, i: int) -> list[Any]:
        before = self.valid_before(i)
        valid = self.valid_pairs(i)
        lows, cuts = before[self.segment].tolist(), before[self.cut].tolist()
        out: list[Any] = []
        for low, cut, base, dump in zip(lows, cuts, self.restored(i), self.dump, strict=True):
            pairs = valid[low:cut]
            acc = list(base or []) + list(zip(self.run.pair_seqs[pairs].tolist(),
                                              self.python_values(i, pairs), strict=True))
            out.append(acc if dump else [item for _, item in acc])
        return out


def _first_occurrences(keys: np.ndarray) -> np.ndarray:
    """Whether each key is the first of its value in the array (Arrow's hash encoding numbers values
    in order of first appearance, so a first occurrence is one that raises the running maximum)."""
    if not len(keys):
        return np.zeros(0, dtype=bool)
    codes = np.asarray(pa.array(keys, pa.int64()).dictionary_encode().indices, dtype=np.int64)
    previous = np.concatenate(([-1], np.maximum.accumulate(codes)[:-1]))
    return codes > previous
