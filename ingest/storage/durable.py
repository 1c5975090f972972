"""Writes that survive a crash: a file replaced whole by a rename, and fsync of a path."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomic(path: Path, obj: dict, *, durable: bool = True) -> None:
    """Replace `path` with `obj` as JSON by a rename: a reader sees the old or the new file whole.
    `durable` also fsyncs the file and its directory (the snapshot; not a status file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
