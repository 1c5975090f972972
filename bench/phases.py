"""Wall seconds spent inside given methods during a piece of work: where an ingest's time goes.

A benchmark wraps the methods for the duration of a ``with`` block and reads the sums after. Used for
phase breakdowns (bench_raw) and for the floors the ingest ratios are compared with (real_tree,
bench_core): the part of an ingest that is the run's flat files (``FlatWriter.resolve_run``)."""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Iterable, Iterator

# the run's flat files, written once at the end of a one-shot ingest (docs/catalog-on-disk.md)
FLAT_FILES = ("ingest.storage.flat", "FlatWriter", "resolve_run", "the run's flat files (resolve_run)")


@contextlib.contextmanager
def timed_methods(specs: Iterable[tuple[str, str, str, str]]) -> Iterator[dict[str, float]]:
    """Time every call of each (module, class, method, label) inside the block; yields the dict of
    label -> seconds it fills. Calls nest freely: an inner phase is counted in its outer one too."""
    spent: dict[str, float] = {}
    saved = []
    for mod, cls_name, meth, label in specs:
        cls = getattr(importlib.import_module(mod), cls_name)
        orig = cls.__dict__[meth]

        def timed(*args, _orig=orig, _label=label, **kw):
            t = time.perf_counter()
            try:
                return _orig(*args, **kw)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - t

        saved.append((cls, meth, orig))
        setattr(cls, meth, timed)
    try:
        yield spent
    finally:
        for cls, meth, orig in saved:
            setattr(cls, meth, orig)
