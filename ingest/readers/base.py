"""What a producer reader is: it recognises a dump root, walks it, and turns its files into rows.

The pipeline (`ingest.pipeline`) owns everything that does not depend on the producer: the catalog
state, row batching and commits, the manifest of what was read, `ingest_errors`, live-mode waiting,
and the statistics computed from tensor data. A reader only walks the tree and calls those services
through the `IngestSink` it is given (ingest/readers/sink.py), never the pipeline itself. Every
`tensors` row it adds says where the tensor's bytes are (file, offset, stored dtype, device shape
and format, host shape), so `Catalog.tensor` and the statistics never ask which producer wrote a
file.

Adding a producer is one module with one `Reader` subclass, its tests, and its line in
`ingest.readers.registry` (or, outside this tree, an entry point of the `dumpcat.producers` group).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ingest.readers.sink import IngestSink


@dataclass(frozen=True)
class Detection:
    """A reader's claim on a dump root: what it found there, and where."""

    reader: type[Reader]
    root: Path  # the dump root rows are relative to
    evidence: str  # one file or folder that made the claim, relative to the root
    units: tuple[Path, ...] = field(default_factory=tuple)  # e.g. the rank folders given
    fixed: bool = False  # True when a single unit (one rank folder) was given: never look for others
    provisional: bool = False  # claimed on the layout alone (no data file yet): detect again later
    source: Path | None = None  # the path detection was given (the root, or e.g. one rank folder)

    @property
    def description(self) -> str:
        r = self.reader
        return f"{r.producer}, {r.layout} ({self.evidence})"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a leaf directory sits in the run: what every tensor file in it shares."""

    rank: int
    net: str
    graph_id: int | None
    iteration: int | None
    dir_kind: str  # 'iteration' | 'constants'


class Reader:
    """One producer's layout. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]  # the --producer value, e.g. 'mindspore-npy'
    producer: ClassVar[str]  # who writes it, e.g. 'MindSpore 1.3+ (npy)'
    layout: ClassVar[str]  # the tree it walks, e.g. 'rank_N/{net}/{graph}/{iteration}/'
    looked_for: ClassVar[str]  # what `detect` looks for, for the message when nothing matched
    # The row of the producers table in docs/producers.md (markdown; tests/producers_table.py):
    dumped_by: ClassVar[str]  # who writes such dumps, and how they are configured
    tree: ClassVar[str]  # the files and folders of the layout
    cataloged: ClassVar[str]  # what ends up in the catalog
    decoders: ClassVar[tuple[str, ...]] = ()  # the ingest.formats modules it reads files with

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        self.sink = sink  # the pipeline's services: the only way a reader reaches the ingest
        self.detection = detection
        self.root = detection.root

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        """A claim on `path` (a dump root, or a part of one the reader accepts), or None."""
        raise NotImplementedError

    def walk(self) -> None:
        """Read everything under the root (a one-shot ingest, or a watcher's reconciliation scan)."""
        raise NotImplementedError

    def scan_path(self, path: str) -> None:
        """Re-read what a change at `path` (a directory under the root) can affect. By default the
        whole tree: correct for any reader, and re-reads are cheap because unchanged files are
        skipped by the manifest."""
        self.walk()

    def finish(self) -> None:
        """Process work a reader queued (e.g. for parallel scanning) before the pipeline commits."""


def list_dir(path: Path | str, limit: int = 10_000) -> list[os.DirEntry]:
    """Up to `limit` entries of a directory in name order (empty when unreadable): for detection,
    which must stay cheap on a root holding a million files."""
    out: list[os.DirEntry] = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                out.append(entry)
                if len(out) >= limit:
                    break
    except OSError:
        return []
    out.sort(key=lambda e: e.name)
    return out


def first_file(path: Path | str, depth: int, accept, limit: int = 64) -> str | None:
    """The path (relative to `path`) of the first file `depth` folders down whose name `accept`s,
    looking at no more than `limit` entries per folder."""
    entries = list_dir(path, limit)
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if depth == 0 and not is_dir and accept(entry.name):
            return entry.name
        if depth > 0 and is_dir:
            found = first_file(entry.path, depth - 1, accept, limit)
            if found is not None:
                return f"{entry.name}/{found}"
    return None
