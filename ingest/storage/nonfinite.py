"""Each flat `stats` file keeps its NaN/Inf rows beside it: what `first_anomaly` reads.

`first_anomaly`, `first_anomaly_by_graph` and `nan_origin` start from `anomalous_tensors`, the
statistic rows whose tensor holds NaN or Inf (sql/60_first_anomaly.sql). Over a flat file that is a
scan of every row's `has_nan`/`has_inf`, then every column of the few rows that match, spread over
the whole file: most of the query (10^5 rows, ~1 % of them non-finite: 21 ms of the scan against
5.6 ms for the same rows in a file of their own). So when the writer seals a stats flat file
(ingest/storage/flat.py `seal_flat_dir`), it also writes, in the same directory:

- `nonfinite.parquet`: the file's rows with `has_nan OR has_inf` (every column, in the file's
  order), when they are at most `MAX_SHARE` of its rows;
- `nonfinite.none` (empty): the file holds no such row, and readers skip it;
- neither, when more of its rows are non-finite (a dump where NaN spread through most steps: the
  sidecar would save a few percent of the scan and cost nearly the file again on disk and in write
  time), or for a file written before sidecars existed: readers filter the file itself.

The sidecar is a function of its data file alone, written before the snapshot names the file and
removed with its directory when the file is retired (re-resolved or merged): it is exact by
construction. Readers (`nonfinite_view_sql`, catalog/views.py) define `anomalous_tensors` over the
sidecars, and over the data files of the rest, with the filter sql/60_first_anomaly.sql gives it
(`NONFINITE_WHERE`; tests check the two agree): its rows are those of the SQL's whatever a file's state.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from ingest.storage.flat_columns import flat_select_list
from ingest.storage.sql_views import quote_literal

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger("dumpcat.ingest")

NONFINITE_FILE = "nonfinite.parquet"
NONE_FILE = "nonfinite.none"
# The rows a sidecar holds: anomalous_tensors' filter (sql/60_first_anomaly.sql; tests check they agree).
NONFINITE_WHERE = "has_nan OR has_inf"
# A file whose non-finite rows are more than this share of its rows gets no sidecar: what it saves
# shrinks as the share grows and its size grows with it. first_anomaly's SQL over a sidecar against
# the file filtered, 10^5 rows (bench/bench_nonfinite.py has the catalogs' figures): 0.63x at 1 %,
# 0.86x at 50 %, 0.95x at 70 %, 0.97x at 100 % non-finite rows.
MAX_SHARE = 0.75
VIEW = "anomalous_tensors"
_DATA_FILE = "data.parquet"  # (flat.DATA_FILE: flat.py imports this module)


def write_nonfinite(fdir: Path, con: duckdb.DuckDBPyConnection | None = None) -> int | None:
    """Write the sidecar of the stats flat file in `fdir` (see the module's docstring), on `con`
    (the writer's DuckDB; a connection of its own without). Returns its rows, 0 for none, or None
    when the file gets no sidecar. Called before the directory is fsynced and named by a snapshot."""
    import duckdb

    own = con is None
    if own:
        con = duckdb.connect(":memory:", config={
            "threads": "1", "autoinstall_known_extensions": "false", "autoload_known_extensions": "false",
        })  # fmt: skip
    data = fdir / _DATA_FILE
    source = f"read_parquet({quote_literal(str(data))})"
    try:
        total, rows = con.execute(
            f"SELECT count(*), count(*) FILTER ({NONFINITE_WHERE}) FROM {source}"
        ).fetchall()[0]
        if rows == 0:
            (fdir / NONE_FILE).touch()
            return 0
        if rows > total * MAX_SHARE:
            return None
        # Row groups no bigger than the data file's: the write holds one, and the writer's memory
        # cap was sized for the data file's.
        group = pq.ParquetFile(data).metadata.row_group(0).num_rows
        try:
            con.execute(
                f"COPY (SELECT * FROM {source} WHERE {NONFINITE_WHERE}) TO "
                f"{quote_literal(str(fdir / NONFINITE_FILE))} (FORMAT parquet, ROW_GROUP_SIZE {group})"
            ).fetchall()
        except duckdb.OutOfMemoryException:  # no sidecar is a correct state: readers filter the file
            (fdir / NONFINITE_FILE).unlink(missing_ok=True)
            log.debug("dumpcat: no NaN/Inf sidecar for %s: out of memory", data)
            return None
        return int(rows)
    finally:
        if own:
            con.close()


def sidecar_state(data: str | Path) -> str | None:
    """For a flat stats file's path: its sidecar's path, "" when it holds no non-finite row, or
    None when it has no sidecar (read the file itself)."""
    fdir = Path(data).parent
    sidecar = fdir / NONFINITE_FILE
    if sidecar.exists():
        return str(sidecar)
    if (fdir / NONE_FILE).exists():
        return ""
    return None


def sidecar_files(stats_files: list[str]) -> list[str]:
    """The paths a sidecar of each of `stats_files` may have (whether they exist decides the view)."""
    return [str(Path(f).parent / name) for f in stats_files for name in (NONFINITE_FILE, NONE_FILE)]


def nonfinite_view_sql(stats_files: list[str]) -> str:
    """`anomalous_tensors` over the flat stats files `stats_files`: their sidecars, and the files
    without one, filtered. Where the files' columns differ (two dumpcat versions), the view filters
    `stats`, as sql/60_first_anomaly.sql defines it."""
    whole = f"CREATE OR REPLACE VIEW {VIEW} AS SELECT * FROM stats WHERE {NONFINITE_WHERE}"
    if not stats_files:
        return whole
    read = []
    for data in stats_files:
        state = sidecar_state(data)
        if state != "":
            read.append(data if state is None else state)
    if not read:
        return f"CREATE OR REPLACE VIEW {VIEW} AS SELECT * FROM stats WHERE false"
    schemas = {tuple(pq.read_schema(f).names) for f in dict.fromkeys([*stats_files, *read])}
    if len(schemas) > 1:
        return whole
    (columns,) = schemas
    listing = ", ".join(quote_literal(f) for f in read)
    select = flat_select_list("stats", list(columns), before_dtype_names="producer_dtype" not in columns)
    return (
        f"CREATE OR REPLACE VIEW {VIEW} AS SELECT {select} FROM "
        f"read_parquet([{listing}], union_by_name = false, hive_partitioning = false) WHERE {NONFINITE_WHERE}"
    )
