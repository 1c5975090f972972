"""SQLAlchemy 2.x over a real `dumpcat serve`, with each PostgreSQL driver it has a dialect for
(psycopg2, psycopg, pg8000, and asyncpg through the async engine): connect, bound parameters,
reflection through `inspect()`, `Table(autoload_with=)`, `MetaData.reflect`, and pandas' readers
(issue 31). Every answer is compared with `Catalog.sql` on the same query."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from catalog.api import Catalog
from tests.conftest import nan_log_catalog
from tests.pg_clients import (
    INTERNAL_VIEWS,
    NAN_ROWS,
    USER_VIEWS,
    Endpoint,
    assert_same,
    expected,
    pandas_answer,
    serve,
)

DRIVERS = ["psycopg2", "psycopg", "pg8000", "asyncpg"]


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory):
    return nan_log_catalog(tmp_path_factory.mktemp("clients_sqlalchemy"))


@pytest.fixture(scope="module")
def pg(cat_path):
    with serve(cat_path) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def catalog(cat_path):
    with Catalog.open(cat_path) as cat:
        yield cat


class Dialect:
    """One driver's way in. `run(fn)` calls fn with what SQLAlchemy's public API reflects and
    reads through: the Engine of a synchronous driver; for asyncpg, the synchronous Connection
    that an AsyncEngine's `AsyncConnection.run_sync` hands over (an async engine is reflected
    that way). `execute` runs a statement through the driver's own API (awaited for asyncpg)."""

    def __init__(self, driver: str, endpoint: Endpoint) -> None:
        self.driver = driver
        self.url = endpoint.sqlalchemy_url(driver)
        self.engine = None if driver == "asyncpg" else sa.create_engine(self.url)

    def _async(self, work: Callable):
        async def go():
            engine = create_async_engine(self.url, poolclass=NullPool)
            try:
                async with engine.connect() as conn:
                    return await work(conn)
            finally:
                await engine.dispose()

        return asyncio.run(go())

    def run(self, fn: Callable):
        if self.engine is not None:
            return fn(self.engine)
        return self._async(lambda conn: conn.run_sync(fn))

    def execute(self, statement, params: dict) -> tuple[list[str], list]:
        if self.engine is not None:
            with self.engine.connect() as conn:
                result = conn.execute(statement, params)
                return list(result.keys()), result.fetchall()

        async def work(conn):
            result = await conn.execute(statement, params)
            return list(result.keys()), result.fetchall()

        return self._async(work)

    def dispose(self) -> None:
        if self.engine is not None:
            self.engine.dispose()


@pytest.fixture(scope="module", params=DRIVERS)
def dialect(request, pg):
    way_in = Dialect(request.param, pg)
    yield way_in
    way_in.dispose()


def _fetch(bind, statement) -> tuple[list[str], list]:
    """Run a statement on an Engine (through a connection of its own) or on a Connection."""
    if isinstance(bind, sa.Engine):
        with bind.connect() as conn:
            return _fetch(conn, statement)
    result = bind.execute(statement)
    return list(result.keys()), result.fetchall()


def test_sqlalchemy_query_with_bound_parameters(dialect, catalog):
    query = "SELECT row_id, op_name, nan_count, max, shape FROM stats WHERE nan_count > {} AND op_name <> {}"
    query += " ORDER BY row_id"
    names, rows = dialect.execute(sa.text(query.format(":n", ":skip")), {"n": 0, "skip": "global_step"})
    assert_same(names, rows, expected(catalog, query.format("%s", "%s"), [0, "global_step"]))


def test_sqlalchemy_inspector_schema_names_include_public(dialect):
    assert "public" in dialect.run(lambda bind: sa.inspect(bind).get_schema_names())


def test_sqlalchemy_inspector_lists_user_views_as_views(dialect):
    def names(bind):
        inspector = sa.inspect(bind)
        return inspector.get_table_names(), inspector.get_view_names()

    tables, views = dialect.run(names)
    assert set(USER_VIEWS) <= set(views), sorted(views)
    assert not set(USER_VIEWS) & set(tables), sorted(tables)


def test_sqlalchemy_inspector_hides_internal_helper_views(dialect):
    def names(bind):
        inspector = sa.inspect(bind)
        return inspector.get_table_names() + inspector.get_view_names()

    listed = dialect.run(names)
    assert not set(INTERNAL_VIEWS) & set(listed), sorted(listed)


def test_sqlalchemy_inspector_column_names_and_types_of_stats(dialect, catalog):
    columns = dialect.run(lambda bind: sa.inspect(bind).get_columns("stats"))
    assert [c["name"] for c in columns] == catalog.sql("SELECT * FROM stats LIMIT 0").column_names
    types = {c["name"]: c["type"] for c in columns}
    assert isinstance(types["nan_count"], sa.BIGINT), types["nan_count"]
    assert isinstance(types["rank"], sa.INTEGER), types["rank"]
    assert isinstance(types["max"], postgresql.DOUBLE_PRECISION), types["max"]
    assert isinstance(types["op_name"], (sa.TEXT, sa.VARCHAR)), types["op_name"]
    assert isinstance(types["has_nan"], sa.BOOLEAN), types["has_nan"]
    assert isinstance(types["shape"], postgresql.ARRAY), types["shape"]
    assert isinstance(types["shape"].item_type, sa.BIGINT), types["shape"].item_type


def test_sqlalchemy_inspector_keys_and_indexes_of_a_view_are_empty(dialect):
    def keys(bind):
        inspector = sa.inspect(bind)
        pk = inspector.get_pk_constraint("stats")
        return pk["constrained_columns"], inspector.get_foreign_keys("stats"), inspector.get_indexes("stats")

    assert dialect.run(keys) == ([], [], [])


def test_sqlalchemy_autoloaded_table_select(dialect, catalog):
    def read(bind):
        stats = sa.Table("stats", sa.MetaData(), autoload_with=bind)
        c = stats.c
        query = sa.select(c.row_id, c.op_name, c.nan_count, c.max, c.shape).where(c.nan_count > 0)
        return [col.name for col in stats.columns], _fetch(bind, query.order_by(c.row_id))

    columns, (names, rows) = dialect.run(read)
    assert columns == catalog.sql("SELECT * FROM stats LIMIT 0").column_names
    want = "SELECT row_id, op_name, nan_count, max, shape FROM stats WHERE nan_count > 0 ORDER BY row_id"
    assert_same(names, rows, expected(catalog, want))


def test_sqlalchemy_metadata_reflect_with_views(dialect, catalog):
    def reflect(bind):
        metadata = sa.MetaData()
        metadata.reflect(bind, views=True)
        return {name: [c.name for c in table.columns] for name, table in metadata.tables.items()}

    tables = dialect.run(reflect)
    assert set(USER_VIEWS) <= set(tables), sorted(tables)
    for view in USER_VIEWS:
        assert tables[view] == catalog.sql(f"SELECT * FROM {view} LIMIT 0").column_names, view


def test_pandas_read_sql_through_sqlalchemy(dialect, catalog):
    df = dialect.run(lambda bind: pd.read_sql(NAN_ROWS, bind))
    want = pandas_answer(catalog.sql(NAN_ROWS).to_pandas())
    assert_same(*pandas_answer(df), want)


def test_pandas_read_sql_table(dialect, catalog):
    df = dialect.run(lambda bind: pd.read_sql_table("stats", bind))
    want = pandas_answer(catalog.sql("SELECT * FROM stats").to_pandas())
    assert_same(*pandas_answer(df), want, ordered=False)
