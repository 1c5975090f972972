"""Small facts about a dump's files (size, age) and the ingest clock: shared by the pipeline and
the readers, which must not import the pipeline (it imports them, through the registry)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime


def now() -> datetime:
    """The time rows are stamped with (UTC)."""
    return datetime.now(UTC)


def age(entry: os.DirEntry) -> float:
    """Seconds since the file was last modified (infinite when it cannot be stat'ed)."""
    try:
        return time.time() - entry.stat().st_mtime
    except OSError:
        return float("inf")


def fresh_age(path: str) -> float:
    """Seconds since `path` was last modified, stat'ed now (a DirEntry keeps its first stat)."""
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return float("inf")


def size_or_none(entry: os.DirEntry) -> int | None:
    """The file's size, or None when it cannot be stat'ed (it vanished, or is unreadable)."""
    try:
        return entry.stat().st_size
    except OSError:
        return None
