"""MindSpore npy dumps (v1.3 onwards, every device): one `.npy` file per tensor in the rank layout.

A leaf directory (an iteration or `constants/`) holds the tensor files, and may hold a
`statistic.csv` (matched to its tensor files row by row), a `mapping.csv` (names of files renamed
to `<digits>.npy` because they were too long) and kernel-argument `.json` files.

Tensor files are the bulk of a dump. A one-shot ingest (and the watcher, for directories that have
settled) queues leaf directories and reads their npy names and headers in batches on every core
(`leaf_scan` in `helper_pool` helpers); files that are not complete and well-formed come back to be
judged one by one (`_ingest_tensor`), which is also how the watcher treats a directory that is still
being written.

Reading a leaf directory is `LeafEngine`'s, apart from the walk: readers of trees that mix npy files
with other files (ascend_raw, ge_dump) reuse it, each with its own `LeafFiles` policy (which files
are tensor npy files, which are scanned and how, who reads the others), and their own walk.
"""

from __future__ import annotations

import operator
import os
import re
import time
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ingest.files import age, fresh_age, size_or_none
from ingest.formats.limits import MetadataTooLarge
from ingest.formats.mindspore import kernel_args, mapping_csv
from ingest.formats.mindspore.npy_name import (
    OP_INDEX_PATTERN,
    TensorName,
    TensorNameError,
    parse_tensor_name,
    without_op_index,
)
from ingest.formats.npy_header import NpyHeaderError, read_npy_header, stored_as
from ingest.helper_pool import resolve_task, resolve_workers, run_ordered
from ingest.ids import stat_row_ids
from ingest.readers.base import Detection, Place, Reader, first_file
from ingest.readers.leaf_scan import LeafChunk, ScannedColumns, columns_table, stats_table
from ingest.readers.rank_layout import RANK_LAYOUT, RankLayoutWalker, rank_root
from ingest.readers.sink import IngestSink
from ingest.storage.schema import TABLES, conform

_entry_name = operator.attrgetter("name")
MAPPED_NAME = re.compile(r"^\d+\.npy$")
PRODUCER = "mindspore-npy"
# One-shot ingest scans tensor files in batches of this many on every core (leaf_scan), once at
# least _SCAN_GROUP_FILES are queued (or at the end): big enough to keep the helpers busy, small
# enough to bound memory.
_SCAN_BATCH_FILES = 1024
_SCAN_GROUP_FILES = 16384
_WARM_HELPERS_FILES = 2048  # queued files that make a dump big enough to start helper processes
_LIVE_SCAN_MIN_FILES = 256  # a watcher scans settled directories this big like a one-shot ingest
_GIANT_LEAF_FILES = 100_000  # a directory bigger than this is read file by file (bounded memory)


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
    # statistics the scan computed: (tensor_stats rows, (rel_path, reason) of failures) per chunk,
    # and the row ids they are of
    stats: list[tuple[pa.Table, list[tuple[str, str]]]] = field(default_factory=list)
    stats_ids: set[int] = field(default_factory=set)
    unread: int = 0  # listed files the progress bar has not been advanced by (sink.files_read)


def _is_npy(name: str) -> bool:
    return name.endswith(".npy")


class LeafFiles:
    """What the files of a leaf directory are, for `LeafEngine`: the answers for MindSpore's npy
    leaves. A reader of a tree that mixes other files in (raw dumps, msaccucmp conversions, CANN
    statistics CSVs) gives the engine a subclass that answers for those; the engine's rules for
    npy files, statistic.csv, mapping.csv and kernel args stay the same for every tree."""

    def __init__(self, sink: IngestSink) -> None:
        self.sink = sink

    def is_tensor_npy(self, name: str) -> bool:
        """Is this file one of MindSpore's npy tensor files (read by the npy rules)? A mixed tree
        has other .npy files (msaccucmp's conversions of raw files) that its policy reads."""
        return name.endswith(".npy")

    def other_file(self, place: Place, entry: os.DirEntry) -> bool:
        """A file of a leaf directory that is not a tensor .npy, statistic.csv or mapping.csv,
        offered to the policy before it is read as kernel args (.json) or reported: True when
        handled. A mixed tree's files (raw dumps, overflow records' .json, CANN statistics CSVs)
        are read here; an npy leaf has none."""
        return False

    def unnamed_npy(self, place: Place, entry: os.DirEntry) -> bool:
        """An .npy file whose name is not a MindSpore tensor name: True when handled (no policy
        handles one yet; it is the place for a producer whose npy files are named otherwise)."""
        return False

    # What a one-shot ingest scans in helper processes: the function (see leaf_scan) and which
    # files of a leaf directory it is given. Files it hands back as irregular are judged by the
    # engine: tensor npy files by the npy rules, any other by `other_file`. A mixed tree scans its
    # other files too (raw headers), with a function of its own.
    scan_function = "ingest.readers.leaf_scan:scan_tensor_columns"

    @staticmethod
    def scanned_table(scanned: ScannedColumns) -> tuple[pa.Table, list[str]]:
        """One chunk's result of `scan_function` as (its `tensors` rows, its irregular names):
        helpers send columns of Python values, not Arrow (they do not import pyarrow)."""
        return columns_table(scanned)

    def scan_args(self) -> tuple:
        """What `scan_function` is called with after its batch: a one-shot ingest that computes
        statistics has the scan compute them (the md5 option), as it reads the headers."""
        options = self.sink.options
        return (options.md5 if options.compute_stats and not options.live else None,)

    @staticmethod
    def scanned_stats(
        scanned: ScannedColumns, table: pa.Table
    ) -> tuple[pa.Table, list[tuple[str, str]]] | None:
        """The statistics `scan_function` computed for one chunk whose `tensors` rows are `table`:
        (tensor_stats rows, (rel_path, reason) of the rows it could not compute), or None."""
        return stats_table(scanned, table)

    def is_scanned(self, name: str) -> bool:
        """Is this file of a leaf directory read by `scan_function` (else it is judged one by one)?"""
        return self.is_tensor_npy(name)

    def is_cataloged(self, rel: str) -> bool:
        """Was the scanned file at `rel` cataloged before (so it is not scanned again)? An npy file
        is one row, known by its row id (the engine asks for a whole directory at once when a
        policy keeps this answer); a raw file is several, so a policy may ask the manifest."""
        return self.sink.is_known(self.sink.options.row_id_of(rel))

    def add_scanned_tensors(
        self,
        table: pa.Table,
        matched: set[int],
        computed: Sequence[tuple[pa.Table, list[tuple[str, str]]]] = (),
        computed_ids: Set[int] = frozenset(),
    ) -> None:
        """Queue a leaf's scanned rows as they are (one file each); only the bookkeeping is per
        row. Tensors `matched` by a statistic.csv row get no computed statistics; those of
        `computed_ids` got them from the scan (`computed`), the others get them at the flush. A
        policy whose scan makes rows of other files (several per raw file) queues those its own way."""
        n = table.num_rows
        if not n:
            return
        sink = self.sink
        needs_stats = None
        if (matched or computed_ids) and sink.options.compute_stats:
            done = matched | set(computed_ids) if matched else computed_ids
            needs_stats = [r for r in table.column("row_id").to_pylist() if r not in done]
        sink.add_tensor_table(table, needs_stats, new_files=n)
        for stats, failed in computed:
            if matched:  # (a statistic.csv came after the scan looked for one: its rows win)
                import pyarrow.compute as pc

                stats = stats.filter(pc.invert(pc.is_in(stats.column("row_id"), pa.array(list(matched)))))
                row_id_of = sink.options.row_id_of
                failed = [(rel, reason) for rel, reason in failed if row_id_of(rel) not in matched]
            sink.add_computed_stats(stats, failed)
        rels = table.column("rel_path").to_pylist()
        sink.judged(*rels)  # (live: files waited on are judged now)
        previous = sink.previous
        resolved = [i for i, rel in enumerate(rels) if previous(rel) is not None]
        if resolved:  # an earlier error for these files is resolved
            sizes = table.column("file_size").to_pylist()
            for i in resolved:
                sink.record(rels[i], "tensor", sizes[i], sizes[i], 0, "ok")


class LeafEngine:
    """Reads leaf directories (an iteration or constants/): tensor files scanned on every core or
    judged one by one, statistic.csv matched to them, mapping.csv and kernel args; the files a
    `LeafFiles` policy claims are the policy's. A reader calls `ingest_leaf` for each leaf its walk
    finds and `finish` before the pipeline commits."""

    def __init__(self, sink: IngestSink, files: LeafFiles) -> None:
        self.sink = sink
        self.files = files
        self._leaf_queue: list[_Leaf] = []  # one-shot: leaves listed, their tensor files not yet scanned
        self._queued_files = 0
        self._scanned_dirs: set[str] = set()
        # Live: row ids whose statistic.csv row is cataloged but whose file is not yet (created
        # after the directory was listed, or still being written). Their files must neither wait
        # for that row again nor get statistics computed beside it.
        self._stat_rows_ahead: set[int] = set()

    def finish(self) -> None:
        """Scan and finish the leaves still queued."""
        self._drain_leaves()

    def ingest_leaf(
        self, rank: int, net: str, graph_id: int, iteration: int | None, dir_kind: str, path: str
    ) -> None:
        """Read one leaf directory: now (live, a directory still being written), or queued for the
        scan of its tensor files on every core."""
        entries = self.sink.scandir(path, sort=self.sink.options.live)
        if entries is None:
            return
        # the bar advances as the files are read (the scan of queued leaves comes later, in bulk)
        self.sink.saw_files(len(entries), later=True)
        rel_dir = self.sink.rel(path)
        names = [e.name for e in entries]
        mapping: dict[str, str] = {}
        if "mapping.csv" in names:
            mapping = self._read_mapping(rel_dir, entries[names.index("mapping.csv")])
        leaf = _Leaf(rank, net, graph_id, iteration, dir_kind, path, rel_dir, entries, mapping)
        leaf.unread = len(entries)
        settled = self.sink.options.live and self._settled(entries)
        if self.sink.options.live and not settled:
            # A directory being written: each file judged by _ingest_tensor's live rules.
            self._process_leaf(leaf, scanned=False)
            self.sink.files_read(leaf.unread)
            return
        if len(entries) > _GIANT_LEAF_FILES:
            # Scanned rows of a directory are finished together (its statistic.csv is matched
            # against all of them); one this big goes file by file, flushing as it goes, so
            # that memory stays bounded by the batch size.
            entries.sort(key=_entry_name)
            self._process_leaf(leaf, scanned=False)
            self.sink.files_read(leaf.unread)
            return
        is_scanned = self.files.is_scanned
        scan = [n for n in names if is_scanned(n)]
        scan.sort()
        if len(scan) < len(names):
            leaf.others = sorted((e for e in entries if not is_scanned(e.name)), key=_entry_name)
        if not self.sink.options.live:
            # A one-shot ingest keeps only the names of the files it scans, not their listing
            # (~12 MiB for 25,000 files, held until the leaf is finished); the few files a scan
            # hands back as irregular are listed again then (_irregular_entries).
            leaf.entries = []
            del entries
        # Skip files already cataloged. A fresh run's first visit of a directory skips nothing, so
        # the ids are not computed here for it (the scan computes them, on every core).
        if self.sink.options.live or self.sink.options.catalog_had_tensors or rel_dir in self._scanned_dirs:
            prefix = rel_dir + "/"
            if type(self.files).is_cataloged is LeafFiles.is_cataloged:  # the whole directory at once
                row_id_of = self.sink.options.row_id_of
                found = self.sink.known_many([row_id_of(prefix + n) for n in scan])
                leaf.known_names = [n for n, known in zip(scan, found.tolist(), strict=True) if known]
            else:
                leaf.known_names = [n for n in scan if self.files.is_cataloged(prefix + n)]
            if leaf.known_names:
                skip = set(leaf.known_names)
                scan = [n for n in scan if n not in skip]
        leaf.scan_names = scan
        self._scanned_dirs.add(rel_dir)
        self._leaf_queue.append(leaf)
        self._queued_files += len(scan)
        if self._queued_files >= _WARM_HELPERS_FILES:
            self.sink.warm_helpers(self.files.scan_function)
        if settled or self._queued_files >= _SCAN_GROUP_FILES:
            del names, scan, leaf  # the queue holds what is needed: not held through the flush
            self._drain_leaves()
            self.sink.flush_if_full()

    def _settled(self, entries: list[os.DirEntry]) -> bool:
        """Live mode: is this a big directory nothing in which changed for `grace` seconds? The live
        rules would judge each of its files as a one-shot ingest does, so it is scanned like one, on
        every core (a watcher started on a dump that already holds millions of files)."""
        if len(entries) < _LIVE_SCAN_MIN_FILES:
            return False
        newest = time.time() - self.sink.options.grace
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
        sizes: list[list[int]] = []  # per batch: the files of each chunk (the progress bar's steps)
        batch: list[LeafChunk] = []
        owner: list[int] = []
        sized: list[int] = []
        size = 0
        for index, leaf in enumerate(queue):
            ctx = (self.sink.options.run, leaf.rank, leaf.net, leaf.graph_id, leaf.iteration, leaf.dir_kind)
            names = leaf.scan_names
            start = 0
            while start < len(names):  # a batch takes whole small leaves, or slices of a big one
                part = names[start : start + _SCAN_BATCH_FILES - size]
                start += len(part)
                originals = [leaf.mapping.get(n) for n in part] if leaf.mapping else [None] * len(part)
                batch.append((ctx, leaf.path, leaf.rel_dir, part, originals))
                owner.append(index)
                sized.append(len(part))
                size += len(part)
                if size >= _SCAN_BATCH_FILES:
                    batches.append(batch)
                    owners.append(owner)
                    sizes.append(sized)
                    batch, owner, sized, size = [], [], [], 0
        if batch:
            batches.append(batch)
            owners.append(owner)
            sizes.append(sized)
        workers = resolve_workers(self.sink.options.workers)
        args = self.files.scan_args()
        if workers > 1 and len(batches) > 1:
            # `workers` helpers scan; this process finishes leaves meanwhile (measured: faster than
            # scanning here too, which delays the finishing and starves the helpers).
            results = run_ordered(
                self.files.scan_function, iter(batches), workers, *args, caller_helps=False, slots=6
            )
        else:
            scan = resolve_task(self.files.scan_function)
            results = (scan(b, *args) for b in batches)
        # Finish each leaf as soon as its last chunk is back, while the helpers scan the next.
        finished = 0
        files_read = self.sink.files_read
        for owner, sized, result in zip(owners, sizes, results, strict=True):
            for index, n, scanned in zip(owner, sized, result, strict=True):
                table, irregular = self.files.scanned_table(scanned)
                owner_leaf = queue[index]
                owner_leaf.tables.append(table)
                owner_leaf.irregular.extend(irregular)
                owner_leaf.unread -= n
                computed = self.files.scanned_stats(scanned, table)
                if computed is not None:
                    owner_leaf.stats.append(computed)
                    owner_leaf.stats_ids.update(table.column("row_id").to_numpy().tolist())
            files_read(sum(sized))  # the bar moves a scan batch at a time
            upto = owner[-1] if owner else finished
            while finished < upto:
                self._process_leaf(queue[finished], scanned=True)
                files_read(queue[finished].unread)  # its other files (statistic.csv, ...), the known ones
                queue[finished] = None  # type: ignore[call-overload]  # free its rows
                finished += 1
        while finished < len(queue):
            self._process_leaf(queue[finished], scanned=True)
            files_read(queue[finished].unread)
            finished += 1

    def _irregular_entries(self, leaf: _Leaf) -> dict[str, os.DirEntry]:
        """The directory entries of the files a leaf's scan handed back as irregular: from its
        listing (live), or from a new one (a one-shot ingest keeps names only)."""
        wanted = set(leaf.irregular)
        entries = leaf.entries
        if not entries:
            entries = [e for e in self.sink.scandir(leaf.path) or [] if e.name in wanted]
        return {e.name: e for e in entries if e.name in wanted}

    def _process_leaf(self, leaf: _Leaf, *, scanned: bool) -> None:
        """Statistic rows, tensors rows (scanned already, or judged file by file) and the
        directory's other files."""
        rank, net, graph_id, iteration = leaf.rank, leaf.net, leaf.graph_id, leaf.iteration
        dir_kind, rel_dir, entries, mapping = leaf.dir_kind, leaf.rel_dir, leaf.entries, leaf.mapping
        by_name = {e.name: e for e in (leaf.others if scanned else entries)}
        if scanned and leaf.irregular:
            by_name.update(self._irregular_entries(leaf))
        stat_table = None
        if "statistic.csv" in by_name:
            stat_table = self._read_statistic_csv(
                rank, net, graph_id, iteration, rel_dir, by_name["statistic.csv"]
            )

        prefix = rel_dir + "/"
        row_id_of = self.sink.options.row_id_of
        scanned_table = None
        if scanned:
            scanned_table = (
                leaf.tables[0]
                if len(leaf.tables) == 1
                else pa.concat_tables(leaf.tables)
                if leaf.tables
                else TABLES["tensors"].empty_table()
            )
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
            other (MindSpore appends a tensor's row just before or after writing its file).

            Judged on the directory as it is now, not only on its listing: a leaf is finished
            after its helpers' scan, possibly seconds after it was listed, and by then the listed
            files look old while the producer keeps creating files (the directory's mtime) and
            appending rows (statistic.csv's mtime)."""
            if not active:
                ages = [age(e) for e in entries]
                ages.append(fresh_age(leaf.path))
                if "statistic.csv" in by_name:
                    ages.append(fresh_age(by_name["statistic.csv"].path))
                active.append(self.sink.options.live and min(ages) < self.sink.options.settle)
            return active[0]

        def match_keys(late: bool = False) -> pa.Table:
            """Every tensor file of the directory, not only new ones, so that a statistic.csv
            that grew later still finds its tensors. With `late`, also the tensor files created
            since the directory was listed: statistic.csv is read now, so its newest rows may
            describe them (their rows are cataloged by a later pass)."""
            from ingest.readers.stat_match import FILE_KEYS, file_keys

            others = []
            if scanned:
                unscanned = leaf.irregular + leaf.known_names
            else:
                unscanned = [e.name for e in entries if self.files.is_tensor_npy(e.name)]
            if late:
                listed = {e.name for e in entries}
                now = [e.name for e in self.sink.scandir(leaf.path) or []]  # checked as the listing was
                is_tensor_npy = self.files.is_tensor_npy
                unscanned = unscanned + sorted(n for n in now if n not in listed and is_tensor_npy(n))
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
            # statistic.csv's modules (pyarrow.compute, pyarrow.csv) load with the first one
            import pyarrow.compute as pc

            from ingest.readers.stat_match import match_stat_rows

            table, result = stat_table
            csv_entry = by_name["statistic.csv"]
            if table.num_rows:
                rows, keys = table, match_keys()
                table = match_stat_rows(rows, keys, leaf.path)
                if table.column("row_id").null_count and self.sink.options.live:
                    keys = match_keys(late=True)
                    table = match_stat_rows(rows, keys, leaf.path)
                upto = None
                unmatched = table.column("row_id").null_count > 0
                # A row committed without its file stays so (the file is not matched later), so
                # a row whose file may still come waits while statistic.csv is still appended to
                # (`grace`: a producer may stall between a row and its file); in a directory with
                # no tensor file at all (a statistics-only dump) only while the directory changes.
                if (
                    unmatched
                    and (keys.num_rows > 0 or dir_active())
                    and self.sink.still_written(csv_entry, f"{rel_dir}/statistic.csv", fresh=True)
                ):
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
        if self._stat_rows_ahead:
            matched |= self._stat_rows_ahead
        if (
            "statistic.csv" in by_name
            and self.sink.options.live
            and age(by_name["statistic.csv"]) < self.sink.options.grace
            and dir_active()
        ):
            csv_young = by_name["statistic.csv"]

        if scanned:
            self.files.add_scanned_tensors(scanned_table, matched, leaf.stats, leaf.stats_ids)
            for name in leaf.irregular:
                if name not in by_name:  # gone since the scan (a one-shot ingest lists it again)
                    self.sink.file_error(
                        f"{rel_dir}/{name}", "tensor", "walk", "file vanished while being ingested"
                    )
                    continue
                if not self.files.is_tensor_npy(name):  # e.g. a raw dump that did not parse
                    self.files.other_file(Place(rank, net, graph_id, iteration, dir_kind), by_name[name])
                    continue
                row_id = row_id_of(prefix + name)
                self._ingest_tensor(
                    rank, net, graph_id, iteration, dir_kind, by_name[name], prefix + name, row_id,
                    parse(name), mapping.get(name), matched,
                )  # fmt: skip
        for i, entry in enumerate(leaf.others if scanned else entries):
            name = entry.name
            if name in ("statistic.csv", "mapping.csv"):
                continue
            if self.files.is_tensor_npy(name):
                row_id = row_id_of(prefix + name)
                if not self.sink.is_known(row_id):
                    self._ingest_tensor(
                        rank, net, graph_id, iteration, dir_kind, entry, f"{rel_dir}/{name}", row_id,
                        parse(name), mapping.get(name), matched, csv_young,
                    )  # fmt: skip
            elif self.files.other_file(Place(rank, net, graph_id, iteration, dir_kind), entry):
                pass  # the policy's file (e.g. a raw dump, an overflow record's .json)
            elif name.endswith(".json"):
                self._ingest_kernel_args(rank, net, graph_id, iteration, entry)
            else:
                self.sink.file_error(
                    f"{rel_dir}/{name}",
                    "unknown",
                    "walk",
                    "unrecognised file (not .npy, statistic.csv, mapping.csv or .json)",
                )
            if not scanned and i % 4096 == 4095:
                self.sink.flush_if_full()  # bounded memory even for one huge directory
        if not scanned:
            self.sink.flush_if_full()
        if self.sink.options.live and matched:
            is_known = self.sink.is_known
            self._stat_rows_ahead = {r for r in matched if not is_known(r)}

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
        prev = self.sink.previous(rel)
        if isinstance(name, TensorNameError):
            if self.files.unnamed_npy(Place(rank, net, graph_id, iteration, dir_kind), entry):
                return
            # A renamed `<digits>.npy` may appear before its mapping.csv line.
            if not (MAPPED_NAME.match(entry.name) and self.sink.still_written(entry, rel)):
                self.sink.file_error(rel, "tensor", "name", f"file name fits no tensor pattern: {name}")
            return
        try:
            header, size = read_npy_header(entry.path)
        except (NpyHeaderError, OSError) as exc:
            if not self.sink.still_written(entry, rel):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self.sink.file_error(rel, "tensor", "npy_header", reason, size_or_none(entry))
            return
        if row_id not in matched and csv_young and self.sink.still_written(csv_young, rel):
            return  # its statistic.csv row is probably about to be appended
        stored, nbytes = stored_as(header, size)
        shape = list(header.shape)
        row = (
            row_id, self.sink.options.run, rank, net, graph_id, iteration, dir_kind, rel, entry.name,
            original, name.op_type, name.op_name, without_op_index(name.op_name), name.task_id,
            name.stream_id, name.timestamp_us, name.io, name.slot, name.format, name.dtype or stored, stored,
            shape, header.data_offset, nbytes, size, name.era, PRODUCER, None, None, None,
        )  # fmt: skip
        self.sink.add_tensor_rows(rel, [row], () if row_id in matched else None)
        if prev is not None:  # an earlier error for this file is now resolved
            self.sink.record(rel, "tensor", size, size, 0, "ok")

    def _read_mapping(self, rel_dir: str, entry: os.DirEntry) -> dict[str, str]:
        rel = f"{rel_dir}/mapping.csv"
        try:
            mapping, errors = mapping_csv.read_mapping_csv(entry.path, self.sink.options.caps)
        except MetadataTooLarge as exc:
            self.sink.file_error(rel, "mapping_csv", "mapping_csv", str(exc), size_or_none(entry))
            return {}
        except OSError as exc:
            self.sink.error(rel, "mapping_csv", f"unreadable: {exc.strerror}")
            return {}
        size = size_or_none(entry) or 0
        if not self.sink.is_unchanged(rel, size):
            for line_no, reason in errors:
                self.sink.error(f"{rel}:{line_no}", "mapping_csv", reason)
            self.sink.record(rel, "mapping_csv", size, size, 0, "ok")
        return mapping

    def _read_statistic_csv(
        self, rank: int, net: str, graph_id: int, iteration: int | None, rel_dir: str, entry: os.DirEntry
    ) -> tuple[pa.Table, object] | None:
        """The new complete lines of a statistic.csv, as rows of `stat_rows` without row ids yet.
        Nothing is recorded until `_commit_stat_chunk`: live ingest may decide to read it later."""
        import pyarrow.compute as pc

        from ingest.formats.mindspore.statistic_csv import read_statistic_csv

        rel = f"{rel_dir}/statistic.csv"
        size = size_or_none(entry)
        prev = self.sink.previous(rel)
        start_offset, start_line = (prev[1], prev[2]) if prev and prev[3] == "ok" else (0, 0)
        if size is not None and size <= start_offset:
            return None
        try:
            result = read_statistic_csv(entry.path, start_offset=start_offset, start_line=start_line)
        except OSError as exc:
            self.sink.error(rel, "statistic_csv", f"unreadable: {exc.strerror}", size)
            return None
        table = result.table
        n = table.num_rows
        line_nos = table.column("line_no").to_numpy()
        table = table.append_column(
            "stat_id", pa.array(stat_row_ids(self.sink.options.run, rel, line_nos), pa.int64())
        )
        consts = {
            "run": (self.sink.options.run, pa.string()),
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
        import pyarrow.compute as pc

        from ingest.readers.stat_match import mismatch_note

        size = size_or_none(entry)
        end_offset, end_line, errors = result.end_offset, result.end_line, result.errors
        if upto_line is not None and upto_line < end_line:
            prev = self.sink.previous(rel)
            start_offset, start_line = (prev[1], prev[2]) if prev and prev[3] == "ok" else (0, 0)
            end_offset, end_line = _after_lines(entry.path, start_offset, upto_line - start_line), upto_line
            errors = [(n, r) for n, r in errors if n <= upto_line]
            table = table.filter(pc.less_equal(table.column("line_no"), upto_line))
        for line_no, reason in errors:
            self.sink.error(f"{rel}:{line_no}", "statistic_csv", reason, size)
        if (note := mismatch_note(table)) is not None:
            self.sink.error(rel, "statistic_csv", note, size)
        self.sink.record(rel, "statistic_csv", size or 0, end_offset, end_line, "ok")
        if upto_line is None:
            self.sink.judged(rel)
        if table.num_rows:
            self.sink.add_stat_chunk(conform(table, TABLES["stat_rows"]))

    def _ingest_kernel_args(
        self, rank: int, net: str, graph_id: int, iteration: int | None, entry: os.DirEntry
    ) -> None:
        rel = self.sink.rel(entry.path)
        size = size_or_none(entry) or 0
        if self.sink.is_unchanged(rel, size):
            return
        try:
            op_type, op_name = kernel_args.parse_kernel_args_name(entry.name)
            args = kernel_args.read_kernel_args(entry.path, self.sink.options.caps)
        except (kernel_args.KernelArgsError, OSError, UnicodeDecodeError) as exc:
            self.sink.file_error(rel, "kernel_args", "kernel_args", str(exc), size)
            return
        for arg, value in args:
            self.sink.add(
                "kernel_args",
                (self.sink.options.run, rank, net, graph_id, iteration, rel, op_type, op_name, arg, value),
            )
        self.sink.record(rel, "kernel_args", size, size, 0, "ok")


class MindSporeNpyReader(Reader):
    """npy tensor files, statistic.csv, mapping.csv and kernel args in the rank layout: the
    rank-layout walker hands each leaf directory to the leaf engine, with the npy policy."""

    name = PRODUCER
    producer = "MindSpore 1.3+ (npy)"
    layout = RANK_LAYOUT
    looked_for = "rank_N/ folders (MindSpore 1.3+: rank_N/{net}/{graph}/{iteration}/*.npy)"
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = "MindSpore 1.3–2.10 npy (sync/KBK on CPU, GPU, Ascend; async with `file_format: npy`)"
    tree = "`rank_N/{net}/{graph}/{iteration|constants}/*.npy`"
    cataloged = (
        "a `tensors` row per npy file (dtype, shape, offset from its header), `statistic.csv` rows, "
        "kernel args, `mapping.csv` names; per rank the execution order, graph IR and source lines, "
        "metadata"
    )

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self.leaves = LeafEngine(sink, LeafFiles(sink))
        self.rank_layout = RankLayoutWalker(sink, detection, self.leaves.ingest_leaf)

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        """Any rank-layout tree: its npy files when it has some, else its rank folders (a dump
        whose first tensors are not written yet)."""
        found = rank_root(path)
        if found is None:
            return None
        root, ranks, fixed = found
        evidence = None
        for rank in ranks[:4]:
            hit = first_file(rank, 3, _is_npy)
            if hit is not None:
                evidence = f"*.npy in {rank.name}/{hit.rsplit('/', 1)[0]}/"
                break
        if evidence is None:
            evidence = f"{ranks[0].name}/, no tensor file yet"
        return Detection(cls, root, evidence, tuple(ranks), fixed, provisional=evidence.endswith("yet"))

    def walk(self) -> None:
        self.rank_layout.walk()

    def scan_path(self, path: str) -> None:
        self.rank_layout.scan_path(path)

    def finish(self) -> None:
        self.leaves.finish()


def _after_lines(path: str, offset: int, lines: int) -> int:
    """The offset just after the `lines`-th newline from `offset`, read 1 MiB at a time (the part
    of a statistic.csv already parsed, which may be big, is never read whole)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        while lines:
            block = fh.read(1 << 20)
            if not block:
                raise OSError(f"{path} shrank while it was read")
            count = block.count(b"\n")
            if count < lines:
                lines -= count
                offset += len(block)
                continue
            cut = -1
            for _ in range(lines):
                cut = block.index(b"\n", cut + 1)
            return offset + cut + 1
    return offset
