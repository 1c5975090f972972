"""What the server's main process holds for its sessions, and the budgets that bound it.

The statement workers are capped by the engine and the OS (`--memory-limit`); the main process
holds what sessions keep between messages: prepared statements, settings and temporary views
(*texts*), rows buffered for row-limited portals and cursors (*rows*), and protocol messages being
read. Each session's texts have a cap of their own (`--session-memory`); all of it together has one
server-wide budget (`--buffer-memory`), checked where memory is taken: a request that would go over
is refused with 53200 and everything else goes on. So the main process stays under its baseline
plus `--buffer-memory` plus the send buffers (one result chunk per session)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
from collections.abc import Iterable

import pyarrow as pa

BIG_MESSAGE = 1 << 20  # protocol messages above this are counted while they are read
RETURN_AFTER = 8 << 20  # a session that held more than this gives memory back to the OS at its end


class OverBudget(Exception):
    """Taking this memory would go over a budget; the message says which."""

    def __init__(self, message: str, sqlstate: str = "53200") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.tag = b""  # the protocol message it refused, where it refused one


def text_bytes(texts: Iterable[str]) -> int:
    """Memory of strings as Python holds them (a 4-byte character takes 4 bytes, not 1)."""
    return sum(sys.getsizeof(t) for t in texts)


class ServerMemory:
    """The server-wide budget. Sessions report what they hold (`settle`); `take` is the check."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def settle(self, before: int, now: int) -> None:
        """A holder's count went from `before` to `now` (never refused: memory already held)."""
        self.used += now - before

    def check(self, extra: int, what: str) -> None:
        if extra > 0 and self.used + extra > self.total:
            raise OverBudget(
                f"out of memory: {what} needs {extra:,} bytes and the server's sessions already hold "
                f"{self.used:,} of its --buffer-memory {self.total:,}; try again later or with less",
            )


def return_memory() -> None:
    """Give freed memory back to the OS: Arrow's pool and glibc's heap keep it otherwise."""
    pa.default_memory_pool().release_unused()
    name = ctypes.util.find_library("c")
    if name:
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
            ctypes.CDLL(name).malloc_trim(0)
