"""Stable ids: a row id is a function of what identifies the row, never of ingest order.

A tensor's row id is derived from its run name and its path relative to the dump root, so
re-ingesting, ingesting in another order, or recovering after a crash gives the same ids.
63 bits of BLAKE2b keep ids positive BIGINTs; the odds of any collision are about 5e-8 among
10^6 rows (birthday bound n²/2^64).
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the helpers that hash tensor paths run without numpy
    import numpy as np

_MASK = (1 << 63) - 1


def stable_id(*parts: str | int) -> int:
    """Positive 63-bit id from the given parts."""
    h = blake2b("\x1f".join(str(p) for p in parts).encode("utf-8"), digest_size=8)
    return int.from_bytes(h.digest(), "little") & _MASK


def tensor_row_id(run: str, rel_path: str) -> int:
    return stable_id("t", run, rel_path)


class TensorIdHasher:
    """`tensor_row_id` for one run, with the run's prefix hashed once (2x faster per call)."""

    def __init__(self, run: str) -> None:
        self._prefix = blake2b(f"t\x1f{run}\x1f".encode(), digest_size=8)

    def __call__(self, rel_path: str) -> int:
        h = self._prefix.copy()
        h.update(rel_path.encode("utf-8"))
        return int.from_bytes(h.digest(), "little") & _MASK


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that scatters consecutive numbers."""
    import numpy as np

    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def stat_row_ids(run: str, csv_rel_path: str, line_nos: Sequence[int] | np.ndarray) -> np.ndarray:
    """Ids of statistic.csv lines: the csv's BLAKE2b id XOR a mix of the line number.

    A statistic.csv of a million-file dump has a line per tensor, so its ids are computed as one
    numpy expression rather than a hash per line. Distinct lines of one file never collide (the
    mix is a bijection); lines of two files collide with the same odds as independent hashes."""
    import numpy as np

    base = np.uint64(stable_id("s", run, csv_rel_path))
    with np.errstate(over="ignore"):
        mixed = _mix64(np.asarray(line_nos, dtype=np.uint64))
    return ((mixed ^ base) & np.uint64(_MASK)).astype(np.int64)


def stat_row_id(run: str, csv_rel_path: str, line_no: int) -> int:
    """The id of one statistic.csv line (see `stat_row_ids`)."""
    return int(stat_row_ids(run, csv_rel_path, [line_no])[0])
