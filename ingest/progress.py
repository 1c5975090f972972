"""Progress reports of the long operations (ingest, `dumpcat stats`, `dumpcat compare`).

Their `on_progress` argument is a callable taking a count of units done (files, tensors, pairs),
e.g. a tqdm bar's `update`. An object that also has these methods hears more, so that a bar can
show a total, an ETA and what is being done when the count stands still:

    total(n: int)     the number of units the work holds (known up front, or once a walk ends)
    phase(name: str)  what the work does now: "walking", "computing statistics", "committing", ...

Nothing here draws anything: the command line's bar is catalog/cli/progress.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["PHASES", "count_files", "phase_hook", "total_hook"]

# The phase names the pipeline, the store, `dumpcat stats` and `dumpcat compare` report.
PHASES = (
    "counting files", "walking", "computing statistics", "writing batch", "resolving names", "committing",
    "merging flat files", "listing tensors", "pairing", "comparing",
)  # fmt: skip


def _ignore(_: object) -> None:
    pass


def phase_hook(on_progress: object) -> Callable[[str], None]:
    """`on_progress.phase` when the callback has one, else a no-op (a plain callable stays valid)."""
    return getattr(on_progress, "phase", None) or _ignore


def total_hook(on_progress: object) -> Callable[[int], None]:
    """`on_progress.total` when the callback has one, else a no-op."""
    return getattr(on_progress, "total", None) or _ignore


def count_files(root: str | os.PathLike) -> int:
    """The entries that are not directories under `root` (symlinks not followed): what an ingest's
    walk will see, counted up front so that its bar has a total (~0.1 s per 10^5 files, warm cache;
    the listing is then cached for the walk). Unreadable directories count nothing."""
    count = 0
    stack = [os.fspath(root)]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                            continue
                    except OSError:
                        pass
                    count += 1
        except OSError:
            continue
    return count
