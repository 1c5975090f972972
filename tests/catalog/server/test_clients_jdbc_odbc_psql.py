"""Conformance of `dumpcat serve` with three real PostgreSQL clients: the JDBC driver's DatabaseMetaData
(tests/jdbc/MetadataProbe.java), psqlODBC through pyodbc, and psql (backslash commands, expanded output,
tab completion under a pseudo-terminal).

Every relation of the catalog is a view, so each client must show what PostgreSQL 14 shows for a
database holding only views: the user views of `catalog.views.USER_VIEWS` as views of `public` (no
internal helper view), no tables, empty key and index metadata; and a query's rows equal
`Catalog.sql` on the same query. A failing test names the SQL the client sent and what the server
answered: the JDBC driver's own log, psqlODBC's communication log, psql's ECHO_HIDDEN (-E) echo.
"""

from __future__ import annotations

import contextlib
import getpass
import math
import os
import pty
import re
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.api import Catalog
from catalog.server.server import Server
from catalog.views import USER_VIEWS
from tests.conftest import TESTS, nan_log_catalog

USER, PASSWORD = "alice", "conformance pw"
DATABASE = "dumpcat"
# The query every client runs with one bound parameter (JDBC and ODBC both write it as `?`, as
# Catalog.sql does): 102 rows of the nan_log dump, several fetches of 10 rows for the JDBC cursor.
QUERY = (
    "SELECT row_id, iteration, op_name, io, nan_count, max, shape, has_nan FROM stats "
    "WHERE nan_count >= ? ORDER BY row_id"
)
PARAM = 1
JDBC_JAR = Path("/usr/share/java/postgresql.jar")
ODBC_DRIVER = "PostgreSQL Unicode"


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("clients"))


@pytest.fixture(scope="module")
def server(cat_path):
    with Server(cat_path, port=0, users={USER: PASSWORD}) as srv:
        yield srv


@pytest.fixture(scope="module")
def catalog(cat_path):
    with Catalog.open(cat_path) as cat:
        yield cat


# -- what PostgreSQL reports for the catalog's column types --------------------------------------


@dataclass(frozen=True)
class PgType:
    sql: str  # format_type(), as psql prints it
    typname: str  # pg_type.typname, as the JDBC driver's TYPE_NAME and psqlODBC's type_name
    jdbc: int  # java.sql.Types, as the JDBC driver maps the type
    odbc: int  # the SQL type psqlODBC reports with its default options (texts as long varchar, ...)
    storage: str  # pg_type.typstorage as psql's \d+ prints it


_SCALARS = {
    pa.int64(): PgType("bigint", "int8", -5, -5, "plain"),
    pa.int32(): PgType("integer", "int4", 4, 4, "plain"),
    pa.float64(): PgType("double precision", "float8", 8, 6, "plain"),
    pa.string(): PgType("text", "text", 12, -10, "extended"),
    pa.bool_(): PgType("boolean", "bool", -7, 12, "plain"),
    pa.timestamp("us", tz="UTC"): PgType("timestamp with time zone", "timestamptz", 93, 11, "plain"),
}


def pg_type(t: pa.DataType) -> PgType:
    if pa.types.is_list(t):
        item = pg_type(t.value_type)
        return PgType(item.sql + "[]", "_" + item.typname, 2003, -9, "extended")
    if pa.types.is_timestamp(t):
        return _SCALARS[pa.timestamp("us", tz="UTC")]
    return _SCALARS[t]


@pytest.fixture(scope="module")
def stats_schema(catalog) -> pa.Schema:
    return catalog.sql("SELECT * FROM stats LIMIT 0").schema


@pytest.fixture(scope="module")
def helper_views(catalog) -> set[str]:
    """The views of the catalog's database that are not user views (raw_*, op_keys_base, ...)."""
    names = catalog.cursor().execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = current_database()"
    )
    return {name for (name,) in names.fetchall()} - set(USER_VIEWS)


@pytest.fixture(scope="module")
def expected_rows(catalog) -> list[tuple]:
    return [tuple(row.values()) for row in catalog.sql(QUERY, [PARAM]).to_pylist()]


def same_rows(got: list[tuple], expected: list[tuple]) -> bool:
    def norm(v):
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    return [tuple(map(norm, r)) for r in got] == [tuple(map(norm, r)) for r in expected]


def parse_pg_array(text: str | None) -> list[int] | None:
    if text is None:
        return None
    inner = text.strip("{}")
    return [int(x) for x in inner.split(",")] if inner else []


def _excerpt(text: str, limit: int = 12000) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


# -- the JDBC driver ---------------------------------------------------------------------------

_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def _unescape(value: str) -> str | None:
    if value == "\\N":
        return None
    return re.sub(r"\\(.)", lambda m: _UNESCAPE.get(m[1], m[1]), value)


@dataclass
class Section:
    """One DatabaseMetaData call (or the query) of the probe: its rows, or the exception it threw."""

    rows: list[dict[str, str | None]] = field(default_factory=list)
    done: int | None = None
    error: str | None = None
    context: str = ""  # for failure messages: the SQL the driver sent in this call, the probe's stderr


@dataclass(repr=False)
class JdbcRun:
    returncode: int
    stdout: str
    stderr: str
    log: str  # the driver's java.util.logging output: every message it sent and received
    sections: dict[str, Section]

    def wire(self, name: str) -> str:
        """What the driver sent and the server answered during one section (from the driver's log)."""
        parts = re.split(r"^probe section (\S+)$", self.log, flags=re.M)
        text = dict(zip(parts[1::2], parts[2::2], strict=True)).get(name, "")
        records = re.split(r"^(?= ?(?:FE=>|<=BE) )", text, flags=re.M)
        keep = ("FE=> Parse", "FE=> SimpleQuery", "<=BE ErrorMessage", "<=BE CommandStatus")
        return "".join(r for r in records if r.lstrip().startswith(keep)).strip()

    def section(self, name: str, call: str) -> Section:
        sec = self.sections.get(name)
        context = (
            f"\n-- what the driver sent and the server answered in {call}:\n{_excerpt(self.wire(name))}"
            f"\n-- probe exit {self.returncode}, stderr:\n{_excerpt(self.stderr, 4000)}"
        )
        if sec is None or (sec.done is None and sec.error is None):
            pytest.fail(f"the probe did not reach {call}" + context)
        if sec.error is not None:
            pytest.fail(f"{call} threw {sec.error}" + context)
        sec.context = context
        return sec


def _parse_probe(stdout: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    for line in stdout.splitlines():
        if line.count("\t") < 1:
            continue  # not the probe's (the JVM's own messages)
        name, kind, *rest = line.split("\t")
        sec = sections.setdefault(name, Section())
        if kind == "row":
            row = {}
            for item in rest:
                label, _, value = item.partition("=")
                row[label.upper()] = _unescape(value)  # PostgreSQL folds unquoted labels to lower case
            sec.rows.append(row)
        elif kind == "done":
            sec.done = int(rest[0])
        elif kind == "error":
            sec.error = f"SQLSTATE {rest[0]}: {_unescape(rest[1])}"
    return sections


@pytest.fixture(scope="module")
def jdbc(server, tmp_path_factory) -> JdbcRun:
    if not (shutil.which("javac") and shutil.which("java") and JDBC_JAR.exists()):
        pytest.fail(
            "JDK or libpostgresql-jdbc-java not installed: install the Debian packages .ci/run installs"
        )
    tmp = tmp_path_factory.mktemp("jdbc")
    src = TESTS / "jdbc" / "MetadataProbe.java"
    built = subprocess.run(["javac", "-d", tmp, src], capture_output=True, text=True, timeout=180)
    assert built.returncode == 0, f"javac MetadataProbe.java failed:\n{built.stderr}"
    log = tmp / "pgjdbc.log"
    props = tmp / "logging.properties"
    pattern = str(log).replace("%", "%%")
    props.write_text(
        "handlers=java.util.logging.FileHandler\n"
        f"java.util.logging.FileHandler.pattern={pattern}\n"
        "java.util.logging.FileHandler.level=ALL\n"
        "java.util.logging.FileHandler.formatter=java.util.logging.SimpleFormatter\n"
        "java.util.logging.SimpleFormatter.format=%5$s%n\n"
        ".level=OFF\norg.postgresql.level=ALL\n"
    )
    url = f"jdbc:postgresql://127.0.0.1:{server.port}/{DATABASE}"
    cmd = ["java", f"-Djava.util.logging.config.file={props}", "-cp", f"{tmp}{os.pathsep}{JDBC_JAR}"]
    try:
        out = subprocess.run(
            [*cmd, "MetadataProbe", url, USER, PASSWORD, QUERY, str(PARAM)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        text = log.read_text(errors="replace") if log.exists() else ""
        pytest.fail(f"MetadataProbe did not finish in 300 s; its output:\n{exc.stdout}\n{exc.stderr}\n"
                    f"-- the driver's log, last part:\n{text[-8000:]}")  # fmt: skip
    text = log.read_text(errors="replace") if log.exists() else ""
    return JdbcRun(out.returncode, out.stdout, out.stderr, text, _parse_probe(out.stdout))


def test_jdbc_get_tables_lists_the_user_views_as_views(jdbc, helper_views):
    sec = jdbc.section("tables", 'DatabaseMetaData.getTables(null, "public", "%", null)')
    got = {r["TABLE_NAME"]: r["TABLE_TYPE"] for r in sec.rows}
    leaked = sorted(set(got) & helper_views)
    assert not leaked, f"internal helper views listed: {leaked}" + sec.context
    assert got == dict.fromkeys(USER_VIEWS, "VIEW"), f"getTables answered {got}" + sec.context
    assert {r["TABLE_SCHEM"] for r in sec.rows} == {"public"}, sec.context
    views = jdbc.section("tables_view", 'DatabaseMetaData.getTables(null, "public", "%", {"VIEW"})')
    assert sorted(r["TABLE_NAME"] for r in views.rows) == sorted(USER_VIEWS), views.context


def test_jdbc_get_tables_finds_no_base_tables(jdbc):
    sec = jdbc.section("tables_table", 'DatabaseMetaData.getTables(null, "public", "%", {"TABLE"})')
    assert [r["TABLE_NAME"] for r in sec.rows] == [], "a database of views has no TABLE" + sec.context


def test_jdbc_table_remarks_are_the_view_descriptions(jdbc):
    """REMARKS is obj_description(oid, 'pg_class'): each user view's one-line description."""
    sec = jdbc.section("tables", 'DatabaseMetaData.getTables(null, "public", "%", null)')
    got = {r["TABLE_NAME"]: r["REMARKS"] for r in sec.rows}
    assert got == USER_VIEWS, sec.context


def test_jdbc_get_columns_of_stats(jdbc, stats_schema):
    sec = jdbc.section("columns", 'DatabaseMetaData.getColumns(null, "public", "stats", "%")')
    got = [(r["COLUMN_NAME"], r["DATA_TYPE"], r["TYPE_NAME"], r["ORDINAL_POSITION"]) for r in sec.rows]
    expected = [
        (f.name, str(pg_type(f.type).jdbc), pg_type(f.type).typname, str(i))
        for i, f in enumerate(stats_schema, start=1)
    ]
    assert got == expected, sec.context
    for row in sec.rows:  # a view's columns may hold NULLs; REMARKS is col_description (may be NULL)
        assert (row["NULLABLE"], row["IS_NULLABLE"]) == ("1", "YES"), f"{row}" + sec.context
        assert "REMARKS" in row, sec.context


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("primary_keys", 'DatabaseMetaData.getPrimaryKeys(null, "public", "stats")'),
        ("imported_keys", 'DatabaseMetaData.getImportedKeys(null, "public", "stats")'),
        ("exported_keys", 'DatabaseMetaData.getExportedKeys(null, "public", "stats")'),
        ("index_info", 'DatabaseMetaData.getIndexInfo(null, "public", "stats", false, true)'),
    ],
)
def test_jdbc_keys_and_indexes_of_a_view_are_empty(jdbc, name, call):
    sec = jdbc.section(name, call)
    assert sec.rows == [], f"{call}: a view has no keys or indexes, got {sec.rows}" + sec.context


def test_jdbc_get_type_info(jdbc):
    sec = jdbc.section("type_info", "DatabaseMetaData.getTypeInfo()")
    types = {r["TYPE_NAME"]: r["DATA_TYPE"] for r in sec.rows}
    expected = {"int8": "-5", "int4": "4", "float8": "8", "text": "12", "bool": "-7", "_int8": "2003"}
    assert {name: types.get(name) for name in expected} == expected, sec.context


def test_jdbc_get_functions(jdbc):
    public = jdbc.section("functions_public", 'DatabaseMetaData.getFunctions(null, "public", "%")')
    assert public.rows == [], "public holds no functions" + public.context
    version = jdbc.section(
        "functions_version", 'DatabaseMetaData.getFunctions(null, "pg_catalog", "version")'
    )
    got = [(r["FUNCTION_SCHEM"], r["FUNCTION_NAME"]) for r in version.rows]
    assert got == [("pg_catalog", "version")], version.context


def test_jdbc_product(jdbc):
    product = jdbc.sections.get("product", Section()).rows
    assert product and product[0]["NAME"] == "PostgreSQL" and product[0]["MAJOR"] == "14", (
        f"{product}\n{jdbc.stderr}"
    )


def test_jdbc_get_schemas_and_catalogs(jdbc):
    schemas = jdbc.section("schemas", "DatabaseMetaData.getSchemas()")
    names = {r["TABLE_SCHEM"] for r in schemas.rows}
    assert {"public", "pg_catalog", "information_schema"} <= names, f"{names}" + schemas.context
    catalogs = jdbc.section("catalogs", "DatabaseMetaData.getCatalogs()")
    assert [r["TABLE_CAT"] for r in catalogs.rows] == [DATABASE], catalogs.context


def _jdbc_row(row: dict[str, str | None], schema: pa.Schema) -> tuple:
    out = []
    for f in schema:
        text = row[f.name.upper()]
        if text is None:
            out.append(None)
        elif pa.types.is_integer(f.type):
            out.append(int(text))
        elif pa.types.is_floating(f.type):
            out.append(float(text))  # Java's Double.toString: NaN, Infinity, 1.0E-5 all parse
        elif pa.types.is_boolean(f.type):
            out.append(text == "true")
        elif pa.types.is_list(f.type):
            out.append(parse_pg_array(text))
        else:
            out.append(text)
    return tuple(out)


def test_jdbc_prepared_statement_fetched_through_a_cursor(jdbc, catalog, expected_rows):
    """setAutoCommit(false) + setFetchSize(10): the driver fetches 10 rows per Execute of a portal."""
    schema = catalog.sql(QUERY, [PARAM]).schema
    for name in ("query", "query_again"):
        call = f"PreparedStatement({QUERY!r}).setLong(1, {PARAM}), fetch size 10, run #{name[-1:]}"
        sec = jdbc.section(name, call)
        got = [_jdbc_row(r, schema) for r in sec.rows]
        assert len(got) == len(expected_rows) > 10, sec.context
        assert same_rows(got, expected_rows), sec.context
    commit = jdbc.sections.get("commit", Section())
    assert commit.error is None and commit.done == 0, f"commit: {commit.error}\n{jdbc.stderr}"


# -- psqlODBC through pyodbc ---------------------------------------------------------------------


def _odbc_log() -> Path | None:
    """psqlODBC's communication log of this process (CommLog=1 writes psqlodbc_<exe><user><pid>.log
    in its log folder, /tmp unless odbcinst.ini names another): every query and the server's errors."""
    logs = sorted(Path("/tmp").glob(f"psqlodbc_*{getpass.getuser()}{os.getpid()}.log"))
    return logs[-1] if logs else None


class Odbc:
    def __init__(self, port: int) -> None:
        self.port = port
        log = _odbc_log()
        self.log_from = log.stat().st_size if log else 0

    @contextlib.contextmanager
    def connect(self, *, autocommit: bool = True) -> Iterator:
        import pyodbc

        if ODBC_DRIVER not in pyodbc.drivers():
            pytest.fail("odbc-postgresql not installed: install the Debian packages .ci/run installs")
        try:
            con = pyodbc.connect(
                f"DRIVER={{{ODBC_DRIVER}}};SERVER=127.0.0.1;PORT={self.port};DATABASE={DATABASE};"
                f"UID={USER};PWD={{{PASSWORD}}};CommLog=1",
                autocommit=autocommit,
            )
        except pyodbc.Error as exc:
            pytest.fail(f"psqlODBC could not connect: {exc!r}" + self.wire())
        try:
            yield con
        finally:
            con.close()

    def wire(self) -> str:
        """The queries psqlODBC sent since this test began, and the errors the server answered."""
        log = _odbc_log()
        if log is None:
            return "(no psqlODBC communication log found)"
        with open(log, encoding="utf-8", errors="replace") as f:
            f.seek(self.log_from)
            text = f.read()
        noise = re.compile(r"^\s*(ok: |nFields: |fieldname=|PQdescribePrepared)")
        keep = []
        for record in re.split(r"\n(?=\S)", text):  # a call and its indented lines
            if record.startswith(("PQsendQuery", "PQexec", "PQprepare")):
                call, _, rest = record.partition(" ")
                rest = rest.split(" ", 1)[-1]  # the connection's address
                lines = [line for line in rest.splitlines() if not noise.match(line)]
                keep.append(f"{call} " + "\n".join(lines))
        text = "\n".join(keep)
        return f"\n-- what psqlODBC sent and the server's errors:\n{_excerpt(text)}"

    def call(self, what: str, fn):
        try:
            return [tuple(r) for r in fn()]
        except Exception as exc:
            pytest.fail(f"{what} raised {exc!r}" + self.wire())


@pytest.fixture
def odbc(server) -> Odbc:
    return Odbc(server.port)


def test_odbc_tables_are_the_user_views(odbc, helper_views):
    with odbc.connect() as con:
        cur = con.cursor()
        rows = odbc.call("cursor.tables(schema='public')", lambda: cur.tables(schema="public").fetchall())
    got = {r[2]: r[3] for r in rows}
    leaked = sorted(set(got) & helper_views)
    assert not leaked, f"internal helper views listed: {leaked}" + odbc.wire()
    assert got == dict.fromkeys(USER_VIEWS, "VIEW"), f"SQLTables answered {got}" + odbc.wire()


def test_odbc_finds_no_base_tables(odbc):
    with odbc.connect() as con:
        cur = con.cursor()
        rows = odbc.call(
            "cursor.tables(schema='public', tableType='TABLE')",
            lambda: cur.tables(schema="public", tableType="TABLE").fetchall(),
        )
    assert rows == [], f"a database of views has no TABLE, got {rows}" + odbc.wire()


def test_odbc_columns_of_stats(odbc, stats_schema):
    with odbc.connect() as con:
        cur = con.cursor()
        rows = odbc.call("cursor.columns(table='stats')", lambda: cur.columns(table="stats").fetchall())
        labels = [d[0] for d in cur.description]
    at = [labels.index(k) for k in ("column_name", "type_name", "data_type", "ordinal_position")]
    got = [tuple(r[i] for i in at) for r in rows]
    expected = [
        (f.name, pg_type(f.type).typname, pg_type(f.type).odbc, i)
        for i, f in enumerate(stats_schema, start=1)
    ]
    assert got == expected, odbc.wire()


@pytest.mark.parametrize(
    ("call", "method", "kwargs"),
    [
        ("cursor.primaryKeys('stats')", "primaryKeys", {"table": "stats"}),
        ("cursor.foreignKeys(table='stats')", "foreignKeys", {"table": "stats"}),
        ("cursor.foreignKeys(foreignTable='stats')", "foreignKeys", {"foreignTable": "stats"}),
        ("cursor.statistics('stats')", "statistics", {"table": "stats"}),
    ],
)
def test_odbc_keys_and_statistics_of_a_view_are_empty(odbc, call, method, kwargs):
    with odbc.connect() as con:
        cur = con.cursor()
        rows = odbc.call(call, lambda: getattr(cur, method)(**kwargs).fetchall())
    assert rows == [], f"{call}: a view has no keys or indexes, got {rows}" + odbc.wire()


def test_odbc_get_type_info(odbc):
    with odbc.connect() as con:
        cur = con.cursor()
        rows = odbc.call("cursor.getTypeInfo()", lambda: cur.getTypeInfo().fetchall())
    names = {r[0] for r in rows}
    assert {"int8", "float8", "text", "bool"} <= names, f"{sorted(names)}" + odbc.wire()


def _odbc_rows(rows: list[tuple]) -> list[tuple]:
    """psqlODBC returns arrays as their text and booleans as '1'/'0' (its default BoolsAsChar)."""
    shape, has_nan = 6, 7
    out = []
    for r in rows:
        r = list(r)
        r[shape] = parse_pg_array(r[shape])
        r[has_nan] = None if r[has_nan] is None else r[has_nan] in ("1", True)
        out.append(tuple(r))
    return out


def test_odbc_parameterized_query(odbc, expected_rows):
    with odbc.connect() as con:
        cur = con.cursor()
        rows = odbc.call(f"cursor.execute({QUERY!r}, {PARAM})", lambda: cur.execute(QUERY, PARAM).fetchall())
    assert same_rows(_odbc_rows(rows), expected_rows), odbc.wire()


def test_odbc_queries_in_a_manual_commit_transaction(odbc, catalog, expected_rows):
    """autocommit off: psqlODBC opens a transaction, wraps each statement in a savepoint (its default
    statement-level rollback) and deallocates its prepared plans; the rows are the same."""
    count = catalog.sql("SELECT count(*) AS n FROM stats WHERE nan_count >= ?", [0]).column(0)[0].as_py()
    with odbc.connect(autocommit=False) as con:
        cur = con.cursor()
        for _ in range(2):
            rows = odbc.call(
                f"cursor.execute({QUERY!r}, {PARAM})", lambda: cur.execute(QUERY, PARAM).fetchall()
            )
            assert same_rows(_odbc_rows(rows), expected_rows), odbc.wire()
            n = odbc.call(
                "cursor.execute('SELECT count(*) ... >= ?', 0)",
                lambda: cur.execute("SELECT count(*) AS n FROM stats WHERE nan_count >= ?", 0).fetchall(),
            )
            assert n == [(count,)], odbc.wire()
        odbc.call("connection.commit()", lambda: con.commit() or [])


# -- psql --------------------------------------------------------------------------------------


def _psql_binary() -> str:
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql (postgresql-client) not installed: install the Debian packages .ci/run installs")
    return psql


def _psql_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PSQL"))}
    env.update(
        PGPASSWORD=PASSWORD,
        PGCONNECT_TIMEOUT="10",
        PGCLIENTENCODING="UTF8",
        PGSSLMODE="disable",
        LC_ALL="C",
        LANG="C",  # untranslated headers
        PAGER="cat",
        **extra,
    )
    return env


_HIDDEN = re.compile(r"^\*{9} QUERY \*{10}\n(.*?)\n\*{26}\n\n", re.S | re.M)


@dataclass
class PsqlRun:
    commands: tuple[str, ...]
    returncode: int
    stdout: str  # what psql printed, without the echoed catalog queries
    stderr: str
    hidden: list[str]  # the catalog queries psql sent (ECHO_HIDDEN)

    @property
    def context(self) -> str:
        queries = "\n\n".join(self.hidden) or "(none)"
        return (
            f"\n-- psql {' '.join(self.commands)} exited {self.returncode}; stderr:\n{self.stderr}"
            f"\n-- catalog queries psql sent (psql -E), the last one is the failing one if any:\n"
            f"{_excerpt(queries)}\n-- stdout:\n{_excerpt(self.stdout, 4000)}"
        )

    def ok(self) -> PsqlRun:
        assert self.returncode == 0 and "ERROR" not in self.stderr, self.context
        return self


def psql(server, *commands: str) -> PsqlRun:
    cmd = [_psql_binary(), "-X", "-E", "-h", "127.0.0.1", "-p", str(server.port), "-U", USER, "-d", DATABASE]
    for c in commands:
        cmd += ["-c", c]
    out = subprocess.run(cmd, env=_psql_env(), capture_output=True, text=True, timeout=120)
    hidden = _HIDDEN.findall(out.stdout)
    return PsqlRun(commands, out.returncode, _HIDDEN.sub("", out.stdout), out.stderr, hidden)


@dataclass
class PsqlTable:
    title: str
    header: list[str]
    rows: list[list[str]]
    footer: list[str]


def psql_table(run: PsqlRun) -> PsqlTable:
    """psql's aligned output: an optional title, a header, a rule, rows, then footers."""
    lines = run.stdout.splitlines()
    rule = next((i for i, line in enumerate(lines) if re.fullmatch(r"-+(\+-+)*", line)), None)
    if rule is None:
        pytest.fail("psql printed no table" + run.context)
    title = lines[rule - 2].strip() if rule >= 2 else ""

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.split("|")]

    rows, end = [], rule + 1
    while end < len(lines) and "|" in lines[end] and not lines[end].startswith("("):
        rows.append(cells(lines[end]))
        end += 1
    return PsqlTable(title, cells(lines[rule - 1]), rows, lines[end:])


def _relations(run: PsqlRun) -> PsqlTable:
    table = psql_table(run)
    assert table.title == "List of relations", run.context
    assert table.header == ["Schema", "Name", "Type", "Owner"], run.context
    return table


@pytest.mark.parametrize("command", [r"\d", r"\dv"])
def test_psql_lists_the_user_views_as_views(server, helper_views, command):
    run = psql(server, command).ok()
    table = _relations(run)
    names = [r[1] for r in table.rows]
    assert not set(names) & helper_views, (
        f"internal helper views listed: {set(names) & helper_views}" + run.context
    )
    assert names == sorted(USER_VIEWS), run.context
    assert {(r[0], r[2]) for r in table.rows} == {("public", "view")}, run.context
    assert all(r[3] for r in table.rows), "every view has an owner" + run.context
    assert f"({len(USER_VIEWS)} rows)" in table.footer, run.context


def test_psql_dt_finds_no_tables(server):
    """PostgreSQL's answer to \\dt in a database holding only views: no table, a notice on stderr."""
    run = psql(server, r"\dt")
    assert run.returncode == 0, run.context
    assert run.stdout.strip() == "", run.context
    assert run.stderr.strip() == "Did not find any relations.", run.context


def _describe(run: PsqlRun, stats_schema: pa.Schema, header: list[str]) -> PsqlTable:
    table = psql_table(run)
    assert table.title == 'View "public.stats"', run.context
    assert table.header == header, run.context
    got = [(r[0], r[1]) for r in table.rows]
    assert got == [(f.name, pg_type(f.type).sql) for f in stats_schema], run.context
    assert all(r[2:5] == ["", "", ""] for r in table.rows), "no collation, nullable or default" + run.context
    return table


def test_psql_describe_view(server, stats_schema):
    run = psql(server, r"\d stats").ok()
    _describe(run, stats_schema, ["Column", "Type", "Collation", "Nullable", "Default"])
    assert re.search(r"^ nan_count +\| bigint +\|", run.stdout, re.M), run.context
    assert re.search(r"^ max +\| double precision +\|", run.stdout, re.M), run.context
    assert re.search(r"^ shape +\| bigint\[\] +\|", run.stdout, re.M), run.context


def test_psql_describe_view_verbose(server, stats_schema):
    run = psql(server, r"\d+ stats").ok()
    header = ["Column", "Type", "Collation", "Nullable", "Default", "Storage", "Description"]
    table = _describe(run, stats_schema, header)
    storage = [(r[0], r[5]) for r in table.rows]
    assert storage == [(f.name, pg_type(f.type).storage) for f in stats_schema], run.context
    assert "View definition:" in table.footer, run.context


def test_psql_df_lists_no_user_functions(server):
    run = psql(server, r"\df").ok()
    table = psql_table(run)
    assert table.title == "List of functions", run.context
    assert table.header == ["Schema", "Name", "Result data type", "Argument data types", "Type"], run.context
    assert table.rows == [] and "(0 rows)" in table.footer, run.context


def test_psql_list_databases(server):
    run = psql(server, r"\l").ok()
    table = psql_table(run)
    assert table.title == "List of databases", run.context
    assert table.header[:3] == ["Name", "Owner", "Encoding"], run.context
    mine = [r for r in table.rows if r[0] == DATABASE]
    assert len(mine) == 1 and mine[0][1] and mine[0][2] == "UTF8", run.context


def test_psql_list_schemas(server):
    run = psql(server, r"\dn").ok()
    table = psql_table(run)
    assert table.title == "List of schemas", run.context
    assert table.header == ["Name", "Owner"], run.context
    assert [r[0] for r in table.rows] == ["public"] and table.rows[0][1], run.context


def test_psql_conninfo(server):
    run = psql(server, r"\conninfo").ok()
    where = f'on host "127.0.0.1" at port "{server.port}"'
    expected = f'You are connected to database "{DATABASE}" as user "{USER}" {where}.'
    assert run.stdout.strip() == expected, run.context


def test_psql_expanded_display(server, catalog):
    query = (
        "SELECT row_id, op_name, nan_count, max, shape FROM stats WHERE nan_count > 0 ORDER BY row_id LIMIT 3"
    )
    run = psql(server, r"\x", query).ok()
    assert run.stdout.startswith("Expanded display is on.\n"), run.context
    records = re.split(r"^-\[ RECORD \d+ \]-*\n", run.stdout, flags=re.M)[1:]
    got = []
    for record in records:
        fields = dict(line.split(" | ", 1) for line in record.strip("\n").splitlines())
        fields = {k.strip(): v for k, v in fields.items()}
        assert list(fields) == ["row_id", "op_name", "nan_count", "max", "shape"], run.context
        got.append(
            (int(fields["row_id"]), fields["op_name"], int(fields["nan_count"]), float(fields["max"]),
             parse_pg_array(fields["shape"]))
        )  # fmt: skip
    expected = [tuple(r.values()) for r in catalog.sql(query).to_pylist()]
    assert len(got) == 3 and same_rows(got, expected), run.context


class Terminal:
    """psql on a pseudo-terminal (readline's tab completion needs one); reads wait on output, bounded."""

    def __init__(self, server, tmp: Path) -> None:
        cmd = [_psql_binary(), "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", USER, "-d", DATABASE]
        env = _psql_env(TERM="dumb", INPUTRC=os.devnull, PSQL_HISTORY=str(tmp / "history"), COLUMNS="200")
        self.master, child = pty.openpty()
        self.proc = subprocess.Popen(
            cmd, stdin=child, stdout=child, stderr=child, env=env, start_new_session=True
        )
        os.close(child)
        self.out = b""

    def until(self, token: bytes, count: int = 1, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.out.count(token) < count and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], deadline - time.monotonic())
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # psql exited
                    break
                if not chunk:
                    break
                self.out += chunk
        return self.out.count(token) >= count

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    @property
    def screen(self) -> str:
        return self.out.decode(errors="replace").replace("\r\n", "\n")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.master)


PROMPT = f"{DATABASE}=> ".encode()


def test_psql_tab_completion(server, catalog, helper_views, tmp_path):
    term = Terminal(server, tmp_path)
    try:
        assert term.until(PROMPT), f"no psql prompt:\n{term.screen}"
        # One candidate: TAB completes the name (a second TAB offers what may follow it).
        term.type(b"SELECT count(*) AS n FROM st\t\t")
        assert term.until(b"FROM stats"), f"'st' + TAB did not complete to stats:\n{term.screen}"
        term.type(b";\n")
        n = catalog.sql("SELECT count(*) AS n FROM stats").column(0)[0].as_py()
        assert term.until(b"(1 row)"), f"the completed query did not run:\n{term.screen}"
        assert re.search(rf"^\s+{n}\s*$", term.screen, re.M), term.screen
        assert "ERROR" not in term.screen, term.screen
        # Several candidates: TAB TAB lists them, then readline draws the prompt and the line again.
        assert term.until(PROMPT, count=2), f"no prompt after the query:\n{term.screen}"
        line = PROMPT + b"SELECT * FROM "
        term.type(b"SELECT * FROM \t\t")
        assert term.until(line, count=2), f"no completion list:\n{term.screen}"
        listing = term.out.split(line)[1].decode(errors="replace")
        offered = set(listing.replace("\x07", " ").split())
        leaked = offered & helper_views
        assert not leaked, f"internal helper views offered: {sorted(leaked)}\n{term.screen}"
        # PostgreSQL offers the visible relations and the schemas but pg_catalog: psql's completion
        # query keeps schemas `n.nspname NOT LIKE E'pg\\_%'` (backslash is LIKE's default escape).
        expected = {*USER_VIEWS, "public.", "information_schema."}
        assert offered == expected, (
            f"offered {sorted(offered)}: not expected {sorted(offered - expected)}, "
            f"missing {sorted(expected - offered)}\n{term.screen}"
        )
        term.type(b"\x15\\q\n")
        assert term.proc.wait(timeout=30) == 0, term.screen
    finally:
        term.close()
