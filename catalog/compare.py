"""`dumpcat compare RUN BASELINE`: compare the tensors of two runs of one catalog.

The pairs come from SQL (sql/queries/compare_pairs.sql: matched on rank, iteration, operator,
io, slot and occurrence, through an optional name mapping; pairs already compared are left out).
Their metrics are computed from the tensor data by `ingest.compare_metrics.compare_table` in threads
of this process (the C kernel without the GIL) and, for pairs the kernel does not read, helper
processes, a task of a few MB of pairs as columns at a time (or, with `spark`, in Spark tasks:
catalog/spark/jobs.py), and committed to the `comparisons` table in batches, so a killed compare keeps
what it committed and a re-run continues from there.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ingest.helper_pool import resolve_workers
from ingest.pipeline import now
from ingest.progress import phase_hook, total_hook
from ingest.storage.schema import COMPARISONS
from ingest.storage.store import CatalogStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.compare_metrics import MetricColumns

_COMMIT_PAIRS = 20_000  # pairs per committed batch: what a killed compare can lose
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
        from ingest.compare_metrics import BATCH_TASK_PAIRS, compare_table, metric_columns, pair_jobs

        workers_n = resolve_workers(workers)
        if spark is not None:
            from catalog.spark.jobs import compare_on_spark

            jobs = pair_jobs(pairs, np.arange(n))
            results = (metric_columns(r) for r in compare_on_spark(spark, jobs))
        else:
            # tasks of a few MB of pairs as columns (ingest.compare_metrics.plan_batches), the results
            # as columns: no Python object per pair on the way
            # (a task never holds more pairs than a commit)
            results = compare_table(pairs, workers_n, task_pairs=min(BATCH_TASK_PAIRS, _COMMIT_PAIRS))
        done: list[MetricColumns] = []
        count = 0
        with store.writer_lock():
            for result in results:
                done.append(result)
                count += len(result.key)
                if on_progress is not None:
                    on_progress(len(result.key))
                if count >= _COMMIT_PAIRS:
                    _commit(store, run, baseline, pairs, done, summary, phase)
                    phase("comparing")
                    done, count = [], 0
            _commit(store, run, baseline, pairs, done, summary, phase)
    catalog.refresh()
    summary.seconds = time.perf_counter() - started
    return summary


def _commit(
    store: CatalogStore, run: str, baseline: str, pairs: pa.Table, done: list[MetricColumns], summary,
    phase: Callable[[str], None],
) -> None:  # fmt: skip
    from ingest.compare_metrics import METRIC_FIELDS, STATUSES, MetricColumns

    if not done:
        return
    res = MetricColumns.concat(done)
    k = len(res.key)
    if not k:
        return
    order = np.argsort(res.key, kind="stable")  # the pairs' order (a task lists its kernel pairs first)
    res = MetricColumns(*(a[order] for a in res))
    context = pairs.take(pa.array(res.key))
    at = pa.scalar(now(), COMPARISONS.field("compared_at").type)
    columns: dict[str, pa.Array] = {
        "run": pa.repeat(pa.scalar(run, pa.string()), k),
        "baseline_run": pa.repeat(pa.scalar(baseline, pa.string()), k),
        "numel": pa.array(res.numel, pa.int64(), mask=res.numel < 0),
        "status": pa.array(STATUSES, pa.string()).take(pa.array(res.status)),
        "compared_at": pa.repeat(at, k),
    }
    for name in _CONTEXT:
        columns[name] = context.column(name)
    for j, name in enumerate(METRIC_FIELDS):
        columns[name] = pa.array(np.ascontiguousarray(res.metrics[:, j]), pa.float64(), from_pandas=True)
    table = pa.Table.from_arrays([columns[f.name].cast(f.type) for f in COMPARISONS], schema=COMPARISONS)
    codes, first, counts = np.unique(res.status, return_index=True, return_counts=True)
    for i in np.argsort(first).tolist():  # in the pairs' order, as the summary line has always listed ties
        summary.statuses[STATUSES[int(codes[i])]] += int(counts[i])
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
