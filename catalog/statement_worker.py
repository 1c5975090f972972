"""A statement worker: the process `dumpcat serve` runs client SQL in.

The server keeps a pool of these (`catalog.worker_pool`). Each one opens the contained engine
(`catalog.sandbox`), warms it up, then limits its own address space (`RLIMIT_AS`) so that no
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

import contextlib
import json
import os
import resource
import socket
import struct
import sys
import threading
import time
from typing import Any

HEADER = struct.Struct("!cI")

# Reply kinds.
READY = b"R"  # startup done: {"pid": ...}
ROWDESC = b"T"  # a RowDescription message
DATA = b"D"  # DataRow messages
DONE = b"C"  # {"tag": ...}: a statement finished
ERROR = b"E"  # {"sqlstate", "message"}: a request failed
PARSED = b"P"  # {"kind", "text", "args", "nparams"}
LIST = b"L"  # [{"session": {...}} | {"query": text}]: a simple query of several parts
NODATA = b"N"  # Describe: the statement returns no rows
TERMINAL = {DONE, ERROR, PARSED, LIST, NODATA}

CHUNK_BYTES = 256 << 10
MAX_STATEMENTS_PER_QUERY = 1000  # statements in one simple-query string
BATCH_ROWS = 2048


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
        threading.Thread(target=self._run, name="deadline", daemon=True).start()

    def arm(self, job: int, seconds: float) -> None:
        with self._cond:
            self._job, self._due = job, time.monotonic() + seconds
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._due = None
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._due is None:
                    self._cond.wait()
                left = self._due - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                job, self._due = self._job, None
            self._on_due(job)


class Worker:
    """Serves requests from the server on `data` until it closes."""

    def __init__(self, data: socket.socket, control: socket.socket, config: dict) -> None:
        from catalog import guard
        from catalog.sandbox import ContainedEngine

        self.data, self.control = data, control
        self.config = config
        self.engine = ContainedEngine(
            config["catalog"], config["views_db"], memory_limit=config["memory_limit"],
            threads=config["threads"],
        )  # fmt: skip
        self.guard = guard
        self.parser = guard.parser_connection()
        self.job = 0
        self.cursor = None
        self.timed_out = False
        self._lock = threading.Lock()
        # both threads start here, before limit_memory: a thread started under the cap may not get a stack
        self.deadline = Deadline(lambda job: self.interrupt(job, True))
        threading.Thread(target=self.watch_control, name="control", daemon=True).start()

    # -- startup -------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Touch every code path once (parser, views, Arrow scan, threads) before the memory limit."""
        cur = self.engine.cursor(-1)
        self.guard.classify("SELECT count(*) FROM stats WHERE nan_count > 0")
        cur.sql("SELECT count(*) FROM stats WHERE nan_count > 0").fetchall()
        cur.sql("SELECT * FROM dumpcat_pg.pg_class LIMIT 1").to_arrow_table()
        self.engine.forget(-1)

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
        """Interrupt the current job when the server asks (cancel request, timeout)."""
        while True:
            try:
                raw = self.control.recv(8)
            except OSError:
                return
            if len(raw) < 8:
                return
            (job,) = struct.unpack("!q", raw)
            self.interrupt(job)

    def interrupt(self, job: int, timed_out: bool = False) -> None:
        with self._lock:
            if job != self.job:
                return  # that job is over; never interrupt the next one
            if timed_out:
                self.timed_out = True
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
        self.data.sendall(data)

    def serve(self) -> None:
        while True:
            try:
                _kind, n = HEADER.unpack(self.recv_exactly(HEADER.size))
                request = json.loads(self.recv_exactly(n))
            except (EOFError, OSError):
                return
            for sid in request.get("forget", ()):
                self.engine.forget(sid)
            with self._lock:
                self.job = request["job"]
                self.timed_out = False
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
            else:
                raise StatementError(f"unknown request {op!r}", "XX000")
        except StatementError:
            raise
        except BaseException as exc:  # every failure is the client's error message, never a drop
            raise self.error_of(exc) from exc

    def error_of(self, exc: BaseException) -> StatementError:
        import duckdb
        from pyarrow import ArrowException

        if isinstance(exc, self.guard.Refused):
            return StatementError(str(exc), exc.sqlstate)
        if isinstance(exc, duckdb.InterruptException):
            if self.timed_out:
                return StatementError(
                    f"canceling statement due to statement timeout ({self._timeout:g} s)", "57014"
                )
            return StatementError("canceling statement due to user request", "57014")
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
            return StatementError(first_line(exc), sqlstate_of(exc))
        if isinstance(exc, OverflowError | ValueError | ArrowException | UnicodeError):
            return StatementError(f"cannot send this result: {first_line(exc)}", "22008")
        return StatementError(f"internal error: {type(exc).__name__}: {first_line(exc)}", "XX000")

    def decode_params(self, params: list) -> list:
        from catalog import pgwire

        try:
            return [
                pgwire.decode_param(None if h is None else bytes.fromhex(h), oid, fmt)
                for h, oid, fmt in params
            ]
        except (ValueError, UnicodeDecodeError, struct.error) as exc:
            raise StatementError(f"invalid parameter: {first_line(exc)}", "22P02") from exc

    def parse(self, text: str) -> dict:
        from catalog import pg_catalog

        stmts = self.guard.split(pg_catalog.rewrite(text))
        if not stmts:
            return {"kind": "empty", "text": "", "args": [], "nparams": 0}
        if len(stmts) > 1:
            raise StatementError("cannot insert multiple commands into a prepared statement", "42601")
        st = self.guard.classify(stmts[0])
        return {"kind": st.kind, "text": st.text, "args": list(st.args), "nparams": param_count(st.text)}

    def simple(self, request: dict) -> None:
        from catalog import pg_catalog

        stmts = self.guard.split(pg_catalog.rewrite(request["text"]))
        if len(stmts) > MAX_STATEMENTS_PER_QUERY:
            raise StatementError(
                f"a query string of {len(stmts):,} statements: at most {MAX_STATEMENTS_PER_QUERY:,} at once",
                "54000",
            )
        if len(stmts) == 1 and self.guard.session_statement(stmts[0]) is None:
            self.run(request["sid"], stmts[0], [], request)
            return
        parts: list[dict] = []
        for text in stmts:
            st = self.guard.session_statement(text)
            if st is None:
                parts.append({"query": text})
            else:
                parts.append({"session": {"kind": st.kind, "text": st.text, "args": list(st.args)}})
        self.send(json_frame(LIST, parts))

    def _start(self, sid: int, text: str):
        st = self.guard.classify(text)
        if st.kind != "query":
            raise StatementError(f"{st.kind} cannot run here", "0A000")
        cur = self.engine.cursor(sid)
        with self._lock:
            self.cursor = cur
        return st, cur

    def describe(self, sid: int, text: str, nparams: int) -> None:
        import duckdb

        from catalog import pgwire

        st, cur = self._start(sid, text)
        params = [None] * nparams or None
        try:
            body = st.text.rstrip().rstrip(";")
            schema = cur.sql(f"SELECT * FROM ({body}) AS _q LIMIT 0", params=params).to_arrow_table().schema
        except duckdb.InterruptException:
            raise
        except duckdb.Error:
            rel = cur.sql(st.text, params=params)
            if rel is None:
                self.send(frame(NODATA, b""))
                return
            schema = rel.limit(0).to_arrow_table().schema
        fields = [(f.name, pgwire.oid_of(f.type)) for f in schema]
        self.send(frame(ROWDESC, pgwire.row_description(fields)))
        self.send(json_frame(DONE, {"tag": ""}))

    def run(self, sid: int, text: str, values: list, limits: dict) -> None:
        from catalog import pgwire

        max_rows, max_bytes = limits.get("max_rows", 100_000), limits.get("max_bytes", 256 << 20)
        st, cur = self._start(sid, text)
        rel = cur.sql(st.text, params=values or None)
        if rel is None:
            self.send(json_frame(DONE, {"tag": "SELECT 0"}))
            return
        reader = rel.to_arrow_reader(BATCH_ROWS)
        fields = [(f.name, pgwire.oid_of(f.type)) for f in reader.schema]
        self.send(frame(ROWDESC, pgwire.row_description(fields)))
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
            for row in pgwire.encode_rows(batch):
                size += len(row)
                if size > max_bytes:
                    raise StatementError(too_big(max_bytes), "54000")
                pending.append(row)
                pending_size += len(row)
                if pending_size >= CHUNK_BYTES:
                    self.send(frame(DATA, b"".join(pending)))
                    pending, pending_size = [], 0
        if pending:
            self.send(frame(DATA, b"".join(pending)))
        self.send(json_frame(DONE, {"tag": f"SELECT {rows}"}))

    _timeout = 30.0


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


def main() -> None:
    config = json.loads(sys.argv[1])
    data = socket.socket(fileno=int(config["data_fd"]))
    control = socket.socket(fileno=int(config["control_fd"]))
    started = time.monotonic()
    try:
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
                                    "seconds": round(time.monotonic() - started, 3)}))  # fmt: skip
    worker.serve()


if __name__ == "__main__":
    main()
