"""`export_duckdb`: a DuckDB database file of the catalog's views, read by SQLAlchemy (duckdb-engine,
as Superset connects) and by DuckDB 1.x clients.

The DuckDB 1.x client and the older SQLAlchemy are real packages from PyPI, installed before the
tests (the README's test command and `.ci/run`) with `pip install --target .legacy/<name>-<version>`
and imported by a subprocess (they cannot live next to this environment's DuckDB 2 and SQLAlchemy
2.1). The tests never reach a package index; if the folders are missing they fail, saying how to
install them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
import sqlalchemy as sa

from catalog import Catalog
from catalog.export import export_duckdb
from catalog.views import USER_VIEWS
from ingest.storage.schema import TABLES
from ingest.storage.store import CatalogError
from tests.conftest import REPO, dump_of

DUCKDB_1X = "duckdb==1.4.5"  # 1.4 is DuckDB's long-term-support line
SQLALCHEMY_14 = "sqlalchemy==1.4.54"  # the line Superset pins
LOG_OP = "Default/network-WithLossCell/_backbone-Net/Log-op0"
RAW_VIEWS = {f"raw_{t}" for t in TABLES}


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export") / "cat"
    with Catalog.open(path, create=True) as cat:
        cat.ingest(dump_of("nan_log"), run="nan_log")
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["views", "materialized"])
def exported(request, cat_path) -> Path:
    out = cat_path.parent / f"out-{request.param}.duckdb"
    summary = export_duckdb(cat_path, out, materialize=request.param)
    assert summary.path == out.absolute() and out.is_file()
    return out


def _engine(path: Path) -> sa.Engine:
    return sa.create_engine(f"duckdb:///{path.absolute()}", connect_args={"read_only": True})


LEGACY = REPO / ".legacy"


def _legacy(spec: str) -> Path:
    """The folder holding an older package, installed before the tests (never during them)."""
    target = LEGACY / spec.replace("==", "-")
    if not target.is_dir():
        pytest.fail(
            f"{spec} is not installed for this test: run `python -m pip install --no-deps --target "
            f"{target.relative_to(LEGACY.parent)} {spec}` (the README's test command and .ci/run do)"
        )
    return target


@pytest.fixture(scope="session")
def duckdb_1x() -> Path:
    return _legacy(DUCKDB_1X)


@pytest.fixture(scope="session")
def sqlalchemy_14() -> Path:
    return _legacy(SQLALCHEMY_14)


def _run_with(target: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """Run a Python script whose imports find `target`'s packages first."""
    env = {**os.environ, "PYTHONPATH": str(target)}
    cmd = [sys.executable, "-c", textwrap.dedent(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


# -- SQLAlchemy (duckdb-engine), as Superset connects ----------------------------------------------


def test_sqlalchemy_reflects_views_and_queries(exported):
    engine = _engine(exported)
    try:
        insp = sa.inspect(engine)
        views = set(insp.get_view_names())
        tables = set(insp.get_table_names())
        # what users query, not the helpers (those live in schema dumpcat_internal)
        assert views == set(USER_VIEWS) | RAW_VIEWS and set(USER_VIEWS).isdisjoint(tables)
        assert "stats_resolved" in set(insp.get_view_names(schema="dumpcat_internal"))
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT op_name FROM stats WHERE nan_count > 0")).scalars().all()
            first = conn.execute(
                sa.text("SELECT op_name FROM first_anomaly WHERE iteration = 0")
            ).scalar_one()
    finally:
        engine.dispose()
    assert LOG_OP in rows
    assert first == LOG_OP


def test_user_views_carry_their_descriptions(exported):
    """Tools reading the file show what each view and column means (sql/comments.sql), and only
    the views users query are in `main`."""
    with duckdb.connect(str(exported), read_only=True) as con:
        views = dict(
            con.execute(
                "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"
            ).fetchall()
        )
        column = con.execute(
            "SELECT comment FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = 'stats' "
            "AND column_name = 'nan_count'"
        ).fetchall()
        tables = con.execute("SELECT schema_name FROM duckdb_tables()").fetchall()
    assert {name: views[name] for name in USER_VIEWS} == USER_VIEWS
    assert set(views) == set(USER_VIEWS) | RAW_VIEWS
    assert column == [("element counts",)]
    assert {schema for (schema,) in tables} <= {"dumpcat_internal"}  # materialized rows live there


def test_same_views_and_columns_as_the_catalog(exported, cat_path):
    with Catalog.open(cat_path) as cat:
        expected = {
            v: cat.sql(f"DESCRIBE {v}").select(["column_name", "column_type"]).to_pylist() for v in USER_VIEWS
        }
    con = duckdb.connect(str(exported), read_only=True)
    try:
        for view, cols in expected.items():
            got = (
                con.sql(f"DESCRIBE {view}")
                .to_arrow_table()
                .select(["column_name", "column_type"])
                .to_pylist()
            )
            assert got == cols, view
    finally:
        con.close()


def test_sqlalchemy_14_reflects_columns(exported, sqlalchemy_14):
    """Column reflection (what Superset does to build a dataset) with the SQLAlchemy line Superset
    uses. SQLAlchemy >= 2.0.45 cannot reflect columns through duckdb-engine 0.17.0 at all (it
    queries pg_catalog.pg_collation, which DuckDB 2.0.0 lacks): docs/bi-tools.md says so."""
    script = """
        import json, sys, warnings
        warnings.simplefilter("ignore")
        import sqlalchemy as sa
        assert sa.__version__.startswith("1.4"), sa.__version__
        engine = sa.create_engine("duckdb:///" + sys.argv[1], connect_args={"read_only": True})
        insp = sa.inspect(engine)
        cols = [c["name"] for c in insp.get_columns("stats")]
        with engine.connect() as conn:
            n = conn.execute(sa.text("SELECT count(*) FROM stats WHERE nan_count > 0")).scalar()
        print(json.dumps({"views": insp.get_view_names(), "cols": cols, "n": n}))
    """
    proc = _run_with(sqlalchemy_14, script, str(exported))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert set(USER_VIEWS) <= set(got["views"])
    assert got["cols"][:3] == ["row_id", "stat_id", "run"]
    assert "nan_count" in got["cols"] and got["n"] > 0


# -- DuckDB 1.x clients ----------------------------------------------------------------------------

_DUCKDB_1X_SCRIPT = """
    import json, sys
    import duckdb
    assert duckdb.__version__.startswith("1."), duckdb.__version__
    con = duckdb.connect(sys.argv[1], read_only=True)
    views = [r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
    nan_ops = [r[0] for r in con.execute("SELECT op_name FROM stats WHERE nan_count > 0").fetchall()]
    first = con.execute("SELECT op_name FROM first_anomaly WHERE iteration = 0").fetchall()
    print(json.dumps({"version": duckdb.__version__, "views": views, "nan_ops": nan_ops, "first": first}))
"""


def test_duckdb_1x_opens_read_only_and_queries(exported, duckdb_1x):
    proc = _run_with(duckdb_1x, _DUCKDB_1X_SCRIPT, str(exported))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert set(USER_VIEWS) <= set(got["views"])
    assert LOG_OP in got["nan_ops"]
    assert got["first"] == [[LOG_OP]]


def test_latest_storage_is_not_readable_by_duckdb_1x(cat_path, duckdb_1x, tmp_path):
    """Why the default storage version is v1.0.0: DuckDB 2.0's own default format is 2.x only."""
    out = tmp_path / "latest.duckdb"
    export_duckdb(cat_path, out, storage_version=None)
    proc = _run_with(duckdb_1x, _DUCKDB_1X_SCRIPT, str(out))
    assert proc.returncode != 0
    assert "storage" in proc.stderr.lower() or "version" in proc.stderr.lower()
    con = duckdb.connect(str(out), read_only=True)  # DuckDB 2 reads it
    try:
        assert con.execute("SELECT count(*) FROM stats").fetchall()[0][0] > 0
    finally:
        con.close()


# -- writing -----------------------------------------------------------------------------------


def test_replaces_atomically_and_leaves_no_temporary_files(cat_path, tmp_path):
    out = tmp_path / "cat.duckdb"
    out.write_bytes(b"not a database")
    (tmp_path / "cat.duckdb.wal").write_bytes(b"stale wal")
    export_duckdb(cat_path, out)
    reader = duckdb.connect(str(out), read_only=True)
    try:
        before = reader.execute("SELECT count(*) FROM stats").fetchall()
        export_duckdb(cat_path, out)  # a reader holding the old file keeps reading it
        assert reader.execute("SELECT count(*) FROM stats").fetchall() == before
    finally:
        reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cat.duckdb"]


def test_views_export_needs_reexport_after_ingest(cat_path, tmp_path):
    cat_path = Path(shutil.copytree(cat_path, tmp_path / "cat"))  # the module's catalog, nan_log
    with Catalog.open(cat_path) as cat:
        out = tmp_path / "views.duckdb"
        export_duckdb(cat_path, out)
        cat.ingest(dump_of("simple"), run="simple")

    def runs() -> list[str]:
        con = duckdb.connect(str(out), read_only=True)
        try:
            return [r[0] for r in con.execute("SELECT run FROM runs ORDER BY run").fetchall()]
        finally:
            con.close()

    assert runs() == ["nan_log"]  # the file list is the one of export time
    export_duckdb(cat_path, out)
    assert runs() == ["nan_log", "simple"]


def test_materialized_export_is_self_contained(cat_path, tmp_path):
    cat_path = Path(shutil.copytree(cat_path, tmp_path / "cat"))  # the module's catalog, moved below
    views_out, mat_out = tmp_path / "views.duckdb", tmp_path / "mat.duckdb"
    export_duckdb(cat_path, views_out)
    summary = export_duckdb(cat_path, mat_out, materialize=True)
    assert summary.materialized and summary.tables == len(TABLES) and summary.rows_copied > 0
    cat_path.rename(tmp_path / "moved")
    con = duckdb.connect(str(mat_out), read_only=True)
    try:
        assert LOG_OP in [
            r[0] for r in con.execute("SELECT op_name FROM stats WHERE nan_count > 0").fetchall()
        ]
    finally:
        con.close()
    con = duckdb.connect(str(views_out), read_only=True)
    try:
        with pytest.raises(duckdb.IOException):
            con.execute("SELECT count(*) FROM stats").fetchall()
    finally:
        con.close()


def test_empty_catalog_exports_empty_views(tmp_path):
    Catalog.open(tmp_path / "cat", create=True).close()
    out = tmp_path / "empty.duckdb"
    summary = export_duckdb(tmp_path / "cat", out)
    assert summary.views >= len(USER_VIEWS) + len(TABLES)
    con = duckdb.connect(str(out), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM stats").fetchall() == [(0,)]
    finally:
        con.close()


def test_not_a_catalog(tmp_path):
    (tmp_path / "nope").mkdir()
    with pytest.raises(CatalogError):
        export_duckdb(tmp_path / "nope", tmp_path / "x.duckdb")
    assert not (tmp_path / "x.duckdb").exists()
