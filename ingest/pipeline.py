"""Ingest a MindSpore dump tree into a catalog: walk, parse, batch, commit.

The walk streams one directory at a time and flushes a batch to the catalog whenever enough rows
are pending, so memory stays bounded however large the dump is. Every parser is a pure function
(see the sibling modules); this module only routes files to them, turns their output into rows,
and records anything that could not be read as an `ingest_errors` row instead of stopping.

Tensor files are the bulk of a dump. A one-shot ingest (and the watcher, for directories that have
settled) queues iteration directories and reads their npy names and headers in batches on every
core (`leaf_scan` in `helper_pool` helpers); files that are not complete and well-formed come back
to be judged one by one (`_ingest_tensor`), which is also how the watcher treats a directory that
is still being written.

Re-ingest is incremental: a tensor file whose row id is already in the catalog is skipped, and
append-only files (statistic.csv, the execution-order csvs) resume after the last complete line
already ingested.
"""

from __future__ import annotations

import gc
import operator
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest import execution_order, kernel_args, mapping_csv, metadata
from ingest import graph_rows as graph_rows_mod
from ingest.helper_pool import resolve_workers, run_ordered, start_helpers
from ingest.ids import TensorIdHasher, stat_row_ids
from ingest.leaf_scan import LeafChunk, scan_tensor_files
from ingest.npy_header import NpyHeaderError, read_npy_header
from ingest.npy_name import (
    OP_INDEX_PATTERN,
    TensorName,
    TensorNameError,
    op_type_of,
    parse_tensor_name,
    sanitize_v23,
    short_name,
    without_op_index,
)
from ingest.schema import STAT_VALUE_FIELDS, TABLES
from ingest.stat_match import FILE_KEYS, file_keys, match_stat_rows, mismatch_note
from ingest.statistic_csv import read_statistic_csv
from ingest.store import CatalogError, CatalogStore
from ingest.tensor_stats import StatJob, compute_stats_many

_entry_name = operator.attrgetter("name")
RANK_DIR = re.compile(r"^rank_(\d+)$")
MAPPED_NAME = re.compile(r"^\d+\.npy$")
VERSION = "0.1.0"
# One-shot ingest scans tensor files in batches of this many on every core (leaf_scan), once at
# least _SCAN_GROUP_FILES are queued (or at the end): big enough to keep the helpers busy, small
# enough to bound memory.
_SCAN_BATCH_FILES = 1024
_SCAN_GROUP_FILES = 16384
_LIVE_SCAN_MIN_FILES = 256  # a watcher scans settled directories this big like a one-shot ingest
_GIANT_LEAF_FILES = 100_000  # a directory bigger than this is read file by file (bounded memory)
_ARROW_CHUNK_ROWS = 16_384  # pending rows built in Python become Arrow tables this many at a time


class DumpRootError(Exception):
    """The dump directory cannot be ingested at all (missing, unreadable, not a dump)."""


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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Pending:
    """Rows waiting for the next commit, per table, plus the tensors to compute statistics for.

    Rows built one by one are tuples in `rows` (statistic.csv chunks are Arrow tables there), and
    every _ARROW_CHUNK_ROWS of them become an Arrow table in `tables`, where a row takes a fraction
    of the memory; scanned tensors rows (leaf_scan) arrive as Arrow tables."""

    rows: dict[str, list] = field(default_factory=lambda: {name: [] for name in TABLES})
    tables: dict[str, list[pa.Table]] = field(default_factory=lambda: {name: [] for name in TABLES})
    table_rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    stat_ids: list[int] = field(default_factory=list)  # pending tensors whose statistics are computed

    def add_table(self, name: str, table: pa.Table) -> None:
        self.tables[name].append(table)
        self.table_rows[name] += table.num_rows

    def size(self) -> int:
        """Rows that count towards the flush threshold (statistic.csv chunks count as one each)."""
        rows, arrow = self.rows, self.table_rows
        return (
            len(rows["tensors"]) + arrow["tensors"]
            + len(rows["stat_rows"])
            + len(rows["manifest"]) + arrow["manifest"]
        )  # fmt: skip


@dataclass
class _Leaf:
    """A leaf directory (an iteration or constants/) listed by the walk, waiting for its scan."""

    rank: int
    net: str
    graph_id: int
    iteration: int | None
    dir_kind: str
    path: str
    rel_dir: str
    entries: list[os.DirEntry]  # in name order when judged file by file (live), else unordered
    mapping: dict[str, str]
    others: list[os.DirEntry] = field(default_factory=list)  # not .npy, in name order
    scan_names: list[str] = field(default_factory=list)  # new .npy files, in name order, for leaf_scan
    known_names: list[str] = field(default_factory=list)  # .npy files cataloged before
    tables: list[pa.Table] = field(default_factory=list)  # scanned rows
    irregular: list[str] = field(default_factory=list)  # scanned files to judge one by one


def find_dump_root(path: str | os.PathLike) -> tuple[Path, list[Path]]:
    """(dump root, rank directories) for a dump root or a single rank_N directory."""
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
    if RANK_DIR.match(p.name):
        return p.parent, [p]
    try:
        ranks = sorted(
            (Path(e.path) for e in os.scandir(p) if e.is_dir() and RANK_DIR.match(e.name)),
            key=lambda q: int(RANK_DIR.match(q.name).group(1)),
        )
    except OSError as exc:
        raise DumpRootError(f"cannot read dump directory {p}: {exc.strerror}") from exc
    if not ranks:
        raise DumpRootError(
            f"{p} is not a MindSpore dump: no rank_N directories (expected {{path}}/rank_N/{{net}}/...)"
        )
    return p, ranks


# Folder names MindSpore users give the dump `path` itself; a run named after them says nothing.
_GENERIC_ROOT_NAMES = frozenset({"dump", "dumps", "dump_data", "dump_path", "dump_dir", "data", "output"})


def default_run_name(root: Path) -> str:
    """The run name when none is given: the dump root's folder name, or its parent's when the root
    has a generic name (`…/nan_log/dump` and `…/nan_log/dump/rank_0` are run `nan_log`)."""
    if root.name.lower() in _GENERIC_ROOT_NAMES and root.parent.name:
        return root.parent.name
    return root.name


def _rows_to_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
    )


def _now() -> datetime:
    return datetime.now(UTC)


class Ingester:
    """One ingest of one dump root into one run of a catalog. Use `ingest_dump` to run it."""

    def __init__(
        self,
        store: CatalogStore,
        run: str,
        dump_root: Path,
        ranks: list[Path],
        *,
        compute_stats: bool = True,
        md5: bool = False,
        workers: int | None = None,
        batch_rows: int = 200_000,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        self.run = run
        self.root = dump_root
        self._root_len = len(str(dump_root)) + 1
        self._row_id_of = TensorIdHasher(run)
        self.ranks = ranks
        self.compute_stats = compute_stats
        self.md5 = md5
        self.workers = workers
        self.batch_rows = batch_rows
        self.on_progress = on_progress or (lambda n: None)
        self.summary = IngestSummary(run=run, dump_root=str(dump_root))
        self.pending = _Pending()
        self.known_tensors: set[int] = set()
        self.manifest: dict[str, tuple] = {}  # rel_path -> (size, consumed_bytes, consumed_lines, status)
        # Live mode (the watcher): a file that may still be written is retried, never an error.
        self.live = False
        self.grace = 10.0  # seconds a file may stay incomplete before it is judged as it is
        self.settle = 1.0  # seconds a rewritten-once file (metadata, graphs) must be unchanged
        self.pending_files: dict[str, str] = {}  # rel path -> directory to rescan
        self.fixed_ranks = False  # True when a single rank_N folder was given: never look for others
        self._leaf_queue: list[_Leaf] = []  # one-shot: leaves listed, their tensor files not yet scanned
        self._queued_files = 0
        self._scanned_dirs: set[str] = set()
        self._catalog_had_tensors = False  # set by _load_state

    # -- catalog state ---------------------------------------------------------------------

    def _load_state(self) -> None:
        """Row ids of tensors already cataloged for this run, and the non-tensor manifest."""
        snap = self.store.snapshot()
        roots = set()
        for batch in snap["batches"]:
            if batch["run"] != self.run:
                continue
            bdir = self.store.root / batch["path"]
            if "tensors" in batch["tables"]:
                ids = pq.read_table(bdir / "tensors.parquet", columns=["row_id"]).column(0)
                self.known_tensors.update(ids.to_pylist())
                self._catalog_had_tensors = self._catalog_had_tensors or len(ids) > 0
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
            raise CatalogError(
                f"run {self.run!r} already holds dump {sorted(roots)[0]}; "
                f"ingest {self.root} under another name with --run"
            )
        if not roots:
            self._add("runs", (self.run, str(self.root), _now(), VERSION))

    # -- bookkeeping -----------------------------------------------------------------------

    def _add(self, table: str, row: tuple) -> None:
        rows = self.pending.rows[table]
        rows.append(row)
        if len(rows) >= _ARROW_CHUNK_ROWS:
            self.pending.add_table(table, _rows_to_table(rows, TABLES[table]))
            self.pending.rows[table] = []

    def _rel(self, path: str) -> str:
        """Path relative to the dump root; every walked path starts with the root (no relpath:
        it costs more than the header read on a million files)."""
        rel = path[self._root_len :]
        return rel if os.sep == "/" else rel.replace(os.sep, "/")

    def _error(self, rel: str, stage: str, reason: str, size: int | None = None) -> None:
        self._add("ingest_errors", (self.run, rel, stage, reason, size, _now()))
        self.summary.errors += 1

    def _file_error(self, rel: str, kind: str, stage: str, reason: str, size: int | None = None) -> None:
        """An error about a whole file or directory, recorded once: not again on re-ingest
        unless the file changed size (it may have been rewritten or completed)."""
        self.pending_files.pop(rel, None)  # judged: no longer waited on
        size_key = size if size is not None else -1
        prev = self.manifest.get(rel)
        if prev is not None and prev[3] == "error" and prev[0] == size_key:
            return
        self._error(rel, stage, reason, size)
        self._record(rel, kind, size_key, 0, 0, "error")

    def _record(self, rel: str, kind: str, size: int, consumed: int, lines: int, status: str) -> None:
        self.manifest[rel] = (size, consumed, lines, status)
        self._add("manifest", (self.run, rel, kind, size, consumed, lines, status, _now()))

    def _still_written(self, entry: os.DirEntry, rel: str, window: float | None = None) -> bool:
        """Live mode: is this file young enough that it may still be being written? If so it is
        remembered as pending (its directory is rescanned) and must not be judged yet."""
        if not self.live or _age(entry) >= (self.grace if window is None else window):
            return False
        self.pending_files[rel] = os.path.dirname(entry.path)
        return True

    def _is_unchanged(self, rel: str, size: int) -> bool:
        prev = self.manifest.get(rel)
        return prev is not None and prev[0] == size

    # -- walk ------------------------------------------------------------------------------

    def run_ingest(self) -> IngestSummary:
        started = time.perf_counter()
        # The pending rows are millions of small tuples without cycles: a cyclic GC pass over
        # them every few thousand allocations costs ~15% of ingest and frees nothing.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            with self.store.writer_lock():
                # Warm while the walk runs: the scan uses `workers` helpers, statistics one less.
                start_helpers(self.workers, caller_computes=False)
                self._load_state()
                for rank_dir in self.ranks:
                    self._ingest_rank(rank_dir)
                self._flush()
        finally:
            if gc_was_enabled:
                gc.enable()
        self.summary.seconds = time.perf_counter() - started
        return self.summary

    # -- incremental scans (the watcher) ---------------------------------------------------

    def begin(self) -> None:
        """Load what the catalog already holds for this run (caller holds the writer lock)."""
        self._load_state()

    def scan_all(self) -> None:
        """Walk the whole dump (a reconciliation scan); rank folders that appeared are included."""
        ranks = self.ranks
        if not self.fixed_ranks:
            try:
                _, ranks = find_dump_root(self.root)
            except DumpRootError:
                ranks = []
            self.ranks = ranks
        for rank_dir in ranks:
            self._ingest_rank(rank_dir)

    def scan_path(self, path: str) -> None:
        """Re-scan what a change at `path` (a directory inside the dump root) can affect."""
        if not path.startswith(str(self.root) + os.sep):
            return
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            return  # not a catalog string: the scan of its parent records it as an error
        parts = self._rel(path).split("/")
        m = RANK_DIR.match(parts[0])
        if not m or not os.path.isdir(path):
            return
        rank = int(m.group(1))
        rank_path = os.path.join(self.root, parts[0])
        if len(parts) == 1:
            self._ingest_rank(Path(rank_path))
        elif parts[1] == ".dump_metadata":
            self._ingest_metadata(rank, os.path.join(rank_path, parts[1]))
        elif parts[1] == "execution_order":
            self._ingest_execution_order(rank, os.path.join(rank_path, parts[1]))
        elif parts[1] == "graphs":
            self._ingest_graphs(rank, os.path.join(rank_path, parts[1]))
        elif len(parts) == 2:
            self._ingest_net(rank, parts[1], path)
        elif not parts[2].isdigit():
            self._ingest_net(rank, parts[1], os.path.join(rank_path, parts[1]))
        elif len(parts) == 3:
            self._ingest_graph_dir(rank, parts[1], int(parts[2]), path)
        else:
            leaf = os.path.join(rank_path, *parts[1:4])
            self._ingest_iteration_dir(rank, parts[1], int(parts[2]), parts[3], leaf)

    def commit(self) -> None:
        """Compute pending statistics and commit everything queued as one batch."""
        self._flush()

    def _scandir(self, path: str, *, sort: bool = True) -> list[os.DirEntry] | None:
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=_entry_name) if sort else list(it)
        except OSError as exc:
            self._file_error(self._rel(path), "directory", "walk", f"unreadable directory: {exc.strerror}")
            return None
        try:
            "/".join([e.name for e in entries]).encode("utf-8")
        except UnicodeEncodeError:
            entries = [e for e in entries if self._utf8_name(e)]
        return entries

    def _utf8_name(self, entry: os.DirEntry) -> bool:
        """A name that is not UTF-8 (Linux allows any bytes) cannot be a catalog string: it becomes
        an error row, shown with its bad bytes escaped, and is left out of the walk."""
        try:
            entry.name.encode("utf-8")
            return True
        except UnicodeEncodeError:
            shown = self._rel(os.fsencode(entry.path).decode("utf-8", "backslashreplace"))
            self.summary.files_seen += 1
            self._file_error(
                shown, "unknown", "walk", "file name is not valid UTF-8; rename it to catalog it"
            )
            return False

    def _ingest_rank(self, rank_dir: Path) -> None:
        rank = int(RANK_DIR.match(rank_dir.name).group(1))
        entries = self._scandir(str(rank_dir))
        if entries is None:
            return
        for entry in entries:
            if entry.name == ".dump_metadata" and entry.is_dir():
                self._ingest_metadata(rank, entry.path)
            elif entry.name == "execution_order" and entry.is_dir():
                self._ingest_execution_order(rank, entry.path)
            elif entry.name == "graphs" and entry.is_dir():
                self._ingest_graphs(rank, entry.path)
            elif entry.is_dir():
                self._ingest_net(rank, entry.name, entry.path)
            else:
                self.summary.files_seen += 1
                self._file_error(self._rel(entry.path), "unknown", "walk", "unexpected file at rank level")

    def _ingest_net(self, rank: int, net: str, net_path: str) -> None:
        for gentry in self._scandir(net_path) or []:
            if not (gentry.is_dir() and gentry.name.isdigit()):
                self._file_error(
                    self._rel(gentry.path), "unknown", "walk", "expected a graph-id directory (digits)"
                )
                continue
            self._ingest_graph_dir(rank, net, int(gentry.name), gentry.path)

    def _ingest_graph_dir(self, rank: int, net: str, graph_id: int, path: str) -> None:
        for ientry in self._scandir(path) or []:
            self._ingest_iteration_dir(rank, net, graph_id, ientry.name, ientry.path, ientry.is_dir())

    def _ingest_iteration_dir(
        self, rank: int, net: str, graph_id: int, name: str, path: str, is_dir: bool = True
    ) -> None:
        if is_dir and name.isdigit():
            self._ingest_leaf(rank, net, graph_id, int(name), "iteration", path)
        elif is_dir and name == "constants":
            self._ingest_leaf(rank, net, graph_id, None, "constants", path)
        else:
            self._file_error(
                self._rel(path), "unknown", "walk", "expected an iteration directory (digits) or constants/"
            )

    # -- leaf directories (tensors, statistic.csv, mapping.csv, kernel args) ----------------

    def _ingest_leaf(
        self, rank: int, net: str, graph_id: int, iteration: int | None, dir_kind: str, path: str
    ) -> None:
        entries = self._scandir(path, sort=self.live)
        if entries is None:
            return
        self.summary.files_seen += len(entries)
        self.on_progress(len(entries))
        rel_dir = self._rel(path)
        names = [e.name for e in entries]
        mapping: dict[str, str] = {}
        if "mapping.csv" in names:
            mapping = self._read_mapping(rel_dir, entries[names.index("mapping.csv")])
        leaf = _Leaf(rank, net, graph_id, iteration, dir_kind, path, rel_dir, entries, mapping)
        settled = self.live and self._settled(entries)
        if self.live and not settled:
            # A directory being written: each file judged by _ingest_tensor's live rules.
            self._process_leaf(leaf, scanned=False)
            return
        if len(entries) > _GIANT_LEAF_FILES:
            # Scanned rows of a directory are finished together (its statistic.csv is matched
            # against all of them); one this big goes file by file, flushing as it goes, so
            # that memory stays bounded by the batch size.
            entries.sort(key=_entry_name)
            self._process_leaf(leaf, scanned=False)
            return
        npy = [n for n in names if n.endswith(".npy")]
        npy.sort()
        if len(npy) < len(names):
            leaf.others = sorted((e for e in entries if not e.name.endswith(".npy")), key=_entry_name)
        # Skip files already cataloged. A fresh run's first visit of a directory skips nothing, so
        # the ids are not computed here for it (the scan computes them, on every core).
        if self.live or self._catalog_had_tensors or rel_dir in self._scanned_dirs:
            prefix, known = rel_dir + "/", self.known_tensors
            leaf.known_names = [n for n in npy if self._row_id_of(prefix + n) in known]
            if leaf.known_names:
                skip = set(leaf.known_names)
                npy = [n for n in npy if n not in skip]
        leaf.scan_names = npy
        self._scanned_dirs.add(rel_dir)
        self._leaf_queue.append(leaf)
        self._queued_files += len(npy)
        if settled or self._queued_files >= _SCAN_GROUP_FILES:
            self._drain_leaves()
            if self.pending.size() >= self.batch_rows:
                self._flush()

    def _settled(self, entries: list[os.DirEntry]) -> bool:
        """Live mode: is this a big directory nothing in which changed for `grace` seconds? The live
        rules would judge each of its files as a one-shot ingest does, so it is scanned like one, on
        every core (a watcher started on a dump that already holds millions of files)."""
        if len(entries) < _LIVE_SCAN_MIN_FILES:
            return False
        newest = time.time() - self.grace
        try:
            return all(e.stat().st_mtime < newest for e in entries)
        except OSError:  # a file vanished meanwhile: the directory is not settled
            return False

    def _drain_leaves(self) -> None:
        """Scan the queued leaves' new tensor files on every core, then finish each leaf here.

        Leaves are queued rather than scanned one by one so that a dump of many small iteration
        directories still gives the helpers batches large enough to pay for the hand-off."""
        queue, self._leaf_queue, self._queued_files = self._leaf_queue, [], 0
        if not queue:
            return
        batches: list[list[LeafChunk]] = []
        owners: list[list[int]] = []  # per batch: the queue index of each chunk
        batch: list[LeafChunk] = []
        owner: list[int] = []
        size = 0
        for index, leaf in enumerate(queue):
            ctx = (self.run, leaf.rank, leaf.net, leaf.graph_id, leaf.iteration, leaf.dir_kind)
            names = leaf.scan_names
            start = 0
            while start < len(names):  # a batch takes whole small leaves, or slices of a big one
                part = names[start : start + _SCAN_BATCH_FILES - size]
                start += len(part)
                originals = [leaf.mapping.get(n) for n in part] if leaf.mapping else [None] * len(part)
                batch.append((ctx, leaf.path, leaf.rel_dir, part, originals))
                owner.append(index)
                size += len(part)
                if size >= _SCAN_BATCH_FILES:
                    batches.append(batch)
                    owners.append(owner)
                    batch, owner, size = [], [], 0
        if batch:
            batches.append(batch)
            owners.append(owner)
        workers = resolve_workers(self.workers)
        if workers > 1 and len(batches) > 1:
            # `workers` helpers scan; this process finishes leaves meanwhile (measured: faster than
            # scanning here too, which delays the finishing and starves the helpers).
            results = run_ordered(
                "ingest.leaf_scan:scan_tensor_files", iter(batches), workers, caller_helps=False, slots=6
            )
        else:
            results = (scan_tensor_files(b) for b in batches)
        # Finish each leaf as soon as its last chunk is back, while the helpers scan the next.
        finished = 0
        for owner, result in zip(owners, results, strict=True):
            for index, (table, irregular) in zip(owner, result, strict=True):
                queue[index].tables.append(table)
                queue[index].irregular.extend(irregular)
            upto = owner[-1] if owner else finished
            while finished < upto:
                self._process_leaf(queue[finished], scanned=True)
                queue[finished] = None  # type: ignore[call-overload]  # free its rows
                finished += 1
        while finished < len(queue):
            self._process_leaf(queue[finished], scanned=True)
            finished += 1

    def _process_leaf(self, leaf: _Leaf, *, scanned: bool) -> None:
        """Statistic rows, tensors rows (scanned already, or judged file by file) and the
        directory's other files."""
        rank, net, graph_id, iteration = leaf.rank, leaf.net, leaf.graph_id, leaf.iteration
        dir_kind, rel_dir, entries, mapping = leaf.dir_kind, leaf.rel_dir, leaf.entries, leaf.mapping
        by_name = {e.name: e for e in (leaf.others if scanned else entries)}
        if scanned and leaf.irregular:
            wanted = set(leaf.irregular)
            by_name.update((e.name, e) for e in entries if e.name in wanted)
        stat_table = None
        if "statistic.csv" in by_name:
            stat_table = self._read_statistic_csv(
                rank, net, graph_id, iteration, rel_dir, by_name["statistic.csv"]
            )

        prefix = rel_dir + "/"
        row_id_of = self._row_id_of
        scanned_table = None
        if scanned:
            scanned_table = (
                leaf.tables[0]
                if len(leaf.tables) == 1
                else pa.concat_tables(leaf.tables)
                if leaf.tables
                else TABLES["tensors"].empty_table()
            )
            scanned_ids = scanned_table.column("row_id").to_pylist()
        parsed: dict[str, TensorName | TensorNameError] = {}

        def parse(name: str) -> TensorName | TensorNameError:
            if name not in parsed:
                original = mapping.get(name) if MAPPED_NAME.match(name) else None
                try:
                    parsed[name] = parse_tensor_name(original or name)
                except TensorNameError as exc:
                    parsed[name] = exc
            return parsed[name]

        active: list[bool] = []

        def dir_active() -> bool:
            """Live mode: has anything in this directory changed within the last `settle` seconds?
            While it has, statistic.csv rows and tensor files may still be catching up with each
            other (MindSpore appends a tensor's row just before or after writing its file)."""
            if not active:
                active.append(
                    self.live and min((_age(e) for e in entries), default=float("inf")) < self.settle
                )
            return active[0]

        def match_keys() -> pa.Table:
            """Every tensor file of the directory, not only new ones, so that a statistic.csv
            that grew later still finds its tensors."""
            others = []
            if scanned:
                unscanned = leaf.irregular + leaf.known_names
            else:
                unscanned = [e.name for e in entries if e.name.endswith(".npy")]
            for name in unscanned:
                tn = parse(name)
                if not isinstance(tn, TensorNameError):
                    rid = row_id_of(prefix + name)
                    keys = (tn.op_type, tn.op_name, tn.io, tn.slot, tn.timestamp_us, rid)
                    others.append((*keys, name, tn.format, None, None))  # header read if matched
            if not scanned:
                return file_keys(others)
            return pa.concat_tables([scanned_table.select(FILE_KEYS.names), file_keys(others)])

        matched: set[int] = set()
        csv_young: os.DirEntry | None = None
        if stat_table is not None:
            table, result = stat_table
            csv_entry = by_name["statistic.csv"]
            if table.num_rows:
                table = match_stat_rows(table, match_keys(), leaf.path)
                upto = None
                unmatched = table.column("row_id").null_count > 0
                if unmatched and dir_active() and self._still_written(csv_entry, f"{rel_dir}/statistic.csv"):
                    # Rows whose tensor files are probably still to come are read again later;
                    # the lines before the first of them are taken now.
                    first = pc.min(pc.filter(table.column("line_no"), pc.is_null(table.column("row_id"))))
                    upto = first.as_py() - 1
                    table = table.filter(pc.less_equal(table.column("line_no"), upto))
                self._commit_stat_chunk(f"{rel_dir}/statistic.csv", csv_entry, table, result, upto)
            else:
                self._commit_stat_chunk(f"{rel_dir}/statistic.csv", csv_entry, table, result)
            if table.num_rows:
                matched = {r for r in table.column("row_id").to_pylist() if r is not None}
        if (
            "statistic.csv" in by_name
            and self.live
            and _age(by_name["statistic.csv"]) < self.grace
            and dir_active()
        ):
            csv_young = by_name["statistic.csv"]

        if scanned:
            self._add_scanned_tensors(leaf, scanned_table, scanned_ids, matched)
            for name in leaf.irregular:
                row_id = row_id_of(prefix + name)
                self._ingest_tensor(
                    rank, net, graph_id, iteration, dir_kind, by_name[name], prefix + name, row_id,
                    parse(name), mapping.get(name), matched,
                )  # fmt: skip
        for i, entry in enumerate(leaf.others if scanned else entries):
            name = entry.name
            if name in ("statistic.csv", "mapping.csv"):
                continue
            if name.endswith(".npy"):
                row_id = row_id_of(prefix + name)
                if row_id not in self.known_tensors:
                    self._ingest_tensor(
                        rank, net, graph_id, iteration, dir_kind, entry, f"{rel_dir}/{name}", row_id,
                        parse(name), mapping.get(name), matched, csv_young,
                    )  # fmt: skip
            elif name.endswith(".json"):
                self._ingest_kernel_args(rank, net, graph_id, iteration, entry)
            else:
                self._file_error(
                    f"{rel_dir}/{name}",
                    "unknown",
                    "walk",
                    "unrecognised file (not .npy, statistic.csv, mapping.csv or .json)",
                )
            if not scanned and i % 4096 == 4095 and self.pending.size() >= self.batch_rows:
                self._flush()  # bounded memory even for one huge directory
        if not scanned and self.pending.size() >= self.batch_rows:
            self._flush()

    def _add_scanned_tensors(
        self, leaf: _Leaf, table: pa.Table, row_ids: list[int], matched: set[int]
    ) -> None:
        """Queue a leaf's scanned rows as they are; only the bookkeeping is per row."""
        n = table.num_rows
        if not n:
            return
        self.pending.add_table("tensors", table)
        self.known_tensors.update(row_ids)
        self.summary.files_new += n
        self.summary.tensors += n
        rels = table.column("rel_path").to_pylist()
        sizes = table.column("file_size").to_pylist()
        if self.pending_files:  # live: files waited on are judged now
            for rel in rels:
                self.pending_files.pop(rel, None)
        for i in [i for i, rel in enumerate(rels) if rel in self.manifest]:
            self._record(rels[i], "tensor", sizes[i], sizes[i], 0, "ok")  # an earlier error is resolved
        if self.compute_stats:
            self.pending.stat_ids.extend([r for r in row_ids if r not in matched] if matched else row_ids)

    def _ingest_tensor(
        self,
        rank: int,
        net: str,
        graph_id: int,
        iteration: int | None,
        dir_kind: str,
        entry: os.DirEntry,
        rel: str,
        row_id: int,
        name: TensorName | TensorNameError,
        original: str | None,
        matched: set[int],
        csv_young: os.DirEntry | None = None,
    ) -> None:
        prev = self.manifest.get(rel)
        if isinstance(name, TensorNameError):
            # A renamed `<digits>.npy` may appear before its mapping.csv line.
            if not (MAPPED_NAME.match(entry.name) and self._still_written(entry, rel)):
                self._file_error(rel, "tensor", "name", f"file name fits no tensor pattern: {name}")
            return
        try:
            header, size = read_npy_header(entry.path)
        except (NpyHeaderError, OSError) as exc:
            if not self._still_written(entry, rel):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self._file_error(rel, "tensor", "npy_header", reason, _size_or_none(entry))
            return
        if row_id not in matched and csv_young and self._still_written(csv_young, rel):
            return  # its statistic.csv row is probably about to be appended
        self.pending_files.pop(rel, None)
        self.summary.files_new += 1
        stored = header.dtype_name
        shape = list(header.shape)
        self.known_tensors.add(row_id)
        self.summary.tensors += 1
        self._add(
            "tensors",
            (
                row_id, self.run, rank, net, graph_id, iteration, dir_kind, rel, entry.name, original,
                name.op_type, name.op_name, without_op_index(name.op_name), name.task_id, name.stream_id,
                name.timestamp_us, name.io, name.slot, name.format, name.dtype or stored, stored, shape,
                header.data_offset, header.nbytes, size, name.era,
            ),
        )  # fmt: skip
        if prev is not None:  # an earlier error for this file is now resolved
            self._record(rel, "tensor", size, size, 0, "ok")
        if self.compute_stats and row_id not in matched:
            self.pending.stat_ids.append(row_id)

    def _read_mapping(self, rel_dir: str, entry: os.DirEntry) -> dict[str, str]:
        rel = f"{rel_dir}/mapping.csv"
        try:
            mapping, errors = mapping_csv.read_mapping_csv(entry.path)
        except OSError as exc:
            self._error(rel, "mapping_csv", f"unreadable: {exc.strerror}")
            return {}
        size = _size_or_none(entry) or 0
        if not self._is_unchanged(rel, size):
            for line_no, reason in errors:
                self._error(f"{rel}:{line_no}", "mapping_csv", reason)
            self._record(rel, "mapping_csv", size, size, 0, "ok")
        return mapping

    def _read_statistic_csv(
        self, rank: int, net: str, graph_id: int, iteration: int | None, rel_dir: str, entry: os.DirEntry
    ) -> tuple[pa.Table, object] | None:
        """The new complete lines of a statistic.csv, as rows of `stat_rows` without row ids yet.
        Nothing is recorded until `_commit_stat_chunk`: live ingest may decide to read it later."""
        rel = f"{rel_dir}/statistic.csv"
        size = _size_or_none(entry)
        prev = self.manifest.get(rel)
        start_offset, start_line = (prev[1], prev[2]) if prev and prev[3] == "ok" else (0, 0)
        if size is not None and size <= start_offset:
            return None
        try:
            result = read_statistic_csv(entry.path, start_offset=start_offset, start_line=start_line)
        except OSError as exc:
            self._error(rel, "statistic_csv", f"unreadable: {exc.strerror}", size)
            return None
        table = result.table
        n = table.num_rows
        line_nos = table.column("line_no").to_numpy()
        table = table.append_column("stat_id", pa.array(stat_row_ids(self.run, rel, line_nos), pa.int64()))
        consts = {
            "run": (self.run, pa.string()),
            "rank": (rank, pa.int32()),
            "net": (net, pa.string()),
            "graph_id": (graph_id, pa.int32()),
            "iteration": (iteration, pa.int64()),
            "csv_path": (rel, pa.string()),
        }
        for col, (value, typ) in consts.items():
            table = table.append_column(col, pa.array([value] * n, typ))
        base = pc.replace_substring_regex(
            table.column("file_op_name"), pattern=OP_INDEX_PATTERN, replacement=""
        )
        table = table.append_column("file_op_base", base)
        return table, result

    def _commit_stat_chunk(
        self, rel: str, entry: os.DirEntry, table: pa.Table, result, upto_line: int | None = None
    ) -> None:
        """Queue a statistic.csv chunk's rows and errors, and remember how far the file was read.

        With `upto_line`, only the lines up to it are taken (live ingest keeps the rest, whose
        tensor files have not appeared yet, for the next scan)."""
        size = _size_or_none(entry)
        end_offset, end_line, errors = result.end_offset, result.end_line, result.errors
        if upto_line is not None and upto_line < end_line:
            prev = self.manifest.get(rel)
            start_offset, start_line = (prev[1], prev[2]) if prev and prev[3] == "ok" else (0, 0)
            with open(entry.path, "rb") as fh:
                fh.seek(start_offset)
                data = fh.read(end_offset - start_offset)
            cut = -1
            for _ in range(upto_line - start_line):
                cut = data.index(b"\n", cut + 1)
            end_offset, end_line = start_offset + cut + 1, upto_line
            errors = [(n, r) for n, r in errors if n <= upto_line]
            table = table.filter(pc.less_equal(table.column("line_no"), upto_line))
        for line_no, reason in errors:
            self._error(f"{rel}:{line_no}", "statistic_csv", reason, size)
        if (note := mismatch_note(table)) is not None:
            self._error(rel, "statistic_csv", note, size)
        self._record(rel, "statistic_csv", size or 0, end_offset, end_line, "ok")
        if upto_line is None:
            self.pending_files.pop(rel, None)
        if table.num_rows:
            schema = TABLES["stat_rows"]
            self.pending.rows["stat_rows"].append(table.select(schema.names).cast(schema))
            self.summary.stat_rows += table.num_rows

    def _ingest_kernel_args(
        self, rank: int, net: str, graph_id: int, iteration: int | None, entry: os.DirEntry
    ) -> None:
        rel = self._rel(entry.path)
        size = _size_or_none(entry) or 0
        if self._is_unchanged(rel, size):
            return
        try:
            op_type, op_name = kernel_args.parse_kernel_args_name(entry.name)
            args = kernel_args.read_kernel_args(entry.path)
        except (kernel_args.KernelArgsError, OSError, UnicodeDecodeError) as exc:
            self._file_error(rel, "kernel_args", "kernel_args", str(exc), size)
            return
        for arg, value in args:
            self._add(
                "kernel_args", (self.run, rank, net, graph_id, iteration, rel, op_type, op_name, arg, value)
            )
        self._record(rel, "kernel_args", size, size, 0, "ok")

    # -- rank-level metadata -------------------------------------------------------------

    def _ingest_metadata(self, rank: int, path: str) -> None:
        values: dict[str, str | None] = {
            "device_target": None,
            "ms_version": None,
            "dump": None,
            "hccl": None,
        }
        changed = False
        entries = self._scandir(path) or []
        if any(self._still_written(e, self._rel(e.path), self.settle) for e in entries):
            return  # read the rank's metadata as a whole, once it has stopped changing
        for entry in entries:
            self.pending_files.pop(self._rel(entry.path), None)
            self.summary.files_seen += 1
            rel = self._rel(entry.path)
            size = _size_or_none(entry) or 0
            changed |= not self._is_unchanged(rel, size)
            try:
                if entry.name == "config.json":
                    values.update(metadata.read_config_json(entry.path))
                elif entry.name == "data_dump.json":
                    values["dump"] = metadata.read_json_text(entry.path)
                elif entry.name == "hccl.json":
                    values["hccl"] = metadata.read_json_text(entry.path)
                else:
                    continue
            except (metadata.MetadataError, OSError, UnicodeDecodeError) as exc:
                self._file_error(rel, "metadata", "metadata", str(exc), size)
                continue
            if not self._is_unchanged(rel, size):
                self._record(rel, "metadata", size, size, 0, "ok")
        if changed:
            self._add(
                "rank_meta",
                (self.run, rank, str(self.root), values["device_target"], values["ms_version"],
                 values["dump"], values["hccl"]),
            )  # fmt: skip

    def _ingest_execution_order(self, rank: int, path: str) -> None:
        for entry in self._scandir(path) or []:
            self.summary.files_seen += 1
            rel = self._rel(entry.path)
            m_exec = execution_order.EXEC_ORDER_FILE.match(entry.name)
            m_glob = execution_order.GLOBAL_ORDER_FILE.match(entry.name)
            if not (m_exec or m_glob):
                self._file_error(rel, "unknown", "execution_order", "unrecognised file in execution_order/")
                continue
            size = _size_or_none(entry) or 0
            prev = self.manifest.get(rel)
            start_offset, start_line = (prev[1], prev[2]) if prev else (0, 0)
            if size <= start_offset:
                continue
            graph_id = int((m_exec or m_glob).group(1))
            parse = execution_order.parse_exec_order if m_exec else execution_order.parse_global_order
            try:
                result = parse(entry.path, start_offset, start_line)
            except OSError as exc:
                self._error(rel, "execution_order", f"unreadable: {exc.strerror}", size)
                continue
            for line_no, reason in result.errors:
                self._error(f"{rel}:{line_no}", "execution_order", reason, size)
            for index, text in result.values:
                if m_exec:
                    self.summary.ops += 1
                    self._add(
                        "ops",
                        (self.run, rank, graph_id, index, text, sanitize_v23(text), short_name(text),
                         op_type_of(text), without_op_index(sanitize_v23(text))),
                    )  # fmt: skip
                else:
                    self._add("graph_runs", (self.run, rank, graph_id, index, int(text)))
            kind = "exec_order" if m_exec else "global_order"
            self._record(rel, kind, size, result.end_offset, result.end_line, "ok")

    def _ingest_graphs(self, rank: int, path: str) -> None:
        """graphs/ms_output_trace_code_graph_{g}.pb|.ir: nodes, edges and source frames.

        A graph is (re)read when any of its files is new or changed size; its rows are written
        once, from the .pb when it parses, else from the .ir.
        """
        entries = self._scandir(path) or []
        self.summary.files_seen += len(entries)
        sizes = {e.name: _size_or_none(e) or 0 for e in entries}
        per_graph = graph_rows_mod.graph_files(list(sizes))
        for entry in entries:
            if entry.name not in {n for files in per_graph.values() for n in files.values()}:
                self._file_error(self._rel(entry.path), "unknown", "graph", "unrecognised file in graphs/")
        for graph_id, files in sorted(per_graph.items()):
            rels = {name: self._rel(os.path.join(path, name)) for name in files.values()}
            if all(self._is_unchanged(rel, sizes[name]) for name, rel in rels.items()):
                continue
            by_name = {e.name: e for e in entries}
            if any(self._still_written(by_name[name], rel, self.settle) for name, rel in rels.items()):
                continue  # parse the graph once its files have stopped changing
            for rel in rels.values():
                self.pending_files.pop(rel, None)
            parsed, problems = graph_rows_mod.parse_graph(files, Path(path))
            for where, reason in problems:
                self._error(self._rel(os.path.join(path, where)), "graph", reason)
            if parsed is not None:
                nodes, edges, frames = graph_rows_mod.graph_rows(self.run, rank, graph_id, parsed)
                self.pending.rows["ir_nodes"].extend(nodes)
                self.pending.rows["edges"].extend(edges)
                self.pending.rows["source_lines"].extend(frames)
                self.summary.ir_nodes += len(nodes)
            for name, rel in rels.items():
                status = "ok" if parsed is not None else "error"
                self._record(rel, "graph_" + name.rsplit(".", 1)[1], sizes[name], sizes[name], 0, status)

    # -- commit ----------------------------------------------------------------------------

    def _computed_stats_table(self, tensors: pa.Table) -> pa.Table | None:
        """`tensor_stats` rows for the pending tensors that have no statistic.csv row: computed from
        their data, with their keys taken from their `tensors` rows."""
        if not self.pending.stat_ids:
            return None
        todo = tensors.filter(pc.is_in(tensors.column("row_id"), pa.array(self.pending.stat_ids, pa.int64())))
        cols = [
            todo.column(c).to_pylist() for c in ("row_id", "rel_path", "data_offset", "stored_dtype", "shape")
        ]
        root = str(self.root) + os.sep
        jobs = (
            StatJob(row_id, root + rel, offset, stored, tuple(shape))
            for row_id, rel, offset, stored, shape in zip(*cols, strict=True)
        )
        computed: list[bool] = []
        chunks: list[pa.Table] = []
        rows: list[tuple] = []
        for i, (_, stats, error) in enumerate(compute_stats_many(jobs, md5=self.md5, workers=self.workers)):
            computed.append(error is None)
            if error is not None:
                self._error(cols[1][i], "tensor_stats", error)
                continue
            rows.append(tuple(stats.get(k) for k in _STAT_VALUES.names))
            if len(rows) >= _ARROW_CHUNK_ROWS:  # as Arrow columns, a row takes a fraction of a tuple
                chunks.append(_rows_to_table(rows, _STAT_VALUES))
                rows = []
        chunks.append(_rows_to_table(rows, _STAT_VALUES))
        self.summary.computed_stats += sum(computed)
        keys = todo.filter(pa.array(computed, pa.bool_())).select(_STAT_KEY_COLUMNS)
        values = pa.concat_tables(chunks)
        return pa.Table.from_arrays([*keys.columns, *values.columns], schema=TABLES["tensor_stats"])

    def _pending_table(self, name: str) -> pa.Table | None:
        rows, tables = self.pending.rows[name], self.pending.tables[name]
        if name == "stat_rows":  # statistic.csv chunks are Arrow tables already
            tables, rows = tables + rows, []
        if rows:
            tables = [*tables, _rows_to_table(rows, TABLES[name])]
        return pa.concat_tables(tables) if tables else None

    def _flush(self) -> None:
        self._drain_leaves()
        tables: dict[str, pa.Table] = {}
        tensors = self._pending_table("tensors")
        if tensors is not None:
            tables["tensors"] = tensors
            stats = self._computed_stats_table(tensors)  # may add ingest_errors rows
            if stats is not None:
                tables["tensor_stats"] = stats
        for name in TABLES:
            if name not in ("tensors", "tensor_stats") and (table := self._pending_table(name)) is not None:
                tables[name] = table
        if tables and self.store.commit_batch(self.run, tables):
            self.summary.batches += 1
        self.pending = _Pending()


# `tensor_stats` = a tensor's keys (from its `tensors` row) + the statistics computed from its data.
_STAT_KEY_COLUMNS = TABLES["tensor_stats"].names[: -len(STAT_VALUE_FIELDS)]
_STAT_VALUES = pa.schema(STAT_VALUE_FIELDS)


def _age(entry: os.DirEntry) -> float:
    """Seconds since the file was last modified (infinite when it cannot be stat'ed)."""
    try:
        return time.time() - entry.stat().st_mtime
    except OSError:
        return float("inf")


def _size_or_none(entry: os.DirEntry) -> int | None:
    try:
        return entry.stat().st_size
    except OSError:
        return None


def ingest_dump(
    catalog: str | os.PathLike,
    dump_dir: str | os.PathLike,
    run: str | None = None,
    *,
    compute_stats: bool = True,
    md5: bool = False,
    workers: int | None = None,
    batch_rows: int = 200_000,
    on_progress: Callable[[int], None] | None = None,
) -> IngestSummary:
    """Ingest one dump tree into a catalog (created if missing) under a run name.

    Raises DumpRootError or CatalogError when the dump root or the catalog is unusable; any
    problem with an individual file becomes an `ingest_errors` row instead.
    """
    root, ranks = find_dump_root(dump_dir)
    store = CatalogStore(catalog, create=True)
    run_name = run or default_run_name(root)
    ingester = Ingester(
        store, run_name, root, ranks, compute_stats=compute_stats, md5=md5, workers=workers,
        batch_rows=batch_rows, on_progress=on_progress,
    )  # fmt: skip
    return ingester.run_ingest()


def ingest_many(
    catalog: str | os.PathLike, dump_dirs: Iterable[str | os.PathLike], **kwargs
) -> list[IngestSummary]:
    """Ingest several dump trees, each as its own run named after its folder."""
    return [ingest_dump(catalog, d, **kwargs) for d in dump_dirs]
