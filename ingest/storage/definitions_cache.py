"""Databases of view definitions, built once per dumpcat and DuckDB and kept in a per-user cache.

Creating a DuckDB view or macro binds it: sql/*.sql costs ~0.4 s of CPU to define, and the
writer's resolution views ~0.13 s. Those definitions depend only on dumpcat's code and DuckDB's
version, never on a catalog, so the first process that needs them writes them into a small
database file here, and later ones attach or copy it (~0.03 s). The callers: the writer
(ingest/storage/flat.py), each catalog snapshot's views database (catalog/views.py) and the
server's (catalog/server/sandbox.py).

The folder is `$DUMPCAT_CACHE_DIR`, else `$XDG_CACHE_HOME/dumpcat`, else `~/.cache/dumpcat`, made
with mode 0700 and used only if it is this user's alone: a file in it defines what queries run,
so nobody else may be able to plant one. Without a usable folder, or when a file cannot be built
or opened, callers define their views themselves, as they did before the cache existed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

CACHE_ENV = "DUMPCAT_CACHE_DIR"
_KEEP_SECONDS = 7 * 86400  # cached files of other dumpcat versions unused this long are removed
_TOUCH_SECONDS = 86400  # a file in use has its time renewed at most this often


def cache_folder() -> Path | None:
    """The user's dumpcat cache folder (see the module docstring), or None where it cannot be
    made or is not this user's alone."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "dumpcat"
    )
    try:
        folder = Path(base)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except (OSError, RuntimeError):  # RuntimeError: no home folder to expand ~ in
        return None
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return folder


def cached_database(
    prefix: str, key: str, build: Callable[[Path], None], *, rebuild: bool = False
) -> Path | None:
    """The cached database `<prefix>-<key>.duckdb`, built by `build(path)` when missing or when
    `rebuild` (the caller found it damaged): into a new file, then renamed into place, so that
    processes building it at once write the same definitions and the last rename wins. None
    without a usable cache folder or when building fails: the caller then defines its views
    itself. Files of the same prefix and another key unused for a week are removed."""
    folder = cache_folder()
    if folder is None:
        return None
    path = folder / f"{prefix}-{key}.duckdb"
    if not rebuild and path.exists():
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > _TOUCH_SECONDS:
                os.utime(path)  # in use: kept
        return path
    partial = folder / f".{path.name}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        build(partial)
        os.replace(partial, path)
    except (OSError, duckdb.Error):
        return None
    finally:
        for leftover in (partial, partial.with_name(partial.name + ".wal")):
            leftover.unlink(missing_ok=True)
    now = time.time()
    for old in folder.glob(f"{prefix}-*.duckdb"):
        with contextlib.suppress(OSError):
            if old != path and now - old.stat().st_mtime > _KEEP_SECONDS:
                old.unlink()
    return path


def opens_with_view(path: Path, view: str) -> bool:
    """Whether `path` is a DuckDB database that defines `view` (a damaged or foreign file is not)."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            found = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [view]).fetchone()
            return found[0] > 0
    except duckdb.Error:
        return False
