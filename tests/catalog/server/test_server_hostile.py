"""A hostile client against `dumpcat serve`: 200+ statements that must all fail, through psycopg,
psql and JDBC, leaving the catalog byte-identical, the server's folder empty and every other
session unaffected; and the same statements straight at the engine with the guard bypassed, where
the engine alone must hold."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from catalog import guard
from catalog.api import Catalog
from catalog.server import landlock
from catalog.server.sandbox import ContainedEngine, build_views_database
from tests.conftest import REPO, TESTS, nan_log_catalog
from tests.hostile import ServeProcess, fingerprint, prepared, statements

# What a refused or failed statement may answer: refusals (42501, 0A000), syntax (42601), too
# complex (54001), the PostgreSQL emulation's "unrecognized configuration parameter" (22023), no
# such table (42P01: the zero-width-space trick).
SQLSTATES = {
    "42501",
    "0A000",
    "42601",
    "54001",
    "22023",
    "42P01",
    "42704",
    "42P07",
}  # 42P07: a temporary view named like a catalog view
BYSTANDER_QUERIES = [
    "SELECT count(*) FROM stats",
    "SELECT row_id, op_name, nan_count, max FROM stats ORDER BY row_id",
    "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary ORDER BY view_name",
    "SELECT current_setting('server_version_num')",
    "SELECT * FROM first_anomaly",
]


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def serve(cat, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("serve-cwd")
    srv = ServeProcess(cat, cwd, "--query-timeout", "10")
    yield srv, cwd
    srv.stop()


def bystander_view(c: psycopg.Connection) -> list:
    return [c.execute(q).fetchall() for q in BYSTANDER_QUERIES]


def test_the_suite_is_large_and_covers_every_class(cat, tmp_path):
    stmts = statements(cat, tmp_path)
    assert len(stmts) + len(prepared(cat)) >= 150
    text = "\n".join(stmts).upper()
    for word in ("COPY", "EXPORT", "ATTACH", "INSTALL", "LOAD", "SET", "PRAGMA", "CALL", "EXPLAIN (",
                 "WITH ", "->", "MACRO", "CURRENT_SETTING", "/*", "--", "; "):  # fmt: skip
        assert word in text, word


# Harmless to the guard, refused by the engine: a zero-width space splits `read_csv` into a table
# `read` with an alias, a table that does not exist.
ENGINE_ONLY = {"SELECT * FROM read\u200b_csv('/etc/passwd')"}


def test_the_guard_refuses_every_statement(cat, tmp_path):
    passed = []
    for sql in statements(cat, tmp_path):
        try:
            guard.classify_query(sql)
            passed.append(sql)
        except guard.Refused as refused:
            assert str(refused), sql
    assert set(passed) == ENGINE_ONLY


def engine_attack(cat: Path, views: Path, work: Path, *, native: bool) -> list[str]:
    """Every statement straight at a contained engine in this process (working directory `work`),
    no guard; returns what went wrong (nothing when the engine held)."""
    os.chdir(work)
    before = fingerprint(cat)
    engine = ContainedEngine(cat, views, native=native)
    other = engine.cursor(2)
    baseline = [other.sql(q.replace("current_setting('server_version_num')", "42")).fetchall()
                for q in BYSTANDER_QUERIES]  # fmt: skip
    settings = other.sql("SELECT name, value FROM duckdb_settings() ORDER BY name").fetchall()
    secret_texts = [Path("/etc/passwd").read_text()[:20], (cat / "snapshot.json").read_text()[:20]]
    problems, ran = [], []
    for sql in statements(cat, work):
        cur = engine.cursor(1)
        try:
            rel = cur.sql(sql)
            rows = rel.fetchall() if rel is not None else []
        except Exception:
            continue
        ran.append(sql)
        problems += [f"read a secret: {sql}" for secret in secret_texts if secret in repr(rows)]
    if fingerprint(cat) != before:
        problems.append("the catalog changed")
    if list(work.iterdir()):
        problems.append(f"files in the working directory: {sorted(p.name for p in work.iterdir())}")
    after = [other.sql(q.replace("current_setting('server_version_num')", "42")).fetchall()
             for q in BYSTANDER_QUERIES]  # fmt: skip
    if repr(after) != repr(baseline):  # repr: NaN statistics compare equal
        problems.append("another session's results changed")
    if other.sql("SELECT name, value FROM duckdb_settings() ORDER BY name").fetchall() != settings:
        problems.append("a setting changed")
    # What the engine let through is harmless: temporary objects of session 1, builtin LOAD, reads.
    writes = ("COPY", "ATTACH", "EXPORT", "INSTALL")
    problems += [f"ran: {s}" for s in ran if s.upper().lstrip("\ufeff").startswith(writes)]
    engine.close()
    return problems


def _in_a_read_only_worker(function: str, *args: str) -> list[str]:
    """`function(*args)` of this module in a new process made unable to write any file, as a
    statement worker that reads the catalog itself is (catalog/server/landlock.py)."""
    code = (
        "import json, sys; from catalog.server import landlock; why = landlock.deny_writes(); "
        "assert why is None, why; from tests.catalog.server import test_server_hostile as t; "
        f"print(json.dumps(t.{function}(*sys.argv[1:])))"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def _needs_landlock() -> None:
    """Where the kernel has no Landlock the server never lets DuckDB read files (it reads through
    Arrow datasets, the other case of these tests), so there is nothing of this kind to test."""
    if landlock.abi_version() < 1:
        pytest.skip("this kernel has no Landlock: every worker reads through Arrow datasets")


def _native_attack(cat: str, views: str, work: str) -> list[str]:
    return engine_attack(Path(cat), Path(views), Path(work), native=True)


@pytest.mark.parametrize("reads", ["arrow", "duckdb"])
def test_the_engine_alone_holds_with_the_guard_bypassed(cat, tmp_path, reads):
    """Every statement straight at the contained engine, no guard: whatever runs reads no file
    outside the catalog's data, writes nothing, changes no setting and touches no other session.
    Both ways a worker reads: Arrow datasets (DuckDB opens no file), and DuckDB reading the
    catalog's data folder itself, in a process the kernel keeps from writing (as a worker is)."""
    work = tmp_path / "cwd"
    work.mkdir()
    views = build_views_database(tmp_path)
    if reads == "arrow":
        here = os.getcwd()
        try:
            assert engine_attack(cat, views, work, native=False) == []
        finally:
            os.chdir(here)
    else:
        _needs_landlock()
        assert _in_a_read_only_worker("_native_attack", str(cat), str(views), str(work)) == []


def _writes(cat: str, views: str) -> list[str]:
    """What a native engine does with statements that write inside the data folder it may read."""
    engine = ContainedEngine(cat, views, native=True)
    cur = engine.cursor(1)
    outcome = []
    copy = f"COPY (SELECT 1 AS x) TO '{cat}/data/evil.csv'"
    for sql in (copy, f"ATTACH '{cat}/data/evil.duckdb' AS e (READ_WRITE)"):
        try:
            cur.execute(sql)
            outcome.append("written")
        except Exception as exc:
            outcome.append(str(exc).splitlines()[0])
    try:
        cur.sql("SELECT * FROM read_text('/etc/passwd')").fetchall()
        outcome.append("read /etc/passwd")
    except Exception as exc:
        outcome.append(str(exc).splitlines()[0])
    engine.close()
    return outcome


def test_the_kernel_is_the_wall_duckdb_reading_files_needs(tmp_path):
    """DuckDB allowed to read the data folder may also write there: the control, in this process,
    writes both files. In a worker made read-only the kernel refuses both; a file outside the
    folder is DuckDB's own refusal in both."""
    _needs_landlock()
    path = nan_log_catalog(tmp_path)
    views = build_views_database(tmp_path)
    control = _writes(str(path), str(views))
    assert control[:2] == ["written", "written"], control
    assert control[2].startswith('Permission Error: Cannot access file "/etc/passwd"')
    for leftover in ("evil.csv", "evil.duckdb", "evil.duckdb.wal"):
        (path / "data" / leftover).unlink(missing_ok=True)
    before = fingerprint(path)
    walled = _in_a_read_only_worker("_writes", str(path), str(views))
    assert all("Permission denied" in line for line in walled[:2]), walled
    assert walled[2] == control[2]
    assert fingerprint(path) == before


def test_psycopg_every_statement_fails_and_nothing_changes(cat, serve):
    srv, cwd = serve
    before = fingerprint(cat)
    with psycopg.connect(**srv.dsn()) as bystander, psycopg.connect(**srv.dsn()) as attacker:
        baseline = bystander_view(bystander)
        failures = []
        for sql in statements(cat, cwd):
            try:
                attacker.execute(sql).fetchall()
                failures.append(f"ran: {sql}")
            except psycopg.OperationalError as exc:
                pytest.fail(f"connection lost on {sql!r}: {exc}")
            except psycopg.Error as exc:
                if exc.sqlstate not in SQLSTATES or not str(exc).strip():
                    failures.append(f"{exc.sqlstate} {exc}: {sql}")
            if attacker.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                attacker.execute("ROLLBACK")  # "BEGIN; <refused>; COMMIT" leaves it open, as in PostgreSQL
            assert attacker.execute("SELECT 1").fetchall() == [(1,)]
        for sql, params in prepared(cat):
            with pytest.raises(psycopg.Error) as err:
                attacker.execute(sql, params, prepare=True).fetchall()
            assert err.value.sqlstate in SQLSTATES, (sql, err.value)
        assert not failures, failures
        assert repr(bystander_view(bystander)) == repr(baseline)
    assert fingerprint(cat) == before
    assert list(cwd.iterdir()) == []


def test_refusals_name_what_was_refused(serve, cat):
    srv, _cwd = serve
    expect = {
        "COPY stats TO 'x.csv'": ("42501", "COPY"),
        "ATTACH 'x.duckdb' AS x": ("42501", "ATTACH"),
        "LOAD httpfs": ("42501", "LOAD"),
        "SET memory_limit = '1TB'": ("42501", "memory_limit"),
        "SELECT * FROM read_text('/etc/hostname')": ("42501", "read_text"),
        # the emulated current_setting answers from PostgreSQL's fixed list, as PostgreSQL would
        "SELECT \"current_setting\"('threads')": ("42704", "threads"),
        "EXPLAIN (FORMAT json) SELECT 1": ("0A000", "EXPLAIN options"),
        "DROP VIEW stats": ("42501", "DROP"),
        "CREATE MACRO m(x) AS x": ("42501", "CREATE"),
        "PREPARE p AS SELECT 1": ("0A000", "PREPARE"),
    }
    with psycopg.connect(**srv.dsn()) as c:
        for sql, (state, word) in expect.items():
            with pytest.raises(psycopg.Error) as err:
                c.execute(sql)
            assert err.value.sqlstate == state and word in str(err.value), (sql, err.value)


def test_psql_every_statement_fails(cat, serve):
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql (postgresql-client) not installed: install the Debian packages .ci/run installs")
    srv, cwd = serve
    before = fingerprint(cat)
    stmts = statements(cat, cwd)
    cmd = [psql, "-h", "127.0.0.1", "-p", str(srv.port), "-U", "u", "-d", "dumpcat", "-X", "-q"]
    for sql in stmts:
        cmd += ["-c", sql]
    cmd += ["-c", "SELECT 'still here' AS alive"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={"PGCONNECT_TIMEOUT": "10"})
    assert out.stderr.count("ERROR:") == len(stmts), out.stderr[-2000:]
    assert "still here" in out.stdout
    assert fingerprint(cat) == before
    assert list(cwd.iterdir()) == []


def test_jdbc_every_statement_fails(cat, serve, tmp_path):
    jar = Path("/usr/share/java/postgresql.jar")
    if not (shutil.which("javac") and jar.exists()):
        pytest.fail(
            "JDK or libpostgresql-jdbc-java not installed: install the Debian packages .ci/run installs"
        )
    srv, cwd = serve
    before = fingerprint(cat)
    stmts = [s for s in statements(cat, cwd)]
    listing = tmp_path / "statements.hex"
    listing.write_text("\n".join(s.encode().hex() for s in stmts) + "\n")
    src = TESTS / "jdbc" / "HostileProbe.java"
    subprocess.run(["javac", "-d", tmp_path, src], check=True, timeout=120)
    url = f"jdbc:postgresql://127.0.0.1:{srv.port}/dumpcat"
    out = subprocess.run(["java", "-cp", f"{tmp_path}:{jar}", "HostileProbe", url, "u", "p", str(listing)],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "alive"
    results = lines[:-1]
    assert len(results) == 2 * len(stmts)
    ran = [stmts[i // 2] for i, r in enumerate(results) if not r.startswith("err ")]
    assert not ran, ran[:5]
    assert fingerprint(cat) == before
    assert list(cwd.iterdir()) == []


def test_catalog_sql_refuses_what_the_server_refuses(cat, tmp_path):
    from catalog import QueryRefused

    c = Catalog.open(cat)
    c.sql("SELECT 1")  # opening may write the snapshot's views database (views/): dumpcat's, not the user's
    before = fingerprint(cat)
    for sql in ["DROP VIEW stats", "CREATE TABLE t AS SELECT 1", "", " ; ", "SET threads = 1",
                f"COPY stats TO '{tmp_path}/x.csv'", "SELECT * FROM read_text('/etc/hostname')",
                "SELECT 1; SELECT 2", "ATTACH ':memory:' AS m"]:  # fmt: skip
        with pytest.raises(QueryRefused) as refused:
            c.sql(sql)
        assert refused.value.sqlstate in SQLSTATES and str(refused.value), sql
    assert c.sql("SELECT count(*) AS n FROM stats").column(0)[0].as_py() > 0
    assert fingerprint(cat) == before and list(tmp_path.iterdir()) == []
