"""The set of row ids a run has cataloged, in 8 bytes per id.

An ingester must know which tensors a run already holds (a re-ingest or a watcher skips them; a
live pass must not catalog a file twice). A Python `set` of ints costs ~70 bytes per id: 70 MiB
at 10^6 tensors, 700 MiB at 10^7, the largest state an ingest kept that grew with the dump.

Here the newest ids sit in a small Python set; every `_RECENT_MAX` of them become a sorted int64
array, and arrays of similar size are merged (a binary-counter scheme: at most ~log2(n / _RECENT_MAX)
arrays, each id merged ~log2 times in all). A lookup is one set probe plus one binary search per
array; `contains_many` answers a whole directory's ids with vectorised searches.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_RECENT_MAX = 1 << 16


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    a = np.sort(a, kind="stable")  # two sorted runs concatenated: timsort merges them in one pass
    if len(a) > 1:
        keep = np.empty(len(a), dtype=bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    return a


class RowIdSet:
    """A set of int64 row ids: add/update/`in`/len like a `set`, in about 8 bytes per id."""

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._recent: set[int] = set()
        self._runs: list[np.ndarray] = []  # sorted, unique, largest first
        self.update(ids)

    def add(self, row_id: int) -> None:
        self._recent.add(row_id)
        if len(self._recent) >= _RECENT_MAX:
            self._spill()

    def update(self, row_ids: Iterable[int] | np.ndarray) -> None:
        if isinstance(row_ids, np.ndarray):
            if len(row_ids) >= _RECENT_MAX:
                self._push(_sorted_unique(row_ids.astype(np.int64)))
                return
            row_ids = row_ids.tolist()
        self._recent.update(row_ids)
        if len(self._recent) >= _RECENT_MAX:
            self._spill()

    def __contains__(self, row_id: object) -> bool:
        if row_id in self._recent:
            return True
        for run in self._runs:
            i = run.searchsorted(row_id)
            if i < len(run) and run[i] == row_id:
                return True
        return False

    def contains_many(self, row_ids: list[int] | np.ndarray) -> np.ndarray:
        """A boolean array: is each of `row_ids` in the set?"""
        ids = np.asarray(row_ids, dtype=np.int64)
        found = np.zeros(len(ids), dtype=bool)
        if self._recent:
            found |= np.fromiter((int(r) in self._recent for r in ids), dtype=bool, count=len(ids))
        for run in self._runs:
            i = np.minimum(run.searchsorted(ids), len(run) - 1)
            found |= run[i] == ids
        return found

    def __len__(self) -> int:
        """Exact: an id added twice counts once (the runs are merged into one to count)."""
        self._spill()
        if len(self._runs) > 1:
            self._runs = [_sorted_unique(np.concatenate(self._runs))]
        return len(self._runs[0]) if self._runs else 0

    def nbytes(self) -> int:
        """Memory held by the arrays (the recent set not counted)."""
        return sum(r.nbytes for r in self._runs)

    def _spill(self) -> None:
        if self._recent:
            recent = np.fromiter(self._recent, dtype=np.int64, count=len(self._recent))
            self._recent = set()
            self._push(_sorted_unique(recent))

    def _push(self, run: np.ndarray) -> None:
        if not len(run):
            return
        # a run already known (ids added again) is dropped by the merge's dedup
        self._runs.append(run)
        while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            b = self._runs.pop()
            a = self._runs.pop()
            self._runs.append(_sorted_unique(np.concatenate([a, b])))
