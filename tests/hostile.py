"""Hostile statements a client of `dumpcat serve` may send, by class, and helpers to run a real
`dumpcat serve` process and fingerprint what it must never change.

Every statement must fail. `{cat}` is the catalog directory and `{cwd}` the server's working
directory, filled in by `statements()`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

# Table functions that read, list or describe files, or run SQL text, or show the engine's state.
FILE_FUNCTIONS = [
    "read_csv", "read_csv_auto", "read_parquet", "parquet_scan", "read_json", "read_json_auto",
    "read_ndjson", "read_json_objects", "read_text", "read_blob", "glob", "parquet_metadata",
    "parquet_schema", "parquet_file_metadata", "parquet_kv_metadata", "sniff_csv", "iceberg_scan",
    "delta_scan", "sqlite_scan",
]  # fmt: skip
TARGETS = ["/etc/passwd", "{cat}/snapshot.json", "{cat}/data/**/*.parquet", "data/x.parquet"]

# Ways to hide a table function call `F(P)` from a text filter.
WRAPPERS = [
    "SELECT * FROM {f}('{p}')",
    "select * from {F}('{p}')",
    "SELECT * FROM \"{f}\"('{p}')",
    "SELECT * FROM main.{f}('{p}')",
    "SELECT * FROM system.main.{f}('{p}')",
    "WITH x AS (SELECT * FROM {f}('{p}')) SELECT * FROM x",
    "SELECT (SELECT count(*) FROM {f}('{p}'))",
    "SELECT * FROM stats WHERE EXISTS (SELECT 1 FROM {f}('{p}'))",
    "SELECT * FROM stats, LATERAL (SELECT * FROM {f}('{p}')) t",
    "SELECT list_transform([1], x -> (SELECT count(*) FROM {f}('{p}')))",
    "SELECT list_transform([1], lambda x: (SELECT count(*) FROM {f}('{p}')))",
    "SELECT op_name FROM stats UNION ALL SELECT NULL FROM {f}('{p}')",
    "/* SELECT 1 */ SELECT * FROM {f} /* ( */ ('{p}') -- trailing",
    "FROM {f}('{p}')",
    "SELECT * FROM (FROM {f}('{p}'))",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r, {f}('{p}') WHERE n < 2) SELECT * FROM r",
]

STATEMENTS = [
    # files in FROM (replacement scans)
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM '{cat}/snapshot.json'",
    'SELECT * FROM "{cat}/data/**/*.parquet"',
    "SELECT * FROM 'x.csv'",
    "SELECT * FROM '*.parquet'",
    "SELECT * FROM '~/.bashrc'",
    "SELECT * FROM 'file:///etc/passwd'",
    "FROM '{cat}/dumpcat.json'",
    # writes, files, extensions, settings
    "COPY stats TO 'out.csv'",
    "COPY stats TO '{cwd}/out.parquet' (FORMAT parquet)",
    "COPY (SELECT 1) TO '{cat}/data/evil.parquet'",
    "COPY stats FROM '/etc/passwd'",
    "EXPORT DATABASE '{cwd}/exported'",
    "IMPORT DATABASE '{cat}'",
    "ATTACH '{cwd}/x.duckdb' AS x",
    "ATTACH ':memory:' AS m",
    "ATTACH '{cat}/data' AS d (TYPE parquet)",
    "DETACH catalog_views",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "LOAD '{cwd}/evil.duckdb_extension'",
    "SET memory_limit = '100GB'",
    "SET enable_external_access = true",
    "SET GLOBAL lock_configuration = false",
    "SET allowed_directories = ['/']",
    "SET VARIABLE x = 1",
    "RESET lock_configuration",
    "USE memory",
    "PRAGMA enable_profiling",
    "PRAGMA database_list",
    "PRAGMA memory_limit = '100GB'",
    "CALL pragma_version()",
    "CALL enable_logging()",
    "CHECKPOINT",
    "VACUUM",
    "ANALYZE",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    # DDL and DML, directly or hidden
    "CREATE TABLE t AS SELECT 1",
    "CREATE TEMP TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "CREATE OR REPLACE VIEW stats AS SELECT 1 AS row_id",
    "CREATE OR REPLACE VIEW main.stats AS SELECT 1 AS row_id",
    "CREATE TEMP VIEW stats AS SELECT 1 AS row_id",
    "CREATE MACRO m(x) AS x",
    "CREATE OR REPLACE MACRO current_setting(x) AS 'on'",
    "CREATE OR REPLACE MACRO dumpcat_pg.current_setting(x) AS 'pwned'",
    "CREATE SCHEMA s",
    "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 's')",
    "CREATE TYPE mood AS ENUM ('a')",
    "CREATE SEQUENCE q",
    "CREATE INDEX i ON stats (row_id)",
    "DROP VIEW stats",
    "DROP SCHEMA dumpcat_pg CASCADE",
    "ALTER VIEW stats RENAME TO s2",
    "COMMENT ON VIEW stats IS 'x'",
    "INSERT INTO stats SELECT * FROM stats",
    "UPDATE stats SET nan_count = 0",
    "DELETE FROM stats",
    "TRUNCATE stats",
    "UPDATE EXTENSIONS",
    "PIVOT (FROM read_csv('/etc/passwd')) ON column0",
    # SQL run from SQL
    "SELECT * FROM query('SELECT 1')",
    "SELECT * FROM query('COPY stats TO ''x.csv''')",
    "SELECT * FROM query_table('stats')",
    "SELECT query('SELECT 1')",
    # settings and environment, quoted and qualified
    "SELECT current_setting('memory_limit')",
    "SELECT \"current_setting\"('memory_limit')",
    "SELECT main.current_setting('threads')",
    "SELECT system.main.current_setting('enable_external_access')",
    "SELECT pg_catalog.current_setting('temp_directory')",
    "SELECT CURRENT_SETTING('lock_configuration')",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM duckdb_temporary_files()",
    "SELECT path FROM duckdb_databases()",
    "SELECT getenv('HOME')",
    "SELECT \"getenv\"('PATH')",
    # multi-statement
    "SELECT 1; COPY stats TO 'x.csv'",
    "SELECT 1;DROP VIEW stats",
    "SET application_name = 'a'; ATTACH 'x.duckdb' AS x",
    "BEGIN; CREATE TABLE t (a INT); COMMIT",
    "SELECT count(*) FROM stats; SELECT * FROM read_text('/etc/hostname')",
    # EXPLAIN and its options
    "EXPLAIN COPY stats TO 'x.csv'",
    "EXPLAIN ANALYZE COPY stats TO 'x.csv'",
    "EXPLAIN (FORMAT JSON) SELECT 1",
    "EXPLAIN (FORMAT ')') COPY stats TO 'x.csv'",
    "EXPLAIN (FORMAT ')', ANALYZE) CREATE OR REPLACE VIEW stats AS SELECT 1",
    "EXPLAIN /* ) */ COPY stats TO 'x.csv'",
    "EXPLAIN ANALYZE (FORMAT json) SELECT * FROM read_text('/etc/hostname')",
    "EXPLAIN SELECT * FROM read_csv('/etc/passwd')",
    "explain analyze select * from glob('/*')",
    "EXPLAIN EXPLAIN SELECT 1",
    "EXPLAIN CREATE TABLE t AS SELECT 1",
    "EXPLAIN ANALYZE SELECT current_setting('memory_limit')",
    # casing, comments, whitespace, unicode
    "cOpY stats TO 'x.csv'",
    "/**/COPY stats TO 'x.csv'",
    "-- a comment\nCOPY stats TO 'x.csv'",
    "\ufeffCOPY stats TO 'x.csv'",
    "COPY\tstats\nTO 'x.csv'",
    "SELECT * FROM READ_CSV('/etc/passwd')",
    "SELECT * FROM \"READ_CSV\"('/etc/passwd')",
    "SELECT * FROM read_csv(U&'\\002fetc\\002fpasswd')",
    "SELECT * FROM read_csv('/etc/' || 'passwd')",
    "SELECT * FROM read_csv(chr(47) || 'etc/passwd')",
    "SELECT * FROM read_csv(['/etc/passwd', '/etc/hostname'])",
    "SELECT * FROM ｒｅａｄ_csv('/etc/passwd')",
    "SELECT * FROM read\u200b_csv('/etc/passwd')",
    "SELECT list_transform(['/etc/passwd'], p -> (SELECT count(*) FROM read_text(p)))",
    "SELECT list_transform(['/etc/passwd'], lambda p: (SELECT count(*) FROM read_text(p)))",
    "SELECT list_reduce(['/etc/passwd'], lambda a, b: (SELECT content FROM read_text(a)))",
    "SELECT * FROM stats WHERE op_name IN (SELECT content FROM read_text('/etc/hostname'))",
    "SELECT (FROM read_text('/etc/hostname'))",
]

# Prepared statements with parameters: (text with %s, parameters).
PREPARED = [
    ("SELECT * FROM read_csv(%s)", ["/etc/passwd"]),
    ("SELECT * FROM read_text(%s)", ["/etc/hostname"]),
    ("SELECT * FROM glob(%s)", ["/*"]),
    ("SELECT * FROM query(%s)", ["SELECT 1"]),
    ("SELECT current_setting(%s)", ["memory_limit"]),
    ('SELECT "current_setting"(%s)', ["memory_limit"]),
    ("SELECT * FROM stats WHERE op_name = (SELECT content FROM read_text(%s))", ["/etc/hostname"]),
    ("SELECT * FROM read_parquet(%s)", ["{cat}/data/**/*.parquet"]),
]


def statements(cat: Path, cwd: Path) -> list[str]:
    out = [w.format(f=f, F=f.upper(), p=p) for f in FILE_FUNCTIONS for w in WRAPPERS[:1] for p in TARGETS[:1]]
    out += [w.format(f="read_text", F="READ_TEXT", p=p) for w in WRAPPERS for p in TARGETS]
    out += [w.format(f="glob", F="GLOB", p="{cat}/*") for w in WRAPPERS]
    out += STATEMENTS
    return [s.replace("{cat}", str(cat)).replace("{cwd}", str(cwd)) for s in out]


def prepared(cat: Path) -> list[tuple[str, list]]:
    return [(q, [str(p).replace("{cat}", str(cat)) for p in params]) for q, params in PREPARED]


def fingerprint(folder: Path) -> dict[str, tuple[int, str, int]]:
    """Every file under a folder: relative path -> (size, sha256, mode)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(folder))] = (st.st_size if p.is_file() else 0, digest, st.st_mode)
    return out


class ServeProcess:
    """`dumpcat serve` as a real process (working directory `cwd`), stopped with SIGTERM."""

    def __init__(self, cat: Path, cwd: Path, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "catalog.cli", "serve", str(cat), "--port", "0", *args],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        self.port = 0
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            m = re.search(r"on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if not self.port:
            self.proc.kill()
            raise RuntimeError(f"dumpcat serve did not start: {line}{self.proc.stderr.read()}")
        self.log: list[str] = []
        # Keep reading its log so that the server never blocks on a full pipe.
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def dsn(self, **kw) -> dict:
        return dict(host="127.0.0.1", port=self.port, user="u", dbname="dumpcat", autocommit=True, **kw)

    def tree_rss(self) -> int:
        """Resident memory of the server and all its worker processes, in bytes."""
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RawClient:
    """A bare protocol-3 client (trust auth) for what drivers never send: messages one by one,
    replies read up to ReadyForQuery."""

    def __init__(self, port: int, timeout: float = 30) -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        params = b"user\x00probe\x00database\x00dumpcat\x00\x00"
        self.sock.sendall(struct.pack("!ii", len(params) + 8, 196608) + params)
        self.buf = b""
        self.login = self.until_ready()

    def send(self, *messages: bytes) -> None:
        """Send messages given as tag byte + body."""
        for m in messages:
            self.sock.sendall(m[:1] + struct.pack("!i", len(m) - 1 + 4) + m[1:])

    def until_ready(self) -> list[tuple[bytes, bytes]] | None:
        """Replies up to and including the next ReadyForQuery; None if the server closed first."""
        out = []
        while True:
            while len(self.buf) >= 5 and len(self.buf) >= 1 + struct.unpack("!i", self.buf[1:5])[0]:
                n = struct.unpack("!i", self.buf[1:5])[0]
                tag, body, self.buf = self.buf[:1], self.buf[5 : 1 + n], self.buf[1 + n :]
                out.append((tag, body))
                if tag == b"Z":
                    return out
            chunk = self.sock.recv(65536)
            if not chunk:
                return out or None
            self.buf += chunk

    def exchange(self, *messages: bytes) -> list[tuple[bytes, bytes]]:
        """Send extended-protocol messages and a Sync; the replies."""
        self.send(*messages, b"S")
        replies = self.until_ready()
        assert replies is not None, "the server closed the connection"
        return replies

    def query(self, sql: str) -> list[tuple[bytes, bytes]]:
        """A simple query; the replies."""
        self.send(b"Q" + sql.encode() + b"\x00")
        replies = self.until_ready()
        assert replies is not None, "the server closed the connection"
        return replies

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
