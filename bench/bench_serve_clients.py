"""`dumpcat serve` through its PostgreSQL clients: connect-to-first-row latency per client, and the
throughput of a 10^6-row result in each format on the wire, against `Catalog.sql` in process.

    python bench/bench_serve_clients.py --workdir DIR            # 10^6 rows, 3 rounds (~10 minutes)
    python bench/bench_serve_clients.py --rows 20000 --rounds 1 --tries 2   # quick mode (~30 s)

The catalog is `bench/bench_scale.py`'s generator (what a one-shot ingest of a MindSpore dump with
tensor files leaves: `--rows` statistic rows, long Llama-like kernel names); it is written once
into `--workdir` and reused by later runs (without `--workdir`: a temp dir, deleted at the end).

The server is a `catalog.server.server.Server` with its default workers and limits, except that a result
of `--rows` rows is allowed (`max_rows`, `max_result_bytes`) and a statement may take 10 minutes.
It runs in a child process, as `dumpcat serve` would: a server thread inside this process would
share the interpreter lock with the clients' decoding. Every client connects over loopback to it.

1. Latency: a new connection, `SELECT op_name, nan_count FROM stats WHERE nan_count > 0 LIMIT 1`
   and its first row, timed from before the connect to the row in hand (closing is not timed; the
   connect alone is shown too), each client with its defaults (psycopg 3, psycopg2 and pg8000 open
   a transaction first): psycopg 3, psycopg2, pg8000, asyncpg (on one event loop, made once; once
   more with an int8[] column, which asyncpg looks up in pg_catalog on each new connection), ADBC,
   SQLAlchemy + psycopg2 (a new engine each time: `create_engine`, `connect` with the dialect's
   first-connect queries, the row), against `Catalog.open` + `sql` in this process (a new
   `Catalog` each time). `--tries` tries per round, every client once per try in turn; the figure
   is the median of all.
2. Throughput: `SELECT row_id, op_name, nan_count, max, min, avg, shape FROM stats` (all rows)
   through: psycopg 3's default cursor (text DataRows, `fetchall` into Python values); psycopg 3
   `binary=True` and asyncpg `fetch` (binary DataRows into Python values); `COPY (...) TO STDOUT`
   as text, csv and binary through psycopg 3's `cursor.copy`, every data block read (kept as bytes,
   not parsed); connectorx `read_sql(return_type="arrow")` and ADBC `fetch_arrow_table` (both
   read `COPY ... (FORMAT binary)` into Arrow); the same five wire formats read by a bare socket
   that decodes nothing (`RawSocket`: what is left is the server's cost); against `Catalog.sql`
   (Arrow) on a `Catalog` opened and warmed once. The connection is made before the clock starts
   (connectorx connects inside `read_sql`; asyncpg's connection has fetched one row of the query:
   its type lookups). Each of `--rounds` rounds runs every path once, starting one path later each
   round; the figure is the median. After the clock stops, the rows each path returned are counted
   from what it returned (COPY: lines, or the binary tuples parsed; raw: the messages, checked
   against the server's tag) and must equal in-process's.

MB are 10^6 bytes of the result in the format on the wire, computed once by `catalog.server.pgcodec` (the
server's own encoders) from the in-process result: DataRow messages, or CopyData messages of one
row each; in process, the Arrow table's buffers. Ratios are of rows/s: a path's against in-process,
and against the text path (psycopg 3's default cursor).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import adbc_driver_postgresql.dbapi  # noqa: E402
import asyncpg  # noqa: E402
import bench_scale  # noqa: E402
import connectorx  # noqa: E402
import duckdb  # noqa: E402
import emit  # noqa: E402
import pg8000.dbapi  # noqa: E402
import psycopg  # noqa: E402
import psycopg2  # noqa: E402
import pyarrow as pa  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from catalog.api import Catalog  # noqa: E402
from catalog.server import pgcodec, statement_worker  # noqa: E402

FIRST_ROW = "SELECT op_name, nan_count FROM stats WHERE nan_count > 0 LIMIT 1"
# asyncpg looks up the types it has no codec for (int8[] here) on each new connection
FIRST_ROW_ARRAY = "SELECT op_name, nan_count, shape FROM stats WHERE nan_count > 0 LIMIT 1"
ALL_ROWS = "SELECT row_id, op_name, nan_count, max, min, avg, shape FROM stats"
USER, PASSWORD, DBNAME = "bench", "bench-pw", "dumpcat"

# The server in a child process: the catalog, the limits (JSON) and the users (JSON) as arguments;
# it prints its port and stops when its stdin closes.
SERVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from catalog.server.server import Limits, Server
srv = Server(sys.argv[2], port=0, users=json.loads(sys.argv[4]), limits=Limits(**json.loads(sys.argv[3])))
srv.start()
print(srv.port, flush=True)
sys.stdin.read()
srv.stop()
"""


@dataclass(frozen=True)
class Endpoint:
    port: int
    password: str | None
    host: str = "127.0.0.1"
    user: str = USER
    dbname: str = DBNAME

    def kwargs(self) -> dict:
        kw = {"host": self.host, "port": self.port, "user": self.user}
        return kw | ({"password": self.password} if self.password else {})

    def uri(self, scheme: str = "postgresql") -> str:
        auth = f"{self.user}:{self.password}" if self.password else self.user
        return f"{scheme}://{auth}@{self.host}:{self.port}/{self.dbname}"


class ServerProcess:
    """`Server(catalog, port=0, limits=...)` in a child process, on 127.0.0.1."""

    def __init__(self, catalog: Path, limits: dict, password: str | None) -> None:
        users = {USER: password} if password else {}
        args = [sys.executable, "-c", SERVER, str(ROOT), str(catalog), json.dumps(limits), json.dumps(users)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            raise RuntimeError("the server did not start")
        self.endpoint = Endpoint(int(line), password)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the catalog -------------------------------------------------------------------------------


def build_catalog(workdir: Path, rows: int) -> tuple[Path, str]:
    """The generator's catalog of `rows` statistic rows in `workdir`, written unless a finished one
    is there; returns its path and how it came (written in N s, or cached)."""
    path = workdir / f"serve_clients_{rows}"
    done = workdir / f"serve_clients_{rows}.json"
    if done.exists() and path.exists():
        return path, "cached"
    shutil.rmtree(path, ignore_errors=True)
    # 10,000-row steps as bench_scale's catalogs; a small catalog gets smaller steps and more bad
    # ones, so that the latency query has an answer
    step_rows = 10_000 if rows >= 200_000 and rows % 10_000 == 0 else 1_000
    if rows % step_rows:
        raise SystemExit(f"--rows must be a multiple of {step_rows:,}")
    share = 0.05 if rows // step_rows >= 100 else 0.25
    summary = bench_scale.generate(path, rows, step_rows=step_rows, anomaly_share=share)
    if summary.nan_rows == 0:
        raise SystemExit("the generated catalog has no NaN rows: choose another --rows")
    done.write_text(json.dumps(summary.as_dict(), indent=1))
    return path, f"written in {summary.seconds:.0f} s"


# -- 1. connect to first row -------------------------------------------------------------------


class Clock:
    """When a try started and when its connection was up."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.connected = self.start

    def connected_now(self) -> None:
        self.connected = time.perf_counter()


# A client: (endpoint, query, clock) -> (the first row, what closes the connection afterwards,
# untimed); it calls clock.connected_now() once its connection is up.
Opener = Callable[[Endpoint, str, Clock], tuple[Any, Callable[[], None]]]


def first_psycopg(ep: Endpoint, query: str, clock: Clock):
    conn = psycopg.connect(dbname=ep.dbname, **ep.kwargs())
    clock.connected_now()
    return conn.execute(query).fetchone(), conn.close


def first_psycopg2(ep: Endpoint, query: str, clock: Clock):
    conn = psycopg2.connect(dbname=ep.dbname, **ep.kwargs())
    clock.connected_now()
    cur = conn.cursor()
    cur.execute(query)
    return cur.fetchone(), conn.close


def first_pg8000(ep: Endpoint, query: str, clock: Clock):
    conn = pg8000.dbapi.connect(database=ep.dbname, **ep.kwargs())
    clock.connected_now()
    cur = conn.cursor()
    cur.execute(query)
    return cur.fetchone(), conn.close


class Loop:
    """One event loop for every asyncpg call (made once, outside the timings)."""

    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coro):
        if cls.loop is None:
            cls.loop = asyncio.new_event_loop()
        return cls.loop.run_until_complete(coro)


def first_asyncpg(ep: Endpoint, query: str, clock: Clock):
    async def go():
        conn = await asyncpg.connect(database=ep.dbname, **ep.kwargs())
        clock.connected_now()
        return await conn.fetchrow(query), conn

    row, conn = Loop.run(go())
    return tuple(row.values()), lambda: Loop.run(conn.close())


def first_adbc(ep: Endpoint, query: str, clock: Clock):
    conn = adbc_driver_postgresql.dbapi.connect(ep.uri())
    clock.connected_now()
    cur = conn.cursor()
    cur.execute(query)
    row = cur.fetchone()

    def close():
        cur.close()
        conn.close()

    return row, close


def first_sqlalchemy(ep: Endpoint, query: str, clock: Clock):
    url = sa.URL.create("postgresql+psycopg2", username=ep.user, password=ep.password, host=ep.host,
                        port=ep.port, database=ep.dbname)  # fmt: skip
    engine = sa.create_engine(url)
    conn = engine.connect()  # the first connect also runs the dialect's set-up queries
    clock.connected_now()
    row = conn.execute(sa.text(query)).first()

    def close():
        conn.close()
        engine.dispose()

    return tuple(row), close


def first_in_process(path: Path) -> Opener:
    def first(_ep: Endpoint, query: str, clock: Clock):
        cat = Catalog.open(path)
        clock.connected_now()
        table = cat.sql(query)
        return tuple(table.slice(0, 1).to_pylist()[0].values()), cat.close

    return first


@dataclass
class Client:
    name: str
    first: Opener
    query: str = FIRST_ROW
    connect: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)


def latency(ep: Endpoint, path: Path, rounds: int, tries: int) -> list[Client]:
    clients = [
        Client("in-process (`Catalog.open` + `sql`)", first_in_process(path)),
        Client("psycopg 3", first_psycopg),
        Client("psycopg2", first_psycopg2),
        Client("pg8000", first_pg8000),
        Client("asyncpg", first_asyncpg),
        Client("asyncpg, with `shape` (int8[])", first_asyncpg, FIRST_ROW_ARRAY),
        Client("ADBC", first_adbc),
        Client("SQLAlchemy + psycopg2 (new engine)", first_sqlalchemy),
    ]
    for _ in range(rounds * tries):
        for c in clients:
            clock = Clock()
            row, close = c.first(ep, c.query, clock)
            end = time.perf_counter()
            c.connect.append(clock.connected - clock.start)
            c.total.append(end - clock.start)
            close()
            if row is None or len(row) < 2 or not row[1] > 0:
                raise AssertionError(f"{c.name}: first row {row!r}, expected (op_name, nan_count > 0, ...)")
    return clients


# -- 2. a 10^6-row result ----------------------------------------------------------------------


@dataclass
class Fetch:
    """One way to fetch ALL_ROWS: `connect` (untimed) gives a handle, `fetch(handle)` (timed)
    the result, `count(result)` (untimed) its rows; `wire` names the format its bytes are counted in."""

    name: str
    wire: str
    connect: Callable[[], Any]
    fetch: Callable[[Any], Any]
    count: Callable[[Any], int]
    close: Callable[[Any], None] = lambda h: h.close()
    seconds: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)


def copy_blocks(conn, options: str) -> list[bytes]:
    with conn.cursor() as cur, cur.copy(f"COPY ({ALL_ROWS}) TO STDOUT {options}") as copy:
        return [bytes(block) for block in copy]


def copy_lines(blocks: list[bytes]) -> int:
    return sum(b.count(b"\n") for b in blocks)


def copy_binary_tuples(blocks: list[bytes]) -> int:
    """Tuples in a binary COPY stream (header, tuples, trailer), checking its framing."""
    data = b"".join(blocks)
    if not data.startswith(pgcodec.COPY_BINARY_HEADER[:11]):
        raise AssertionError("binary COPY without its signature")
    (ext,) = struct.unpack_from("!i", data, 15)
    pos, n, end = 19 + ext, 0, len(data)
    short, long = struct.Struct("!h").unpack_from, struct.Struct("!i").unpack_from
    while pos < end:
        (fields,) = short(data, pos)
        pos += 2
        if fields == -1:
            break
        for _ in range(fields):
            (size,) = long(data, pos)
            pos += 4 + max(size, 0)
        n += 1
    if pos != end:
        raise AssertionError(f"binary COPY: {end - pos} bytes after the trailer")
    return n


class RawSocket:
    """The least a client can do: a PostgreSQL connection on a bare socket (no password: loopback)
    that sends a statement and receives the answer into memory, up to ReadyForQuery, decoding
    nothing. What it takes is the server's cost (and the loopback's); the rows are counted from
    the messages afterwards."""

    END = re.compile(rb"C\x00\x00\x00.(?:SELECT|COPY) (\d+)\x00Z\x00\x00\x00\x05I\Z", re.S)

    def __init__(self, ep: Endpoint) -> None:
        if ep.password:
            raise ValueError("the raw socket client does not log in with a password")
        self.sock = socket.create_connection((ep.host, ep.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = struct.pack("!i", 196608) + b"user\0%s\0database\0%s\0\0" % (
            ep.user.encode(),
            ep.dbname.encode(),
        )
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        data = b""
        while not data.endswith(b"Z\x00\x00\x00\x05I"):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection at start-up")
            data += chunk
        if not data.startswith(b"R\x00\x00\x00\x08\x00\x00\x00\x00"):
            raise ConnectionError(f"start-up answered {data[:64]!r}")

    @staticmethod
    def message(kind: bytes, body: bytes) -> bytes:
        return kind + struct.pack("!i", len(body) + 4) + body

    def query(self, text: str) -> bytes:
        """The simple query protocol: text DataRows, or a COPY's CopyData."""
        return self.message(b"Q", text.encode() + b"\0")

    def binary_query(self, text: str) -> bytes:
        """Parse, Bind (every result column binary), Execute, Sync."""
        m = self.message
        return (
            m(b"P", b"\0" + text.encode() + b"\0" + struct.pack("!h", 0))
            + m(b"B", b"\0\0" + struct.pack("!hhhh", 0, 0, 1, 1))
            + m(b"E", b"\0" + struct.pack("!i", 0))
            + m(b"S", b"")
        )

    def fetch(self, request: bytes) -> list[bytes]:
        self.sock.sendall(request)
        chunks, tail = [], b""
        recv = self.sock.recv
        while True:
            chunk = recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            chunks.append(chunk)
            tail = (tail + chunk)[-64:]
            if tail.endswith(b"Z\x00\x00\x00\x05I") and self.END.search(tail):
                return chunks

    def close(self) -> None:
        self.sock.sendall(self.message(b"X", b""))
        self.sock.close()


def raw_rows(chunks: list[bytes]) -> int:
    """Rows in a raw answer: its DataRow messages, or its CopyData messages (a binary COPY's
    trailer is a message of its own); checked against the CommandComplete tag."""
    data = b"".join(chunks)
    counts: dict[int, int] = {}
    pos, end, header = 0, len(data), struct.Struct("!i").unpack_from
    while pos < end:
        kind = data[pos]
        (size,) = header(data, pos + 1)
        if kind == ord("E"):
            raise AssertionError(f"the server answered an error: {data[pos + 5 : pos + 1 + size]!r}")
        counts[kind] = counts.get(kind, 0) + 1
        pos += 1 + size
    tag = int(RawSocket.END.search(data[-64:]).group(1))
    rows = counts.get(ord("D"), 0)
    if ord("d") in counts:
        trailer = data.rfind(b"d\x00\x00\x00\x06\xff\xff") >= 0
        rows = counts[ord("d")] - (1 if trailer else 0)
    if rows != tag:
        raise AssertionError(f"{rows} rows received, the server says {tag}")
    return rows


def psycopg_fetchall(binary: bool) -> Callable[[Any], list]:
    def fetch(conn) -> list:
        with conn.cursor(binary=binary) as cur:
            cur.execute(ALL_ROWS)
            return cur.fetchall()

    return fetch


def adbc_connect(ep: Endpoint):
    return adbc_driver_postgresql.dbapi.connect(ep.uri())


def adbc_fetch(conn) -> pa.Table:
    with conn.cursor() as cur:
        cur.execute(ALL_ROWS)
        return cur.fetch_arrow_table()


def fetches(ep: Endpoint, cat: Catalog) -> list[Fetch]:
    def pg():
        return psycopg.connect(dbname=ep.dbname, autocommit=True, **ep.kwargs())

    async def apg_connect():
        conn = await asyncpg.connect(database=ep.dbname, **ep.kwargs())
        await conn.fetch(ALL_ROWS + " LIMIT 1")  # its type lookups (int8[]), once per connection
        return conn

    def apg():
        return Loop.run(apg_connect())

    def raw(request: Callable[[RawSocket], bytes]) -> Callable[[RawSocket], list[bytes]]:
        return lambda c: c.fetch(request(c))

    paths = [
        Fetch("in-process `Catalog.sql`", "Arrow", lambda: cat, lambda c: c.sql(ALL_ROWS),
              lambda t: t.num_rows, close=lambda c: None),
        Fetch("psycopg 3, default cursor", "text", pg, psycopg_fetchall(False), len),
        Fetch("psycopg 3, `binary=True`", "binary", pg, psycopg_fetchall(True), len),
        Fetch("asyncpg `fetch`", "binary", apg, lambda c: Loop.run(c.fetch(ALL_ROWS)), len,
              close=lambda c: Loop.run(c.close())),
        Fetch("psycopg 3 `copy`, COPY text", "copy text", pg, lambda c: copy_blocks(c, ""), copy_lines),
        Fetch("psycopg 3 `copy`, COPY csv", "copy csv", pg, lambda c: copy_blocks(c, "(FORMAT csv)"),
              copy_lines),
        Fetch("psycopg 3 `copy`, COPY binary", "copy binary", pg,
              lambda c: copy_blocks(c, "(FORMAT binary)"), copy_binary_tuples),
        Fetch("connectorx `read_sql` (Arrow)", "copy binary", lambda: None,
              lambda _: connectorx.read_sql(ep.uri(), ALL_ROWS, return_type="arrow"), lambda t: t.num_rows,
              close=lambda _: None),
        Fetch("ADBC `fetch_arrow_table`", "copy binary", lambda: adbc_connect(ep), adbc_fetch,
              lambda t: t.num_rows),
    ]  # fmt: skip
    if ep.password:
        return paths
    requests = {  # wire format -> the request for ALL_ROWS in it
        "text": lambda c: c.query(ALL_ROWS),
        "binary": lambda c: c.binary_query(ALL_ROWS),
        "copy text": lambda c: c.query(f"COPY ({ALL_ROWS}) TO STDOUT"),
        "copy csv": lambda c: c.query(f"COPY ({ALL_ROWS}) TO STDOUT (FORMAT csv)"),
        "copy binary": lambda c: c.query(f"COPY ({ALL_ROWS}) TO STDOUT (FORMAT binary)"),
    }
    for wire, request in requests.items():
        name = f"raw socket, {wire if wire.startswith('copy') else wire + ' DataRows'}, nothing decoded"
        paths.append(Fetch(name, wire, lambda: RawSocket(ep), raw(request), raw_rows))
    return paths


def encoder(wire: str, names: list[str]) -> Callable[[list[pa.RecordBatch]], bytes]:
    """The server's encoding of a result's batches in a wire format (statement_worker's calls)."""
    if not wire.startswith("copy"):
        formats = [int(wire == "binary")] * len(names)
        return lambda batches: b"".join(pgcodec.encode_datarows(b, formats) for b in batches)

    def copy(batches: list[pa.RecordBatch]) -> bytes:
        enc = pgcodec.CopyEncoder(names, wire.split()[1])
        return enc.start() + b"".join(enc.rows(b) for b in batches) + enc.finish()

    return copy


WIRES = ["text", "binary", "copy text", "copy csv", "copy binary"]


def worker_batches(table: pa.Table) -> list[pa.RecordBatch]:
    """The result in the batches a statement worker encodes (DuckDB's reader, BATCH_ROWS rows)."""
    return table.combine_chunks().to_batches(max_chunksize=statement_worker.BATCH_ROWS)


def wire_bytes(table: pa.Table) -> dict[str, int]:
    """Bytes of the result in each format on the wire, as the server's encoders make them."""
    batches = worker_batches(table)
    return {"Arrow": table.nbytes} | {w: len(encoder(w, table.schema.names)(batches)) for w in WIRES}


def encodings(table: pa.Table, sizes: dict[str, int]) -> list[Fetch]:
    """The server's encoding alone, in this process, of the in-process result in each format."""
    batches, names = worker_batches(table), table.schema.names

    def check(wire: str) -> Callable[[bytes], int]:
        return lambda data: table.num_rows if len(data) == sizes[wire] else -1

    return [
        Fetch(f"encoding alone (`pgcodec`, {statement_worker.BATCH_ROWS}-row batches), {w}", w,
              lambda: batches, encoder(w, names), check(w), close=lambda _: None)
        for w in WIRES
    ]  # fmt: skip


def throughput(paths: list[Fetch], rounds: int) -> None:
    for r in range(rounds):
        for i in range(len(paths)):
            p = paths[(r + i) % len(paths)]
            handle = p.connect()
            try:
                gc.collect()
                t = time.perf_counter()
                result = p.fetch(handle)
                p.seconds.append(time.perf_counter() - t)
                p.rows.append(p.count(result))
                del result
            finally:
                p.close(handle)
            print(f"# round {r + 1}: {p.name}: {p.seconds[-1]:.2f} s, {p.rows[-1]:,} rows", flush=True)


# -- report ------------------------------------------------------------------------------------


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{len(os.sched_getaffinity(0))} cores ({cpu}), {mem:.1f} GiB"


def versions() -> str:
    names = ["psycopg", "psycopg2-binary", "pg8000", "asyncpg", "adbc-driver-postgresql", "connectorx",
             "SQLAlchemy"]  # fmt: skip
    found = []
    for n in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{n} {importlib.metadata.version(n)}")
    base = f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, pyarrow {pa.__version__}"
    return base + ", " + ", ".join(found)


def workers_threads() -> int:
    """DuckDB threads per statement worker, as `Server` chooses them with 4 workers."""
    return max(2, len(os.sched_getaffinity(0)) // 4)


def load() -> str:
    return "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())


def latency_table(clients: list[Client]) -> str:
    base = statistics.median(clients[0].total)
    out = [
        f"| client | connect, ms | connect to first row, ms (median of {len(clients[0].total)}) "
        "| min – max ms | vs in-process |",
        "|---|---|---|---|---|",
    ]
    for c in clients:
        med = statistics.median(c.total)
        spread = f"{min(c.total) * 1e3:,.1f} – {max(c.total) * 1e3:,.1f}"
        out.append(
            f"| {c.name} | {statistics.median(c.connect) * 1e3:,.1f} | {med * 1e3:,.1f} | {spread} "
            f"| {med / base:.2f}x |"
        )
    return "\n".join(out) + "\n"


def throughput_table(paths: list[Fetch], sizes: dict[str, int]) -> str:
    med = {p.name: statistics.median(p.seconds) for p in paths}
    base, text = med[paths[0].name], med[paths[1].name]
    out = [
        f"| path | on the wire | rows | MB | s (median of {len(paths[0].seconds)}) | min – max s | rows/s "
        "| MB/s | vs in-process | vs text |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in paths:
        s, mb = med[p.name], sizes[p.wire] / 1e6
        rows = statistics.median(p.rows)
        out.append(
            f"| {p.name} | {p.wire} | {rows:,.0f} | {mb:,.1f} | {s:.2f} | {min(p.seconds):.2f} – "
            f"{max(p.seconds):.2f} | {rows / s:,.0f} | {mb / s:,.1f} | {base / s:.3f}x | {text / s:.2f}x |"
        )
    return "\n".join(out) + "\n"


def summaries(clients: list[Client] | None, paths: list[Fetch] | None) -> None:
    """The headline figures (BENCH-SUMMARY lines): connect to first row per driver, and the binary and
    COPY paths against the text path and against in-process."""
    if clients is not None:
        drivers = [c for c in clients if c.name in ("psycopg 3", "psycopg2", "pg8000", "asyncpg")]
        ms = [statistics.median(c.total) * 1e3 for c in drivers]
        emit.summary(
            f"`dumpcat serve`: a new connection to its first row ({', '.join(c.name for c in drivers)})",
            "-",
            f"{min(ms):,.0f}-{max(ms):,.0f} ms (in-process `Catalog.open` + `sql`: "
            f"{statistics.median(clients[0].total) * 1e3:,.0f} ms)",
        )
    if paths is None:
        return
    med = {p.name: statistics.median(p.seconds) for p in paths}
    base, text = med[paths[0].name], med[paths[1].name]
    fast = [p for p in paths[2:] if not p.name.startswith(("raw socket", "encoding alone"))]
    rows = statistics.median(paths[0].rows)
    emit.summary(
        f"`dumpcat serve`, {rows:,.0f} rows: binary and COPY paths vs text (psycopg 3 default cursor)",
        ">= 2x",
        ", ".join(f"{p.name} {text / med[p.name]:.2f}x" for p in fast),
        min(text / med[p.name] for p in fast) >= 2.0,
    )
    best = min(fast, key=lambda p: med[p.name])
    emit.summary(
        "the same, vs in-process `Catalog.sql` (Arrow)",
        "-",
        f"text {base / text:.3f}x, fastest ({best.name}) {base / med[best.name]:.3f}x",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=lambda s: int(float(s)), default=1_000_000, help="default 10^6")
    ap.add_argument("--rounds", type=int, default=3, help="each runs every path once (default 3)")
    ap.add_argument("--tries", type=int, default=7, help="latency tries per round (default 7)")
    ap.add_argument("--workdir", type=Path, help="the catalog is written there once (default: a temp dir)")
    ap.add_argument("--password", action="store_true", help="serve with SCRAM (default: no password)")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args(argv)

    tmp = None if args.workdir else tempfile.mkdtemp(prefix="bench_serve_clients_")
    workdir = args.workdir or Path(tmp)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        path, how = build_catalog(workdir, args.rows)
        print(f"# catalog: {args.rows:,} stats rows, {how}", flush=True)
        limits = {"max_rows": args.rows + 1, "max_result_bytes": 1 << 36, "query_timeout": 600.0}
        cat = Catalog.open(path)
        table = cat.sql(ALL_ROWS)  # warm, and the result every path must return
        sizes = wire_bytes(table)
        load_before = load()
        server = ServerProcess(path, limits, PASSWORD if args.password else None)
        try:
            ep = server.endpoint
            clients = latency(ep, path, args.rounds, args.tries) if not args.skip_latency else None
            paths = fetches(ep, cat) + encodings(table, sizes)
            if not args.skip_throughput:
                throughput(paths, args.rounds)
        finally:
            server.stop()
            cat.close()
        load_after = load()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    summaries(clients, paths if not args.skip_throughput else None)
    emit.report_follows()
    print(f"- {dt.date.today().isoformat()}, {machine()}; {versions()}.")
    command = (
        f"python bench/bench_serve_clients.py --rows {args.rows} --rounds {args.rounds} --tries {args.tries}"
    )
    command += " --password" if args.password else ""
    print(f"- `{command}`; server: 4 statement workers, {workers_threads()} DuckDB thread(s) each; "
          f"load average {load_before} before, {load_after} after.")  # fmt: skip
    print()
    if clients is not None:
        print(f"`{FIRST_ROW}` (with `shape`: `{FIRST_ROW_ARRAY}`), a new connection each time:\n")
        print(latency_table(clients))
    if not args.skip_throughput:
        print(f"`{ALL_ROWS}`, {args.rows:,} rows:\n")
        print(throughput_table(paths, sizes))
        bad = [p.name for p in paths if set(p.rows) != {paths[0].rows[0]}]
        if bad:
            print(f"ROW COUNT MISMATCH against in-process: {', '.join(bad)}")
            return 1
        print("every path returned the in-process row count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
