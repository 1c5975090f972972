"""`dumpcat compare RUN BASELINE`: compare the tensors of two runs of one catalog.

The pairs come from SQL (sql/queries/compare_pairs.sql: matched on rank, iteration, operator,
io, slot and occurrence, through an optional name mapping; pairs already compared are left out).
Their metrics are computed from the tensor data by `ingest.compare_metrics.compare_jobs` in helper
processes, one streaming pass per pair (or, with `spark`, in Spark tasks: catalog/spark/jobs.py),
and committed to the `comparisons` table in batches, so a killed compare keeps what it committed
and a re-run continues from there.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ingest.helper_pool import resolve_workers, run_ordered
from ingest.pipeline import now
from ingest.progress import phase_hook, total_hook
from ingest.storage.schema import COMPARISONS
from ingest.storage.store import CatalogStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_COMMIT_PAIRS = 20_000  # pairs per committed batch: what a killed compare can lose
_METRICS = (
    "cosine", "max_abs_err", "max_rel_err", "mean_abs_err", "rmse", "rel_euclidean", "kl_div", "acc_rel_err",
    "err_ratio_1e3", "err_ratio_5e3",
)  # fmt: skip
_CONTEXT = (
    "rank", "graph_id", "iteration", "exec_index", "timestamp_us", "occurrence", "op_type", "op_name", "io",
    "slot", "row_id", "baseline_row_id", "dtype", "baseline_dtype", "shape", "baseline_shape",
)  # fmt: skip


class CompareError(ValueError):
    """The comparison cannot start (unknown run, a bad mapping file); the message says why."""


@dataclass
class CompareSummary:
    run: str
    baseline: str
    pairs: int = 0  # rows added to `comparisons` by this call
    statuses: Counter = field(default_factory=Counter)
    bytes_compared: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        parts = ", ".join(f"{n:,} {s}" for s, n in sorted(self.statuses.items(), key=lambda kv: -kv[1]))
        return (
            f"compared {self.run!r} with {self.baseline!r}: {self.pairs:,} new pairs"
            + (f" ({parts})" if parts else "")
            + f" in {self.seconds:.2f} s"
        )


def compare_runs(
    catalog,
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
    """Compare `run` with `baseline` in `catalog` (a `catalog.Catalog`) and commit the results;
    `spark` (a SparkSession or a master URL) computes the metrics in Spark tasks instead."""
    import time

    from ingest.compare_metrics import PairJob, compare_jobs, pair_batches

    started = time.perf_counter()
    phase, total = phase_hook(on_progress), total_hook(on_progress)  # ingest/progress.py
    with catalog.cursor() as cur:  # the mapping is a TEMP table: this cursor's own
        runs = {r[0] for r in cur.execute("SELECT run FROM runs").fetchall()}
        for name in (run, baseline):
            if name not in runs:
                known = ", ".join(sorted(runs)) or "none"
                raise CompareError(f"run {name!r} is not in the catalog (runs: {known})")
        if run == baseline:
            raise CompareError("a run compared with itself: give two different runs")
        if unreadable := catalog.unreadable_parts():  # its tensors would be committed as unmatched pairs
            raise CompareError(f"not compared while part of the catalog is unreadable: {unreadable[0]}")
        _register_mapping(cur, mapping)
        from catalog.views import query_text

        phase("pairing")
        pairs = cur.sql(
            query_text("compare_pairs"),
            params={"run": run, "baseline": baseline, "iterations": iterations, "ranks": ranks},
        ).to_arrow_table()
    summary = CompareSummary(run, baseline)
    store = CatalogStore(catalog.path)
    n = pairs.num_rows
    total(n)
    if n:
        phase("comparing")
        columns = {name: pairs.column(name).to_pylist() for name in pairs.column_names}

        def side(i: int, prefix: str) -> tuple | None:
            path = columns[prefix + "path"][i]
            if path is None:
                return None
            return (
                path, columns[prefix + "data_offset"][i], columns[prefix + "stored_dtype"][i],
                tuple(columns["shape" if not prefix else "baseline_shape"][i] or ()),
                columns[prefix + "format"][i], columns[prefix + "host_shape"][i],
            )  # fmt: skip

        def batches() -> Iterator[list]:
            # at most 256 pairs or 64 MB of tensor data per helper task (big pairs spread over workers)
            return pair_batches(PairJob(i, side(i, ""), side(i, "baseline_")) for i in range(n))

        workers_n = resolve_workers(workers)
        if spark is not None:
            from catalog.spark.jobs import compare_on_spark

            results = compare_on_spark(spark, [job for batch in batches() for job in batch])
        elif workers_n > 1:
            results = run_ordered("ingest.compare_metrics:compare_jobs", batches(), workers_n - 1)
        else:
            results = (compare_jobs(b) for b in batches())
        done: list[tuple[int, object]] = []
        with store.writer_lock():
            for result in results:
                done.extend(result)
                if on_progress is not None:
                    on_progress(len(result))
                if len(done) >= _COMMIT_PAIRS:
                    _commit(store, run, baseline, columns, done, summary, phase)
                    phase("comparing")
                    done = []
            _commit(store, run, baseline, columns, done, summary, phase)
    catalog.refresh()
    summary.seconds = time.perf_counter() - started
    return summary


def _commit(
    store: CatalogStore, run: str, baseline: str, columns: dict, done: list, summary,
    phase: Callable[[str], None],
) -> None:  # fmt: skip
    if not done:
        return
    rows = {name: [] for name in COMPARISONS.names}
    at = now()
    for index, metrics in done:
        rows["run"].append(run)
        rows["baseline_run"].append(baseline)
        for name in _CONTEXT:
            rows[name].append(columns[name][index])
        rows["numel"].append(metrics.numel)
        for name in _METRICS:
            rows[name].append(getattr(metrics, name))
        rows["status"].append(metrics.status)
        rows["compared_at"].append(at)
        summary.statuses[metrics.status] += 1
    table = pa.Table.from_arrays([pa.array(rows[f.name], f.type) for f in COMPARISONS], schema=COMPARISONS)
    store.commit_batch(run, {"comparisons": table}, on_phase=phase)
    summary.pairs += table.num_rows


def _register_mapping(con, mapping: str | os.PathLike | None) -> None:
    """`compare_mapping(op_name, baseline_op_name)` on the cursor `con`: the user's CSV, or an empty
    table."""
    if mapping is None:
        con.execute("CREATE TEMP TABLE compare_mapping (op_name VARCHAR, baseline_op_name VARCHAR)")
        return
    path = Path(mapping)
    if not path.is_file():
        raise CompareError(f"mapping file {path} does not exist")
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"op_name", "baseline_op_name"} <= set(reader.fieldnames):
            raise CompareError(f"{path}: a mapping CSV has the columns op_name and baseline_op_name")
        pairs = [(r["op_name"], r["baseline_op_name"]) for r in reader]
    con.execute("CREATE TEMP TABLE compare_mapping (op_name VARCHAR, baseline_op_name VARCHAR)")
    if pairs:
        con.executemany("INSERT INTO compare_mapping VALUES (?, ?)", pairs)
