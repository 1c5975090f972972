"""`dumpcat serve`: the catalog over the PostgreSQL wire protocol, read-only.

An asyncio server speaks protocol 3 (`catalog.pgwire`); every query runs on its own DuckDB cursor of
one shared `Catalog` in a bounded thread pool, after `catalog.guard` allowed it and
`catalog.pg_catalog` rewrote catalog lookups. Per-query timeout and cancel requests interrupt the
cursor; results above a row cap are refused; DuckDB runs with external access disabled except for
the catalog directory, a memory limit and a locked configuration. An optional in-process watcher
keeps the catalog current while it serves (`--watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import secrets
import ssl
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from pyarrow import ArrowException

from catalog import guard, pg_catalog, pgwire
from catalog.api import Catalog
from ingest.store import CatalogError

log = logging.getLogger("dumpcat.server")

MAX_MESSAGE = 16 << 20


@dataclass
class Limits:
    query_timeout: float = 30.0  # seconds per statement
    max_rows: int = 100_000  # rows per result; more is refused (add LIMIT)
    max_concurrent: int = 8  # statements running at once; the others wait their turn
    max_connections: int = 128
    memory_limit: str = "2GB"


_LOGIN_SECONDS = 60.0


class QueryError(Exception):
    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


_ERROR_CODES = [
    (duckdb.InterruptException, "57014"),
    (duckdb.PermissionException, "42501"),
    (duckdb.ParserException, "42601"),
    (duckdb.CatalogException, "42P01"),
    (duckdb.BinderException, "42703"),
    (duckdb.ConversionException, "22P02"),
    (duckdb.OutOfRangeException, "22003"),
    (duckdb.InvalidInputException, "22023"),
    (duckdb.OutOfMemoryException, "53200"),
    (duckdb.NotImplementedException, "0A000"),
]


def sqlstate_of(exc: BaseException) -> str:
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return "XX000"


@dataclass
class Result:
    fields: list[tuple[str, int]] | None  # None: no rows (SET, BEGIN...)
    rows: list[bytes] = field(default_factory=list)  # DataRow messages
    tag: str = "SELECT 0"
    sent: int = 0


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
    ) -> None:
        if not users and not _is_loopback(host):
            raise ValueError("serving beyond loopback needs --user and --password")
        if auth not in ("scram-sha-256", "md5", "password"):
            raise ValueError(f"unknown auth method {auth!r}")
        self.host, self.port = host, port
        self.users = dict(users or {})
        self.auth = auth
        self.limits = limits or Limits()
        self._verifiers = {u: pgwire.ScramVerifier.from_password(p) for u, p in self.users.items()}
        self.ssl_context: ssl.SSLContext | None = None
        if tls:
            self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ssl_context.load_cert_chain(tls[0], tls[1])
        self.catalog_path = Path(catalog_path)
        self.watcher = None
        if watch is not None:
            from ingest.watch import Watcher

            self.watcher = Watcher(catalog_path, watch, run)
        self.catalog = Catalog.open(catalog_path)
        self._lock_down()
        self.pool = ThreadPoolExecutor(self.limits.max_concurrent, thread_name_prefix="dumpcat-q")
        self.sessions: dict[int, Session] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._pid = 1000

    def _lock_down(self) -> None:
        cur = self.catalog.cursor()
        try:
            pg_catalog.install(cur)
            root = str(self.catalog.path).replace("'", "''")
            cur.execute(f"SET allowed_directories = ['{root}/']")
            cur.execute("SET enable_external_access = false")
            cur.execute(f"SET memory_limit = '{self.limits.memory_limit}'")
            cur.execute("SET lock_configuration = true")
        finally:
            cur.close()

    # -- lifecycle ---------------------------------------------------------------------------

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
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

    def start(self) -> Server:
        def runner() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self._main())
            except BaseException as exc:  # surface bind errors to start()
                self._error = exc
                self._started.set()
            finally:
                self._loop.close()

        self._error: BaseException | None = None
        self._thread = threading.Thread(target=runner, name="dumpcat-server", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed: stopped by request_stop()
                self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)
        if self.watcher is not None:
            with contextlib.suppress(Exception):
                self.watcher.stop()
            self.watcher = None
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.catalog.close()

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

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections -------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = None
        try:
            # A client that never finishes logging in holds a socket: give it a minute.
            params = await asyncio.wait_for(self._startup(reader, writer), _LOGIN_SECONDS)
            if params is None:
                return
            if len(self.sessions) >= self.limits.max_connections:
                writer.write(pgwire.error_response("53300", "sorry, too many clients already", "FATAL"))
                await writer.drain()
                return
            self._pid += 1
            session = Session(self, self._pid, secrets.randbits(31), reader, writer, params)
            if not await asyncio.wait_for(session.authenticate(), _LOGIN_SECONDS):
                return
            self.sessions[session.pid] = session
            await session.run()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except (ValueError, IndexError, struct.error) as exc:  # a malformed protocol message
            with contextlib.suppress(Exception):
                writer.write(pgwire.error_response("08P01", f"invalid protocol message: {exc}", "FATAL"))
                await writer.drain()
        except Exception:  # one bad client never takes the server down
            log.exception("connection failed")
        finally:
            if session is not None:
                self.sessions.pop(session.pid, None)
                session.close()
            with contextlib.suppress(Exception):
                writer.close()

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
                if s is not None and s.secret == secret:
                    s.cancel()
                return None
            if code != pgwire.PROTOCOL_3:
                writer.write(pgwire.error_response("0A000", f"unsupported protocol {code >> 16}", "FATAL"))
                await writer.drain()
                return None
            return params  # type: ignore[return-value]


DEFAULT_SETTINGS = pg_catalog.SERVER_SETTINGS
REPORTED = ["server_version", "server_encoding", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone",
            "integer_datetimes", "standard_conforming_strings", "is_superuser", "application_name",
            "session_authorization", "default_transaction_read_only"]  # fmt: skip


class Session:
    """One client connection."""

    def __init__(self, server: Server, pid: int, secret: int, reader, writer, params: dict) -> None:
        self.server = server
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
        self.statements: dict[str, tuple[str, list[int]]] = {}
        self.portals: dict[str, tuple[str, list, Result | None]] = {}
        self._cur: duckdb.DuckDBPyConnection | None = None
        self._cur_lock = threading.Lock()
        self._cancelled = False

    def close(self) -> None:
        self.cancel()

    def cancel(self) -> None:
        with self._cur_lock:
            self._cancelled = True
            if self._cur is not None:
                with contextlib.suppress(Exception):
                    self._cur.interrupt()

    # -- I/O ---------------------------------------------------------------------------------

    async def read_message(self) -> tuple[bytes, bytes]:
        head = await self.reader.readexactly(5)
        tag, n = head[:1], struct.unpack("!i", head[1:])[0]
        if n < 4 or n > MAX_MESSAGE:
            raise ConnectionError("bad message length")
        return tag, await self.reader.readexactly(n - 4)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def fatal(self, sqlstate: str, message: str) -> bool:
        self.send(pgwire.error_response(sqlstate, message, "FATAL"))
        await self.writer.drain()
        return False

    async def authenticate(self) -> bool:
        srv = self.server
        if srv.users:
            ok = await (self._auth_scram() if srv.auth == "scram-sha-256" else self._auth_password())
            if not ok:
                return await self.fatal("28P01", f'password authentication failed for user "{self.user}"')
        self.send(pgwire.auth_ok())
        for k in REPORTED:
            self.send(pgwire.parameter_status(k, self.settings.get(k.lower(), "")))
        self.send(pgwire.backend_key(self.pid, self.secret))
        self.send(pgwire.ready(self.tx))
        await self.writer.drain()
        return True

    async def _auth_password(self) -> bool:
        salt = secrets.token_bytes(4)
        md5 = self.server.auth == "md5"
        self.send(pgwire.auth_md5(salt) if md5 else pgwire.auth_cleartext())
        await self.writer.drain()
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
        await self.writer.drain()
        try:
            tag, body = await self.read_message()
            mech, first = pgwire.parse_sasl_initial(body)
            if tag != b"p" or mech != pgwire.ScramServer.MECHANISM:
                return False
            self.send(pgwire.auth_sasl_continue(scram.first(first).encode()))
            await self.writer.drain()
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

    async def run(self) -> None:
        skip_to_sync = False
        while True:
            tag, body = await self.read_message()
            if tag == b"X":
                return
            if tag == b"Q":
                try:
                    text = body.rstrip(b"\x00").decode()
                except UnicodeDecodeError:
                    self.send(pgwire.error_response("22021", 'invalid byte sequence for encoding "UTF8"'))
                else:
                    await self.simple_query(text)
                self.send(pgwire.ready(self.tx))
                await self.writer.drain()
                continue
            if tag == b"S":
                skip_to_sync = False
                if self.tx == "I":
                    self.portals.clear()
                self.send(pgwire.ready(self.tx))
                await self.writer.drain()
                continue
            if tag == b"H":
                await self.writer.drain()
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
            await self.writer.drain()

    async def extended(self, tag: bytes, body: bytes) -> None:
        if tag == b"P":
            p = pgwire.parse_parse(body)
            self.statements[p.name] = (pg_catalog.rewrite(p.query), p.param_oids)
            self.send(pgwire.PARSE_COMPLETE)
        elif tag == b"B":
            b = pgwire.parse_bind(body)
            if b.statement not in self.statements:
                raise QueryError(f'prepared statement "{b.statement}" does not exist', "26000")
            query, oids = self.statements[b.statement]
            fmts = pgwire.param_formats(b)
            if any(f != 0 for f in b.result_formats):
                raise QueryError("binary result format is not supported", "0A000")
            try:
                values = [
                    pgwire.decode_param(raw, oids[i] if i < len(oids) else 0, fmts[i])
                    for i, raw in enumerate(b.params)
                ]
            except (ValueError, UnicodeDecodeError, struct.error) as exc:
                raise QueryError(f"invalid parameter: {exc}", "22P02") from exc
            self.portals[b.portal] = (query, values, None)
            self.send(pgwire.BIND_COMPLETE)
        elif tag == b"D":
            kind, name = body[:1], body[1:].rstrip(b"\x00").decode()
            if kind == b"S":
                if name not in self.statements:
                    raise QueryError(f'prepared statement "{name}" does not exist', "26000")
                query, oids = self.statements[name]
                n = _param_count(query)
                all_oids = [oids[i] if i < len(oids) and oids[i] else pgwire.TEXT for i in range(n)]
                self.send(pgwire.parameter_description(all_oids))
                fields = await self.call(self._describe, query, n)
                self.send(pgwire.row_description(fields) if fields else pgwire.NO_DATA)
            else:
                res = await self._portal_result(name)
                self.send(pgwire.row_description(res.fields) if res.fields else pgwire.NO_DATA)
        elif tag == b"E":
            r = pgwire.Reader(body)
            name, limit = r.cstr(), r.int32()  # the name's length in bytes, not characters
            res = await self._portal_result(name)
            rows = res.rows[res.sent :] if limit <= 0 else res.rows[res.sent : res.sent + limit]
            res.sent += len(rows)
            self.send(b"".join(rows))
            if limit > 0 and res.sent < len(res.rows):
                self.send(pgwire.PORTAL_SUSPENDED)
            else:
                self.send(pgwire.command_complete(res.tag) if res.tag else pgwire.EMPTY_QUERY)
        elif tag == b"C":
            kind, name = body[:1], body[1:].rstrip(b"\x00").decode()
            (self.statements if kind == b"S" else self.portals).pop(name, None)
            self.send(pgwire.CLOSE_COMPLETE)
        else:
            raise QueryError(f"unsupported message {tag!r}", "08P01")

    async def _portal_result(self, name: str) -> Result:
        if name not in self.portals:
            raise QueryError(f'portal "{name}" does not exist', "34000")
        query, values, res = self.portals[name]
        if res is None:
            stmts = guard.split(query)
            if len(stmts) > 1:
                raise QueryError("cannot insert multiple commands into a prepared statement", "42601")
            res = await self.execute(stmts[0] if stmts else "", values)
            self.portals[name] = (query, values, res)
        return res

    async def simple_query(self, text: str) -> None:
        text = pg_catalog.rewrite(text)
        stmts = guard.split(text)
        if not stmts:
            self.send(pgwire.EMPTY_QUERY)
            return
        for stmt in stmts:
            try:
                res = await self.execute(stmt, [])
            except QueryError as exc:
                self.send(pgwire.error_response(exc.sqlstate, str(exc)))
                if self.tx == "T":
                    self.tx = "E"
                return
            if res.fields is not None:
                self.send(pgwire.row_description(res.fields))
                self.send(b"".join(res.rows))
            self.send(pgwire.command_complete(res.tag))
            await self.writer.drain()

    async def call(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.server.pool, fn, *args)

    # -- statements --------------------------------------------------------------------------

    async def execute(self, text: str, values: list) -> Result:
        if not text.strip():
            return Result(None, tag="")
        if self.tx == "E" and not guard.session_statement(text):
            raise QueryError(
                "current transaction is aborted, commands ignored until end of transaction block", "25P02"
            )
        session = guard.session_statement(text)
        if session is not None:
            return self._session(session)
        return await self.call(self._run, text, values)

    def _session(self, st: guard.Statement) -> Result:
        k = st.kind
        if k == "set":
            name, value = st.args[0].lower(), st.args[1].strip().strip("'\"")
            if value.upper() == "DEFAULT":
                value = DEFAULT_SETTINGS.get(name, "")
            self.settings[name] = value
            for rep in REPORTED:
                if rep.lower() == name:
                    self.send(pgwire.parameter_status(rep, value))
            return Result(None, tag="SET")
        if k == "set_time_zone":
            self.settings["timezone"] = st.args[0].strip("'\"")
            return Result(None, tag="SET")
        if k == "set_noop":
            return Result(None, tag="SET")
        if k == "reset":
            name = st.args[0].lower()
            if name == "all":
                self.settings.update({a.lower(): b for a, b in DEFAULT_SETTINGS.items()})
            else:
                self.settings[name] = DEFAULT_SETTINGS.get(name, "")
            return Result(None, tag="RESET")
        if k == "show":
            name = st.args[0].lower()
            if name not in self.settings:
                raise QueryError(f'unrecognized configuration parameter "{name}"', "42704")
            row = pgwire.encode_rows_text([[self.settings[name]]])
            return Result([(name, pgwire.TEXT)], row, "SHOW")
        if k == "begin":
            if self.tx == "I":
                self.tx = "T"
            return Result(None, tag="BEGIN")
        if k in ("commit", "rollback"):
            tag = "ROLLBACK" if k == "rollback" or self.tx == "E" else "COMMIT"
            self.tx = "I"
            return Result(None, tag=tag)
        if k == "discard":
            self.statements.clear()
            return Result(None, tag="DISCARD ALL")
        if k == "deallocate":
            if st.args[0].upper() == "ALL":
                self.statements.clear()
            else:
                self.statements.pop(st.args[0], None)
            return Result(None, tag="DEALLOCATE")
        return Result(None, tag=st.text.split()[0].upper())

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        try:
            return self.server.catalog.cursor()
        except (CatalogError, duckdb.Error) as exc:  # e.g. the catalog was damaged under the server
            raise QueryError(f"catalog unavailable: {' '.join(str(exc).split())}", "58030") from exc

    def _describe(self, query: str, nparams: int) -> list[tuple[str, int]] | None:
        cur = self._cursor()
        try:
            try:
                st = guard.classify(query, cur)
            except guard.Refused as exc:
                raise QueryError(str(exc), exc.sqlstate) from exc
            if st.kind == "show":
                return [(st.args[0].lower(), pgwire.TEXT)]
            if st.kind != "select":
                return None
            try:
                rel = cur.sql(f"SELECT * FROM ({query.rstrip().rstrip(';')}) AS _q LIMIT 0",
                              params=[None] * nparams or None)  # fmt: skip
                schema = rel.to_arrow_table().schema
            except duckdb.Error:
                rel = cur.sql(query, params=[None] * nparams or None)
                schema = rel.limit(0).to_arrow_table().schema
            return [(f.name, pgwire.oid_of(f.type)) for f in schema]
        except duckdb.Error as exc:
            raise QueryError(str(exc).splitlines()[0], sqlstate_of(exc)) from exc
        finally:
            cur.close()

    def _run(self, text: str, values: list) -> Result:
        limits = self.server.limits
        cur = self._cursor()
        timer = None
        try:
            try:
                st = guard.classify(text, cur)
            except guard.Refused as exc:
                raise QueryError(str(exc), exc.sqlstate) from exc
            if st.kind != "select":
                raise QueryError("statement not allowed", guard.SQLSTATE_READ_ONLY)
            with self._cur_lock:
                self._cancelled = False
                self._cur = cur
            timer = threading.Timer(limits.query_timeout, cur.interrupt)
            timer.daemon = True
            timer.start()
            started = time.monotonic()
            try:
                rel = cur.sql(text, params=values or None)
                if rel is None:
                    return Result(None, tag="SELECT 0")
                reader = rel.to_arrow_reader(8192)
                fields = [(f.name, pgwire.oid_of(f.type)) for f in reader.schema]
                rows: list[bytes] = []
                for batch in reader:
                    if len(rows) + batch.num_rows > limits.max_rows:
                        raise QueryError(
                            f"result has more than {limits.max_rows} rows: add a LIMIT or an aggregate",
                            "54000",
                        )
                    rows += pgwire.encode_rows(batch)
            except duckdb.InterruptException as exc:
                if self._cancelled:
                    raise QueryError("canceling statement due to user request", "57014") from exc
                took = time.monotonic() - started
                raise QueryError(
                    f"canceling statement due to statement timeout "
                    f"({limits.query_timeout:g} s, ran {took:.1f} s)",
                    "57014",
                ) from exc
            return Result(fields, rows, f"SELECT {len(rows)}")
        except duckdb.Error as exc:
            raise QueryError(str(exc).splitlines()[0], sqlstate_of(exc)) from exc
        except (OverflowError, ValueError, ArrowException) as exc:  # a value the wire cannot carry
            raise QueryError(f"cannot send this result: {exc}", "22008") from exc
        finally:
            if timer is not None:
                timer.cancel()
            with self._cur_lock:
                self._cur = None
            cur.close()


def _param_count(query: str) -> int:
    import re

    nums = [int(m) for m in re.findall(r"\$(\d+)", query)]
    return max(nums, default=0)


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
    log.warning("dumpcat serving %s on %s:%d", catalog_path, server.host, server.port)
    assert server._thread is not None
    while server._thread.is_alive():
        server._thread.join(0.5)
    server.stop()
