"""The catalog writer's DuckDB, made ready while a one-shot ingest starts.

A `dumpcat ingest` of a small dump is mostly start-up: Python importing numpy, pyarrow and DuckDB,
then DuckDB binding the resolution SQL (sql/00_op_keys.sql, 30_tensors.sql, 40_stats.sql: creating
a view binds it, ~70 ms with the connection) when the first batch commits. DuckDB does that without
holding the GIL, so the `ingest` command calls `warm_up_writer(open_writer_connection)` first
thing: a thread opens the writer's connection and defines its views while the main thread imports
the rest and scans the dump. The first `FlatWriter` to connect takes it (`take_warm_connection`);
if the thread failed, the writer connects itself, and any error shows there, where it always did.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

_SWITCH_INTERVAL = 0.0005  # seconds
_lock = threading.Lock()
_thread: threading.Thread | None = None
_connection: duckdb.DuckDBPyConnection | None = None


def warm_up_writer(open_connection: Callable[[], duckdb.DuckDBPyConnection]) -> None:
    """Start `open_connection()` (ingest.storage.flat.open_writer_connection) in a thread, once per
    process. The caller has imported what it needs: two threads importing at once take turns on
    the GIL and module locks and gain nothing, while DuckDB's connecting and binding run beside
    the caller's imports. (Passed in, not imported here: flat.py takes the connection from here.)"""
    global _thread
    with _lock:
        if _thread is not None:
            return
        # Not a daemon: the interpreter waits for it at exit. A daemon thread still inside DuckDB
        # when the process ends (a dump root refused right away) aborts it.
        _thread = threading.Thread(target=_open, args=(open_connection,), name="dumpcat-writer-warm-up")
        _thread.start()


def _open(open_connection: Callable[[], duckdb.DuckDBPyConnection]) -> None:
    global _connection
    # DuckDB's Python client takes the GIL back between steps of a statement (to check for
    # Ctrl-C); beside a thread busy importing, each time waits out the switch interval (5 ms),
    # which made the warm-up 3-10x slower than alone. A short interval while it runs avoids that.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, _SWITCH_INTERVAL))
    try:
        con = open_connection()
    except Exception:  # the writer connects itself and reports the error then
        return
    finally:
        sys.setswitchinterval(interval)
    with _lock:
        _connection = con


def take_warm_connection() -> duckdb.DuckDBPyConnection | None:
    """The warmed-up connection (waiting for it if it is still being made), or None: there was
    no warm-up, it failed, or an earlier writer took it."""
    global _connection
    with _lock:
        thread = _thread
    if thread is None:
        return None
    thread.join()
    with _lock:
        con, _connection = _connection, None
    return con
