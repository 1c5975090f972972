"""The server's pool of statement worker processes, seen from its event loop.

Each worker (`catalog.statement_worker`) is a separate Python process connected by two socket
pairs: one for requests and replies, one for interrupts. A `Job` is one request on one worker;
it reads reply frames under a hard deadline (the statement timeout plus a grace period). A worker
that does not answer by then, or that died (out of its address space, a crash in the engine), is
killed and replaced; the job ends with an error for its client, and no other session notices.

One worker is held in reserve for *trusted* requests: from a session whose last statement finished
within `FAST_SECONDS`, or whose text finished that fast before on this server. Untrusted requests
(heavy statements, new sessions that have not shown anything yet) may hold every worker but that
one at once, so however many of them run heavy statements, everyone else is still answered; under
load they still get their turn in arrival order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from catalog.statement_worker import ERROR, HEADER, READY, TERMINAL

log = logging.getLogger("dumpcat.server")

GRACE_SECONDS = 3.0  # after the statement timeout, how long a worker has to stop by itself
FAST_SECONDS = 1.0  # a request that finished within this builds trust for its session and its text
START_SECONDS = 120.0
MAX_FRAME = 64 << 20


class WorkerStartError(RuntimeError):
    """The statement workers could not start (the message says why)."""


class JobFailed(Exception):
    """A request that ended without a reply: the worker was killed or died."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    kind, n = HEADER.unpack(await reader.readexactly(HEADER.size))
    if n > MAX_FRAME:
        raise ConnectionError("oversized frame from worker")
    return kind, await reader.readexactly(n)


class WorkerProcess:
    """One statement worker as the server sees it."""

    def __init__(self, proc: subprocess.Popen, reader, writer, control: socket.socket, info: dict) -> None:
        self.proc = proc
        self.reader: asyncio.StreamReader = reader
        self.writer: asyncio.StreamWriter = writer
        self.control = control
        self.info = info
        self.sessions: set[int] = set()  # sessions that have a cursor in this worker
        self.forget: list[int] = []  # ended sessions whose cursor it should close
        self.alive = True

    def interrupt(self, job: int) -> None:
        with contextlib.suppress(OSError):
            self.control.send(struct.pack("!q", job))

    def kill(self) -> None:
        self.alive = False
        with contextlib.suppress(ProcessLookupError, OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(OSError):
            self.control.close()

    def ended(self) -> str:
        """How the process ended, for the client's error message."""
        code = self.proc.poll()
        if code is None:
            return "stopped answering"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"was ended by {signal.Signals(-code).name}"
        return f"exited with status {code}"


class WorkerPool:
    def __init__(self, config: dict, size: int) -> None:
        self.config = config
        self.size = size
        self._idle: collections.deque[WorkerProcess] = collections.deque()
        self._waiters: collections.deque[tuple[asyncio.Future, bool]] = (
            collections.deque()
        )  # (future, trusted)
        self.reserve = 1 if size > 1 else 0
        self.untrusted_busy = 0  # workers running untrusted requests now
        self._respawning = asyncio.Semaphore(1)
        self._all: set[WorkerProcess] = set()
        self._jobs = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self.closed = False

    async def start(self) -> None:
        """Start every worker; if one cannot start, stop the others and say why."""
        started = await asyncio.gather(*(self._spawn() for _ in range(self.size)), return_exceptions=True)
        failures = [w for w in started if isinstance(w, BaseException)]
        if failures:
            for w in started:
                if isinstance(w, WorkerProcess):
                    w.kill()
            raise WorkerStartError(str(failures[0]))
        for w in started:
            self._put(w)

    async def _spawn(self) -> WorkerProcess:
        data, data_child = socket.socketpair()
        control, control_child = socket.socketpair()
        config = {**self.config, "data_fd": data_child.fileno(), "control_fd": control_child.fileno()}
        env = {**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": _import_path()}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "catalog.statement_worker", json.dumps(config)],
                pass_fds=(data_child.fileno(), control_child.fileno()),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            data_child.close()
            control_child.close()
        reader, writer = await asyncio.open_connection(sock=data, limit=MAX_FRAME)
        try:
            kind, payload = await asyncio.wait_for(read_frame(reader), START_SECONDS)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            proc.kill()
            raise WorkerStartError(f"a statement worker did not start: {exc!r}") from exc
        info = json.loads(payload)
        if kind != READY:
            proc.kill()
            raise WorkerStartError(info.get("message", "a statement worker did not start"))
        worker = WorkerProcess(proc, reader, writer, control, info)
        self._all.add(worker)
        return worker

    async def acquire(self, trusted: bool = True) -> WorkerProcess:
        """The next free worker, strictly in arrival order among those that may take one: an
        untrusted request passes its turn while only the reserved worker is free. A worker found
        dead is replaced."""
        while True:
            turn = asyncio.get_running_loop().create_future()
            self._waiters.append((turn, trusted))
            self._dispatch()
            try:
                worker = await turn
            except asyncio.CancelledError:  # e.g. the wait timed out
                if turn.done() and not turn.cancelled():
                    self.untrusted_busy -= not trusted
                    self._put(turn.result())  # handed over just as the wait ended: pass it on
                else:
                    self._waiters = collections.deque(w for w in self._waiters if w[0] is not turn)
                raise
            if worker.alive and worker.proc.poll() is None:
                return worker
            self.untrusted_busy -= not trusted
            self.discard(worker)

    def _may_take(self, trusted: bool) -> bool:
        # Alive workers: while a killed one restarts, the reserve still stands.
        return bool(self._idle) and (trusted or self.untrusted_busy < len(self._all) - self.reserve)

    def _dispatch(self) -> None:
        """Hand free workers to waiting requests in the order they came."""
        for waiter in list(self._waiters):
            if not self._idle:
                return
            turn, trusted = waiter
            if turn.done():  # cancelled meanwhile
                self._waiters.remove(waiter)
            elif self._may_take(trusted):
                self._waiters.remove(waiter)
                self.untrusted_busy += not trusted
                turn.set_result(self._idle.popleft())

    def _put(self, worker: WorkerProcess) -> None:
        self._idle.append(worker)
        self._dispatch()

    def release(self, worker: WorkerProcess) -> None:
        if worker.alive and not self.closed:
            self._put(worker)

    def discard(self, worker: WorkerProcess) -> None:
        """Kill a worker and start its replacement."""
        worker.kill()
        self._all.discard(worker)
        if self.closed:
            return

        async def replace() -> None:
            while not self.closed:
                try:
                    async with self._respawning:  # one at a time: a burst of starts would starve the rest
                        worker = await self._spawn()
                    self._put(worker)
                    return
                except Exception:
                    log.exception("could not start a statement worker; retrying")
                    await asyncio.sleep(1.0)

        task = asyncio.get_running_loop().create_task(replace())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, session: int) -> None:
        """A session ended: each worker that holds its cursor closes it with its next request."""
        for w in self._all:
            if session in w.sessions:
                w.sessions.discard(session)
                w.forget.append(session)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._all if w.alive]

    async def job(self, request: dict, timeout: float, trusted: bool = True) -> Job:
        """Send a request to the next free worker; the returned job yields its reply frames."""
        try:  # waiting for a worker counts against the statement's time too
            worker = await asyncio.wait_for(self.acquire(trusted), timeout + GRACE_SECONDS)
        except TimeoutError as exc:
            raise JobFailed(
                f"canceling statement due to statement timeout: no statement worker became free within "
                f"{timeout + GRACE_SECONDS:g} s (all {self.size} are busy or restarting)",
                "57014",
            ) from exc
        job_id = next(self._jobs)
        sid = request.get("sid")
        if sid is not None:
            worker.sessions.add(sid)
        body = {**request, "job": job_id, "timeout": timeout, "forget": worker.forget}
        worker.forget = []
        job = Job(self, worker, job_id, timeout, trusted)
        try:
            payload = json.dumps(body).encode()
            worker.writer.write(HEADER.pack(b"J", len(payload)) + payload)
            await worker.writer.drain()
        except (ConnectionError, OSError) as exc:
            job.fail()
            raise JobFailed(f"statement worker {worker.ended()}", "58030") from exc
        return job

    async def close(self) -> None:
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        for w in list(self._all):
            w.kill()
        for w in list(self._all):
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(None, w.proc.wait, 5)
        self._all.clear()


class Job:
    """One request on one worker: its reply frames, read under a hard deadline."""

    def __init__(
        self, pool: WorkerPool, worker: WorkerProcess, job_id: int, timeout: float, trusted: bool = True
    ) -> None:
        self.trusted = trusted
        self.pool, self.worker, self.id = pool, worker, job_id
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = self.started + timeout + GRACE_SECONDS
        self.finished: float | None = None
        self.key: bytes | None = None  # what the session learns from (set by the server)
        self.done = False
        self.cancelled = False
        self._read: asyncio.Future | None = None  # a frame being read; it survives a wake-up
        self._wake = asyncio.Event()

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    async def frame(self) -> tuple[bytes, bytes]:
        """The next reply frame; the job is over after a terminal one (the worker is free again).

        The read waits until the deadline, which a cancel request moves closer while it waits."""
        if self.done:
            raise RuntimeError("job already finished")
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(read_frame(self.worker.reader))
            self._wake.clear()
            waker = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait(
                    {self._read, waker}, timeout=self.remaining(), return_when="FIRST_COMPLETED"
                )
            finally:
                waker.cancel()
            if self._read.done():
                read, self._read = self._read, None
                break
            if self.remaining() <= 0:
                self._read.cancel()
                self._read = None
                self.fail()
                if self.cancelled:
                    raise JobFailed("canceling statement due to user request", "57014")
                raise JobFailed(
                    f"canceling statement due to statement timeout ({self.timeout:g} s; the statement did "
                    "not stop, so its worker process was replaced)",
                    "57014",
                )
        try:
            kind, payload = read.result()
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            await asyncio.sleep(0.05)  # let the process be reaped so its exit status is known
            how = self.worker.ended()
            self.fail()
            raise JobFailed(
                f"the statement's worker process {how}: most likely the statement needed more memory "
                f"than the server's limit ({self.pool.config['memory_limit']}); the server goes on",
                "53200",
            ) from exc
        if kind in TERMINAL:
            self.done = True
            self.finished = time.monotonic()
            self.pool.untrusted_busy -= not self.trusted
            self.pool.release(self.worker)
        return kind, payload

    def fail(self) -> None:
        if not self.done:
            self.done = True
            if self._read is not None:
                self._read.cancel()
                self._read = None
            self.pool.untrusted_busy -= not self.trusted
            self.pool.discard(self.worker)

    def cancel(self) -> None:
        """Interrupt the statement (a cancel request): it ends with an error soon, or is killed."""
        if self.done:
            return
        self.cancelled = True
        self.worker.interrupt(self.id)
        self.deadline = min(self.deadline, time.monotonic() + GRACE_SECONDS)
        self._wake.set()

    async def abort(self) -> None:
        """Stop the job and wait until its worker is free (or replaced)."""
        if self.done:
            return
        self.cancel()
        with contextlib.suppress(JobFailed):
            while not self.done:
                await self.frame()


def error_of(payload: bytes) -> tuple[str, str]:
    """(sqlstate, message) of an ERROR frame."""
    info = json.loads(payload)
    return info.get("sqlstate", "XX000"), info.get("message", "error")


def _import_path() -> str:
    """PYTHONPATH for workers: this package's folder first, then what the server had."""
    here = str(Path(__file__).resolve().parents[1])
    rest = os.environ.get("PYTHONPATH", "")
    return here + (os.pathsep + rest if rest else "")


__all__ = ["ERROR", "Job", "JobFailed", "WorkerPool", "error_of"]
