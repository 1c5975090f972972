"""Define the catalog's DuckDB views on a connection.

Python only says which parquet files are live (the `raw_<table>` views, one per table of
`ingest.schema`); every relational step users query — name resolution, unions, joins — is in
`sql/*.sql`, run in file-name order, so it can be read and run by hand in the DuckDB shell.
"""

from __future__ import annotations

from importlib import resources

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.schema import TABLES

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


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def raw_view_sql(
    table: str, files: list[str], missing: tuple[str, ...] = (), *, view: str | None = None
) -> str:
    """SQL for `raw_<table>` (or `view`): the table's live parquet files, or an empty typed relation.

    `missing` names schema columns none of the files has (written by an older dumpcat): they
    read as NULL, so the views over them keep working on old catalogs."""
    name = view or f"raw_{table}"
    if files:
        listing = ", ".join(_quote_literal(f) for f in files)
        fields = {f.name: f for f in TABLES[table]}
        extra = "".join(f", CAST(NULL AS {_DUCK_TYPES[fields[c].type]}) AS {c}" for c in missing)
        return (
            f"CREATE OR REPLACE VIEW {name} AS "
            f"SELECT *{extra} FROM read_parquet([{listing}], union_by_name = true, hive_partitioning = false)"
        )
    cols = ", ".join(f"CAST(NULL AS {_DUCK_TYPES[f.type]}) AS {f.name}" for f in TABLES[table])
    return f"CREATE OR REPLACE VIEW {name} AS SELECT {cols} WHERE false"


def view_sql_files() -> list[tuple[str, str]]:
    """(name, text) of every numbered sql/NN_*.sql file (the views and macros), in order."""
    root = resources.files("sql")
    files = sorted(
        (p for p in root.iterdir() if p.name.endswith(".sql") and p.name[:1].isdigit()), key=lambda p: p.name
    )
    return [(p.name, p.read_text(encoding="utf-8")) for p in files]


def column_comments_sql() -> list[str]:
    """The COMMENT ON COLUMN statements of sql/comments.sql (the user views' column descriptions),
    run where a database keeps the views: the server's views database and export-duckdb."""
    text = resources.files("sql").joinpath("comments.sql").read_text(encoding="utf-8")
    return [line.rstrip(";") for line in text.splitlines() if line.startswith("COMMENT ON ")]


def query_text(name: str) -> str:
    """A named query from sql/queries/ (parameterised with $names), e.g. 'where'."""
    return resources.files("sql").joinpath("queries", f"{name}.sql").read_text(encoding="utf-8")


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
    con.execute(raw_view_sql(table, files, view=view))
    if files and not full_schema:
        present = {row[0] for row in con.execute(f"DESCRIBE {view or 'raw_' + table}").fetchall()}
        missing = tuple(name for name in TABLES[table].names if name not in present)
        if missing:
            con.execute(raw_view_sql(table, files, missing, view=view))


def define_views(
    con: duckdb.DuckDBPyConnection,
    table_files: dict[str, list[str]],
    flat_files: dict[str, list[str]] | None = None,
    full_schema: set[str] | frozenset[str] = frozenset(),
) -> None:
    """(Re)create the raw views for the given live files, and the views of sql/*.sql once.

    `flat_files` lists the catalog's flat `tensors` and `stats` files (ingest/flat.py) when it has
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


# Views whose rows dumpcat stores resolved at commit time (ingest/flat.py), and so read flat.
FLAT_VIEWS = ("tensors", "stats")

# A flat tensors file stores `file_name` as NULL where it is the last part of `rel_path` (every
# row a reader makes: 134 of ~850 bytes a row, which the writer's DuckDB holds for each row of the
# row group it writes), and `path` as NULL where it is the dump root, '/' and `rel_path` (every row
# of a dump cataloged with its root: 181 bytes), the root in a column `dump_root` of its own (one
# value per run: a dictionary of one entry in the file, and one byte a row in the writer's merge,
# ingest/flat.py); readers put both back. Files that store every name and path (written before)
# read the same. DuckDB's parse_filename binds faster than a regular expression (a view's
# expressions are bound by every query, `count(*)` too); Spark has no parse_filename: its regular
# expression gives the same text (tests/test_flat.py).
FILE_NAME_OF_REL_PATH = "parse_filename(rel_path, false, 'forward_slash')"
SPARK_FILE_NAME_OF_REL_PATH = "regexp_extract(rel_path, '([^/]*)$', 1)"
_ROOT_OF_PATH = "left(path, length(path) - length(rel_path) - 1)"
_PATH_UNDER_ROOT = f"{_ROOT_OF_PATH} || '/' || rel_path = path"  # NULL (not true) when either is NULL
FLAT_STORED_COLUMNS = {
    "tensors": (
        f"* REPLACE (nullif(file_name, {FILE_NAME_OF_REL_PATH}) AS file_name, "
        f"CASE WHEN {_PATH_UNDER_ROOT} THEN NULL ELSE path END AS path), "
        f"CASE WHEN {_PATH_UNDER_ROOT} THEN {_ROOT_OF_PATH} END AS dump_root"
    ),
    "stats": "*",
}
FLAT_READ_FILE_NAME = f"coalesce(file_name, {FILE_NAME_OF_REL_PATH})"
SPARK_FLAT_READ_FILE_NAME = f"coalesce(file_name, {SPARK_FILE_NAME_OF_REL_PATH})"
FLAT_READ_PATH = "coalesce(path, dump_root || '/' || rel_path)"
SPARK_FLAT_READ_PATH = "coalesce(path, concat(dump_root, '/', rel_path))"
# stored columns the views do not show
FLAT_ONLY_COLUMNS = ("dump_root",)


def flat_select_list(view: str, columns: list[str], *, before_dtype_names: bool = False) -> str:
    """The select list of `view` over flat files with these columns: each named (`* REPLACE`
    cost `count(*)` ~10% at 10^5 rows, binding the star first), `file_name` and `path` put
    back, `dump_root` left out.

    `before_dtype_names`: some files were written before `dtype` held one vocabulary for every
    producer (sql/01_dtypes.sql) and have no `producer_dtype`: their `dtype` is the producer's
    spelling, named here (the name of a name is itself)."""
    read: dict[str, str] = {}
    if view == "tensors" and "file_name" in columns:
        read["file_name"] = FLAT_READ_FILE_NAME
        if "dump_root" in columns:
            read["path"] = FLAT_READ_PATH
    if before_dtype_names and "dtype" in columns:
        read["dtype"] = "dtype_name(dtype)"
        read["producer_dtype"] = "coalesce(producer_dtype, dtype)" if "producer_dtype" in columns else "dtype"
        if "producer_dtype" not in columns:
            columns = list(columns)
            columns.insert(columns.index("dtype") + 1, "producer_dtype")
    if not read:
        return "*"
    return ", ".join(
        f"{read[name]} AS {name}" if name in read else _quote_identifier(name)
        for name in columns
        if name not in FLAT_ONLY_COLUMNS
    )


def _quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def flat_view_sql(view: str, files: list[str]) -> str:
    """`view` over its flat files (an empty catalog: the query-time view, which has no rows)."""
    if not files:
        return f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {view}_resolved"
    listing = ", ".join(_quote_literal(f) for f in files)
    # Matching columns by name costs a scan ~30% more: only when the files' columns differ (flat
    # files of two dumpcat versions).
    schemas = [pq.read_schema(f).names for f in files]
    by_name = "true" if len({tuple(names) for names in schemas}) > 1 else "false"
    columns = list(dict.fromkeys(name for names in schemas for name in names))  # DuckDB's union order
    before = any("producer_dtype" not in names for names in schemas)
    return (
        f"CREATE OR REPLACE VIEW {view} AS SELECT "
        f"{flat_select_list(view, columns, before_dtype_names=before)} FROM "
        f"read_parquet([{listing}], union_by_name = {by_name}, hive_partitioning = false)"
    )


def define_sql_views(con: duckdb.DuckDBPyConnection, names: tuple[str, ...] | None = None) -> None:
    """Run sql/*.sql (or only the files named) on `con`, once per connection."""
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
    for _name, text in view_sql_files():
        con.execute(text)
    con.execute(f"CREATE OR REPLACE VIEW {_DEFINED} AS SELECT 1 AS defined")


# Views users query, with one line each; the README documents their columns.
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
