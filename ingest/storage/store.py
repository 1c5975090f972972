"""The catalog on disk: parquet batch files plus one snapshot file that says which are live.

Layout of a catalog directory:

    dumpcat.json                   marker + format version
    snapshot.json                  {"version": N, "batches": [{"id", "run", "tables": {name: rows}}]}
    data/run=<run>/<batch>/<table>.parquet
    writer.lock                    held (fcntl) by the one process writing

That is the *default shard*, what `dumpcat ingest`/`watch` write without `--writer`. A catalog
may also hold *named shards*, one per (run, writer name), each written by its own process at the
same time as the others (`--writer NAME`: one per host of a multi-host run):

    shards.json                    the registered named shards: [{"run", "writer", "path"}]
    data/run=<run>/writer=<name>/  a shard: its own snapshot.json, writer.lock, tmp/,
                                   <batch>/<table>.parquet and flat/<table>/<id>/

Every path in a shard's snapshot is relative to the catalog root, so readers take the union of
the default shard and every registered shard (`union_snapshot`), each shard's snapshot read
whole: a reader sees, per shard, all of a batch or none of it.

A batch holds every table's new rows from one flush of an ingest. Its files are written and
fsynced first and only then is the batch added to snapshot.json, by writing a new snapshot and
renaming it over the old one. That rename is the commit: a reader sees either all of a batch
or none of it, and a crash mid-batch leaves only an unreferenced directory, removed by the next
writer. Other engines can still read the parquet files directly by glob.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.storage import flat
from ingest.storage.durable import fsync_path, write_json_atomic
from ingest.storage.errors import CatalogError, CatalogWarning
from ingest.storage.memory import release_free_memory
from ingest.storage.schema import TABLES

FORMAT_VERSION = 2  # the newest catalog format this dumpcat reads
# A catalog is created as format 1 (what dumpcat before named shards reads) and becomes format 2
# when its first named shard is registered: an older dumpcat must neither show part of the
# catalog nor, as a writer, delete other shards' directories as a crashed writer's leftovers.
FORMAT_CREATED = 1
FORMAT_SHARDED = 2
MARKER = "dumpcat.json"
SNAPSHOT = "snapshot.json"
SHARDS = "shards.json"
LOCK = "writer.lock"
# Snapshot key: run -> the flat tables (ingest/storage/flat.py) whose files do not hold that run's
# committed rows yet: a one-shot ingest under way, or one stopped before its end (start_run).
# While any run is pending, readers resolve names at query time (the same rows, slower).
PENDING = "flat_pending"
# A writer name is a directory name on any file system and object store: no separators.
_WRITER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ROW_GROUP_SIZE = 64 * 1024
# Names every column of every table: a batch entry carrying it was written with all of them.
SCHEMA_ID = hashlib.blake2b(
    repr([(t, s.names) for t, s in sorted(TABLES.items())]).encode(), digest_size=6
).hexdigest()


# Parquet min/max statistics leave NaN out, and DuckDB 2.0 then prunes every row group from a
# filter such as `WHERE isnan(max)` (it returns no rows where there are thousands). Floating
# columns therefore get no statistics; the others keep them for pruning.
_STATISTICS_COLUMNS = {
    name: [f.name for f in schema if not pa.types.is_floating(f.type)] for name, schema in TABLES.items()
}


def run_dir_name(run: str) -> str:
    """Directory name for a run: hive style, with the run name percent-encoded."""
    return "run=" + quote(run, safe="")


def check_writer_name(name: str) -> str:
    """A writer name as given, or CatalogError saying what one may hold."""
    if not isinstance(name, str) or not _WRITER_NAME.fullmatch(name):
        raise CatalogError(
            f"writer name {name!r} is not usable: 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. the host name)"
        )
    return name


def shard_path(run: str, writer: str) -> str:
    """The directory of the named shard (run, writer), relative to the catalog root."""
    return f"data/{run_dir_name(run)}/writer={writer}"


class CatalogStore:
    """Read and write access to the files of one catalog directory."""

    def __init__(self, root: str | os.PathLike, *, create: bool = False) -> None:
        self.root = Path(root).absolute()
        self._flat: flat.FlatWriter | None = None
        self._defer_flat = False  # a one-shot ingest's batches commit without flat files (start_run)
        # The shard this store writes: the default one ("" = the catalog root), or a named one.
        self.writer: str | None = None
        self.shard_run: str | None = None
        self.shard_rel = ""
        self._shards_cache: tuple[tuple[int, int] | None, list[dict], list[str]] = (None, [], [])
        self._warned: set[str] = set()
        marker = self.root / MARKER
        if not marker.exists():
            if not create:
                raise CatalogError(f"{self.root} is not a dumpcat catalog (no {MARKER})")
            if self.root.exists() and not self.root.is_dir():
                raise CatalogError(f"{self.root} exists and is not a directory")
            # A creation cut short (crash before the marker) left only what it writes first.
            leftovers = {"data", SNAPSHOT}
            if self.root.exists() and any(
                p.name not in leftovers and not p.name.startswith((f".{SNAPSHOT}.", f".{MARKER}."))
                for p in self.root.iterdir()
            ):
                raise CatalogError(f"{self.root} is a non-empty directory that is not a dumpcat catalog")
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                (self.root / "data").mkdir(exist_ok=True)
                write_json_atomic(self.root / SNAPSHOT, {"version": 0, "batches": [], "flat": empty_flat()})
                write_json_atomic(marker, {"format": "dumpcat", "version": FORMAT_CREATED})
            except OSError as exc:
                raise CatalogError(f"cannot create catalog at {self.root}: {exc.strerror}") from exc
        else:
            try:
                info = json.loads(marker.read_text())
            except (OSError, ValueError) as exc:
                raise CatalogError(f"{marker} is unreadable: {exc}") from exc
            if info.get("version", 0) > FORMAT_VERSION:
                raise CatalogError(f"catalog format {info.get('version')} is newer than this dumpcat")

    # -- shards ---------------------------------------------------------------------------

    def shard(self, run: str, writer: str | None) -> CatalogStore:
        """The store that writes the named shard (run, writer) of this catalog (itself for None:
        the default shard). Nothing is created until its writer takes the lock."""
        if writer is None:
            return self
        check_writer_name(writer)
        other = copy.copy(self)
        other._flat = None
        other.writer, other.shard_run, other.shard_rel = writer, run, shard_path(run, writer)
        return other

    @property
    def shard_dir(self) -> Path:
        """The directory holding this store's shard's snapshot, lock and tmp/."""
        return self.root / self.shard_rel if self.shard_rel else self.root

    @property
    def tmp_dir(self) -> Path:
        """Where this shard's writer lets DuckDB spill (one per shard: writers never share one)."""
        return self.shard_dir / "tmp"

    def describe(self) -> str:
        """The shard, in words, for error messages."""
        if self.writer is None:
            return str(self.root)
        return f"shard writer={self.writer} of run {self.shard_run!r} in {self.root}"

    def shards(self) -> list[dict]:
        """The registered named shards ({"run", "writer", "path"}), sorted by path; [] when none.
        A damaged shards.json does not hide the catalog: an entry that names no shard of this
        catalog is left out, and the shards are then also found from the layout (`shard_problems`
        says so; the next writer to register rewrites the file)."""
        token = _stat_token(self.root / SHARDS)
        cached_token, cached, _ = self._shards_cache
        if token is not None and token == cached_token:
            return cached
        if token is None:
            return []
        problems: list[str] = []
        try:
            listed = json.loads((self.root / SHARDS).read_text())["shards"]
            if not isinstance(listed, list):
                raise TypeError("'shards' is not a list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"cannot read {self.root / SHARDS} ({exc})")
            listed = []
        shards = []
        for e in listed:
            if _valid_shard_entry(e):
                shards.append({"run": e["run"], "writer": e["writer"], "path": e["path"]})
            else:
                problems.append(f"{self.root / SHARDS} lists {e!r}, which is not a shard of this catalog")
        if problems:
            shards += self._found_shards()
            problems[-1] += ": the shards were found from the directories data/run=*/writer=*/ instead"
        shards = sorted({e["path"]: e for e in shards}.values(), key=lambda e: e["path"])
        self._shards_cache = (token, shards, problems)
        return shards

    def shard_problems(self) -> list[str]:
        """What `shards` could not read in shards.json (empty when it is sound)."""
        self.shards()
        return list(self._shards_cache[2])

    def _found_shards(self) -> list[dict]:
        """The named shards as the layout shows them: each data/run=<run>/writer=<name>/ directory
        (a shard's first writer makes it before registering it)."""
        found = []
        for sdir in sorted((self.root / "data").glob("run=*/writer=*")):
            run, writer = unquote(sdir.parent.name.removeprefix("run=")), sdir.name.removeprefix("writer=")
            entry = {"run": run, "writer": writer, "path": f"data/{sdir.parent.name}/{sdir.name}"}
            if sdir.is_dir() and _valid_shard_entry(entry):
                found.append(entry)
        return found

    def _register_shard(self) -> None:
        """List this named shard in shards.json (idempotent; under the registry's own lock, since
        writers of several shards may register at once) and mark the catalog as sharded."""
        entry = {"run": self.shard_run, "writer": self.writer, "path": self.shard_rel}
        if any(e["path"] == self.shard_rel for e in self.shards()) and not self.shard_problems():
            return
        fd = os.open(self.root / "shards.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            marker = self.root / MARKER
            info = json.loads(marker.read_text())
            if info.get("version", 0) < FORMAT_SHARDED:
                write_json_atomic(marker, {**info, "version": FORMAT_SHARDED})
            path = self.root / SHARDS
            shards = self.shards() if path.exists() else []  # a damaged registry is rewritten whole
            if not any(e["path"] == self.shard_rel for e in shards) or self.shard_problems():
                shards = [e for e in shards if e["path"] != self.shard_rel]
                write_json_atomic(path, {"shards": [*shards, entry]})
        finally:
            os.close(fd)

    # -- snapshot -------------------------------------------------------------------------

    def snapshot(self) -> dict:
        """This shard's current snapshot (which of its batches are committed). Readers want
        `union_snapshot`: every shard's."""
        path = self.shard_dir / SNAPSHOT
        return _checked_snapshot(_read_snapshot(path), self.shard_rel, path)

    def snapshot_token(self) -> tuple[int, int]:
        """Cheap change detector for this shard: (mtime_ns, inode) of its snapshot.json."""
        token = _stat_token(self.shard_dir / SNAPSHOT)
        if token is None:
            raise CatalogError(f"cannot read {self.shard_dir / SNAPSHOT}")
        return token

    def union_token(self) -> tuple:
        """Cheap change detector for readers of the whole catalog: the default shard's snapshot
        token, the registry's, and each named shard's (one stat each)."""
        base = _stat_token(self.root / SNAPSHOT)
        if base is None:
            raise CatalogError(f"cannot read {self.root / SNAPSHOT}")
        shards = self.shards()
        if not shards:
            return base
        return (
            base,
            _stat_token(self.root / SHARDS),
            *(_stat_token(self.root / e["path"] / SNAPSHOT) for e in shards),
        )

    def union_snapshot(self) -> dict:
        """What readers query: the default shard's snapshot plus every named shard's committed
        batches and flat files, each shard's snapshot read whole (so each is consistent; shards
        commit independently). Entries carry "shard" (their shard's path, "" for the default).
        "flat" is left out when a shard has no flat files (the default shard of a catalog from
        before them): readers then resolve names at query time.

        A shard whose snapshot cannot be read (damaged by hand or by the storage) is left out, so
        that the others stay readable: "unreadable" lists each one in words, and a CatalogWarning
        says so once per store (as it says what was wrong with shards.json, which hides nothing).
        Without named shards a damaged snapshot is a CatalogError."""
        shards = self.shards()
        if not shards and not self.shard_problems():
            return _checked_snapshot(_read_snapshot(self.root / SNAPSHOT), "", self.root / SNAPSHOT)
        parts, left_out = [], []
        for rel, e in [("", None), *((e["path"], e) for e in shards)]:
            path = self.root / rel / SNAPSHOT
            if rel and not path.exists():
                continue  # written before the shard is registered; a missing one holds nothing
            try:
                parts.append((rel, _checked_snapshot(_read_snapshot(path), rel, path)))
            except CatalogError as exc:
                who = f"shard writer={e['writer']} of run {e['run']!r}" if e else "the default shard"
                fix = " or delete it and run that writer again (it catalogs its ranks anew)" if e else ""
                left_out.append(f"{who} is left out (its rows are in no view): {exc}; restore the file{fix}")
        for message in [*self.shard_problems(), *left_out]:
            if message not in self._warned:
                self._warned.add(message)
                # one line wherever it is shown (a server's statement workers too): no source line
                warnings.warn_explicit(message, CatalogWarning, "dumpcat", 0)
        if not parts:
            raise CatalogError(f"no shard of {self.root} is readable: {left_out[-1]}")
        base = next((part for rel, part in parts if rel == ""), {})
        union: dict = {
            "version": base.get("version", 0),
            "batches": [],
            "shards": shards,
            "unreadable": left_out,
        }
        has_flat = all("flat" in part and not part.get(PENDING) for _, part in parts)
        if has_flat:
            union["flat"] = empty_flat()
        for rel, part in parts:
            union["batches"] += [{**b, "shard": rel} for b in part["batches"]]
            if has_flat:
                for table, entries in part["flat"].items():
                    union["flat"].setdefault(table, []).extend({**e, "shard": rel} for e in entries)
        return union

    def dump_roots(self, snapshot: dict) -> dict[tuple[str, str], str]:
        """(shard, run) -> the dump root its writer ingested, from the `runs` rows of `snapshot`
        (a union snapshot: each shard of a run may have its own root)."""
        roots: dict[tuple[str, str], str] = {}
        for batch in snapshot["batches"]:
            if "runs" in batch["tables"]:
                # ParquetFile, not read_table: that imports pyarrow.dataset (and pandas), ~0.3 s of
                # a first Catalog.tensor
                with pq.ParquetFile(self.root / batch["path"] / "runs.parquet") as runs:
                    t = runs.read(columns=["run", "dump_root"])
                for run, root in zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True):
                    roots[(batch.get("shard", ""), run)] = root
        return roots

    def file_shards(self, snapshot: dict) -> dict[str, str]:
        """Absolute path of each live tensors file and flat sidecar index -> its shard's path."""
        out = {
            str(self.root / b["path"] / "tensors.parquet"): b.get("shard", "")
            for b in snapshot["batches"]
            if "tensors" in b["tables"]
        }
        for e in snapshot.get("flat", {}).get("tensors", []):
            out[str(self.root / e["path"] / flat.INDEX_FILE)] = e.get("shard", "")
        return out

    def flat_files(self, snapshot: dict | None = None) -> dict[str, list[str]] | None:
        """Absolute paths of the flat `tensors`/`stats` files (ingest/storage/flat.py), or None for a
        catalog written before they existed, or while a run's are pending (see `start_run`): its
        views then resolve names at query time."""
        snap = snapshot if snapshot is not None else self.snapshot()
        if "flat" not in snap or snap.get(PENDING):
            return None
        return {
            name: [str(self.root / e["path"] / flat.DATA_FILE) for e in entries]
            for name, entries in snap["flat"].items()
        }

    def flat_index_files(self, snapshot: dict | None = None) -> list[str] | None:
        """The location sidecars of the flat tensors files (for `Catalog.tensor`), or None (as
        `flat_files`)."""
        snap = snapshot if snapshot is not None else self.snapshot()
        if "flat" not in snap or snap.get(PENDING):
            return None
        return [str(self.root / e["path"] / flat.INDEX_FILE) for e in snap["flat"].get("tensors", [])]

    def full_schema_tables(self, snapshot: dict | None = None) -> set[str]:
        """Tables whose every live file was written with the current schema (so a reader need not
        look for columns older files lack)."""
        snap = snapshot if snapshot is not None else self.snapshot()
        old = {t for b in snap["batches"] if b.get("schema") != SCHEMA_ID for t in b["tables"]}
        return set(TABLES) - old

    def table_files(self, snapshot: dict | None = None) -> dict[str, list[str]]:
        """Absolute parquet paths per table for a snapshot."""
        snap = snapshot if snapshot is not None else self.snapshot()
        files: dict[str, list[str]] = {name: [] for name in TABLES}
        for batch in snap["batches"]:
            bdir = self.root / batch["path"]
            for table in batch["tables"]:
                if table in files:
                    files[table].append(str(bdir / f"{table}.parquet"))
        return files

    # -- writing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def writer_lock(self, wait: bool = True) -> Iterator[None]:
        """Hold this shard's writer lock; clean up batches a crashed writer of the shard left
        uncommitted. A named shard is created (and registered) by its first writer."""
        if self.writer is not None:
            self.shard_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.shard_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError as exc:
                holder = _lock_holder(fd)
                raise CatalogError(
                    f"another dumpcat process is writing to {self.describe()}"
                    + (f" (locked by {holder})" if holder else "")
                ) from exc
            _note_holder(fd)
            if self.writer is not None:
                if not (self.shard_dir / SNAPSHOT).exists():
                    write_json_atomic(
                        self.shard_dir / SNAPSHOT,
                        {"version": 0, "batches": [], "flat": empty_flat(),
                         "run": self.shard_run, "writer": self.writer},
                    )  # fmt: skip
                self._register_shard()
                if "flat" not in _read_snapshot(self.root / SNAPSHOT):
                    # readers resolve at query time unless every shard has flat files
                    CatalogStore(self.root).upgrade()
            self._remove_uncommitted()
            self.purge_retired()
            snap = self.snapshot()
            if "flat" not in snap:  # a catalog from before flat files: give it them once
                self._retire(snap, self._flat_writer().build_all(snap))
                self._commit_snapshot(snap)
            elif snap.get(PENDING):  # a one-shot ingest stopped before its end: its flat files now
                flat.log.warning(
                    "dumpcat: writing the flat files of run %s, which an ingest that stopped before its "
                    "end left pending (queries resolved its names themselves meanwhile)",
                    ", ".join(repr(run) for run in snap[PENDING]),
                )
                self._finish_pending(snap, list(snap[PENDING]))
                self._commit_snapshot(snap)
            yield
        finally:
            self._defer_flat = False  # (an ingest that raised leaves its run pending, not this)
            if self._flat is not None:
                self._flat.close()
                self._flat = None
            os.close(fd)

    def upgrade(self) -> bool:
        """Give a catalog from before flat files its flat files now (or write those a stopped
        one-shot ingest left pending), if no other process is writing and the directory is
        writable; True when the catalog has them."""
        if _has_flat(self.snapshot()):
            return True
        try:
            with self.writer_lock(wait=False):
                pass
        except (CatalogError, OSError):
            return False
        return _has_flat(self.snapshot())

    def _flat_writer(self) -> flat.FlatWriter:
        if self._flat is None:
            self._flat = flat.FlatWriter(self)
        return self._flat

    @staticmethod
    def _retire(snap: dict, paths: list[str]) -> None:
        """Mark directories no longer in `snap` for deletion once readers have moved on."""
        if paths:
            now = time.time()
            snap.setdefault("retired", []).extend({"path": p, "at": now} for p in paths)

    def start_run(self) -> None:
        """A one-shot ingest starts: its batches commit without flat files. Its run is *pending*
        (the snapshot's PENDING names it and the flat tables its batches change) and readers
        resolve names at query time, the same rows, until its last batch (or `finish_run`)
        writes each flat table of the run once, from all its batches (FlatWriter.resolve_run).
        Killed before that, it leaves the run pending: the next writer of the shard writes the
        files when it takes the lock. Caller holds writer_lock."""
        self._defer_flat = True

    @property
    def defers_flat_files(self) -> bool:
        """Whether a batch committed now leaves its flat files to the end of the run (`start_run`)."""
        return self._defer_flat

    def finish_run(self, run: str, *, on_phase: Callable[[str], None] | None = None) -> None:
        """A one-shot ingest of `run` ended: write its pending flat files, and merge the run's
        files into one per table, so queries read one file (the watcher never calls this; its
        files stay merged by size tiers). Caller holds writer_lock. `on_phase` hears the phase
        names (ingest/progress.py)."""
        self._defer_flat = False
        phase = on_phase or _no_phase
        snap = self.snapshot()
        if "flat" not in snap:
            return
        pending = run in snap.get(PENDING, {})
        if pending:  # (no batch was the last: its rows were none)
            phase("resolving names")
            self._finish_pending(snap, [run])
        writer = self._flat_writer()
        retired = []
        if writer.to_consolidate(snap, run):
            release_free_memory()
            phase("merging flat files")
            retired = writer.consolidate(snap, run)
        if pending or retired:
            phase("committing")
            self._retire(snap, retired)
            self._commit_snapshot(snap)

    def _finish_pending(self, snap: dict, runs: list[str]) -> None:
        """Write the pending flat files of `runs` into `snap` (not yet committed)."""
        writer = self._flat_writer()
        for run in runs:
            self._retire(snap, writer.resolve_run(snap, run, snap[PENDING].pop(run)))
        if not snap[PENDING]:
            del snap[PENDING]

    def _remove_uncommitted(self) -> None:
        """Delete batch directories the snapshot does not know: what a crashed writer wrote but
        never committed. Retired batches stay until `purge_retired` finds them old enough."""
        snap = self.snapshot()
        live = {b["path"] for b in snap["batches"]} | {r["path"] for r in snap.get("retired", [])}
        live |= {e["path"] for entries in snap.get("flat", {}).values() for e in entries}
        if self.writer is not None:
            for entry in self.shard_dir.iterdir():
                if not entry.is_dir() or entry.name == "tmp":
                    continue
                if entry.name == "flat":
                    for fdir in (d for table in entry.iterdir() for d in table.iterdir()):
                        if f"{self.shard_rel}/flat/{fdir.parent.name}/{fdir.name}" not in live:
                            shutil.rmtree(fdir, ignore_errors=True)
                elif f"{self.shard_rel}/{entry.name}" not in live:
                    shutil.rmtree(entry, ignore_errors=True)
            return
        data = self.root / "data"
        if not data.exists():
            return
        for run_dir in data.iterdir():
            if run_dir.name == "flat":
                for fdir in (d for table in run_dir.iterdir() for d in table.iterdir()):
                    if f"data/flat/{fdir.parent.name}/{fdir.name}" not in live:
                        shutil.rmtree(fdir, ignore_errors=True)
                continue
            for bdir in run_dir.iterdir():
                if bdir.name.startswith("writer="):
                    continue  # a named shard: its own writer cleans it
                rel = f"data/{run_dir.name}/{bdir.name}"
                if rel not in live:
                    shutil.rmtree(bdir, ignore_errors=True)

    def commit_batch(
        self,
        run: str,
        tables: dict[str, pa.Table],
        *,
        on_phase: Callable[[str], None] | None = None,
        last: bool = False,
    ) -> str | None:
        """Write one batch of tables and commit it. Caller holds writer_lock. Returns the batch id.
        `on_phase` hears the phase names (ingest/progress.py): a big batch takes seconds to write.
        `last`: the last batch of a one-shot ingest (`start_run`): its run's pending flat files
        are written in the same commit (FlatWriter.resolve_run), and `finish_run` has nothing
        left to do.

        Takes the tables: `tables` is emptied, and the rows are let go once their files are
        written, so that a batch's rows and the flat writer's DuckDB (which reads the files) are
        not in memory at the same time (a caller that keeps no other reference to them)."""
        live = {k: v for k, v in tables.items() if v is not None and v.num_rows > 0}
        tables.clear()
        if not live:
            return None
        if self.writer is not None and run != self.shard_run:
            raise CatalogError(f"{self.describe()} cannot hold rows of run {run!r}")
        phase = on_phase or _no_phase
        snap = self.snapshot()
        self._claim_ranks(snap, run, live)
        phase("writing batch")
        entry = self._write_batch(run, live)
        live.clear()
        # and what held them goes back to the system before the flat writer's DuckDB, which
        # allocates its own, takes its share
        release_free_memory()
        snap["batches"].append(entry)
        if "flat" in snap:
            # the flat files: operator names resolved, statistics joined to tensors
            if not self._defer_flat:
                phase("resolving names")
                self._retire(snap, self._flat_writer().after_batch(snap, entry))
            else:
                _pend(snap, entry)
                if last and run in snap.get(PENDING, {}):
                    phase("resolving names")
                    self._finish_pending(snap, [run])
        phase("committing")
        self._commit_snapshot(snap)
        # the allocators keep freed blocks for reuse; an ingest idles between batches, so give
        # them back (the next batch is minutes of walking away on a big dump)
        release_free_memory()
        return entry["id"]

    def _write_batch(self, run: str, tables: dict[str, pa.Table], suffix: str = "") -> dict:
        """Write a batch's files (not yet visible) and return its snapshot entry."""
        batch_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}{suffix}"
        rel = self._write_batch_files(run, batch_id, tables)
        return {
            "id": batch_id,
            "run": run,
            "path": rel,
            "tables": {k: v.num_rows for k, v in tables.items()},
            "schema": SCHEMA_ID,
        }

    def _commit_snapshot(self, snap: dict) -> None:
        """Make `snap` the catalog's state: one atomic rename readers see all of or nothing of."""
        snap["version"] = snap.get("version", 0) + 1
        write_json_atomic(self.shard_dir / SNAPSHOT, snap)

    def _claim_ranks(self, snap: dict, run: str, tables: dict[str, pa.Table]) -> None:
        """Record in `snap` the ranks of `run` this shard holds rows of, and refuse (CatalogError)
        a rank that another shard of the run holds too: each rank is one writer's (its tensors
        resolve against its own operators, and two shards ingesting the same files would show
        each row twice). A rank new to this shard is claimed under the catalog's shards.lock and
        committed (in this shard's snapshot, before any of its rows) while the lock is held, so
        that of two writers bringing the same new rank at the same moment exactly one gets it."""
        claimed = snap.setdefault("ranks", {})
        held = set(claimed.get(run, []))
        mine = set(held)
        for name, table in tables.items():
            if name != "comparisons" and "rank" in table.column_names:
                # (a set of Python ints: pyarrow.compute takes ~40 ms to import, a small ingest's tenth)
                mine.update(r for r in set(table.column("rank").to_pylist()) if r is not None)
        if mine == held:
            # ranks it holds already: checked when claimed (an unreadable shard does not stop it)
            self._check_ranks(run, mine, strict=False)
            return
        fd = os.open(self.root / "shards.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._check_ranks(run, mine, strict=True)
            claimed[run] = sorted(mine)
            self._commit_snapshot(snap)
        finally:
            os.close(fd)

    def _check_ranks(self, run: str, mine: set[int], *, strict: bool) -> None:
        """CatalogError if another shard of `run` holds one of the ranks `mine`; a shard whose
        snapshot cannot be read is an error when `strict` (its ranks are unknown)."""
        others = [e for e in self.shards() if e["run"] == run and e["path"] != self.shard_rel]
        if self.writer is not None:
            others = [{"path": "", "writer": None}, *others]
        for other in others:
            path = self.root / other["path"] / SNAPSHOT
            if not path.exists():
                continue
            try:
                theirs = _read_snapshot(path)
            except CatalogError as exc:
                if not strict:
                    continue
                raise CatalogError(
                    f"{exc}: cannot tell which ranks it holds, so no writer of run {run!r} can take a new "
                    f"rank until it is restored ({self.describe()} was refused)"
                ) from exc
            held = set(theirs.get("ranks", {}).get(run, []))
            if "ranks" not in theirs:  # a default shard written before ranks were recorded
                held = {k for entries in theirs.get("flat", {}).values() for e in entries
                        for r, k in e.get("keys", []) if r == run and k is not None}  # fmt: skip
            both = sorted(mine & held)
            if both:
                who = f"writer {other['writer']!r}" if other["writer"] else "the default writer (no --writer)"
                raise CatalogError(
                    f"rank {both[0]} of run {run!r} is already cataloged by {who}; each rank of a run "
                    f"must be ingested by one writer ({self.describe()} was refused)"
                )

    def _write_batch_files(self, run: str, batch_id: str, tables: dict[str, pa.Table]) -> str:
        """Write and fsync a batch directory (not yet visible: the snapshot does not list it)."""
        rel = f"{self.shard_rel}/{batch_id}" if self.writer else f"data/{run_dir_name(run)}/{batch_id}"
        bdir = self.root / rel
        bdir.mkdir(parents=True)

        def write(item: tuple[str, pa.Table]) -> None:
            name, table = item
            path = bdir / f"{name}.parquet"
            schema = TABLES[name]
            pq.write_table(
                table if table.schema.equals(schema) else table.cast(schema),
                path,
                row_group_size=ROW_GROUP_SIZE,
                compression="zstd",
                write_statistics=_STATISTICS_COLUMNS[name],
            )
            fsync_path(path)

        # Encoding and fsync release the GIL: the tables of a batch are written side by side.
        with ThreadPoolExecutor(max_workers=min(4, len(tables)), thread_name_prefix="dumpcat-write") as pool:
            list(pool.map(write, tables.items()))
        fsync_path(bdir)
        fsync_path(bdir.parent)  # the batch directory's entry (and a new run directory's)
        fsync_path(bdir.parent.parent)
        return rel

    def compact(self, run: str, *, small_rows: int = 50_000, min_batches: int = 16) -> int:
        """Merge consecutive small batches of a run into one; returns how many were merged.

        A live ingest commits a batch per flush, so a day of watching leaves thousands of tiny
        parquet files that slow every query. Only consecutive small batches of the run are merged
        (their order is kept, so the manifest's latest-entry-wins reading stays right), and the
        swap is one snapshot rename: a reader sees the old batches or the merged one, never both.
        The old directories are retired, and deleted by `purge_retired` once no reader can still
        be using them. Caller holds writer_lock.
        """
        snap = self.snapshot()
        group: list[int] = []
        for i, batch in enumerate(snap["batches"]):
            if batch["run"] != run:
                continue
            if sum(batch["tables"].values()) < small_rows:
                group.append(i)
                if len(group) >= 4 * min_batches:
                    break
            elif len(group) >= min_batches:
                break
            else:
                group = []
        if len(group) < min_batches:
            return 0
        merged: dict[str, list[pa.Table]] = {}
        for i in group:
            batch = snap["batches"][i]
            for table in batch["tables"]:
                path = self.root / batch["path"] / f"{table}.parquet"
                merged.setdefault(table, []).append(pq.read_table(path).cast(TABLES[table]))
        tables = {name: pa.concat_tables(parts) for name, parts in merged.items()}
        entry = self._write_batch(run, tables, suffix="-c")
        old = [snap["batches"][i] for i in group]
        merged_away = set(group[1:])
        batches = [b for j, b in enumerate(snap["batches"]) if j not in merged_away]
        batches[group[0]] = entry
        snap["batches"] = batches
        self._retire(snap, [b["path"] for b in old])
        if "flat" in snap:
            self._retire(
                snap, self._flat_writer().batches_compacted(snap, {b["id"] for b in old}, entry["id"])
            )
        self._commit_snapshot(snap)
        return len(group)

    def purge_retired(self, older_than: float = 60.0) -> int:
        """Delete batch directories retired by compaction more than `older_than` seconds ago
        (readers refresh their views before each query, so none uses them by then)."""
        snap = self.snapshot()
        retired = snap.get("retired", [])
        cutoff = time.time() - older_than
        gone = [r for r in retired if r["at"] < cutoff]
        if not gone:
            return 0
        for r in gone:
            shutil.rmtree(self.root / r["path"], ignore_errors=True)
        snap["retired"] = [r for r in retired if r["at"] >= cutoff]
        write_json_atomic(self.shard_dir / SNAPSHOT, snap)
        return len(gone)


def _read_snapshot(path: Path) -> dict:
    try:
        snap = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"cannot read {path}: {exc}") from exc
    if not isinstance(snap, dict) or not isinstance(snap.get("batches"), list):
        raise CatalogError(f"cannot read {path}: not a dumpcat snapshot (no list of batches)")
    return snap


def _checked_snapshot(snap: dict, rel: str, path: Path) -> dict:
    """`snap`, read from `path`, of the shard at `rel` ("" for the default), if every path it names
    is a relative one inside that shard's directory; else CatalogError (a reader would read, and its
    writer delete, files elsewhere)."""
    prefix = f"{rel}/" if rel else "data/"

    def inside(entry: object) -> bool:
        where = entry.get("path") if isinstance(entry, dict) else None
        return isinstance(where, str) and where.startswith(prefix) and ".." not in Path(where).parts

    flats, retired = snap.get("flat", {}), snap.get("retired", [])
    ok = (
        all(inside(b) and isinstance(b.get("tables"), dict) for b in snap["batches"])
        and isinstance(flats, dict)
        and all(isinstance(v, list) and all(map(inside, v)) for v in flats.values())
        and isinstance(retired, list) and all(map(inside, retired))
    )  # fmt: skip
    if not ok:
        raise CatalogError(f"cannot read {path}: it names a file outside its shard's directory")
    pending = snap.get(PENDING, {})
    if not (
        isinstance(pending, dict)
        and all(isinstance(r, str) and isinstance(t, list) and set(t) <= set(flat.FLAT_SOURCES)
                for r, t in pending.items())
    ):  # fmt: skip
        raise CatalogError(f"cannot read {path}: its {PENDING!r} is not a map of runs to flat tables")
    return snap


def _valid_shard_entry(e: object) -> bool:
    """A shards.json entry naming a shard of this catalog: its path is the one its run and writer give."""
    return (
        isinstance(e, dict) and isinstance(e.get("run"), str) and isinstance(e.get("writer"), str)
        and bool(_WRITER_NAME.fullmatch(e["writer"])) and e.get("path") == shard_path(e["run"], e["writer"])
    )  # fmt: skip


def _stat_token(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, inode) of a file replaced by renames, or None when it is missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror}") from exc
    return (st.st_mtime_ns, st.st_ino)


def _note_holder(fd: int) -> None:
    """Write who holds a writer lock into the lock file (read by a refused writer's message)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)


def _lock_holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    return ""


def _no_phase(name: str) -> None:
    pass


def _pend(snap: dict, entry: dict) -> None:
    """Batch `entry` of a one-shot ingest commits without flat files: mark the flat tables it
    changes pending for its run (all of them when it brings operators, source lines or the run's
    row, which every row of the run resolves against)."""
    tables = entry["tables"]
    if any(t in tables for t in flat.RESOLUTION_INPUTS):
        changed = list(flat.FLAT_SOURCES)
    else:
        changed = [f for f, sources in flat.FLAT_SOURCES.items() if any(t in tables for t in sources)]
    if changed:
        pending = snap.setdefault(PENDING, {})
        pending[entry["run"]] = sorted({*pending.get(entry["run"], []), *changed})


def _has_flat(snap: dict) -> bool:
    """Whether readers of `snap` read flat files (it has them and none is pending)."""
    return "flat" in snap and not snap.get(PENDING)


def empty_flat() -> dict:
    """The "flat" part of a new catalog's snapshot: no flat files yet."""
    return {name: [] for name in flat.FLAT_SOURCES}
