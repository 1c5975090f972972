"""Define the catalog's DuckDB views on a connection (the query side).

The raw views and sql/*.sql come from the storage layer (ingest/storage/sql_views.py), which the
writer shares; here they are defined over the live files, the flat `tensors` and `stats` views
over their flat files, and the user views are named and described.
"""

from __future__ import annotations

from importlib import resources

import duckdb

from ingest.storage.flat_columns import FLAT_VIEWS, flat_view_sql
from ingest.storage.schema import TABLES
from ingest.storage.sql_views import define_raw_view, define_sql_views

DUCKDB_CONFIG = {
    # Only the extensions built into the wheel load here; never try to download others.
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
}


def column_comments_sql() -> list[str]:
    """The COMMENT ON COLUMN statements of sql/comments.sql (the user views' column descriptions),
    run where a database keeps the views: the server's views database and export-duckdb."""
    text = resources.files("sql").joinpath("comments.sql").read_text(encoding="utf-8")
    return [line.rstrip(";") for line in text.splitlines() if line.startswith("COMMENT ON ")]


def query_text(name: str) -> str:
    """A named query from sql/queries/ (parameterised with $names), e.g. 'where'."""
    return resources.files("sql").joinpath("queries", f"{name}.sql").read_text(encoding="utf-8")


def define_views(
    con: duckdb.DuckDBPyConnection,
    table_files: dict[str, list[str]],
    flat_files: dict[str, list[str]] | None = None,
    full_schema: set[str] | frozenset[str] = frozenset(),
) -> None:
    """(Re)create the raw views for the given live files, and the views of sql/*.sql once.

    `flat_files` lists the catalog's flat `tensors` and `stats` files (ingest/storage/flat.py) when it has
    them: those two views then read the flat files; otherwise they resolve names at query time.
    `full_schema` names the tables whose files all have every current column."""
    for table in TABLES:
        define_raw_view(con, table, table_files.get(table, []), full_schema=table in full_schema)
    define_sql_views(con)
    for view in FLAT_VIEWS:
        if flat_files is None:
            con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {view}_resolved")
        else:
            con.execute(flat_view_sql(view, flat_files.get(view, [])))


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
    "modules": "msprobe construct.json: the module tree of each step and rank (node, parent, depth)",
    "fx_links": "TorchAir: each GE op output's FX tensor (_fx_tensor_name), with both tensors' row ids",
    "comparisons": "dumpcat compare: metrics per matched tensor pair of two runs, and one-run-only tensors",
}
