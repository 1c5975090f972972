"""Helper processes that run ingest work on the other cores: an ordered map of batches.

Ingest has two CPU-bound loops over many files: computing statistics from tensor data
(`tensor_stats`) and reading names and npy headers (`leaf_scan`). Both hand batches to
`run_ordered`, which computes them in this process and in helper processes and yields each
batch's result in input order.

Why not multiprocessing / ProcessPoolExecutor: with spawn or forkserver every worker re-imports the
caller's __main__, so a script without an `if __name__ == "__main__"` guard that calls ingest runs
again in each worker (seen here: an unguarded debug script re-ran its whole ingest per worker), and
fork is unsafe in a process that runs other threads (watchers, DuckDB). A helper here is a fresh
interpreter that imports only this module (and, on demand, the module of each task) and talks
length-prefixed pickle frames over its stdin/stdout. The caller never blocks on a write
(non-blocking pipes, selectors), so there is no pipe deadlock, and it computes batches itself while
helpers start (~80-250 ms: Python plus the task's imports) or are busy. Idle helpers are kept for
the next call (ingest calls once per flush) and exit by themselves after _HELPER_IDLE_S seconds
without work, when this process exits, or when a one-shot ingest has walked its dump
(`stop_idle_helpers`: its last merge is its memory peak).

A task is named ``"ingest.module:function"``; helpers run only functions of `ingest` modules.
The function takes ``(batch, *args)`` and returns that batch's result (any picklable object).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import queue
import select
import selectors
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "default_workers",
    "resolve_task",
    "resolve_workers",
    "run_ordered",
    "start_helpers",
    "stop_idle_helpers",
]

_FRAME = 8  # bytes of little-endian length before each pickle
_HELPER_SLOTS = 2  # batches per helper: one running, the next one ready (more lengthens the tail)
_HELPER_IDLE_S = 30.0
_CALLER_COMPUTES = True  # the calling process takes batches too (tests turn it off to test helpers)
_PACKAGE = __name__.split(".")[0]
# Default process count: the cores this process may use, at most this many. Beyond it the ingesting
# process is the bottleneck, and each helper costs ~40 MB; `--workers` goes higher.
_MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """Processes an ingest uses by default: one per usable core (affinity, cgroup-restricted
    containers included), at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, _MAX_DEFAULT_WORKERS))


def resolve_workers(workers: int | None) -> int:
    """``workers`` as given (at least 1), or the default."""
    return max(1, workers) if workers is not None else default_workers()


def resolve_task(task: str) -> Callable[..., Any]:
    """The function a task name refers to; only functions of this package are allowed."""
    module, _, func = task.partition(":")
    if not module.startswith(_PACKAGE + ".") or not func:
        raise ValueError(f"not a task of the {_PACKAGE} package: {task!r}")
    return getattr(importlib.import_module(module), func)


def _serve(idle_s: float = _HELPER_IDLE_S, preload: Sequence[str] = ()) -> None:
    """Helper-process main loop: ``(index, task, batch, args)`` frames in, ``(index, result)`` out."""
    # Ctrl-C in the terminal is the caller's to handle (a watcher flushes on it, with its helpers);
    # a helper ends when the caller closes its stdin or dies.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to stderr, never into the result stream

    def read_exact(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(0, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    # Results are written by a thread: while the caller is busy and the pipe is full, the next
    # batch is already being computed instead of waiting for the write.
    outbox: queue.Queue[bytes | None] = queue.Queue()

    def writer() -> None:
        try:
            while (data := outbox.get()) is not None:
                out.write(len(data).to_bytes(_FRAME, "little"))
                out.write(data)
                out.flush()
        except (BrokenPipeError, OSError):
            os._exit(0)  # the caller is gone

    threading.Thread(target=writer, daemon=True).start()

    def send(obj: object) -> None:
        outbox.put(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    try:
        for module in preload:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        send((-1, None))  # ready
        while True:
            if not select.select([0], [], [], idle_s)[0]:
                return  # idle too long
            head = read_exact(_FRAME)
            body = head and read_exact(int.from_bytes(head, "little"))
            if not body:
                return  # the caller closed our stdin: done
            index, task, batch, args = pickle.loads(body)
            send((index, resolve_task(task)(batch, *args)))
    except (KeyboardInterrupt, BrokenPipeError):
        return
    finally:
        outbox.put(None)


def _task_module(task: str | None) -> tuple[str, ...]:
    """The module a helper imports before it reports ready, so that its first batch of `task` does
    not wait for it. Only that module: a helper that scans file names for a metadata ingest does not
    import numpy (`ingest.readers.leaf_scan`), and one that also imported the statistics module took ~15
    MiB more; it imports another task's module when it first gets one of its batches."""
    return (task.partition(":")[0],) if task else ()


def _helper_argv(preload: tuple[str, ...] = ()) -> list[str]:
    """Command line of a helper: this interpreter, importing this module from where it was loaded."""
    root = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from {__name__} import _serve; "
        f"_serve({_HELPER_IDLE_S!r}, {preload!r})"
    )
    return [sys.executable, "-c", code]


class _Helper:
    """One helper process and the batches it holds."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        self.owner = os.getpid()
        # One compute thread per helper: tensor_stats sizes its BLAS calls never to need more, and
        # idle BLAS thread pools in every helper would only compete for the cores.
        # Their allocators give freed memory back as the ingesting process's do (ingest/storage/memory.py).
        from ingest.storage.memory import helper_environment

        threads = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env = {**helper_environment(), **threads}
        self.proc = subprocess.Popen(
            _helper_argv(preload), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        os.set_blocking(self.wfd, False)
        os.set_blocking(self.rfd, False)
        self.wbuf = bytearray()
        self.rbuf = bytearray()
        self.ready = False
        self.alive = True
        self.held: dict[int, Any] = {}  # batch index -> batch, until its result arrives

    def send(self, index: int, task: str, batch: Any, args: tuple) -> None:
        data = pickle.dumps((index, task, batch, args), protocol=pickle.HIGHEST_PROTOCOL)
        self.wbuf += len(data).to_bytes(_FRAME, "little")
        self.wbuf += data
        self.held[index] = batch
        self.flush()

    def flush(self) -> None:
        while self.wbuf and self.alive:
            try:
                n = os.write(self.wfd, self.wbuf)
            except BlockingIOError:
                return
            except OSError:  # broken pipe: the helper is gone
                self.alive = False
                return
            del self.wbuf[:n]

    def receive(self) -> list[tuple[int, Any]]:
        """Complete frames read so far, as ``(index, result)``; marks the helper dead at EOF."""
        while True:
            try:
                chunk = os.read(self.rfd, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.alive = False
                break
            self.rbuf += chunk
        frames = []
        while len(self.rbuf) >= _FRAME:
            n = int.from_bytes(self.rbuf[:_FRAME], "little")
            if len(self.rbuf) < _FRAME + n:
                break
            index, result = pickle.loads(self.rbuf[_FRAME : _FRAME + n])
            del self.rbuf[: _FRAME + n]
            if index == -1:
                self.ready = True
            else:
                self.held.pop(index, None)
                frames.append((index, result))
        return frames

    def reusable(self) -> bool:
        return (
            self.alive
            and not self.held
            and not self.wbuf
            and not self.rbuf
            and self.owner == os.getpid()
            and self.proc.poll() is None
        )

    def close(self) -> None:
        """Stop the helper now: its results, if any, are no longer wanted."""
        self.alive = False
        if self.owner != os.getpid():
            return  # a forked child's copy: the process belongs to the parent
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


_idle_helpers: list[_Helper] = []
_idle_lock = threading.Lock()


def _checkout_helpers(n: int, task: str | None = None) -> list[_Helper]:
    """``n`` helpers: idle ones from an earlier call first, then new ones (none if that fails),
    which import the module of `task` as they start."""
    helpers: list[_Helper] = []
    with _idle_lock:
        while _idle_helpers and len(helpers) < n:
            h = _idle_helpers.pop()
            if h.reusable():
                helpers.append(h)
            else:
                h.close()
    try:
        while len(helpers) < n:
            helpers.append(_Helper(_task_module(task)))
    except Exception:  # cannot start processes here: the caller does the work
        pass
    return helpers


def _checkin_helpers(helpers: list[_Helper]) -> None:
    """Keep clean helpers for the next call; stop the others (busy with abandoned work, or dead)."""
    for h in helpers:
        with _idle_lock:
            if h.reusable() and len(_idle_helpers) < max(default_workers(), len(helpers)):
                _idle_helpers.append(h)
                continue
        h.close()


def start_helpers(
    workers: int | None = None, *, caller_computes: bool = True, task: str | None = None
) -> None:
    """Start the helpers for ``workers`` computing processes now, without waiting: ``workers - 1``
    when the caller computes too, else ``workers`` (none for a single worker); they import the
    module of ``task``, the one they will first run.

    A helper takes ~80-250 ms to start, during which the caller computes alone. Ingest calls this
    before walking a dump so that the helpers are ready when work is due. Idle helpers exit by
    themselves after 30 s.
    """
    n = resolve_workers(workers)
    _checkin_helpers(_checkout_helpers(n - 1 if caller_computes or n == 1 else n, task))


def _shutdown_helpers() -> None:
    """Stop the idle helpers (at exit; tests and benchmarks call it for a cold start)."""
    with _idle_lock:
        helpers = _idle_helpers[:]
        _idle_helpers.clear()
    for h in helpers:
        h.close()


atexit.register(_shutdown_helpers)


def stop_idle_helpers() -> None:
    """Stop the idle helpers now, rather than when they time out: an ingest that has no more
    work for them (a one-shot ingest's last merge) gives their memory back."""
    _shutdown_helpers()


def run_ordered(
    task: str,
    batches: Iterator[Any],
    n_helpers: int,
    *args: Any,
    caller_helps: bool = True,
    slots: int = _HELPER_SLOTS,
) -> Iterator[Any]:
    """``task(batch, *args)`` for every batch, here and in ``n_helpers`` helper processes; results
    are yielded in batch order. A helper that dies has its batches recomputed here.

    With ``caller_helps=False`` this process computes batches only until a helper is ready, for a
    caller that has its own work to do with each result. ``slots`` batches are queued per helper
    (more keeps helpers busy while the caller works; fewer shortens the tail of big batches)."""
    fn = resolve_task(task)
    helpers = _checkout_helpers(n_helpers, task)
    sel = selectors.DefaultSelector()
    done: dict[int, Any] = {}  # batch index -> result, waiting for its turn
    next_in = next_out = 0
    exhausted = False
    # Bound on batches taken but not yet yielded, so a stalled helper cannot make memory grow.
    limit = 2 + slots * max(1, len(helpers))

    def collect(timeout: float | None) -> None:
        """Move helpers' finished results into ``done``; recompute a dead helper's batches here."""
        live = [h for h in helpers if h.alive]
        if timeout != 0 and live:
            for h in live:
                sel.register(h.rfd, selectors.EVENT_READ)
                if h.wbuf:
                    sel.register(h.wfd, selectors.EVENT_WRITE)
            try:
                sel.select(timeout)
            finally:
                for key in list(sel.get_map().values()):
                    sel.unregister(key.fileobj)
        for h in live:
            h.flush()
            for index, result in h.receive():
                done[index] = result
        # Every dead helper's batches, whenever it died (also on a failed send, outside this
        # function): otherwise their turn never comes and the caller would spin forever.
        for h in helpers:
            if not h.alive and h.held:
                for index, batch in h.held.items():
                    done[index] = fn(batch, *args)
                h.held.clear()

    try:
        while True:
            collect(0)
            for h in helpers:  # keep every started helper busy
                while h.alive and h.ready and len(h.held) < slots and not exhausted:
                    if next_in - next_out >= limit:
                        break
                    batch = next(batches, None)
                    if batch is None:
                        exhausted = True
                        break
                    h.send(next_in, task, batch, args)
                    next_in += 1
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
            if exhausted and next_out == next_in:
                return
            can_take = not exhausted and next_in - next_out < limit
            if caller_helps:
                compute_here = _CALLER_COMPUTES or not any(h.alive for h in helpers)
            else:  # only while no helper is ready yet (or none is left)
                compute_here = not any(h.alive and h.ready for h in helpers)
            if can_take and compute_here:
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                else:  # this process computes too
                    done[next_in] = fn(batch, *args)
                    next_in += 1
            elif next_out not in done:
                collect(None)  # nothing to do here but wait for a helper
    finally:
        sel.close()
        _checkin_helpers(helpers)
