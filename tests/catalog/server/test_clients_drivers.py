"""PostgreSQL drivers' own features over a real `dumpcat serve` (issue 31): psycopg 3 binary
results and parameters, server-side cursors, list parameters and COPY TO STDOUT; psycopg2 named
cursors and copy_expert; asyncpg's typed parameters, cursors and prepared statements; ADBC's
Arrow results and catalog listing. Every answer is compared with `Catalog.sql` on the same query."""

from __future__ import annotations

import asyncio
import csv
import io

import adbc_driver_postgresql.dbapi
import asyncpg
import psycopg
import psycopg2
import pytest

from catalog.api import Catalog
from tests.conftest import nan_log_catalog
from tests.pg_clients import (
    NAN_ROWS,
    NAN_ROWS_TYPED,
    NAN_ROWS_TYPES,
    RUN_ROWS,
    arrow_answer,
    assert_same,
    expected,
    same_type,
    serve,
)


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory):
    return nan_log_catalog(tmp_path_factory.mktemp("clients_drivers"))


@pytest.fixture(scope="module")
def pg(cat_path):
    with serve(cat_path) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def catalog(cat_path):
    with Catalog.open(cat_path) as cat:
        yield cat


def _psycopg(pg, **kw) -> psycopg.Connection:
    args = dict(host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.dbname)
    return psycopg.connect(**args, **kw)


def _names(cursor) -> list[str]:
    return [d.name for d in cursor.description]


def _some_op_names(catalog, n: int = 3) -> list[str]:
    rows = catalog.sql("SELECT DISTINCT op_name FROM stats WHERE nan_count > 0 ORDER BY op_name").to_pylist()
    return [r["op_name"] for r in rows[:n]]


def _parse_array(text: str) -> tuple[int, ...]:
    inner = text.strip("{}")
    return tuple(int(x) for x in inner.split(",")) if inner else ()


def _parse_csv(data: str) -> tuple[list[str], list[tuple]]:
    """The header and rows of CSV COPY output of NAN_ROWS_TYPED (NULL is an empty field)."""
    header, *lines = list(csv.reader(io.StringIO(data)))
    parse = [int, str, int, float, _parse_array, int]
    rows = [tuple(p(v) if v != "" else None for p, v in zip(parse, line, strict=True)) for line in lines]
    return header, rows


# -- psycopg 3 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", [NAN_ROWS, RUN_ROWS], ids=["stats", "runs"])
def test_psycopg_binary_cursor(pg, catalog, query):
    with _psycopg(pg, autocommit=True) as conn, conn.cursor(binary=True) as cur:
        cur.execute(query)
        assert_same(_names(cur), cur.fetchall(), expected(catalog, query))


def test_psycopg_execute_binary(pg, catalog):
    with _psycopg(pg, autocommit=True) as conn:
        cur = conn.execute(NAN_ROWS, binary=True)
        assert_same(_names(cur), cur.fetchall(), expected(catalog, NAN_ROWS))


def test_psycopg_binary_parameters(pg, catalog):
    query = "SELECT row_id, op_name, max FROM stats WHERE nan_count > %s AND row_id > %s AND max >= %s"
    query += " AND op_name <> %s AND has_nan = %s ORDER BY row_id"
    params = [0, 1 << 40, 0.5, "global_step", True]  # int2, int8, float8, text, bool
    with _psycopg(pg, autocommit=True) as conn:
        cur = conn.execute(query.replace("%s", "%b"), params)
        assert_same(_names(cur), cur.fetchall(), expected(catalog, query, params))


def test_psycopg_binary_list_parameters(pg, catalog):
    query = "SELECT row_id, op_name, nan_count FROM stats WHERE nan_count = ANY(%s) AND op_name <> ALL(%s)"
    query += " ORDER BY row_id"
    params = [[2, 3], ["head_bias"]]
    with _psycopg(pg, autocommit=True) as conn:
        cur = conn.execute(query.replace("%s", "%b"), params)
        assert_same(_names(cur), cur.fetchall(), expected(catalog, query, params))


def test_psycopg_server_side_cursor(pg, catalog):
    with _psycopg(pg) as conn, conn.transaction(), conn.cursor(name="c") as cur:
        cur.itersize = 7
        cur.execute(NAN_ROWS)
        rows = cur.fetchmany(5)
        assert len(rows) == 5
        rows += list(cur)  # the rest, `itersize` rows per FETCH
        assert_same(_names(cur), rows, expected(catalog, NAN_ROWS))


def test_psycopg_list_parameter_of_text(pg, catalog):
    query = "SELECT row_id, op_name, nan_count FROM stats WHERE op_name = ANY(%s) ORDER BY row_id"
    names = _some_op_names(catalog)
    with _psycopg(pg, autocommit=True) as conn:
        cur = conn.execute(query, [names])
        assert_same(_names(cur), cur.fetchall(), expected(catalog, query, [names]))


def test_psycopg_list_parameter_of_ints(pg, catalog):
    query = "SELECT row_id, op_name, nan_count FROM stats WHERE nan_count = ANY(%s) ORDER BY row_id"
    with _psycopg(pg, autocommit=True) as conn:
        cur = conn.execute(query, [[2, 3]])
        assert_same(_names(cur), cur.fetchall(), expected(catalog, query, [[2, 3]]))


def _copy_rows(pg, statement: str) -> list[tuple]:
    """The rows `cursor.copy(statement)` reads, typed NAN_ROWS_TYPES."""
    with _psycopg(pg, autocommit=True) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        copy.set_types(NAN_ROWS_TYPES)
        return list(copy.rows())


def test_psycopg_copy_to_stdout_text(pg, catalog):
    rows = _copy_rows(pg, f"COPY ({NAN_ROWS_TYPED}) TO STDOUT")
    want_names, _ = want = expected(catalog, NAN_ROWS_TYPED)
    assert_same(want_names, rows, want)


def test_psycopg_copy_to_stdout_csv_header(pg, catalog):
    statement = f"COPY ({NAN_ROWS_TYPED}) TO STDOUT WITH (FORMAT csv, HEADER)"
    with _psycopg(pg, autocommit=True) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        data = b"".join(bytes(block) for block in copy).decode()
    assert_same(*_parse_csv(data), expected(catalog, NAN_ROWS_TYPED))


def test_psycopg_copy_to_stdout_binary(pg, catalog):
    rows = _copy_rows(pg, f"COPY ({NAN_ROWS_TYPED}) TO STDOUT (FORMAT binary)")
    want_names, _ = want = expected(catalog, NAN_ROWS_TYPED)
    assert_same(want_names, rows, want)


# -- psycopg2 -------------------------------------------------------------------------------------


def _psycopg2(pg):
    return psycopg2.connect(host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.dbname)


def test_psycopg2_named_cursor(pg, catalog):
    conn = _psycopg2(pg)
    try:
        with conn.cursor(name="x") as cur:
            cur.itersize = 7
            cur.execute(NAN_ROWS)
            rows = cur.fetchmany(5)
            assert len(rows) == 5
            rows += list(cur)  # the rest, `itersize` rows per FETCH
            names = [d.name for d in cur.description]
        conn.rollback()
    finally:
        conn.close()
    assert_same(names, rows, expected(catalog, NAN_ROWS))


def test_psycopg2_copy_expert_csv_header(pg, catalog):
    buf = io.StringIO()
    conn = _psycopg2(pg)
    try:
        with conn.cursor() as cur:
            cur.copy_expert(f"COPY ({NAN_ROWS_TYPED}) TO STDOUT WITH CSV HEADER", buf)
        conn.rollback()
    finally:
        conn.close()
    assert_same(*_parse_csv(buf.getvalue()), expected(catalog, NAN_ROWS_TYPED))


# -- asyncpg --------------------------------------------------------------------------------------


def _asyncpg(pg, work):
    """Run `await work(connection)` on a new asyncpg connection."""

    async def go():
        conn = await asyncpg.connect(
            host=pg.host, port=pg.port, user=pg.user, password=pg.password, database=pg.dbname
        )
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def _record_answer(records) -> tuple[list[str], list[tuple]]:
    return (list(records[0].keys()) if records else []), [tuple(r.values()) for r in records]


ASYNCPG_PARAMETERS = {
    "int": ("nan_count > $1", [0]),
    "float": ("max >= $1", [0.5]),
    "text": ("op_name = $1", ["head_bias"]),
    "text_list": ("op_name = ANY($1)", [["head_bias", "fc_bias", "momentum"]]),
    "int_list": ("nan_count = ANY($1)", [[2, 3]]),
}


@pytest.mark.parametrize("kind", ASYNCPG_PARAMETERS)
def test_asyncpg_fetch_with_parameters(pg, catalog, kind):
    where, params = ASYNCPG_PARAMETERS[kind]
    query = f"SELECT row_id, op_name, nan_count, max, shape FROM stats WHERE {where} ORDER BY row_id"
    records = _asyncpg(pg, lambda conn: conn.fetch(query, *params))
    assert_same(*_record_answer(records), expected(catalog, query, params))


def test_asyncpg_statement_with_too_many_parameters_is_an_error_not_a_dropped_connection(pg):
    """`SELECT $32768` cannot be described in the protocol's 16-bit count (it used to drop the
    connection): an ErrorResponse, and the same connection goes on."""

    async def work(conn):
        with pytest.raises(asyncpg.PostgresError, match="too many parameters") as caught:
            await conn.prepare("SELECT $32768::INTEGER AS x")
        return caught.value.sqlstate, await conn.fetchval("SELECT 41 + 1")

    assert _asyncpg(pg, work) == ("54023", 42)


def test_asyncpg_fetch_timestamptz_and_text_array(pg, catalog):
    records = _asyncpg(pg, lambda conn: conn.fetch(RUN_ROWS))
    assert_same(*_record_answer(records), expected(catalog, RUN_ROWS))


def test_asyncpg_cursor_in_transaction(pg, catalog):
    async def work(conn):
        async with conn.transaction():
            cursor = await conn.cursor(NAN_ROWS)
            fetched = await cursor.fetch(5)
            fetched += await cursor.fetch(1000)
            iterated = [r async for r in conn.cursor(NAN_ROWS, prefetch=7)]
        return fetched, iterated

    fetched, iterated = _asyncpg(pg, work)
    want = expected(catalog, NAN_ROWS)
    assert_same(*_record_answer(fetched), want)
    assert_same(*_record_answer(iterated), want)


def test_asyncpg_prepared_statement_attributes(pg, catalog):
    async def work(conn):
        statement = await conn.prepare(NAN_ROWS_TYPED)
        attributes = [(a.name, a.type.name) for a in statement.get_attributes()]
        return attributes, await statement.fetch()

    attributes, records = _asyncpg(pg, work)
    want_names, _ = want = expected(catalog, NAN_ROWS_TYPED)
    assert attributes == list(zip(want_names, NAN_ROWS_TYPES, strict=True))
    assert_same(*_record_answer(records), want)


# -- ADBC -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", [NAN_ROWS, RUN_ROWS], ids=["stats", "runs"])
def test_adbc_fetch_arrow_table(pg, catalog, query):
    with adbc_driver_postgresql.dbapi.connect(pg.uri()) as conn, conn.cursor() as cur:
        cur.execute(query)
        table = cur.fetch_arrow_table()
    assert_same(*arrow_answer(table), expected(catalog, query))


def test_adbc_get_objects_lists_stats_and_its_columns(pg, catalog):
    with adbc_driver_postgresql.dbapi.connect(pg.uri()) as conn:
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    found = [
        table
        for db in objects
        if db["catalog_name"] == pg.dbname
        for schema in db["catalog_db_schemas"] or []
        if schema["db_schema_name"] == "public"
        for table in schema["db_schema_tables"] or []
        if table["table_name"] == "stats"
    ]
    assert len(found) == 1, objects
    assert found[0]["table_type"] == "view"
    columns = sorted(found[0]["table_columns"], key=lambda c: c["ordinal_position"])
    assert [c["column_name"] for c in columns] == catalog.sql("SELECT * FROM stats LIMIT 0").column_names


def test_adbc_get_table_schema(pg, catalog):
    with adbc_driver_postgresql.dbapi.connect(pg.uri()) as conn:
        schema = conn.adbc_get_table_schema("stats")
    want = catalog.sql("SELECT * FROM stats LIMIT 0").schema
    assert schema.names == want.names
    for name in want.names:
        assert same_type(schema.field(name).type, want.field(name).type), name
