"""The SQLAlchemy dialect `dumpcat://`: a live catalog, opened in this process, for SQLAlchemy tools.

`create_engine("dumpcat:///path/to/catalog")` (three slashes and a relative path, four for an
absolute one, as `sqlite://`) gives pandas, JupySQL, Superset and any SQLAlchemy 1.4 or 2.x code
the catalog without a server and without a stale `export-duckdb` snapshot. Its driver is
`catalog.dbapi`: every statement passes `Catalog.sql`'s guard and sees the catalog's latest
committed snapshot.

Built on SQLAlchemy's own interfaces (`DefaultDialect`, with PostgreSQL's SQL and type compilers,
whose syntax DuckDB reads), not on duckdb-engine: that dialect reflects through PostgreSQL's
`pg_catalog` queries, whose column reflection fails on SQLAlchemy >= 2.0.45 with DuckDB 2.0, would
reach the catalog unguarded, and shows every helper view. Here reflection reads DuckDB's
`duckdb_views()` and `duckdb_columns()` through the guard, and lists only the user views
(`catalog.views.USER_VIEWS`). docs/benchmarks.md (bench_dialect) has the measurements.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import sqlalchemy
from sqlalchemy import exc as sa_exc
from sqlalchemy import types as sqltypes
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.base import PGCompiler, PGIdentifierPreparer, PGTypeCompiler
from sqlalchemy.engine import default

from catalog.views import USER_VIEWS, column_comments_sql, query_text

SCHEMA = "main"  # DuckDB's schema of the catalog's views (in its database `dumpcat`)

_SIMPLE_TYPES: dict[str, type[sqltypes.TypeEngine] | sqltypes.TypeEngine] = {
    "BOOLEAN": sqltypes.BOOLEAN,
    "TINYINT": sqltypes.SMALLINT,
    "SMALLINT": sqltypes.SMALLINT,
    "INTEGER": sqltypes.INTEGER,
    "BIGINT": sqltypes.BIGINT,
    "HUGEINT": sqltypes.NUMERIC(38, 0),
    "UTINYINT": sqltypes.SMALLINT,
    "USMALLINT": sqltypes.INTEGER,
    "UINTEGER": sqltypes.BIGINT,
    "UBIGINT": sqltypes.NUMERIC(20, 0),
    "UHUGEINT": sqltypes.NUMERIC(39, 0),
    "FLOAT": sqltypes.REAL,
    "DOUBLE": postgresql.DOUBLE_PRECISION,
    "VARCHAR": sqltypes.VARCHAR,
    "BLOB": sqltypes.LargeBinary,
    "DATE": sqltypes.DATE,
    "TIME": sqltypes.TIME,
    "TIMESTAMP": sqltypes.TIMESTAMP,
    "TIMESTAMP_S": sqltypes.TIMESTAMP,
    "TIMESTAMP_MS": sqltypes.TIMESTAMP,
    "TIMESTAMP_NS": sqltypes.TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": sqltypes.TIMESTAMP(timezone=True),
    "TIME WITH TIME ZONE": sqltypes.TIME(timezone=True),
    "INTERVAL": sqltypes.Interval,
    "UUID": postgresql.UUID(as_uuid=True),
}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def column_type(duckdb_type: str) -> sqltypes.TypeEngine:
    """The SQLAlchemy type of a DuckDB type name (`BIGINT[]` is an ARRAY of BIGINT); NullType for
    the nested ones SQLAlchemy has no type for (STRUCT, MAP, UNION)."""
    name = duckdb_type.strip().upper()
    if name.endswith("[]"):
        base = name.rstrip("[]")
        dimensions = (len(name) - len(base)) // 2
        return postgresql.ARRAY(column_type(base), dimensions=dimensions if dimensions > 1 else None)
    if m := _DECIMAL.fullmatch(name):
        return sqltypes.NUMERIC(int(m.group(1)), int(m.group(2)))
    found = _SIMPLE_TYPES.get(name)
    if found is None:
        return sqltypes.NullType()
    return found() if isinstance(found, type) else found


@functools.cache
def _column_comments() -> dict[tuple[str, str], str]:
    """(view, column) -> description, from sql/comments.sql."""
    pattern = re.compile(r"COMMENT ON COLUMN (\w+)\.(\w+) IS '((?:[^']|'')*)'", re.S)
    found = {}
    for statement in column_comments_sql():
        if m := pattern.match(statement):
            found[(m.group(1), m.group(2))] = m.group(3).replace("''", "'")
    return found


def _cached(fn: Callable) -> Callable:
    """SQLAlchemy's `reflection.cache` (answers kept in the inspector's `info_cache`), written out:
    SQLAlchemy 1.4's version cannot decorate annotated methods."""

    @functools.wraps(fn)
    def cached(self: Any, connection: Any, *args: Any, **kw: Any) -> Any:
        info_cache = kw.get("info_cache")
        if info_cache is None:
            return fn(self, connection, *args, **kw)
        key = (
            fn.__name__,
            tuple(a for a in args if isinstance(a, str)),
            tuple((k, v) for k, v in sorted(kw.items()) if k not in ("info_cache", "unreflectable")),
        )
        try:
            return info_cache[key]
        except KeyError:
            info_cache[key] = found = fn(self, connection, *args, **kw)
            return found
        except TypeError:  # an argument that cannot be hashed: no caching
            return fn(self, connection, *args, **kw)

    return cached


class DumpcatCompiler(PGCompiler):
    """PostgreSQL's SQL compiler: DuckDB reads its syntax."""


class DumpcatDialect(default.DefaultDialect):
    """`dumpcat:///catalog`: read-only, guarded SQL over a live catalog (driver: catalog.dbapi)."""

    name = "dumpcat"
    driver = "dumpcat"
    supports_statement_cache = True
    statement_compiler = DumpcatCompiler
    preparer = PGIdentifierPreparer
    type_compiler = PGTypeCompiler  # SQLAlchemy 1.4's attribute (2.x reads it too)
    type_compiler_cls = PGTypeCompiler
    default_paramstyle = "qmark"
    supports_native_boolean = True
    supports_native_decimal = True
    supports_unicode_statements = True
    supports_unicode_binds = True
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False
    supports_alter = False
    supports_sequences = False
    supports_comments = True
    inline_comments = False
    postfetch_lastrowid = False
    implicit_returning = False
    returns_unicode_strings = True
    description_encoding = None
    max_identifier_length = 63
    _backslash_escapes = False  # PGCompiler's literal rendering reads it: DuckDB has standard strings

    @classmethod
    def import_dbapi(cls) -> ModuleType:
        """SQLAlchemy 2.x: the DB-API module."""
        from catalog import dbapi

        return dbapi

    @classmethod
    def dbapi(cls) -> ModuleType:  # type: ignore[override]  # SQLAlchemy 1.4's name for import_dbapi
        return cls.import_dbapi()

    def create_connect_args(self, url: sqlalchemy.engine.URL) -> tuple[list, dict]:
        """`dumpcat:///rel/path` or `dumpcat:////abs/path`: the catalog's folder is the database."""
        if not url.database:
            raise sa_exc.ArgumentError(
                "a dumpcat URL names the catalog folder: dumpcat:///relative/path or dumpcat:////absolute/path"
            )
        if url.host or url.username or url.port:
            raise sa_exc.ArgumentError(
                f"a dumpcat URL has no host, user or port (dumpcat:////absolute/path): got {url!r}"
            )
        if url.query:
            raise sa_exc.ArgumentError(f"a dumpcat URL takes no query options: got {sorted(url.query)}")
        return [url.database], {}

    # -- what SQLAlchemy asks a connection for ----------------------------------------------------

    def initialize(self, connection: Any) -> None:
        default.DefaultDialect.initialize(self, connection)
        self.default_schema_name = SCHEMA

    def _get_server_version_info(self, connection: Any) -> tuple[int, ...]:
        import duckdb

        return tuple(int(p) for p in re.findall(r"\d+", duckdb.__version__)[:3])

    def _get_default_schema_name(self, connection: Any) -> str:
        return SCHEMA

    def get_isolation_level(self, dbapi_connection: Any) -> str:
        return "SERIALIZABLE"  # each query reads one committed snapshot

    def get_default_isolation_level(self, dbapi_conn: Any) -> str:
        return "SERIALIZABLE"

    def set_isolation_level(self, dbapi_connection: Any, level: str) -> None:
        pass  # one level only: nothing to set

    def get_isolation_level_values(self, dbapi_conn: Any) -> list[str]:
        return ["SERIALIZABLE", "AUTOCOMMIT"]

    def do_rollback(self, dbapi_connection: Any) -> None:
        pass  # read-only: no transaction to end

    def do_commit(self, dbapi_connection: Any) -> None:
        pass

    def do_begin(self, dbapi_connection: Any) -> None:
        pass

    # -- reflection ---------------------------------------------------------------------------------

    def _columns(self, connection: Any, name: str, schema: str | None) -> list[tuple]:
        if (schema or SCHEMA) != SCHEMA:
            return []
        query = query_text("dialect_columns")
        return connection.exec_driver_sql(query, {"schema": SCHEMA, "name": name}).fetchall()

    @_cached
    def get_schema_names(self, connection: Any, **kw: Any) -> list[str]:
        return [SCHEMA]

    @_cached
    def get_table_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        """None: the catalog's relations are views (its stored helper tables are not listed)."""
        return []

    @_cached
    def get_view_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        """The user views (catalog.views.USER_VIEWS) the catalog has; helper views are hidden."""
        if (schema or SCHEMA) != SCHEMA:
            return []
        rows = connection.exec_driver_sql(query_text("dialect_views"), {"schema": SCHEMA}).fetchall()
        return [r[0] for r in rows if r[0] in USER_VIEWS]

    def get_temp_table_names(self, connection: Any, **kw: Any) -> list[str]:
        return []

    def get_temp_view_names(self, connection: Any, **kw: Any) -> list[str]:
        return []

    def has_table(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> bool:
        """Whether a view (or table) of that name can be queried, listed or not."""
        return bool(self._columns(connection, table_name, schema))

    @_cached
    def get_columns(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list[dict[str, Any]]:
        """The view's columns in order, with SQLAlchemy types and the descriptions of views.md."""
        rows = self._columns(connection, table_name, schema)
        if not rows:
            raise sa_exc.NoSuchTableError(table_name)
        comments = _column_comments()
        return [
            {
                "name": name,
                "type": column_type(data_type),
                "nullable": bool(nullable),
                "default": None,
                "autoincrement": False,
                "comment": comments.get((table_name, name)),
            }
            for name, data_type, nullable in rows
        ]

    def get_table_comment(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> dict[str, str | None]:
        return {"text": USER_VIEWS.get(table_name)}

    def get_view_definition(
        self, connection: Any, view_name: str, schema: str | None = None, **kw: Any
    ) -> str:
        """Not shown: the definitions name the catalog's files (docs/views.md describes the views)."""
        raise NotImplementedError("dumpcat does not show view definitions; docs/views.md describes the views")

    def get_pk_constraint(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list:
        return []

    def get_indexes(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> list:
        return []

    def get_unique_constraints(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list:
        return []

    def get_check_constraints(
        self, connection: Any, table_name: str, schema: str | None = None, **kw: Any
    ) -> list:
        return []

    def get_sequence_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return []

    def has_sequence(self, connection: Any, sequence_name: str, schema: str | None = None, **kw: Any) -> bool:
        return False

    def has_index(
        self, connection: Any, table_name: str, index_name: str, schema: str | None = None, **kw: Any
    ) -> bool:
        return False


dialect = DumpcatDialect
