"""`dumpcat stats`: statistics from tensor data for the cataloged tensors that have none yet (a run
ingested with `--no-stats`, or whose statistics were left for a bigger machine), committed as
catalog batches: the `tensor_stats` rows `dumpcat ingest --stats` would have written.

Which tensors: `sql/queries/stats_todo.sql`, per writer's shard (a tensor's statistics go to the
shard that holds it, where its rank's operators resolve them). The rows are made by
`computed_stats_rows` (ingest/statistics/rows.py), as ingest's are; a tensor whose data cannot be
read gets the same `ingest_errors` row as at ingest. Locally the statistics are computed by this
process and helper processes (`--workers`, as ingest does); with `spark` each dump directory is a
Spark task (catalog/spark/jobs.py). Either way batches are committed as results come, so a killed
run keeps what it committed and the next one computes the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from catalog.spark.jobs import check_master_url, pack_tasks
from catalog.views import DUCKDB_CONFIG, query_text
from ingest.helper_pool import resolve_workers
from ingest.progress import phase_hook, total_hook
from ingest.statistics.rows import STATS_INPUT_COLUMNS, computed_stats_rows
from ingest.storage.sql_views import define_raw_view
from ingest.storage.store import SNAPSHOT, CatalogError, CatalogStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from catalog.api import Catalog

__all__ = ["RunStats", "StatsError", "StatsSummary", "compute_missing_stats"]

# Tensors per committed batch (ingest's batch size): what a killed run can lose.
_COMMIT_ROWS = 50_000
# Spark tasks: at most this many tensors / bytes of tensor data (task_bounds: fewer on small runs).
_TASK_MAX_TENSORS = 2_000
_TASK_MIN_TENSORS = 32
_TASK_MAX_BYTES = 256 << 20
_READ_ROWS = 8_192
# The columns of a `tensors` row that statistics need: the keys `tensor_stats` repeats, and where
# the data is.
_TODO_COLUMNS = list(STATS_INPUT_COLUMNS)


class StatsError(ValueError):
    """The statistics cannot be computed as asked (an unknown run); the message says why."""


@dataclass
class RunStats:
    todo: int = 0  # tensors without statistics when the call started
    computed: int = 0
    errors: int = 0  # tensors whose data could not be read (ingest_errors rows)


@dataclass
class StatsSummary:
    """What `Catalog.compute_stats` did, per run."""

    runs: dict[str, RunStats] = field(default_factory=dict)
    batches: int = 0
    tasks: int = 0  # Spark tasks (0 when computed locally)
    seconds: float = 0.0
    where: str = "local"

    @property
    def computed(self) -> int:
        return sum(r.computed for r in self.runs.values())

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.runs.values())

    def lines(self) -> list[str]:
        """One line per run: what it lacked, and what was done."""
        out = []
        for run, r in self.runs.items():
            done = f"{r.todo:,} tensors without statistics, {r.computed:,} computed, {r.errors:,} errors"
            out.append(f"run {run!r}: {done if r.todo else 'nothing to compute'}")
        return out

    def line(self) -> str:
        """The commits, the time and where the work ran."""
        batches = f"{self.batches} batch" + ("" if self.batches == 1 else "es")
        return f"committed {batches} in {self.seconds:.2f} s ({self.where})"


def _shards(store: CatalogStore, run: str | None) -> list[CatalogStore]:
    """The default shard and each named shard (of `run`, when given)."""
    named = [store.shard(e["run"], e["writer"]) for e in store.shards() if run is None or e["run"] == run]
    return [store, *named]


def _directories(reader: pa.RecordBatchReader) -> Iterator[tuple[str, pa.Table, list[int]]]:
    """The work list (ordered by run and directory) as one table per (run, directory), with the
    data size of each tensor."""
    held: list[pa.RecordBatch] = []
    key: tuple[str, str] | None = None

    def done() -> tuple[str, pa.Table, list[int]]:
        table = pa.Table.from_batches(held)
        sizes = [n or 0 for n in table.column("nbytes").to_pylist()]
        return table.column("run")[0].as_py(), table.select(_TODO_COLUMNS), sizes

    for batch in reader:
        runs, dirs = batch.column("run").to_pylist(), batch.column("dir").to_pylist()
        start = 0
        for i in range(1, batch.num_rows + 1):
            if i < batch.num_rows and (runs[i], dirs[i]) == (runs[start], dirs[start]):
                continue
            if (runs[start], dirs[start]) != key and held:
                yield done()
                held = []
            key = (runs[start], dirs[start])
            held.append(batch.slice(start, i - start))
            start = i
    if held:
        yield done()


class _Commits:
    """Rows waiting to be committed, per run; a run's are committed once there are enough."""

    def __init__(self, shard: CatalogStore, summary: StatsSummary, phase: Callable[[str], None]) -> None:
        self.shard = shard
        self.summary = summary
        self.phase = phase  # a commit names its phases, then the work goes on computing
        self.waiting: dict[str, tuple[list[pa.Table], list[pa.Table]]] = {}

    def add(self, run: str, stats: pa.Table, errors: pa.Table | None) -> None:
        s = self.summary.runs.setdefault(run, RunStats())
        s.computed += stats.num_rows
        s.errors += 0 if errors is None else errors.num_rows
        tables, failed = self.waiting.setdefault(run, ([], []))
        tables.append(stats)
        if errors is not None:
            failed.append(errors)
        if sum(t.num_rows for t in tables) + sum(t.num_rows for t in failed) >= _COMMIT_ROWS:
            self.commit(run)
            self.phase("computing statistics")

    def commit(self, run: str) -> None:
        tables, failed = self.waiting.pop(run, ([], []))
        batch = {"tensor_stats": pa.concat_tables(tables)} if tables else {}
        if failed:
            batch["ingest_errors"] = pa.concat_tables(failed)
        if batch and self.shard.commit_batch(run, batch, on_phase=self.phase):
            self.summary.batches += 1

    def commit_all(self) -> None:
        for run in list(self.waiting):
            self.commit(run)


def compute_missing_stats(
    catalog: Catalog,
    run: str | None = None,
    *,
    spark: str | SparkSession | None = None,
    workers: int | None = None,
    md5: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> StatsSummary:
    """Compute and commit the statistics of every tensor of `run` (every run when None) that has
    none yet; see the module docstring. `spark` is a SparkSession or a master URL."""
    started = time.perf_counter()
    if isinstance(spark, str):
        check_master_url(spark)  # before any work: with nothing to do no session is started
    catalog.refresh()
    with catalog.cursor() as cur:
        runs = sorted(r[0] for r in cur.execute("SELECT run FROM runs").fetchall())
    if run is not None and run not in runs:
        raise StatsError(f"run {run!r} is not in the catalog (runs: {', '.join(runs) or 'none'})")
    summary = StatsSummary(runs={r: RunStats() for r in ([run] if run is not None else runs)})
    summary.where = f"local, {resolve_workers(workers)} workers" if spark is None else "Spark"
    progress = on_progress or (lambda n: None)
    phase = phase_hook(on_progress)
    total = total_hook(on_progress)
    with contextlib.ExitStack() as stack:
        sessions: list[SparkSession] = []

        def session() -> SparkSession:
            """The Spark session, started when the first task is due (nothing to do: no Spark)."""
            if not sessions:
                from catalog.spark.jobs import spark_session

                sessions.append(stack.enter_context(spark_session(spark, "dumpcat stats")))  # type: ignore[arg-type]
                summary.where = f"Spark {sessions[0].sparkContext.master}"
            return sessions[0]

        unreadable = []
        for shard in _shards(catalog.store, run):
            if (shard.shard_dir / SNAPSHOT).exists():
                try:
                    shard.snapshot()
                except CatalogError as exc:  # left out of the views too (a warning said so)
                    unreadable.append(f"{shard.describe()}: {exc}")
                    continue
            spark_session = session if spark is not None else None
            _shard_stats(shard, run, summary, spark_session, workers, md5, progress, phase, total)
    if unreadable:
        raise StatsError(
            f"the statistics of the other shards are committed, but not those of {'; '.join(unreadable)}"
        )
    if spark is not None and summary.tasks:
        summary.where += f", {summary.tasks:,} tasks"
    catalog.refresh()
    summary.seconds = time.perf_counter() - started
    return summary


def _shard_stats(
    shard: CatalogStore,
    run: str | None,
    summary: StatsSummary,
    session: Callable[[], SparkSession] | None,
    workers: int | None,
    md5: bool,
    progress: Callable[[int], None],
    phase: Callable[[str], None],
    total: Callable[[int], None],
) -> None:
    """One shard's work, under its writer lock (taken first: the work list is then exact). A shard
    without tensors of the run is left alone, so that its writer (a watcher) is not waited for."""
    if not (shard.shard_dir / SNAPSHOT).exists() or not any(
        "tensors" in b["tables"] and run in (None, b["run"]) for b in shard.snapshot()["batches"]
    ):
        return
    with shard.writer_lock(wait=shard.writer is None):
        phase("listing tensors")
        snap = shard.snapshot()
        roots = {r: root for (_, r), root in shard.dump_roots(snap).items()}
        files, full = shard.table_files(snap), shard.full_schema_tables(snap)
        con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
        # the work list streams while the statistics are computed: no progress bar of DuckDB's
        con.execute("SET enable_progress_bar = false")
        try:
            for table in ("tensors", "tensor_stats", "stat_rows", "ingest_errors"):
                define_raw_view(con, table, files[table], full_schema=table in full)
            todo_sql = query_text("stats_todo")
            counts = con.execute(
                f"SELECT run, count(*), coalesce(sum(nbytes), 0) FROM ({todo_sql}) GROUP BY run", {"run": run}
            ).fetchall()
            if not counts:
                return
            for r, n, _ in counts:
                summary.runs.setdefault(r, RunStats()).todo += n
                if r not in roots:
                    raise CatalogError(f"run {r!r} has no dump root in {shard.describe()}")
            total(sum(s.todo for s in summary.runs.values()))  # this shard's and those done before
            phase("computing statistics")
            reader = con.sql(todo_sql, params={"run": run}).to_arrow_reader(_READ_ROWS)
            commits = _Commits(shard, summary, phase)
            if session is None:
                groups = ((r, table, sizes) for r, table, sizes in _directories(reader))
                for r, pieces in pack_tasks(groups, _COMMIT_ROWS, 1 << 62):
                    todo = pa.concat_tables(pieces)
                    rows = computed_stats_rows(
                        todo, r, roots[r], md5=md5, workers=workers, on_progress=progress
                    )
                    commits.add(r, *rows)
            else:
                _on_spark(session(), reader, counts, roots, md5, commits, summary, progress)
            commits.commit_all()
            for r, _, _ in counts:
                shard.finish_run(r, on_phase=phase)
        finally:
            con.close()


def _on_spark(
    spark: SparkSession,
    reader: pa.RecordBatchReader,
    counts: list[tuple],
    roots: dict[str, str],
    md5: bool,
    commits: _Commits,
    summary: StatsSummary,
    progress: Callable[[int], None],
) -> None:
    """The work list as Spark tasks, one dump directory each (small ones packed, huge ones cut)."""
    from catalog.spark.jobs import from_ipc, run_tasks, stats_partition, task_bounds, to_ipc

    items, nbytes = task_bounds(
        sum(c[1] for c in counts), sum(c[2] for c in counts), spark.sparkContext.defaultParallelism,
        max_items=_TASK_MAX_TENSORS, max_bytes=_TASK_MAX_BYTES, min_items=_TASK_MIN_TENSORS,
    )  # fmt: skip

    def tasks() -> Iterator[tuple[str, str, bool, bytes]]:
        for r, pieces in pack_tasks(_directories(reader), items, nbytes):
            summary.tasks += 1
            yield r, roots[r], md5, to_ipc(pa.concat_tables(pieces))

    for r, stats, errors, done in run_tasks(spark, stats_partition, tasks(), "dumpcat stats"):
        commits.add(r, from_ipc(stats), None if errors is None else from_ipc(errors))
        progress(done)
