"""Dataframe libraries over a real `dumpcat serve` (issue 31): connectorx (which reads through
`COPY (query) TO STDOUT` in binary), polars' `read_database_uri` with both of its engines and
`read_database` over a SQLAlchemy connection, and ibis 12's PostgreSQL backend. Every answer is
compared with `Catalog.sql` on the same query."""

from __future__ import annotations

import connectorx
import ibis
import polars as pl
import psycopg
import pytest
import sqlalchemy as sa

from catalog.api import Catalog
from tests.conftest import nan_log_catalog
from tests.pg_clients import (
    NAN_ROWS,
    USER_VIEWS,
    arrow_answer,
    assert_same,
    expected,
    pandas_answer,
    polars_answer,
    serve,
)


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory):
    return nan_log_catalog(tmp_path_factory.mktemp("clients_dataframes"))


@pytest.fixture(scope="module")
def pg(cat_path):
    with serve(cat_path) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def catalog(cat_path):
    with Catalog.open(cat_path) as cat:
        yield cat


@pytest.fixture(scope="module")
def ibis_con(pg):
    con = ibis.postgres.connect(
        host=pg.host, port=pg.port, user=pg.user, password=pg.password, database=pg.dbname
    )
    yield con
    con.disconnect()


# -- connectorx and polars ------------------------------------------------------------------------


def test_connectorx_read_sql(pg, catalog):
    table = connectorx.read_sql(pg.uri(), NAN_ROWS, return_type="arrow")
    assert_same(*arrow_answer(table), expected(catalog, NAN_ROWS))


@pytest.mark.parametrize("engine", ["connectorx", "adbc"])
def test_polars_read_database_uri(pg, catalog, engine):
    df = pl.read_database_uri(NAN_ROWS, pg.uri(), engine=engine)
    assert_same(*polars_answer(df), expected(catalog, NAN_ROWS))


def test_polars_read_database_over_sqlalchemy_connection(pg, catalog):
    engine = sa.create_engine(pg.sqlalchemy_url("psycopg"))
    try:
        with engine.connect() as conn:
            df = pl.read_database(NAN_ROWS, conn)
    finally:
        engine.dispose()
    assert_same(*polars_answer(df), expected(catalog, NAN_ROWS))


# -- ibis -----------------------------------------------------------------------------------------


def test_ibis_list_tables_has_user_views(ibis_con):
    listed = ibis_con.list_tables()
    assert set(USER_VIEWS) <= set(listed), listed


def test_ibis_table_filter_aggregate(ibis_con, catalog):
    t = ibis_con.table("stats")
    with_nan = t.filter(t.nan_count > 0)
    df = with_nan.group_by("op_name").aggregate(n=with_nan.count()).execute()
    want = "SELECT op_name, count(*) AS n FROM stats WHERE nan_count > 0 GROUP BY op_name"
    assert_same(*pandas_answer(df), expected(catalog, want), ordered=False)


# ibis 12 finds the columns of `con.sql(query)` through a temporary view it then drops with
# `sge.Drop(this=...)`, an argument sqlglot 30 (the Spark extra's pin) no longer has: the DROP it
# sends is "DROP VIEW IF EXISTS" without a name, which PostgreSQL itself refuses as a syntax error.
def test_ibis_sql_query_without_schema_is_refused_clearly(ibis_con):
    """ibis's con.sql() without a schema learns the columns through a temporary view; the server
    keeps no per-session objects (a session's statements may run in any worker), so it refuses
    CREATE with a clear message and the session goes on. con.sql(query, schema=...) works (below)."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="read-only"):
        ibis_con.sql(NAN_ROWS).execute()
    assert ibis_con.list_tables()


def test_ibis_sql_query_with_schema(ibis_con, catalog):
    schema = ibis.Schema.from_pyarrow(catalog.sql(NAN_ROWS).schema)
    df = ibis_con.sql(NAN_ROWS, schema=schema).execute()
    assert_same(*pandas_answer(df), pandas_answer(catalog.sql(NAN_ROWS).to_pandas()), ordered=False)
