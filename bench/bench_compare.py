"""Run-vs-baseline tensor comparison (ingest.compare_metrics) against a naive numpy loop.

Pairs of float32 npy files (``--pairs`` x 2 x ``--mb`` MB, about 2 GB by default) are written to a
temp dir and read once (warm page cache). Then, interleaved, best of ``--repeat`` (5):

  a. what ``dumpcat compare`` does once it has its pairs: the pairs as the Arrow table
     sql/queries/compare_pairs.sql gives it, through ``compare_metrics.compare_table`` with
     ``--workers`` threads (``plan_batches``: tasks of a few MB of pairs as columns; the tasks with
     ``compare_jobs`` pairs, here the 16 MB ones, go from the threads to helper processes, started
     before timing), the metrics back as columns (``MetricColumns``); the SQL pairing before and the
     commit of the rows after are not timed;
  b. a naive loop in one process (one BLAS thread): ``np.load`` both files, float64 copies,
     whole-array numpy for the same ten metrics (cosine, max abs, max rel, mean abs, RMSE, rel.
     Euclidean, KL, acc. rel. error, the two error ratios);
  c. the pair-by-pair path it replaced, still Spark's: ``compare_jobs`` on ``PairJob`` lists
     (``pair_batches``), ``PairMetrics`` back, through the same helpers (the same numbers, checked);
  d. the same tasks as (a) through helper processes, the caller computing too (``helper_pool.
     run_ordered``: how ``compare_table`` ran them before it used threads; the same numbers, checked).

Reported: GB/s of tensor pairs (bytes of both sides) and the ratios; (a), (c) and (d) take turns going
first. Also (a)'s CPU time (this process's threads and the helpers', /proc schedstat) as the GB/s
it would reach on idle cores: on this shared machine the wall clock shares the cores with others.
Targets: >= 1 GB/s on 2 cores and >= 5x the naive loop. Both results are checked to agree (the
worst relative disagreement is reported; KL of near-identical tensors is ill-conditioned in the
naive form, see tests for the 1e-9 checks).

    python bench/bench_compare.py                       # 4 KB, 64 KB, 1 MB and 16 MB pairs
    python bench/bench_compare.py --scale 0.1 --repeat 1  # quick
    python bench/bench_compare.py --pairs 200 --mb 5      # one size
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# One BLAS thread for the naive loop (set before numpy loads): a multithreaded BLAS on this shared
# machine sometimes made it 3-4x slower, which would flatter the speed-up. dumpcat's kernel uses no BLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
import pyarrow as pa  # noqa: E402

from ingest import helper_pool  # noqa: E402
from ingest.compare_metrics import (  # noqa: E402
    METRIC_FIELDS,
    MetricColumns,
    PairJob,
    compare_backend,
    compare_table,
    pair_batches,
    plan_batches,
)

GB = 1e9
EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)


def write_pairs(root: Path, pairs: int, mb: float, seed: int = 0) -> list[tuple[Path, Path]]:
    """``pairs`` (run, baseline) float32 npy files of ``mb`` MB each, a run ~1e-3 off its baseline."""
    n = int(mb * 1e6) // 4
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(n).astype(np.float32)
    noise = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    out = []
    for i in range(pairs):
        y = np.roll(base, i * 7919) * np.float32(1 + i / pairs)
        y[:: 1000 + i] = 0  # some exact zeros on the baseline side (eps rule)
        x = y + np.roll(noise, i * 104729) * np.abs(y)
        px, py = root / f"run_{i}.npy", root / f"base_{i}.npy"
        np.save(px, x)
        np.save(py, y)
        out.append((px, py))
    return out


def side(path: Path) -> tuple:
    a = np.load(path, mmap_mode="r")
    return (str(path), int(a.offset), a.dtype.name, tuple(a.shape), None, None)


def pairs_table(files: list[tuple[Path, Path]]) -> pa.Table:
    """The pairs as `dumpcat compare` gets them from sql/queries/compare_pairs.sql (the columns
    `compare_table` reads), so that the benchmark times what the command does with them."""
    cols: dict[str, pa.Array] = {}
    for prefix, k in (("", 0), ("baseline_", 1)):
        sides = [side(pair[k]) for pair in files]
        cols[prefix + "path"] = pa.array([s[0] for s in sides], pa.string())
        cols[prefix + "data_offset"] = pa.array([s[1] for s in sides], pa.int64())
        cols[prefix + "stored_dtype"] = pa.array([s[2] for s in sides], pa.string())
        cols[prefix + "shape"] = pa.array([list(s[3]) for s in sides], pa.list_(pa.int64()))
        cols[prefix + "format"] = pa.array([s[4] for s in sides], pa.string())
        cols[prefix + "host_shape"] = pa.array([s[5] for s in sides], pa.list_(pa.int64()))
    return pa.table(cols)


def naive(px: Path, py: Path) -> dict[str, float | None]:
    """Whole-array float64 numpy, the way a script would do it (flattened: `np.dot` of N-d arrays
    is a tensor product, not the dot product the cosine needs)."""
    n, b = np.load(px).ravel(), np.load(py).ravel()
    x, y = n.astype(np.float64), b.astype(np.float64)
    rt = np.result_type(n, b, np.float32)
    eps = np.finfo(rt).eps
    zero = b == 0
    re = np.abs((np.where(zero, n + eps, n) - np.where(zero, b + eps, b)) / np.where(zero, b + eps, b))
    d = x - y
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    big = np.abs(y) > EPS64

    def pdf(v: np.ndarray) -> np.ndarray:
        u = np.maximum((v - v.min()) / (v.max() - v.min()), EPS32)
        return u / u.sum()

    p, q = pdf(x), pdf(y)
    size = x.size
    return {
        "cosine": float(np.dot(x, y) / (nx * ny)),
        "max_abs_err": float(np.max(np.abs(d))),
        "max_rel_err": float(np.max(re)),
        "mean_abs_err": float(np.mean(np.abs(d))),
        "rmse": float(np.sqrt(np.mean(d**2))),
        "rel_euclidean": float(np.sqrt(np.sum(d**2) / np.sum(y**2))),
        "kl_div": float(np.sum(p * np.log(p / q))),
        "acc_rel_err": float(np.sum(np.abs(d[big]) / np.abs(y[big]))),
        "err_ratio_1e3": float(np.sum(re < 0.001) / size),
        "err_ratio_5e3": float(np.sum(re < 0.005) / size),
    }


# The sizes issue 35 names (4 KB to 16 MB): (MB per tensor, pairs), about 32-1,300 MB of pairs each.
SIZES = ((0.004, 4000), (0.064, 4000), (1.0, 400), (16.0, 40))


def measure(pairs: int, mb: float, repeat: int, workers: int, batch_mb: int, workdir: str | None) -> dict:
    """One size: write the pairs, warm the page cache, time compare_table and the naive loop in turns
    (best of `repeat`), check that they agree; the figures."""
    root = Path(tempfile.mkdtemp(prefix="bench_compare_", dir=workdir))
    try:
        files = write_pairs(root, pairs, mb)
        total = sum(px.stat().st_size - 128 + py.stat().st_size - 128 for px, py in files)
        for px, py in files:  # warm the page cache
            px.read_bytes()
            py.read_bytes()
        print(f"wrote {pairs} pairs of {mb:g} MB, {total / GB:.2f} GB of tensor data", flush=True)
        table = pairs_table(files)
        plan = {"task_bytes": batch_mb << 20} if batch_mb else {}
        tasks = []

        def ours() -> MetricColumns:
            parts = list(compare_table(table, workers, **plan))
            tasks.append(len(parts))
            return MetricColumns.concat(parts)

        jobs = [PairJob(i, side(px), side(py)) for i, (px, py) in enumerate(files)]
        job_batches = list(pair_batches(jobs))

        def via_helpers() -> MetricColumns:
            batches = plan_batches(table, workers=workers, **plan)
            return MetricColumns.concat(
                list(helper_pool.run_ordered("ingest.compare_metrics:compare_batch", batches, workers - 1))
            )

        def pair_by_pair() -> list:
            out = []
            for res in helper_pool.run_ordered(
                "ingest.compare_metrics:compare_jobs", iter(job_batches), workers - 1
            ):
                out.extend(res)
            return out

        # warm-up, untimed: each helper imports the tasks' module on its first task
        for _ in range(workers):
            list(compare_table(table.slice(0, 2), workers, task_pairs=1))
            list(
                helper_pool.run_ordered(
                    "ingest.compare_metrics:compare_jobs", iter([jobs[:1], jobs[1:2]]), workers - 1
                )
            )
            list(
                helper_pool.run_ordered(
                    "ingest.compare_metrics:compare_batch", plan_batches(table.slice(0, 2), task_pairs=1),
                    workers - 1,
                )
            )  # fmt: skip
        t_ours, t_naive, t_pairs, t_helpers, cpu_ours = [], [], [], [], []
        r_ours = r_naive = r_pairs = r_helpers = None
        order = ("ours", "pairs", "helpers")
        for k in range(repeat):
            for which in order[k % 3 :] + order[: k % 3]:  # each goes first in turn
                if which == "helpers":
                    t = time.perf_counter()
                    r_helpers = via_helpers()
                    t_helpers.append(time.perf_counter() - t)
                elif which == "ours":
                    c = cpu_seconds()
                    t = time.perf_counter()
                    r_ours = ours()
                    t_ours.append(time.perf_counter() - t)
                    cpu_ours.append(cpu_seconds(end=True) - c)
                else:
                    t = time.perf_counter()
                    r_pairs = pair_by_pair()
                    t_pairs.append(time.perf_counter() - t)
            t = time.perf_counter()
            r_naive = [naive(px, py) for px, py in files]
            t_naive.append(time.perf_counter() - t)
            print(f"round: compare_table {t_ours[-1]:.3f} s, through helpers {t_helpers[-1]:.3f} s, "
                  f"pair by pair {t_pairs[-1]:.3f} s, naive {t_naive[-1]:.2f} s", flush=True)  # fmt: skip
        assert r_ours is not None and r_naive is not None and r_pairs is not None and r_helpers is not None
        assert sorted(r_ours.pair_metrics()) == sorted(r_pairs)  # the same numbers, every way
        assert sorted(r_ours.pair_metrics()) == sorted(r_helpers.pair_metrics())
        worst, worst_field = 0.0, ""
        for (key, m), want in zip(sorted(r_ours.pair_metrics()), r_naive, strict=True):
            assert m.status == "ok", (key, m.status)
            for f in METRIC_FIELDS:
                g, w = getattr(m, f), want[f]
                err = abs(g - w) / max(abs(w), 1e-300)
                if err > worst:
                    worst, worst_field = err, f
        return {
            "mb": mb, "pairs": pairs, "bytes": total, "batches": tasks[-1],
            "gbs": total / GB / min(t_ours), "gbs_naive": total / GB / min(t_naive),
            "ratio": min(t_naive) / min(t_ours), "per_pair_ms": min(t_ours) / pairs * 1e3,
            "naive_per_pair_ms": min(t_naive) / pairs * 1e3, "worst": worst, "worst_field": worst_field,
            "gbs_pairs": total / GB / min(t_pairs), "vs_pairs": min(t_pairs) / min(t_ours),
            "gbs_helpers": total / GB / min(t_helpers), "vs_helpers": min(t_helpers) / min(t_ours),
            "cpu_pair_us": min(cpu_ours) / pairs * 1e6, "gbs_cpu": total / GB / (min(cpu_ours) / workers),
        }  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cpu_seconds(end: bool = False) -> float:
    """CPU time so far of this process (all its threads, also those that have ended: compare_table's
    threads end with each call) and of its child processes (the helpers, from /proc/*/schedstat,
    nanoseconds): what the comparison would take of idle cores. This process's own time is read after
    the scan of /proc at the start of an interval and before it at the end (``end``), so that the scan
    is not counted."""
    own = time.process_time() if end else 0.0
    me = os.getpid()
    total = 0
    paths = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                with contextlib.suppress(OSError):
                    paths += [f"/proc/{pid}/task/{t}/schedstat" for t in os.listdir(f"/proc/{pid}/task")]
    for path in paths:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(path).read_text().split()[0])
    return (own if end else time.process_time()) + total / 1e9


def _size(mb: float) -> str:
    return f"{mb * 1000:g} KB" if mb < 1 else f"{mb:g} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=None, help="pairs of one size (with --mb)")
    ap.add_argument("--mb", type=float, default=None, help="MB per tensor (default: the sizes of SIZES)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every size's pair count (quick: 0.1)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--task-mb", type=int, default=0,
        help="MiB of tensor data per helper task (default: plan_batches' own, as dumpcat compare has)",
    )  # fmt: skip
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)
    if a.mb is not None:
        sizes = [(a.mb, a.pairs or 200)]
    else:
        sizes = [(mb, max(4, int(pairs * a.scale))) for mb, pairs in SIZES]

    helper_pool.start_helpers(a.workers + 1)  # (a)'s threads take one each for compare_jobs tasks
    time.sleep(1.0)  # helpers ready: the timing is of the comparison, not of interpreter start-up
    results = [measure(pairs, mb, a.repeat, a.workers, a.task_mb, a.workdir) for mb, pairs in sizes]
    for r in results:
        size = _size(r["mb"])
        emit.summary(
            f"`dumpcat compare`, {size} float32 pairs ({r['pairs']:,}), 2 workers, GB/s of both sides",
            ">= 1 GB/s", f"{r['gbs']:.3g} GB/s", r["gbs"] >= 1.0,
        )  # fmt: skip
        emit.summary(
            f"the same vs a correct naive loop (np.load + whole-array float64 numpy), {size}",
            ">= 5x", f"{r['ratio']:.1f}x", r["ratio"] >= 5.0,
        )  # fmt: skip
        emit.summary(
            f"the same, from its CPU time (its threads and helpers): GB/s on {a.workers} idle cores, {size}",
            "", f"{r['gbs_cpu']:.3g} GB/s ({r['cpu_pair_us']:.3g} µs of CPU a pair)",
        )  # fmt: skip
        emit.summary(
            f"the same vs the pair-by-pair path it replaced (compare_jobs: PairJob in, PairMetrics out), "
            f"{size}",
            "", f"{r['vs_pairs']:.2f}x ({r['gbs_pairs']:.3g} GB/s)",
        )  # fmt: skip
    for r in results:
        emit.summary(
            f"the same vs its tasks through helper processes, the caller computing too (compare_table before "
            f"it used threads), {_size(r['mb'])}",
            "", f"{r['vs_helpers']:.2f}x ({r['gbs_helpers']:.3g} GB/s)",
        )  # fmt: skip
    emit.report_follows()
    print(f"`{' '.join(['python bench/bench_compare.py', *(sys.argv[1:] if argv is None else argv)])}`, "
          f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end; pair metrics: {compare_backend()}; interleaved, "
          f"best of {a.repeat}; the page cache warm.\n")  # fmt: skip
    print("| tensor size | pairs | `compare_table`, 2 workers | per pair | naive loop | per pair | speed-up "
          "| pair by pair (`compare_jobs`) | batched / pair by pair | tasks through helpers "
          "| threads / helpers | CPU a pair | on idle cores | worst disagreement |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {_size(r['mb'])} | {r['pairs']:,} | {r['gbs']:.3g} GB/s | {r['per_pair_ms']:.3g} ms | "
              f"{r['gbs_naive']:.3g} GB/s | {r['naive_per_pair_ms']:.3g} ms | {r['ratio']:.1f}x | "
              f"{r['gbs_pairs']:.3g} GB/s | {r['vs_pairs']:.2f}x | {r['gbs_helpers']:.3g} GB/s | "
              f"{r['vs_helpers']:.2f}x | {r['cpu_pair_us']:.3g} µs | "
              f"{r['gbs_cpu']:.3g} GB/s | "
              f"{r['worst']:.1e} ({r['worst_field']}) |")  # fmt: skip
    return 0 if all(math.isfinite(r["worst"]) and r["worst"] < 1e-6 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
