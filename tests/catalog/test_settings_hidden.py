"""No setting, path or environment detail of the engine reaches a client (issue 33 point 3): every
spelling of DuckDB's own settings and database views the attack found is refused, through a real
server (psycopg) and the local API, while PostgreSQL's pg_settings answers its fixed list."""

from __future__ import annotations

import psycopg
import pytest

from catalog import Catalog, QueryRefused
from tests.conftest import nan_log_catalog
from tests.pg_clients import serve

LEAKS = [
    'SELECT name, setting FROM "pg_settings"',
    'SELECT name, setting FROM "pg_catalog"."pg_settings"',
    'SELECT * FROM "system"."pg_catalog"."pg_settings"',
    "SELECT path FROM duckdb_databases",
    'SELECT path FROM "duckdb_databases"',
    "FROM pragma_database_list",
    "SELECT * FROM duckdb_settings",
    "SELECT * FROM duckdb_extensions",
    "SELECT * FROM duckdb_temporary_files",
]


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory):
    return nan_log_catalog(tmp_path_factory.mktemp("settings_hidden"))


@pytest.fixture(scope="module")
def pg(cat_path):
    with serve(cat_path) as endpoint:
        yield endpoint


def _connect(pg) -> psycopg.Connection:
    return psycopg.connect(
        host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.dbname, autocommit=True
    )


@pytest.mark.parametrize("query", LEAKS)
def test_engine_settings_and_paths_are_refused_by_any_spelling(pg, cat_path, query):
    """The server refuses each, or (PostgreSQL's own spellings of pg_settings) answers from its
    fixed list; the local API, which speaks DuckDB, refuses each."""
    with _connect(pg) as conn:
        try:
            rows = conn.execute(query).fetchall()
        except psycopg.Error as exc:
            assert "/" not in str(exc), exc  # no path in the message either
        else:
            assert "pg_settings" in query and rows and not any("/" in str(v) for r in rows for v in r)
            assert "temp_directory" not in {r[0] for r in rows}
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the session goes on
    with Catalog.open(cat_path) as cat, pytest.raises(QueryRefused):
        cat.sql(query)


def test_pg_settings_answers_its_fixed_list(pg):
    with _connect(pg) as conn:
        rows = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
        assert rows["server_version"].startswith("14") and "temp_directory" not in rows
        assert not any("/" in str(v) for v in rows.values())
        version = conn.execute("SELECT current_setting('server_version')").fetchone()[0]
        assert version == rows["server_version"]
