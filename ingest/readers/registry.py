"""The readers dumpcat knows, in the order detection tries them, and detection itself.

A root is offered to each reader in turn; the first claim wins. More specific layouts come first
(a rank-layout tree of raw Ascend files is claimed by the raw reader before the npy reader, which
claims any rank-layout tree). Adding a producer is adding its module here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ingest.errors import DumpRootError
from ingest.readers.ascend_raw import AscendRawReader, AscendRawV12Reader
from ingest.readers.base import Detection, Reader
from ingest.readers.ge_dump import GeDumpReader, OmDumpReader
from ingest.readers.mindspore_bin import MindSporeBinReader
from ingest.readers.mindspore_npy import MindSporeNpyReader
from ingest.readers.msprobe import MsprobeReader

READERS: tuple[type[Reader], ...] = (
    AscendRawReader,
    MindSporeNpyReader,
    AscendRawV12Reader,
    MindSporeBinReader,
    MsprobeReader,
    GeDumpReader,
    OmDumpReader,
)


def reader_names() -> list[str]:
    """The values `--producer` accepts."""
    return [r.name for r in READERS]


def reader_by_name(name: str) -> type[Reader]:
    for reader in READERS:
        if reader.name == name:
            return reader
    raise DumpRootError(f"unknown producer {name!r}; known producers: {', '.join(reader_names())}")


def detect(root: Path, producer: str | None = None) -> Detection:
    """The claim of the first reader that recognises `root` (or of the one named `producer`);
    DumpRootError listing what every reader looked for when none does."""
    readers = (reader_by_name(producer),) if producer else READERS
    detection = _claim(root, readers)
    if detection is not None:
        return detection
    inside = _dumps_inside(root, readers)
    if len(inside) == 1:
        return inside[0]
    if inside:
        names = ", ".join(d.source.name for d in inside)
        raise DumpRootError(
            f"{root} holds {len(inside)} dumps ({names}): name the one to ingest, or several "
            "(`dumpcat ingest` takes several folders, each its own run)"
        )
    looked = "; ".join(f"{r.name}: {r.looked_for}" for r in readers)
    what = f"a {readers[0].name} dump" if producer else "a dump dumpcat can read"
    raise DumpRootError(f"{root} is not {what}. Looked for {looked}")


def _claim(root: Path, readers: tuple[type[Reader], ...]) -> Detection | None:
    for reader in readers:
        detection = reader.detect(root)
        if detection is not None:
            return dataclasses.replace(detection, source=root)
    return None


MAX_FOLDERS_LOOKED_INTO = 64


def _dumps_inside(root: Path, readers: tuple[type[Reader], ...]) -> list[Detection]:
    """The dumps in `root`'s folders, for a root that is not one itself (the run folder of a job
    holds its script, its dump config and `dump/`). One level down only, at most
    MAX_FOLDERS_LOOKED_INTO folders; a folder named `dump` wins over the others."""
    try:
        folders = sorted(
            (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: (p.name != "dump", p.name),
        )[:MAX_FOLDERS_LOOKED_INTO]
    except OSError:
        return []
    found = [d for d in (_claim(p, readers) for p in folders) if d is not None]
    return [d for d in found if d.source.name == "dump"] or found
