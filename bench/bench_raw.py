"""Ascend raw dumps against MindSpore npy dumps of the same tensors: ingest, tensor fetch, device formats.

One run measures, each against a baseline taken in the same process:

  r. ingest of the real MindSpore 2.10 dumps shipped in tests/data against the raw trees written from
     them (tests/data/ascend_raw), one process each, interleaved, best round. Target: raw <= 1.5x npy.
  a. ingest: a synthetic npy dump (``synth.generate``, no statistic.csv, so both sides compute their
     statistics from the data) is turned into a raw dump of the same tensors by
     ``tests/writers/ascend_tree.write_tree`` (one raw file per operator launch holding its inputs and
     outputs; 2-D MatMul operands in FRACTAL_NZ, everything else ND; every other file in the old
     whole-file protobuf layout). ``ingest_dump`` of each into a fresh catalog, interleaved, best of
     ``--repeat``, with computed statistics and with ``compute_stats=False``. Target: raw time <= 1.5x npy.
     The same with ``workers=1`` (no helper processes on either side) gives the cost per tensor on one core.
  b. tensor fetch, warm page cache, per call over ``--lookups`` random rows: ``Catalog.tensor(row_id)`` on
     raw rows that are plain ND float32 slots vs ``np.load(path, mmap_mode='r')`` of the npy file holding
     the same tensor. Target: within 50 µs of np.load. For reference also ``Catalog.tensor`` on the npy
     catalog, and on raw FRACTAL_NZ rows (host layout: decoded and copied).
  c. ``device_format.device_to_host`` throughput for NC1HWC0, FRACTAL_Z and FRACTAL_NZ at model sizes, one
     thread, vs ``np.copy`` of the same device array: GB/s of device bytes and the time ratio.

    python bench/bench_raw.py                 # 40,000 tensors in a temp dir, about 2 minutes on 2 cores
    python bench/bench_raw.py --quick         # a small run (about 10 s)
    python bench/bench_raw.py --profile       # also: wall time per ingest phase of both trees, and a
                                              # cProfile of raw ingests (the ingesting process only)

Prints one line per figure as it goes and a markdown report (machine, parameters, results) at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
import synth  # noqa: E402
from bench_core import Report, machine, timed_ingest  # noqa: E402

GB = 1e9


# --------------------------------------------------------------------------------------------------
# (r) the committed real dumps: MindSpore 2.10 npy trees and the raw trees written from them

REAL_TREES = {  # raw tree (tests/data/ascend_raw) -> the npy dump it was written from
    "nan_log_rank": "ms210/nan_log/dump",
    "kernels_filter_rank": "ms210/kernels_filter/dump",
}


def bench_real(rep: Report, work: Path, repeat: int) -> None:
    """Raw vs npy ingest of the real MindSpore 2.10 tensors shipped in tests/data (small trees: the
    ratio includes the fixed cost of an ingest, which the synthetic tree amortises)."""
    from ingest.pipeline import ingest_dump

    data = HERE.parent / "tests" / "data"
    for raw_name, npy_rel in REAL_TREES.items():
        trees = {"npy": data / npy_rel, "raw": data / "ascend_raw" / raw_name}
        times: dict[str, list[float]] = {"npy": [], "raw": []}
        for i in range(repeat * 4):  # interleaved rounds into fresh catalogs
            for name, tree in trees.items():
                cat = work / f"cat_real_{name}_{i}"
                t = time.perf_counter()
                s = ingest_dump(cat, tree, run=name, workers=1)
                times[name].append(time.perf_counter() - t)
                shutil.rmtree(cat, ignore_errors=True)
        best = {name: min(v) for name, v in times.items()}
        ratio = best["raw"] / best["npy"]
        rep.add("r", f"raw / npy ingest time, real {raw_name} ({s.tensors} tensors)", best["raw"], "s",
                best["npy"], ratio, target="<= 1.5x", ok=ratio <= 1.5)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# (a) ingest


def make_trees(rep: Report, work: Path, tensors: int, ranks: int, iterations: int) -> tuple[Path, Path, dict]:
    from tests.writers.ascend_tree import write_tree

    npy, raw = work / "tree_npy", work / "tree_raw"
    s = synth.generate(npy, tensors, ranks=ranks, iterations=iterations, statistic_csv=False)
    rep.add("-", f"synth.generate {tensors:,} npy tensors", s.tensors / s.seconds, "files/s",
            note=f"{s.seconds:.1f} s, no statistic.csv")  # fmt: skip
    t = time.perf_counter()
    counts = write_tree(npy, raw, layout="rank")
    dt = time.perf_counter() - t
    counts["npy_files"] = s.tensors
    rep.add("-", f"write_tree -> {counts['files']:,} raw files", counts["files"] / dt, "files/s",
            note=f"{dt:.1f} s, {counts['tensors'] / counts['files']:.2f} slots per raw file")  # fmt: skip
    assert counts["tensors"] == s.tensors, counts
    return npy, raw, counts


def bench_ingest(
    rep: Report, work: Path, npy: Path, raw: Path, counts: dict, repeat: int, single: bool
) -> None:
    """Both trees into fresh catalogs, interleaved rounds, best of `repeat` per configuration.
    With `single`, also `workers=1` (everything in the ingesting process): the CPU cost per
    tensor, without the parallelism the npy reader gets from its helper processes."""
    trees = {"npy": npy, "raw": raw}
    files = {"npy": counts["npy_files"], "raw": counts["files"]}
    configs = [(stats, workers) for stats in (True, False) for workers in ((None, 1) if single else (None,))]
    for name, tree in trees.items():  # warm-up: imports, helpers, page cache of every file
        _, s = timed_ingest(work / f"cat_{name}", tree, compute_stats=True)
        assert s.errors == 0 and s.tensors == counts["tensors"], s
    times: dict[tuple, list[float]] = {}
    for _ in range(repeat):  # interleaved, so a busy moment of the machine hits both sides
        for stats, workers in configs:
            for name, tree in trees.items():
                dt, s = timed_ingest(work / f"cat_{name}", tree, compute_stats=stats, workers=workers)
                assert s.errors == 0 and s.tensors == counts["tensors"], s
                assert s.computed_stats == (counts["tensors"] if stats else 0), s
                times.setdefault((name, stats, workers), []).append(dt)
    n = counts["tensors"]
    for stats, workers in configs:
        label = ("with computed stats" if stats else "compute_stats=False") + (
            ", workers=1" if workers else ""
        )
        best = {name: min(times[(name, stats, workers)]) for name in trees}
        for name in trees:
            rep.add("a", f"{name} ingest, {label}: tensors/s", n / best[name], "tensors/s",
                    note=f"{best[name]:.2f} s; {files[name] / best[name]:,.0f} files/s; "
                    f"all: {', '.join(f'{t:.2f}' for t in times[(name, stats, workers)])} s")  # fmt: skip
        ratio = best["raw"] / best["npy"]
        rep.add("a", f"raw / npy ingest time, {label}", best["raw"], "s", best["npy"], ratio,
                target=None if workers else "<= 1.5x", ok=None if workers else ratio <= 1.5)  # fmt: skip
    # the catalogs of the last round (stats off) are replaced by ones with statistics, for (b)
    for name, tree in trees.items():
        timed_ingest(work / f"cat_{name}", tree, compute_stats=True)


def profile_raw_ingest(work: Path, raw: Path, stats: bool, top: int) -> str:
    """cProfile of one raw ingest (the ingesting process only; helper processes are not profiled)."""
    from ingest.pipeline import ingest_dump

    cat = work / "cat_profile"
    shutil.rmtree(cat, ignore_errors=True)
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    ingest_dump(cat, raw, run="bench", compute_stats=stats)
    prof.disable()
    wall = time.perf_counter() - t
    shutil.rmtree(cat, ignore_errors=True)
    out = io.StringIO()
    out.write(f"cProfile, raw ingest, compute_stats={stats}: {wall:.2f} s wall under the profiler\n")
    st = pstats.Stats(prof, stream=out).strip_dirs()
    st.sort_stats("cumulative").print_stats(top)
    st.sort_stats("tottime").print_stats(top)
    return out.getvalue()


_PHASES = (  # (module, class, method, label): timed around every call during one ingest
    ("ingest.pipeline", "Ingester", "scan_all", "walk (scan_all)"),
    ("ingest.readers.mindspore_npy", "LeafEngine", "finish", "reader.finish (pending leaves)"),
    ("ingest.readers.ascend_raw", "RawFiles", "_raw", "  of which raw files read file by file (_raw)"),
    ("ingest.pipeline", "Ingester", "_computed_stats_table", "statistics (_computed_stats_table)"),
    ("ingest.storage.store", "CatalogStore", "commit_batch", "commit (parquet + snapshot)"),
)


def _cpu_children() -> float:
    """CPU seconds of this process's live children (the ingest helpers), 0 without psutil."""
    try:
        import psutil
    except ImportError:
        return 0.0
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def phase_breakdown(work: Path, tree: Path, stats: bool) -> dict[str, float]:
    """Wall seconds per pipeline phase of one ingest (phases nest: raw files run inside
    reader.finish), plus CPU seconds of the ingesting process and of its helper processes."""
    from phases import timed_methods

    from ingest.pipeline import ingest_dump

    cat = work / "cat_phases"
    shutil.rmtree(cat, ignore_errors=True)
    try:
        with timed_methods(_PHASES) as spent:
            cpu0, helpers0 = time.process_time(), _cpu_children()
            t = time.perf_counter()
            ingest_dump(cat, tree, run="bench", compute_stats=stats)
            spent["total (ingest_dump)"] = time.perf_counter() - t
            spent["CPU, ingesting process"] = time.process_time() - cpu0
            spent["CPU, helper processes"] = _cpu_children() - helpers0
    finally:
        shutil.rmtree(cat, ignore_errors=True)
    return spent


def phases_table(work: Path, npy: Path, raw: Path) -> str:
    timed_ingest(work / "cat_phases", npy)  # warm-up: helpers started, page cache
    cols = [(name, tree, stats) for stats in (True, False) for name, tree in (("npy", npy), ("raw", raw))]
    res = [phase_breakdown(work, tree, stats) for _, tree, stats in cols]
    labels = [lab for *_, lab in _PHASES] + [
        "total (ingest_dump)",
        "CPU, ingesting process",
        "CPU, helper processes",
    ]
    head = " | ".join(f"{n} {'stats' if st else 'no stats'}" for n, _, st in cols)
    out = [f"| phase (s) | {head} |", "|---|" + "---|" * len(cols)]
    for lab in labels:
        out.append(f"| {lab} | " + " | ".join(f"{r.get(lab, 0.0):.2f}" for r in res) + " |")
    return "Ingest phases, wall seconds (one ingest each):\n" + "\n".join(out)


# --------------------------------------------------------------------------------------------------
# (b) tensor fetch


def _rows(cat, where: str) -> dict[tuple, tuple[int, str]]:
    """(rank, iteration, op, io, slot) -> (row_id, path) of the catalog's tensors matching `where`."""
    t = cat.sql(
        f"SELECT rank, iteration, file_op_name, io, slot, row_id, path FROM tensors WHERE {where}"
    ).to_pylist()
    return {
        (r["rank"], r["iteration"], r["file_op_name"], r["io"], r["slot"]): (r["row_id"], r["path"])
        for r in t
    }


def _per_call_us(runs: list[tuple], passes: int = 7) -> list[float]:
    """For each (fn, args) of `runs`: the median over `passes` of the mean µs per fn(arg) call.
    The runs take turns within each pass, so a busy moment of the machine hits all of them."""
    samples: list[list[float]] = [[] for _ in runs]
    for _ in range(passes):
        for k, (fn, args) in enumerate(runs):
            t = time.perf_counter()
            for a in args:
                fn(a)
            samples[k].append((time.perf_counter() - t) / len(args))
    return [statistics.median(x) * 1e6 for x in samples]


def bench_fetch(rep: Report, work: Path, lookups: int) -> None:
    from catalog.api import Catalog

    raw_cat, npy_cat = Catalog.open(work / "cat_raw"), Catalog.open(work / "cat_npy")
    npy_rows = _rows(npy_cat, "true")
    plain = _rows(raw_cat, "format = 'ND' AND stored_dtype = 'float32' AND host_shape IS NULL")
    device = _rows(raw_cat, "format <> 'ND' AND host_shape IS NOT NULL")
    formats = raw_cat.sql(
        "SELECT DISTINCT format FROM tensors WHERE format <> 'ND' AND host_shape IS NOT NULL"
    )
    device_label = "/".join(sorted(formats.column(0).to_pylist())) + ", host layout"
    rng = random.Random(0)
    sets = {}
    for label, rows in (("plain ND float32", plain), (device_label, device)):
        keys = sorted(k for k in rows if k in npy_rows)
        assert len(keys) == len(rows), f"{len(rows) - len(keys)} raw rows without an npy twin"
        keys = rng.sample(keys, min(lookups, len(keys)))
        sets[label] = (
            [rows[k][0] for k in keys],  # raw row ids
            [npy_rows[k][0] for k in keys],  # npy row ids
            [npy_rows[k][1] for k in keys],  # npy paths
        )
    raw_cat.tensor(sets["plain ND float32"][0][0])  # builds the row-id indexes
    npy_cat.tensor(sets["plain ND float32"][1][0])
    for raw_ids, npy_ids, paths in sets.values():  # warm every path, and check the values agree
        for r, i, p in zip(raw_ids, npy_ids, paths, strict=True):
            ref = np.load(p, mmap_mode="r")
            a, b = raw_cat.tensor(r), npy_cat.tensor(i)
            assert a.shape == ref.shape and a.dtype == ref.dtype and np.array_equal(a, ref, equal_nan=True)
            assert np.array_equal(b, ref, equal_nan=True)

    def np_load(p):
        return np.load(p, mmap_mode="r")

    for label, (raw_ids, npy_ids, paths) in sets.items():
        n = len(raw_ids)
        base, raw_us, npy_us = _per_call_us(
            [(np_load, paths), (raw_cat.tensor, raw_ids), (npy_cat.tensor, npy_ids)]
        )
        rep.add("b", f"np.load(mmap_mode='r') of the npy twin ({label}, {n:,} rows)", base, "µs/call")
        rep.add("b", f"Catalog.tensor on raw rows ({label})", raw_us, "µs/call", base, raw_us / base)
        diff = raw_us - base
        plain_set = label.startswith("plain")
        rep.add("b", f"Catalog.tensor raw - np.load ({label})", diff, "µs/call",
                target="<= 50 µs" if plain_set else None, ok=(diff <= 50) if plain_set else None)  # fmt: skip
        if plain_set:
            rep.add("b", "Catalog.tensor on npy rows (same tensors)", npy_us, "µs/call", base, npy_us / base)
    raw_cat.close()
    npy_cat.close()


# --------------------------------------------------------------------------------------------------
# (c) device-format conversion

DEVICE_CASES = [  # (format, host shape, dtype): activations, a conv weight, matmul operands
    ("NC1HWC0", (32, 256, 28, 28), "float16"),
    ("NC1HWC0", (32, 256, 28, 28), "float32"),
    ("NC1HWC0", (32, 3, 224, 224), "float16"),  # first layer: C=3 padded to C0=16
    ("FRACTAL_Z", (512, 512, 3, 3), "float16"),
    ("FRACTAL_Z", (64, 3, 7, 7), "float16"),  # padded on both N and C
    ("FRACTAL_NZ", (4096, 4096), "float16"),
    ("FRACTAL_NZ", (4096, 1000), "float16"),  # classifier: 1000 padded to 1008
    ("FRACTAL_NZ", (8, 1024, 1024), "float32"),  # batched
]


def _scaled(shape: tuple[int, ...], quick: bool) -> tuple[int, ...]:
    return tuple(max(1, d // 4) if quick and i == 0 else d for i, d in enumerate(shape))


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} kB"


def _best_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_device(rep: Report, quick: bool, repeat: int) -> None:
    from ingest.formats.ascend.device_format import device_to_host, host_to_device

    rng = np.random.default_rng(0)
    for fmt, host_shape, dtype in DEVICE_CASES:
        host_shape = _scaled(host_shape, quick)
        host = rng.standard_normal(host_shape, dtype=np.float32).astype(dtype)
        dev = host_to_device(host, fmt)
        assert np.array_equal(device_to_host(dev, fmt, host.shape), host)
        conv_s = _best_s(lambda dev=dev, fmt=fmt, host=host: device_to_host(dev, fmt, host.shape), repeat)
        copy_s = _best_s(lambda dev=dev: np.copy(dev), repeat)
        desc = f"{fmt} {dtype} {'x'.join(map(str, host_shape))}"
        rep.add("c", f"device_to_host {desc}", dev.nbytes / GB / conv_s, "GB/s", dev.nbytes / GB / copy_s,
                conv_s / copy_s, note=f"{_size(dev.nbytes)} device, {_size(host.nbytes)} host; "
                f"{conv_s * 1e3:.2f} ms vs np.copy {copy_s * 1e3:.2f} ms")  # fmt: skip


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="a small run: 4,000 tensors, 300 lookups, small arrays"
    )
    p.add_argument(
        "--tensors", type=int, default=None, help="npy tensors of the synthetic dump (default 40,000)"
    )
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--repeat", type=int, default=None, help="ingest rounds (default 5; 2 with --quick)")
    p.add_argument("--lookups", type=int, default=None, help="(b) random rows per set (default 2,000)")
    p.add_argument("--no-single", action="store_true", help="(a) skip the workers=1 rounds")
    p.add_argument("--only", default="r,a,b,c", help="comma-separated parts to run (b needs a's catalogs)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also time each ingest phase of both trees and cProfile a raw ingest, with and without stats",
    )
    p.add_argument("--profile-top", type=int, default=30)
    p.add_argument("--workdir", help="where trees and catalogs go (default: a temp dir, deleted)")
    p.add_argument("--keep", action="store_true", help="do not delete what was generated")
    p.add_argument("--json", help="also write the results as JSON here")
    a = p.parse_args(argv)
    tensors = a.tensors or (4_000 if a.quick else 40_000)
    repeat = a.repeat or (2 if a.quick else 5)
    lookups = a.lookups or (300 if a.quick else 2_000)
    parts = set(a.only.split(","))
    if "b" in parts:
        parts.add("a")

    created = a.workdir is None or not Path(a.workdir).exists()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dumpcat-bench-raw-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    info = machine()
    rep = Report()
    params: dict = {"date": time.strftime("%Y-%m-%d"), "command": "python bench/bench_raw.py " + " ".join(
        sys.argv[1:] if argv is None else argv)}  # fmt: skip
    params["tree"] = f"{tensors:,} npy tensors, {a.ranks} ranks x {a.iterations} iterations, no statistic.csv"
    params["ingest rounds"] = f"{repeat} (interleaved, best taken)"
    params["load average at start (1/5/15 min)"] = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
    profiles: list[str] = []
    started = time.perf_counter()
    try:
        if "a" in parts or a.profile:
            npy, raw, counts = make_trees(rep, work, tensors, a.ranks, a.iterations)
            if "a" in parts:
                bench_ingest(rep, work, npy, raw, counts, repeat, not a.no_single)
            if "b" in parts:
                bench_fetch(rep, work, lookups)
            if a.profile:
                profiles = [phases_table(work, npy, raw)]
                profiles += [profile_raw_ingest(work, raw, stats, a.profile_top) for stats in (False, True)]
        if "r" in parts:
            bench_real(rep, work, repeat)
        if "c" in parts:
            bench_device(rep, a.quick, 3 if a.quick else 5)
    finally:
        params["total runtime"] = f"{time.perf_counter() - started:.0f} s"
        params["load average at end (1/5/15 min)"] = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
        if not a.keep and created:
            shutil.rmtree(work, ignore_errors=True)
        elif not a.keep:
            for child in work.iterdir():
                if child.name.startswith(("tree_", "cat_")):
                    shutil.rmtree(child, ignore_errors=True)
    for text in profiles:  # progress, not report: shown in the run's log
        print("\n" + text)
    rep.emit_summary()
    emit.report_follows()
    print(rep.markdown(info, params))
    if a.json:
        Path(a.json).write_text(
            json.dumps({"machine": info, "params": params, "results": rep.rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
