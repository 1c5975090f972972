"""`dumpcat stats` locally vs as Spark tasks (catalog/spark/jobs.py) on one machine.

A synthetic MindSpore tree (bench/synth.py, no statistic.csv) is ingested once with statistics off;
then, on fresh copies of that catalog, alternating, best of ``--repeat``:

  a. ``Catalog.compute_stats(workers=W)``: this process and W - 1 helper processes, as ingest;
  b. ``Catalog.compute_stats(spark=session)`` on a ``local[W]`` session started before timing (its
     start-up, ~10 s, is reported on its own line): one Spark task per iteration directory (or
     per 2,000 tensors), results committed by the driver.

Both must leave the same `stats` rows (checked). Reported: tensors/s, MB/s of tensor data, and
Spark's time over the local one, for small tensors (per-tensor cost) and big ones (bytes).
On one machine Spark can only add cost (a JVM, Python workers, a job per task, Arrow IPC both
ways); what the figures show is how much, i.e. what a cluster must win back.

    python bench/bench_spark_jobs.py                    # small: 20,000 tensors; big: 400 x 2 MB
    python bench/bench_spark_jobs.py --small 4000 --big 0 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
import synth  # noqa: E402

from catalog import Catalog  # noqa: E402
from ingest.pipeline import ingest_dump  # noqa: E402


def _rows(path: Path) -> list[tuple]:
    with Catalog.open(path) as cat:
        table = cat.sql("SELECT row_id, max, min, avg, count, nan_count, l2norm FROM stats ORDER BY row_id")
    return [tuple("nan" if v != v else v for v in row.values()) for row in table.to_pylist()]


def measure(work: Path, name: str, tensors: int, size_bytes: int | None, args, spark) -> list[str]:
    tree = work / f"{name}_tree"
    synth.generate(tree, tensors, iterations=args.iterations, statistic_csv=False, size_bytes=size_bytes)
    base = work / f"{name}_base.cat"
    ingest_dump(base, tree, run=name, compute_stats=False)
    with Catalog.open(base) as cat:
        n, nbytes = cat.sql("SELECT count(*), sum(nbytes)::BIGINT FROM tensors").to_pylist()[0].values()
    best = {"local": float("inf"), "spark": float("inf")}
    results = {}
    for _ in range(args.repeat):
        for how in ("local", "spark"):
            path = work / f"{name}_{how}.cat"
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(base, path)
            with Catalog.open(path) as cat:
                started = time.perf_counter()
                if how == "local":
                    s = cat.compute_stats(workers=args.workers)
                else:
                    s = cat.compute_stats(spark=spark)
                best[how] = min(best[how], time.perf_counter() - started)
                assert s.computed == n and s.errors == 0, s
                if how == "spark":
                    print(f"  {name}: {s.tasks} Spark tasks", flush=True)
            results[how] = _rows(path)
    assert results["local"] == results["spark"], "Spark and local statistics differ"
    out = []
    for how in ("local", "spark"):
        t = best[how]
        out.append(
            f"| {name} | {n:,} x {nbytes / n / 1e3:,.1f} kB | {how} | {t:.2f} s | {n / t:,.0f} | "
            f"{nbytes / t / 1e6:,.0f} | {t / best['local']:.2f}x |"
        )
        print(out[-1], flush=True)
    emit.summary(
        f"`dumpcat stats` as Spark tasks (local[{args.workers}]) vs locally, {n:,} {name} tensors "
        "(session start not included)",
        "",
        f"{best['spark'] / best['local']:.2f}x the local time (same rows)",
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=int, default=20_000, help="small tensors (8-256 float32 elements)")
    p.add_argument("--big", type=int, default=400, help="big tensors (--big-bytes each); 0: skip")
    p.add_argument("--big-bytes", type=int, default=2 << 20)
    p.add_argument("--iterations", type=int, default=10, help="iteration directories (= Spark tasks)")
    p.add_argument("--workers", type=int, default=2, help="local processes, and Spark's local[N]")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", default=None)
    args = p.parse_args()

    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.perf_counter()
    spark = (
        SparkSession.builder.master(f"local[{args.workers}]")
        .appName("bench_spark_jobs")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(4).count()  # the first job starts the Python workers' JVM side
    startup = time.perf_counter() - started
    work = Path(tempfile.mkdtemp(prefix="bench_spark_jobs_", dir=args.workdir))
    rows = [
        "| tree | tensors | where | time (best) | tensors/s | MB/s | vs local |",
        "|---|---|---|---|---|---|---|",
    ]
    try:
        if args.small:
            rows += measure(work, "small", args.small, None, args, spark)
        if args.big:
            rows += measure(work, "big", args.big, args.big_bytes, args, spark)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    emit.report_follows()
    print(
        f"Spark {spark.version} `local[{args.workers}]`; session start (not timed) {startup:.1f} s. "
        "Both sides leave the same `stats` rows (checked)."
    )
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
