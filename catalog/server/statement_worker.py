"""A statement worker: the process `dumpcat serve` runs client SQL in.

The server keeps a pool of these (`catalog.server.worker_pool`). Each one opens the contained engine
(`catalog.server.sandbox`), warms it up, then limits its own address space (`RLIMIT_AS`) so that no
statement can take more memory than `--memory-limit` plus a fixed headroom, whatever DuckDB's
own accounting misses (list and string expressions are not bounded by `memory_limit`). A
statement that hits the limit fails with an out-of-memory error; if the process dies instead, the
server replaces it and the client still gets an error. Every request runs under the statement
timeout (a deadline thread interrupts DuckDB; the server kills the process if that does not stop
it).

Everything a client sends is handled here, never in the server's event loop: rewriting
PostgreSQL catalog references, splitting, classifying (`catalog.guard`), describing, running and
encoding rows as PostgreSQL DataRow messages, which stream back in chunks.

Frames between server and worker: 1 byte kind, 4 bytes big-endian length, payload. Requests are
JSON (kind `J`); replies are JSON or ready-made protocol messages (`T` RowDescription, `D` a chunk
of DataRows). The control socket carries 8-byte job numbers to interrupt.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import json
import os
import resource
import socket
import struct
import sys
import threading
import time
from typing import Any

from catalog.server import landlock, pgwire

HEADER = struct.Struct("!cI")

# Reply kinds.
READY = b"R"  # startup done: {"pid": ...}
ROWDESC = b"T"  # a RowDescription message
DATA = b"D"  # DataRow messages
DONE = b"C"  # {"tag": ...}: a statement finished
ERROR = b"E"  # {"sqlstate", "message"}: a request failed
PARSED = b"P"  # {"kind", "text", "args", "nparams"}
MAX_PARAMETERS = 32767  # PostgreSQL's protocol counts parameters in an Int16
LIST = b"L"  # [{"session": {...}} | {"query": text}]: a simple query of several parts
NODATA = b"N"  # Describe: the statement returns no rows
COPYOUT = b"H"  # a CopyOutResponse message (COPY ... TO STDOUT starts)
TERMINAL = {DONE, ERROR, PARSED, LIST, NODATA}

CHUNK_BYTES = 256 << 10
MAX_STATEMENTS_PER_QUERY = 1000  # statements in one simple-query string
BATCH_ROWS = 2048
MEMO_ENTRIES = 512  # statement texts whose split and classification a worker remembers
MEMO_CHARS = 16 << 10  # longer texts are not remembered
REPEAT_INTERRUPT = 0.05  # seconds between interrupts of a job that was asked to stop and runs on


def frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: bytes, obj: Any) -> bytes:
    return frame(kind, json.dumps(obj).encode())


class StatementError(Exception):
    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def parse_size(text: str) -> int:
    """'2GB' / '512MiB' / '1.5 GB' / '1000000' -> bytes."""
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip
    s = text.strip().upper().replace(" ", "")
    i = len(s)
    while i and not s[i - 1].isdigit():
        i -= 1
    unit = s[i:]
    if unit not in units or not s[:i]:
        raise ValueError(f"not a size: {text!r} (e.g. 1GB, 512MiB)")
    return int(float(s[:i]) * units[unit])


class Deadline:
    """Interrupts the current job when its time is up, from one thread started before the memory cap.

    A timer thread per statement would have to be started under the cap, and a thread's stack is
    address space: after a statement that left the process near its cap (its allocator keeps freed
    memory mapped for a while), starting one failed and the worker died on the next, harmless,
    statement. This thread exists from the start, so every statement has its timeout."""

    def __init__(self, on_due) -> None:
        self._on_due = on_due
        self._cond = threading.Condition()
        self._job = 0
        self._due: float | None = None
        self._wakes: float | None = None  # when the thread wakes by itself (None: only when told)
        threading.Thread(target=self._run, name="deadline", daemon=True).start()

    def arm(self, job: int, seconds: float) -> None:
        """Wake the thread only if it would wake after this deadline: statements of the same
        timeout follow one another, so it is woken about once per timeout, not per statement (each
        wake-up took the GIL from the statement: 10 % of a point lookup's time in the worker)."""
        with self._cond:
            self._job, self._due = job, time.monotonic() + seconds
            if self._wakes is None or self._wakes > self._due:
                self._cond.notify()

    def disarm(self) -> None:
        """The thread finds the deadline gone when it wakes; no need to wake it now."""
        with self._cond:
            self._due = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._due is None:
                    self._wakes = None
                    self._cond.wait()
                left = self._due - time.monotonic()
                if left > 0:
                    self._wakes = time.monotonic() + left
                    self._cond.wait(left)
                    continue
                job, self._due = self._job, None
            self._on_due(job)


class Worker:
    """Serves requests from the server on `data` until it closes."""

    def __init__(self, data: socket.socket, control: socket.socket, config: dict) -> None:
        from catalog import guard
        from catalog.server.sandbox import ContainedEngine

        self.data, self.control = data, control
        self._out = []
        self._memos: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
        self.config = config
        self.engine = ContainedEngine(
            config["catalog"], config["views_db"], memory_limit=config["memory_limit"],
            threads=config["threads"], native=config.get("native", False),
        )  # fmt: skip
        self.guard = guard
        self.parser = guard.parser_connection()
        self.job = 0
        self.cursor = None
        self.timed_out = False
        self.stopping = 0  # the job asked to stop: interrupted again until it ends (see watch_control)
        self.last_job = 0  # job numbers grow: an interrupt of a later job came before its request
        self.stop_early = 0
        self._applied = {}
        self._lock = threading.Lock()
        # both threads start here, before limit_memory: a thread started under the cap may not get a stack
        self.deadline = Deadline(lambda job: self.interrupt(job, True))
        threading.Thread(target=self.watch_control, name="control", daemon=True).start()

    # -- startup -------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Touch every code path once (parser, views, Arrow scan, threads) before the memory limit."""
        cur = self.engine.shared_cursor(-1)
        self.guard.classify("SELECT count(*) FROM stats WHERE nan_count > 0")
        cur.sql("SELECT count(*) FROM stats WHERE nan_count > 0").fetchall()
        cur.sql("SELECT * FROM dumpcat_pg.pg_class LIMIT 1").to_arrow_table()
        # the PostgreSQL front's modules (sqlglot, the codecs) load here, not under the cap
        catalog_query = self.prepare(
            "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = 'stats'::regclass"
        )
        batch = stream_reader(cur, catalog_query["text"], None).read_all().to_batches()
        from catalog.server import pgcodec

        for b in batch:
            pgcodec.encode_datarows(b, [1] * b.num_columns)

    def limit_memory(self) -> int:
        """Cap the address space at what it is now plus the statement budget; returns the cap (0
        where the system cannot tell its current size: then only DuckDB's own limit applies)."""
        budget = parse_size(self.config["memory_limit"])
        headroom = max(budget // 2, 256 << 20)
        try:
            with open("/proc/self/status") as f:
                vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        except (OSError, StopIteration):  # not Linux
            return 0
        cap = vm + budget + headroom
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        return cap

    # -- control -------------------------------------------------------------------------------

    def watch_control(self) -> None:
        """Interrupt the current job when the server asks (cancel request, timeout), and again
        every `REPEAT_INTERRUPT` seconds until it ends: DuckDB drops an interrupt that comes while
        no query runs on the connection (between the guard's work and the query's start, or
        between two queries of one request), and a dropped interrupt used to cost the worker."""
        self.control.settimeout(REPEAT_INTERRUPT)
        while True:
            try:
                raw = self.control.recv(8)
            except TimeoutError:
                with self._lock:
                    if self.stopping and self.stopping == self.job:
                        self._interrupt_connections()
                continue
            except OSError:
                return
            if len(raw) < 8:
                return
            (job,) = struct.unpack("!q", raw)
            self.interrupt(job)

    def interrupt(self, job: int, timed_out: bool = False) -> None:
        with self._lock:
            if job > max(self.job, self.last_job):
                self.stop_early = job  # its request is not read yet: it stops as soon as it is
                return
            if job != self.job:
                return  # that job is over; never interrupt the next one
            if timed_out:
                self.timed_out = True
            self.stopping = job
            self._interrupt_connections()

    def _interrupt_connections(self) -> None:
        for con in (self.cursor, self.parser):
            if con is not None:
                with contextlib.suppress(Exception):  # a closed cursor has nothing to interrupt
                    con.interrupt()

    # -- I/O -----------------------------------------------------------------------------------

    def recv_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.data.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def send(self, data: bytes) -> None:
        """Frames of one request go out together, when it ends or when CHUNK_BYTES are waiting:
        a small result's RowDescription, rows and completion are one write and one wake-up of
        the server instead of three."""
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._out:
            out, self._out, self._out_size = self._out, [], 0
            self.data.sendall(b"".join(out) if len(out) > 1 else out[0])

    _out: list[bytes]
    _out_size = 0

    def serve(self) -> None:
        while True:
            try:
                _kind, n = HEADER.unpack(self.recv_exactly(HEADER.size))
                request = json.loads(self.recv_exactly(n))
            except (EOFError, OSError):
                return
            for sid in request.get("forget", ()):
                self.engine.forget(sid)
                self._applied.pop(sid, None)
            self._views = request.get("views")
            with self._lock:
                self.job = self.last_job = request["job"]
                self.timed_out = False
                self.stopping = self.job if self.stop_early == self.job else 0
            self._timeout = float(request.get("timeout", 30.0))
            self.deadline.arm(request["job"], self._timeout)
            try:
                self.handle(request)
            except StatementError as exc:
                self.send(json_frame(ERROR, {"sqlstate": exc.sqlstate, "message": str(exc)}))
            finally:
                self.deadline.disarm()
                with self._lock:
                    self.job = 0
                    self.cursor = None
            try:
                self.flush()
            except OSError:
                return

    # -- requests ------------------------------------------------------------------------------

    def handle(self, request: dict) -> None:
        op = request["op"]
        try:
            if op == "parse":
                self.send(json_frame(PARSED, self.parse(request["text"])))
            elif op == "describe":
                self.describe(request["sid"], request["text"], request.get("nparams", 0))
            elif op == "simple":
                self.simple(request)
            elif op == "run":
                values = self.decode_params(request.get("params") or [])
                self.run(request["sid"], request["text"], values, request)
            elif op == "copy":
                values = self.decode_params(request.get("params") or [])
                self.copy(request["sid"], request["text"], values, request.get("options") or {}, request)
            elif op == "arrow":
                values = self.decode_params(request.get("params") or [])
                self.arrow(request["sid"], request["text"], values, request)
            else:
                raise StatementError(f"unknown request {op!r}", "XX000")
        except StatementError:
            raise
        except BaseException as exc:  # every failure is the client's error message, never a drop
            raise self.error_of(exc) from exc

    def _asked_to_stop(self) -> bool:
        """Whether the current job was interrupted (a cancel request or its deadline)."""
        with self._lock:
            return self.job != 0 and (self.timed_out or self.stopping == self.job)

    def _stopped(self) -> StatementError:
        if self.timed_out:
            return StatementError(
                f"canceling statement due to statement timeout ({self._timeout:g} s)", "57014"
            )
        return StatementError("canceling statement due to user request", "57014")

    def error_of(self, exc: BaseException) -> StatementError:
        import duckdb
        from pyarrow import ArrowException

        if isinstance(exc, self.guard.Refused):
            return StatementError(str(exc), exc.sqlstate)
        if isinstance(exc, duckdb.InterruptException) or self._asked_to_stop():
            # (an interrupt that reaches DuckDB while it streams a result comes back through the
            # Arrow stream as an OSError, "INTERRUPT Error: Interrupted!": whatever failed once
            # the job was asked to stop, the client hears that it was cancelled)
            return self._stopped()
        from pyarrow import ArrowMemoryError

        out_of_memory = isinstance(exc, MemoryError | duckdb.OutOfMemoryException | ArrowMemoryError) or (
            isinstance(exc, OSError) and "out of memory" in str(exc).lower()
        )
        if out_of_memory:
            return StatementError(
                f"out of memory: the statement needs more than the server's limit of "
                f"{self.config['memory_limit']} ({first_line(exc)})",
                "53200",
            )
        if isinstance(exc, RecursionError):
            return StatementError("statement too complex: nested too deeply", "54001")
        if isinstance(exc, duckdb.Error):
            return StatementError(first_line(exc), _emulation_sqlstate(first_line(exc)) or sqlstate_of(exc))
        if isinstance(exc, OverflowError | ValueError | ArrowException | UnicodeError):
            return StatementError(f"cannot send this result: {first_line(exc)}", "22008")
        return StatementError(f"internal error: {type(exc).__name__}: {first_line(exc)}", "XX000")

    def decode_params(self, params: list) -> list:
        from catalog.server import pgcodec

        try:
            return [
                pgcodec.decode_param(None if h is None else bytes.fromhex(h), oid, fmt)
                for h, oid, fmt in params
            ]
        except (ValueError, UnicodeDecodeError, struct.error) as exc:
            raise StatementError(f"invalid parameter: {first_line(exc)}", "22P02") from exc

    # -- what a statement is ---------------------------------------------------------------------

    def query_text(self, text: str) -> str:
        """The DuckDB text of a client query: PostgreSQL catalog queries translated
        (catalog.server.pg_translate), then classified by the guard (refused unless a harmless read)."""
        from catalog.server import pg_translate

        if pg_translate.needs_translation(text):
            try:
                text = pg_translate.translate(text)
            except pg_translate.TranslationError as exc:
                raise StatementError(str(exc), exc.sqlstate) from exc
        st = self.guard.classify(text)
        if st.kind != "query":
            raise StatementError(f"{st.kind} cannot run here", "0A000")
        return st.text

    def prepare_uncached(self, text: str) -> dict:
        """One statement as the server needs it: a query (DuckDB text and its parameters) or a
        command the server answers (catalog.session_commands), whose inner query (DECLARE, COPY) is
        prepared here too."""
        from catalog import session_commands
        from catalog.server import pg_translate

        try:
            cmd = session_commands.command(text)
        except session_commands.CommandError as exc:
            raise StatementError(str(exc), exc.sqlstate) from exc
        if cmd is None:
            call = pg_translate.set_config_call(text)
            if call is not None:
                return {
                    "kind": "set_config",
                    "text": text,
                    "args": list(call),
                    "nparams": 0,
                    "param_types": [],
                }
            query = self.query_text(text)
            return {"kind": "query", "text": query, "args": [], **self.parameters(query)}
        args = list(cmd.args)
        info = {"nparams": 0, "param_types": []}
        if cmd.kind == "declare":
            args[3] = self.query_text(args[3])
            info = self.parameters(args[3])
        elif cmd.kind == "copy":
            args[0] = self.query_text(args[0])
            info = self.parameters(args[0])
        elif cmd.kind == "create_view":
            query = self.query_text(args[1])
            if args[3]:
                names = ", ".join(_quoted(c) for c in args[3].split(","))
                query = f"SELECT * FROM ({query}) AS _view({names})"
            args[1] = query
        return {"kind": cmd.kind, "text": text, "args": args, **info}

    def parameters(self, query: str) -> dict:
        """How many $n parameters a query has, and the PostgreSQL type of each where it can be
        inferred (a client that asks, such as asyncpg, encodes its values by these)."""
        from catalog.server import pg_translate

        n = param_count(query)
        if n > MAX_PARAMETERS:  # ParameterDescription and Bind count them in 16 bits
            raise self.guard.Refused(
                f"too many parameters: ${n}; a statement takes at most {MAX_PARAMETERS}", "54023"
            )
        return {
            "nparams": n,
            "param_types": pg_translate.param_types(query, n, self.column_oids()) if n else [],
        }

    def column_oids(self) -> dict[str, int]:
        """PostgreSQL type OID of each user-view column name that has one type in every view."""
        if self._column_oids is None:
            from catalog.views import USER_VIEWS

            rows = self.engine.con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
                "AND table_name IN (SELECT unnest($1::VARCHAR[]))",
                [sorted(USER_VIEWS)],
            ).fetchall()
            seen: dict[str, set[int]] = {}
            for name, duck_type in rows:
                seen.setdefault(name.lower(), set()).add(pgwire.DUCK_TYPE_OIDS.get(duck_type, pgwire.TEXT))
            self._column_oids = {name: oids.pop() for name, oids in seen.items() if len(oids) == 1}
        return self._column_oids

    _column_oids: dict[str, int] | None = None
    _views: dict[str, str] | None = None
    _applied: dict[int, tuple[Any, dict[str, str]]]

    def _memo(self, key: tuple[str, str], compute):
        """`compute()`, remembered for the last MEMO_ENTRIES texts (of at most MEMO_CHARS): what
        splitting, translating and classifying a text gives depends on the text alone, and costs
        about a millisecond, as much as running a point lookup. Clients that do not prepare
        their statements (psql, a driver's unnamed statements) send the same texts again and
        again. Failures are not remembered."""
        if len(key[1]) > MEMO_CHARS:
            return compute()
        found = self._memos.get(key)
        if found is not None:
            self._memos.move_to_end(key)
            return found
        found = self._memos[key] = compute()
        if len(self._memos) > MEMO_ENTRIES:
            self._memos.popitem(last=False)
        return found

    def split(self, text: str) -> list[str]:
        from catalog import session_commands

        return self._memo(("split", text), lambda: session_commands.split(text))

    def prepare(self, text: str) -> dict:
        """`prepare_uncached` of a statement, remembered (`_memo`); a copy, the caller's to change."""
        return copy.deepcopy(self._memo(("prepare", text), lambda: self.prepare_uncached(text)))

    def parse(self, text: str) -> dict:
        stmts = self.split(text)
        if not stmts:
            return {"kind": "empty", "text": "", "args": [], "nparams": 0, "param_types": []}
        if len(stmts) > 1:
            raise StatementError("cannot insert multiple commands into a prepared statement", "42601")
        return self.prepare(stmts[0])

    def simple(self, request: dict) -> None:
        stmts = self.split(request["text"])
        if len(stmts) > MAX_STATEMENTS_PER_QUERY:
            raise StatementError(
                f"a query string of {len(stmts):,} statements: at most {MAX_STATEMENTS_PER_QUERY:,} at once",
                "54000",
            )
        parts = [self.prepare(text) for text in stmts]
        if len(parts) == 1 and parts[0]["kind"] == "query":
            self.run(request["sid"], parts[0]["text"], [], request, checked=True)
            return
        self.send(json_frame(LIST, parts))

    def _cursor(self, sid: int, text: str | None = None):
        if self._views:  # the session's own temporary views: its own cursor
            cur = self.engine.cursor(sid)
            self._session_views(sid, cur)
        else:
            cur = self.engine.shared_cursor(sid, text)
        with self._lock:
            self.cursor = cur
            stopped = self.stopping == self.job
        if stopped:  # asked to stop before its query started: it does not start
            raise self._stopped()
        return cur

    def _session_views(self, sid: int, cur) -> None:
        """Give the session's cursor exactly the session's temporary views (the server keeps them:
        a session's statements may run in any worker). Their queries were classified by the guard
        when they were created; they live in DuckDB's temp catalog of this cursor only."""
        wanted = self._views or {}
        applied_to, applied = self._applied.get(sid, (None, {}))
        if applied_to is not cur:
            applied = {}
        if applied == wanted:
            return
        for name in set(applied) - set(wanted):
            cur.execute(f"DROP VIEW IF EXISTS temp.main.{_quoted(name)}")
        for name, query in wanted.items():
            if applied.get(name) != query:
                cur.execute(f"CREATE OR REPLACE TEMP VIEW {_quoted(name)} AS {query}")
        cur.execute("SET VARIABLE dumpcat_session_views = ?", [sorted(wanted)])
        self._applied[sid] = (cur, dict(wanted))

    def _start(self, sid: int, text: str, *, checked: bool = False):
        """(text, cursor) for a query; `checked` texts come from prepare() of this server."""
        if not checked:
            text = self.query_text(text)
        return text, self._cursor(sid, text)

    def describe(self, sid: int, text: str, nparams: int) -> None:
        import duckdb

        from catalog.server import pgcodec

        text, cur = self._start(sid, text, checked=True)
        params = [None] * nparams or None
        try:
            body = text.rstrip().rstrip(";")
            schema = cur.sql(f"SELECT * FROM ({body}) AS _q LIMIT 0", params=params).to_arrow_table().schema
        except duckdb.InterruptException:
            raise
        except duckdb.Error:
            rel = cur.sql(text, params=params)
            if rel is None:
                self.send(frame(NODATA, b""))
                return
            schema = rel.limit(0).to_arrow_table().schema
        fields = [(f.name, pgcodec.oid_of(f.type)) for f in schema]
        self.send(frame(ROWDESC, pgwire.row_description(fields)))
        self.send(json_frame(DONE, {"tag": ""}))

    def _reader(self, sid: int, text: str, values: list, *, checked: bool):
        text, cur = self._start(sid, text, checked=checked)
        return stream_reader(cur, text, values or None)

    def run(self, sid: int, text: str, values: list, limits: dict, *, checked: bool = True) -> None:
        """Run a query and stream its rows as DataRow messages in the formats the client bound."""
        from catalog.server import pgcodec

        reader = self._reader(sid, text, values, checked=checked)
        if reader is None:
            self.send(json_frame(DONE, {"tag": "SELECT 0"}))
            return
        formats = result_formats(limits.get("formats") or [], len(reader.schema))
        fields = [(f.name, pgcodec.oid_of(f.type)) for f in reader.schema]
        self.send(frame(ROWDESC, pgwire.row_description(fields, formats)))
        rows = self.stream(reader, limits, lambda batch: pgcodec.encode_datarows(batch, formats))
        self.send(json_frame(DONE, {"tag": f"SELECT {rows}"}))

    def copy(self, sid: int, text: str, values: list, options: dict, limits: dict) -> None:
        """`COPY (query) TO STDOUT`: CopyOutResponse, one CopyData message per row (as PostgreSQL
        sends them; psycopg's row reader counts on it), CopyDone. Nothing is written anywhere but to
        the client."""
        from catalog.server import pgcodec

        reader = self._reader(sid, text, values, checked=True)
        fmt = options.get("format", "text")
        names = reader.schema.names if reader is not None else []
        opts = _csv_options(options) if fmt == "csv" else _text_options(options) if fmt == "text" else {}
        if fmt == "csv" and options.get("header") == "true":
            opts["header"] = True
        try:
            encoder = pgcodec.CopyEncoder(names, fmt, **opts)
        except ValueError as exc:
            raise StatementError(f"COPY: {first_line(exc)}", "22023") from exc
        self.send(frame(COPYOUT, pgwire.copy_out_response(1 if fmt == "binary" else 0, len(names))))
        head = encoder.start()
        if head:
            self.send(frame(DATA, head))
        rows = self.stream(reader, limits, encoder.rows) if reader is not None else 0
        self.send(frame(DATA, encoder.finish() + pgwire.COPY_DONE))
        self.send(json_frame(DONE, {"tag": f"COPY {rows}"}))

    def arrow(self, sid: int, text: str, values: list, limits: dict) -> None:
        """A query's result as Arrow IPC (a DECLAREd cursor: the server keeps it and encodes what
        each FETCH takes in the format that FETCH asks for)."""
        import pyarrow as pa

        reader = self._reader(sid, text, values, checked=True)
        if reader is None:
            self.send(json_frame(DONE, {"tag": "SELECT 0"}))
            return
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, reader.schema):
            pass
        self.send(frame(ROWDESC, sink.getvalue().to_pybytes()))

        def ipc(batch) -> bytes:
            out = pa.BufferOutputStream()
            with pa.ipc.new_stream(out, batch.schema) as w:
                w.write_batch(batch)
            return out.getvalue().to_pybytes()

        rows = self.stream(reader, limits, ipc, chunk_rows=False)
        self.send(json_frame(DONE, {"tag": f"SELECT {rows}"}))

    def stream(self, reader, limits: dict, encode, *, chunk_rows: bool = True) -> int:
        """Send each batch encoded, in frames of about CHUNK_BYTES, under the row and byte caps."""
        max_rows, max_bytes = limits.get("max_rows", 100_000), limits.get("max_bytes", 256 << 20)
        rows = size = 0
        pending: list[bytes] = []
        pending_size = 0
        for batch in reader:
            rows += batch.num_rows
            if rows > max_rows:
                raise StatementError(
                    f"result has more than {max_rows} rows: add a LIMIT or an aggregate", "54000"
                )
            if size + batch.get_total_buffer_size() > 2 * max_bytes:
                raise StatementError(too_big(max_bytes), "54000")
            data = encode(batch)
            size += len(data)
            if size > max_bytes:
                raise StatementError(too_big(max_bytes), "54000")
            if not chunk_rows:
                self.send(frame(DATA, data))
                continue
            pending.append(data)
            pending_size += len(data)
            if pending_size >= CHUNK_BYTES:
                self.send(frame(DATA, b"".join(pending)))
                pending, pending_size = [], 0
        if pending:
            self.send(frame(DATA, b"".join(pending)))
        return rows

    _timeout = 30.0


def stream_reader(cur, text: str, values: list | None):
    """A RecordBatchReader streaming one statement's rows, or None when it returns none.

    DuckDB 2.0's `cur.sql(text).to_arrow_reader()` binds the statement twice: `sql()` binds it to
    make a lazy relation (and to capture Python variables, which the contained engine never
    scans), then the reader runs the rendered relation, binding it again: a third of a point
    lookup's time. The statement here is one read the guard classified, so it is submitted as it
    is, through the relation layer's own call (`duckdb._seam.submit`, what `to_arrow_reader` runs):
    bound once, streamed in batches as before (`execute()` would copy the whole result first).
    Where that call is missing (another DuckDB), the relation path."""
    submit = _seam_submit()
    if submit is None:
        rel = cur.sql(text, params=values)
        return None if rel is None else rel.to_arrow_reader(BATCH_ROWS)
    result = submit(cur, text, values, "stream", BATCH_ROWS)
    if not result.description:  # a statement without rows, as `sql()` returning None
        result.close()
        return None
    return result.arrow_reader()


@functools.cache
def _seam_submit():
    try:
        from duckdb import _seam
    except ImportError:
        return None
    return getattr(_seam, "submit", None)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def result_formats(codes: list[int], ncols: int) -> list[int]:
    """Bind's result format codes for each column: none (all text), one (for all) or one each."""
    if not codes:
        return [0] * ncols
    if len(codes) == 1:
        return codes * ncols
    if len(codes) != ncols:
        raise StatementError(
            f"bind message has {len(codes)} result formats but query has {ncols} columns", "08P01"
        )
    if any(c not in (0, 1) for c in codes):
        raise StatementError("unsupported format code", "22023")
    return list(codes)


def _csv_options(options: dict) -> dict:
    return {k: options[k] for k in ("delimiter", "null", "quote", "escape", "force_quote") if k in options}


def _text_options(options: dict) -> dict:
    return {k: options[k] for k in ("delimiter", "null") if k in options}


def too_big(max_bytes: int) -> str:
    return f"result is larger than {max_bytes:,} bytes: add a LIMIT, fewer columns or an aggregate"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_ERROR_CODES = [
    ("InterruptException", "57014"),
    ("PermissionException", "42501"),
    ("ParserException", "42601"),
    ("CatalogException", "42P01"),
    ("BinderException", "42703"),
    ("ConversionException", "22P02"),
    ("OutOfRangeException", "22003"),
    ("InvalidInputException", "22023"),
    ("OutOfMemoryException", "53200"),
    ("NotImplementedException", "0A000"),
]


# Errors the PostgreSQL emulation raises (pg_catalog.py's macros) and PostgreSQL's SQLSTATE for each.
_EMULATION_ERRORS = [
    ("unrecognized configuration parameter", "42704"),
    ('relation "', "42P01"),
    ('type "', "42704"),
    ('function "', "42883"),
    ('schema "', "3F000"),
    ('role "', "42704"),
]


def _emulation_sqlstate(message: str) -> str | None:
    if "Invalid Input Error: " not in message:
        return None
    text = message.split("Invalid Input Error: ", 1)[1]
    for start, code in _EMULATION_ERRORS:
        if text.startswith(start) and (start.endswith("parameter") or text.endswith("does not exist")):
            return code
    return None


def sqlstate_of(exc: BaseException) -> str:
    import duckdb

    for name, code in _ERROR_CODES:
        if isinstance(exc, getattr(duckdb, name)):
            return code
    return "XX000"


def param_count(query: str) -> int:
    """The highest $n placeholder (PostgreSQL parameters are numbered)."""
    import re

    return max((int(m) for m in re.findall(r"\$(\d{1,5})", query)), default=0)


def run(data_fd: int, control_fd: int, config: dict) -> None:
    """Start on the server's two sockets, say READY (or why not), then serve until the server
    closes the data socket. Started as a program (`main`) or forked by `worker_launcher`."""
    data = socket.socket(fileno=data_fd)
    control = socket.socket(fileno=control_fd)
    started = time.monotonic()
    try:
        # While this process has one thread: DuckDB reads the catalog's files itself only in a
        # process that can write none; where the kernel refuses after all, Arrow datasets.
        if config.get("native") and landlock.deny_writes() is not None:
            config = {**config, "native": False}
        worker = Worker(data, control, config)
        worker.warm_up()
        cap = worker.limit_memory()
    except Exception as exc:  # the server reports why no worker could start
        with contextlib.suppress(OSError):  # unless it is gone already
            data.sendall(
                json_frame(
                    ERROR, {"sqlstate": "58030", "message": f"worker failed to start: {first_line(exc)}"}
                )
            )
        return
    data.sendall(json_frame(READY, {"pid": os.getpid(), "address_space": cap,
                                    "reads": "duckdb" if worker.engine.native else "arrow",
                                    "seconds": round(time.monotonic() - started, 3)}))  # fmt: skip
    worker.serve()


def main() -> None:
    config = json.loads(sys.argv[1])
    run(int(config["data_fd"]), int(config["control_fd"]), config)


if __name__ == "__main__":
    main()
