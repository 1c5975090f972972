"""The producer-agnostic ingest pipeline: catalog state, batching, commits, errors, statistics.

A reader (`ingest.readers`, one module per producer and layout) walks a dump root and calls the
services of its `IngestSink` (ingest/readers/sink.py; here `ReaderSink`, over an `Ingester`): queue
rows and tensor rows, record a file in the manifest, record an `ingest_errors` row, ask whether a
file may still be written (live mode), `flush_if_full`. The pipeline batches rows and commits a
batch atomically with its manifest whenever enough are pending, so memory stays bounded however
large the dump is, and computes statistics for every new tensor that has none from the dump,
reading its bytes where its `tensors` row says they are (whatever the producer: npy, raw protobuf
dump, device format).

Re-ingest is incremental: a tensor file whose row id is already in the catalog is skipped, and
append-only files (statistic.csv, the execution-order csvs) resume after the last complete line
already ingested.
"""

from __future__ import annotations

import dataclasses
import gc
import operator
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.errors import DumpRootError
from ingest.files import age, fresh_age, now, size_or_none
from ingest.formats.limits import MetadataCaps
from ingest.helper_pool import start_helpers, stop_idle_helpers
from ingest.ids import TensorIdHasher
from ingest.progress import phase_hook, total_hook
from ingest.readers.sink import IngestOptions, ManifestEntry
from ingest.row_id_set import RowIdSet
from ingest.statistics.rows import computed_stats_rows
from ingest.storage.flat import writer_memory_limit
from ingest.storage.memory import tune_for_ingest
from ingest.storage.schema import ARROW_CHUNK_ROWS, TABLES, rows_to_table
from ingest.storage.store import CatalogError, CatalogStore, check_writer_name

if TYPE_CHECKING:
    from ingest.readers.base import Detection, Reader

# DumpRootError (ingest/errors.py) and the file helpers (ingest/files.py) live below the readers,
# which must not import this module; they are still importable from here.
__all__ = [
    "DumpRootError", "IngestSummary", "Ingester", "ReaderSink", "age", "default_run_name", "detect_dump",
    "fresh_age", "ingest_dump", "ingest_many", "now", "resolve_dump_dir", "size_or_none",
]  # fmt: skip

VERSION = "0.1.0"
# Text columns a big pending chunk (a leaf directory's scanned tensors, a statistic.csv) holds
# dictionary-encoded until its batch is written: one value for the whole chunk, or an operator's
# name for its few tensors. 10^6 tensors, 25,000 a directory: a full batch's pending rows 51 -> 37
# MiB. The store casts each table back to its schema when it writes the batch.
_DICTIONARY_COLUMNS = {
    "tensors": ("run", "net", "dir_kind", "op_type", "file_op_name", "file_op_base", "io", "format",
                "dtype", "stored_dtype", "name_era", "producer"),
    "stat_rows": ("run", "net", "csv_path", "op_type", "file_op_name", "file_op_base", "io", "data_type"),
}  # fmt: skip
_DICTIONARY_MIN_ROWS = 4096  # (smaller chunks stay plain: encoding imports pyarrow.compute, ~40 ms)
_COUNTED_TABLES = frozenset({"ops", "ir_nodes"})  # IngestSummary counts the rows queued of these


@dataclass
class IngestSummary:
    run: str
    dump_root: str
    files_seen: int = 0
    files_new: int = 0
    tensors: int = 0
    stat_rows: int = 0
    computed_stats: int = 0
    ops: int = 0
    ir_nodes: int = 0
    errors: int = 0
    batches: int = 0
    seconds: float = 0.0
    producer: str = ""  # the reader that read the dump
    detected: str = ""  # what detection found (the reader's claim)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Pending:
    """Rows waiting for the next commit, per table, plus the tensors to compute statistics for.

    Rows built one by one are tuples in `rows` (statistic.csv chunks are Arrow tables there), and
    every ARROW_CHUNK_ROWS of them become an Arrow table in `tables`, where a row takes a fraction
    of the memory; scanned tensors rows (leaf_scan) arrive as Arrow tables."""

    rows: dict[str, list] = field(default_factory=lambda: {name: [] for name in TABLES})
    tables: dict[str, list[pa.Table]] = field(default_factory=lambda: {name: [] for name in TABLES})
    table_rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    stat_ids: list[int] = field(default_factory=list)  # pending tensors whose statistics are computed

    def add_table(self, name: str, table: pa.Table) -> None:
        self.tables[name].append(compact_text(name, table))
        self.table_rows[name] += table.num_rows

    def add_stat_chunk(self, table: pa.Table) -> None:
        """A chunk of a statistics file's rows (counted as one row towards the flush threshold)."""
        self.rows["stat_rows"].append(compact_text("stat_rows", table))

    def size(self) -> int:
        """Rows that count towards the flush threshold (statistic.csv chunks count as one each)."""
        rows, arrow = self.rows, self.table_rows
        return (
            len(rows["tensors"]) + arrow["tensors"]
            + len(rows["stat_rows"])
            + len(rows["manifest"]) + arrow["manifest"]
        )  # fmt: skip


# Folder names MindSpore users give the dump `path` itself; a run named after them says nothing.
_GENERIC_ROOT_NAMES = frozenset({"dump", "dumps", "dump_data", "dump_path", "dump_dir", "data", "output"})


def default_run_name(root: Path) -> str:
    """The run name when none is given: the dump root's folder name, or its parent's when the root
    has a generic name (`…/nan_log/dump` and `…/nan_log/dump/rank_0` are run `nan_log`)."""
    if root.name.lower() in _GENERIC_ROOT_NAMES and root.parent.name:
        return root.parent.name
    return root.name


def compact_text(name: str, table: pa.Table) -> pa.Table:
    """`table` (rows of catalog table `name`) with its repetitive text columns dictionary-encoded
    when it is big (see _DICTIONARY_COLUMNS); as it is otherwise."""
    columns = _DICTIONARY_COLUMNS.get(name)
    if columns is None or table.num_rows < _DICTIONARY_MIN_ROWS:
        return table
    for column in columns:
        i = table.schema.get_field_index(column)
        if i >= 0 and pa.types.is_string(table.schema.field(i).type):
            table = table.set_column(i, column, table.column(i).combine_chunks().dictionary_encode())
    return table


def concat_pending(tables: list[pa.Table]) -> pa.Table:
    """One table of pending chunks, some of them with dictionary-encoded text columns: the others
    are encoded too (one schema), so that nothing is decoded before the batch is written."""
    schemas = {t.schema for t in tables}
    if len(schemas) > 1:
        fields = {}
        for schema in schemas:
            for f in schema:
                if pa.types.is_dictionary(f.type):
                    fields[f.name] = f
        target = pa.schema([fields.get(f.name, f) for f in tables[0].schema])
        tables = [t if t.schema.equals(target) else t.cast(target) for t in tables]
    return pa.concat_tables(tables)


def resolve_dump_dir(path: str | os.PathLike) -> Path:
    """The absolute dump directory, or DumpRootError when it is missing, not a folder or not UTF-8."""
    p = Path(path)
    if not p.exists():
        raise DumpRootError(f"dump directory {p} does not exist")
    if not p.is_dir():
        raise DumpRootError(f"{p} is not a directory")
    p = p.resolve()
    try:
        str(p).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(p).decode("utf-8", "backslashreplace")
        raise DumpRootError(f"dump directory {shown} has a name that is not valid UTF-8") from None
    return p


def _option(name: str) -> property:
    """An Ingester attribute kept in its `options` (what its reader reads, IngestOptions): setting
    it (the watcher switches live mode on) replaces the frozen options."""

    def get(self: Ingester):
        return getattr(self.options, name)

    def set_(self: Ingester, value) -> None:
        self.options = dataclasses.replace(self.options, **{name: value})

    return property(get, set_, doc=f"`options.{name}` (ingest.readers.sink.IngestOptions)")


class Ingester:
    """One ingest of one dump root into one run of a catalog, walked by the root's reader.

    Use `ingest_dump` for a one-shot ingest; the watcher drives `begin`, `scan_all`, `scan_path`
    and `commit` itself. The reader is found by detection (or forced with `producer`); a watcher
    started on an empty root detects it once the producer has written something. The reader gets a
    `ReaderSink` of this Ingester, never the Ingester itself.
    """

    run = _option("run")
    row_id_of = _option("row_id_of")
    caps = _option("caps")
    compute_stats = _option("compute_stats")
    workers = _option("workers")
    # Live mode (the watcher): a file that may still be written is retried, never an error.
    live = _option("live")
    grace = _option("grace")  # seconds a file may stay incomplete before it is judged as it is
    settle = _option("settle")  # seconds a rewritten-once file (metadata, graphs) must be unchanged
    catalog_had_tensors = _option("catalog_had_tensors")  # set by _load_state

    def __init__(
        self,
        store: CatalogStore,
        run: str,
        dump_root: Path,
        detection: Detection | None = None,
        *,
        producer: str | None = None,
        compute_stats: bool = True,
        md5: bool = False,
        workers: int | None = None,
        batch_rows: int = 50_000,
        on_progress: Callable[[int], None] | None = None,
        follow_symlinks: bool = False,
        max_metadata_size: str | int | MetadataCaps | None = None,
    ) -> None:
        tune_for_ingest()  # glibc gives freed buffers back as the walk goes (ingest/storage/memory.py)
        # The largest metadata file of each kind read whole (ingest/formats/limits.py): a bigger one is an
        # ingest_errors row, never an allocation. None: DUMPCAT_MAX_METADATA_SIZE, else the defaults.
        self.options = IngestOptions(
            run=run, row_id_of=TensorIdHasher(run), caps=MetadataCaps.parse(max_metadata_size),
            compute_stats=compute_stats, workers=workers, md5=md5,
        )  # fmt: skip
        self.store = store
        self.root = dump_root
        self._root_len = len(str(dump_root)) + 1
        self._root_real = os.path.realpath(dump_root)
        # Symlinks whose target is outside the dump root are not followed unless asked for
        # (`--follow-symlinks`): a dump is input from anyone, and must not catalog other files.
        self.follow_symlinks = follow_symlinks
        self.producer = producer
        self.md5 = md5
        self.batch_rows = batch_rows
        # files seen advance `on_progress`; one with `phase`/`total` methods (ingest/progress.py) also
        # hears what the ingest does after the walk, and the walk's count when it ends
        self.on_progress = on_progress
        self.on_phase = phase_hook(on_progress)
        self.on_total = total_hook(on_progress)
        self.summary = IngestSummary(run=run, dump_root=str(dump_root))
        self.pending = _Pending()
        self.known_tensors = RowIdSet()  # 8 bytes per tensor, not a set's ~70
        self.manifest: dict[
            str, ManifestEntry
        ] = {}  # rel_path -> (size, consumed_bytes, consumed_lines, status)
        self.pending_files: dict[str, str] = {}  # rel path -> directory to rescan
        self.reader: Reader | None = None
        self._helpers_started = False
        if detection is not None:
            self.reader = detection.reader(ReaderSink(self), detection)

    # -- catalog state ---------------------------------------------------------------------

    def _load_state(self) -> None:
        """Row ids of tensors already cataloged for this run, and the non-tensor manifest: what
        this writer's shard holds (another writer's shard holds other ranks)."""
        snap = self.store.snapshot()
        roots = set()
        for batch in snap["batches"]:
            if batch["run"] != self.run:
                continue
            bdir = self.store.root / batch["path"]
            if "tensors" in batch["tables"]:
                ids = pq.read_table(bdir / "tensors.parquet", columns=["row_id"]).column(0)
                self.known_tensors.update(ids.to_numpy())
                self.catalog_had_tensors = self.catalog_had_tensors or len(ids) > 0
            if "manifest" in batch["tables"]:
                t = pq.read_table(
                    bdir / "manifest.parquet",
                    columns=["rel_path", "file_size", "consumed_bytes", "consumed_lines", "status"],
                )
                cols = [t.column(i).to_pylist() for i in range(5)]
                for rel, size, cb, cl, status in zip(*cols, strict=True):
                    self.manifest[rel] = (size, cb, cl, status)
            if "runs" in batch["tables"]:
                roots.update(
                    pq.read_table(bdir / "runs.parquet", columns=["dump_root"]).column(0).to_pylist()
                )
        if roots and str(self.root) not in roots:
            other = " or with another --writer (one per host)" if self.store.writer is None else ""
            raise CatalogError(
                f"run {self.run!r} already holds dump {sorted(roots)[0]}"
                + (f" in writer {self.store.writer!r}'s shard" if self.store.writer else "")
                + f"; ingest {self.root} under another name with --run{other}"
            )
        if not roots:
            self.add("runs", (self.run, str(self.root), now(), VERSION))

    # -- services for readers ----------------------------------------------------------------

    def add(self, table: str, row: tuple) -> None:
        """Queue one row (a tuple in the table's schema order)."""
        rows = self.pending.rows[table]
        rows.append(row)
        if len(rows) >= ARROW_CHUNK_ROWS:
            self.pending.add_table(table, rows_to_table(rows, TABLES[table]))
            self.pending.rows[table] = []
        if table in _COUNTED_TABLES:
            setattr(self.summary, table, getattr(self.summary, table) + 1)

    def add_rows(self, table: str, rows: Iterable[tuple]) -> None:
        """Queue rows (tuples in the table's schema order)."""
        pending = self.pending.rows[table]
        before = len(pending)
        pending.extend(rows)
        if table in _COUNTED_TABLES:
            setattr(self.summary, table, getattr(self.summary, table) + len(pending) - before)
        if len(pending) >= ARROW_CHUNK_ROWS:
            self.pending.add_table(table, rows_to_table(pending, TABLES[table]))
            self.pending.rows[table] = []

    def add_table(self, table: str, rows: pa.Table) -> None:
        """Queue rows built as an Arrow table."""
        self.pending.add_table(table, rows)
        if table in _COUNTED_TABLES:
            setattr(self.summary, table, getattr(self.summary, table) + rows.num_rows)

    def add_tensor_rows(self, rel: str, rows: list[tuple], needs_stats: Iterable[int] | None = None) -> None:
        """Queue the `tensors` rows of one new file `rel` (judged: no longer waited on); their ids
        become known, and `needs_stats` (default: all) get statistics computed from the data."""
        self.pending_files.pop(rel, None)
        add = self.add
        for row in rows:
            add("tensors", row)
        row_ids = [row[0] for row in rows]
        self.known_tensors.update(row_ids)
        self.summary.tensors += len(rows)
        self.summary.files_new += 1
        if self.compute_stats:
            self.pending.stat_ids.extend(row_ids if needs_stats is None else needs_stats)

    def add_tensor_table(
        self, table: pa.Table, needs_stats: Iterable[int] | None = None, *, new_files: int = 0
    ) -> None:
        """Queue `tensors` rows built as an Arrow table, read from `new_files` new files;
        `needs_stats` lists the row ids whose statistics are computed from the data (default: all
        of them)."""
        n = table.num_rows
        if not n:
            return
        self.pending.add_table("tensors", table)
        self.known_tensors.update(table.column("row_id").to_numpy())
        self.summary.tensors += n
        self.summary.files_new += new_files
        if self.compute_stats:
            self.pending.stat_ids.extend(
                table.column("row_id").to_pylist() if needs_stats is None else needs_stats
            )

    def add_computed_stats(self, table: pa.Table, failed: list[tuple[str, str]]) -> None:
        """Queue `tensor_stats` rows computed while the tensors were scanned (leaf_scan), for
        tensors queued with no `needs_stats`, and an error row for each (rel_path, reason) of
        `failed`, whose data could not be read."""
        if table.num_rows:
            self.pending.add_table("tensor_stats", table)
            self.summary.computed_stats += table.num_rows
        if failed:
            from ingest.statistics.rows import stats_error_rows

            self.pending.add_table("ingest_errors", stats_error_rows(self.run, failed))
            self.summary.errors += len(failed)

    def add_stat_chunk(self, table: pa.Table) -> None:
        """Queue a chunk of a statistics file's rows (`stat_rows`)."""
        self.pending.add_stat_chunk(table)
        self.summary.stat_rows += table.num_rows

    def is_known(self, row_id: int) -> bool:
        """Is this tensor row cataloged (before, or queued by this ingest)?"""
        return row_id in self.known_tensors

    def known_many(self, row_ids: list[int]) -> np.ndarray:
        """`is_known` of each of `row_ids` (a bool array)."""
        return self.known_tensors.contains_many(row_ids)

    def saw_files(self, n: int, *, progress: bool = False, later: bool = False) -> None:
        """Count `n` files as seen, and advance the progress bar by as many (every file seen, so that
        the bar ends at the walk's count), or, `later`, once the reader has read them (`files_read`).
        `progress` is kept for readers that pass it."""
        self.summary.files_seen += n
        if self.on_progress is not None and not later:
            self.on_progress(n)

    def files_read(self, n: int) -> None:
        """Advance the progress bar by `n` files counted with `saw_files(later=True)`."""
        if self.on_progress is not None and n:
            self.on_progress(n)

    def previous(self, rel: str) -> ManifestEntry | None:
        """The manifest entry of `rel`, or None when it was never read."""
        return self.manifest.get(rel)

    def judged(self, *rels: str) -> None:
        """These files are no longer waited on (live mode)."""
        if self.pending_files:
            for rel in rels:
                self.pending_files.pop(rel, None)

    def rel(self, path: str) -> str:
        """Path relative to the dump root; every walked path starts with the root (no relpath:
        it costs more than the header read on a million files)."""
        rel = path[self._root_len :]
        return rel if os.sep == "/" else rel.replace(os.sep, "/")

    def error(self, rel: str, stage: str, reason: str, size: int | None = None) -> None:
        """An `ingest_errors` row."""
        self.add("ingest_errors", (self.run, rel, stage, reason, size, now()))
        self.summary.errors += 1

    def file_error(self, rel: str, kind: str, stage: str, reason: str, size: int | None = None) -> None:
        """An error about a whole file or directory, recorded once: not again on re-ingest
        unless the file changed size (it may have been rewritten or completed)."""
        self.pending_files.pop(rel, None)  # judged: no longer waited on
        size_key = size if size is not None else -1
        prev = self.manifest.get(rel)
        if prev is not None and prev[3] == "error" and prev[0] == size_key:
            return
        self.error(rel, stage, reason, size)
        self.record(rel, kind, size_key, 0, 0, "error")

    def record(self, rel: str, kind: str, size: int, consumed: int, lines: int, status: str) -> None:
        """Remember in the manifest how far a file was read (committed with the batch)."""
        self.manifest[rel] = (size, consumed, lines, status)
        self.add("manifest", (self.run, rel, kind, size, consumed, lines, status, now()))

    def still_written(
        self, entry: os.DirEntry, rel: str, window: float | None = None, *, fresh: bool = False
    ) -> bool:
        """Live mode: is this file young enough that it may still be being written? If so it is
        remembered as pending (its directory is rescanned) and must not be judged yet. `fresh`
        judges the file as it is now rather than as it was listed (a file still appended to)."""
        if not self.live:
            return False
        if (fresh_age(entry.path) if fresh else age(entry)) >= (self.grace if window is None else window):
            return False
        self.pending_files[rel] = os.path.dirname(entry.path)
        return True

    def is_unchanged(self, rel: str, size: int) -> bool:
        prev = self.manifest.get(rel)
        return prev is not None and prev[0] == size

    def scandir(self, path: str, *, sort: bool = True) -> list[os.DirEntry] | None:
        """A directory's entries (None, and an error row, when it cannot be read); names that
        are not UTF-8 become error rows and are left out."""
        if not self.follow_symlinks and not self._inside_root(os.path.realpath(path)):
            self.file_error(self.rel(path), "directory", "walk", _OUTSIDE_ROOT)
            return None
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=_entry_name) if sort else list(it)
        except OSError as exc:
            self.file_error(self.rel(path), "directory", "walk", f"unreadable directory: {exc.strerror}")
            return None
        try:
            "/".join([e.name for e in entries]).encode("utf-8")
        except UnicodeEncodeError:
            entries = [e for e in entries if self.utf8_name(e)]
        if any(e.is_symlink() or not (e.is_file() or e.is_dir()) for e in entries):
            entries = [e for e in entries if self._plain(e)]
        return entries

    def _inside_root(self, real: str) -> bool:
        return real == self._root_real or real.startswith(self._root_real + os.sep)

    def _plain(self, entry: os.DirEntry) -> bool:
        """Whether the walk may open `entry`: a file or a folder inside the dump root. A symlink
        out of the root (unless `follow_symlinks`), a FIFO (opening it would wait for a writer
        forever), a device (/dev/zero never ends) or a socket becomes an error row instead, and
        is never opened."""
        reason = None
        try:
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                if not self.follow_symlinks and not self._inside_root(real):
                    reason = _OUTSIDE_ROOT
                elif os.path.exists(real):
                    reason = _special_kind(os.stat(real).st_mode)
            else:
                reason = _special_kind(entry.stat(follow_symlinks=False).st_mode)
        except OSError as exc:
            reason = f"cannot stat: {exc.strerror}"
        if reason is None:
            return True
        self.saw_files(1)
        self.file_error(self.rel(entry.path), "unknown", "walk", reason)
        return False

    def utf8_name(self, entry: os.DirEntry) -> bool:
        """A name that is not UTF-8 (Linux allows any bytes) cannot be a catalog string: it becomes
        an error row, shown with its bad bytes escaped, and is left out of the walk."""
        try:
            entry.name.encode("utf-8")
            return True
        except UnicodeEncodeError:
            shown = self.rel(os.fsencode(entry.path).decode("utf-8", "backslashreplace"))
            self.saw_files(1)
            self.file_error(shown, "unknown", "walk", "file name is not valid UTF-8; rename it to catalog it")
            return False

    def warm_helpers(self, task: str | None = None) -> None:
        """Start the helper processes now, while the walk goes on (readers call this once a dump
        proves big, naming the task the helpers will run). A small dump never starts them: each
        costs ~150 ms of CPU to start, more than a few hundred files take in all."""
        if not self._helpers_started:
            self._helpers_started = True
            # the scan uses `workers` helpers, statistics one less
            start_helpers(self.workers, caller_computes=False, task=task)

    def flush_if_full(self) -> None:
        """Commit when enough rows are pending (bounded memory)."""
        if self.pending.size() >= self.batch_rows:
            self.flush()
            self.on_phase("walking")  # the batch is committed: back to the walk

    # -- driving a reader --------------------------------------------------------------------

    def run_ingest(self) -> IngestSummary:
        started = time.perf_counter()
        # The pending rows are millions of small tuples without cycles: a cyclic GC pass over
        # them every few thousand allocations costs ~15% of ingest and frees nothing.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            # The default shard's writers take turns; a named shard has one writer, so a second
            # process of the same name (two hosts given one name) is refused at once.
            with self.store.writer_lock(wait=self.store.writer is None):
                self._load_state()
                self.store.start_run()
                self.on_phase("walking")
                self.scan_all()
                # every file is counted (the last leaves' are read by the flush): the walk's count is
                # the total now, should the tree have changed since the caller counted it
                self.on_total(self.summary.files_seen)
                # (the last flush stops the idle helpers before its commit, the ingest's peak)
                self.flush(last=True)
                # what only the walk needed goes too, before a merge that finish_run may still
                # have to do (it hands the freed memory back to the system first)
                self._drop_walk_state()
                self.store.finish_run(self.run, on_phase=self.on_phase)
        finally:
            if gc_was_enabled:
                gc.enable()
        self.summary.seconds = time.perf_counter() - started
        return self.summary

    def _drop_walk_state(self) -> None:
        """Forget what only the walk of a one-shot ingest needed: the row ids it skipped and
        added (8 bytes each, ~10 MiB at 10^6 tensors), the manifest, the reader and its state."""
        self.known_tensors = RowIdSet()
        self.manifest = {}
        self.reader = None

    def begin(self) -> None:
        """Load what the catalog already holds for this run (caller holds the writer lock)."""
        self._load_state()

    def _ensure_reader(self) -> Reader | None:
        """The root's reader: detected on first use (a watcher may start before anything is
        written), and again while the claim is provisional (a layout with no data file yet)."""
        if self.reader is None or self.reader.detection.provisional:
            from ingest.readers.registry import detect

            where = self.root if self.reader is None else self.reader.detection.source or self.root
            try:
                detection = detect(where, self.producer)
            except DumpRootError:
                return self.reader  # nothing written yet (a watcher started before training)
            if self.reader is None or detection.reader is not type(self.reader) or not detection.provisional:
                self.reader = detection.reader(ReaderSink(self), detection)
        return self.reader

    def scan_all(self) -> None:
        """Walk the whole dump (a one-shot ingest, or a watcher's reconciliation scan)."""
        reader = self._ensure_reader()
        if reader is not None:
            reader.walk()

    def scan_path(self, path: str) -> None:
        """Re-scan what a change at `path` (a directory inside the dump root) can affect."""
        if not path.startswith(str(self.root) + os.sep):
            return
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            return  # not a catalog string: the scan of its parent records it as an error
        reader = self._ensure_reader()
        if reader is not None:
            reader.scan_path(path)

    def commit(self) -> None:
        """Compute pending statistics and commit everything queued as one batch."""
        self.flush()

    # -- commit ----------------------------------------------------------------------------

    def _computed_stats_table(self, tensors: pa.Table) -> pa.Table | None:
        """`tensor_stats` rows for the pending tensors that have no statistic.csv row, computed from
        their data (ingest/statistics/rows.py); a tensor whose data cannot be read is an error row."""
        if not self.pending.stat_ids:
            return None
        self.on_phase("computing statistics")
        wanted = np.isin(tensors.column("row_id").to_numpy(), np.asarray(self.pending.stat_ids, np.int64))
        # usually every pending tensor (pyarrow.compute, which filter needs, takes ~40 ms to import)
        todo = tensors if wanted.all() else tensors.filter(pa.array(wanted))
        stats, errors = computed_stats_rows(todo, self.run, self.root, md5=self.md5, workers=self.workers)
        if errors is not None:
            self.pending.add_table("ingest_errors", errors)
            self.summary.errors += errors.num_rows
        self.summary.computed_stats += stats.num_rows
        return stats

    def _pending_table(self, name: str) -> pa.Table | None:
        rows, tables = self.pending.rows[name], self.pending.tables[name]
        if name == "stat_rows":  # statistic.csv chunks are Arrow tables already
            tables, rows = tables + rows, []
        if rows:
            tables = [*tables, rows_to_table(rows, TABLES[name])]
        return concat_pending(tables) if tables else None

    def flush(self, *, last: bool = False) -> None:
        """Let the reader finish queued work, compute statistics, commit one batch (`last`: the
        last of a one-shot ingest, whose commit makes the run's flat files final)."""
        if self.reader is not None:
            self.reader.finish()
        full = self.pending.size() >= self.batch_rows
        tables = self._batch_tables()
        # the batch's rows are in `tables` alone now: the store lets them go once written
        self.pending = _Pending()
        if last:
            # the walk and the statistics are done: idle helpers give their memory back before the
            # run's flat files are resolved (the ingest's peak)
            stop_idle_helpers()
        elif full and self._helpers_started and not self.store.defers_flat_files:
            # A full batch keeps the writer's DuckDB busy for a while, the helpers idle beside it:
            # they give their memory back (~40 MiB each) and the walk starts new ones when it
            # needs them (ingest/helper_pool.py: the caller computes while they start). A one-shot
            # ingest's batch only writes its files (its flat files wait for its end): they stay.
            stop_idle_helpers()
        if tables and self.store.commit_batch(self.run, tables, on_phase=self.on_phase, last=last):
            self.summary.batches += 1

    def _batch_tables(self) -> dict[str, pa.Table]:
        """The pending rows as one table per catalog table, computed statistics included."""
        tables: dict[str, pa.Table] = {}
        tensors = self._pending_table("tensors")
        if tensors is not None:
            tables["tensors"] = tensors
            # computed by the scan (add_computed_stats), and now (may add ingest_errors rows)
            parts = [self._pending_table("tensor_stats"), self._computed_stats_table(tensors)]
            parts = [t for t in parts if t is not None]
            if parts:
                tables["tensor_stats"] = parts[0] if len(parts) == 1 else concat_pending(parts)
        for name in TABLES:
            if name not in ("tensors", "tensor_stats") and (table := self._pending_table(name)) is not None:
                tables[name] = table
        return tables


class ReaderSink:
    """An Ingester as its reader sees it (`ingest.readers.sink.IngestSink`): the services of the
    pipeline and its options, and nothing else. A reader holds this, never the Ingester, so that
    its pending rows, manifest, summary and store stay the pipeline's own."""

    __slots__ = ("_ingester",)

    def __init__(self, ingester: Ingester) -> None:
        self._ingester = ingester

    @property
    def options(self) -> IngestOptions:
        return self._ingester.options

    def rel(self, path: str) -> str:
        return self._ingester.rel(path)

    def scandir(self, path: str, *, sort: bool = True) -> list[os.DirEntry] | None:
        return self._ingester.scandir(path, sort=sort)

    def saw_files(self, n: int, *, progress: bool = False, later: bool = False) -> None:
        self._ingester.saw_files(n, progress=progress, later=later)

    def files_read(self, n: int) -> None:
        self._ingester.files_read(n)

    def warm_helpers(self, task: str | None = None) -> None:
        self._ingester.warm_helpers(task)

    def previous(self, rel: str) -> ManifestEntry | None:
        return self._ingester.manifest.get(rel)

    def is_unchanged(self, rel: str, size: int) -> bool:
        return self._ingester.is_unchanged(rel, size)

    def record(self, rel: str, kind: str, size: int, consumed: int, lines: int, status: str) -> None:
        self._ingester.record(rel, kind, size, consumed, lines, status)

    def still_written(
        self, entry: os.DirEntry, rel: str, window: float | None = None, *, fresh: bool = False
    ) -> bool:
        return self._ingester.still_written(entry, rel, window, fresh=fresh)

    def judged(self, *rels: str) -> None:
        self._ingester.judged(*rels)

    def add(self, table: str, row: tuple) -> None:
        _not_reader_table(table)
        self._ingester.add(table, row)

    def add_rows(self, table: str, rows: Iterable[tuple]) -> None:
        _not_reader_table(table)
        self._ingester.add_rows(table, rows)

    def add_table(self, table: str, rows: pa.Table) -> None:
        _not_reader_table(table)
        self._ingester.add_table(table, rows)

    def add_tensor_rows(self, rel: str, rows: list[tuple], needs_stats: Iterable[int] | None = None) -> None:
        self._ingester.add_tensor_rows(rel, rows, needs_stats)

    def add_tensor_table(
        self, table: pa.Table, needs_stats: Iterable[int] | None = None, *, new_files: int = 0
    ) -> None:
        self._ingester.add_tensor_table(table, needs_stats, new_files=new_files)

    def add_computed_stats(self, table: pa.Table, failed: list[tuple[str, str]]) -> None:
        self._ingester.add_computed_stats(table, failed)

    def add_stat_chunk(self, table: pa.Table) -> None:
        self._ingester.add_stat_chunk(table)

    def is_known(self, row_id: int) -> bool:
        return row_id in self._ingester.known_tensors

    def known_many(self, row_ids: list[int]) -> np.ndarray:
        return self._ingester.known_many(row_ids)

    def error(self, rel: str, stage: str, reason: str, size: int | None = None) -> None:
        self._ingester.error(rel, stage, reason, size)

    def file_error(self, rel: str, kind: str, stage: str, reason: str, size: int | None = None) -> None:
        self._ingester.file_error(rel, kind, stage, reason, size)

    def flush_if_full(self) -> None:
        self._ingester.flush_if_full()


# Tables whose rows a reader queues with their bookkeeping (add_tensor_rows, add_tensor_table,
# add_stat_chunk), or that only the pipeline writes.
_PIPELINE_TABLES = frozenset({"tensors", "stat_rows", "tensor_stats", "manifest", "ingest_errors", "runs"})


def _not_reader_table(table: str) -> None:
    if table in _PIPELINE_TABLES:
        raise ValueError(f"readers do not queue {table!r} rows with add/add_rows/add_table")


_entry_name = operator.attrgetter("name")


def detect_dump(dump_dir: str | os.PathLike, producer: str | None = None) -> Detection:
    """Which reader reads this dump directory (DumpRootError, listing what was looked for, when
    none does). `producer` forces a reader by name."""
    from ingest.readers.registry import detect

    return detect(resolve_dump_dir(dump_dir), producer)


_OUTSIDE_ROOT = "a symlink out of the dump root: not followed (--follow-symlinks to allow it)"


def _special_kind(mode: int) -> str | None:
    """Why a file of this mode is not read (None for a regular file or a folder)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = (
        "a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
    )  # fmt: skip
    return f"{kind}, not a regular file: not read"


def ingest_dump(
    catalog: str | os.PathLike,
    dump_dir: str | os.PathLike,
    run: str | None = None,
    *,
    producer: str | None = None,
    compute_stats: bool = True,
    md5: bool = False,
    workers: int | None = None,
    batch_rows: int = 50_000,
    on_progress: Callable[[int], None] | None = None,
    writer: str | None = None,
    follow_symlinks: bool = False,
    max_metadata_size: str | int | MetadataCaps | None = None,
    detection: Detection | None = None,
) -> IngestSummary:
    """Ingest one dump tree into a catalog (created if missing) under a run name.

    `detection` is the claim `detect_dump(dump_dir, producer)` made, when the caller has it already
    (the command line shows it before ingesting): the dump is then not detected a second time.

    `writer` names the shard to write (ingest/storage/store.py): writers of different names ingest
    different ranks of one run at the same time (one per host); None is the default shard.
    `max_metadata_size` caps the metadata files read whole (`ingest.formats.limits.MetadataCaps.parse`:
    `1GiB`, `graph=1GiB,json=128MiB`; None: DUMPCAT_MAX_METADATA_SIZE, else the defaults); a
    mistyped value is a ValueError before anything is read.
    Raises DumpRootError or CatalogError when the dump root or the catalog is unusable; any
    problem with an individual file becomes an `ingest_errors` row instead.
    """
    if writer is not None:
        check_writer_name(writer)  # before anything is created
    writer_memory_limit()  # a mistyped DUMPCAT_WRITER_MEMORY, too
    caps = MetadataCaps.parse(max_metadata_size)  # and a mistyped cap
    if detection is None:
        detection = detect_dump(dump_dir, producer)
    run_name = run or default_run_name(detection.root)
    store = CatalogStore(catalog, create=True).shard(run_name, writer)
    ingester = Ingester(
        store, run_name, detection.root, detection, producer=producer, compute_stats=compute_stats, md5=md5,
        workers=workers, batch_rows=batch_rows, on_progress=on_progress, follow_symlinks=follow_symlinks,
        max_metadata_size=caps,
    )  # fmt: skip
    summary = ingester.run_ingest()
    summary.producer = detection.reader.name
    summary.detected = detection.description
    return summary


def ingest_many(
    catalog: str | os.PathLike, dump_dirs: Iterable[str | os.PathLike], **kwargs
) -> list[IngestSummary]:
    """Ingest several dump trees, each as its own run named after its folder."""
    return [ingest_dump(catalog, d, **kwargs) for d in dump_dirs]
