"""Run-vs-baseline tensor comparison (ingest.compare_metrics) against a naive numpy loop.

Pairs of float32 npy files (``--pairs`` x 2 x ``--mb`` MB, about 2 GB by default) are written to a
temp dir and read once (warm page cache). Then, interleaved, best of ``--repeat``:

  a. ``compare_jobs`` through ``helper_pool.run_ordered`` with ``--workers`` processes (the caller
     computes too; helpers started before timing), batched as ``dumpcat compare`` does
     (``pair_batches``: 256 pairs or 64 MB per task) unless ``--batch`` says how many pairs;
  b. a naive loop in one process: ``np.load`` both files, float64 copies, whole-array numpy for the
     same ten metrics (cosine, max abs, max rel, mean abs, RMSE, rel. Euclidean, KL, acc. rel. error,
     the two error ratios).

Reported: GB/s of tensor pairs (bytes of both sides) and the ratio. Targets: >= 1 GB/s on 2 cores and
>= 5x the naive loop. Both results are checked to agree (the worst relative disagreement is reported;
KL of near-identical tensors is ill-conditioned in the naive form, see tests for the 1e-9 checks).

    python bench/bench_compare.py                      # 200 pairs x 2 x 5 MB
    python bench/bench_compare.py --pairs 40 --repeat 2  # quick
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_core import Report, machine  # noqa: E402

from ingest import helper_pool  # noqa: E402
from ingest.compare_metrics import METRIC_FIELDS, PairJob, compare_backend, pair_batches  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--mb", type=float, default=5.0, help="MB per tensor")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--batch", type=int, default=0,
        help="pairs per helper batch (default: compare_metrics.pair_batches, as dumpcat compare batches)",
    )  # fmt: skip
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="bench_compare_", dir=a.workdir))
    try:
        t = time.perf_counter()
        files = write_pairs(root, a.pairs, a.mb)
        total = sum(px.stat().st_size - 128 + py.stat().st_size - 128 for px, py in files)
        for px, py in files:  # warm the page cache
            px.read_bytes()
            py.read_bytes()
        print(f"wrote {a.pairs} pairs, {total / GB:.2f} GB of tensor data in {time.perf_counter() - t:.1f} s")
        jobs = [PairJob(i, side(px), side(py)) for i, (px, py) in enumerate(files)]
        if a.batch > 0:
            batches = [jobs[i : i + a.batch] for i in range(0, len(jobs), a.batch)]
        else:
            batches = list(pair_batches(jobs))
        helper_pool.start_helpers(a.workers)
        time.sleep(1.0)  # helpers ready: the timing is of the comparison, not of interpreter start-up

        def ours() -> list:
            out = []
            for res in helper_pool.run_ordered(
                "ingest.compare_metrics:compare_jobs", iter(batches), a.workers - 1
            ):
                out.extend(res)
            return out

        def loop() -> list:
            return [naive(px, py) for px, py in files]

        t_ours, t_naive = [], []
        r_ours = r_naive = None
        for _ in range(a.repeat):
            t = time.perf_counter()
            r_ours = ours()
            t_ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            r_naive = loop()
            t_naive.append(time.perf_counter() - t)
            print(f"round: compare_jobs {t_ours[-1]:.2f} s, naive {t_naive[-1]:.2f} s", flush=True)
        assert r_ours is not None and r_naive is not None
        worst, worst_field = 0.0, ""
        for (key, m), want in zip(r_ours, r_naive, strict=True):
            assert m.status == "ok", (key, m.status)
            for f in METRIC_FIELDS:
                g, w = getattr(m, f), want[f]
                err = abs(g - w) / max(abs(w), 1e-300)
                if err > worst:
                    worst, worst_field = err, f
        gbs_ours = total / GB / min(t_ours)
        gbs_naive = total / GB / min(t_naive)
        ratio = min(t_naive) / min(t_ours)

        rep = Report()
        params = {
            "date": time.strftime("%Y-%m-%d"),
            "command": "python bench/bench_compare.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "data": f"{a.pairs} pairs x 2 x {a.mb:g} MB float32 npy ({total / GB:.2f} GB), page cache warm",
            "workers": f"{a.workers} (caller + {a.workers - 1} helper), {len(batches)} batches of "
            f"{max(len(b) for b in batches)} pairs at most; pair metrics: {compare_backend()}",
            "timing": f"interleaved, best of {a.repeat}",
        }
        rep.add("a", "compare_jobs via run_ordered", gbs_ours, "GB/s", target=">= 1 GB/s", ok=gbs_ours >= 1.0)
        rep.add("b", "naive loop (np.load + whole-array float64)", gbs_naive, "GB/s")
        rep.add(
            "a/b", "speed-up over the naive loop", ratio, "x", target=">= 5x", ok=ratio >= 5.0,
            note=f"worst disagreement with the naive loop: {worst:.1e} relative ({worst_field})",
        )  # fmt: skip
        rep.add("a", "per pair", min(t_ours) / a.pairs * 1e3, "ms", baseline=min(t_naive) / a.pairs * 1e3)
        print()
        print(rep.markdown(machine(), params))
        return 0 if math.isfinite(worst) and worst < 1e-6 else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
