"""The readers dumpcat knows, in the order detection tries them, and detection itself.

A root is offered to each reader in turn; the first claim wins. More specific layouts come first
(a rank-layout tree of raw Ascend files is claimed by the raw reader before the npy reader, which
claims any rank-layout tree). Adding a producer is adding its module here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ingest.pipeline import DumpRootError
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
    for reader in readers:
        detection = reader.detect(root)
        if detection is not None:
            return dataclasses.replace(detection, source=root)
    looked = "; ".join(f"{r.name}: {r.looked_for}" for r in readers)
    what = f"a {readers[0].name} dump" if producer else "a dump dumpcat can read"
    raise DumpRootError(f"{root} is not {what}. Looked for {looked}")
