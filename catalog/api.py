"""The Python client: `Catalog.open(path)`, `.sql(query)`, `.tensor(row_id)`, `.ingest(dump_dir)`.

A Catalog holds an in-memory DuckDB connection whose views point at the catalog's committed
parquet files. Before each query it checks (one stat call) whether a writer has committed a new
snapshot and, if so, points at that snapshot's views (catalog.views.use_views), so a long-lived
client always sees a consistent, current catalog without ever taking a lock.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb
import numpy as np
import pyarrow as pa

from catalog.guard import Refused as QueryRefused
from catalog.guard import classify_query
from catalog.result import Result
from catalog.tensor_index import TensorIndex, TensorLocation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from catalog.compare import CompareSummary
    from catalog.missing_stats import StatsSummary
    from catalog.report import ReportSummary
    from ingest.pipeline import IngestSummary
    from ingest.readers.base import Detection
from catalog.views import DUCKDB_CONFIG, VIEWS_ALIAS, query_text, use_views
from ingest.storage.store import CatalogError, CatalogStore

__all__ = ["Catalog", "CatalogError", "QueryRefused", "Result", "TensorNotFoundError"]


def wall_in(con: duckdb.DuckDBPyConnection, catalog_root: Path, spill: str) -> None:
    """Let `con` open the catalog's own files and nothing else, for good.

    `Catalog.sql` runs what a user (or a program fed by one) writes. The guard (catalog/guard.py)
    refuses file access in the text, but SQL nested in strings (`json_serialize_plan`, `query`)
    is parsed by the engine, not by the guard: the engine itself must not reach other files.
    DuckDB's external access is turned off with the catalog's folder (and a private spill folder)
    allowed, and the configuration locked so that no statement can turn it back on.
    """
    root = Path(catalog_root)
    allowed = {str(root) + "/", str(root.resolve()) + "/", spill + "/"}
    con.execute("SET temp_directory = ?", [spill])
    con.execute("SET allowed_directories = ?", [sorted(allowed)])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


class TensorNotFoundError(LookupError):
    """No tensor with this row id in the catalog."""


# A frame's name (`Catalog.sql(..., frames=)`): a plain identifier, so that the guard reads it as a
# table name and never as a file (`data.csv`), and it needs no quoting.
_FRAME_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _frame_object(name: str, frame: object) -> object:
    """What DuckDB registers for a frame: pandas and polars DataFrames and Arrow tables as they are
    (DuckDB scans them in place), anything else that speaks the Arrow C stream (a Result, a
    RecordBatchReader) as an Arrow table; anything else is refused with what is accepted."""
    module = type(frame).__module__.split(".")[0]
    kind = type(frame).__name__
    if isinstance(frame, pa.Table | pa.RecordBatch) or (module, kind) in (
        ("pandas", "DataFrame"),
        ("polars", "DataFrame"),
    ):
        return frame
    if isinstance(frame, Result):
        return frame.arrow()
    if hasattr(frame, "__arrow_c_stream__") and not isinstance(frame, type):
        return pa.table(frame)
    raise TypeError(
        f"frame {name!r} is a {type(frame).__module__}.{kind}: give a pandas or polars DataFrame, "
        "a pyarrow Table or RecordBatch, or an object with __arrow_c_stream__"
    )


def _row_id_array(row_ids: Iterable[int]) -> np.ndarray:
    """`Catalog.tensors`' row ids as int64s, or a clear error."""
    if isinstance(row_ids, str | bytes) or not isinstance(row_ids, Iterable):
        raise TypeError(f"row_ids must be a list of integers, not {type(row_ids).__name__}")
    if isinstance(row_ids, pa.ChunkedArray | pa.Array):
        row_ids = row_ids.to_pylist()
    values = list(row_ids.tolist() if isinstance(row_ids, np.ndarray) else row_ids)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int | np.integer)]
    if bad:
        raise TypeError(f"row ids are integers; got {bad[0]!r}")
    try:
        return np.array(values, np.int64)
    except OverflowError as exc:
        raise TensorNotFoundError(f"row ids are 64-bit integers: {exc}") from exc


def _read_file_tensors(
    path: str, tensors: list[tuple[int, TensorLocation]], layout: Literal["host", "device"]
) -> dict[int, np.ndarray]:
    """The tensors of one file (row id -> array, as `Catalog.tensor` reads them), the file opened
    and memory-mapped once for all of them."""
    import mmap

    from ingest.formats.tensor_data import TensorDataError, decode_tensor, is_plain, stored_nbytes
    from ingest.statistics.kernel import view_tensor

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
    except FileNotFoundError as exc:
        ids = ", ".join(str(i) for i, _ in tensors)
        which = f"tensors {ids} were" if len(tensors) > 1 else f"tensor {ids} was"
        raise TensorNotFoundError(f"{which} cataloged but the file is gone: {path}") from exc
    out = {}
    for row_id, loc in tensors:
        if is_plain(loc.stored_dtype, loc.format, loc.shape, loc.host_shape):
            out[row_id] = view_tensor(mapped, size, loc.data_offset, loc.stored_dtype, loc.shape)
            continue
        want = stored_nbytes(loc.stored_dtype, loc.shape)
        want = loc.nbytes if want is None else want
        if want is None:
            raise TensorDataError(f"stored dtype {loc.stored_dtype!r} needs the byte count")
        if size < loc.data_offset + want:
            raise TensorDataError(
                f"file has {size} bytes, data needs {want} bytes from offset {loc.data_offset}"
            )
        buf = memoryview(mapped)[loc.data_offset : loc.data_offset + want] if want else memoryview(b"")
        out[row_id] = decode_tensor(
            buf, loc.stored_dtype, loc.shape, loc.format, loc.host_shape, layout=layout
        )
    return out


class Catalog:
    """A dumpcat catalog directory, opened for queries (and ingest)."""

    def __init__(self, store: CatalogStore) -> None:
        self.store = store
        self.path = store.root
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.RLock()
        self._token: tuple | None = None
        self._files: dict[str, list[str]] = {}
        self._index = TensorIndex()
        self._flat_index: list[str] | None = None
        self._flat_files: dict[str, list[str]] | None = None
        self._views_token: tuple | None = None
        self._views_in_memory = False  # the views are defined in memory, not attached (use_views)
        # (shard, run) -> dump root: each writer's shard of a run has its own root
        self._roots: dict[tuple[str, str], str] | None = None
        self._shard_of: dict[str, str] = {}
        self._snap: dict = {}

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike, *, create: bool = False) -> Catalog:
        """Open an existing catalog (or create an empty one with create=True)."""
        return cls(CatalogStore(path, create=create))

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """The in-memory DuckDB, made on first use (`tensor` needs none: opening stays cheap)."""
        if self._connection is None:
            with self._lock:
                if self._connection is None:
                    con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
                    # Parquet files are never rewritten in place (a change is a new file), so their
                    # footers can be cached: a query over a few files costs what one over one does.
                    con.execute("SET parquet_metadata_cache = true")
                    spill = tempfile.mkdtemp(prefix="dumpcat-spill-")  # DuckDB's, when memory is short
                    weakref.finalize(self, shutil.rmtree, spill, ignore_errors=True)
                    wall_in(con, self.path, spill)
                    self._connection = con
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries ---------------------------------------------------------------------------

    def _sync(self) -> None:
        """Follow the snapshot (one stat call per shard when nothing changed): the live files'
        lists, over the union of the catalog's shards."""
        token = self.store.union_token()
        if token == self._token:
            return
        snap = self.store.union_snapshot()
        self._snap = snap
        self._files = self.store.table_files(snap)
        self._flat_index = self.store.flat_index_files(snap)
        self._flat_files = self.store.flat_files(snap)
        self._full_schema = self.store.full_schema_tables(snap)
        self._shard_of = self.store.file_shards(snap)
        self._roots = None
        self._token = token

    def refresh(self) -> None:
        """Redefine the views if a writer committed since the last query."""
        with self._lock:
            self._sync()
            if self._views_token != self._token:
                self._views_in_memory = use_views(
                    self._con, self.path, self._files, self._flat_files, self._full_schema,
                    follow=self._views_token is not None, in_memory=self._views_in_memory,
                )  # fmt: skip
                self._views_token = self._token

    def unreadable_parts(self) -> list[str]:
        """Parts of the catalog left out of its views because they could not be read (a damaged
        shard's snapshot), each in words; empty when every part is read."""
        with self._lock:
            self._sync()
            return list(self._snap.get("unreadable", []))

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB cursor over the current views (also after later refreshes); use one per thread."""
        self.refresh()
        cur = self._con.cursor()
        cur.execute(f"USE {VIEWS_ALIAS}")
        return cur

    def sql(
        self,
        query: str,
        params: list | tuple | dict | None = None,
        *,
        frames: Mapping[str, Any] | None = None,
    ) -> Result:
        """Run one query against the catalog's views and return the result (a `Result`: the
        `pyarrow.Table` of the answer, with `.df()`, `.pl()`, `.fetchall()` and an HTML view).

        The catalog is read-only: the statement must be a query allowed by the same policy as
        `dumpcat serve` (`catalog.guard`); anything else raises QueryRefused with the reason.
        `frames` ({name: DataFrame or Arrow table}) brings data of your own into this one query as
        named relations, to join with the views: `Catalog.cursor()` would too, but unguarded. A
        name must be an identifier and not one of the catalog's views.
        If a parquet file vanished under the query (a live ingest compacted and purged it after
        a new snapshot), the views are refreshed and the query runs once more.
        """
        text = classify_query(query)
        local = self._frames(frames) if frames else {}
        for attempt in (1, 2):
            cur = self.cursor()
            try:
                for name, frame in local.items():
                    cur.register(name, frame)  # a temporary view of this cursor only
                rel = cur.sql(text, params=params)
                return Result(rel.to_arrow_table() if rel is not None else pa.table({}))
            except duckdb.IOException:
                if attempt == 2 or self.store.union_token() == self._token:
                    raise
            finally:
                for name in local:
                    with contextlib.suppress(duckdb.Error):
                        cur.unregister(name)
                cur.close()
        raise AssertionError("unreachable")

    def _frames(self, frames: Mapping[str, Any]) -> dict[str, object]:
        """Check `Catalog.sql`'s frames: identifier names that no relation of the catalog has."""
        if not isinstance(frames, Mapping):
            raise TypeError(f"frames must be a dict of name -> DataFrame, not {type(frames).__name__}")
        taken = self._relation_names()
        out = {}
        for name, frame in frames.items():
            if not isinstance(name, str) or not _FRAME_NAME.fullmatch(name):
                raise ValueError(f"frame name {name!r} is not an identifier (letters, digits, _)")
            if name.lower() in taken:
                raise ValueError(
                    f"frame name {name!r} is a relation of the catalog (a view users query or one it "
                    "is built from): name the frame otherwise"
                )
            out[name] = _frame_object(name, frame)
        return out

    def _relation_names(self) -> frozenset[str]:
        """Lower-cased names of every table and view of the catalog's views database."""
        cur = self.cursor()
        try:
            rows = cur.execute(
                "SELECT DISTINCT lower(table_name) FROM information_schema.tables"
                " WHERE table_catalog = current_database()"
            ).fetchall()
        finally:
            cur.close()
        return frozenset(r[0] for r in rows) | {v.lower() for v in self.views()}

    def runs(self) -> Result:
        """One row per run: producer, ranks, steps, tensors (and their bytes), ingest errors,
        when it was first ingested and from where."""
        return self.sql(query_text("runs_summary"))

    def views(self) -> list[str]:
        """Names of the views users query."""
        from catalog.views import USER_VIEWS

        return list(USER_VIEWS)

    def where(
        self,
        file: str | None = None,
        line: int | None = None,
        code: str | None = None,
        *,
        exact: bool = False,
    ) -> Result:
        """Operators created by a source line (`file` + `line`, or `code`), with their tensors' row
        ids per iteration. `file` may be a path or its tail (`train.py`). `code` is a fragment of
        the line (case-sensitive; runs of white space match any white space), so the line's
        trailing comment need not be typed; `exact=True` asks for the whole line instead."""
        if line is None and code is None:
            raise ValueError("give a line number or the code of the line")
        if code is not None and not code.strip():
            raise ValueError("code is empty: give a fragment of the source line")
        params = {"file": file, "line": line, "code": code, "exact": bool(exact)}
        return self.sql(query_text("where"), params)

    def anomalies(self, run: str | None = None, *, by_graph: bool = False) -> Result:
        """The first anomaly of every step (`first_anomaly`: one row per run, rank and iteration),
        for every run or one; `by_graph=True` gives each kernel graph's own first anomaly instead
        (`first_anomaly_by_graph`), the steps in order and their graphs in execution order."""
        return self.sql(query_text("anomalies_by_graph" if by_graph else "anomalies"), {"run": run})

    def report(
        self, out: str | os.PathLike, run: str | None = None, *, against: str | None = None
    ) -> ReportSummary:
        """Write a self-contained HTML report of `run` (the only run when None) to `out`: summary,
        first anomaly of every step, heat map, trend lines, ingest errors, and with `against` the
        comparison with that baseline run (`compare` must have run). Raises
        `catalog.report.ReportError` when it cannot be made (unknown run, nothing compared, ...)."""
        from catalog.report import write_report

        return write_report(self, out, run, against)

    # -- tensors ---------------------------------------------------------------------------

    def locate(self, row_id: int) -> tuple[Path, TensorLocation]:
        """Absolute file path and layout of a tensor, or TensorNotFoundError.

        Needs no view: the snapshot names the memory-mapped location index, so the first call on
        a fresh Catalog costs a few milliseconds whatever the catalog's size."""
        with self._lock:
            self._sync()
            self._index.sync(self._files["tensors"], self._flat_index)
            found = self._index.find_with_source(int(row_id))
            if found is None:
                raise TensorNotFoundError(f"no tensor with row id {row_id} in catalog {self.path}")
            loc, source = found
            if self._roots is None:
                self._roots = self.store.dump_roots(self._snap)
            root = self._roots.get((self._shard_of.get(source, ""), loc.run))
        if root is None:
            raise CatalogError(f"run {loc.run!r} of row id {row_id} has no dump root in the catalog")
        return Path(root) / loc.rel_path, loc

    def tensor(self, row_id: int, *, layout: Literal["host", "device"] = "host") -> np.ndarray:
        """The tensor's data, memory-mapped read-only where the bytes are already the values.

        npy files: the dumped shape and stored dtype (MindSpore stores bfloat16 as float32 and int4
        as int8; the `dtype` column says the original one). Raw Ascend dumps: the values of the
        slot, decoded (bfloat16 and float8 as `ml_dtypes` arrays, int4 unpacked to int8) and, for a
        device format (NC1HWC0, FRACTAL_Z, ...), in the host layout (`host_shape`) unless
        `layout="device"` asks for the dumped layout (`shape`).
        """
        from ingest.formats.tensor_data import is_plain, read_tensor
        from ingest.statistics.kernel import open_tensor

        path, loc = self.locate(row_id)
        try:
            if is_plain(loc.stored_dtype, loc.format, loc.shape, loc.host_shape):
                return open_tensor(path, loc.data_offset, loc.stored_dtype, loc.shape)
            return read_tensor(
                path, loc.data_offset, loc.stored_dtype, loc.shape, loc.format, loc.host_shape,
                nbytes=loc.nbytes, layout=layout,
            )  # fmt: skip
        except FileNotFoundError as exc:
            raise TensorNotFoundError(f"tensor {row_id} was cataloged but its file is gone: {path}") from exc

    def tensors(
        self, row_ids: Iterable[int], *, layout: Literal["host", "device"] = "host"
    ) -> list[np.ndarray]:
        """Many tensors in one call, in the order of `row_ids` (what `tensor()` returns for each).

        One search of the location index for all the ids, and each file opened and memory-mapped
        once for all the tensors it holds (a raw Ascend dump file holds a whole operator's). Row
        ids the catalog does not have raise one TensorNotFoundError that names them. `row_ids` may
        be a list, a numpy array, or a pyarrow column (`cat.sql(...).column("row_id")`)."""
        ids = _row_id_array(row_ids)
        unique = np.unique(ids)
        with self._lock:
            self._sync()
            self._index.sync(self._files["tensors"], self._flat_index)
            found = self._index.find_many(unique)
            missing = [int(i) for i in unique.tolist() if int(i) not in found]
            if missing:
                shown = ", ".join(str(i) for i in missing[:10]) + (", ..." if len(missing) > 10 else "")
                raise TensorNotFoundError(
                    f"{len(missing)} of {len(unique)} row ids are not tensors of catalog {self.path}: {shown}"
                )
            if self._roots is None:
                self._roots = self.store.dump_roots(self._snap)
            where: dict[int, tuple[str, TensorLocation]] = {}
            for row_id, (loc, source) in found.items():
                root = self._roots.get((self._shard_of.get(source, ""), loc.run))
                if root is None:
                    raise CatalogError(f"run {loc.run!r} of row id {row_id} has no dump root in the catalog")
                where[row_id] = (os.path.join(root, loc.rel_path), loc)  # (pathlib costs 10 us a path)
        by_file: dict[str, list[int]] = {}
        for row_id, (path, _) in where.items():
            by_file.setdefault(path, []).append(row_id)
        arrays: dict[int, np.ndarray] = {}
        for path, file_ids in by_file.items():
            arrays.update(_read_file_tensors(path, [(i, where[i][1]) for i in file_ids], layout))
        return [arrays[i] for i in ids.tolist()]

    # -- ingest ----------------------------------------------------------------------------

    def compare(
        self,
        run: str,
        baseline: str,
        *,
        iterations: list[int] | None = None,
        ranks: list[int] | None = None,
        mapping: str | os.PathLike | None = None,
        workers: int | None = None,
        on_progress: Callable[[int], None] | None = None,
        spark: str | SparkSession | None = None,
    ) -> CompareSummary:
        """Compare the tensors of `run` with those of `baseline` (both in this catalog) and add the
        results to `comparisons`; pairs compared before are not compared again. `mapping` is a CSV
        (`op_name,baseline_op_name`) for operators whose names differ between the runs. `spark` (a
        SparkSession, or a master URL such as `local[4]` or `spark://host:7077`) computes the
        metrics as Spark tasks, one dump directory each (raises `catalog.spark.jobs.SparkJobError`
        when Spark cannot)."""
        from catalog.compare import compare_runs

        self.refresh()
        with self._lock:
            return compare_runs(
                self, run, baseline, iterations=iterations, ranks=ranks, mapping=mapping, workers=workers,
                on_progress=on_progress, spark=spark,
            )  # fmt: skip

    def compute_stats(
        self,
        run: str | None = None,
        *,
        spark: str | SparkSession | None = None,
        workers: int | None = None,
        md5: bool = False,
        on_progress: Callable[[int], None] | None = None,
    ) -> StatsSummary:
        """Compute statistics from the tensor data of every tensor of `run` (every run when None)
        that has neither a producer's statistics nor computed ones (a run ingested with
        `compute_stats=False`), and commit them as `dumpcat ingest` would have. Resumable: a killed
        call keeps what it committed. Locally on `workers` processes, or as Spark tasks with `spark`
        (a SparkSession or a master URL). Raises `catalog.missing_stats.StatsError` for an unknown run."""
        from catalog.missing_stats import compute_missing_stats

        with self._lock:
            return compute_missing_stats(
                self, run, spark=spark, workers=workers, md5=md5, on_progress=on_progress
            )

    def ingest(
        self,
        dump_dir: str | os.PathLike,
        run: str | None = None,
        *,
        producer: str | None = None,
        compute_stats: bool = True,
        md5: bool = False,
        workers: int | None = None,
        on_progress: Callable[[int], None] | None = None,
        writer: str | None = None,
        follow_symlinks: bool = False,
        max_metadata_size: str | int | None = None,
        detection: Detection | None = None,
    ) -> IngestSummary:
        """Ingest (or incrementally re-ingest) a dump tree into this catalog. Its producer is
        detected (`summary.detected` says what was found) unless `producer` names a reader, or
        `detection` is the claim `ingest.pipeline.detect_dump(dump_dir)` made already.
        `writer` names the run's shard to write (one per host of a multi-host run). Symlinks out
        of the dump root are error rows unless `follow_symlinks`. `max_metadata_size` caps the
        metadata files read whole (`"1GiB"` for every kind, or `"graph=1GiB,json=128MiB"`; default
        DUMPCAT_MAX_METADATA_SIZE, else ingest.formats.limits' defaults): a bigger file is an
        ingest_errors row."""
        from ingest.pipeline import ingest_dump  # here: queries never need the ingest's imports

        summary = ingest_dump(
            self.path, dump_dir, run, producer=producer, compute_stats=compute_stats, md5=md5,
            workers=workers, on_progress=on_progress, writer=writer, follow_symlinks=follow_symlinks,
            max_metadata_size=max_metadata_size, detection=detection,
        )  # fmt: skip
        return summary

    def __repr__(self) -> str:
        return f"Catalog({str(self.path)!r})"

    def _repr_html_(self) -> str:
        """Jupyter's view of a catalog: its path and one row per run (`runs()`)."""
        import html

        runs = self.runs()
        tensors = sum(n or 0 for n in runs.column("tensors").to_pylist())
        head = (
            f"<p><b>dumpcat catalog</b> <code>{html.escape(str(self.path))}</code>: "
            f"{runs.num_rows:,} run{'s' * (runs.num_rows != 1)}, {tensors:,} tensors</p>"
        )
        return head + (runs._repr_html_() if runs.num_rows else "")
