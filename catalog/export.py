"""Export a catalog as a DuckDB database file, for SQLAlchemy tools (Superset) and DuckDB clients.

The file holds the same views as `Catalog` (`stats`, `tensors`, `ops`, ..., `raw_<table>`) in its
`main` schema, with their descriptions as DuckDB comments; the helper views they are built from
live in schema `dumpcat_internal`, so SQL tools list only what users query:

- by default (`materialize=False`) the `raw_<table>` views read the catalog's parquet files by
  absolute path, so the file stays small (a few hundred KiB) and shows rows appended to those files
  - but the *list* of files is fixed at export time: after a new ingest (new batches) or a
  compaction (which replaces small files and deletes the old ones a minute later), export again;
  until then new batches are missing and a query on a compacted-away file fails with an IO error;
- with `materialize=True` the `raw_<table>` views become tables holding a copy of the rows: the
  file is self-contained (it can be copied to another machine) and never goes stale on its own,
  at the cost of its size. The views of `sql/*.sql` stay views over those tables either way.

The file is written with an older storage format (`storage_version`, default `v1.0.0`) so that
DuckDB 1.x clients can open it: DuckDB 2.0's default format (`latest`) cannot be read by 1.x. It is
written under a temporary name next to `out_path` and renamed into place, so readers see the old
file or the new one, never a half-written one; a reader that has the old file open keeps it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

from catalog.views import DUCKDB_CONFIG, USER_VIEWS, column_comments_sql, define_views
from ingest.storage.schema import TABLES
from ingest.storage.sql_views import quote_literal, view_sql_files
from ingest.storage.store import CatalogStore, fsync_path

__all__ = ["DEFAULT_STORAGE_VERSION", "ExportSummary", "export_duckdb"]

# The oldest format DuckDB 2.0 writes that DuckDB 1.0 to 1.5 read (checked with 1.1.3 and 1.4.5).
DEFAULT_STORAGE_VERSION = "v1.0.0"

_ALIAS = "dumpcat_export"


@dataclass(frozen=True)
class ExportSummary:
    path: Path
    views: int
    tables: int
    rows_copied: int
    materialized: bool
    storage_version: str | None
    size_bytes: int

    def line(self) -> str:
        what = f"{self.tables} tables ({self.rows_copied} rows) and " if self.materialized else ""
        fmt = self.storage_version or "latest"
        return f"wrote {self.path}: {what}{self.views} views, storage {fmt}, {self.size_bytes} bytes"


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


# Everything sql/*.sql defines lives in this schema of the file; `main` shows the user views and
# the raw_<table> relations (views reading it), so tools list what users query, not the helpers.
INTERNAL_SCHEMA = "dumpcat_internal"


def _write(con: duckdb.DuckDBPyConnection, files: dict[str, list[str]], materialize: bool) -> int:
    """Define the views (and tables) in the attached export database; return rows copied."""
    inner = f"{_ALIAS}.{INTERNAL_SCHEMA}"
    con.execute(f"CREATE SCHEMA {inner}")
    rows = 0
    if not materialize:
        con.execute(f"USE {inner}")
        define_views(con, files)
    else:
        # The raw_<table> views are defined in the in-memory database, copied into tables of the
        # export database, and the views of sql/*.sql defined over them there.
        define_views(con, files)
        for table in TABLES:
            con.execute(f"CREATE TABLE {inner}.raw_{table} AS SELECT * FROM memory.main.raw_{table}")
            rows += con.execute(f"SELECT count(*) FROM {inner}.raw_{table}").fetchall()[0][0]
        con.execute(f"USE {inner}")
        for _name, text in view_sql_files():
            con.execute(text)
    for name in [*sorted(USER_VIEWS), *(f"raw_{t}" for t in TABLES)]:
        con.execute(f"CREATE VIEW {_ALIAS}.main.{name} AS SELECT * FROM {inner}.{name}")
    return rows


def _describe(con: duckdb.DuckDBPyConnection) -> None:
    """The user views' descriptions and their columns' (sql/comments.sql), as DuckDB comments: SQL
    tools show them (duckdb_views().comment, duckdb_columns().comment, SQLAlchemy's inspector)."""
    for name, text in USER_VIEWS.items():
        con.execute(f"COMMENT ON VIEW {_ALIAS}.main.{name} IS {quote_literal(text)}")
    for stmt in column_comments_sql():
        con.execute(stmt.replace("COMMENT ON COLUMN ", f"COMMENT ON COLUMN {_ALIAS}.main.", 1))


def export_duckdb(
    catalog_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    storage_version: str | None = DEFAULT_STORAGE_VERSION,
    materialize: bool = False,
) -> ExportSummary:
    """Write the catalog's views to a DuckDB database file at `out_path` (replaced atomically).

    `storage_version` is DuckDB's `ATTACH ... (STORAGE_VERSION ...)` (e.g. `v1.0.0`, `v1.2.0`);
    None means DuckDB's default, which only DuckDB 2.x reads. Raises CatalogError if
    `catalog_path` is not a catalog and duckdb.Error if DuckDB cannot write the file.
    """
    store = CatalogStore(catalog_path)
    out = Path(out_path).absolute()
    if out.is_dir():
        raise IsADirectoryError(f"{out} is a directory")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    options = f" (STORAGE_VERSION {quote_literal(storage_version)})" if storage_version else ""
    for attempt in (1, 2):
        token = store.union_token()
        files = store.table_files(store.union_snapshot())  # every shard's (ingest/storage/store.py)
        for p in (tmp, Path(f"{tmp}.wal")):
            _remove(p)
        con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
        try:
            # DuckDB's own bar would go to stdout (a pipe too) once a copy takes over 2 s
            con.execute("SET enable_progress_bar = false")
            con.execute(f"ATTACH {quote_literal(str(tmp))} AS {_ALIAS}{options}")
            rows = _write(con, files, materialize)
            _describe(con)
            views = con.execute(
                "SELECT count(*) FROM duckdb_views() WHERE database_name = ? AND schema_name = 'main' "
                "AND NOT internal",
                [_ALIAS],
            ).fetchall()[0][0]
            tables = con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name = ?", [_ALIAS]
            ).fetchall()[0][0]
            con.execute("USE memory")
            con.execute(f"CHECKPOINT {_ALIAS}")
            con.execute(f"DETACH {_ALIAS}")
        except duckdb.IOException:
            # A parquet file vanished while being copied (a compaction purged it): retry once on
            # the new snapshot.
            con.close()
            _remove(tmp)
            _remove(Path(f"{tmp}.wal"))
            if attempt == 2 or store.union_token() == token:
                raise
            continue
        except BaseException:
            con.close()
            _remove(tmp)
            _remove(Path(f"{tmp}.wal"))
            raise
        con.close()
        break
    fsync_path(tmp)
    # A WAL left by an earlier writer of `out` would be replayed onto the new file: drop it.
    _remove(Path(f"{out}.wal"))
    os.replace(tmp, out)
    with contextlib.suppress(OSError):
        fsync_path(out.parent)
    return ExportSummary(
        path=out,
        views=views,
        tables=tables,
        rows_copied=rows,
        materialized=materialize,
        storage_version=storage_version,
        size_bytes=out.stat().st_size,
    )
