"""The SQL of the catalog's raw views and of sql/*.sql, shared by the writer (which resolves names
with it when a batch commits, ingest/storage/flat.py) and the query side (catalog/views.py).

Python only says which parquet files are live (the `raw_<table>` views, one per table of
`ingest.storage.schema`); every relational step (name resolution, unions, joins) is in `sql/*.sql`,
run in file-name order, so it can be read and run by hand in the DuckDB shell.
"""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import duckdb
import pyarrow as pa

from ingest.storage.schema import TABLES

_DUCK_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.string(): "VARCHAR",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.list_(pa.int64()): "BIGINT[]",
    pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
    pa.list_(pa.string()): "VARCHAR[]",
    pa.list_(pa.list_(pa.int64())): "BIGINT[][]",
}


def quote_identifier(name: str) -> str:
    """A SQL identifier, double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def raw_select_sql(table: str, files: list[str], missing: tuple[str, ...] = ()) -> str:
    """The query of `raw_<table>`: the table's live parquet files, or an empty typed relation.

    `missing` names schema columns none of the files has (written by an older dumpcat): they
    read as NULL, so the views over them keep working on old catalogs."""
    if files:
        listing = ", ".join(quote_literal(f) for f in files)
        fields = {f.name: f for f in TABLES[table]}
        extra = "".join(f", CAST(NULL AS {_DUCK_TYPES[fields[c].type]}) AS {c}" for c in missing)
        source = f"read_parquet([{listing}], union_by_name = true, hive_partitioning = false)"
        return f"SELECT *{extra} FROM {source}"
    cols = ", ".join(f"CAST(NULL AS {_DUCK_TYPES[f.type]}) AS {f.name}" for f in TABLES[table])
    return f"SELECT {cols} WHERE false"


def raw_view_sql(
    table: str,
    files: list[str],
    missing: tuple[str, ...] = (),
    *,
    view: str | None = None,
    temporary: bool = False,
) -> str:
    """SQL creating `raw_<table>` (or `view`) as `raw_select_sql`; `temporary`: a view of the
    connection alone (the server's sessions, over a read-only database of definitions)."""
    create = "CREATE OR REPLACE TEMP VIEW" if temporary else "CREATE OR REPLACE VIEW"
    return f"{create} {view or f'raw_{table}'} AS {raw_select_sql(table, files, missing)}"


def missing_columns(con: duckdb.DuckDBPyConnection, table: str, files: list[str]) -> tuple[str, ...]:
    """The schema columns none of `files` has (files an older dumpcat wrote)."""
    if not files:
        return ()
    present = {row[0] for row in con.execute(f"DESCRIBE {raw_select_sql(table, files)}").fetchall()}
    return tuple(name for name in TABLES[table].names if name not in present)


SQL_PACKAGE = "dumpcat_sql"  # what a wheel installs sql/ as (pyproject.toml's package-dir)


@functools.cache
def sql_root() -> Traversable:
    """dumpcat's SQL files: the `sql/` folder beside `ingest/` in a checkout (or an editable
    install), else the package `dumpcat_sql` a wheel installs them as. Never the import name
    `sql`: JupySQL's package has it, and one would shadow (or overwrite) the other."""
    checkout = Path(__file__).resolve().parents[2] / "sql"
    if (checkout / "comments.sql").is_file():
        return checkout
    return resources.files(SQL_PACKAGE)


def view_sql_files() -> list[tuple[str, str]]:
    """(name, text) of every numbered sql/NN_*.sql file (the views and macros), in order."""
    root = sql_root()
    files = sorted(
        (p for p in root.iterdir() if p.name.endswith(".sql") and p.name[:1].isdigit()), key=lambda p: p.name
    )
    return [(p.name, p.read_text(encoding="utf-8")) for p in files]


# A view defined last, whose presence says this database already holds the views and macros of
# sql/*.sql: those bind when they are queried, so after the first time only the raw_<table> views
# (the live file lists) need redefining. Defining the macros again cost ~0.4 s per refresh.
_DEFINED = "dumpcat_views_defined"


def define_raw_view(
    con: duckdb.DuckDBPyConnection,
    table: str,
    files: list[str],
    view: str | None = None,
    *,
    full_schema: bool = False,
) -> None:
    """Create `raw_<table>` (or `view`) over `files`, reading columns older files lack as NULL
    (`full_schema`: the snapshot says every file has every column; no need to look)."""
    missing = () if full_schema else missing_columns(con, table, files)
    con.execute(raw_view_sql(table, files, missing, view=view))


def define_sql_views(
    con: duckdb.DuckDBPyConnection, names: tuple[str, ...] | None = None, *, mark: bool = True
) -> None:
    """Run sql/*.sql (or only the files named) on `con`, once per connection (`mark`: leave the
    view that says so; the server's views database, which clients list, goes without)."""
    if names is not None:
        for name, text in view_sql_files():
            if name in names:
                con.execute(text)
        return
    defined = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND database_name = current_database()",
        [_DEFINED],
    ).fetchone()[0]
    if defined:
        return
    saved: dict[str, str] = {}
    try:
        for _name, text in view_sql_files():
            con.execute(text)
            for view in _STAND_INS:
                if view not in saved and (sql := _view_sql(con, view)) is not None:
                    saved[view] = sql
                    con.execute(_stand_in_sql(con, view))
    finally:
        for sql in saved.values():
            con.execute(sql)  # the real view again: what every statement defined meanwhile reads
    if mark:
        con.execute(f"CREATE OR REPLACE VIEW {_DEFINED} AS SELECT 1 AS defined")


# Views that the later sql/*.sql files build on. DuckDB binds a view or a table macro when it is
# created, expanding every view it reads: 32 macros of sql/95_watch.sql over the full `stats` cost
# ~0.5 s of CPU on every connection (every `dumpcat` command, every Catalog). While the files are
# defined, each of these reads an empty relation of its own columns instead; views and macros keep
# their SQL and bind it anew whenever they are queried, so they read the real view, put back at the
# end (tests check every view's rows against their definitions).
_STAND_INS = ("tensors", "stats")


def _view_sql(con: duckdb.DuckDBPyConnection, view: str) -> str | None:
    """The statement that defines `view` in the current database (as CREATE OR REPLACE), if any."""
    rows = con.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = ? AND database_name = current_database() "
        "AND schema_name = current_schema()",
        [view],
    ).fetchall()
    if not rows:
        return None
    return rows[0][0].replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1)


def _stand_in_sql(con: duckdb.DuckDBPyConnection, view: str) -> str:
    """`view` as an empty relation of the same columns and types."""
    columns = con.execute(f"DESCRIBE {view}").fetchall()
    select = ", ".join(f"CAST(NULL AS {kind}) AS {quote_identifier(name)}" for name, kind, *_ in columns)
    return f"CREATE OR REPLACE VIEW {view} AS SELECT {select} WHERE false"
