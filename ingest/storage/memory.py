"""The ingesting process's allocators: memory freed is memory given back.

An ingest allocates and frees in waves: a batch's rows pile up (Arrow, Python), are written, then
the flat writer's DuckDB resolves and merges. With the defaults, what one wave frees stays with the
allocator that held it and the next wave takes new memory from the system: Arrow's mimalloc pool
keeps its pages, and glibc gives each thread that allocates (DuckDB's, Arrow's, the writer pool's)
an arena of its own, each keeping its free memory. Measured on a 10^5-tensor ingest, peak RSS
summed over the process tree: 522 MiB with the defaults, 475 MiB with Arrow on the system
allocator, 440 MiB with glibc's arenas also capped at 2.

Both settings must be made before the libraries allocate: Arrow reads ARROW_DEFAULT_MEMORY_POOL
once, and glibc creates arenas as threads first allocate (pyarrow and DuckDB start threads when
imported). So importing the `ingest` package calls `configure_allocators()` (before any of its
modules imports pyarrow), and helper processes get the same settings through their environment
(`helper_environment`). A setting the user made in the environment is kept; a process that
imported pyarrow before dumpcat keeps Arrow's default pool unless it set the variable itself.
After every commit `release_free_memory()` hands back what the allocators hold free.

A process that ingests also fixes glibc's thresholds (`tune_for_ingest`): blocks of 256 KiB and
more (Arrow's buffers, DuckDB's blocks) are mapped on their own and unmapped when freed, and a
heap gives back its free top past 1 MiB. glibc's default raises its mapping threshold each time a
mapped block is freed (up to 32 MiB), after which the same buffers come from the heap, where the
walk's many small allocations pin them: on the 10^6-tensor ingest, the ingesting process held
110-140 MiB of free heap at each flush (glibc's mallinfo2) and its anonymous memory went 183-221
-> 146-158 MiB at the flush, and its peak 358 -> 307, with these two settings (no slower:
136.8 s vs 143.8 s in the same probe). They are set for the process when it starts ingesting,
not on import: a program that only queries keeps glibc's defaults.
"""

from __future__ import annotations

import ctypes
import os

_ARENAS = "2"
# glibc's mallopt parameter numbers (malloc.h)
_M_ARENA_MAX = -8
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 256 * 1024  # DuckDB's block, Arrow's buffers of a few thousand rows
_TRIM_THRESHOLD = 1024 * 1024
# set on import (and in a helper's environment)
_SETTINGS = {"MALLOC_ARENA_MAX": _ARENAS, "ARROW_DEFAULT_MEMORY_POOL": "system"}
# set when a process starts ingesting: glibc's environment variable -> (mallopt parameter, value)
_INGEST_THRESHOLDS = {
    "MALLOC_MMAP_THRESHOLD_": (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD),
}

_libc: ctypes.CDLL | None = None
_configured = False
_tuned = False


def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (mallopt and malloc_trim are glibc's), else None."""
    global _libc
    if _libc is None:
        try:
            # the C library Python itself runs on (no `find_library`: it runs ldconfig, a process)
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018 - raises AttributeError on other C libraries
        except (OSError, AttributeError):
            return None
        _libc = libc
    return _libc


def configure_allocators() -> None:
    """Arrow on the system allocator, glibc's arenas capped (once per process; settings the
    environment already makes are kept)."""
    global _configured
    if _configured:
        return
    _configured = True
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", _SETTINGS["ARROW_DEFAULT_MEMORY_POOL"])
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc = _glibc()
        if libc is not None:
            libc.mallopt(_M_ARENA_MAX, int(_ARENAS))


def tune_for_ingest() -> None:
    """Fix glibc's mapping and trim thresholds for this process (once; a threshold the environment
    sets is glibc's own and is kept). Called when an ingest or a watcher starts."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    libc = _glibc()
    if libc is None:
        return
    for variable, (parameter, value) in _INGEST_THRESHOLDS.items():
        if variable not in os.environ:
            libc.mallopt(parameter, value)


def release_free_memory() -> None:
    """Give the system back what the allocators hold free (after a commit: the next batch is
    a while of walking away, and the flat writer's DuckDB freed its working memory)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


class _NoPandas:
    """An import finder that finds no pandas (`decline_pandas_for_arrow`)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def decline_pandas_for_arrow() -> None:
    """Let pyarrow settle, without importing pandas, that it has no pandas to work with.

    pyarrow imports pandas the first time it builds an array from Python values (to ask whether
    they are pandas objects) and the first time it converts an array to numpy (its C++ converter
    loads pandas' types once). Neither needs it here, and in a `dumpcat ingest` process pandas
    and what it imports cost ~0.2 s of CPU and ~30 MiB of peak RSS of an ingest. So, only in a
    command-line process and only if nothing imported pandas yet, both first uses run while
    pandas cannot be imported, and pyarrow records that it has none. The finder is removed right
    after: whatever imports pandas later gets it, and pyarrow's conversions to pandas import it
    then. What changes: pyarrow no longer recognises pandas objects it is handed (a Categorical
    becomes strings, not a dictionary), which is why a library user's process (`Catalog.ingest`)
    is left alone."""
    import sys

    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0], pa.int64()).to_numpy()
    finally:
        sys.meta_path.remove(finder)


def helper_environment() -> dict[str, str]:
    """`os.environ` with these settings where the user made none (a helper's glibc reads
    MALLOC_ARENA_MAX and the thresholds when it starts; helpers only ever ingest)."""
    thresholds = {variable: str(value) for variable, (_, value) in _INGEST_THRESHOLDS.items()}
    return {**_SETTINGS, **thresholds, **os.environ}
