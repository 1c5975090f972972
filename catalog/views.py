"""Define the catalog's DuckDB views on a connection (the query side).

The raw views and sql/*.sql come from the storage layer (ingest/storage/sql_views.py), which the
writer shares; here they are defined over the live files, the flat `tensors` and `stats` views
over their flat files, and the user views are named and described.

Defining them costs ~0.3 s of CPU (DuckDB binds every view and macro it creates), which every
`dumpcat` command and every new `Catalog` would pay. So they are defined once per snapshot, into a
small database file of the catalog's (`views/<key>.duckdb`, `key` a digest of everything the
definitions depend on), which later connections attach read-only (`use_views`). Where the catalog
folder cannot be written, a connection defines them itself, as before.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import duckdb

from ingest.storage.definitions_cache import cached_database
from ingest.storage.flat_columns import FLAT_VIEWS, flat_view_sql
from ingest.storage.nonfinite import nonfinite_view_sql, sidecar_files
from ingest.storage.schema import TABLES
from ingest.storage.sql_views import define_raw_view, define_sql_views, quote_literal, sql_root

DUCKDB_CONFIG = {
    # Only the extensions built into the wheel load here; never try to download others.
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
}


def column_comments_sql() -> list[str]:
    """The COMMENT ON COLUMN statements of sql/comments.sql (the user views' column descriptions),
    run where a database keeps the views: the server's views database and export-duckdb."""
    text = sql_root().joinpath("comments.sql").read_text(encoding="utf-8")
    return [line.rstrip(";") for line in text.splitlines() if line.startswith("COMMENT ON ")]


def query_text(name: str) -> str:
    """A named query from sql/queries/ (parameterised with $names), e.g. 'where'."""
    return sql_root().joinpath("queries").joinpath(f"{name}.sql").read_text(encoding="utf-8")


def define_views(
    con: duckdb.DuckDBPyConnection,
    table_files: dict[str, list[str]],
    flat_files: dict[str, list[str]] | None = None,
    full_schema: set[str] | frozenset[str] = frozenset(),
) -> None:
    """(Re)create the raw views for the given live files, and the views of sql/*.sql once.

    `flat_files` lists the catalog's flat `tensors` and `stats` files (ingest/storage/flat.py) when it has
    them: those two views then read the flat files, and `anomalous_tensors` the stats files' sidecars
    of NaN/Inf rows (ingest/storage/nonfinite.py: written with each file, so a file's path says its
    sidecar too); otherwise they resolve names at query time.
    `full_schema` names the tables whose files all have every current column."""
    for table in TABLES:
        define_raw_view(con, table, table_files.get(table, []), full_schema=table in full_schema)
    define_sql_views(con)
    for view in FLAT_VIEWS:
        if flat_files is None:
            con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {view}_resolved")
        else:
            con.execute(flat_view_sql(view, flat_files.get(view, [])))
    if flat_files is not None:  # the NaN/Inf rows of stats: the stats files' sidecars
        con.execute(nonfinite_view_sql(flat_files.get("stats", [])))


# Views whose rows are a function of the snapshot alone and that other views join to a few rows:
# a snapshot's views database stores each as a table, computed once when the database is made, and
# the view reads the table. `first_anomaly` joins `op_feeders` (the graph IR's data edges, grouped
# per operator) to one row per step: computed at query time, binding and running that aggregate
# over every edge was ~8 % of the query with no edges at all (bench/bench_speed.py). Connections
# that define their views themselves (following a live catalog, the server) keep the query-time view.
# `communication_ops` (the collective calls, numbered per step) is the same kind: `nan_origin` joins
# it to one row per rank and step, and computing it scans `stats` a second time; stored, `nan_origin`
# costs about what `first_anomaly` does (bench/bench_nan_origin.py), and the views database pays one
# scan of `stats` for the collectives' operator types when it is made. `nan_origin_ranks` (each
# rank's first anomaly per step, classified as origin, received or inherited, with the ranks it
# came from) is what `nan_origin` computes before its per-step answer: its joins and windows over
# the anomalous rows and the collectives were ~70 % of the query; stored (~20 ms when the database is
# made, 64 ranks), `nan_origin` answers each step from a few rows (bench/bench_nan_origin.py).
STORED_VIEWS = ("op_feeders", "communication_ops", "nan_origin_ranks")

VIEWS_FOLDER = "views"  # in the catalog folder: one small database of view definitions per snapshot
VIEWS_ALIAS = "dumpcat"  # the name a connection attaches it under (its current database)
_KEEP_SECONDS = 600  # older views databases of earlier snapshots are removed when a new one is made


@functools.cache
def definitions_digest() -> str:
    """What the view definitions depend on besides the files: DuckDB's version (its file format and
    binder), sql/*.sql, and the Python that writes the SQL of the raw and flat views."""
    from ingest.storage import flat_columns, nonfinite, schema, sql_views

    digest = hashlib.sha256(duckdb.__version__.encode())
    for _name, text in sql_views.view_sql_files():
        digest.update(text.encode())
    for module in (flat_columns, nonfinite, schema, sql_views):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def views_key(
    table_files: dict[str, list[str]],
    flat_files: dict[str, list[str]] | None,
    full_schema: set[str] | frozenset[str],
) -> str:
    """The name of the views database of one snapshot: its live files, flat files and schema, and
    the identity of each file whose columns the definitions read (flat files, and the files of
    tables not known to have every column): dumpcat never rewrites a file in place, but a hand or
    a tool might."""
    inspected = [f for files in (flat_files or {}).values() for f in files]
    inspected += sidecar_files((flat_files or {}).get("stats", []))  # (what anomalous_tensors reads)
    inspected += [f for table, files in table_files.items() if table not in full_schema for f in files]
    identities = []
    for file in inspected:
        try:
            st = os.stat(file)
            identities.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            identities.append(None)
    listing = json.dumps(
        [definitions_digest(), sorted(table_files.items()), flat_files, sorted(full_schema), identities],
        sort_keys=True,
    )
    return hashlib.sha256(listing.encode()).hexdigest()[:32]


def use_views(
    con: duckdb.DuckDBPyConnection,
    catalog_root: str | os.PathLike,
    table_files: dict[str, list[str]],
    flat_files: dict[str, list[str]] | None = None,
    full_schema: set[str] | frozenset[str] = frozenset(),
    *,
    follow: bool = False,
    in_memory: bool = False,
) -> bool:
    """Make the views of this snapshot the database `VIEWS_ALIAS` of `con` and its current one (run
    `USE dumpcat` on each cursor). Returns whether they are defined in memory.

    On a first open (not `follow`), the snapshot's views database is attached read-only, made
    first if no one has. A connection that follows a live catalog to a newer snapshot (`follow`)
    defines them in an in-memory database of the same name instead, once in full and after that
    only the file lists (`in_memory`: it already did): 0.04 s per commit, where making a file
    for each would cost more. Where the folder cannot be written, or the file is damaged and
    cannot be made anew, the views are defined in memory too. The name never changes, so cursors
    handed out earlier follow every move."""
    if not follow:
        folder = Path(catalog_root) / VIEWS_FOLDER
        path = folder / f"{views_key(table_files, flat_files, full_schema)}.duckdb"
        for attempt in (1, 2):
            try:
                if attempt == 2 or not path.exists():  # the second time, the file that failed is made anew
                    _write_views_database(folder, path, table_files, flat_files, full_schema)
                # OR REPLACE swaps the database atomically: a query running meanwhile on another
                # cursor finishes on the old one, the next binds the new one
                con.execute(f"ATTACH OR REPLACE {quote_literal(str(path))} AS {VIEWS_ALIAS} (READ_ONLY)")
                con.execute(f"USE {VIEWS_ALIAS}")
                return False
            except (OSError, duckdb.Error):  # a read-only catalog folder, a damaged or removed file
                continue
        in_memory = False
    if not in_memory:
        con.execute(f"ATTACH OR REPLACE ':memory:' AS {VIEWS_ALIAS}")
    con.execute(f"USE {VIEWS_ALIAS}")
    define_views(con, table_files, flat_files, full_schema)
    return True


def store_views(con: duckdb.DuckDBPyConnection) -> None:
    """Store each of `STORED_VIEWS` as a table of its current rows (`<view>_stored`), which the
    view of its name then reads."""
    for view in STORED_VIEWS:
        con.execute(f"CREATE OR REPLACE TABLE {view}_stored AS SELECT * FROM {view}")
        con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {view}_stored")


def _write_views_database(
    folder: Path,
    path: Path,
    table_files: dict[str, list[str]],
    flat_files: dict[str, list[str]] | None,
    full_schema: set[str] | frozenset[str],
) -> None:
    """Define the views into a new file and move it to `path` (atomic: concurrent writers of the
    same snapshot write the same definitions, the last rename wins); remove old ones.

    The new file starts as a copy of the definitions over no files (`_definitions_template`, in
    the user's cache), so only the raw and flat views are defined here: the views and macros of
    sql/*.sql bind when queried, whatever files the raw views list (of the same columns)."""
    folder.mkdir(exist_ok=True)
    partial = folder / f".{path.stem}.{os.getpid()}.{time.monotonic_ns()}.duckdb"
    try:
        for rebuild in (False, True):
            template = _definitions_template(rebuild=rebuild)
            if template is not None:
                shutil.copyfile(template, partial)
            try:
                with duckdb.connect(str(partial), config=DUCKDB_CONFIG) as con:
                    define_views(con, table_files, flat_files, full_schema)
                    store_views(con)
                    con.execute("CHECKPOINT")
                break
            except duckdb.Error:
                if template is None or rebuild:
                    raise
                partial.unlink(missing_ok=True)  # a damaged template: built anew once
                partial.with_name(partial.name + ".wal").unlink(missing_ok=True)
        os.replace(partial, path)
    finally:
        for leftover in (partial, partial.with_name(partial.name + ".wal")):
            leftover.unlink(missing_ok=True)
    now = time.time()
    for old in folder.iterdir():
        try:
            if old != path and now - old.stat().st_mtime > _KEEP_SECONDS:
                old.unlink()  # a process that has it attached keeps reading its open file
        except OSError:
            pass


def definitions_connection(config: dict[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory connection whose current database holds the views and macros of sql/*.sql
    over no files, to list or probe them: the cached template attached read-only (then external
    access is turned off, if `config` asks for it), else defined here."""
    config = {**DUCKDB_CONFIG, **(config or {})}
    external = config.pop("enable_external_access", "true")
    con = duckdb.connect(":memory:", config=config)
    if not _attach_template(con):
        define_views(con, {})
    if str(external).lower() == "false":
        con.execute("SET enable_external_access = false")
    return con


def _attach_template(con: duckdb.DuckDBPyConnection) -> bool:
    """Attach the cached template read-only as `con`'s current database; False if there is none
    or it does not open (the caller defines the views itself)."""
    template = _definitions_template()
    if template is None:
        return False
    try:
        con.execute(f"ATTACH {quote_literal(str(template))} AS {VIEWS_ALIAS} (READ_ONLY)")
        con.execute(f"USE {VIEWS_ALIAS}")
    except duckdb.Error:
        return False
    return True


def _definitions_template(*, rebuild: bool = False) -> Path | None:
    """The views and macros of sql/*.sql over empty raw views, in the user's cache: ~0.4 s of CPU
    to define, and a catalog's every snapshot needs them."""

    def build(path: Path) -> None:
        with duckdb.connect(str(path), config=DUCKDB_CONFIG) as con:
            define_views(con, {})
            con.execute("CHECKPOINT")

    return cached_database("views-template", definitions_digest()[:32], build, rebuild=rebuild)


# Views users query, with one line each; docs/views.md documents their columns.
USER_VIEWS = {
    "stats": "one row per tensor statistic (statistic.csv or computed from the data)",
    "tensors": "one row per tensor file",
    "ops": "kernels of every graph in execution order",
    "graph_runs": "global execution history: which iterations each graph ran",
    "runs": "one row per ingested dump tree",
    "rank_metadata": ".dump_metadata of each rank",
    "kernel_args": "kernel arguments (save_kernel_args)",
    "ingest_errors": "files or lines that could not be cataloged, and why",
    "ir_nodes": "every node of every graph IR (.pb or .ir)",
    "edges": "data and control edges between graph nodes",
    "source_lines": "every stack frame of every node's source trace",
    "op_source": "each operator's innermost user source line",
    "first_anomaly": "per run/rank/iteration (a step), the first output holding NaN or Inf, across graphs",
    "first_anomaly_by_graph": "per run/rank/graph/iteration, the graph's own first output holding NaN/Inf",
    "anomalous_tensors": "every statistic row whose tensor holds NaN or Inf",
    "communication_ops": "every collective call (all_reduce, send, ...) per run/rank/step, with its instance",
    "nan_origin": "per run and step, the rank and operator where NaN/Inf was born, and the ranks it reached",
    "modules": "msprobe construct.json: the module tree of each step and rank (node, parent, depth)",
    "fx_links": "TorchAir: each GE op output's FX tensor (_fx_tensor_name), with both tensors' row ids",
    "comparisons": "dumpcat compare: metrics per matched tensor pair of two runs, and one-run-only tensors",
}
