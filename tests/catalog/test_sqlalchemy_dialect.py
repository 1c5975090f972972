"""The `dumpcat://` SQLAlchemy dialect and its DB-API driver (catalog.dbapi), on a real ingested
catalog (the committed nan_log dump): SQLAlchemy 2.x in this process (inspect, Table(autoload_with=),
select(), text() with bound parameters, pandas), SQLAlchemy 1.4 in a process of its own (what
Superset 6.1 runs on), JupySQL's `%sql` in a real IPython shell, hostile statements refused with
the engine still usable, and a run ingested after the engine was made seen by its next query.
Every answer is compared with `Catalog.sql` on the same catalog."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from catalog import dbapi
from catalog.api import Catalog
from catalog.sqlalchemy_dialect import DumpcatDialect, column_type
from catalog.views import USER_VIEWS
from tests.conftest import REPO, dump_of, nan_log_catalog

ENTRY_POINT = "catalog.sqlalchemy_dialect:DumpcatDialect"
# Registers the dialect by hand only where the installed distribution predates its entry point
# (an editable install made before it existed: `pip install -e .` again adds it).
REGISTER = textwrap.dedent(f"""
    import importlib.metadata
    from sqlalchemy.dialects import registry
    if "dumpcat" not in {{ep.name for ep in importlib.metadata.entry_points(group="sqlalchemy.dialects")}}:
        registry.register("dumpcat", *{ENTRY_POINT.split(":")!r})
""")
exec(REGISTER)


def url(path: Path) -> str:
    return f"dumpcat:///{path.absolute()}"


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("dialect"))


@pytest.fixture(scope="module")
def engine(cat_path):
    engine = sa.create_engine(url(cat_path))
    yield engine
    engine.dispose()


def catalog_table(cat_path: Path, query: str, params=None) -> pa.Table:
    """Catalog.sql's answer as a pyarrow Table (a Table, or a result object with `.arrow()`)."""
    result = Catalog.open(cat_path).sql(query, params)
    return result.arrow() if hasattr(result, "arrow") else result


def catalog_rows(cat_path: Path, query: str, params=None) -> list[tuple]:
    return [tuple(r.values()) for r in catalog_table(cat_path, query, params).to_pylist()]


# -- the entry point and the URL -------------------------------------------------------------------


def test_entry_point_names_the_dialect():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    target = project["entry-points"]["sqlalchemy.dialects"]["dumpcat"]
    assert target == ENTRY_POINT
    point = importlib.metadata.EntryPoint("dumpcat", target, "sqlalchemy.dialects")
    assert point.load() is DumpcatDialect
    assert sa.create_engine("dumpcat:///x").dialect.name == "dumpcat"  # resolved by name


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("dumpcat://", "names the catalog folder"),
        ("dumpcat://host/cat", "has no host, user or port"),
        ("dumpcat:////cat?mode=rw", "takes no query options"),
    ],
)
def test_a_bad_url_is_refused_in_words(bad, says):
    with pytest.raises(sa.exc.ArgumentError, match=says):
        sa.create_engine(bad).connect()


def test_a_folder_that_is_no_catalog_says_so(tmp_path):
    engine = sa.create_engine(url(tmp_path / "nothing"))
    with pytest.raises(sa.exc.OperationalError, match="not a dumpcat catalog"):
        engine.connect()


# -- reflection ------------------------------------------------------------------------------------


def test_inspect_lists_the_user_views_only(engine):
    insp = sa.inspect(engine)
    assert insp.get_schema_names() == ["main"]
    assert insp.default_schema_name == "main"
    assert insp.get_table_names() == []
    assert insp.get_view_names() == sorted(USER_VIEWS)
    assert insp.get_view_names(schema="other") == []
    # helpers are hidden from the listing, yet exist (and can be queried)
    assert insp.has_table("stats") and insp.has_table("raw_tensors") and not insp.has_table("no_such")
    assert "raw_tensors" not in insp.get_view_names() and "op_keys" not in insp.get_view_names()
    assert insp.get_table_comment("first_anomaly")["text"] == USER_VIEWS["first_anomaly"]
    assert insp.get_pk_constraint("stats")["constrained_columns"] == []
    assert insp.get_foreign_keys("stats") == [] and insp.get_indexes("stats") == []


def test_columns_have_sqlalchemy_types(engine, cat_path):
    columns = sa.inspect(engine).get_columns("stats")
    want = catalog_table(cat_path, "SELECT * FROM stats LIMIT 0").schema
    assert [c["name"] for c in columns] == want.names
    types = {c["name"]: c["type"] for c in columns}
    assert isinstance(types["nan_count"], sa.BIGINT)
    assert isinstance(types["max"], postgresql.DOUBLE_PRECISION)
    assert isinstance(types["op_name"], sa.VARCHAR)
    assert isinstance(types["has_nan"], sa.BOOLEAN)
    assert isinstance(types["shape"], postgresql.ARRAY) and isinstance(types["shape"].item_type, sa.BIGINT)
    comments = {c["name"]: c["comment"] for c in columns}
    assert comments["shape"] == "dumped shape ([] for a scalar)"
    runs = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns("runs")}
    assert isinstance(runs["ingested_at"], sa.TIMESTAMP) and runs["ingested_at"].timezone


def test_every_user_view_reflects(engine):
    metadata = sa.MetaData()
    metadata.reflect(engine, views=True)
    assert sorted(metadata.tables) == sorted(USER_VIEWS)
    assert all(len(t.columns) > 0 for t in metadata.tables.values())


def test_unknown_view_raises_no_such_table(engine):
    with pytest.raises(sa.exc.NoSuchTableError):
        sa.Table("no_such_view", sa.MetaData(), autoload_with=engine)


def test_column_types_of_duckdb_names():
    assert isinstance(column_type("DECIMAL(18,3)"), sa.NUMERIC) and column_type("DECIMAL(18,3)").scale == 3
    assert column_type("BIGINT[][]").dimensions == 2
    assert isinstance(column_type("STRUCT(a INTEGER)"), sa.types.NullType)


# -- queries ---------------------------------------------------------------------------------------


def test_table_autoload_and_select(engine, cat_path):
    stats = sa.Table("stats", sa.MetaData(), autoload_with=engine)
    n = sa.func.count().label("tensors")
    query = (
        sa.select(stats.c.op_type, n)
        .where(stats.c.nan_count > 0)
        .group_by(stats.c.op_type)
        .order_by(n.desc(), stats.c.op_type)
    )
    with engine.connect() as conn:
        got = [tuple(r) for r in conn.execute(query)]
    want = catalog_rows(
        cat_path,
        "SELECT op_type, count(*) AS n FROM stats WHERE nan_count > 0 GROUP BY 1 ORDER BY n DESC, op_type",
    )
    assert got == want and len(got) > 2


def test_text_with_bound_parameters(engine, cat_path):
    query = sa.text(
        "SELECT row_id, op_name, shape, max FROM stats WHERE nan_count > :n AND io LIKE :io ORDER BY row_id"
    )
    with engine.connect() as conn:
        result = conn.execute(query, {"n": 1, "io": "output%"})
        assert list(result.keys()) == ["row_id", "op_name", "shape", "max"]
        got = [tuple(r) for r in result]
    want = catalog_rows(
        cat_path,
        "SELECT row_id, op_name, shape, max FROM stats WHERE nan_count > ? AND io LIKE ? ORDER BY row_id",
        [1, "output%"],
    )
    assert len(got) == len(want) > 0
    assert [(r[0], r[1], r[2]) for r in got] == [(r[0], r[1], r[2]) for r in want]  # (max is NaN)


def test_pandas_read_sql_and_read_sql_table(engine, cat_path):
    query = sa.text("SELECT iteration, sum(nan_count)::BIGINT AS nans FROM stats GROUP BY 1 ORDER BY 1")
    df = pd.read_sql(query, engine)
    assert [tuple(r) for r in df.itertuples(index=False)] == catalog_rows(cat_path, str(query))
    by_param = pd.read_sql(
        sa.text("SELECT count(*) AS n FROM stats WHERE nan_count > :n"), engine, params={"n": 0}
    )
    assert by_param["n"].tolist() == [
        catalog_rows(cat_path, "SELECT count(*) FROM stats WHERE nan_count > 0")[0][0]
    ]
    table = pd.read_sql_table("stats", engine)
    assert table.shape == (catalog_rows(cat_path, "SELECT count(*) FROM stats")[0][0], 41)


HOSTILE = [
    ("COPY stats TO 'out.csv'", "COPY"),
    ("COPY (SELECT 1) TO '/tmp/x.parquet' (FORMAT parquet)", "COPY"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
    ("SELECT * FROM '/etc/passwd'", "reading files is not allowed"),
    ("ATTACH '/tmp/other.duckdb' AS other", "ATTACH is not allowed"),
    ("INSTALL httpfs", "INSTALL and LOAD are not allowed"),
    ("LOAD httpfs", "INSTALL and LOAD are not allowed"),
    ("CREATE TABLE t AS SELECT 1", "CREATE statements are not allowed"),
    ("DROP VIEW stats", "DROP statements are not allowed"),
    ("INSERT INTO stats SELECT * FROM stats", "INSERT statements are not allowed"),
    ("SET enable_external_access = true", "SET"),
    ("SELECT getenv('HOME')", "getenv"),
    ("SELECT 1; SELECT 2", "one SQL statement at a time"),
    ("SELEC nonsense", "syntax error"),
]


@pytest.mark.parametrize(("statement", "says"), HOSTILE)
def test_hostile_statement_refused_and_engine_still_usable(engine, statement, says):
    with engine.connect() as conn:
        with pytest.raises(sa.exc.ProgrammingError) as caught:
            conn.execute(sa.text(statement))
        assert isinstance(caught.value.orig, dbapi.ProgrammingError)
        assert str(caught.value.orig).startswith("refused: ") and says in str(caught.value.orig)
        assert caught.value.orig.sqlstate in ("42501", "42601", "0A000")
        assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar() == 1  # the same connection
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1


def test_engine_error_is_a_programming_error_with_duckdb_words(engine):
    with engine.connect() as conn:
        with pytest.raises(sa.exc.ProgrammingError, match="no_such_column"):
            conn.execute(sa.text("SELECT no_such_column FROM stats"))
        with pytest.raises(sa.exc.DataError):
            conn.execute(sa.text("SELECT CAST('x' AS INTEGER)"))
        assert conn.execute(sa.text("SELECT 2")).scalar() == 2


def test_a_run_ingested_after_the_engine_was_made_is_seen(tmp_path):
    path = nan_log_catalog(tmp_path)
    engine = sa.create_engine(url(path))
    query = sa.text("SELECT run FROM runs ORDER BY run")
    with engine.connect() as conn:
        assert conn.execute(query).scalars().all() == ["nan_log"]
        Catalog.open(path).ingest(dump_of("div_late"), run="later")  # another process's ingest, in effect
        assert conn.execute(query).scalars().all() == ["later", "nan_log"]  # the same connection
        n = conn.execute(sa.text("SELECT count(*) FROM stats WHERE run = :r"), {"r": "later"}).scalar()
    assert n == catalog_rows(path, "SELECT count(*) FROM stats WHERE run = 'later'")[0][0] > 0
    assert "later" in pd.read_sql(query, engine)["run"].tolist()  # a pooled connection too
    engine.dispose()


# -- the DB-API module -----------------------------------------------------------------------------


def test_dbapi_module_globals():
    assert (dbapi.apilevel, dbapi.threadsafety, dbapi.paramstyle) == ("2.0", 1, "qmark")
    for name in ("Warning", "InterfaceError", "DataError", "OperationalError", "IntegrityError",
                 "InternalError", "ProgrammingError", "NotSupportedError"):  # fmt: skip
        assert issubclass(getattr(dbapi, name), Exception)
    assert issubclass(dbapi.ProgrammingError, dbapi.DatabaseError) and issubclass(
        dbapi.DatabaseError, dbapi.Error
    )


def test_dbapi_cursor(cat_path):
    with dbapi.connect(cat_path) as conn:
        cur = conn.cursor()
        cur.execute("SELECT row_id, op_name, nan_count FROM stats WHERE nan_count > ? ORDER BY row_id", [0])
        assert [d[0] for d in cur.description] == ["row_id", "op_name", "nan_count"]
        assert cur.description[0][1] == dbapi.NUMBER and cur.description[1][1] == dbapi.STRING
        assert cur.rowcount == -1
        want = catalog_rows(
            cat_path, "SELECT row_id, op_name, nan_count FROM stats WHERE nan_count > 0 ORDER BY row_id"
        )
        first = cur.fetchone()
        some = cur.fetchmany(3)
        rest = cur.fetchall()
        assert [first, *some, *rest] == want
        assert cur.fetchone() is None
        cur.execute("SELECT count(*) FROM stats WHERE op_type = $t", {"t": "MatMul"})  # DuckDB's $name
        assert (
            cur.fetchone()[0]
            == catalog_rows(cat_path, "SELECT count(*) FROM stats WHERE op_type = 'MatMul'")[0][0]
        )
        cur.execute("SELECT 1 AS a UNION ALL SELECT 2")
        assert list(cur) == [(1,), (2,)]
        conn.commit()
        conn.rollback()
        with pytest.raises(dbapi.ProgrammingError, match="refused: COPY"):
            cur.execute("COPY stats TO 'x.csv'")
        with pytest.raises(dbapi.ProgrammingError, match="parameters must be a sequence"):
            cur.execute("SELECT ?", "x")
        with pytest.raises(dbapi.InterfaceError, match="execute"):
            cur.fetchall()
        cur.close()
        with pytest.raises(dbapi.InterfaceError, match="cursor is closed"):
            cur.execute("SELECT 1")
    with pytest.raises(dbapi.InterfaceError, match="connection is closed"):
        conn.cursor()


def test_dbapi_connect_to_no_catalog(tmp_path):
    with pytest.raises(dbapi.OperationalError, match="not a dumpcat catalog"):
        dbapi.connect(tmp_path)


# -- SQLAlchemy 1.4 (Superset 6.1's), in a process of its own ------------------------------------------

LEGACY_SQLALCHEMY = REPO / ".legacy" / "sqlalchemy-1.4.54"

SA14_SCRIPT = """
import sys
import sqlalchemy as sa
assert sa.__version__ == "1.4.54", sa.__version__
engine = sa.create_engine("dumpcat:///" + sys.argv[1])
insp = sa.inspect(engine)
print(insp.get_view_names() == sorted(sys.argv[2].split(",")), insp.get_table_names())
cols = {c["name"]: c["type"] for c in insp.get_columns("stats")}
print(len(cols), cols["nan_count"], cols["max"], repr(cols["shape"]))
stats = sa.Table("stats", sa.MetaData(), autoload_with=engine)
with engine.connect() as conn:
    q = sa.select(sa.func.count()).select_from(stats).where(stats.c.nan_count > sa.bindparam("n"))
    print(conn.execute(q, {"n": 0}).scalar())
    try:
        conn.execute(sa.text("COPY stats TO 'x.csv'"))
    except sa.exc.ProgrammingError as exc:
        print(str(exc.orig).split(":")[0])
    print(conn.execute(sa.text("SELECT count(*) FROM stats WHERE nan_count > :n"), {"n": 0}).scalar())
"""


def test_sqlalchemy_14(cat_path):
    if not LEGACY_SQLALCHEMY.is_dir():
        pytest.fail(
            "SQLAlchemy 1.4.54 is not installed for this test: run `python -m pip install --no-deps "
            f"--target {LEGACY_SQLALCHEMY.relative_to(REPO)} sqlalchemy==1.4.54` (.ci/run does)"
        )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(LEGACY_SQLALCHEMY), str(REPO)])}
    script = REGISTER + textwrap.dedent(SA14_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-c", script, str(cat_path.absolute()), ",".join(USER_VIEWS)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    n = catalog_rows(cat_path, "SELECT count(*) FROM stats WHERE nan_count > 0")[0][0]
    assert done.stdout.splitlines() == [
        "True []",
        "41 BIGINT DOUBLE_PRECISION ARRAY(BIGINT())",  # (1.4 prints a type's class name)
        str(n),
        "refused",
        str(n),
    ]


# -- JupySQL ---------------------------------------------------------------------------------------

NAN_TYPES = (
    "SELECT op_type, count(*) AS n FROM stats WHERE nan_count > 0 GROUP BY op_type ORDER BY n DESC LIMIT 3"
)
JUPYSQL_SCRIPT = """
import sys
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "sql")
shell.run_line_magic("sql", "dumpcat:///" + sys.argv[1])
result = shell.run_line_magic("sql", sys.argv[2])
print("ROWS", result.dict())
print("FRAME", result.DataFrame().shape)
refused = shell.run_cell("%sql COPY stats TO 'x.csv'")
print("REFUSED", type(refused.error_in_exec).__name__, "refused: COPY" in str(refused.error_in_exec))
shell.run_cell("n = 0")
after = shell.run_cell("%sql SELECT count(*) AS n FROM stats WHERE nan_count > {{n}}")
print("AFTER", after.result.dict())
"""


def test_jupysql_magic(cat_path, tmp_path):
    """`%load_ext sql`, `%sql dumpcat:///...`, queries, a refusal: in a real IPython shell, in a
    process of its own (telemetry and version checks of JupySQL's ploomber-core off)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PLOOMBER_STATS_ENABLED": "false",
        "PLOOMBER_VERSION_CHECK_DISABLED": "true",
        "HOME": str(tmp_path),  # ploomber-core and IPython write their settings under it
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    done = subprocess.run(
        [sys.executable, "-c", REGISTER + textwrap.dedent(JUPYSQL_SCRIPT), str(cat_path.absolute()),
         NAN_TYPES],
        capture_output=True, text=True, env=env, timeout=180, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    want = catalog_rows(cat_path, NAN_TYPES)
    assert lines["ROWS"] == repr({"op_type": tuple(r[0] for r in want), "n": tuple(r[1] for r in want)})
    assert lines["FRAME"] == "(3, 2)"
    assert lines["REFUSED"].endswith("True"), done.stdout
    n = catalog_rows(cat_path, "SELECT count(*) FROM stats WHERE nan_count > 0")[0][0]
    assert lines["AFTER"] == repr({"n": (n,)})


# -- the README's recipe ---------------------------------------------------------------------------


def test_readme_recipe_prints_what_it_shows(tmp_path):
    """The README's *SQLAlchemy, pandas and JupySQL* recipe, run where `scratch/demo.cat` is the
    set-up's catalog (the nan_log dump), prints the text shown after it."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n### SQLAlchemy, pandas and JupySQL\n", 1)[1].split("\n## ", 1)[0]
    code, shown = re.findall(r"^```(?:python|text)\n(.*?)^```$", section, re.M | re.S)
    Catalog.open(tmp_path / "scratch" / "demo.cat", create=True).ingest(dump_of("nan_log"), run="nan_log")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", REGISTER + code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


def test_a_catalog_removed_under_an_open_connection_says_so(tmp_path):
    path = nan_log_catalog(tmp_path)
    with dbapi.connect(path) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM runs")
        assert cur.fetchone() == (1,)
        shutil.rmtree(path)
        with pytest.raises(dbapi.OperationalError, match=r"cannot read .*snapshot\.json"):
            cur.execute("SELECT count(*) FROM stats")
