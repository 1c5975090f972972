"""How the flat `tensors` and `stats` files store their columns, and how readers put them back.

The writer (ingest/storage/flat.py) selects `FLAT_STORED_COLUMNS` when it writes a flat file; the
query side's views read the files back with `flat_select_list` / `flat_view_sql` (DuckDB; Spark's
reading is in catalog/spark/spark_sql.py). Encoding and decoding live here, side by side.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from ingest.storage.sql_views import quote_literal

# Views whose rows dumpcat stores resolved at commit time (ingest/storage/flat.py), and so read flat.
FLAT_VIEWS = ("tensors", "stats")

# A flat tensors file stores `file_name` as NULL where it is the last part of `rel_path` (every
# row a reader makes: 134 of ~850 bytes a row, which the writer's DuckDB holds for each row of the
# row group it writes), and `path` as NULL where it is the dump root, '/' and `rel_path` (every row
# of a dump cataloged with its root: 181 bytes), the root in a column `dump_root` of its own (one
# value per run: a dictionary of one entry in the file, and one byte a row in the writer's merge,
# ingest/storage/flat.py); readers put both back. Files that store every name and path (written before)
# read the same. DuckDB's parse_filename binds faster than a regular expression (a view's
# expressions are bound by every query, `count(*)` too); Spark has no parse_filename: its regular
# expression gives the same text (tests/ingest/storage/test_flat.py).
FILE_NAME_OF_REL_PATH = "parse_filename(rel_path, false, 'forward_slash')"
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
FLAT_READ_PATH = "coalesce(path, dump_root || '/' || rel_path)"
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


def flat_view_sql(view: str, files: list[str], *, temporary: bool = False) -> str:
    """`view` over its flat files (an empty catalog: the query-time view, which has no rows);
    `temporary`: a view of the connection alone."""
    create = "CREATE OR REPLACE TEMP VIEW" if temporary else "CREATE OR REPLACE VIEW"
    if not files:
        return f"{create} {view} AS SELECT * FROM {view}_resolved"
    listing = ", ".join(quote_literal(f) for f in files)
    # Matching columns by name costs a scan ~30% more: only when the files' columns differ (flat
    # files of two dumpcat versions).
    schemas = [pq.read_schema(f).names for f in files]
    by_name = "true" if len({tuple(names) for names in schemas}) > 1 else "false"
    columns = list(dict.fromkeys(name for names in schemas for name in names))  # DuckDB's union order
    before = any("producer_dtype" not in names for names in schemas)
    return (
        f"{create} {view} AS SELECT "
        f"{flat_select_list(view, columns, before_dtype_names=before)} FROM "
        f"read_parquet([{listing}], union_by_name = {by_name}, hive_partitioning = false)"
    )
