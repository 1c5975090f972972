"""`dumpcat serve` with real PostgreSQL clients: psycopg, psql, the JDBC driver, ODBC."""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest

from catalog.server import pg_catalog, pg_translate, pgwire
from catalog.server.server import Limits, Server
from tests.conftest import TESTS, nan_log_catalog
from tests.hostile import RawClient

USER, PASSWORD = "alice", "s3cret pw"


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("srv"))


@pytest.fixture(scope="module")
def server(cat_path):
    srv = Server(cat_path, port=0, users={USER: PASSWORD}, limits=Limits(query_timeout=2, max_rows=1000))
    srv.start()
    yield srv
    srv.stop()


def connect(srv, **kw):
    args = dict(
        host="127.0.0.1", port=srv.port, user=USER, password=PASSWORD, dbname="dumpcat", autocommit=True
    )
    args.update(kw)
    return psycopg.connect(**args)


# -- pure protocol pieces ----------------------------------------------------------------------


def test_scram_rfc7677_vector():
    v = pgwire.ScramVerifier.from_password(
        "pencil", salt=__import__("base64").b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    )
    s = pgwire.ScramServer(v, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = s.first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = s.final(
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    with pytest.raises(pgwire.ScramError):
        pgwire.ScramServer(v, nonce="x").final("c=biws,r=bad,p=AAAA")


def test_md5_password():
    import hashlib

    salt = b"\x01\x02\x03\x04"
    inner = hashlib.md5(b"pwuser").hexdigest()
    good = "md5" + hashlib.md5(inner.encode() + salt).hexdigest()
    assert pgwire.md5_password_ok("user", "pw", salt, good)
    assert not pgwire.md5_password_ok("user", "other", salt, good)


def test_text_values_and_oids():
    import pyarrow as pa

    assert [pgwire.text_value(x) for x in (math.nan, math.inf, -math.inf, 1.5, True)] == [
        "NaN", "Infinity", "-Infinity", "1.5", "t"]  # fmt: skip
    assert pgwire.text_value([1, 2, None]) == "{1,2,NULL}"
    assert pgwire.text_value(["a b", 'q"']) == '{"a b","q\\""}'
    assert pgwire.oid_of(pa.list_(pa.int64())) == 1016
    assert pgwire.oid_of(pa.timestamp("us", tz="UTC")) == pgwire.TIMESTAMPTZ
    assert pgwire.oid_of(pa.float64()) == pgwire.FLOAT8


def test_translation_leaves_literals_alone():
    q = "SELECT 'pg_class::regclass' AS s FROM pg_catalog.pg_class WHERE relname OPERATOR(pg_catalog.~) '^x$'"
    out = pg_translate.translate(q)
    assert "'pg_class::regclass'" in out and "dumpcat_pg.pg_class" in out and "OPERATOR" not in out


# -- psycopg -----------------------------------------------------------------------------------


def test_psycopg_simple_and_extended(server):
    with connect(server) as c:
        rows = c.execute("SELECT op_name, nan_count, shape, max FROM stats WHERE nan_count > 0").fetchall()
        assert rows and all(isinstance(r[2], list) for r in rows)
        assert any(math.isnan(r[3]) for r in rows)
        row_id = c.execute("SELECT row_id FROM stats ORDER BY row_id LIMIT 1").fetchall()[0][0]
        got = c.execute("SELECT row_id, op_name FROM stats WHERE row_id = %s", [row_id]).fetchall()
        assert got[0][0] == row_id
        # text params, prepared statements (server-side), several types
        cur = c.cursor()
        cur.execute(
            "SELECT %s::INTEGER + 1, %s::VARCHAR, %s::DOUBLE, %s::BOOLEAN", [41, "x", 1.5, True], prepare=True
        )
        assert cur.fetchall() == [(42, "x", 1.5, True)]
        r = c.execute(
            "SELECT 'nan'::DOUBLE, 'inf'::DOUBLE, '-inf'::DOUBLE, TIMESTAMPTZ '2024-01-02 03:04:05+00', "
            "[1, 2, 3]::BIGINT[], NULL::INTEGER"
        ).fetchall()[0]
        assert math.isnan(r[0]) and r[1] == math.inf and r[2] == -math.inf
        assert (
            r[3].year == 2024 and r[3].utcoffset().total_seconds() == 0 and r[4] == [1, 2, 3] and r[5] is None
        )
        multi = c.execute("SELECT 1; SELECT 2")
        assert multi.fetchall() == [(1,)] and multi.nextset() and multi.fetchall() == [(2,)]
        assert c.execute("SHOW server_version").fetchall()[0][0].startswith("14")
        c.execute("SET application_name = 'probe'")
        assert c.execute("SHOW application_name").fetchall() == [("probe",)]
        assert ("application_name", "probe", "") in c.execute("SHOW ALL").fetchall()
        assert c.execute("SELECT version()").fetchall()[0][0].startswith("PostgreSQL")


def test_both_ways_of_reading_answer_the_same(server, cat_path):
    """The default server's workers read the catalog's files themselves where the kernel has
    Landlock; `reads="arrow"` reads through Arrow datasets. Through psycopg, every user view gives
    the same rows both ways, and a session's own temporary view works in both."""
    from catalog.server import landlock

    assert server.worker_reads() == ({"duckdb"} if landlock.abi_version() >= 1 else {"arrow"})
    with Server(cat_path, port=0, users={USER: PASSWORD}, reads="arrow") as arrow:
        assert arrow.worker_reads() == {"arrow"}
        with connect(server) as a, connect(arrow) as b:
            views = [r[0] for r in a.execute(
                "SELECT table_name FROM information_schema.views WHERE table_schema = 'public' "
                "ORDER BY table_name").fetchall()]  # fmt: skip
            assert {"stats", "tensors", "first_anomaly", "runs"} <= set(views)
            for view in views:
                q = f"SELECT * FROM {view}"
                assert sorted(map(repr, a.execute(q).fetchall())) == sorted(
                    map(repr, b.execute(q).fetchall())
                ), view
            for c in (a, b):
                c.execute("CREATE TEMP VIEW mine AS SELECT op_name FROM stats WHERE nan_count > 0")
            q = "SELECT count(*) FROM mine"
            assert a.execute(q).fetchall() == b.execute(q).fetchall() != [(0,)]
    with pytest.raises(ValueError, match="unknown reads"):
        Server(cat_path, port=0, reads="native")


def test_psycopg_transactions_and_errors(server):
    with connect(server, autocommit=False) as c:
        assert c.execute("SELECT count(*) FROM stats").fetchall()[0][0] > 0
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM no_such_table")
        c.rollback()
        assert c.execute("SELECT 1").fetchall() == [(1,)]
        with pytest.raises(psycopg.errors.SyntaxError):
            c.execute("SELEC 1")
    with connect(server) as c:  # the server is still up and serves a new session
        assert c.execute("SELECT count(*) > 0 FROM tensors").fetchall() == [(True,)]
        # A value Python's clients cannot hold is sent as PostgreSQL sends it ('infinity', which
        # psycopg then refuses to load) or refused by the server; never a dropped link.
        try:
            c.execute("SELECT 'infinity'::TIMESTAMPTZ AS t").fetchall()
        except psycopg.DataError as exc:
            assert exc.sqlstate is not None or "infinity" in str(exc)
        assert c.execute("SELECT 1").fetchall() == [(1,)]


def _raw_session(srv, *messages: bytes) -> list[tuple[bytes, bytes]]:
    """Log in over a bare socket (trust auth), send raw protocol messages one by one, return what
    came back (type, body) until the server closes or says ReadyForQuery after the last message."""
    out: list[tuple[bytes, bytes]] = []
    with RawClient(srv.port, timeout=10) as client:
        assert client.login and client.login[-1][0] == b"Z", "login failed"
        out += client.login
        for m in messages:
            client.send(m)
            replies = client.until_ready()
            out += replies or []
            if not replies or replies[-1][0] != b"Z":
                break
    return out


def test_malformed_client_messages_get_errors_and_the_server_stays_up(trust_server):
    bad_utf8 = _raw_session(trust_server, b"QSELECT '\xff\xfe'\x00", b"QSELECT 42\x00")
    errors = [body for tag, body in bad_utf8 if tag == b"E"]
    assert len(errors) == 1 and b"22021" in errors[0]
    assert any(tag == b"D" and b"42" in body for tag, body in bad_utf8)  # the session went on
    for broken in (b"Pstmt-without-terminators", b"B\x00\x00\x00\x05", b"E"):
        replies = _raw_session(trust_server, broken)
        fatal = [body for tag, body in replies if tag == b"E"]
        assert fatal and b"08P01" in fatal[-1] and b"FATAL" in fatal[-1], replies[-3:]
    with psycopg.connect(host="127.0.0.1", port=trust_server.port, dbname="dumpcat", user="x") as c:
        assert c.execute("SELECT 1").fetchall() == [(1,)]


def test_auth(server, cat_path):
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        connect(server, password="wrong")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        connect(server, user="mallory")
    with Server(cat_path, port=0, users={USER: PASSWORD}, auth="md5") as md5srv, connect(md5srv) as c:
        assert c.execute("SELECT 1").fetchall() == [(1,)]
    with pytest.raises(ValueError, match="needs --user"):
        Server(cat_path, host="0.0.0.0", port=0)


def test_tls(server, cat_path, tmp_path):
    if not shutil.which("openssl"):
        pytest.fail("openssl not installed: install the Debian packages .ci/run installs")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True)  # fmt: skip
    tls = (str(cert), str(key))
    with (
        Server(cat_path, port=0, users={USER: PASSWORD}, tls=tls) as srv,
        connect(srv, sslmode="require") as c,
    ):
        assert c.execute("SELECT count(*) FROM stats").fetchall()[0][0] > 0
        assert c.pgconn.ssl_in_use


# -- containment -------------------------------------------------------------------------------

HOSTILE = [
    ("COPY stats TO 'out.csv'", "42501"),
    ("SELECT * FROM read_csv('/etc/passwd')", "42501"),
    ("SELECT * FROM read_parquet('/anywhere/x.parquet')", "42501"),
    ("SELECT * FROM '/etc/passwd'", "42501"),
    ("SELECT * FROM glob('/*')", "42501"),
    ("SELECT content FROM read_text('/etc/hostname')", "42501"),
    ("SELECT getenv('HOME')", "42501"),
    ("SELECT * FROM query('SELECT 1')", "42501"),
    ("ATTACH 'x.duckdb' AS x", "42501"),
    ("INSTALL httpfs", "42501"),
    ("LOAD httpfs", "42501"),
    ("CREATE TABLE t AS SELECT 1", "42501"),
    ("DROP VIEW stats", "42501"),
    ("INSERT INTO stats SELECT * FROM stats", "42501"),
    ("PRAGMA enable_profiling", "42501"),
    ("EXPLAIN ANALYZE COPY stats TO 'x'", "42501"),
    ("SELECT * FROM (SELECT * FROM read_json('/etc/x.json'))", "42501"),
]


@pytest.mark.parametrize(("query", "sqlstate"), HOSTILE)
def test_hostile_statements_are_refused(server, query, sqlstate):
    with connect(server) as c:
        with pytest.raises(psycopg.Error) as err:
            c.execute(query)
        assert err.value.sqlstate == sqlstate
        assert c.execute("SELECT count(*) FROM stats").fetchall()[0][0] > 0  # session still usable


def test_pivot_without_in_is_refused_with_its_reason(server):
    """DuckDB runs a PIVOT without an IN list as several statements (the guard once said "MULTI
    statements are not allowed"); the server's workers share the guard's reason. With an IN list
    it runs."""
    with connect(server) as c:
        with pytest.raises(psycopg.Error) as err:
            c.execute("PIVOT stats ON io USING count(*)")
        assert err.value.sqlstate == "0A000"
        assert str(err.value).startswith(
            "PIVOT without an IN list is not supported: DuckDB needs a first pass"
        )
        rows = c.execute("PIVOT tensors ON io IN ('input', 'output') USING count(*) GROUP BY run").fetchall()
        counts = c.execute(
            "SELECT run, count(*) FILTER (WHERE io = 'input'), count(*) FILTER (WHERE io = 'output') "
            "FROM tensors GROUP BY run"
        ).fetchall()
        assert rows == counts and rows[0][1] + rows[0][2] == 180


def test_timeout_row_cap_and_cancel(server):
    with connect(server) as c:
        t0 = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match="timeout"):
            c.execute("SELECT sum(hash(i)) FROM range(100000000000) t(i)")
        assert time.monotonic() - t0 < 10
        with pytest.raises(psycopg.Error) as err:
            c.execute("SELECT * FROM range(5000)")
        assert err.value.sqlstate == "54000"
        assert len(c.execute("SELECT * FROM range(1000)").fetchall()) == 1000
    with connect(server) as c:
        done = threading.Event()

        def cancel_until_done() -> None:  # a cancel that lands before the query starts is lost
            while not done.wait(0.2):
                c.cancel_safe()

        canceller = threading.Thread(target=cancel_until_done)
        canceller.start()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled, match="user request"):
                c.execute("SELECT sum(hash(i)) FROM range(100000000000) t(i)")
        finally:
            done.set()
            canceller.join()
        assert c.execute("SELECT 1").fetchall() == [(1,)]


# -- other real clients ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trust_server(cat_path):
    with Server(cat_path, port=0) as srv:
        yield srv


def test_psql_dt_and_d(trust_server):
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql (postgresql-client) not installed: install the Debian packages .ci/run installs")
    env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
    cmd = [psql, "-h", "127.0.0.1", "-p", str(trust_server.port), "-U", "u", "-d", "dumpcat", "-X"]
    out = subprocess.run([*cmd, "-c", r"\dv", "-c", r"\d stats", "-c", "SELECT count(*) AS n FROM stats"],
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "public | stats" in out.stdout and "view" in out.stdout
    assert 'View "public.stats"' in out.stdout
    assert " nan_count " in out.stdout and "bigint" in out.stdout and "bigint[]" in out.stdout
    assert "ERROR" not in out.stderr


def test_jdbc_metadata_and_query(trust_server, tmp_path):
    jar = Path("/usr/share/java/postgresql.jar")
    if not (shutil.which("javac") and jar.exists()):
        pytest.fail(
            "JDK or libpostgresql-jdbc-java not installed: install the Debian packages .ci/run installs"
        )
    src = TESTS / "jdbc" / "CatalogProbe.java"
    subprocess.run(["javac", "-d", tmp_path, src], check=True, timeout=120)
    url = f"jdbc:postgresql://127.0.0.1:{trust_server.port}/dumpcat"
    out = subprocess.run(["java", "-cp", f"{tmp_path}:{jar}", "CatalogProbe", url, "u", "p"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "view stats" in lines and "view tensors" in lines
    assert "column nan_count int8" in lines and "column shape _int8" in lines
    assert any(line.startswith("row ") and "Log-op0" in line and "NaN" in line for line in lines)


def test_odbc(trust_server):
    import pyodbc

    if "PostgreSQL Unicode" not in pyodbc.drivers():
        pytest.fail("odbc-postgresql not installed: install the Debian packages .ci/run installs")
    con = pyodbc.connect(
        f"DRIVER={{PostgreSQL Unicode}};SERVER=127.0.0.1;PORT={trust_server.port};"
        "DATABASE=dumpcat;UID=u;PWD=p",
        autocommit=True,
    )
    try:
        cur = con.cursor()
        rows = cur.execute(
            "SELECT op_name, nan_count, max, shape FROM stats WHERE nan_count > ? LIMIT 3", 0
        ).fetchall()
        assert rows and math.isnan(rows[0][2]) and rows[0][3].startswith("{")
        assert "stats" in [t.table_name for t in cur.tables(tableType="VIEW")]
        assert "nan_count" in [c.column_name for c in cur.columns(table="stats")]
    finally:
        con.close()


def test_metadata_queries_of_bi_tools(trust_server):
    with connect(trust_server, user="u", password="p") as c:
        # Grafana's table listing (PostgreSQL data source)
        # Grafana's PostgreSQL data source lists tables through information_schema
        tables = c.execute(
            "SELECT quote_ident(table_name) AS table FROM information_schema.tables "
            "WHERE table_schema = 'public' ORDER BY 1"
        ).fetchall()
        assert ("stats",) in tables
        cols = c.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
            ["stats"],
        ).fetchall()
        assert ("nan_count", "bigint") in cols and ("shape", "ARRAY") in cols
        # Metabase-style: namespaces and relations through pg_catalog
        rels = c.execute(
            "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON c.relnamespace = n.oid WHERE c.relkind IN ('r','v','m','p','f') AND n.nspname = 'public'"
        ).fetchall()
        assert ("public", "stats") in rels
        assert c.execute("SELECT count(*) FROM public.stats").fetchall()[0][0] > 0


# The metadata queries Grafana's PostgreSQL data source sends (its postgresMetaQuery): server
# version, TimescaleDB probe, schemas, tables (by search path and by schema), columns of a table.
_GRAFANA_ON_SEARCH_PATH = """quote_ident(table_schema) IN (
    SELECT CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
    FROM generate_series(
        array_lower(string_to_array(current_setting('search_path'),','),1),
        array_upper(string_to_array(current_setting('search_path'),','),1)
    ) as i,
    string_to_array(current_setting('search_path'),',') s
)"""
GRAFANA_QUERIES = {
    "version": "SELECT current_setting('server_version_num')::int/100 as version",
    "timescaledb": "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'",
    "schemas": """SELECT schema_name AS "name" FROM information_schema.schemata
        WHERE schema_name NOT IN ('information_schema', 'pg_catalog', 'pg_toast', '_timescaledb_cache')
        ORDER BY schema_name""",
    "tables": f"""SELECT CASE WHEN {_GRAFANA_ON_SEARCH_PATH}
            THEN quote_ident(table_name) ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
        END AS "table"
        FROM information_schema.tables
        WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog', '_timescaledb_cache')
        ORDER BY CASE WHEN {_GRAFANA_ON_SEARCH_PATH} THEN 0 ELSE 1 END, 1""",
    "tables_of_schema": """SELECT quote_ident(table_name) AS "table" FROM information_schema.tables
        WHERE quote_ident(table_schema) = 'public' ORDER BY 1""",
    "columns": f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
        FROM information_schema.columns
        WHERE CASE WHEN array_length(parse_ident('stats'),1) = 2
            THEN quote_ident(table_schema) = (parse_ident('stats'))[1]
                AND quote_ident(table_name) = (parse_ident('stats'))[2]
            ELSE quote_ident(table_name) = 'stats' AND {_GRAFANA_ON_SEARCH_PATH}
        END""",
}


def test_grafana_metadata_queries(trust_server):
    with connect(trust_server, user="grafana", password="x") as c:
        got = {name: c.execute(q).fetchall() for name, q in GRAFANA_QUERIES.items()}
    assert got["version"] == [(1400,)]
    assert got["timescaledb"] == []
    assert got["schemas"] == [("public",)]
    assert ("stats",) in got["tables"] and ("first_anomaly",) in got["tables"]
    assert got["tables_of_schema"] == got["tables"]
    assert ("nan_count", "bigint") in got["columns"] and ("op_name", "text") in got["columns"]


def test_emulated_functions_answer_with_or_without_pg_catalog(trust_server):
    """Emulated pg_catalog functions are found whether the client qualifies them or not
    (pg_total_relation_size used to work only qualified)."""
    dsn = dict(host="127.0.0.1", port=trust_server.port, dbname="dumpcat", user="x", autocommit=True)
    # What PostgreSQL answers for these (sizes are 0: the catalog's views have no storage of their own).
    calls = {
        "pg_total_relation_size(16384)": 0, "pg_relation_size(16384)": 0, "format_type(23, NULL)": "integer",
        "format_type(1016, NULL)": "bigint[]", "pg_get_userbyid(10)": pg_catalog.OWNER,
        "pg_get_expr(NULL, 0)": None, "pg_get_function_result(1)": None,
        "current_setting('server_version_num')": "140000", "current_setting('nope', true)": None,
    }  # fmt: skip
    with psycopg.connect(**dsn) as c:
        for call, expected in calls.items():
            assert c.execute(f"SELECT {call}").fetchall() == [(expected,)], call
            assert c.execute(f"SELECT pg_catalog.{call}").fetchall() == [(expected,)], call
        with pytest.raises(psycopg.Error, match='unrecognized configuration parameter "nope"'):
            c.execute("SELECT current_setting('nope')")


def test_temporary_views_belong_to_their_session(trust_server):
    """CREATE TEMP VIEW is a view of this session only (the server keeps it and gives it to the
    worker that runs each of its statements): listed in pg_temp_1, gone with DROP VIEW or the
    session; every other CREATE or DROP is still refused."""
    dsn = dict(host="127.0.0.1", port=trust_server.port, dbname="dumpcat", user="u", autocommit=True)
    with psycopg.connect(**dsn) as c, psycopg.connect(**dsn) as other:
        c.execute("CREATE TEMPORARY VIEW nans AS SELECT op_name, nan_count FROM stats WHERE nan_count > 0")
        expected = c.execute("SELECT count(*) FROM stats WHERE nan_count > 0").fetchall()
        for _ in range(6):  # whichever worker runs it
            assert c.execute("SELECT count(*) FROM nans").fetchall() == expected
        columns = c.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class r ON a.attrelid = r.oid JOIN pg_namespace n ON r.relnamespace = n.oid "
            "WHERE n.oid = pg_my_temp_schema() AND r.relname = 'nans' ORDER BY a.attnum"
        ).fetchall()
        assert columns == [("op_name", "text"), ("nan_count", "bigint")]
        with pytest.raises(psycopg.errors.UndefinedTable):
            other.execute("SELECT count(*) FROM nans")
        with pytest.raises(psycopg.errors.DuplicateTable):
            c.execute("CREATE TEMP VIEW nans AS SELECT 1")
        c.execute("CREATE OR REPLACE TEMP VIEW nans (n) AS SELECT 1")
        assert c.execute("SELECT n FROM nans").fetchall() == [(1,)]
        with pytest.raises(psycopg.errors.DuplicateTable, match="a view of the catalog"):
            c.execute("CREATE TEMP VIEW stats AS SELECT 1 AS row_id")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="DROP"):
            c.execute("DROP VIEW stats")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="CREATE"):
            c.execute("CREATE VIEW kept AS SELECT 1")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("CREATE TEMP VIEW files AS SELECT * FROM read_text('/etc/hostname')")
        c.execute("DROP VIEW nans")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT count(*) FROM nans")


def test_each_session_sees_its_own_backend_pid(trust_server):
    """Sessions share a worker's cursor, which is set to show a session only for statements
    that can read it (catalog/server/sandbox.py `reads_session`): whichever session ran last on
    the worker, pg_backend_pid() and pg_stat_activity answer the asking session's own pid."""
    from catalog.server.sandbox import reads_session

    assert all(reads_session(q) for q in ("SELECT PG_Backend_Pid()", 'SELECT "pid" FROM pg_STAT_activity',
                                          "SELECT GetVariable('x')", "FROM duckdb_variables()"))  # fmt: skip
    assert not reads_session("SELECT row_id FROM stats WHERE row_id = $1")
    dsn = dict(host="127.0.0.1", port=trust_server.port, dbname="dumpcat", user="u", autocommit=True)
    with psycopg.connect(**dsn) as a, psycopg.connect(**dsn) as b:
        for _ in range(6):  # whichever worker runs each
            for mine, theirs in ((a, b), (b, a)):
                theirs.execute("SELECT pg_backend_pid()").fetchall()
                theirs.execute("SELECT count(*) FROM stats").fetchall()
                assert mine.execute("SELECT PG_BACKEND_PID()").fetchone()[0] == mine.info.backend_pid
                theirs.execute("SELECT count(*) FROM stats").fetchall()
                assert mine.execute("SELECT pid FROM pg_stat_activity").fetchall() == [
                    (mine.info.backend_pid,)
                ]


def _parse(name: bytes, sql: str) -> bytes:
    return b"P" + name + b"\x00" + sql.encode() + b"\x00" + struct.pack("!h", 0)


def _bind(portal: bytes, name: bytes) -> bytes:
    return b"B" + portal + b"\x00" + name + b"\x00" + struct.pack("!hhh", 0, 0, 0)


def _execute(portal: bytes, limit: int = 0) -> bytes:
    return b"E" + portal + b"\x00" + struct.pack("!i", limit)


def test_pipelined_messages_are_answered_in_order_and_nothing_waits_for_a_sync(trust_server):
    """The server queues its answers and writes them together (one write per statement), but
    never keeps one back while it waits for the client: a Parse alone is answered before any
    Sync, as is a Flush; pipelined statements and a suspended portal answer in order."""
    with RawClient(trust_server.port) as raw:
        raw.send(_parse(b"s1", "SELECT 1 AS one"))
        raw.sock.settimeout(10)
        assert raw.sock.recv(5)[:1] == b"1"  # ParseComplete, with no Sync or Flush after the Parse
        raw.send(_bind(b"p1", b"s1"), b"DPp1\x00", b"H")
        got = b""
        while len(got) < 10 or len(got) < 6 + struct.unpack("!i", got[6:10])[0]:
            got += raw.sock.recv(4096)
        assert got[:1] == b"2" and got[5:6] == b"T"  # BindComplete, RowDescription: answered at the Flush
        raw.buf = got[6 + struct.unpack("!i", got[6:10])[0] :]
        assert [t for t, _ in raw.exchange(_execute(b"p1"))] == [b"D", b"C", b"Z"]
        messages = [_parse(b"s2", "SELECT range AS n FROM range(5)")]
        for i in range(3):
            messages += [_bind(b"p%d" % i, b"s2"), b"DP" + b"p%d" % i + b"\x00", _execute(b"p%d" % i, 2)]
        messages += [_execute(b"p0", 0)]
        replies = raw.exchange(*messages)
        tags = b"".join(t for t, _ in replies)
        assert tags == b"1" + b"2TDDs" * 3 + b"DDDCZ"
        assert [int(body[6:]) for t, body in replies if t == b"D"] == [0, 1, 0, 1, 0, 1, 2, 3, 4]


def test_statement_texts_sent_again_answer_as_the_first_time(trust_server):
    """A worker remembers what splitting and classifying a text gave (statement_worker `_memo`):
    the same text sent again, unprepared, answers the same, a refused one is refused each time,
    and a command's inner query (DECLARE) still runs."""
    dsn = dict(host="127.0.0.1", port=trust_server.port, dbname="dumpcat", user="u", autocommit=True)
    with psycopg.connect(**dsn) as c:
        first = c.execute(
            "SELECT op_name FROM stats WHERE nan_count > %s ORDER BY row_id", [0], prepare=False
        )
        rows = first.fetchall()
        for _ in range(8):  # whichever worker runs it
            again = c.execute(
                "SELECT op_name FROM stats WHERE nan_count > %s ORDER BY row_id", [0], prepare=False
            )
            assert again.fetchall() == rows
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT * FROM read_text('/etc/hostname')", prepare=False)
            with c.transaction():
                c.execute(
                    "DECLARE cur CURSOR FOR SELECT op_name FROM stats WHERE nan_count > 0 ORDER BY row_id"
                )
                assert c.execute("FETCH ALL FROM cur").fetchall() == rows


def test_statements_are_submitted_once_and_streamed():
    """The worker hands a classified statement to DuckDB's own submit call (bound once, not
    through `sql()`'s lazy relation, which binds it twice): that call exists in this DuckDB, it
    streams, takes positional parameters and answers every kind of statement the guard lets
    through as the relation path does."""
    import duckdb

    from catalog.server import statement_worker

    assert statement_worker._seam_submit() is not None, "DuckDB's submit call moved: statements bind twice"
    cur = duckdb.connect().cursor()
    reader = statement_worker.stream_reader(cur, "SELECT range AS n FROM range(5000) WHERE range >= $1", [10])
    batches = list(reader)
    assert len(batches) > 1 and sum(b.num_rows for b in batches) == 4990
    kinds = ("SELECT 1 WHERE false", "FROM range(3)", "VALUES (1, 'a')", "WITH t AS (SELECT 1 AS a) FROM t",
             "DESCRIBE SELECT 1 AS a", "SUMMARIZE SELECT 1 AS a", "EXPLAIN SELECT 1")  # fmt: skip
    for query in kinds:
        expected = cur.sql(query).to_arrow_reader(statement_worker.BATCH_ROWS).read_all()
        assert statement_worker.stream_reader(cur, query, None).read_all().equals(expected), query
