"""The contract between a reader and the pipeline: what a reader may ask of an ingest.

A reader (one module per producer and layout) walks a dump and hands rows to an `IngestSink`; it
never sees the pipeline itself (`ingest.pipeline.Ingester`), its pending batch, its manifest or its
summary. The pipeline gives each reader an object that implements this Protocol and nothing more,
so the bookkeeping every reader needs (a tensor known, a file judged, its statistics to compute, the
counts of the summary) is written once, in the pipeline, and a reader cannot get it half right.

This module imports nothing of the pipeline, which imports the readers (through the registry).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from ingest.formats.limits import MetadataCaps

# What the manifest remembers of a file read before: (size, consumed bytes, consumed lines, status),
# status 'ok' or 'error'. Append-only files resume after the consumed bytes and lines.
ManifestEntry = tuple[int, int, int, str]


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """What a reader may know of the ingest it reads for: settings, not state it could change."""

    run: str  # the run every row belongs to
    row_id_of: Callable[[str], int]  # a tensor file's (or slot's) row id from its path under the root
    caps: MetadataCaps  # the largest metadata file of each kind read whole (ingest/formats/limits.py)
    compute_stats: bool = True  # whether statistics are computed from tensor data
    workers: int | None = None  # helper processes (None: one per core, at most 8)
    md5: bool = False  # statistics computed from tensor data include an md5 of the data
    live: bool = False  # a watcher's ingest: a file that may still be written is retried, not judged
    grace: float = 10.0  # live: seconds a file may stay incomplete before it is judged as it is
    settle: float = 1.0  # live: seconds a rewritten-once file (metadata, graphs) must be unchanged
    # The catalog held tensors of this run when the ingest started: files must be checked against
    # the known row ids (a fresh run's first walk skips that check, the scan computes the ids).
    catalog_had_tensors: bool = False


class IngestSink(Protocol):
    """The services of the pipeline a reader uses. Every path a reader passes is under the dump
    root; every `rel` is a path relative to it (`rel()` makes one)."""

    @property
    def options(self) -> IngestOptions:
        """The ingest's settings (live mode may be switched on between walks: read it each time)."""
        ...

    # -- walking -------------------------------------------------------------------------------

    def rel(self, path: str) -> str:
        """`path` relative to the dump root (the key of rows, errors and the manifest)."""
        ...

    def scandir(self, path: str, *, sort: bool = True) -> list[os.DirEntry] | None:
        """A directory's entries (None, and an error row, when it cannot be read). Entries the walk
        must not open (a name that is not UTF-8, a symlink out of the root, a FIFO or device) are
        error rows already and left out."""
        ...

    def saw_files(self, n: int, *, progress: bool = False, later: bool = False) -> None:
        """Count `n` files as seen: the summary, and the progress bar, which counts every file seen so
        that it ends at the count made before the walk. `later`: the bar advances only when the reader
        says it has read them (`files_read`), for files queued to be read in bulk. `progress` is
        accepted and changes nothing (the bar once counted only the files it named)."""
        ...

    def files_read(self, n: int) -> None:
        """Advance the progress bar by `n` of the files counted with `saw_files(later=True)`."""
        ...

    def warm_helpers(self, task: str | None = None) -> None:
        """Start the helper processes now, the dump having proved big (`task`: what they will run)."""
        ...

    # -- what earlier ingests read (the manifest) and live mode ------------------------------------

    def previous(self, rel: str) -> ManifestEntry | None:
        """What the manifest says of `rel` (read by an earlier ingest or walk), or None."""
        ...

    def is_unchanged(self, rel: str, size: int) -> bool:
        """Was `rel` read before at this size (so reading it again would add nothing)?"""
        ...

    def record(self, rel: str, kind: str, size: int, consumed: int, lines: int, status: str) -> None:
        """Remember in the manifest how far a file was read (committed with the rows read from it)."""
        ...

    def still_written(
        self, entry: os.DirEntry, rel: str, window: float | None = None, *, fresh: bool = False
    ) -> bool:
        """Live mode: may this file still be being written (modified within `window`, default
        `grace`)? If so it is waited on (its directory rescanned) and must not be judged yet.
        `fresh`: judge its age now, not as listed (a file still appended to). Never in a one-shot
        ingest."""
        ...

    def judged(self, *rels: str) -> None:
        """These files are read (or in error) as they are: no longer waited on (live mode)."""
        ...

    # -- rows ------------------------------------------------------------------------------------

    def add(self, table: str, row: tuple) -> None:
        """Queue one row of a catalog table other than `tensors` and `stat_rows` (a tuple in the
        table's schema order)."""
        ...

    def add_rows(self, table: str, rows: Iterable[tuple]) -> None:
        """Queue rows of a catalog table other than `tensors` and `stat_rows`."""
        ...

    def add_table(self, table: str, rows: pa.Table) -> None:
        """Queue an Arrow table of rows of a catalog table other than `tensors` and `stat_rows`."""
        ...

    def add_tensor_rows(self, rel: str, rows: list[tuple], needs_stats: Iterable[int] | None = None) -> None:
        """Queue the `tensors` rows of one new file, `rel` (judged: no longer waited on). The rows'
        ids become known; `needs_stats` lists those whose statistics are computed from the data
        (default: all)."""
        ...

    def add_tensor_table(
        self, table: pa.Table, needs_stats: Iterable[int] | None = None, *, new_files: int = 0
    ) -> None:
        """Queue `tensors` rows built as an Arrow table, read from `new_files` new files; as
        `add_tensor_rows` for the ids and statistics. The reader says which files it judged."""
        ...

    def add_computed_stats(self, table: pa.Table, failed: list[tuple[str, str]]) -> None:
        """Queue `tensor_stats` rows computed while their tensors were scanned (tensors queued with
        no `needs_stats`), and an error for each (rel_path, reason) of `failed`."""
        ...

    def add_stat_chunk(self, table: pa.Table) -> None:
        """Queue a chunk of a statistics file's rows (`stat_rows`, in its schema)."""
        ...

    def is_known(self, row_id: int) -> bool:
        """Is this tensor row cataloged (by an earlier ingest, or queued by this one)?"""
        ...

    def known_many(self, row_ids: list[int]) -> np.ndarray:
        """`is_known` of many row ids at once (a bool array)."""
        ...

    # -- errors and pacing -------------------------------------------------------------------------

    def error(self, rel: str, stage: str, reason: str, size: int | None = None) -> None:
        """An `ingest_errors` row (`rel` may name a line: `path:line`)."""
        ...

    def file_error(self, rel: str, kind: str, stage: str, reason: str, size: int | None = None) -> None:
        """An error about a whole file or directory: judged, and recorded once (not again on
        re-ingest unless the file changed size)."""
        ...

    def flush_if_full(self) -> None:
        """Commit what is queued when a batch is full (bounded memory); readers call it as they go."""
        ...
