"""The contained engine that runs client SQL for `dumpcat serve`: the wall the guard stands behind.

A DuckDB database that can do nothing but read the catalog:

- **No file access beyond the catalog, no writes at all.** Two ways, chosen per worker:
  - *DuckDB reads the catalog* (`native`, where the OS can wall it): DuckDB runs with
    `enable_external_access = false` and `allowed_directories` = the catalog's `data/` folder,
    so `read_*`, `glob` and replacement scans of any other path fail inside the engine; the worker
    process itself can write no file (`catalog.server.landlock`, applied before the engine opens),
    so `COPY ... TO` and `ATTACH` of a new file fail in the kernel. Each session's `raw_<table>`
    views and the flat `tensors`/`stats` views are the same SQL as an in-process `Catalog`'s,
    as temporary views of its cursor; queries run at in-process speed.
  - *Arrow datasets* (where Landlock is not available, or asked for): DuckDB runs with no allowed
    path at all; the catalog's parquet files are opened by Python (pyarrow) and handed to DuckDB
    as Arrow datasets registered under the same names; DuckDB itself never opens a file. About
    2x slower per query: DuckDB scans the datasets through Arrow, not its own parquet reader.
  The guard (`catalog.guard`) refuses file functions, `COPY`, `ATTACH`, `INSTALL` and `LOAD`
  before either: the engine and the OS are the wall, the guard the second one.
- **A read-only catalog.** The views (`sql/*.sql` and the PostgreSQL emulation of
  `catalog.server.pg_catalog`) live in a small database file built once per server in a private
  temporary folder and opened `read_only`: `CREATE`, `DROP`, `INSERT`, `CREATE MACRO` on it fail
  in the engine. Each client session gets its own cursor, so even temporary objects live and die
  with that one session.
- **A configuration no client can change** (`lock_configuration`), a memory limit, no spilling
  to disk, an expression depth limit.

The process this runs in (`catalog.server.statement_worker`) adds the address-space limit that bounds
what DuckDB's memory limit does not.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from catalog.guard import MAX_EXPRESSION_DEPTH
from catalog.server import pg_catalog
from ingest.storage.definitions_cache import cached_database, opens_with_view
from ingest.storage.flat_columns import (
    FLAT_ONLY_COLUMNS,
    FLAT_STORED_COLUMNS,
    FLAT_VIEWS,
    flat_select_list,
    flat_view_sql,
)
from ingest.storage.schema import TABLES
from ingest.storage.sql_views import define_sql_views, missing_columns, quote_literal, raw_view_sql
from ingest.storage.store import CatalogStore

VIEWS_DB_NAME = "catalog_views"
SHARED_SESSION = -2  # the key of the cursor sessions without views of their own share


def engine_config(memory_limit: str, threads: int, *, native: bool = False) -> dict[str, str]:
    """DuckDB settings of the contained engine (applied when the database opens, then locked;
    `native`: file access is turned off and the configuration locked after the catalog's folder
    is allowed, which DuckDB accepts only once the database is open)."""
    if native:
        return {k: v for k, v in engine_config(memory_limit, threads).items()
                if k not in ("enable_external_access", "lock_configuration")}  # fmt: skip
    return {
        "enable_external_access": "false",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "python_enable_replacements": "false",  # no scans of Python objects by name
        "temp_directory": "",  # no spilling: nothing is ever written
        "memory_limit": memory_limit,
        "threads": str(threads),
        "max_expression_depth": str(MAX_EXPRESSION_DEPTH),
        "lock_configuration": "true",
    }


def build_views_database(folder: str | os.PathLike, *, flat: bool = True) -> Path:
    """Write the view definitions (no data) into `folder/catalog_views.duckdb` and return its path.

    The `raw_<table>` relations the views read are registered as empty Arrow tables while the
    views are created (DuckDB binds a view when it is created); at query time each cursor
    registers the live datasets under the same names. With `flat` (a catalog with flat files,
    ingest/storage/flat.py), `tensors` and `stats` read the relations `flat_tensors` and `flat_stats`,
    registered the same way; without, they resolve names at query time.
    """
    path = Path(folder) / f"{VIEWS_DB_NAME}.duckdb"
    con = duckdb.connect(str(path), config={"autoinstall_known_extensions": "false",
                                            "autoload_known_extensions": "false"})  # fmt: skip
    try:
        for table, schema in TABLES.items():
            con.register(f"raw_{table}", schema.empty_table())
        define_sql_views(con, mark=False)  # (tensors and stats as stand-ins meanwhile: 0.4x the time)
        if flat:
            for view in FLAT_VIEWS:
                stored = f"SELECT {FLAT_STORED_COLUMNS[view]} FROM {view}_resolved"  # as flat files hold them
                con.register(f"flat_{view}", con.sql(stored).to_arrow_table())
                # as if some files were older (no producer_dtype, producer-spelled dtype): the
                # server may serve a catalog that has such files (see refresh)
                columns = flat_select_list(view, con.table(f"flat_{view}").columns, before_dtype_names=True)
                con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT {columns} FROM flat_{view}")
        pg_catalog.install(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path


def _views_database_key(flat: bool) -> str:
    """What the server's views database depends on: the catalog's view definitions (sql/*.sql, the
    Python writing them, DuckDB's version), the PostgreSQL emulation, this module, and `flat`."""
    from catalog.views import definitions_digest

    digest = hashlib.sha256(definitions_digest().encode())
    for module in (pg_catalog.__file__, __file__):
        digest.update(Path(module).read_bytes())
    digest.update(b"flat" if flat else b"query-time")
    return digest.hexdigest()[:32]


def views_database(folder: str | os.PathLike, *, flat: bool = True) -> Path:
    """The server's views database in its private `folder`: a copy of the one in the user's cache
    (ingest/storage/definitions_cache.py; 1.2 s of CPU saved per start), built there
    (`build_views_database`) by the first server of this code, else built in `folder`."""
    key = _views_database_key(flat)
    target = Path(folder) / f"{VIEWS_DB_NAME}.duckdb"

    def build(path: Path) -> None:
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
            os.replace(build_views_database(scratch, flat=flat), path)

    for rebuild in (False, True):
        cached = cached_database("server-views", key, build, rebuild=rebuild)
        if cached is None:
            break
        try:
            shutil.copyfile(cached, target)
        except OSError:
            break
        if opens_with_view(target, "stats"):
            return target
        target.unlink(missing_ok=True)  # damaged: built anew once
    return build_views_database(folder, flat=flat)


def private_folder() -> str:
    """A temporary folder only this user can enter, for the views database."""
    return tempfile.mkdtemp(prefix="dumpcat-serve-")


# Every way a statement reads the session's variable (`dumpcat_backend_pid`) names one of these:
# getvariable() and duckdb_variables() themselves, pg_backend_pid() and pg_stat_activity
# (catalog/server/pg_catalog.py), in whatever case or quoting.
SESSION_READERS = ("variable", "backend_pid", "stat_activity")


def reads_session(text: str) -> bool:
    """Whether a statement may read which session runs it (see `SESSION_READERS`)."""
    lowered = text.lower()
    return any(word in lowered for word in SESSION_READERS)


class ContainedEngine:
    """Client SQL runs on cursors of this engine: one cursor per client session."""

    def __init__(
        self,
        catalog_path: str | os.PathLike,
        views_db: str | os.PathLike,
        *,
        memory_limit: str = "1GB",
        threads: int = 1,
        max_cursors: int = 256,
        native: bool = False,
    ) -> None:
        """`native`: DuckDB reads the catalog's files itself (only in a process that can write no
        file: `catalog.server.landlock.deny_writes`); otherwise through Arrow datasets."""
        self.store = CatalogStore(catalog_path)
        self.native = native
        config = engine_config(memory_limit, threads, native=native)
        self.con = duckdb.connect(str(views_db), read_only=True, config=config)
        if native:
            folder = quote_literal(str(self.store.root / "data") + os.sep)  # every shard's files
            self.con.execute(f"SET allowed_directories = [{folder}]")
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")
        self._fs = pafs.LocalFileSystem()
        self._token: tuple | None = None
        self._datasets: dict[str, ds.Dataset] = {}
        self._session_views: list[str] = []  # native: each session's temporary views of the snapshot
        self._shared: tuple[int, int] | None = None  # (the shared cursor, the session it shows)
        self._cursors: OrderedDict[int, tuple[duckdb.DuckDBPyConnection, tuple | None]] = OrderedDict()
        self._max_cursors = max_cursors
        self.started = datetime.datetime.now(datetime.UTC)

    def refresh(self) -> None:
        """Open the live files of a newly committed snapshot as Arrow datasets (the union of the
        catalog's shards; one stat call per shard when nothing changed)."""
        token = self.store.union_token()
        if token == self._token:
            return
        snap = self.store.union_snapshot()
        files = self.store.table_files(snap)
        self._flat = self.store.flat_files(snap)
        if self.native:
            self._session_views = self._native_views(files, self.store.full_schema_tables(snap))
            self._token = token
            return
        datasets = {}
        for table, schema in TABLES.items():
            live = files.get(table, [])
            if live:
                datasets[table] = ds.dataset(live, schema=schema, format="parquet", filesystem=self._fs)
            else:
                datasets[table] = ds.dataset(schema.empty_table())
        if self._flat is not None:
            for view, live in self._flat.items():
                # The schema of the files' own (all written by DuckDB from the same view), with the
                # columns the view reads that files written before them lack (read as NULL).
                schema = pa.unify_schemas([pq.read_schema(f) for f in live]) if live else None
                extra = ("producer_dtype", *FLAT_ONLY_COLUMNS) if view == "tensors" else ("producer_dtype",)
                for name in extra if schema is not None else ():
                    if name not in schema.names:
                        schema = schema.append(pa.field(name, pa.string()))
                datasets[f"flat_{view}"] = (
                    ds.dataset(live, schema=schema, format="parquet", filesystem=self._fs) if live else None
                )
        self._datasets = datasets
        self._token = token

    def _native_views(self, files: dict[str, list[str]], full_schema: set[str]) -> list[str]:
        """The temporary views a session defines for this snapshot: the raw tables (reading the
        columns older files lack as NULL, as `define_raw_view` does) and, with flat files, the
        flat `tensors` and `stats`, which then shadow the stored ones (catalog/views.py's SQL)."""
        statements = []
        for table in TABLES:
            live = files.get(table, [])
            missing = () if table in full_schema else missing_columns(self.con, table, live)
            statements.append(raw_view_sql(table, live, missing, temporary=True))
        for view in FLAT_VIEWS if self._flat is not None else ():
            statements.append(flat_view_sql(view, self._flat.get(view, []), temporary=True))
        return statements

    def cursor(self, session: int) -> duckdb.DuckDBPyConnection:
        """The session's cursor, with the current snapshot's datasets registered."""
        self.refresh()
        entry = self._cursors.pop(session, None)
        if entry is None:
            cur, token = self.con.cursor(), None
            # what pg_backend_pid() and pg_stat_activity show this session (catalog.server.pg_catalog)
            cur.execute("SET VARIABLE dumpcat_backend_pid = ?", [session])
            cur.execute("SET VARIABLE dumpcat_started = ?", [self.started])
        else:
            cur, token = entry
        if token != self._token:
            if self.native:
                for statement in self._session_views:
                    cur.execute(statement)
            else:
                for table in TABLES:
                    cur.register(f"raw_{table}", self._datasets[table])
            for view in FLAT_VIEWS:
                if self.native and self._flat is not None:
                    continue  # the session's own views of the flat files
                dataset = self._datasets.get(f"flat_{view}")
                if dataset is None:  # no flat files (yet): the view's rows resolved here, in memory
                    dataset = cur.sql(
                        f"SELECT {FLAT_STORED_COLUMNS[view]} FROM {view}_resolved"
                    ).to_arrow_table()
                cur.register(f"flat_{view}", dataset)
            token = self._token
        self._cursors[session] = (cur, token)
        while len(self._cursors) > self._max_cursors:
            _, (old, _) = self._cursors.popitem(last=False)
            old.close()
        return cur

    def shared_cursor(self, session: int, text: str | None = None) -> duckdb.DuckDBPyConnection:
        """The cursor every session without temporary views of its own runs on, set to show this
        `session` (pg_backend_pid()). Such a session has no state in DuckDB (its settings,
        prepared statements and views live in the server; client SQL can only query), so one
        cursor serves them all and only its first statement per snapshot defines the snapshot's
        views (~20 ms each time, per session and worker before).

        With the statement's `text`, the session is set only if the text can read it (setting
        it is a statement of its own, 0.27 ms: with many clients nearly every statement comes
        from another session than the worker's last)."""
        cur = self.cursor(SHARED_SESSION)
        if self._shared != (id(cur), session) and (text is None or reads_session(text)):
            cur.execute("SET VARIABLE dumpcat_backend_pid = ?", [session])
            self._shared = (id(cur), session)
        return cur

    def forget(self, session: int) -> None:
        """Close a session's cursor (its temporary objects and variables go with it)."""
        entry = self._cursors.pop(session, None)
        if entry is not None:
            entry[0].close()

    def close(self) -> None:
        for cur, _ in self._cursors.values():
            cur.close()
        self._cursors.clear()
        self.con.close()
