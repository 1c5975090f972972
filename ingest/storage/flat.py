"""Resolve once, query flat: the `tensors` and `stats` views stored resolved, sorted by row id.

Name resolution (sql/00_op_keys.sql: which operator a file name means, its execution index and
source line) and the unions behind `stats` are joins over the operator tables. Run inside every
query they cost 5-9x a scan of one flat table, and a dashboard runs hundreds of queries. So the
writer runs them once: when a batch commits, `tensors_resolved` and `stats_resolved` (the
query-time views, unchanged) are evaluated over that batch's rows alone and the result is written
as a *flat file*, sorted by row id so that a point lookup reads one row group. Readers'
`tensors`/`stats` views are then plain scans of the flat files.

A flat file is a function of its *sources* (the batches whose rows it holds) and of the whole
catalog's operator tables. Those can change after the fact, and the writer keeps the files exact:

- a batch that brings execution orders, graph IR, source lines or the run's row (the tables in
  `RESOLUTION_INPUTS`) for a (run, rank) re-resolves every flat file holding rows of that rank
  (the watcher case: an execution order copied after its tensors);
- a batch that brings a producer's statistic row for a tensor that had computed statistics, or
  computed counts for an msprobe tensor, re-resolves the stats files holding that row id.

Flat files of a run are merged as they accumulate (four of one size tier into one, so a run has a
few files per tier) and into one when a one-shot ingest ends. Every change is part of the same
snapshot rename as the batch that caused it, so readers never see a flat file that disagrees with
the raw tables. Old files are retired like compacted batches. A tensors file has a sidecar
`index.arrow` (Arrow IPC, memory-mapped by readers): its location columns, for `Catalog.tensor`.

A tensors file stores `file_name` NULL where it is the last part of `rel_path`, and `path` NULL
where it is the dump root (kept in a column `dump_root`), '/' and `rel_path` (nearly every row: a
narrower row for this writer's DuckDB to hold while it writes a row group); the readers' views put
them back (ingest/storage/flat_columns.py: FLAT_STORED_COLUMNS, flat_select_list). A merge holds
the text columns of few values as ENUMs, under a cap of its own (`_merge`): the file it writes is
the same.

Layout: data/flat/<table>/<id>/{data.parquet,index.arrow}; snapshot.json's "flat" holds, per
table, entries {"id", "path", "run", "rows", "sources": [batch ids], "keys": [[run, rank], ...]}
("interim": true on a file an earlier dumpcat's one-shot ingest wrote while walking, unsorted:
`consolidate` rewrites it). A one-shot ingest writes none while it walks: its run is pending
(store.PENDING, CatalogStore.start_run) until `resolve_run` writes its files at its end.

Each shard of a catalog (ingest/storage/store.py) keeps its own flat files, under
data/run=<run>/writer=<name>/flat/, resolved by its own writer against its own raw tables only:
a rank's tensors resolve against the operators of that rank in the same shard (each rank is one
writer's, which the store enforces), and a tensor's `path` joins the shard's own dump root.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    import duckdb

    from ingest.storage.store import CatalogStore

log = logging.getLogger("dumpcat.ingest")

# Flat table -> (query-time view, its source tables: the raw tables whose rows it resolves).
FLAT_SOURCES: dict[str, tuple[str, ...]] = {"tensors": ("tensors",), "stats": ("stat_rows", "tensor_stats")}
# Raw tables the resolution reads besides the sources: a batch with rows in any of them may change
# how earlier rows of the same (run, rank) resolve. test_flat.py checks this against sql/.
RESOLUTION_INPUTS = ("ops", "ir_nodes", "source_lines", "runs")
# sql/ files that define the query-time views (the writer needs nothing else), and what they read.
RESOLUTION_SQL = ("00_op_keys.sql", "01_dtypes.sql", "05_graph.sql", "30_tensors.sql", "40_stats.sql")
_SOURCE_TABLES = tuple(t for ts in FLAT_SOURCES.values() for t in ts)
_RAW_READ = (*set(_SOURCE_TABLES), *RESOLUTION_INPUTS, "edges")
# Sort order of each flat table (row id first: point lookups prune by row-group statistics).
ORDER = {"tensors": "row_id", "stats": "row_id, stat_id, stat_source"}
# Merging: files of a run in the same size tier (tier k holds 4^k..4^(k+1) x TIER_BASE rows) are
# merged four at a time, which bounds the files of a run at 3 per tier.
MERGE_FANIN = 4
TIER_BASE = 4096
# Rows from which the last merge or resolution of a one-shot ingest opens a new DuckDB (a small
# dump's is quick, and opening one costs tens of milliseconds of its start-up budget).
_FRESH_MERGE_ROWS = 100_000
# The location columns `Catalog.tensor` needs, in the sidecar index of a tensors file.
INDEX_SCHEMA = pa.schema(
    [
        ("row_id", pa.int64()),
        ("run", pa.string()),
        ("rel_path", pa.string()),
        ("data_offset", pa.int64()),
        ("stored_dtype", pa.string()),
        ("shape", pa.list_(pa.int64())),
        ("format", pa.string()),
        ("host_shape", pa.list_(pa.int64())),
        ("nbytes", pa.int64()),
    ]
)
INDEX_FILE = "index.arrow"
DATA_FILE = "data.parquet"
_INDEX_BATCH_ROWS = 64 * 1024
# A flat file's row group (DuckDB's default).
_SORT_ROWS = 122_880
# The writer's DuckDB: a cap, not a reservation (sorts and joins spill to the catalog's tmp/ directory;
# rows are sorted in one statement that spills past it). A statement that still runs out of memory
# (a batch of unusually wide rows resolved in one join) is retried with the cap doubled, up to half
# the machine's memory, and the writer keeps the raised cap.
_MEMORY_LIMIT = os.environ.get("DUMPCAT_WRITER_MEMORY", "128MB")
# A write of a sorted table that ran out of memory is retried with the cap this much higher.
_COPY_RETRY_FACTOR = 1.15
# A merge reads flat files (no joins): what it needs is the row group its write holds. It starts
# under this cap (or the writer's, if lower) and raises it in _COPY_RETRY_FACTOR steps until the
# write fits; the next merge starts where the last one fitted. Under the writer's cap, DuckDB filled
# it with the sorted table (it spills past the cap, not before) on top of the row group: 10^6
# tensors peaked at ~160 MiB of the writer's memory, ~90 MiB from here. The cap trades memory for
# time (bench/memory_phases.py, 10^6 tensors, the last merge, same tree, 2026-11-29, when merges still
# sorted one row-id range at a time; sorted in one statement, the 96 MiB merge takes 11.4 s):
#   start  64 MiB: raised to 83, 38.4 s of CPU, the merge's peak 314 MiB (the ingest's: 318, a commit)
#   start  96 MiB: stays at 96,  29.3 s of CPU, the merge's peak 313 MiB (318, a commit)
#   start 128 MiB: 122 (the writer's), 25.7 s, the merge's peak 340 MiB: the ingest's peak
# 96 MiB costs the ingest no peak memory: the last merge stays under the commits' peak.
_MERGE_MEMORY_START = 96 << 20
# A merge of at least this many rows holds its low-cardinality text columns as dictionaries (DuckDB
# ENUMs: one or two bytes a value, not a 16-byte slot and the text) while it sorts and writes; the
# file is the same (an ENUM is written as a dictionary-encoded string column). A column is held so
# when it has at most one distinct value per 8 rows of a row group (each row group's dictionary
# would hold about all of them anyway). Columns of one value per file, and the sort keys (an ENUM
# sorts by its dictionary's order), are never. From 8 vectors of rows: the last merge of a
# one-shot ingest of 10^5 tensors (below one row group) took 6.2 s of CPU with plain text and
# 2.1 s with dictionaries (its rows fit the merge's starting cap; deciding the types: 0.14 s).
_DICTIONARY_MIN_ROWS = 8 * 2048
# A run's final file, resolved from its raw rows, holds them as dictionaries when the rows as plain
# text would take more than this share of the writer's memory (see FlatWriter._resolve).
_DICTIONARY_MEMORY_SHARE = 0.5
_NOT_DICTIONARY = frozenset({"rel_path", "path", "file_name", "original_name", "md5", "arg_path"})


def _tier(rows: int) -> int:
    tier = 0
    while rows >= TIER_BASE * 4 ** (tier + 1):
        tier += 1
    return tier


def _memory_bytes(limit: str) -> int:
    """DuckDB's memory limit ('256MB', '1GB', '512MiB', ...) in bytes."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(I?B)?\s*", limit.upper())
    if not match:
        raise ValueError(f"DUMPCAT_WRITER_MEMORY: cannot read {limit!r} (e.g. 256MB)")
    number, unit, suffix = match.groups()
    base = 1024 if suffix == "IB" else 1000
    return int(float(number) * base ** "_KMGT".index(unit or "_"))


def writer_memory_limit() -> int:
    """DUMPCAT_WRITER_MEMORY in bytes; CatalogError (one line, before anything is written: ingest
    checks it first) when it cannot be read or is under 1 MiB (DuckDB's limit is set in whole MiB:
    '1MB' was a limit of 0, under which the writer could not even retry)."""
    from ingest.storage.errors import CatalogError

    try:
        limit = _memory_bytes(_MEMORY_LIMIT)
    except ValueError as exc:
        raise CatalogError(str(exc)) from None
    if limit < 1 << 20:
        raise CatalogError(f"DUMPCAT_WRITER_MEMORY: {_MEMORY_LIMIT!r} is less than 1 MiB (e.g. 256MB)")
    return limit


def _memory_ceiling() -> int:
    """Half the machine's physical memory: the writer's cap is never raised past it."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 4 << 30


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _listing(paths: list[str]) -> str:
    return "[" + ", ".join(_quote(p) for p in paths) + "]"


_SAMPLE_ROWS = 2048
# A batch of at most this many tensors and statistic rows resolves both flat tables at once.
_SIDE_BY_SIDE_ROWS = 20_000
# Resolved rows (op_name, the source line added) over their source rows, in bytes: 1.04 for the
# tensors and stats of the synthetic 10^5 tree; the margin is for long source lines.
_RESOLVED_WIDTH = 1.25


def _sampled_row_bytes(
    con: duckdb.DuckDBPyConnection, source: str, dictionaries: frozenset[str] = frozenset()
) -> float:
    """Bytes per row of `source` in memory, from its first rows as Arrow (strings and lists at
    their length) plus DuckDB's 16-byte value slot per column; a column in `dictionaries`, held
    as an ENUM, at two bytes a row (sized for its text, they were a third of what fits)."""
    sample = con.sql(f"SELECT * FROM ({source}) LIMIT {_SAMPLE_ROWS}").to_arrow_table()
    if not sample.num_rows:
        return 1.0
    held = [name for name in sample.column_names if name in dictionaries]
    text = sum(sample.column(name).nbytes for name in held)
    plain = (sample.nbytes - text) / sample.num_rows + 16 * (sample.num_columns - len(held))
    return plain + 2 * len(held)


def new_flat_dir(store: CatalogStore, flat: str) -> tuple[str, str, Path]:
    """A new flat file's id, its directory relative to the catalog root, and that directory
    (created): under the store's shard, named by time and a random suffix."""
    fid = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}"
    rel = f"{store.shard_rel or 'data'}/flat/{flat}/{fid}"
    fdir = store.root / rel
    fdir.mkdir(parents=True)
    return fid, rel, fdir


def seal_flat_dir(
    fdir: Path,
    flat: str,
    *,
    fid: str,
    rel: str,
    run: str,
    rows: int,
    sources: list[str],
    keys: list,
    con: duckdb.DuckDBPyConnection | None = None,
) -> dict:
    """Finish a flat file whose data.parquet is written: its sidecar index (tensors) or of NaN/Inf
    rows (stats, on `con`: ingest/storage/nonfinite.py), everything fsynced, and its snapshot entry.
    Also used by bench/bench_scale.py, which writes flat files in this layout without resolving them."""
    from ingest.storage.durable import fsync_path
    from ingest.storage.nonfinite import write_nonfinite

    if flat == "tensors":
        write_index(fdir / DATA_FILE, fdir / INDEX_FILE)
    elif flat == "stats":
        write_nonfinite(fdir, con)
    for name in os.listdir(fdir):
        fsync_path(fdir / name)
    fsync_path(fdir)
    fsync_path(fdir.parent)
    return {
        "id": fid,
        "path": rel,
        "run": run,
        "rows": int(rows),
        "sources": sorted(set(sources)),
        "keys": sorted([r, k] for r, k in keys),
    }


def write_index(data: Path, path: Path) -> None:
    """The location columns of a tensors file as Arrow IPC batches, in its order (by row id: a
    sidecar is searched by bisection)."""
    import pyarrow.parquet as pq

    source = pq.ParquetFile(str(data))
    batches = source.iter_batches(batch_size=_INDEX_BATCH_ROWS, columns=INDEX_SCHEMA.names)
    typed = (
        pa.RecordBatch.from_arrays(
            [_as_type(batch.column(name), INDEX_SCHEMA.field(name).type) for name in INDEX_SCHEMA.names],
            schema=INDEX_SCHEMA,
        )
        for batch in batches
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, INDEX_SCHEMA) as out:
        for batch in typed:
            out.write_batch(batch)


def _as_type(column: pa.Array, type_: pa.DataType) -> pa.Array:
    """`column` cast to `type_` if it is not of it already (casting imports pyarrow.compute, a
    tenth of a small ingest's time, for columns that are nearly always of their type already)."""
    return column if column.type == type_ else column.cast(type_)


_WRITER_VIEWS = "resolution"  # the name the writer attaches its cached resolution views under


def open_writer_connection() -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB for the writer, with the resolution views of sql/ over empty raw
    views (the writer points those at the live files; its memory limit and temp directory are
    set when it takes the connection). Also opened ahead of time by ingest.storage.writer_warm_up.

    The resolution views come from a database in the user's cache (`_writer_views_database`),
    attached read-only: defining them binds them (~0.13 s of CPU, a third of a small ingest),
    attaching them does not. Their raw and `src_` views are left out of that file: the writer
    defines those here, in its own in-memory database, where the views of the attached one find
    them (a name a view does not find in its own database is looked up on the search path).
    Without a usable cache the views are defined here, as before."""
    import duckdb

    from ingest.storage.sql_views import quote_literal, raw_view_sql

    con = duckdb.connect(
        ":memory:",
        config={
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            "memory_limit": f"{_memory_bytes(_MEMORY_LIMIT) >> 20}MiB",
            # give freed memory back after each statement: the writer idles between batches
            "allocator_flush_threshold": "8MB",
            "allocator_bulk_deallocation_flush_threshold": "8MB",
            "threads": "1",
            # names are the catalog's views, never the caller's Python variables (which DuckDB's
            # Python client otherwise looks a table name it cannot find up among)
            "python_enable_replacements": "false",
            # the files it reads are read once: caching them only takes memory
            "enable_external_file_cache": "false",
            # every order that matters is an ORDER BY: streaming copies need not buffer
            "preserve_insertion_order": "false",
        },
    )
    # One execute for every statement: run in a thread beside busy imports, each return to Python
    # would wait for the GIL.
    local = [_QUIET, *(raw_view_sql(table, []) for table in _RAW_READ)]
    local += [f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM raw_{view[4:]}" for view in _SRC_VIEWS]
    for rebuild in (False, True):
        cached = _writer_views_database(rebuild=rebuild)
        if cached is None:
            break
        try:
            con.execute(f"ATTACH {quote_literal(str(cached))} AS {_WRITER_VIEWS} (READ_ONLY)")
            found = "SELECT count(*) FROM duckdb_views() WHERE database_name = ? AND view_name IN ?"
            if con.execute(found, [_WRITER_VIEWS, _RESOLVED]).fetchone()[0] == len(_RESOLVED):
                con.execute(";\n".join([*local, _SEARCH_PATH]))
                return con
        except duckdb.Error:
            pass
        with contextlib.suppress(duckdb.Error):  # damaged, or not the views: built anew once
            con.execute(f"DETACH {_WRITER_VIEWS}")
    con.execute(";\n".join([*local, *_resolution_sql()]))
    return con
    con.execute(";\n".join([*local, *_resolution_sql()]))
    return con


def writer_cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of the writer's connection that finds the resolution views as the connection
    does (the search path is a connection's setting, which a cursor does not inherit)."""
    cursor = con.cursor()  # (asked, not `con`: another thread may be using the connection)
    cursor.execute(_QUIET)  # a client setting too
    attached = "SELECT count(*) FROM duckdb_databases() WHERE database_name = ?"
    if cursor.execute(attached, [_WRITER_VIEWS]).fetchone()[0]:
        cursor.execute(_SEARCH_PATH)
    return cursor


_RESOLVED = [f"{flat}_resolved" for flat in FLAT_SOURCES]  # what the writer queries
# DuckDB's own progress bar, drawn on stdout (a pipe or a file too) by a statement of over 2 s, as
# the resolution and last merge of a big ingest are: never (the command line draws its own bar).
_QUIET = "SET enable_progress_bar = false"
_SEARCH_PATH = f"SET search_path = 'memory.main,{_WRITER_VIEWS}.main'"
# The views the resolution SQL reads each batch's rows through (sql/30_tensors.sql, 40_stats.sql).
_SRC_VIEWS = tuple(f"src_{t}" for ts in FLAT_SOURCES.values() for t in ts)


def _resolution_sql() -> list[str]:
    from ingest.storage.sql_views import view_sql_files

    return [text for name, text in view_sql_files() if name in RESOLUTION_SQL]


def _writer_views_database(*, rebuild: bool = False) -> Path | None:
    """The cached database of the resolution views (ingest/storage/definitions_cache.py), keyed by
    what they depend on: DuckDB's version, their SQL, and the Python that writes the raw views."""
    import hashlib

    import duckdb

    from ingest.storage import definitions_cache, schema, sql_views

    digest = hashlib.sha256(duckdb.__version__.encode())
    for text in _resolution_sql():
        digest.update(text.encode())
    for module in (schema, sql_views):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(repr((sorted(_RAW_READ), _SRC_VIEWS, _WRITER_VIEWS)).encode())
    return definitions_cache.cached_database(
        "writer-views", digest.hexdigest()[:32], _build_writer_views, rebuild=rebuild
    )


def _build_writer_views(path: Path) -> None:
    """The resolution views in a new database file at `path`, without the raw and `src_` views
    they read (each writer defines its own)."""
    import duckdb

    from ingest.storage.sql_views import raw_view_sql

    with duckdb.connect(str(path), config={"autoinstall_known_extensions": "false",
                                            "autoload_known_extensions": "false"}) as con:  # fmt: skip
        con.execute(";\n".join([*(raw_view_sql(table, []) for table in _RAW_READ), *_resolution_sql()]))
        for view in (*(f"raw_{t}" for t in _RAW_READ), *_SRC_VIEWS):
            con.execute(f"DROP VIEW {view}")
        con.execute("CHECKPOINT")


class FlatWriter:
    """Keeps a catalog's flat files exact as batches commit (the writer's side; holds the lock)."""

    def __init__(self, store: CatalogStore) -> None:
        self.store = store
        self._con: duckdb.DuckDBPyConnection | None = None
        self._files: dict[str, list[str]] | None = None
        self.memory_limit = writer_memory_limit()
        self._ordered = False  # inside _insertion_order
        self._final = False  # inside consolidate or resolve_run: the file that stays
        self._merge_cap = min(_MERGE_MEMORY_START, self.memory_limit)  # where the next merge starts
        self._merging = False  # inside _merge_memory

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    # -- the connection ----------------------------------------------------------------------

    def _connect(self, snap: dict, run: str | None = None) -> duckdb.DuckDBPyConnection:
        """A private DuckDB; with `run`, its raw views list the live batches of that run in `snap`.

        Name resolution never joins across runs (operator keys carry the run, and a row id is a
        hash of it), so the rows of a run resolve against that run's files alone: a commit's
        cost does not grow with the other runs of the catalog (35 committed dumps ingested into
        one catalog took 29 s of CPU, into a catalog each 7 s)."""
        from ingest.storage.sql_views import define_raw_view
        from ingest.storage.writer_warm_up import take_warm_connection

        if self._con is None:
            con = take_warm_connection() or open_writer_connection()
            con.execute(f"SET memory_limit = '{self.memory_limit >> 20}MiB'").fetchall()
            con.execute(f"SET temp_directory = {_quote(str(self.store.tmp_dir))}").fetchall()
            self._con, self._files = con, None
        if run is None:
            return self._con
        of_run = {"batches": [b for b in snap["batches"] if b["run"] == run]}
        files = self.store.table_files(of_run)
        if files != self._files:
            full = self.store.full_schema_tables(of_run)
            for table in _RAW_READ:
                if self._files is None or files[table] != self._files[table]:
                    define_raw_view(self._con, table, files[table], full_schema=table in full)
            self._files = files
        return self._con

    def release_buffers(self, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Make DuckDB give back the blocks its statements freed. Its buffer pool keeps them for
        reuse (duckdb_memory() shows none of it): ~70-90 MiB after a 50,000-row batch, kept
        while the ingest walks on. Setting the memory limit (to what it is) frees them. On `con`,
        a cursor of the writer's connection, when another thread may be using the connection."""
        con = con or self._con
        if con is not None:
            con.execute(f"SET memory_limit = '{self.memory_limit >> 20}MiB'").fetchall()

    # -- resolving -----------------------------------------------------------------------------

    def _batch_files(self, snap: dict, batch_ids: set[str], table: str) -> list[str]:
        return [
            str(self.store.root / b["path"] / f"{table}.parquet")
            for b in snap["batches"]
            if b["id"] in batch_ids and table in b["tables"]
        ]

    def _retrying(self, con: duckdb.DuckDBPyConnection, write: Callable[[], dict | None]) -> dict | None:
        """`write()`, retried with the DuckDB memory cap doubled while it runs out of memory (nothing
        of a failed attempt stays: `_write` removes its file and drops its tables)."""
        import duckdb

        while True:
            try:
                return write()
            except duckdb.OutOfMemoryException as exc:
                self._raise_cap(con, exc)

    def _raise_cap(self, con: duckdb.DuckDBPyConnection, exc: Exception, factor: float = 2.0) -> None:
        """Raise the writer's DuckDB memory cap by `factor` after a statement ran out of memory,
        and say so (a merge, which starts low on purpose, only in the debug log); re-raise the
        error when the cap is at its ceiling (half the machine's memory)."""
        # whole MiB, and at least one more (a cap of a few MiB would not grow by half)
        raised = max(int(self.memory_limit * factor) >> 20, (self.memory_limit >> 20) + 1) << 20
        if raised > max(_memory_ceiling(), _memory_bytes(_MEMORY_LIMIT)):
            raise exc
        (log.debug if self._merging else log.warning)(
            "dumpcat: the catalog writer's DuckDB ran out of memory under %d MiB; retrying with %d "
            "MiB (DUMPCAT_WRITER_MEMORY sets where it starts)",
            self.memory_limit >> 20,
            raised >> 20,
        )
        self.memory_limit = raised
        con.execute(f"SET memory_limit = '{self.memory_limit >> 20}MiB'").fetchall()

    def _write(
        self,
        con: duckdb.DuckDBPyConnection,
        flat: str,
        query: str,
        ids: str,
        run: str,
        sources: list[str],
    ) -> dict | None:
        """Write `query`'s rows, sorted, as a new flat file of `flat` (not yet visible); its entry,
        or None when there are no rows. `ids` selects (row_id, stat_id) of the rows `query` reads
        (a cheap scan of the source files: it counts them, the rows are not resolved twice).

        Memory stays bounded whatever the row count and width: the rows are resolved and sorted
        in one statement into a table (DuckDB's sort and the table spill to tmp/ past the memory
        limit). Sorting one row-id range at a time instead ran a batch's resolution joins once per
        range, over every source row (the batch's files are not in row-id order), and a merge's
        reads once per range: 10^6 tensors, 17 batches and the last merge under a 96 MiB cap,
        25.6 s of CPU resolving and 28.0 s merging in ranges, 11.6 s and 11.4 s in one statement,
        the same peak RSS (bench/memory_phases.py). The table keeps its insertion order, and
        DuckDB's own parquet writer then writes it: the layout of one `COPY ... ORDER BY`, which scans
        measurably faster than pyarrow's (and, written from a table, marks the columns without
        nulls as required, as one `COPY` of a table does), in DuckDB's 122,880-row groups: queries
        scan row group by row group, and 12-16k-row groups made count(*) and the NaN scan 3-4x one
        flat file at 10^6 rows (61,440-row groups: 1.3-1.4x, where the same file rewritten in
        122,880-row groups gave 1.0-1.08x in the same bench_speed run; written by pyarrow in
        122,880-row groups, the NaN scan 1.42x). The parquet writer holds one row group's rows
        (~100 MB of wide ones): with rows that wide, the write runs out of memory and is retried
        with the cap raised (`_write_sorted`)."""
        total = con.execute(f"SELECT count(*) FROM ({ids})").fetchall()[0][0]
        if not total:
            return None
        fid, rel, fdir = new_flat_dir(self.store, flat)
        data = fdir / DATA_FILE
        try:
            with self._insertion_order(con):
                options = f"FORMAT parquet, ROW_GROUP_SIZE {_SORT_ROWS}"
                rows, keys = self._write_sorted(con, flat, query, data, options)
        except BaseException:
            shutil.rmtree(fdir, ignore_errors=True)
            raise
        if not rows:
            shutil.rmtree(fdir, ignore_errors=True)
            return None
        return seal_flat_dir(
            fdir,
            flat,
            fid=fid,
            rel=rel,
            run=run,
            rows=rows,
            sources=sources,
            keys=keys,
            con=con,
        )

    def _write_sorted(
        self,
        con: duckdb.DuckDBPyConnection,
        flat: str,
        query: str,
        data: Path,
        copy_options: str,
    ) -> tuple[int, list[tuple]]:
        """Resolve and sort `query` into a table that keeps its insertion order, then write the
        table in that order; its row count and distinct (run, rank). The table is named after
        `flat`: tensors and stats of a small batch are written at the same time (`_resolve_batch`).

        The write holds one 122,880-row group of rows: when that runs out of memory, only the
        write is retried, not the sort (at 10^6 tensors, ~10 s of work), and in steps of 1.15x
        (a failed write stops at its first row group: ~2 s at 10^6 rows): the cap a merge ends
        with is the peak of the ingest. 10^6 tensors rows needed 140 MiB (between 122 and 140),
        where steps of 1.5x gave 183 and doubling 244."""
        import duckdb

        table = f"flat_sorted_{flat}"
        try:
            con.execute(
                f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM ({query}) ORDER BY {ORDER[flat]}"
            ).fetchall()
            while True:
                try:
                    con.execute(f"COPY {table} TO {_quote(str(data))} ({copy_options})").fetchall()
                    break
                except duckdb.OutOfMemoryException as exc:
                    self._raise_cap(con, exc, factor=_COPY_RETRY_FACTOR)
            count = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            return int(count), con.execute(f"SELECT DISTINCT run, rank FROM {table}").fetchall()
        finally:
            con.execute(f"DROP TABLE IF EXISTS {table}").fetchall()
            # before the sidecar index is read back with pyarrow: not both at their peak at once
            self.release_buffers(con)

    def _resolve(
        self,
        snap: dict,
        flat: str,
        run: str,
        sources: list[str],
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> dict | None:
        """Resolve the rows of `sources` (batch ids) into a new flat file of `flat` (on `con`, a
        cursor of the writer's connection, or on the connection itself)."""
        from ingest.storage.flat_columns import FLAT_STORED_COLUMNS
        from ingest.storage.sql_views import define_raw_view

        con = con or self._connect(snap, run)
        wanted = set(sources)
        full = self.store.full_schema_tables({"batches": [b for b in snap["batches"] if b["id"] in wanted]})
        for table in FLAT_SOURCES[flat]:
            files = self._batch_files(snap, wanted, table)
            define_raw_view(con, table, files, view=f"src_{table}", full_schema=table in full)
        ids = " UNION ALL ".join(
            f"SELECT row_id, {'stat_id' if t == 'stat_rows' else 'NULL::BIGINT AS stat_id'} FROM src_{t}"
            for t in FLAT_SOURCES[flat]
        )
        stored = f"SELECT {FLAT_STORED_COLUMNS[flat]} FROM {flat}_resolved"
        # the widest source's rows, widened by what resolution adds (op_name, the source line)
        sample = " UNION ALL BY NAME ".join(f"SELECT * FROM src_{t}" for t in FLAT_SOURCES[flat])
        # A run's final file (resolve_run) holds its few-valued text columns as dictionaries
        # while it sorts, as a merge does (_DICTIONARY_MIN_ROWS), when its rows would not fit in
        # half the writer's memory as plain text (the sort would spill): 10^5 tensors and statistic
        # rows of the synthetic tree, 3.4 s of CPU with plain text, 2.3-2.6 s with them (listing the
        # values costs a pass); the real tree's 35,780 tensors, 0.48-0.50 s plain, 0.54 with them.
        rows = sum(
            b["tables"].get(t, 0) for b in snap["batches"] if b["id"] in wanted for t in FLAT_SOURCES[flat]
        )
        types = {}
        if self._final and rows >= _DICTIONARY_MIN_ROWS:
            held = rows * _RESOLVED_WIDTH * _sampled_row_bytes(con, sample)
            if held > self.memory_limit * _DICTIONARY_MEMORY_SHARE:
                types = self._retrying(con, partial(self._dictionary_types, con, flat, f"({stored})", rows))
        query = stored
        if types:
            casts = ", ".join(f"{_quote_name(c)}::{t} AS {_quote_name(c)}" for c, t in types.items())
            query = f"SELECT * REPLACE ({casts}) FROM ({stored})"
        try:
            return self._retrying(
                con,
                partial(
                    self._write, con, flat, query, ids, run, sources,
                ),
            )  # fmt: skip
        finally:
            for type_name in types.values():  # (the table that used them is dropped)
                con.execute(f"DROP TYPE IF EXISTS {type_name}").fetchall()

    def _merge(self, snap: dict, flat: str, entries: list[dict]) -> dict | None:
        """One file of the rows of `entries`' files, in the merge's own memory (`_merge_memory`)
        with low-cardinality columns held as dictionaries (`_dictionary_types`)."""
        con = self._connect(snap)
        paths = [str(self.store.root / e["path"] / DATA_FILE) for e in entries]
        source = f"read_parquet({_listing(paths)}, union_by_name = true)"
        plain = f"SELECT * FROM {source}"
        ids = f"SELECT row_id, {'stat_id' if flat == 'stats' else 'NULL::BIGINT AS stat_id'} FROM ({plain})"
        sources = [s for e in entries for s in e["sources"]]
        types = self._dictionary_types(con, flat, source, sum(e["rows"] for e in entries))
        casts = ", ".join(f"{_quote_name(c)}::{t} AS {_quote_name(c)}" for c, t in types.items())
        query = f"SELECT * REPLACE ({casts}) FROM {source}" if types else plain
        try:
            with self._merge_memory(con):
                write = partial(self._write, con, flat, query, ids, entries[0]["run"], sources)
                return self._retrying(con, write)
        finally:
            for type_name in types.values():  # (the table that used them is dropped)
                con.execute(f"DROP TYPE IF EXISTS {type_name}").fetchall()

    def _dictionary_types(
        self, con: duckdb.DuckDBPyConnection, flat: str, source: str, rows: int
    ) -> dict[str, str]:
        """Column -> the ENUM type (created here, its values in text order) a merge of `rows` rows
        of `source` holds it as (see _DICTIONARY_MIN_ROWS). Two passes over `source`: one estimates
        each text column's distinct values, one lists those of the few-valued columns (listing
        every column's at once ran out of memory under the writer's cap on 6,000 rows)."""
        if rows < _DICTIONARY_MIN_ROWS:
            return {}
        keys = {k.strip() for k in ORDER[flat].split(",")}
        described = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
        text = [r[0] for r in described if r[1] == "VARCHAR" and r[0] not in _NOT_DICTIONARY | keys]
        if not text:
            return {}
        most = max(1, min(rows, _SORT_ROWS) // 8)
        estimates = ", ".join(f"approx_count_distinct({_quote_name(c)})" for c in text)
        counts = con.execute(f"SELECT {estimates} FROM {source}").fetchall()[0]
        text = [c for c, n in zip(text, counts, strict=True) if 0 < n <= most]
        types = {c: f"flat_dictionary_{flat}_{i}" for i, c in enumerate(text)}
        if not types:
            return {}
        # every column's values in one pass over `source` (a resolution: one pass a column was
        # ~0.1 s each at 10^5 rows); ENUM values in text order (code points: DuckDB's byte order)
        lists = ", ".join(
            f"list(DISTINCT {_quote_name(c)}) FILTER (WHERE {_quote_name(c)} IS NOT NULL)" for c in types
        )
        values = con.execute(f"SELECT {lists} FROM {source}").fetchall()[0]
        created = {}
        for (column, type_name), found in zip(types.items(), values, strict=True):
            if not found or len(found) > most:
                continue
            con.execute(f"DROP TYPE IF EXISTS {type_name}").fetchall()
            con.execute(
                f"CREATE TYPE {type_name} AS ENUM ({', '.join(_quote(v) for v in sorted(found))})"
            ).fetchall()
            created[column] = type_name
        return created

    @contextlib.contextmanager
    def _merge_memory(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """The merge's cap inside (see _MERGE_MEMORY_START); the writer's cap after, or the
        merge's if it had to go higher."""
        writer_cap = self.memory_limit
        self.memory_limit = min(self._merge_cap, writer_cap)
        self._merging = True
        con.execute(f"SET memory_limit = '{self.memory_limit >> 20}MiB'").fetchall()
        try:
            yield
        finally:
            self._merge_cap = self.memory_limit
            self.memory_limit = max(writer_cap, self.memory_limit)
            self._merging = False
            con.execute(f"SET memory_limit = '{self.memory_limit >> 20}MiB'").fetchall()

    # -- keeping the files exact ---------------------------------------------------------------

    def after_batch(self, snap: dict, entry: dict) -> list[str]:
        """`snap` just gained batch `entry`: resolve its rows, re-resolve what it changes, merge.
        Edits snap["flat"]; returns the paths of flat files to retire."""
        flat_state = snap.setdefault("flat", {name: [] for name in FLAT_SOURCES})
        retired: list[str] = []
        stale = self._stale_entries(snap, entry)
        fresh = self._resolve_batch(snap, entry)
        for flat in FLAT_SOURCES:
            entries = flat_state.setdefault(flat, [])
            for old in [e for e in entries if e["id"] in stale.get(flat, set())]:
                new = self._resolve(snap, flat, old["run"], old["sources"])
                entries[entries.index(old)] = new
                retired.append(old["path"])
            flat_state[flat] = entries = [e for e in entries if e is not None]
            if fresh.get(flat) is not None:
                entries.append(fresh[flat])
            retired += self._merge_tiers(snap, flat, entry["run"])
        self.release_buffers()  # each write released its own; this, the queries of a batch with none
        return retired

    def resolve_run(self, snap: dict, run: str, flats: Iterable[str] = tuple(FLAT_SOURCES)) -> list[str]:
        """Each flat table of `flats` of `run` becomes one final file, resolved from all the run's
        raw batches in one statement, in the place of the run's files of that table: how a
        one-shot ingest, which commits its batches without flat files (the run is *pending*,
        CatalogStore.start_run), writes them at its end. Edits snap["flat"]; returns the paths of
        flat files to retire.

        One statement over the raw rows, not a file per batch merged at the end: the batches'
        resolution joins run once, over the run's final operators (no file is left stale by an
        execution order committed after its tensors), and nothing is written twice (10^5
        tensors in 5 batches: 0.65 s of the ingest's ~4 s went to files per batch)."""
        flat_state = snap.setdefault("flat", {name: [] for name in FLAT_SOURCES})
        retired: list[str] = []
        plan = {}
        for flat in flats:
            tables = FLAT_SOURCES[flat]
            sources = [
                b["id"] for b in snap["batches"] if b["run"] == run and any(t in b["tables"] for t in tables)
            ]
            if sources:
                plan[flat] = sources
        rows = sum(b["tables"].get(t, 0) for b in snap["batches"] if b["run"] == run for t in _SOURCE_TABLES)
        if rows >= _FRESH_MERGE_ROWS:
            self.close()  # as consolidate: the walk's allocations are not carried into the peak
        self._final = True
        try:
            resolved = self._resolve_each(snap, run, plan, rows)
        finally:
            self._final = False
        for flat, new in resolved.items():
            entries = flat_state.setdefault(flat, [])
            retired += [e["path"] for e in entries if e["run"] == run]
            flat_state[flat] = [e for e in entries if e["run"] != run] + ([new] if new is not None else [])
        self.close()
        return retired

    def _resolve_batch(self, snap: dict, entry: dict) -> dict[str, dict | None]:
        """The new flat files of batch `entry`'s rows, per flat table that has rows in it.

        A small batch (a watcher's flush, a small dump) resolves its tensors and its stats side by
        side, on two cursors: each is mostly DuckDB planning the resolution joins, which does not
        hold the GIL, and a small batch needs little memory twice over."""
        tables = entry["tables"]
        flats = [flat for flat, src in FLAT_SOURCES.items() if any(t in tables for t in src)]
        rows = sum(tables.get(t, 0) for flat in flats for t in FLAT_SOURCES[flat])
        return self._resolve_each(snap, entry["run"], {flat: [entry["id"]] for flat in flats}, rows)

    def _resolve_each(
        self, snap: dict, run: str, plan: dict[str, list[str]], rows: int
    ) -> dict[str, dict | None]:
        """Per flat table of `plan`, the new flat file of the rows of its sources (batch ids);
        `rows`, the source rows in all: side by side when few (see _resolve_batch)."""
        if len(plan) < 2 or rows > _SIDE_BY_SIDE_ROWS:
            return {flat: self._resolve(snap, flat, run, sources) for flat, sources in plan.items()}
        con = self._connect(snap, run)

        def resolve(flat: str) -> dict | None:
            cursor = writer_cursor(con)
            try:
                return self._resolve(snap, flat, run, plan[flat], con=cursor)
            finally:
                cursor.close()

        with self._insertion_order(con), ThreadPoolExecutor(len(plan), "dumpcat-resolve") as pool:
            futures = {flat: pool.submit(resolve, flat) for flat in plan}
            return {flat: future.result() for flat, future in futures.items()}

    @contextlib.contextmanager
    def _insertion_order(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Sorted rows reach the file in order inside (the connection's default lets DuckDB
        reorder). The setting is the database's, not a cursor's: only the outermost use sets it
        and sets it back, so cursors writing side by side keep it until both are done."""
        if self._ordered:
            yield
            return
        self._ordered = True
        con.execute("SET preserve_insertion_order = true").fetchall()
        try:
            yield
        finally:
            con.execute("SET preserve_insertion_order = false").fetchall()
            self._ordered = False

    def _stale_entries(self, snap: dict, entry: dict) -> dict[str, set[str]]:
        """Ids of the flat files (per flat table) whose rows `entry`'s batch changes."""
        stale: dict[str, set[str]] = {}
        flat_state = snap.get("flat", {})
        if not any(flat_state.get(f) for f in FLAT_SOURCES):
            return stale
        tables = entry["tables"]
        bdir = self.store.root / entry["path"]
        inputs = [t for t in RESOLUTION_INPUTS if t in tables]
        if inputs:
            con = self._connect(snap)
            parts = [
                f"SELECT DISTINCT run, {'rank' if t != 'runs' else 'NULL::INTEGER AS rank'} "
                f"FROM read_parquet({_quote(str(bdir / f'{t}.parquet'))})"
                for t in inputs
            ]
            changed = con.execute(" UNION ".join(parts)).fetchall()
            whole_runs = {r for r, k in changed if k is None}
            ranks = {(r, k) for r, k in changed}
            for flat in FLAT_SOURCES:
                for e in flat_state.get(flat, []):
                    if any(r in whole_runs or (r, k) in ranks for r, k in e["keys"]):
                        stale.setdefault(flat, set()).add(e["id"])
        ids_from = [t for t in ("stat_rows", "tensor_stats") if t in tables]
        stats_entries = [e for e in flat_state.get("stats", []) if e["id"] not in stale.get("stats", set())]
        if ids_from and stats_entries:
            con = self._connect(snap)
            new_ids = " UNION ALL ".join(
                f"SELECT row_id FROM read_parquet({_quote(str(bdir / f'{t}.parquet'))}) "
                "WHERE row_id IS NOT NULL"
                for t in ids_from
            )
            by_path = {str(self.store.root / e["path"] / DATA_FILE): e["id"] for e in stats_entries}
            hit = con.execute(
                f"SELECT DISTINCT filename FROM read_parquet({_listing(list(by_path))}, filename = true) "
                f"WHERE row_id IN ({new_ids})"
            ).fetchall()
            stale.setdefault("stats", set()).update(by_path[f] for (f,) in hit)
        return stale

    def _merge_tiers(self, snap: dict, flat: str, run: str) -> list[str]:
        """Merge four files of one size tier of `run` into one, as long as a tier has four."""
        retired: list[str] = []
        entries = snap["flat"][flat]
        while True:
            by_tier: dict[int, list[dict]] = {}
            for e in entries:
                if e["run"] == run:
                    by_tier.setdefault(_tier(e["rows"]), []).append(e)
            full = next((group for _, group in sorted(by_tier.items()) if len(group) >= MERGE_FANIN), None)
            if full is None:
                return retired
            retired += self._replace(snap, flat, full[:MERGE_FANIN])
            entries = snap["flat"][flat]

    def _replace(self, snap: dict, flat: str, group: list[dict]) -> list[str]:
        """Merge `group` (entries of one run) into one file, in the place of the first."""
        merged = self._merge(snap, flat, group)  # (its write gave DuckDB's freed blocks back)
        entries = snap["flat"][flat]
        ids = {e["id"] for e in group}
        first = next(i for i, e in enumerate(entries) if e["id"] in ids)
        rest = [e for e in entries if e["id"] not in ids]
        snap["flat"][flat] = rest[:first] + ([merged] if merged else []) + rest[first:]
        return [e["path"] for e in group]

    def to_consolidate(self, snap: dict, run: str) -> dict[str, list[dict]]:
        """Per flat table, the entries of `run` that `consolidate` would merge (none when each
        table of the run is one final file)."""
        groups = {
            flat: [e for e in snap.get("flat", {}).get(flat, []) if e["run"] == run] for flat in FLAT_SOURCES
        }
        return {f: g for f, g in groups.items() if len(g) > 1 or any(e.get("interim") for e in g)}

    def consolidate(self, snap: dict, run: str) -> list[str]:
        """Merge every flat file of `run` into one per table, in DuckDB's row groups (the end of a
        one-shot ingest of a run a watcher wrote files of, or `dumpcat stats`; a single interim
        file of an earlier dumpcat is rewritten so)."""
        retired: list[str] = []
        groups = self.to_consolidate(snap, run)
        if sum(e["rows"] for g in groups.values() for e in g) >= _FRESH_MERGE_ROWS:
            # A big last merge starts on a new DuckDB: what the walk's statements left allocated in
            # this one (~30 MiB after 10^6 tensors) is not carried into the ingest's peak.
            self.close()
        self._final = True
        try:
            for flat, group in groups.items():
                retired += self._replace(snap, flat, group)
        finally:
            self._final = False
        return retired

    def batches_compacted(self, snap: dict, merged_ids: set[str], new_id: str) -> list[str]:
        """Batches `merged_ids` were compacted into `new_id`. Every flat file holding rows of them
        now comes from `new_id`, so they are merged into one (a file must hold all the rows of its
        sources: re-resolving one of several files naming `new_id` would duplicate the others')."""
        retired: list[str] = []
        for flat in FLAT_SOURCES:
            group = [e for e in snap.get("flat", {}).get(flat, []) if merged_ids & set(e["sources"])]
            for e in group:
                e["sources"] = sorted({new_id if s in merged_ids else s for s in e["sources"]})
            if len(group) > 1:
                retired += self._replace(snap, flat, group)
        return retired

    def build_all(self, snap: dict) -> list[str]:
        """Give a catalog written before flat files existed its flat files: each run's, once, from
        all its batches (`resolve_run`, as a one-shot ingest's end)."""
        snap["flat"] = {name: [] for name in FLAT_SOURCES}
        retired: list[str] = []
        for run in dict.fromkeys(b["run"] for b in snap["batches"]):
            retired += self.resolve_run(snap, run)
        return retired
