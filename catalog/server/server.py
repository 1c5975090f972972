"""`dumpcat serve`: the catalog over the PostgreSQL wire protocol, read-only and contained.

An asyncio server speaks protocol 3 (`catalog.server.pgwire`) and does nothing else with what clients
send: every statement — rewriting PostgreSQL catalog references, splitting, classifying,
describing, running — happens in a pool of statement worker processes (`catalog.server.worker_pool`,
`catalog.server.statement_worker`) running the contained engine of `catalog.server.sandbox`. So:

- the engine is the wall (no file access, a read-only catalog, locked settings), the statement
  policy of `catalog.guard` a second one;
- every phase (Parse, Describe, Bind/Execute, simple queries) runs under `--query-timeout` and
  can be cancelled; a worker that does not stop in time, or dies, is replaced, and its client
  gets an error while every other session goes on;
- each worker's address space is capped, so `--memory-limit` holds for what DuckDB's own limit
  does not count;
- results stream to the client in chunks (`--max-rows`, `--max-result-bytes` cap them);
- idle sessions are closed after `--idle-timeout`, and when every login slot is taken the
  longest-idle session makes room for a new one.

An optional in-process watcher keeps the catalog current while it serves (`--watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import logging
import math
import os
import secrets
import shutil
import socket
import ssl
import struct
import termios
import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa

from catalog.server import landlock, pg_catalog, pgcodec, pgwire
from catalog.server.memory import (
    BIG_MESSAGE,
    RETURN_AFTER,
    OverBudget,
    ServerMemory,
    return_memory,
    text_bytes,
)
from catalog.server.sandbox import private_folder, views_database
from catalog.server.statement_worker import (
    COPYOUT,
    DATA,
    DONE,
    ERROR,
    LIST,
    NODATA,
    PARSED,
    ROWDESC,
    parse_size,
)
from catalog.server.worker_pool import Job, JobFailed, WorkerPool, error_of
from catalog.views import USER_VIEWS
from ingest.storage.store import CatalogStore

log = logging.getLogger("dumpcat.server")

MAX_MESSAGE = 16 << 20
PUSH_BYTES = 64 << 10  # queued output a session hands to its transport without waiting for a flush
MIN_MEMORY = 128 << 20  # below this a worker cannot even open the catalog's views
MAX_STATEMENTS = 10_000  # prepared statements one session may hold
MAX_SETTINGS = 256  # session settings (custom ones included)
MAX_SETTING_CHARS = 64 << 10  # characters of one setting's value
MAX_SAVEPOINTS = 1000
MAX_CURSORS = 256
MAX_VIEWS = 64  # temporary views of one session
MAX_VIEW_CHARS = 1 << 20  # and their queries' text in all
# When every slot is taken, a login waits this long for one to be freed before it is refused: a
# client that closes and at once reconnects finds its old session still closing.
ROOM_WAIT = 1.0


READS = ("auto", "arrow")  # how workers read the catalog (Server's `reads`, `dumpcat serve --reads`)


@dataclass
class Limits:
    """What one client can take. Defaults are the `dumpcat serve` defaults."""

    query_timeout: float = 30.0  # seconds per statement, each protocol phase included
    max_rows: int = 100_000  # rows per result; more is an error (add LIMIT)
    max_result_bytes: int = 256 << 20  # bytes of DataRows per result; more is an error
    max_concurrent: int = 4  # statement worker processes: statements running at once
    max_connections: int = 128  # logged-in sessions
    memory_limit: str = "1GB"  # per statement: DuckDB's limit and each worker's address-space budget
    idle_timeout: float = 600.0  # seconds a session may wait between messages
    send_timeout: float = 30.0  # seconds a client may take to read what was sent to it
    evict_idle_after: float = 5.0  # when all slots are taken, a session idle this long makes room
    login_timeout: float = 10.0  # seconds to finish startup and authentication
    max_pending: int = 64  # connections not logged in yet; the oldest is closed to make room
    session_memory: int = 16 << 20  # bytes of one session's prepared statements, settings and views
    buffer_memory: int = 512 << 20  # bytes the main process holds for all sessions (catalog.server.memory)
    threads: int | None = None  # DuckDB threads per worker (default: cores / workers, at least 2)

    def validate(self) -> None:
        if parse_size(self.memory_limit) < MIN_MEMORY:
            raise ValueError(f"--memory-limit must be at least {MIN_MEMORY >> 20} MiB")
        if min(self.query_timeout, self.idle_timeout, self.login_timeout, self.send_timeout) <= 0:
            raise ValueError("timeouts must be positive")
        if min(self.max_rows, self.max_result_bytes, self.max_concurrent, self.max_connections,
               self.max_pending, self.session_memory, self.buffer_memory) < 1:  # fmt: skip
            raise ValueError("limits must be at least 1")


class QueryError(Exception):
    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass
class Prepared:
    """A parsed statement: a query (text to run) or a command the server answers."""

    kind: str
    text: str
    args: tuple[str, ...]
    nparams: int
    param_oids: list[int]  # as the client's Parse gave them (0: unspecified)
    param_types: list[int] = field(default_factory=list)  # as the worker inferred them

    def param_oid(self, i: int) -> int:
        """The type of parameter i: the client's, else the inferred one, else text."""
        inferred = self.param_types[i] if i < len(self.param_types) else 0
        given = self.param_oids[i] if i < len(self.param_oids) else 0
        if given in (pgwire.TEXT, pgwire.VARCHAR, 705) and inferred in pgcodec.ELEMENT_OF:
            return inferred  # '{a,b}' sent as text where an array is wanted: cast, as PostgreSQL does
        if given:
            return given
        if i < len(self.param_types) and self.param_types[i]:
            return self.param_types[i]
        return pgwire.TEXT


@dataclass
class Cursor:
    """A DECLAREd cursor: its whole result (capped like a portal's), and where FETCH is."""

    name: str
    table: pa.Table
    binary: bool
    hold: bool
    query: str
    pos: int = 0  # 0: before the first row; n: on row n; rows + 1: after the last

    def fields(self) -> list[tuple[str, int]]:
        return [(f.name, pgcodec.oid_of(f.type)) for f in self.table.schema]


@dataclass
class Portal:
    statement: Prepared
    params: list  # [hex or None, oid, format]
    formats: list[int] = field(default_factory=list)  # result format codes from Bind
    job: Job | None = None  # a query started by Describe, waiting for Execute
    rowdesc: bytes | None = None
    rows: list[bytes] | None = None  # buffered DataRows (Execute with a row limit)
    tag: str = ""
    sent: int = 0
    finished: bool = False


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    """A PostgreSQL-protocol server over one catalog. `start()` runs it on a background thread."""

    def __init__(
        self,
        catalog_path: str | os.PathLike,
        host: str = "127.0.0.1",
        port: int = 5433,
        users: dict[str, str] | None = None,
        tls: tuple[str, str] | None = None,
        watch: str | os.PathLike | None = None,
        *,
        run: str | None = None,
        auth: str = "scram-sha-256",
        limits: Limits | None = None,
        watch_options: dict | None = None,
        reads: str = "auto",
    ) -> None:
        """`watch_options` go to the watcher of `watch` (e.g. follow_symlinks, max_metadata_size).
        `reads`: how the workers' DuckDB reads the catalog (catalog/server/sandbox.py): "auto"
        reads the parquet files itself where the kernel can make each worker unable to write
        (Landlock), else through Arrow datasets; "arrow" always through Arrow datasets."""
        if reads not in READS:
            raise ValueError(f"unknown reads {reads!r}: one of {', '.join(READS)}")
        if not users and not _is_loopback(host):
            raise ValueError("serving beyond loopback needs --user and --password")
        if auth not in ("scram-sha-256", "md5", "password"):
            raise ValueError(f"unknown auth method {auth!r}")
        self.host, self.port = host, port
        self.users = dict(users or {})
        self.auth = auth
        self.limits = limits or Limits()
        self.limits.validate()
        self._verifiers = {u: pgwire.ScramVerifier.from_password(p) for u, p in self.users.items()}
        self.ssl_context: ssl.SSLContext | None = None
        if tls:
            self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ssl_context.load_cert_chain(tls[0], tls[1])
        self.watcher = None
        if watch is not None:  # the watcher creates the catalog on a first run
            from ingest.watch import Watcher

            self.watcher = Watcher(catalog_path, watch, run, **(watch_options or {}))
        self.store = CatalogStore(catalog_path)  # a CatalogError here: not a catalog
        self.catalog_path = self.store.root
        self._folder = private_folder()
        # A catalog from before flat files gets them from its first writer: the watcher, or here.
        flat = watch is not None or self.store.upgrade()
        views_db = views_database(self._folder, flat=flat)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        # At least two, as an in-process DuckDB has on a 2-core machine: with one, the NaN query's
        # latency on a busy machine was twice its CPU time, with two it was its CPU time
        # (docs/server.md, "How a statement travels").
        threads = self.limits.threads or max(2, cores // self.limits.max_concurrent)
        self.worker_config = {
            "catalog": str(self.catalog_path),
            "views_db": str(views_db),
            "memory_limit": self.limits.memory_limit,
            "threads": threads,
            "native": reads == "auto" and landlock.abi_version() >= 1,
        }
        self.pool: WorkerPool | None = None
        self.sessions: dict[int, Session] = {}
        self._pending: dict[asyncio.StreamWriter, bool] = {}  # not logged in yet: started up?
        self._pending_readers: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}
        self._slot_freed = asyncio.Event()  # set whenever a session leaves
        self.memory = ServerMemory(self.limits.buffer_memory)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._pid = 1000

    # -- lifecycle ---------------------------------------------------------------------------

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        self.pool = WorkerPool(self.worker_config, self.limits.max_concurrent)
        try:
            await self.pool.start()
            self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_MESSAGE)
            self.port = self._server.sockets[0].getsockname()[1]
            if self.watcher is not None:
                self.watcher.start()
            self._started.set()
            await self._stopped.wait()
            self._server.close()
            for s in list(self.sessions.values()):
                s.cancel()
                s.writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        finally:
            await self.pool.close()

    def start(self) -> Server:
        def runner() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self._main())
            except BaseException as exc:  # surface bind and worker start-up errors to start()
                self._error = exc
                self._started.set()
            finally:
                self._loop.close()

        self._error: BaseException | None = None
        self._thread = threading.Thread(target=runner, name="dumpcat-server", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._cleanup()
            raise self._error
        return self

    def _cleanup(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed: stopped by request_stop()
                self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(15)
        if self.watcher is not None:
            with contextlib.suppress(Exception):
                self.watcher.stop()
            self.watcher = None
        self._cleanup()

    def serve_forever(self) -> None:
        self.start()
        assert self._thread is not None
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def request_stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopped.set)

    def worker_pids(self) -> list[int]:
        """Process ids of the statement workers (for monitoring and tests)."""
        return self.pool.pids() if self.pool is not None else []

    def worker_reads(self) -> set[str]:
        """How the statement workers read the catalog: {"duckdb"}, {"arrow"}, or both."""
        return self.pool.reads() if self.pool is not None else set()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections -------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = None
        self._admit_pending(reader, writer)
        try:
            try:
                params = await asyncio.wait_for(self._startup(reader, writer), self.limits.login_timeout)
                if params is None:
                    return
                if not await self._room(self._has_room):  # refused before any work when no slot can be made
                    writer.write(pgwire.error_response("53300", "sorry, too many clients already", "FATAL"))
                    await asyncio.wait_for(writer.drain(), self.limits.login_timeout)
                    return
                self._pid += 1
                session = Session(self, self._pid, secrets.randbits(31), reader, writer, params)
                if not await asyncio.wait_for(session.authenticate(), self.limits.login_timeout):
                    return
                # Logged in: only now does the connection take a slot.
                if not await self._room(self._make_room):
                    await session.fatal("53300", "sorry, too many clients already")
                    return
                self.sessions[session.pid] = session
                await session.welcome()
            finally:
                self._forget_pending(writer)
            await session.run()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except (ValueError, IndexError, struct.error) as exc:  # a malformed protocol message
            with contextlib.suppress(Exception):
                if session is not None:
                    session.push()  # what it answered before, in order
                writer.write(pgwire.error_response("08P01", f"invalid protocol message: {exc}", "FATAL"))
                await asyncio.wait_for(writer.drain(), 1.0)
        except Exception:  # one bad client never takes the server down
            log.exception("connection failed")
        finally:
            self._forget_pending(writer)
            if session is not None:
                self.sessions.pop(session.pid, None)
                self._slot_freed.set()
                session.close()
            _hang_up(writer, drop=session is not None and session.stalled)

    def _admit_pending(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Connections that have not logged in yet have their own budget (--max-pending) and never
        take a session's slot; when it is full, the oldest one that is silent (no startup message
        yet, and no bytes waiting to be read) is closed (else the oldest). A real client sends its
        startup message at once: under a flood of new sockets the server may not have read it yet,
        but it waits in the socket, so sockets that stay silent only push each other out."""
        while len(self._pending) >= self.limits.max_pending:
            silent = [
                w for w, started_up in self._pending.items()
                if not started_up and not _input_waiting(self._pending_readers.get(w), w)
            ]  # fmt: skip
            oldest = silent[0] if silent else next(iter(self._pending))
            self._forget_pending(oldest)
            _hang_up(oldest)
        self._pending[writer] = False  # True once its startup message came
        self._pending_readers[writer] = reader

    def _forget_pending(self, writer: asyncio.StreamWriter) -> None:
        self._pending.pop(writer, None)
        self._pending_readers.pop(writer, None)

    async def _room(self, check) -> bool:
        """`check()` (`_has_room` or `_make_room`), and if it fails, again each time a session
        leaves within `ROOM_WAIT` seconds."""
        deadline = time.monotonic() + ROOM_WAIT
        while not check():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._slot_freed.clear()
            try:
                await asyncio.wait_for(self._slot_freed.wait(), left)
            except TimeoutError:
                return False
        return True

    def _has_room(self) -> bool:
        if len(self.sessions) < self.limits.max_connections:
            return True
        now = time.monotonic()
        return any(
            (since := s.waiting_since()) is not None and now - since >= self.limits.evict_idle_after
            for s in self.sessions.values()
        )

    def _make_room(self) -> bool:
        """True if a new session fits: when every slot is taken, the session idle longest (at least
        `evict_idle_after` seconds) is closed to make room."""
        if len(self.sessions) < self.limits.max_connections:
            return True
        now = time.monotonic()
        idle = [(s.waiting_since(), s) for s in self.sessions.values() if s.waiting_since() is not None]
        if not idle:
            return False
        since, victim = min(idle, key=lambda x: x[0])
        if now - since < self.limits.evict_idle_after:
            return False
        victim.evict("terminating connection: it was idle and the server needed its slot")
        self.sessions.pop(victim.pid, None)
        return True

    async def _startup(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> dict | None:
        while True:
            (n,) = struct.unpack("!i", await reader.readexactly(4))
            if n < 8 or n > 10000:
                return None
            code, params = pgwire.parse_startup(await reader.readexactly(n - 4))
            if code == pgwire.SSL_REQUEST:
                if self.ssl_context is None:
                    writer.write(b"N")
                    await writer.drain()
                else:
                    writer.write(b"S")
                    await writer.drain()
                    await writer.start_tls(self.ssl_context)
                continue
            if code == pgwire.GSSENC_REQUEST:
                writer.write(b"N")
                await writer.drain()
                continue
            if code == pgwire.CANCEL_REQUEST:
                pid, secret = params  # type: ignore[misc]
                s = self.sessions.get(pid)
                if s is not None and secrets.compare_digest(str(s.secret), str(secret)):
                    s.cancel()
                return None
            if code != pgwire.PROTOCOL_3:
                writer.write(pgwire.error_response("0A000", f"unsupported protocol {code >> 16}", "FATAL"))
                await writer.drain()
                return None
            if writer in self._pending:
                self._pending[writer] = True
            return params  # type: ignore[return-value]


DEFAULT_SETTINGS = pg_catalog.SERVER_SETTINGS
DEFAULTS = {k.lower(): v for k, v in DEFAULT_SETTINGS.items()}
REPORTED = ["server_version", "server_encoding", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone",
            "integer_datetimes", "standard_conforming_strings", "is_superuser", "application_name",
            "session_authorization", "default_transaction_read_only"]  # fmt: skip


class Session:
    """One client connection: protocol state here, statements in the worker pool."""

    def __init__(self, server: Server, pid: int, secret: int, reader, writer, params: dict) -> None:
        self.server = server
        self.limits = server.limits
        self.pid, self.secret = pid, secret
        self.reader: asyncio.StreamReader = reader
        self.writer: asyncio.StreamWriter = writer
        self.user = params.get("user", "")
        self.settings = {k.lower(): v for k, v in DEFAULT_SETTINGS.items()}
        self.settings["session_authorization"] = self.user
        for k, v in params.items():
            if k not in ("user", "database", "options", "replication"):
                self.settings[k.lower()] = v
        self.tx = "I"
        self.savepoints: list[str] = []
        self.cursors: dict[str, Cursor] = {}
        self.views: dict[str, str] = {}  # this session's temporary views: name -> DuckDB query
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.job: Job | None = None  # the job running for this session, if any
        self.idle_since: float | None = None  # waiting for the client since (monotonic)
        self.blocked_since: float | None = None  # waiting for the client to read since
        self.counted = 0  # bytes this session holds, as last told to the server's budget
        self.stalled = False  # closed because its client stopped reading
        self._closed = False
        self._out: list[bytes] = []  # messages queued for the client (see `send`)
        self._texts: int | None = None  # text_holding() as last counted; None: count again
        self._out_size = 0

    def waiting_since(self) -> float | None:
        """Since when the session has been waiting on its client (to send or to read), if it is."""
        return self.idle_since if self.idle_since is not None else self.blocked_since

    def close(self) -> None:
        self._closed = True
        self.cancel()
        for portal in self.portals.values():
            self._drop(portal)
        held, self.counted = self.counted, 0
        self.server.memory.settle(held, 0)
        self.portals.clear()
        self.cursors.clear()
        self.statements.clear()
        self._texts = None
        if held > RETURN_AFTER:
            return_memory()
        if self.server.pool is not None:
            self.server.pool.forget(self.pid)

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def evict(self, message: str) -> None:
        with contextlib.suppress(Exception):
            self.push()
            self.writer.write(pgwire.error_response("57P01", message, "FATAL"))
        _hang_up(self.writer, drop=self.blocked_since is not None)
        self._closed = True

    # -- I/O ---------------------------------------------------------------------------------

    async def read_message(self) -> tuple[bytes, bytes]:
        head = await self.reader.readexactly(5)
        tag, n = head[:1], struct.unpack("!i", head[1:])[0]
        if n < 4 or n > MAX_MESSAGE:
            raise ConnectionError("bad message length")
        if n <= BIG_MESSAGE:
            return tag, await self.reader.readexactly(n - 4)
        try:
            self.server.memory.check(n, "a protocol message")
        except OverBudget as exc:
            exc.tag = tag
            left = n - 4  # read past it without holding it: the session goes on with an error
            while left:
                chunk = await asyncio.wait_for(self.reader.read(min(left, 1 << 16)), self.limits.send_timeout)
                if not chunk:
                    raise ConnectionError("the client closed the connection") from None
                left -= len(chunk)
            raise
        self.server.memory.settle(0, n)  # held while it is read and handled: see `_settle`
        self.counted += n
        return tag, await self.reader.readexactly(n - 4)

    def send(self, data: bytes) -> None:
        """Queue a message for the client. Messages go out together (`push`): at `flush`, or once
        PUSH_BYTES wait; a prepared statement's BindComplete, RowDescription, rows,
        CommandComplete and ReadyForQuery are one write instead of five."""
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= PUSH_BYTES:
            self.push()

    def push(self) -> None:
        """Hand the queued messages to the transport (which sends them at once if it can)."""
        if self._out:
            out, self._out, self._out_size = self._out, [], 0
            self.writer.write(b"".join(out) if len(out) > 1 else out[0])

    def message_ready(self) -> bool:
        """Whether the client's next message is already read whole (pipelined with the last one)."""
        buffered = getattr(self.reader, "_buffer", b"")
        if len(buffered) < 5:
            return False
        (n,) = struct.unpack_from("!i", buffered, 1)
        return n < 4 or len(buffered) >= 1 + n  # a bad length: read_message says so

    async def flush(self, limit: float | None = None) -> None:
        """Send what is queued and wait until the client took it: at most --send-timeout, then the
        session is closed (a client that stopped reading holds nothing for long). While it waits,
        the session can be evicted like an idle one. The kernel taking it all at once is the
        common case: then there is nothing to wait for."""
        self.push()
        transport = self.writer.transport
        if not transport.is_closing() and transport.get_write_buffer_size() == 0:
            return
        self.blocked_since = time.monotonic()
        try:
            async with asyncio.timeout(min(self.limits.send_timeout, limit or math.inf)):
                await self.writer.drain()
        except TimeoutError:
            self._closed = self.stalled = True
            raise ConnectionError("the client stopped reading") from None
        finally:
            self.blocked_since = None

    async def fatal(self, sqlstate: str, message: str) -> bool:
        self.send(pgwire.error_response(sqlstate, message, "FATAL"))
        await self.flush()
        return False

    async def authenticate(self) -> bool:
        srv = self.server
        if srv.users:
            ok = await (self._auth_scram() if srv.auth == "scram-sha-256" else self._auth_password())
            if not ok:
                return await self.fatal("28P01", f'password authentication failed for user "{self.user}"')
        return True

    async def welcome(self) -> None:
        """Logged in and given a slot: AuthenticationOk, the reported settings, ReadyForQuery."""
        self.send(pgwire.auth_ok())
        for k in REPORTED:
            self.send(pgwire.parameter_status(k, self.settings.get(k.lower(), "")))
        self.send(pgwire.backend_key(self.pid, self.secret))
        self.send(pgwire.ready(self.tx))
        await self.flush()

    async def _auth_password(self) -> bool:
        salt = secrets.token_bytes(4)
        md5 = self.server.auth == "md5"
        self.send(pgwire.auth_md5(salt) if md5 else pgwire.auth_cleartext())
        await self.flush()
        tag, body = await self.read_message()
        if tag != b"p":
            return False
        answer = body.rstrip(b"\x00").decode(errors="replace")
        password = self.server.users.get(self.user)
        if password is None:
            return False
        if md5:
            return pgwire.md5_password_ok(self.user, password, salt, answer)
        return secrets.compare_digest(answer.encode(), password.encode())

    async def _auth_scram(self) -> bool:
        verifier = self.server._verifiers.get(self.user) or pgwire.ScramVerifier.from_password(
            secrets.token_hex(16)
        )
        scram = pgwire.ScramServer(verifier)
        self.send(pgwire.auth_sasl([pgwire.ScramServer.MECHANISM]))
        await self.flush()
        try:
            tag, body = await self.read_message()
            mech, first = pgwire.parse_sasl_initial(body)
            if tag != b"p" or mech != pgwire.ScramServer.MECHANISM:
                return False
            self.send(pgwire.auth_sasl_continue(scram.first(first).encode()))
            await self.flush()
            tag, body = await self.read_message()
            if tag != b"p":
                return False
            final = scram.final(body.decode())
        except (pgwire.ScramError, ValueError, UnicodeDecodeError):
            return False
        if self.user not in self.server.users:
            return False
        self.send(pgwire.auth_sasl_final(final.encode()))
        return True

    # -- message loop ------------------------------------------------------------------------

    async def next_message(self) -> tuple[bytes, bytes] | None:
        """The client's next message, or None when it stayed idle past --idle-timeout."""
        if self.message_ready():  # no wait, so no timeout to arm (a task and a timer each)
            return await self.read_message()
        self.idle_since = time.monotonic()
        try:
            async with asyncio.timeout(self.limits.idle_timeout):  # no task of its own, as wait_for's
                return await self.read_message()
        except TimeoutError:
            await self.fatal("57P05", "terminating connection due to idle-session timeout")
            return None
        finally:
            self.idle_since = None

    def holding(self) -> int:
        """Bytes the session holds between messages: texts and buffered rows. The texts are
        counted again only after a message that may change them (Parse, Close, a session
        command): counting ~50 settings after every message was a quarter of the main
        process's time per statement."""
        if self._texts is None:
            self._texts = self.text_holding()
        return self._texts + self._held_bytes()

    def text_holding(self) -> int:
        texts = [st.text for st in self.statements.values()]
        return text_bytes([*texts, *self.settings.values(), *self.views.values()])

    def _settle(self) -> None:
        """Tell the server's budget what the session holds now (after each message)."""
        now = self.holding()
        self.server.memory.settle(self.counted, now)
        self.counted = now

    def _admit_text(self, extra: int, what: str) -> None:
        """A new text (statement, setting, view) fits this session's and the server's budgets."""
        if self.text_holding() + extra > self.limits.session_memory:
            raise QueryError(
                f"this session holds more than --session-memory ({self.limits.session_memory:,} bytes) "
                f"of prepared statements, settings and views: close some ({what})",
                "54000",
            )
        try:
            self.server.memory.check(extra, what)
        except OverBudget as exc:
            raise QueryError(str(exc), exc.sqlstate) from None

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self._settle()
            with contextlib.suppress(Exception):
                self.push()  # answers to messages the client sent before it left (Terminate)

    async def _run(self) -> None:
        skip_to_sync = False
        while not self._closed:
            self._settle()
            try:
                message = await self.next_message()
            except OverBudget as exc:  # a message too big for the server's memory now, skipped
                self.send(pgwire.error_response(exc.sqlstate, str(exc)))
                if exc.tag == b"Q":
                    self.send(pgwire.ready(self.tx))
                else:
                    skip_to_sync = True
                await self.flush()
                continue
            if message is None or self._closed:
                return
            tag, body = message
            if tag == b"X":
                return
            if tag == b"Q":
                try:
                    text = body.rstrip(b"\x00").decode()
                except UnicodeDecodeError:
                    self.send(pgwire.error_response("22021", 'invalid byte sequence for encoding "UTF8"'))
                else:
                    await self.simple_query(text)
                if self.tx == "I":  # out of a transaction, no portal survives (as at Sync)
                    await self._drop_started()
                    self.portals.clear()
                self.send(pgwire.ready(self.tx))
                await self.flush()
                continue
            if tag == b"S":
                skip_to_sync = False
                await self._drop_started()
                if self.tx == "I":
                    self.portals.clear()
                self.send(pgwire.ready(self.tx))
                await self.flush()
                continue
            if tag == b"H":
                await self.flush()
                continue
            if skip_to_sync:
                continue
            try:
                await self.extended(tag, body)
            except QueryError as exc:
                self.send(pgwire.error_response(exc.sqlstate, str(exc)))
                if self.tx == "T":
                    self.tx = "E"
                skip_to_sync = True
            if not self.message_ready():  # pipelined messages (Bind, Execute, Sync) answer together
                await self.flush()

    # -- talking to the workers --------------------------------------------------------------

    async def start_job(self, request: dict) -> Job:
        pool = self.server.pool
        assert pool is not None
        try:
            job = await pool.job({**request, "sid": self.pid, "views": self.views}, self.limits.query_timeout)
        except JobFailed as exc:
            raise QueryError(str(exc), exc.sqlstate) from exc
        self.job = job
        return job

    async def frame(self, job: Job) -> tuple[bytes, bytes]:
        """The job's next frame; an ERROR frame or a lost worker becomes a QueryError."""
        try:
            kind, payload = await job.frame()
        except JobFailed as exc:
            raise QueryError(str(exc), exc.sqlstate) from exc
        finally:
            if job.done and self.job is job:
                self.job = None
        if kind == ERROR:
            raise QueryError(*reversed(error_of(payload)))
        return kind, payload

    async def request(self, request: dict) -> tuple[bytes, bytes]:
        """A request answered by one terminal frame (parse, a simple query's split)."""
        job = await self.start_job(request)
        return await self.frame(job)

    async def drain(self, job: Job) -> None:
        """Wait until the client took what was sent, within the statement's deadline. Rows under
        PUSH_BYTES stay queued, to go out with the statement's CommandComplete and ReadyForQuery
        (a small result is one write to the client); the transport holding what the kernel
        would not take yet is what is waited for."""
        transport = self.writer.transport
        if not transport.is_closing() and transport.get_write_buffer_size() == 0:
            return
        try:
            await self.flush(job.remaining())
        except ConnectionError:
            job.fail()  # the worker is blocked writing to us; it is replaced
            raise

    async def stream(self, job: Job, *, rowdesc: bool, first: tuple[bytes, bytes] | None = None) -> str:
        """Forward a running query's frames to the client until it finishes; returns its tag."""
        while True:
            kind, payload = first if first is not None else await self.frame(job)
            first = None
            if kind == ROWDESC:
                if rowdesc:
                    self.send(payload)
            elif kind == COPYOUT:
                self.send(payload)
            elif kind == DATA:
                self.send(payload)
                await self.drain(job)
            elif kind in (DONE, NODATA):
                return json.loads(payload).get("tag", "") if kind == DONE else ""
            else:
                raise QueryError(f"unexpected reply {kind!r} from a statement worker", "XX000")

    def _limits(self) -> dict:
        return {"max_rows": self.limits.max_rows, "max_bytes": self.limits.max_result_bytes}

    # -- simple query ------------------------------------------------------------------------

    async def simple_query(self, text: str) -> None:
        if not text.strip().strip(";").strip():
            self.send(pgwire.EMPTY_QUERY)
            return
        try:
            job = await self.start_job(
                {"op": "simple", "text": text, "aborted": self.tx == "E", **self._limits()}
            )
            kind, payload = await self.frame(job)
            if kind != LIST:
                self._check_aborted("query")
                tag = await self.stream(job, rowdesc=True, first=(kind, payload))
                self.send(pgwire.command_complete(tag))
                return
            parts = json.loads(payload)
            if not parts:
                self.send(pgwire.EMPTY_QUERY)
            for part in parts:
                st = _prepared(part)
                self._check_aborted(st.kind)
                await self.run_statement(st, [], None, simple=True)
                await self.flush()
        except QueryError as exc:
            self.send(pgwire.error_response(exc.sqlstate, str(exc)))
            if self.tx == "T":
                self.tx = "E"

    def _check_aborted(self, kind: str) -> None:
        if self.tx == "E" and kind not in ("commit", "rollback", "rollback_to"):
            raise QueryError(
                "current transaction is aborted, commands ignored until end of transaction block", "25P02"
            )

    async def run_statement(
        self, st: Prepared, params: list, formats: list[int] | None, *, simple: bool
    ) -> None:
        """Run a statement and send its answer: with a RowDescription first for a simple query
        (the extended protocol sent it at Describe), then rows and CommandComplete."""
        if st.kind == "query":
            job = await self.start_job({"op": "run", "text": st.text, "params": params,
                                        "formats": formats or [], **self._limits()})  # fmt: skip
            tag = await self.stream(job, rowdesc=simple)
            self.send(pgwire.command_complete(tag))
        elif st.kind == "copy":
            await self._copy(st, params)
        elif st.kind == "declare":
            await self._declare(st, params)
        elif st.kind in ("fetch", "move"):
            self._fetch(st, formats, rowdesc=simple)
        else:
            fields, rows, tag = self._session(st)
            if fields is not None and simple:
                self.send(pgwire.row_description(fields))
            self.send(b"".join(rows))
            self.send(pgwire.command_complete(tag))

    def _session(self, st: Prepared) -> tuple[list | None, list[bytes], str]:
        """(fields, DataRows, tag) of a PostgreSQL session command, answered without DuckDB."""
        self._texts = None  # settings, views or statements may change
        k = st.kind
        if k in ("set", "reset") and not settable(st.args[0]):
            if st.args[0].lower() in DEFAULTS:
                raise QueryError(f'parameter "{st.args[0]}" cannot be changed', "55P02")
            raise QueryError(
                f'parameter "{st.args[0]}" cannot be changed: only PostgreSQL session settings are '
                "accepted; the engine's configuration is fixed by the server",
                "42501",
            )
        if k in ("set", "set_config"):
            self._set(st.args[0], st.args[1])
            if k == "set_config":
                return [("set_config", pgwire.TEXT)], pgwire.encode_rows_text([[st.args[1]]]), "SELECT 1"
            return None, [], "SET"
        if k in ("set_noop", "noop"):
            return None, [], st.args[0] if k == "noop" and st.args else "SET"
        if k == "reset":
            name = st.args[0].lower()
            if name == "all":  # as PostgreSQL: custom placeholders stay, their values go
                self.settings.update({key: "" for key in self.settings if "." in key})
                self.settings.update(DEFAULTS)
            else:
                self._set(name, DEFAULTS.get(name, ""))
            return None, [], "RESET"
        if k == "show":
            name = st.args[0].lower()
            if name == "all":
                rows = [[key, value, ""] for key, value in sorted(self.settings.items())]
                return show_fields(name), pgwire.encode_rows_text(rows), "SHOW"
            if name not in self.settings:
                raise QueryError(f'unrecognized configuration parameter "{name}"', "42704")
            return show_fields(name), pgwire.encode_rows_text([[self.settings[name]]]), "SHOW"
        if k == "begin":
            if self.tx == "I":
                self.tx = "T"
            return None, [], "BEGIN"
        if k in ("commit", "rollback"):
            tag = "ROLLBACK" if k == "rollback" or self.tx == "E" else "COMMIT"
            self.tx = "I"
            self.savepoints.clear()
            self.cursors = {n: c for n, c in self.cursors.items() if c.hold and tag == "COMMIT"}
            return None, [], tag
        if k in ("savepoint", "release", "rollback_to"):
            return None, [], self._savepoint(k, st.args[0])
        if k == "discard":
            if st.args[0] in ("all", "temp", "temporary"):
                self.views.clear()
            if st.args[0] == "all":
                self.statements.clear()
                self.cursors.clear()
                self.settings.update(DEFAULTS)
            return None, [], f"DISCARD {st.args[0].upper()}"
        if k == "deallocate":
            if st.args[0].upper() == "ALL":
                self.statements.clear()
            elif self.statements.pop(st.args[0], None) is None:
                raise QueryError(f'prepared statement "{st.args[0]}" does not exist', "26000")
            return None, [], "DEALLOCATE ALL" if st.args[0].upper() == "ALL" else "DEALLOCATE"
        if k == "create_view":
            return None, [], self._create_view(*st.args)
        if k == "drop_view":
            return None, [], self._drop_views(st.args[0] == "1", st.args[1:])
        if k == "close":
            if st.args[0] == "ALL":
                self.cursors.clear()
            elif self.cursors.pop(st.args[0], None) is None:
                raise QueryError(f'cursor "{st.args[0]}" does not exist', "34000")
            return None, [], "CLOSE CURSOR ALL" if st.args[0] == "ALL" else "CLOSE CURSOR"
        raise QueryError(f"{k} is not supported here", "0A000")

    def _create_view(self, name: str, query: str, replace: str, _columns: str) -> str:
        """A temporary view of this session (ibis learns a query's columns through one)."""
        if name in USER_VIEWS or name.startswith("raw_"):
            raise QueryError(
                f'"{name}" is a view of the catalog: give the temporary view another name', "42P07"
            )
        if name in self.views and replace != "1":
            raise QueryError(f'relation "{name}" already exists', "42P07")
        if name not in self.views and len(self.views) >= MAX_VIEWS:
            raise QueryError(f"too many temporary views in this session (at most {MAX_VIEWS})", "54000")
        if sum(map(len, self.views.values())) + len(query) > MAX_VIEW_CHARS:
            raise QueryError(
                f"the session's temporary views hold more than {MAX_VIEW_CHARS:,} characters", "54000"
            )
        self._admit_text(text_bytes([query]), "a temporary view")
        self.views[name] = query
        return "CREATE VIEW"

    def _drop_views(self, if_exists: bool, names: tuple[str, ...]) -> str:
        for name in names:
            if name not in self.views and not if_exists:
                raise QueryError(
                    "DROP statements are not allowed: the catalog is read-only (only this session's "
                    "temporary views can be dropped)",
                    "42501",
                )
        for name in names:
            self.views.pop(name, None)
        return "DROP VIEW"

    def _set(self, name: str, value: str) -> None:
        name = name.lower()
        if len(value) > MAX_SETTING_CHARS:
            limit = f"at most {MAX_SETTING_CHARS:,} characters"
            raise QueryError(f'value for parameter "{name}" is too long ({limit})', "22023")
        if name not in self.settings and len(self.settings) >= MAX_SETTINGS:
            raise QueryError(f"too many custom settings in this session (at most {MAX_SETTINGS})", "54000")
        self._admit_text(text_bytes([value]), f'a value for "{name}"')
        if value.upper() == "DEFAULT":
            value = DEFAULTS.get(name, "")
        self.settings[name] = value
        for rep in REPORTED:
            if rep.lower() == name:
                self.send(pgwire.parameter_status(rep, value))

    def _savepoint(self, kind: str, name: str) -> str:
        if self.tx == "I":
            word = {
                "savepoint": "SAVEPOINT",
                "release": "RELEASE SAVEPOINT",
                "rollback_to": "ROLLBACK TO SAVEPOINT",
            }
            raise QueryError(f"{word[kind]} can only be used in transaction blocks", "25P01")
        if kind == "savepoint":
            if len(self.savepoints) >= MAX_SAVEPOINTS:
                raise QueryError(f"too many savepoints (at most {MAX_SAVEPOINTS})", "54000")
            self.savepoints.append(name)
            return "SAVEPOINT"
        if name not in self.savepoints:
            raise QueryError(f'savepoint "{name}" does not exist', "3B001")
        at = len(self.savepoints) - 1 - self.savepoints[::-1].index(name)
        if kind == "release":
            del self.savepoints[at:]
            return "RELEASE"
        del self.savepoints[at + 1 :]
        self.tx = "T"  # rolling back to a savepoint ends the aborted state
        return "ROLLBACK"

    # -- COPY and cursors ----------------------------------------------------------------------

    async def _copy(self, st: Prepared, params: list) -> None:
        options = json.loads(st.args[1])
        job = await self.start_job({"op": "copy", "text": st.args[0], "params": params, "options": options,
                                    **self._limits()})  # fmt: skip
        tag = await self.stream(job, rowdesc=True)
        self.send(pgwire.command_complete(tag))

    async def _declare(self, st: Prepared, params: list) -> None:
        name, binary, hold, query = st.args
        if self.tx == "I" and hold != "1":
            raise QueryError("DECLARE CURSOR can only be used in transaction blocks", "25P01")
        if name in self.cursors:
            raise QueryError(f'cursor "{name}" already exists', "42P03")
        if len(self.cursors) >= MAX_CURSORS:
            raise QueryError(f"too many open cursors in this session (at most {MAX_CURSORS})", "54000")
        job = await self.start_job({"op": "arrow", "text": query, "params": params, **self._limits()})
        schema: pa.Schema | None = None
        batches: list[pa.RecordBatch] = []
        budget = self.limits.max_result_bytes - self._held_bytes()
        size = 0
        while True:
            kind, payload = await self.frame(job)
            if kind == ROWDESC:
                schema = pa.ipc.open_stream(payload).schema
            elif kind == DATA:
                size += len(payload)
                await self._check_rows(job, size)
                if size > budget:
                    await job.abort()
                    raise QueryError(
                        f"this session's cursors and portals hold more than {self.limits.max_result_bytes:,} "
                        "bytes of rows: close some, or fetch less at once",
                        "54000",
                    )
                batches.extend(pa.ipc.open_stream(payload))
            elif kind in (DONE, NODATA):
                break
        if schema is None:
            raise QueryError("DECLARE CURSOR needs a query that returns rows", "42P11")
        table = pa.Table.from_batches(batches, schema=schema)
        self.cursors[name] = Cursor(name, table, binary == "1", hold == "1", query)
        self.send(pgwire.command_complete("DECLARE CURSOR"))

    async def _check_rows(self, job: Job, size: int) -> None:
        """Rows being buffered fit the server's budget, or the query stops (53200)."""
        try:
            self.server.memory.check(size, "buffering rows for a portal or cursor")
        except OverBudget as exc:
            await job.abort()
            raise QueryError(str(exc), exc.sqlstate) from None

    def _held_bytes(self) -> int:
        held = sum(c.table.nbytes for c in self.cursors.values())
        return held + sum(sum(map(len, p.rows)) for p in self.portals.values() if p.rows)

    def _cursor(self, name: str) -> Cursor:
        cursor = self.cursors.get(name)
        if cursor is None:
            raise QueryError(f'cursor "{name}" does not exist', "34000")
        return cursor

    def _fetch(self, st: Prepared, formats: list[int] | None, *, rowdesc: bool) -> None:
        """FETCH / MOVE on a cursor: its position moves as PostgreSQL's does (0 before the first
        row, n after the last); FETCH sends the rows in the formats asked for."""
        name, direction, count = st.args
        cursor = self._cursor(name)
        total = cursor.table.num_rows
        step = total + 1 if count == "all" else int(count)
        start, pos = cursor.pos, cursor.pos
        if direction == "forward":
            end = min(total + 1, pos + step) if step >= 0 else max(0, pos + step)
            taken = range(pos + 1, min(end, total) + 1) if step >= 0 else range(pos - 1, end - 1, -1)
        elif direction == "backward":
            end = max(0, pos - step)
            taken = range(pos - 1, end - 1, -1) if step > 0 else range(0)
        elif direction in ("absolute", "relative", "first", "last"):
            target = {"first": 1, "last": total, "absolute": step if step >= 0 else total + 1 + step,
                      "relative": pos + step}[direction]  # fmt: skip
            end = max(0, min(total + 1, target))
            taken = range(end, end + 1) if 1 <= end <= total else range(0)
        else:
            raise QueryError(f"FETCH {direction} is not supported", "0A000")
        cursor.pos = end
        if st.kind == "move":
            moved = (
                len(range(min(start, end), max(start, end))) if direction in ("forward", "backward") else 1
            )
            self.send(pgwire.command_complete(f"MOVE {min(moved, total) if end else 0}"))
            return
        rows = [i - 1 for i in taken if 1 <= i <= total]
        codes = result_formats(formats, cursor.table.num_columns, binary=cursor.binary)
        if rowdesc:
            self.send(pgwire.row_description(cursor.fields(), codes))
        if rows:
            part = cursor.table.take(pa.array(rows, type=pa.int64()))
            for batch in part.to_batches():
                self.send(pgcodec.encode_datarows(batch, codes))
        self.send(pgwire.command_complete(f"FETCH {len(rows)}"))

    # -- extended query ----------------------------------------------------------------------

    async def extended(self, tag: bytes, body: bytes) -> None:
        if tag == b"P":
            p = pgwire.parse_parse(body)
            count = len(self.statements) - (p.name in self.statements)
            if count >= MAX_STATEMENTS and p.name:
                raise QueryError(
                    f"too many prepared statements in this session (at most {MAX_STATEMENTS:,}): close some",
                    "54000",
                )
            self._admit_text(2 * text_bytes([p.query]), "a prepared statement")  # its text, translated
            kind, payload = await self.request({"op": "parse", "text": p.query})
            if kind != PARSED:
                raise QueryError(f"unexpected reply {kind!r} from a statement worker", "XX000")
            st = _prepared(json.loads(payload))
            st.param_oids = list(p.param_oids)
            self.statements[p.name] = st
            self._texts = None
            self.send(pgwire.PARSE_COMPLETE)
        elif tag == b"B":
            b = pgwire.parse_bind(body)
            st = self._statement(b.statement)
            if any(f not in (0, 1) for f in b.result_formats):
                raise QueryError("unsupported format code in Bind", "08P01")
            fmts = pgwire.param_formats(b)
            if len(fmts) != len(b.params):
                raise QueryError(
                    f"bind message has {len(fmts)} parameter formats but {len(b.params)} parameters", "08P01"
                )
            if len(b.params) != st.nparams:
                raise QueryError(
                    f"bind message supplies {len(b.params)} parameters, but prepared statement "
                    f'"{b.statement}" requires {st.nparams}',
                    "08P01",
                )
            params = [
                [None if raw is None else bytes(raw).hex(), st.param_oid(i), fmts[i]]
                for i, raw in enumerate(b.params)
            ]
            if b.portal in self.portals:
                self._drop(self.portals.pop(b.portal))
            self.portals[b.portal] = Portal(st, params, formats=list(b.result_formats))
            self.send(pgwire.BIND_COMPLETE)
        elif tag == b"D":
            kind, name = body[:1], body[1:].rstrip(b"\x00").decode()
            if kind == b"S":
                await self._describe_statement(self._statement(name))
            elif name not in self.portals and name in self.cursors:  # a DECLAREd cursor is a portal too
                cursor = self.cursors[name]
                codes = result_formats(None, len(cursor.fields()), binary=cursor.binary)
                self.send(pgwire.row_description(cursor.fields(), codes))
            else:
                await self._describe_portal(self._portal(name))
        elif tag == b"E":
            r = pgwire.Reader(body)
            name, limit = r.cstr(), r.int32()  # the name's length in bytes, not characters
            await self._execute(self._portal(name), limit)
        elif tag == b"C":
            kind, name = body[:1], body[1:].rstrip(b"\x00").decode()
            if kind == b"S":
                self.statements.pop(name, None)
                self._texts = None
            elif name in self.portals:
                self._drop(self.portals.pop(name))
            else:
                self.cursors.pop(name, None)
            self.send(pgwire.CLOSE_COMPLETE)
        else:
            raise QueryError(f"unsupported message {tag!r}", "08P01")

    def _statement(self, name: str) -> Prepared:
        if name not in self.statements:
            raise QueryError(f'prepared statement "{name}" does not exist', "26000")
        return self.statements[name]

    def _portal(self, name: str) -> Portal:
        if name not in self.portals:
            raise QueryError(f'portal "{name}" does not exist', "34000")
        return self.portals[name]

    def _describe_command(self, st: Prepared, formats: list[int] | None) -> bool:
        """Describe a statement the server answers itself; False for a query (the worker's job)."""
        if st.kind == "query":
            return False
        if st.kind == "show":
            self.send(pgwire.row_description(show_fields(st.args[0])))
        elif st.kind == "set_config":
            self.send(pgwire.row_description([("set_config", pgwire.TEXT)]))
        elif st.kind == "fetch" and st.args[0] in self.cursors:
            cursor = self.cursors[st.args[0]]
            codes = result_formats(formats, cursor.table.num_columns, binary=cursor.binary)
            self.send(pgwire.row_description(cursor.fields(), codes))
        else:
            self.send(pgwire.NO_DATA)
        return True

    async def _describe_statement(self, st: Prepared) -> None:
        self.send(pgwire.parameter_description([st.param_oid(i) for i in range(st.nparams)]))
        if self._describe_command(st, None):
            return
        job = await self.start_job({"op": "describe", "text": st.text, "nparams": st.nparams})
        kind, payload = await self.frame(job)
        if kind == ROWDESC:
            self.send(payload)
            await self.frame(job)  # DONE
        else:
            self.send(pgwire.NO_DATA)

    async def _describe_portal(self, portal: Portal) -> None:
        st = portal.statement
        if self._describe_command(st, portal.formats):
            return
        if portal.rowdesc is None and not portal.finished:
            self._check_aborted("query")
            job = await self._run_portal(portal)
            kind, payload = await self.frame(job)
            if kind == ROWDESC:
                portal.rowdesc, portal.job = payload, job
            else:  # a statement without rows finished at once
                portal.finished, portal.tag, portal.rows = True, json.loads(payload).get("tag", ""), []
        self.send(portal.rowdesc if portal.rowdesc is not None else pgwire.NO_DATA)

    async def _run_portal(self, portal: Portal) -> Job:
        return await self.start_job({"op": "run", "text": portal.statement.text, "params": portal.params,
                                     "formats": portal.formats, **self._limits()})  # fmt: skip

    async def _execute(self, portal: Portal, limit: int) -> None:
        st = portal.statement
        if st.kind == "empty":
            self.send(pgwire.EMPTY_QUERY)
            return
        if st.kind != "query":
            self._check_aborted(st.kind)
            if portal.finished:
                self.send(pgwire.command_complete(portal.tag))
                return
            await self.run_statement(st, portal.params, portal.formats, simple=False)
            return
        if portal.rows is None and limit <= 0:  # the common case: stream everything
            if portal.job is None and not portal.finished:
                self._check_aborted("query")
                portal.job = await self._run_portal(portal)
            if portal.job is not None:
                job, portal.job = portal.job, None
                portal.tag = await self.stream(job, rowdesc=False)
                portal.finished = True
            self.send(pgwire.command_complete(portal.tag))
            return
        if portal.rows is None:  # a row limit: take the whole (capped) result, hand it out in parts
            portal.rows = await self._collect(portal)
        rows = portal.rows[portal.sent :] if limit <= 0 else portal.rows[portal.sent : portal.sent + limit]
        portal.sent += len(rows)
        self.send(b"".join(rows))
        if limit > 0 and portal.sent < len(portal.rows):
            self.send(pgwire.PORTAL_SUSPENDED)
        else:
            self.send(pgwire.command_complete(portal.tag))

    async def _collect(self, portal: Portal) -> list[bytes]:
        """All DataRows of a portal's query (at most --max-result-bytes, enforced by the worker)."""
        if portal.finished:
            return []
        if portal.job is None:
            self._check_aborted("query")
            portal.job = await self._run_portal(portal)
        job, portal.job = portal.job, None
        rows: list[bytes] = []
        # Buffered rows of all this session's portals and cursors share one --max-result-bytes.
        budget = self.limits.max_result_bytes - self._held_bytes()
        size = 0
        while True:
            kind, payload = await self.frame(job)
            if kind == DATA:
                size += len(payload)
                await self._check_rows(job, size)
                if size > budget:
                    await job.abort()
                    raise QueryError(
                        f"this session's open portals hold more than {self.limits.max_result_bytes:,} "
                        "bytes of rows: close some or fetch without a row limit",
                        "54000",
                    )
                rows += split_rows(payload)
            elif kind in (DONE, NODATA):
                portal.tag = json.loads(payload).get("tag", "") if kind == DONE else ""
                portal.finished = True
                return rows

    def _drop(self, portal: Portal) -> None:
        """A portal goes away: a query it started is stopped in the background."""
        if portal.job is not None and not portal.job.done:
            job, portal.job = portal.job, None
            try:
                task = asyncio.get_running_loop().create_task(job.abort())
            except RuntimeError:  # the server is shutting down: its workers go with it
                return
            task.add_done_callback(lambda t: t.exception())

    async def _drop_started(self) -> None:
        """At Sync: queries started by Describe but never executed are stopped."""
        for portal in self.portals.values():
            if portal.job is not None and not portal.job.done:
                job, portal.job = portal.job, None
                await job.abort()
                portal.finished, portal.rows = True, []


def _input_waiting(reader: asyncio.StreamReader | None, writer: asyncio.StreamWriter) -> bool:
    """Whether a connection has sent what the server has not handled yet: a whole message in its
    stream's buffer (a part of one only waits for its sender: that is silence), or bytes still in
    the kernel's buffer."""
    buffered = bytes(getattr(reader, "_buffer", b"")[:4]) if reader is not None else b""
    if len(buffered) == 4 and len(reader._buffer) >= struct.unpack("!i", buffered)[0] > 0:  # type: ignore[union-attr]
        return True
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    try:
        waiting = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return False
    return struct.unpack("i", waiting)[0] > 0


def _hang_up(writer: asyncio.StreamWriter, *, drop: bool = False) -> None:
    """Close a connection. A plain close() waits until the client took what is buffered, which a
    client that stopped reading never does: then (or when `drop`: what the kernel still holds for
    it would wait too) the connection is reset at once."""
    with contextlib.suppress(Exception):
        if drop or writer.transport.get_write_buffer_size() > 0 or _unsent(writer) > UNSENT_LIMIT:
            sock = writer.get_extra_info("socket")
            if sock is not None:  # linger 0: close() sends a reset and drops the queued data
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()


UNSENT_LIMIT = 64 << 10  # more than a last error message: a client that has stopped reading


def _unsent(writer: asyncio.StreamWriter) -> int:
    """Bytes the kernel still holds for the client, sent or not yet acknowledged (Linux
    SIOCOUTQ). A graceful close of a socket whose client stopped reading leaves them to an
    orphaned socket the client may never hear from again, so such a connection is reset instead
    (a last error message just written is far less: that close stays graceful)."""
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(termios, "TIOCOUTQ"):
        return 0
    try:
        out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
    except OSError:
        return 0
    return struct.unpack("i", out)[0]


def _prepared(info: dict) -> Prepared:
    return Prepared(info["kind"], info["text"], tuple(info["args"]), info.get("nparams", 0), [],
                    list(info.get("param_types") or []))  # fmt: skip


def result_formats(codes: list[int] | None, ncols: int, *, binary: bool = False) -> list[int]:
    """Format code per column from Bind's list (none: the cursor's own, text unless DECLARE BINARY)."""
    if not codes:
        return [1 if binary else 0] * ncols
    if len(codes) == 1:
        return list(codes) * ncols
    if len(codes) != ncols:
        raise QueryError(f"bind message has {len(codes)} result formats but the result has {ncols} columns",
                         "08P01")  # fmt: skip
    return list(codes)


def settable(name: str) -> bool:
    """PostgreSQL session settings a client may change (they change what SHOW, current_setting and
    ParameterStatus answer, never the engine), and custom settings (a dotted name), as in PostgreSQL."""
    return name.lower() in pg_catalog.SESSION_SETTABLE or name.lower() == "all" or "." in name


def show_fields(name: str) -> list[tuple[str, int]]:
    """The columns of `SHOW name` (`SHOW ALL`: name, setting, description, as in PostgreSQL)."""
    if name.lower() == "all":
        return [("name", pgwire.TEXT), ("setting", pgwire.TEXT), ("description", pgwire.TEXT)]
    return [(name.lower(), pgwire.TEXT)]


def split_rows(chunk: bytes) -> list[bytes]:
    """The DataRow messages of a chunk, one bytes object each."""
    rows, pos = [], 0
    while pos < len(chunk):
        (n,) = struct.unpack_from("!i", chunk, pos + 1)
        rows.append(chunk[pos : pos + 1 + n])
        pos += 1 + n
    return rows


def parse_users(user: str | None, password: str | None) -> dict[str, str]:
    if (user is None) != (password is None):
        raise ValueError("--user and --password go together")
    return {user: password} if user is not None and password is not None else {}


def serve(
    catalog_path: str | os.PathLike,
    host: str = "127.0.0.1",
    port: int = 5433,
    users: dict[str, str] | None = None,
    tls: tuple[str, str] | None = None,
    watch: str | os.PathLike | None = None,
    **kwargs,
) -> None:
    """Serve a catalog until SIGINT/SIGTERM (the `dumpcat serve` command)."""
    import signal

    server = Server(catalog_path, host, port, users, tls, watch, **kwargs)
    signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
    signal.signal(signal.SIGINT, lambda *_: server.request_stop())
    server.start()
    how = "reading its files" if server.worker_reads() == {"duckdb"} else "through Arrow datasets"
    log.warning(
        "dumpcat serving %s on %s:%d (%d statement workers, %s)",
        catalog_path, server.host, server.port, len(server.worker_pids()), how,
    )  # fmt: skip
    assert server._thread is not None
    while server._thread.is_alive():
        server._thread.join(0.5)
    server.stop()
