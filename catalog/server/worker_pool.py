"""The server's pool of statement worker processes, seen from its event loop.

Each worker (`catalog.server.statement_worker`) is a separate Python process connected by two socket
pairs: one for requests and replies, one for interrupts. A `Job` is one request on one worker;
it reads reply frames under a hard deadline (the statement timeout plus a grace period). A worker
that does not answer by then, or that died (out of its address space, a crash in the engine), is
killed and replaced; the job ends with an error for its client, and no other session notices.

Requests take the unreserved workers in arrival order, without a time slice. One worker is held
in reserve, and nothing can earn it: while every other worker is busy, it runs *probes*, the waiting
request of the cheapest session first (the one whose dearest recent request cost least, then the
one connected longest). A probe runs for
`PROBE_SECONDS` with its reply held back; if it has not finished by then and another request wants
the reserve, it is interrupted and waits for an unreserved worker to run again from the start (every
request is a read). So a quick statement is answered within a few slices whatever the other
sessions run, and an expensive one costs its session priority, not everyone else their turn.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import math
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from catalog.server.statement_worker import ERROR, HEADER, READY, TERMINAL

log = logging.getLogger("dumpcat.server")

GRACE_SECONDS = 3.0  # after the statement timeout, how long a worker has to stop by itself
PROBE_SECONDS = 0.1  # how long a request runs on the reserved worker before it may have to yield it
PROBE_BYTES = 4 << 20  # reply bytes a probe may hold back; a bigger reply runs unreserved
STOP_SECONDS = 0.3  # how long an interrupted probe has to stop before its worker is replaced
BOUNDED_PARSE_CHARS = 65536  # a Parse of a text this short translates in well under a slice
PROBE_KILL_MEMORY = 10.0  # seconds after a probe was killed that new sessions wait for the spare
KILL_SECONDS = 2.0  # what a killed worker costs the session it ran for (its replacement's start)
COST_HALF_LIFE = 30.0  # seconds: how fast a heavy request stops counting against its session
COST_QUANTUM = 0.25  # sessions whose dearest recent requests cost less than this are equally cheap
START_SECONDS = 120.0
MAX_FRAME = 64 << 20
READ_AHEAD = 1 << 20


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


def frame_buffered(reader: asyncio.StreamReader) -> bool:
    """Whether a whole frame waits in the reader's buffer (reading it will not wait)."""
    buffered = getattr(reader, "_buffer", b"")
    if len(buffered) < HEADER.size:
        return False
    _kind, n = HEADER.unpack_from(buffered)
    return n <= MAX_FRAME and len(buffered) >= HEADER.size + n


class WorkerProcess:
    """One statement worker as the server sees it."""

    def __init__(self, proc: ForkedProcess, reader, writer, control: socket.socket, info: dict) -> None:
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
        if self.proc.pidfd is not None:
            with contextlib.suppress(RuntimeError):  # no loop: nothing watches it
                asyncio.get_running_loop().remove_reader(self.proc.pidfd)
            self.proc.close()
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(OSError):
            self.control.close()

    def ended(self) -> str:
        """How the process ended, for the client's error message."""
        code = self.proc.poll()
        if code is None:
            return "stopped answering"
        if self.proc.lost:
            return "ended after its launcher"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"was ended by {signal.Signals(-code).name}"
        return f"exited with status {code}"


class ForkedProcess:
    """A statement worker forked by the launcher, with the part of `subprocess.Popen` the pool
    uses. Its exit status comes from the launcher (its parent) as a notice; a pidfd tells that it
    ended even when the launcher is gone, and signals it without the risk of a reused pid."""

    def __init__(self, pid: int, launcher: Launcher) -> None:
        self.pid = pid
        self._launcher = launcher
        self.lost = False  # it ended after its launcher, so its exit status is unknown
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfds (not Linux 5.3+), or ended and reaped already
            self.pidfd = None

    def _ended(self) -> bool:
        if self.pidfd is None:
            return not _exists(self.pid)
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def poll(self) -> int | None:
        status = self._launcher.statuses.get(self.pid)
        if status is None and not self._launcher.alive and self._ended():
            self.lost = True
            return -signal.SIGKILL
        return status

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        elif self.poll() is None:  # once reaped, the pid may be another process's
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("statement worker", timeout or 0)
            time.sleep(0.02)
        return code

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Launcher:
    """The server's side of `catalog.server.worker_launcher`: the process that forks workers."""

    def __init__(self, proc: subprocess.Popen, requests: socket.socket) -> None:
        self.proc = proc
        self.requests = requests
        self.statuses: dict[int, int] = {}  # pid -> exit status of each worker that ended
        self._started: dict[int, asyncio.Future] = {}
        self._numbers = itertools.count(1)
        self._reading: asyncio.Task | None = None
        self._notices: asyncio.StreamWriter | None = None
        self.alive = True

    @classmethod
    async def start(cls) -> Launcher:
        requests, requests_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        notices, notices_child = socket.socketpair()
        env = worker_environment()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "catalog.server.worker_launcher",
                 str(requests_child.fileno()), str(notices_child.fileno())],
                pass_fds=(requests_child.fileno(), notices_child.fileno()),
                stdin=subprocess.DEVNULL,
                env=env,
            )  # fmt: skip
        except OSError as exc:
            requests.close()
            notices.close()
            raise WorkerStartError(f"the statement workers' launcher did not start: {exc}") from exc
        finally:
            requests_child.close()
            notices_child.close()
        launcher = cls(proc, requests)
        reader, launcher._notices = await asyncio.open_connection(sock=notices)  # kept: its end closes
        launcher._reading = asyncio.get_running_loop().create_task(launcher._read(reader))
        return launcher

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                notice = json.loads(line)
                if "exited" in notice:
                    self.statuses[notice["exited"]] = notice["status"]
                elif (started := self._started.pop(notice.get("started"), None)) and not started.done():
                    started.set_result(notice["pid"])
        except (ConnectionError, ValueError) as exc:
            log.warning("the statement workers' launcher sent a bad notice: %r", exc)
        finally:
            self.alive = False
            self.requests.close()
            if self._notices is not None:
                self._notices.close()
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await asyncio.get_running_loop().run_in_executor(None, self.proc.wait)
            for started in self._started.values():
                if not started.done():
                    started.set_exception(WorkerStartError("the statement workers' launcher ended"))
            self._started.clear()

    async def spawn(self, config: dict, data: socket.socket, control: socket.socket) -> ForkedProcess:
        """Fork a worker serving on `data` and `control` (the launcher gets copies of both)."""
        number = next(self._numbers)
        started = asyncio.get_running_loop().create_future()
        self._started[number] = started
        try:
            socket.send_fds(
                self.requests, [json.dumps({"n": number, "config": config}).encode()],
                [data.fileno(), control.fileno()],
            )  # fmt: skip
        except OSError as exc:
            self._started.pop(number, None)
            raise WorkerStartError(f"the statement workers' launcher is gone: {exc}") from exc
        try:
            pid = await asyncio.wait_for(started, START_SECONDS)
        except TimeoutError as exc:
            raise WorkerStartError("the statement workers' launcher did not answer") from exc
        return ForkedProcess(pid, self)

    async def close(self) -> None:
        """End the launcher (the workers it forked were killed by then)."""
        with contextlib.suppress(OSError):
            self.requests.shutdown(socket.SHUT_RDWR)
        if self._reading is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reading), 5)


@dataclass(eq=False)
class _Waiter:
    """A request waiting for a worker: its turn, its place in line and whose it is."""

    turn: asyncio.Future
    seq: int
    sid: int | None
    may_probe: bool
    bounded: bool  # its work is known to be short (the Parse of a short text)


class WorkerPool:
    def __init__(self, config: dict, size: int) -> None:
        self.config = config
        self.size = size
        self._idle: collections.deque[WorkerProcess] = collections.deque()
        self._waiters: list[_Waiter] = []
        self.reserve = 1 if size > 1 else 0
        self.full_busy = 0  # workers running a request without a time slice
        self.probe_busy = 0  # workers running a probe (at most `reserve`)
        self._probes: set[Job] = set()  # the jobs running as probes now
        self._cost: dict[int, tuple[float, float]] = {}  # session -> (seconds, when): see `cost`
        self._respawning = asyncio.Semaphore(1)
        self._all: set[WorkerProcess] = set()
        self.spare: WorkerProcess | None = None  # started, idle, out of service
        self.probe_killed_at = -math.inf  # when a probe last had to be killed
        self._jobs = itertools.count(1)
        self._seq = itertools.count()
        self._tasks: set[asyncio.Task] = set()
        self._launcher: Launcher | None = None
        self._launching = asyncio.Lock()
        self.closed = False

    async def start(self) -> None:
        """Start every worker; if one cannot start, stop the others and say why."""
        count = self.size + (1 if self.reserve else 0)  # a spare beside the pool: see `discard`
        started = await asyncio.gather(*(self._spawn() for _ in range(count)), return_exceptions=True)
        failures = [w for w in started if isinstance(w, BaseException)]
        if failures:
            for w in started:
                if isinstance(w, WorkerProcess):
                    w.kill()
            raise WorkerStartError(str(failures[0]))
        for w in started:
            self._enlist(w)

    def _enlist(self, worker: WorkerProcess) -> None:
        """A started worker goes into service, or waits as the spare when the pool is full."""
        if len(self._all) < self.size:
            self._all.add(worker)
            self._put(worker)
        elif self.spare is None and self.reserve:
            self.spare = worker
        else:
            worker.kill()

    async def _spawn(self) -> WorkerProcess:
        data, data_child = socket.socketpair()
        control, control_child = socket.socketpair()
        try:
            async with self._launching:
                if self._launcher is None or not self._launcher.alive:
                    self._launcher = await Launcher.start()
            proc = await self._launcher.spawn(self.config, data_child, control_child)
        except WorkerStartError:
            data.close()
            control.close()
            raise
        finally:
            data_child.close()
            control_child.close()
        # A small read-ahead: the worker waits while a session's client is slow, instead of the
        # main process buffering its frames (asyncio reads ahead up to twice the limit).
        reader, writer = await asyncio.open_connection(sock=data, limit=READ_AHEAD)
        try:
            kind, payload = await asyncio.wait_for(read_frame(reader), START_SECONDS)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            proc.kill()
            writer.close()
            control.close()
            raise WorkerStartError(f"a statement worker did not start: {exc!r}") from exc
        info = json.loads(payload)
        if kind != READY:
            proc.kill()
            writer.close()
            control.close()
            raise WorkerStartError(info.get("message", "a statement worker did not start"))
        worker = WorkerProcess(proc, reader, writer, control, info)
        if proc.pidfd is not None:
            asyncio.get_running_loop().add_reader(proc.pidfd, self._ended, worker)
        return worker

    def _ended(self, worker: WorkerProcess) -> None:
        """A worker's process ended (its pidfd is readable). An idle one, or the spare, is replaced
        now rather than when a request would find it dead; a busy one's job sees the end itself."""
        asyncio.get_running_loop().remove_reader(worker.proc.pidfd)
        if not worker.alive or self.closed:
            return
        if worker is self.spare:
            self.spare = None
            worker.kill()
            self._replace()
        elif worker in self._idle:
            self._idle.remove(worker)
            self.discard(worker)

    # -- who runs next ---------------------------------------------------------------------------

    def cost(self, sid: int | None) -> float:
        """The worker time of the session's dearest recent request, in seconds, halved every
        `COST_HALF_LIFE`: what the reserve is ordered by (a session of many quick statements stays
        cheap; one heavy statement makes its session dear for a while)."""
        if sid is None or sid not in self._cost:
            return 0.0
        seconds, at = self._cost[sid]
        return seconds * 0.5 ** ((time.monotonic() - at) / COST_HALF_LIFE)

    def charge(self, sid: int | None, seconds: float, *, shows_cheap: bool = True) -> None:
        """Count a request's worker time against its session. Parsing is cheap for everyone, so a
        quick Parse does not make a session known as cheap (see `_may_probe`); a slow one counts."""
        if sid is None or (not shows_cheap and sid not in self._cost and seconds < COST_QUANTUM):
            return
        self._cost[sid] = (max(self.cost(sid), seconds), time.monotonic())

    def probe_order(self, sid: int | None, seq: int, running: float = 0.0) -> tuple:
        """Cheapest sessions first; among equally cheap ones the longest connected (session ids
        grow), so new sessions, however many, queue behind the sessions already known as cheap. A
        running probe counts what it has run so far."""
        return int(max(self.cost(sid), running) / COST_QUANTUM), sid or 0, seq

    def _full_slots(self) -> int:
        # Alive workers: while a killed one restarts, the reserve still stands.
        return len(self._all) - self.reserve

    async def acquire(
        self, sid: int | None, seq: int, may_probe: bool, bounded: bool = False
    ) -> tuple[WorkerProcess, bool]:
        """(worker, probe): the next free worker for this request. Unreserved workers go to waiting
        requests in arrival order; the reserved one runs probes, for the least-used session first.
        A worker found dead is replaced."""
        while True:
            waiter = _Waiter(asyncio.get_running_loop().create_future(), seq, sid, may_probe, bounded)
            self._waiters.append(waiter)
            self._dispatch()
            try:
                worker, probe = await waiter.turn
            except asyncio.CancelledError:  # e.g. the wait timed out
                if waiter.turn.done() and not waiter.turn.cancelled():
                    worker, probe = waiter.turn.result()
                    self.unclaim(probe)
                    self._put(worker)  # handed over just as the wait ended: pass it on
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
            if worker.alive and worker.proc.poll() is None:
                return worker, probe
            self.unclaim(probe)
            self.discard(worker)

    def unclaim(self, probe: bool) -> None:
        if probe:
            self.probe_busy -= 1
        else:
            self.full_busy -= 1

    def _dispatch(self) -> None:
        """Hand free workers to waiting requests, and tell probes whether to yield or go on."""
        self._waiters = [w for w in self._waiters if not w.turn.done()]
        while self._idle and self._waiters:
            if self.full_busy < self._full_slots():
                waiter, probe = min(self._waiters, key=lambda w: w.seq), False
            else:
                eligible = [w for w in self._waiters if self._may_probe(w)]
                if not eligible or self.probe_busy >= self.reserve:
                    break
                waiter, probe = min(eligible, key=lambda w: self.probe_order(w.sid, w.seq)), True
            self._waiters.remove(waiter)
            if probe:
                self.probe_busy += 1
            else:
                self.full_busy += 1
            waiter.turn.set_result((self._idle.pop(), probe))  # the worker freed last: its caches are warm
        if not self._waiters:
            # Room without a taker: a probe runs on without its slice.
            for job in list(self._probes):
                if self.full_busy < self._full_slots():
                    job.promote()
        else:
            for job in list(self._probes):
                job.wake()

    def _may_probe(self, waiter: _Waiter) -> bool:
        """Whether a waiting request may run on the reserve now. A probe that does not stop is
        killed, and its worker's replacement is the spare; without one the reserve is down until a
        worker starts. So while the spare is not ready and a probe was killed lately, only sessions
        known as cheap (and short Parse messages) may have it."""
        if not waiter.may_probe or waiter.turn.done():
            return False
        if self.spare is not None or waiter.bounded:
            return True
        if time.monotonic() - self.probe_killed_at > PROBE_KILL_MEMORY:
            return True  # no probe was killed lately: nothing suggests one will have to be
        return waiter.sid in self._cost and self.cost(waiter.sid) < COST_QUANTUM  # ran a quick statement

    def comes_before(self, order: tuple) -> bool:
        """Whether a waiting request comes before a probe of this order (`probe_order`)."""
        return any(self._may_probe(w) and self.probe_order(w.sid, w.seq) < order for w in self._waiters)

    def _put(self, worker: WorkerProcess) -> None:
        self._idle.append(worker)
        self._dispatch()

    def release(self, worker: WorkerProcess) -> None:
        if worker.alive and not self.closed:
            self._put(worker)

    def discard(self, worker: WorkerProcess) -> None:
        """Kill a worker; the spare takes its place at once, and a new process starts.

        The spare is what keeps the reserve a guarantee: a probe that does not stop when
        interrupted (DuckDB folds constants while planning, and planning cannot be interrupted) is
        killed, and a worker takes a few tenths of a second to start (more under load)."""
        worker.kill()
        self._all.discard(worker)
        if self.closed:
            return
        spare, self.spare = self.spare, None
        if spare is not None and spare.alive and spare.proc.poll() is None:
            self._enlist(spare)
        elif spare is not None:
            spare.kill()

        self._replace()

    def _replace(self) -> None:
        """Start a worker in the background; it goes into service, or becomes the spare."""

        async def replace() -> None:
            while not self.closed:
                try:
                    async with self._respawning:  # one at a time: a burst of starts would starve the rest
                        worker = await self._spawn()
                    if self.closed:
                        worker.kill()
                    else:
                        self._enlist(worker)
                    return
                except Exception:
                    log.exception("could not start a statement worker; retrying")
                    await asyncio.sleep(1.0)

        task = asyncio.get_running_loop().create_task(replace())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, session: int) -> None:
        """A session ended: each worker that holds its cursor closes it with its next request."""
        self._cost.pop(session, None)
        for w in self._all:
            if session in w.sessions:
                w.sessions.discard(session)
                w.forget.append(session)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._all if w.alive]

    def reads(self) -> set[str]:
        """How the live workers read the catalog, as each said when it started ("duckdb" or
        "arrow": a worker the kernel refused to make read-only reads through Arrow)."""
        return {w.info.get("reads", "arrow") for w in self._all if w.alive}

    async def job(self, request: dict, timeout: float) -> Job:
        """Start a request on the next free worker; the returned job yields its reply frames."""
        job = Job(self, request, timeout)
        await job.start()
        return job

    async def close(self) -> None:
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        if self.spare is not None:
            self._all.add(self.spare)
            self.spare = None
        for w in list(self._all):
            w.kill()
        for w in list(self._all):
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(None, w.proc.wait, 5)
        self._all.clear()
        if self._launcher is not None:
            await self._launcher.close()


class Job:
    """One request: its reply frames, read under a hard deadline.

    On an unreserved worker the frames go to the session as they come. On the reserved worker the
    request is a *probe*: its frames are held back while it runs its slice; a probe that finishes
    is answered from them, one still running when its slice is over and another request wants the
    reserve is interrupted and started again on an unreserved worker (every request is a read, so
    running it again changes nothing), and one that finds an unreserved slot free runs on as if it
    had started there."""

    def __init__(self, pool: WorkerPool, request: dict, timeout: float) -> None:
        self.pool, self.request, self.timeout = pool, request, timeout
        self.sid: int | None = request.get("sid")
        self._shows_cheap = request.get("op") != "parse"
        self._bounded = request.get("op") == "parse" and len(request.get("text", "")) <= BOUNDED_PARSE_CHARS
        self.seq = next(pool._seq)  # its place in line, kept when it runs again
        self.started = time.monotonic()
        self.deadline = self.started + timeout + GRACE_SECONDS
        self.finished: float | None = None
        self.worker: WorkerProcess | None = None
        self.id = 0
        self.probe = False
        self.yielded = 0  # how often it gave the reserve back
        self.done = False
        self.cancelled = False
        self._failure: JobFailed | None = None
        self._on_worker_since = 0.0
        self._read: asyncio.Future | None = None  # a frame being read; it survives a wake-up
        self._wakers: list[asyncio.Future] = []  # see `wake`
        self._held: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._held_bytes = 0
        self._probe_task: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    # -- getting a worker ------------------------------------------------------------------------

    async def start(self) -> None:
        """Wait for a worker (the wait counts against the statement's time) and send the request."""
        wait_until = self.started + self.timeout + GRACE_SECONDS  # the wait has its own limit
        limit = wait_until - time.monotonic() if not self.cancelled else self.remaining()
        try:
            if limit <= 0:
                raise TimeoutError
            async with asyncio.timeout(limit):  # (wait_for would wrap the wait in a task of its own)
                worker, probe = await self.pool.acquire(self.sid, self.seq, not self.yielded, self._bounded)
        except TimeoutError as exc:
            self.done = True
            raise JobFailed(
                f"canceling statement due to statement timeout: no statement worker became free within "
                f"{self.timeout + GRACE_SECONDS:g} s (all {self.pool.size} are busy or restarting)",
                "57014",
            ) from exc
        self.worker, self.probe, self._on_worker_since = worker, probe, time.monotonic()
        if not self.cancelled:  # on a worker, the statement has its whole timeout
            self.deadline = self._on_worker_since + self.timeout + GRACE_SECONDS
        if self.cancelled:
            self._free_worker()
            self.done = True
            raise JobFailed("canceling statement due to user request", "57014")
        self.id = next(self.pool._jobs)
        if self.sid is not None:
            worker.sessions.add(self.sid)
        body = {**self.request, "job": self.id, "timeout": self.timeout, "forget": worker.forget}
        worker.forget = []
        try:
            payload = json.dumps(body).encode()
            worker.writer.write(HEADER.pack(b"J", len(payload)) + payload)
            await worker.writer.drain()
        except (ConnectionError, OSError) as exc:
            how = worker.ended()
            self.fail()
            raise JobFailed(f"statement worker {how}", "58030") from exc
        self._arm_timer()
        if probe:
            self.pool._probes.add(self)
            self._probe_task = asyncio.get_running_loop().create_task(self._run_probe())

    def _arm_timer(self) -> None:
        """Nobody may hold a worker past the deadline, read or not (a client that described a
        portal and went silent): the timer replaces the worker."""
        if self._timer is not None:
            self._timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # the server is shutting down: its workers go with it
            return
        self._timer = loop.call_at(loop.time() + self.remaining() + 0.5, self._expire)

    def _expire(self) -> None:
        if self.worker is not None and not self.done:
            with contextlib.suppress(JobFailed):
                self._timeout_failure()

    def _free_worker(self) -> None:
        """The worker finished its request: account for it and hand it on."""
        worker = self._leave_worker(killed=False)
        if worker is not None:
            self.pool.release(worker)

    def _lose_worker(self) -> None:
        """The worker is killed (it did not stop, or died) and replaced."""
        if self._read is not None and self.worker is not None:
            self._read.cancel()
            self._read = None
        worker = self._leave_worker(killed=True)
        if worker is not None:
            self.pool.discard(worker)

    def _leave_worker(self, *, killed: bool) -> WorkerProcess | None:
        """Detach the job from its worker: charge its session (a kill costs the replacement's
        start), give back its slot and stop its deadline timer. Returns the worker, if it had one."""
        worker, self.worker = self.worker, None
        if worker is None:
            return None
        seconds = time.monotonic() - self._on_worker_since
        if killed:
            self.pool.charge(self.sid, seconds + KILL_SECONDS)
            if self.probe:
                self.pool.probe_killed_at = time.monotonic()
        else:
            self.pool.charge(self.sid, seconds, shows_cheap=self._shows_cheap)
        self.pool._probes.discard(self)
        self.pool.unclaim(self.probe)
        self.probe = False
        if self._timer is not None:
            self._timer.cancel()
        return worker

    # -- on the reserve --------------------------------------------------------------------------

    def promote(self) -> None:
        """An unreserved slot is free and nobody waits: the probe runs on without its slice."""
        if self.probe and self.worker is not None:
            self.pool._probes.discard(self)
            self.pool.probe_busy -= 1
            self.pool.full_busy += 1
            self.probe = False
            self.wake()

    def wake(self) -> None:
        """Wake a wait for this job's next frame (a cancel, a promotion, the pool's turn order
        changed), so that it looks at its state again."""
        wakers, self._wakers = self._wakers, []
        for waker in wakers:
            if not waker.done():
                waker.set_result(None)

    def _waker(self) -> asyncio.Future:
        """A future the next `wake()` resolves (a plain future: no task to start and cancel)."""
        waker = asyncio.get_running_loop().create_future()
        self._wakers.append(waker)
        return waker

    def _unwake(self, waker: asyncio.Future) -> None:
        waker.cancel()
        with contextlib.suppress(ValueError):
            self._wakers.remove(waker)

    async def _run_probe(self) -> str:
        """Hold back the reply while on the reserve: 'finished', 'yielded', 'promoted', 'lost' or
        'expired'."""
        slice_end = time.monotonic() + PROBE_SECONDS
        while True:
            if not self.probe:
                return "promoted"
            now = time.monotonic()
            order = self.pool.probe_order(self.sid, self.seq, now - self._on_worker_since)
            over = self._held_bytes > PROBE_BYTES or (now >= slice_end and self.pool.comes_before(order))
            if over and not self.cancelled:
                await self._give_back()
                return "yielded"
            if self._read is None:
                self._read = asyncio.ensure_future(read_frame(self.worker.reader))
            waker = self._waker()
            # Wake at the slice's end, and at each quantum after it: the probe's own order grows.
            step = slice_end - now if now < slice_end else COST_QUANTUM - (now - slice_end) % COST_QUANTUM
            wait = min(self.remaining(), step)
            try:
                await asyncio.wait({self._read, waker}, timeout=wait, return_when="FIRST_COMPLETED")
            finally:
                self._unwake(waker)
            if self._read.done():
                read, self._read = self._read, None
                try:
                    kind, payload = read.result()
                except (asyncio.IncompleteReadError, ConnectionError, OSError):
                    return "lost"
                self._held.append((kind, payload))
                self._held_bytes += len(payload)
                if kind in TERMINAL:
                    self._free_worker()
                    return "finished"
            elif self.remaining() <= 0:
                return "expired"

    async def _give_back(self) -> None:
        """Interrupt the probe and free the reserve; what it held back is dropped."""
        self.pool._probes.discard(self)
        self.worker.interrupt(self.id)
        self._held.clear()
        self._held_bytes = 0
        stop_by = time.monotonic() + STOP_SECONDS
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(read_frame(self.worker.reader))
            done, _ = await asyncio.wait({self._read}, timeout=max(0.0, stop_by - time.monotonic()))
            if not done:
                log.warning(
                    "a probe of session %s did not stop within %g s of its interrupt: its worker "
                    "is replaced (spare %s)", self.sid, STOP_SECONDS,
                    "ready" if self.pool.spare is not None else "not ready",
                )  # fmt: skip
                self._lose_worker()
                break
            read, self._read = self._read, None
            try:
                kind, _payload = read.result()
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                self._lose_worker()
                break
            if kind in TERMINAL:
                self._free_worker()
                break
        self.yielded += 1

    # -- reading ---------------------------------------------------------------------------------

    async def frame(self) -> tuple[bytes, bytes]:
        """The next reply frame; the job is over after a terminal one (the worker is free again).

        The read waits until the deadline, which a cancel request moves closer while it waits."""
        if self._failure is not None:
            raise self._failure
        if self.done:
            raise RuntimeError("job already finished")
        while self._probe_task is not None:
            task = self._probe_task
            await asyncio.wait({task}, timeout=self.remaining())
            if not task.done():
                task.cancel()
                self._timeout_failure()
            self._probe_task = None
            outcome = task.result()
            if outcome == "yielded":
                await self.start()
            elif outcome == "lost":
                await self._lost()
            elif outcome == "expired":
                self._timeout_failure()
        if self._held:
            kind, payload = self._held.popleft()
            if kind in TERMINAL:
                self._end()
            return kind, payload
        if self._read is None and frame_buffered(self.worker.reader):
            # Already read whole (a worker sends a small result's frames in one write): taken
            # without a task, a waker and a timer.
            kind, payload = await read_frame(self.worker.reader)
            if kind in TERMINAL:
                self._free_worker()
                self._end()
            return kind, payload
        while True:
            if self._read is None:
                self._read = asyncio.ensure_future(read_frame(self.worker.reader))
            waker = self._waker()
            try:
                await asyncio.wait(
                    {self._read, waker}, timeout=self.remaining(), return_when="FIRST_COMPLETED"
                )
            finally:
                self._unwake(waker)
            if self._failure is not None:
                raise self._failure
            if self._read.done():
                read, self._read = self._read, None
                break
            if self.remaining() <= 0:
                self._timeout_failure()
        try:
            kind, payload = read.result()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            await self._lost()
        if kind in TERMINAL:
            self._free_worker()
            self._end()
        return kind, payload

    def _end(self) -> None:
        self.done = True
        self.finished = time.monotonic()

    async def _lost(self) -> None:
        await asyncio.sleep(0.05)  # let the process be reaped so its exit status is known
        how = self.worker.ended() if self.worker is not None else "ended"
        self._fail_with(JobFailed(
            f"the statement's worker process {how}: most likely the statement needed more memory "
            f"than the server's limit ({self.pool.config['memory_limit']}); the server goes on",
            "53200",
        ))  # fmt: skip
        raise self._failure

    def _timeout_failure(self) -> None:
        if self.worker is not None:
            log.warning(
                "a statement of session %s did not stop by its deadline: its worker is replaced", self.sid
            )
        if self.cancelled:
            self._fail_with(JobFailed("canceling statement due to user request", "57014"))
        else:
            self._fail_with(JobFailed(
                f"canceling statement due to statement timeout ({self.timeout:g} s; the statement did "
                "not stop, so its worker process was replaced)",
                "57014",
            ))  # fmt: skip
        raise self._failure

    def _fail_with(self, failure: JobFailed) -> None:
        if self._failure is None:
            self._failure = failure
        self.fail()

    def fail(self) -> None:
        if not self.done:
            self.done = True
            task, self._probe_task = self._probe_task, None
            if task is not None and task is not asyncio.current_task():
                task.cancel()
            self._lose_worker()
            if self._failure is None:
                self._failure = JobFailed("the statement was stopped", "57014")

    def cancel(self) -> None:
        """Interrupt the statement (a cancel request): it ends with an error soon, or is killed."""
        if self.done:
            return
        self.cancelled = True
        if self.worker is not None:
            self.worker.interrupt(self.id)
        self.deadline = min(self.deadline, time.monotonic() + GRACE_SECONDS)
        if self.worker is not None:
            self._arm_timer()
        self.wake()

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


def worker_environment() -> dict[str, str]:
    """The environment of the launcher, and so of every worker it forks: two malloc arenas (a
    worker runs one statement at a time), no BLAS thread pool (a forked child keeps only the
    thread that forked it), and this package first on the import path."""
    return {**os.environ, "MALLOC_ARENA_MAX": "2", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": _import_path()}


def _import_path() -> str:
    """PYTHONPATH for workers: this package's folder first, then what the server had."""
    here = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])  # the folder holding catalog/
    rest = os.environ.get("PYTHONPATH", "")
    return here + (os.pathsep + rest if rest else "")


__all__ = ["ERROR", "Job", "JobFailed", "WorkerPool", "error_of"]
