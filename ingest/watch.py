"""Keep a catalog current while training writes the dump: `dumpcat watch`.

A watchdog observer (inotify, or polling for network file systems and when inotify is out of
watches) marks the directories where something changed. Every `interval` seconds the watcher
re-scans those directories with the same ingester as a one-shot ingest, in live mode: a file
that may still be written (an npy shorter than its header promises, a statistic.csv line without
its newline, metadata or graph files that changed less than a second ago) is left pending and
retried, never recorded as an error while it is young. What is complete is committed as one
batch, so a tensor is queryable about one interval after its file is complete.

Events are only hints. A reconciliation scan of the whole tree runs at start and every
`reconcile_every` seconds, so events the kernel dropped (inotify queue overflow) cost latency,
not data. Because every row id is a function of the run and the file's path, and a batch is
committed atomically together with its manifest, a watcher killed at any moment and restarted
ends with exactly the catalog a one-shot ingest gives.

The many small batches a live ingest commits are merged after a commit once enough have piled up
(`compact`), and the files they replace are deleted a minute later, after every reader has moved to
the new snapshot.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

from ingest.formats.limits import MetadataCaps
from ingest.pipeline import DumpRootError, Ingester, default_run_name, detect_dump, resolve_dump_dir
from ingest.storage.flat import writer_memory_limit
from ingest.storage.store import (
    CatalogError,
    CatalogStore,
    check_writer_name,
    run_dir_name,
    write_json_atomic,
)

IGNORED_EVENTS = {"opened", "closed_no_write"}
# A watcher on another host counts as alive while it flushed this recently (it flushes every
# cycle, and a reconciliation scan of a big dump may take minutes).
_REMOTE_ALIVE = 600.0


class _DirtyDirs(FileSystemEventHandler):
    """Collects, from watchdog's thread, the directories whose content changed."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.dirs: dict[str, float] = {}  # directory -> first time it was marked

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED_EVENTS:
            return
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        now = time.monotonic()
        with self.lock:
            for p in paths:
                if not p:
                    continue
                p = os.fsdecode(p)
                target = p if event.is_directory and event.event_type != "deleted" else os.path.dirname(p)
                if target.startswith(self.root):
                    self.dirs.setdefault(target, now)

    def take(self) -> dict[str, float]:
        with self.lock:
            dirs, self.dirs = self.dirs, {}
        return dirs


def status_path(catalog: str | os.PathLike, run: str, writer: str | None = None) -> Path:
    """Where the watcher of `run` (and `writer`, when it writes a named shard) writes its status
    (read by `dumpcat status`)."""
    name = run_dir_name(run).removeprefix("run=")
    return Path(catalog) / "watch" / (f"{name}.json" if writer is None else f"{name}@{writer}.json")


class Watcher:
    """Watch one dump root and keep one run of a catalog current."""

    def __init__(
        self,
        catalog: str | os.PathLike,
        dump_root: str | os.PathLike,
        run: str | None = None,
        *,
        poll: bool = False,
        interval: float = 0.5,
        reconcile_every: float = 30.0,
        grace: float = 10.0,
        compute_stats: bool = True,
        md5: bool = False,
        workers: int | None = None,
        compact_min_batches: int = 16,
        producer: str | None = None,
        writer: str | None = None,
        follow_symlinks: bool = False,
        max_metadata_size: str | int | None = None,
    ) -> None:
        if writer is not None:
            check_writer_name(writer)
        caps = MetadataCaps.parse(max_metadata_size)  # a mistyped cap fails here
        writer_memory_limit()  # a mistyped DUMPCAT_WRITER_MEMORY fails here, not at the first flush
        try:
            detection = detect_dump(dump_root, producer)
            self.root = detection.root
        except DumpRootError:
            # Training may not have written anything yet: watch the root, detect its producer
            # once it has (a forced producer that does not match is an error now).
            if producer is not None and Path(dump_root).is_dir() and any(Path(dump_root).iterdir()):
                raise
            detection, self.root = None, resolve_dump_dir(dump_root)
        self.run = run or default_run_name(self.root)
        self.writer = writer
        self.store = CatalogStore(catalog, create=True).shard(self.run, writer)
        self.interval = interval
        self.reconcile_every = reconcile_every
        self.poll = poll
        self.compact_min_batches = compact_min_batches
        self.ingester = Ingester(
            self.store, self.run, self.root, detection, producer=producer, compute_stats=compute_stats,
            md5=md5, workers=workers, follow_symlinks=follow_symlinks, max_metadata_size=caps,
        )  # fmt: skip
        self.ingester.live = True
        self.ingester.grace = grace
        self.mode = "poll" if poll else "inotify"
        self._dirty = _DirtyDirs(str(self.root))
        self._stop = threading.Event()
        self._wake = threading.Event()  # cuts the loop's sleep short (stop, wait_idle)
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._started = time.time()
        self._last_flush = 0.0
        self._oldest_change: float | None = None
        self._compactions = 0
        self._batches = 0
        self._cycle = 0
        self._cycle_lock = threading.Lock()
        self._reconcile_now = False
        self._counters: dict = {}  # taken on the watch thread after each commit (see status())

    # -- control ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching in a background thread; returns at once."""
        self._thread = threading.Thread(target=self._main, name="dumpcat-watch", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the loop to flush and stop (safe from a signal handler); `stop()` waits for it."""
        self._stop.set()
        self._wake.set()

    def running(self) -> bool:
        """Is the background thread still watching?"""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Flush what is complete and stop."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise self._error

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until every file now in the dump is cataloged (or in error) and none is pending.

        Asks for a reconciliation scan first, so the answer does not depend on events still on
        their way from the kernel.
        """
        deadline = time.monotonic() + timeout
        with self._cycle_lock:
            # _cycle is odd while a cycle runs, even between cycles: wait for the end of the
            # first cycle that starts after this request.
            target = self._cycle + 2 + self._cycle % 2
            self._reconcile_now = True
        self._wake.set()
        while time.monotonic() < deadline:
            if self._error is not None:
                raise self._error
            with self._cycle_lock:
                done = self._cycle >= target and self._idle.is_set()
            if done:
                return True
            time.sleep(0.02)
        return False

    # -- the loop --------------------------------------------------------------------------

    def _observer(self):
        observer = PollingObserver(timeout=max(self.interval, 0.5)) if self.poll else Observer()
        observer.schedule(self._dirty, str(self.root), recursive=True)
        try:
            observer.start()
        except OSError:
            if self.poll:
                raise
            # inotify unavailable, or out of watches (ENOSPC) / instances (EMFILE): poll instead.
            self.mode = "poll (inotify unavailable)"
            observer = PollingObserver(timeout=max(self.interval, 0.5))
            observer.schedule(self._dirty, str(self.root), recursive=True)
            observer.start()
        return observer

    def _main(self) -> None:
        try:
            with self.store.writer_lock(wait=False):
                self.ingester.begin()
                observer = self._observer()
                try:
                    self._loop()
                finally:
                    observer.stop()
                    observer.join(5)
        except BaseException as exc:  # surfaced by stop()/wait_idle() and by the CLI
            self._error = exc
            if self._thread is None:
                raise

    def _loop(self) -> None:
        ing = self.ingester
        next_reconcile = 0.0
        while True:
            started = time.monotonic()
            stopping = self._stop.is_set()  # read once: the last cycle is a full rescan
            with self._cycle_lock:
                self._cycle += 1
                reconcile = self._reconcile_now or started >= next_reconcile or stopping
                self._reconcile_now = False
            dirty = self._dirty.take()
            if dirty:
                first = min(dirty.values())
                self._oldest_change = (
                    first if self._oldest_change is None else min(first, self._oldest_change)
                )
            if reconcile:
                ing.scan_all()
                next_reconcile = started + self.reconcile_every
            else:
                for path in sorted(set(dirty) | set(ing.pending_files.values())):
                    ing.scan_path(path)
            ing.commit()
            self._after_commit()
            with self._cycle_lock:
                self._cycle += 1
            if stopping:
                return
            # Sleep out the interval: events arriving meanwhile are coalesced into the next batch.
            remaining = self.interval - (time.monotonic() - started)
            if remaining > 0:
                self._wake.wait(remaining)
            self._wake.clear()

    def _after_commit(self) -> None:
        ing = self.ingester
        self._batches = ing.summary.batches
        self._last_flush = time.time()
        # The counters first: a caller woken by the idle event reads them at once.
        self._take_counters()
        if not ing.pending_files and not self._dirty.dirs:
            self._oldest_change = None
            self._idle.set()
        else:
            self._idle.clear()
        if self.store.compact(self.run, min_batches=self.compact_min_batches):
            self._compactions += 1
        self.store.purge_retired()
        self._write_status()

    # -- status ----------------------------------------------------------------------------

    def status(self) -> dict:
        """Counters for `dumpcat status` and for tests, as of the last commit. Safe from any thread:
        they are taken on the watch thread, the only one that changes the ingester's state."""
        with self._cycle_lock:
            counters = dict(self._counters)
        lag = 0.0 if self._oldest_change is None else time.monotonic() - self._oldest_change
        return {
            "run": self.run,
            "writer": self.writer,
            "dump_root": str(self.root),
            "producer": self.detected,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "mode": self.mode,
            "started_at": self._started,
            "last_flush": self._last_flush,
            **counters,
            "lag_seconds": round(lag, 3),
            "batches": self._batches,
            "compactions": self._compactions,
        }

    @property
    def detected(self) -> str:
        """What producer detection found (it runs again until a data file has been seen)."""
        reader = self.ingester.reader
        return reader.detection.description if reader is not None else "not detected yet (nothing written)"

    def _take_counters(self) -> None:
        ing = self.ingester
        ok = sum(1 for v in ing.manifest.values() if v[3] == "ok")
        errors = sum(1 for v in ing.manifest.values() if v[3] == "error")
        ingested = len(ing.known_tensors) + ok
        pending = len(ing.pending_files)
        counters = {
            "files_seen": ingested + errors + pending,
            "ingested": ingested,
            "tensors": len(ing.known_tensors),
            "pending": pending,
            "errors": errors,
        }
        with self._cycle_lock:
            self._counters = counters

    def _write_status(self) -> None:
        path = status_path(self.store.root, self.run, self.writer)
        path.parent.mkdir(exist_ok=True)
        write_json_atomic(path, self.status(), durable=False)  # rewritten every cycle


def read_status(catalog: str | os.PathLike) -> dict[str, dict]:
    """Status files of the watchers of a catalog, by run, with `alive` (is the process there?).
    A run watched by several writers (`--writer`, one per host) gets one entry summing theirs:
    `pending` over the live ones, the largest lag, the latest flush, and `watchers` listing each."""
    out: dict[str, dict] = {}
    for st in read_statuses(catalog):
        run = st.get("run", "")
        if run not in out:
            out[run] = {**st, "watchers": [st]}
            continue
        merged = out[run]
        merged["watchers"].append(st)
        live = [w for w in merged["watchers"] if w["alive"]]
        merged["alive"] = bool(live)
        merged["pending"] = sum(w.get("pending", 0) for w in live)
        lags = [w.get("lag_seconds") for w in live if w.get("lag_seconds") is not None]
        merged["lag_seconds"] = max(lags) if lags else None
        merged["last_flush"] = max(w.get("last_flush", 0) for w in merged["watchers"])
    return out


def read_statuses(catalog: str | os.PathLike) -> list[dict]:
    """Every watcher's status file (one per run and writer), with `alive`."""
    out: list[dict] = []
    folder = Path(catalog) / "watch"
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("*.json")):
        try:
            st = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if st.get("host", socket.gethostname()) != socket.gethostname():
            # another host's watcher (a shared catalog): its pid means nothing here, its flushes do
            st["alive"] = time.time() - float(st.get("last_flush") or 0) < _REMOTE_ALIVE
        else:
            try:
                os.kill(int(st.get("pid", -1)), 0)
                st["alive"] = True
            except (OSError, ValueError):
                st["alive"] = False
        st.setdefault("run", f.stem)
        out.append(st)
    return out


__all__ = ["CatalogError", "DumpRootError", "Watcher", "read_status", "read_statuses", "status_path"]
