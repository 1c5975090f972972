"""Benchmark: computed tensor statistics vs a naive numpy loop, and vs reading the same files.

Three measurements (``--mode naive``, ``--mode vs-read``, ``--mode kernel``; default naive and vs-read):

vs-read (``measure_stats_vs_read``, importable by other bench scripts): per dtype (float16, bfloat16,
float32, float64, the signed and unsigned integers of 8 to 64 bits but uint16, bool), a tree of small
files (1-64 KiB) and one of big files (16 MiB) is written, read once to warm the page cache, then
timed in the same process and run: plain reads of every file's
data (open, pread into a reused buffer, close: the faster of whole-file and 1 MiB reads) against
``compute_stats_many`` as ingest calls it (default workers: the caller plus one helper process per
other core, already started). The ratio stats/read is the figure of merit (target >= 0.5: statistics
at the speed of reading); the numpy fallback (``DUMPCAT_PURE_NUMPY_STATS=1``) is timed on the same
files. The machine must be otherwise idle: the helpers need the other cores.

kernel (``measure_kernel``): the C kernel alone on a 512 KiB in-memory buffer per dtype (what one read
of ``compute_stats_many`` hands it), GB/s and elements/s: the element rate, without reads, processes or
files, so it varies little with the load of a shared machine.

naive: writes a tree of npy files (float32 with NaN/inf sprinkled into some files, plus int32), warms the
page cache by reading every file once, then times, in the same process and over the same files:

- ``naive``: ``np.load`` then max, min, mean, size, the six counts and ``np.linalg.norm``, per file;
- ``compute_stats_many`` as ingest calls it (the calling process plus ``cpu_count - 1`` helper
  processes, already started by an earlier call), the same with helpers that must start first (the
  first call in a process), and two variants that show where the speed comes from: helper threads
  instead of processes, and ``workers=1`` (the calling thread alone);
- ``open_tensor`` + ``compute_stats`` in a plain loop (the mmap path a user calls directly).

Two cases: many small files (default 20,000 files of 1–64 KiB) and few big files (default 50 files
of 16 MiB). Throughput is tensor-data MB (10^6 bytes) per second, best of ``--repeat`` runs; ratios
are against ``naive`` of the same case. Helper start-up is inside the timed region.

The naive loop's ``np.linalg.norm`` is a float32 BLAS dot, which OpenBLAS multithreads above 10,000
elements; on a loaded machine that call alone can dominate the baseline. Run once as is and once with
``OPENBLAS_NUM_THREADS=1`` to see both baselines (compute_stats never calls a multithreaded BLAS).

    python bench/bench_stats.py                      # both cases, defaults
    python bench/bench_stats.py --files 5000 0       # small case only, 5000 files

Figures (2 vCPU AMD EPYC VM shared with other jobs, numpy 2.4.6, best of 5; MB/s, ratio to naive):

    case / variant                      OPENBLAS_NUM_THREADS unset   OPENBLAS_NUM_THREADS=1
    small: naive np.load loop            733 MB/s  45.4 us/file      716 MB/s  46.6 us/file
    small: compute_stats_many            2729 MB/s  3.72x             3071 MB/s  4.29x
    small: ... cold helpers              2559 MB/s  3.49x             2685 MB/s  3.75x
    small: ... threads                   1423 MB/s  1.94x             1340 MB/s  1.87x
    small: ... workers=1                 1788 MB/s  2.44x             1793 MB/s  2.51x
    big:   naive np.load loop            3374 MB/s                    3168 MB/s
    big:   compute_stats_many            8849 MB/s  2.62x             9558 MB/s  3.02x
    big:   ... cold helpers              6513 MB/s  1.93x             7675 MB/s  2.42x
    big:   ... threads                   6930 MB/s  2.05x             6910 MB/s  2.18x
    big:   ... workers=1                 6078 MB/s  1.80x             6115 MB/s  1.93x

"cold helpers" is the first call in a process: the 50 x 16 MiB case lasts ~0.1 s, about as long as a
helper takes to start, so the helper joins late; longer runs approach the warm figure. On a loaded
machine the naive loop's threaded BLAS dot can cost 10x more (150-360 us/file seen), which inflates
the ratios; the figures above are from quiet moments.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import emit
from ingest import helper_pool
from ingest.statistics import kernel as ts
from ingest.statistics.kernel import StatJob, compute_stats, compute_stats_many, open_tensor


def write_tree(root: Path, n_files: int, min_kib: int, max_kib: int, seed: int) -> list[StatJob]:
    """Write ``n_files`` npy files of min..max KiB; return the jobs the catalog would hold for them."""
    rng = np.random.default_rng(seed)
    jobs: list[StatJob] = []
    for i in range(n_files):
        d = root / "rank_0" / "Net" / "0" / str(i // 1000)
        if i % 1000 == 0:
            d.mkdir(parents=True, exist_ok=True)
        n = int(rng.integers(min_kib, max_kib + 1)) * 256  # 4-byte elements
        kind = i % 10
        if kind < 2:  # int32 (indices, steps, labels)
            a = rng.integers(-1000, 1000, n, dtype=np.int32)
        else:
            a = rng.standard_normal(n, dtype=np.float32)
            if kind == 2:  # ReLU output: zeros and positives
                np.maximum(a, 0, out=a)
            elif kind == 3:  # a few NaN
                a[rng.integers(0, n, 3)] = np.nan
            elif kind == 4:  # a few inf
                a[rng.integers(0, n, 2)] = np.inf
                a[rng.integers(0, n, 2)] = -np.inf
        a = a.reshape(-1, 64) if n % 64 == 0 else a
        p = d / f"Op.Default_op{i}.0.0.{1700000000000000 + i}.output.0.DefaultFormat.{a.dtype}.npy"
        np.save(p, a)
        offset = p.stat().st_size - a.nbytes  # what the catalog records from the header
        jobs.append(StatJob(i, str(p), offset, a.dtype.str, a.shape))
    return jobs


def naive_values(a: np.ndarray) -> dict:
    """The baseline the project measures against, for one array: plain numpy for every statistic
    dumpcat computes (keyed as `compute_stats`; tests/test_bench_baselines.py checks they agree)."""
    return {
        "max": np.max(a) if a.size else None,
        "min": np.min(a) if a.size else None,
        "avg": np.mean(a) if a.size else None,
        "count": a.size,
        "neg_count": np.count_nonzero(a < 0),
        "pos_count": np.count_nonzero(a > 0),
        "nan_count": np.count_nonzero(np.isnan(a)),
        "neg_inf_count": np.count_nonzero(np.isneginf(a)),
        "pos_inf_count": np.count_nonzero(np.isposinf(a)),
        "zero_count": np.count_nonzero(a == 0),
        "l2norm": np.linalg.norm(a),
    }


def naive(jobs: list[StatJob]) -> None:
    """The naive loop: `np.load` and `naive_values` per file."""
    for job in jobs:
        naive_values(np.load(job.path))


def many(jobs: list[StatJob], **kw) -> None:
    for _row_id, _stats, err in compute_stats_many(jobs, **kw):
        if err:
            raise RuntimeError(err)


def mmap_loop(jobs: list[StatJob]) -> None:
    for job in jobs:
        compute_stats(open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape))


def warm(jobs: list[StatJob]) -> None:
    for job in jobs:
        with open(job.path, "rb") as f:
            while f.read(1 << 20):
                pass


def run_case(name: str, jobs: list[StatJob], repeat: int, workers: int | None) -> dict[str, float]:
    """Time every variant ``repeat`` times, interleaved (the machine may be shared), keep the best."""
    total = sum(int(np.prod(j.shape)) * np.dtype(j.stored_dtype).itemsize for j in jobs)
    warm(jobs)
    many(jobs, workers=workers)  # warm-up: page cache, imports, helper processes
    naive(jobs[: min(len(jobs), 200)])

    def cold() -> None:
        helper_pool._shutdown_helpers()  # outside the timing would be nicer; it takes ~1 ms
        many(jobs, workers=workers)

    variants = {
        "naive np.load loop": lambda: naive(jobs),
        "compute_stats_many (default)": lambda: many(jobs, workers=workers),
        "compute_stats_many (cold helpers)": cold,
        "compute_stats_many (threads)": lambda: many(jobs, workers=workers, backend="thread"),
        "compute_stats_many (workers=1)": lambda: many(jobs, workers=1),
        "open_tensor+compute_stats loop": lambda: mmap_loop(jobs),
    }
    best = dict.fromkeys(variants, math.inf)
    for _ in range(repeat):
        for label, fn in variants.items():
            t = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - t)
    print(f"\n{name}: {len(jobs)} files, {total / 1e6:.1f} MB of tensor data, best of {repeat}")
    base = total / 1e6 / best["naive np.load loop"]
    mbs_of = {}
    for label, dt in best.items():
        mbs = mbs_of[label] = total / 1e6 / dt
        print(f"  {label:36s} {mbs:9.1f} MB/s  {dt * 1e6 / len(jobs):8.1f} us/file  ratio {mbs / base:5.2f}x")
    ours = mbs_of["compute_stats_many (default)"]
    emit.summary(
        f"statistics computed from data vs a naive np.load + numpy loop, {name}",
        ">= 2x",
        f"{ours / base:.2f}x ({ours:,.0f} vs {base:,.0f} MB/s)",
        ours / base >= 2,
    )
    return mbs_of


# --------------------------------------------------------------------------------------------------
# Statistics against the page-cache read rate of the same files (issue 14: "at the speed of reading").

VS_READ_DTYPES = (
    "float16", "bfloat16", "float32", "float64",
    "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "bool",
)  # fmt: skip


def write_dtype_tree(
    root: Path, dtype: str, n_files: int, min_kib: int, max_kib: int, seed: int
) -> list[StatJob]:
    """``n_files`` npy files of ``dtype`` (min..max KiB of data); bfloat16 is saved as its uint16 bit
    patterns and catalogued as ``"bfloat16"``, like a raw dump's DT_BF16 tensor. Some float files
    have NaN or ±inf, some are ReLU-like (zeros), like real activations."""
    rng = np.random.default_rng(seed)
    jobs: list[StatJob] = []
    item = 2 if dtype in ("float16", "bfloat16") else np.dtype(dtype).itemsize
    for i in range(n_files):
        d = root / str(i // 1000)
        if i % 1000 == 0:
            d.mkdir(parents=True, exist_ok=True)
        n = int(rng.integers(min_kib, max_kib + 1)) * 1024 // item
        if dtype == "bool":
            a = rng.random(n) < 0.5
        elif dtype[0] in "iu":  # labels, indices, steps, quantised values
            info = np.iinfo(dtype)
            a = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dtype)
        else:
            x = rng.standard_normal(n, dtype=np.float32) * 3
            kind = i % 10
            if kind == 2:
                np.maximum(x, 0, out=x)
            elif kind == 3:
                x[rng.integers(0, n, 3)] = np.nan
            elif kind == 4:
                x[rng.integers(0, n, 2)] = np.inf
                x[rng.integers(0, n, 2)] = -np.inf
            bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16: the high half, truncated
            a = bits if dtype == "bfloat16" else x.astype(dtype)
        p = d / f"t{i}.{dtype}.npy"
        np.save(p, a)
        offset = p.stat().st_size - a.nbytes
        stored = "bfloat16" if dtype == "bfloat16" else a.dtype.str
        jobs.append(StatJob(i, str(p), offset, stored, a.shape))
    return jobs


def _nbytes_of(jobs: list[StatJob]) -> int:
    return sum(
        math.prod(j.shape) * (2 if j.stored_dtype == "bfloat16" else np.dtype(j.stored_dtype).itemsize)
        for j in jobs
    )


def read_files(jobs: list[StatJob], chunk: int | None) -> None:
    """Plain reads of every file's tensor data into a reused buffer: open, pread (whole, or in
    ``chunk``-byte pieces), close. No parsing, no computing: the rate to match."""
    size = max(_nbytes_of([j]) for j in jobs) if chunk is None else chunk
    buf = bytearray(size)
    mv = memoryview(buf)
    for job in jobs:
        left = _nbytes_of([job])
        pos = job.data_offset
        fd = os.open(job.path, os.O_RDONLY)
        try:
            while left:
                k = os.preadv(fd, [mv[: min(left, size)]], pos)
                if k <= 0:
                    raise OSError(f"short read: {job.path}")
                pos += k
                left -= k
        finally:
            os.close(fd)


def _best(fns: dict, repeat: int) -> dict[str, float]:
    best = dict.fromkeys(fns, math.inf)
    for _ in range(repeat):
        for label, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - t)
    return best


def _set_fallback(on: bool) -> None:
    """Switch this process and its (restarted) helpers between the C kernel and the numpy fallback."""
    helper_pool._shutdown_helpers()
    if on:
        os.environ["DUMPCAT_PURE_NUMPY_STATS"] = "1"
    else:
        os.environ.pop("DUMPCAT_PURE_NUMPY_STATS", None)
    ts.use_c_kernel(not on)


def measure_stats_vs_read(
    work_dir: str | os.PathLike,
    *,
    dtypes: tuple[str, ...] = VS_READ_DTYPES,
    small_files: int = 4000,
    small_kib: tuple[int, int] = (1, 64),
    big_files: int = 12,
    big_kib: int = 16384,
    repeat: int = 5,
    workers: int | None = None,
    fallback: bool = True,
    verbose: bool = True,
) -> list[dict]:
    """compute_stats_many (as ingest calls it: default workers, helpers already started) against the
    page-cache read rate of the same files, measured in this process in the same run.

    For each dtype, a tree of small files (``small_files`` of ``small_kib`` KiB) and one of big files
    (``big_files`` of ``big_kib`` KiB) is written under ``work_dir``, read once to warm the page cache,
    then timed ``repeat`` times, reads and statistics interleaved, best run kept. The read rate is the
    faster of reading each file's data whole and in 1 MiB pieces. With ``fallback``, the numpy fallback
    (``DUMPCAT_PURE_NUMPY_STATS=1``, helpers restarted) is timed on the same files afterwards. Returns
    rows ``{case, files, MB, read_MBps, stats_MBps, ratio, fallback_MBps, fallback_ratio}`` (MB =
    10^6 bytes of tensor data; ``fallback_*`` None without ``fallback``). The target is ratio >= 0.5.
    """
    root = Path(work_dir)
    cases: list[tuple[str, list[StatJob]]] = []
    for k, dtype in enumerate(dtypes):
        if small_files:
            lo, hi = small_kib
            jobs = write_dtype_tree(root / f"small-{dtype}", dtype, small_files, lo, hi, seed=10 + k)
            cases.append((f"{dtype} small ({lo}-{hi} KiB)", jobs))
        if big_files:
            jobs = write_dtype_tree(root / f"big-{dtype}", dtype, big_files, big_kib, big_kib, seed=20 + k)
            cases.append((f"{dtype} big ({big_kib // 1024} MiB)", jobs))
    rows = []
    was_fallback = ts._kernel is None
    try:
        _set_fallback(False)
        if ts._kernel is None:
            raise RuntimeError(f"the C kernel is not available: {ts.stats_backend()}")
        for name, jobs in cases:
            total = _nbytes_of(jobs)
            read_files(jobs, 1 << 20)  # warm the page cache
            many(jobs, workers=workers)  # warm-up: helpers started, imports done
            best = _best(
                {
                    "read whole": lambda jobs=jobs: read_files(jobs, None),
                    "read 1 MiB": lambda jobs=jobs: read_files(jobs, 1 << 20),
                    "stats": lambda jobs=jobs: many(jobs, workers=workers),
                },
                repeat,
            )
            read = total / 1e6 / min(best["read whole"], best["read 1 MiB"])
            stats = total / 1e6 / best["stats"]
            rows.append(
                {
                    "case": name,
                    "files": len(jobs),
                    "MB": total / 1e6,
                    "read_MBps": read,
                    "stats_MBps": stats,
                    "ratio": stats / read,
                    "fallback_MBps": None,
                    "fallback_ratio": None,
                }
            )
        if fallback:
            _set_fallback(True)
            for row, (_name, jobs) in zip(rows, cases, strict=True):
                total = _nbytes_of(jobs)
                many(jobs, workers=workers)
                best = _best({"stats": lambda jobs=jobs: many(jobs, workers=workers)}, max(1, repeat // 2))
                row["fallback_MBps"] = total / 1e6 / best["stats"]
                row["fallback_ratio"] = row["fallback_MBps"] / row["read_MBps"]
    finally:
        _set_fallback(was_fallback)
    if verbose:
        print_vs_read(rows)
    return rows


def measure_kernel(
    dtypes: tuple[str, ...] = VS_READ_DTYPES,
    *,
    nbytes: int = 512 << 10,
    repeat: int = 9,
    verbose: bool = True,
) -> list[dict]:
    """The C kernel (``_fused_stats.block``) on an ``nbytes`` buffer of normal-ish values per dtype,
    best of ``repeat`` runs of 50 calls: rows ``{dtype, GBps, Gelem_per_s}``."""
    kernel = ts._c_kernel
    if kernel is None:
        raise RuntimeError(f"the C kernel is not available: {ts.stats_backend()}")
    rng = np.random.default_rng(0)
    rows = []
    for dtype in dtypes:
        item = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        n = nbytes // item
        if dtype == "bool":
            a = rng.random(n) < 0.5
        elif dtype[0] in "iu":  # labels, indices, steps, quantised values
            info = np.iinfo(dtype)
            a = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dtype)
        else:
            x = rng.standard_normal(n, dtype=np.float32) * 3
            a = (x.view(np.uint32) >> 16).astype(np.uint16) if dtype == "bfloat16" else x.astype(dtype)
        buf = a.tobytes()
        kind = ts._KINDS.index("uint8" if dtype == "bool" else dtype)  # bool: counted as bytes
        lanes = bytearray(ts._STATE * 8)
        best = math.inf
        for _ in range(repeat):
            t = time.perf_counter()
            for _ in range(50):
                kernel.block(buf, kind, 0, lanes)
            best = min(best, (time.perf_counter() - t) / 50)
        rows.append({"dtype": dtype, "GBps": nbytes / best / 1e9, "Gelem_per_s": n / best / 1e9})
    if verbose:
        print(f"\nC kernel ({kernel.ISA}), {nbytes >> 10} KiB buffer, best of {repeat}")
        for r in rows:
            print(f"  {r['dtype']:9s} {r['GBps']:6.1f} GB/s  {r['Gelem_per_s']:5.2f} Gelem/s")
    return rows


def print_vs_read(rows: list[dict]) -> None:
    print(f"\n{'case':26s} {'files':>6s} {'MB':>7s} {'read MB/s':>10s} {'stats MB/s':>11s} {'ratio':>6s}"
          f" {'fallback MB/s':>14s} {'ratio':>6s}")  # fmt: skip
    for r in rows:
        fb = "" if r["fallback_MBps"] is None else f"{r['fallback_MBps']:14.0f} {r['fallback_ratio']:6.2f}"
        print(
            f"{r['case']:26s} {r['files']:6d} {r['MB']:7.1f} {r['read_MBps']:10.0f} {r['stats_MBps']:11.0f}"
            f" {r['ratio']:6.2f} {fb}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--files",
        type=int,
        nargs=2,
        default=[20000, 50],
        metavar=("SMALL", "BIG"),
        help="number of files in the small and in the big case (0 skips a case)",
    )
    ap.add_argument(
        "--size-kib",
        type=int,
        nargs=2,
        default=[64, 16384],
        metavar=("SMALL_MAX", "BIG"),
        help="small case: sizes uniform from 1 KiB to SMALL_MAX; big case: every file BIG KiB",
    )
    ap.add_argument("--out-dir", help="where to write the trees (default: a temp dir, removed at the end)")
    ap.add_argument("--workers", type=int, default=None, help="compute_stats_many workers (cpu_count)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--mode",
        choices=["all", "naive", "vs-read", "kernel"],
        default="all",
        help="naive: the cases above against a naive loop; vs-read: statistics against the page-cache "
        "read rate of the same files, per dtype (measure_stats_vs_read); kernel: the C kernel alone on an "
        "in-memory buffer per dtype (measure_kernel); all: naive and vs-read",
    )
    ap.add_argument(
        "--vs-read-files",
        type=int,
        nargs=2,
        default=[4000, 12],
        metavar=("SMALL", "BIG"),
        help="vs-read: files per dtype in the small (1-64 KiB) and big (16 MiB) cases",
    )
    ap.add_argument("--no-fallback", action="store_true", help="vs-read: skip timing the numpy fallback")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # the naive mean of [inf, -inf] warns

    if args.mode == "kernel":
        rows = measure_kernel(repeat=max(args.repeat, 9))
        low = min(rows, key=lambda r: r["GBps"])
        emit.summary(
            f"the C statistics kernel alone, {len(rows)} dtypes, in-memory buffer",
            "",
            f"{low['GBps']:.1f}-{max(r['GBps'] for r in rows):.1f} GB/s (lowest: {low['dtype']})",
        )
        return
    tmp = None
    if args.out_dir:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="dumpcat-bench-")
        out = Path(tmp)
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"cpu_count={os.cpu_count()} numpy={np.__version__} OPENBLAS_NUM_THREADS={blas} loadavg={load}")
    print(f"out_dir={out} statistics: {ts.stats_backend()}")
    try:
        if args.mode in ("all", "vs-read"):
            measure_stats_vs_read(
                out / "vs-read",
                small_files=args.vs_read_files[0],
                big_files=args.vs_read_files[1],
                repeat=args.repeat,
                workers=args.workers,
                fallback=not args.no_fallback,
            )
            if args.mode == "vs-read":
                return
        n_small, n_big = args.files
        kib_small, kib_big = args.size_kib
        if n_small:
            jobs = write_tree(out / "small", n_small, 1, kib_small, seed=1)
            run_case(f"small files (1-{kib_small} KiB)", jobs, args.repeat, args.workers)
        if n_big:
            jobs = write_tree(out / "big", n_big, kib_big, kib_big, seed=2)
            run_case(f"big files ({kib_big} KiB)", jobs, args.repeat, args.workers)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
