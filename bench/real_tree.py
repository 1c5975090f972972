"""dumpcat's ingest measured on a REAL dump tree, each figure against a baseline taken in the same run.

The tree is any dump dumpcat reads; ``bench/ms_resnet_tree.py`` writes a real MindSpore 2.10 CPU one
(about 35,800 files, 2.5 GB, no statistic.csv). Nothing here depends on the tree's size.

  a. metadata-only ingest (``--no-stats``): files/s of the whole ``dumpcat ingest`` command (wall clock
     of the process, a new catalog each time) and by the ingest's own timer (``IngestSummary.seconds``
     of ``ingest_dump`` inside this process, imports already paid; once with the idle helper processes
     an earlier run left, once with helpers started cold), vs a bare recursive ``os.scandir`` walk of
     the same tree. Ratio = ingest time / walk time (x slower). With it, the two floors that ratio is
     made of: the walk plus opening and reading the first 512 bytes of every .npy (one thread), and
     the part of the in-process ingest spent writing the run's flat files (``FlatWriter.resolve_run``).
  b. ingest with statistics computed from the data (the default): seconds and GB/s of ``.npy`` bytes,
     whole command and in-process, vs reading every byte of every file from the page cache (a plain
     ``readinto`` loop in this process, one thread). Ratio = ingest time / read time. Also the part
     spent writing the run's flat files, against the same read.
  d. issue 14's part 2 on the tree: the statistics alone (``compute_stats_many`` as ingest calls it,
     over every tensor of the catalog (b) wrote) vs plain reads of the same tensors' data from the page
     cache (``bench_stats.read_files``), timed in turns. Ratio = statistics time / read time (the
     target, statistics at >= 0.5x the read rate, is a ratio <= 2).
  c. peak memory of ``dumpcat ingest`` across its process tree (the command and its helper processes):
     the sum of RSS sampled every 50 ms with psutil, and the sum of PSS (``memory_full_info``; shared
     pages counted once) sampled the same way, for both ingests.

Every ingest runs after a warm-up one and every figure is the best of ``repeat`` runs; the page cache is
warmed by (b)'s read loop before anything is timed. Files/s counts every file of the tree (tensors,
execution order, graphs, metadata).

    python bench/real_tree.py TREE [--work DIR] [--repeat N] [--workers N] [--json OUT]

or, from another bench script: ``from real_tree import measure_real_tree`` (rows of
``{figure, value, unit, baseline, ratio, note}``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import emit
from bench_core import walk, walk_read_headers  # the bare walk every ratio is taken against; its header floor
from phases import FLAT_FILES, timed_methods

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

GB = 1e9
MIB = 2**20


# --------------------------------------------------------------------------------------------------
# Baselines


def read_all(root: str, chunk: int = 1 << 22) -> tuple[int, int, int]:
    """Read every byte of every file (plain readinto loop): (files, bytes, bytes of .npy files)."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    files = total = npy = 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                    continue
                n = 0
                with open(e.path, "rb", buffering=0) as fh:
                    while k := fh.readinto(view):
                        n += k
                files += 1
                total += n
                if e.name.endswith(".npy"):
                    npy += n
    return files, total, npy


def best(fn, repeat: int):
    """(best seconds, result of the last call)."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


# --------------------------------------------------------------------------------------------------
# Ingest runs


def dumpcat_command() -> list[str]:
    """The `dumpcat` command of the code next to this script (what the console script runs:
    ``from catalog.cli.commands import main``), whatever copy of dumpcat this interpreter has installed."""
    root = str(HERE.parent)
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from catalog.cli.commands import main; sys.exit(main())"
    )
    return [sys.executable, "-c", code]


def ingest_command(tree: Path, catalog: Path, stats: bool, workers: int | None) -> list[str]:
    """argv of `dumpcat ingest` of `tree` into `catalog`, without a progress bar."""
    cmd = [*dumpcat_command(), "ingest", str(tree), "--catalog", str(catalog), "--no-progress"]
    cmd.append("--stats" if stats else "--no-stats")
    return [*cmd, "--workers", str(workers)] if workers else cmd


def cli_ingest(tree: Path, catalog: Path, stats: bool, workers: int | None) -> float:
    """Wall-clock seconds of one `dumpcat ingest` process into a new catalog (deleting it is not timed)."""
    shutil.rmtree(catalog, ignore_errors=True)
    cmd = ingest_command(tree, catalog, stats, workers)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def inproc_ingest(tree: Path, catalog: Path, stats: bool, workers: int | None):
    """(wall seconds, IngestSummary) of ingest_dump in this process into a new catalog."""
    from ingest.pipeline import ingest_dump

    shutil.rmtree(catalog, ignore_errors=True)
    t = time.perf_counter()
    s = ingest_dump(catalog, tree, run="bench", compute_stats=stats, workers=workers)
    dt = time.perf_counter() - t
    if s.errors:
        raise RuntimeError(f"ingest of {tree} reported {s.errors} errors: {s}")
    return dt, s


def timed_ingests(tree: Path, catalog: Path, stats: bool, workers: int | None, repeat: int) -> list:
    """`repeat` in-process ingests: (wall seconds, IngestSummary, seconds of the run's flat files)."""
    runs = []
    with timed_methods([FLAT_FILES]) as spent:
        for _ in range(repeat):
            spent.clear()
            dt, summary = inproc_ingest(tree, catalog, stats, workers)
            runs.append((dt, summary, spent.get(FLAT_FILES[3], 0.0)))
    return runs


def stop_helpers() -> None:
    """Stop the idle helper processes an earlier in-process ingest left running (they are kept for
    the next call), so the next ingest pays for starting them, as a one-shot ingest does."""
    from ingest import helper_pool

    stop = getattr(helper_pool, "_shutdown_helpers", None)
    if stop is not None:
        stop()


def cli_ingest_memory(tree: Path, catalog: Path, stats: bool, workers: int | None) -> dict:
    """Run `dumpcat ingest` and sample its process tree every 50 ms: peak sums of RSS and of PSS."""
    import psutil

    shutil.rmtree(catalog, ignore_errors=True)
    cmd = ingest_command(tree, catalog, stats, workers)
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    peak_rss = peak_pss = 0
    peak_procs = samples = 0
    pss_ok = True
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        rss = pss = 0
        for p in procs:
            try:
                if pss_ok:
                    m = p.memory_full_info()
                    rss += m.rss
                    pss += getattr(m, "pss", 0)
                else:
                    rss += p.memory_info().rss
            except psutil.AccessDenied:
                pss_ok = False
            except psutil.Error:
                pass  # the process ended between listing and reading
        samples += 1
        peak_rss = max(peak_rss, rss)
        peak_pss = max(peak_pss, pss)
        peak_procs = max(peak_procs, len(procs))
        time.sleep(0.05)
    rc = proc.wait()
    if rc:
        raise RuntimeError(f"{' '.join(cmd)} exited with {rc}")
    return {
        "seconds": time.perf_counter() - t,
        "peak_rss": peak_rss,
        "peak_pss": peak_pss if pss_ok else None,
        "processes": peak_procs,
        "samples": samples,
    }


# --------------------------------------------------------------------------------------------------


def stats_vs_read(cat: Path, repeat: int) -> tuple[float, float, int]:
    """compute_stats_many over every tensor of the catalog `cat` against plain reads of the same
    tensors' data (bench_stats' baseline), timed in turns: (stats GB/s, read GB/s, tensors)."""
    from bench_stats import _best, _nbytes_of, many, read_files

    from catalog import Catalog
    from ingest.statistics.kernel import StatJob

    with Catalog.open(cat) as c:
        t = c.sql("SELECT row_id, path, data_offset, stored_dtype, shape, format, host_shape FROM tensors")
    columns = [t.column(i).to_pylist() for i in range(t.num_columns)]
    jobs = [
        StatJob(row_id, path, offset, stored, tuple(shape), fmt, None if host is None else tuple(host))
        for row_id, path, offset, stored, shape, fmt, host in zip(*columns, strict=True)
    ]
    total = _nbytes_of(jobs) / GB
    many(jobs)  # warm-up: page cache, helpers
    best_s = _best({"read": lambda: read_files(jobs, 1 << 20), "stats": lambda: many(jobs)}, max(3, repeat))
    return total / best_s["stats"], total / best_s["read"], len(jobs)


def measure_real_tree(
    tree: Path, work: Path, *, repeat: int = 2, workers: int | None = None, log=print
) -> list[dict]:
    """Measure (a) metadata-only ingest, (b) ingest with computed statistics, (d) the statistics alone
    against reading the same tensors, (c) peak memory of the ingest's process tree on `tree`, writing
    catalogs under `work`. Returns rows of {figure, value, unit, baseline, ratio, note}; `ratio` is
    measured time / baseline time."""
    tree = Path(tree).absolute()
    work = Path(work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    load_start = os.getloadavg()[0]

    def add(figure, value, unit, baseline=None, ratio=None, note=""):
        row = dict(figure=figure, value=value, unit=unit, baseline=baseline, ratio=ratio, note=note)
        rows.append(row)
        if log:
            r = "" if ratio is None else f"  {ratio:.2f}x"
            b = "" if baseline is None else f"  vs {baseline:,.4g}"
            log(f"{figure:<60} {value:>12,.4g} {unit:<8}{b}{r}  {note}")
        return row

    # warm the page cache and the dentry cache; (b)'s baseline
    read_all(str(tree))
    read_s, (n_files, n_bytes, npy_bytes) = best(lambda: read_all(str(tree)), repeat)
    walk_s, n_walk = best(lambda: walk(str(tree)), max(3, repeat))
    assert n_walk == n_files, (n_walk, n_files)
    walk_rate = n_files / walk_s
    tree_desc = f"{n_files:,} files, {n_bytes / GB:.2f} GB ({npy_bytes / GB:.2f} GB .npy)"
    add("bare os.scandir walk", walk_rate, "files/s", note=f"{walk_s:.3f} s; {tree_desc}")

    # (a) metadata-only ingest
    cat = work / "cat_real_tree"
    cli_ingest(tree, cat, False, workers)  # warm-up
    cli_s, _ = best(lambda: cli_ingest(tree, cat, False, workers), repeat)
    add(
        "(a) metadata-only ingest, whole `dumpcat ingest --no-stats`",
        n_files / cli_s,
        "files/s",
        walk_rate,
        cli_s / walk_s,
        f"{cli_s:.2f} s wall clock incl. interpreter start, new catalog",
    )
    inproc_ingest(tree, cat, False, workers)  # warm-up: imports, helper start-up code paths
    runs = timed_ingests(tree, cat, False, workers, repeat)
    own_s, flat_s = min((s.seconds, flat) for _, s, flat in runs)
    wall_s = min(dt for dt, _, _ in runs)
    summary = runs[-1][1]
    add(
        "(a) metadata-only ingest, its own timer (IngestSummary.seconds)",
        n_files / own_s,
        "files/s",
        walk_rate,
        own_s / walk_s,
        f"{own_s:.2f} s; {summary.tensors:,} tensors, {summary.ops:,} ops, in-process ingest_dump",
    )
    # the floors (a)'s ratio is made of: opening every file, and resolving the run's rows once
    hdr_s, _ = best(lambda: walk_read_headers(str(tree)), max(3, repeat))
    add(
        "(a) floor: walk + open/read(512)/close of every .npy, one thread",
        n_files / hdr_s,
        "files/s",
        walk_rate,
        hdr_s / walk_s,
        f"{hdr_s:.2f} s; what the system calls that read the headers take (bench_core's baseline)",
    )
    add(
        f"(a) of which {FLAT_FILES[3]}",
        n_files / flat_s,
        "files/s",
        walk_rate,
        flat_s / walk_s,
        f"{flat_s:.2f} s of the {own_s:.2f} s above: resolution joins, sort, parquet write of the run",
    )
    cold = []
    for _ in range(repeat):
        stop_helpers()
        cold.append(inproc_ingest(tree, cat, False, workers)[1].seconds)
    add(
        "(a) metadata-only ingest, its own timer, helpers started cold",
        n_files / min(cold),
        "files/s",
        walk_rate,
        min(cold) / walk_s,
        f"{min(cold):.2f} s; helper processes stopped before each run (a one-shot ingest in Python)",
    )
    add(
        "(a) metadata-only ingest, in-process ingest_dump wall clock",
        n_files / wall_s,
        "files/s",
        walk_rate,
        wall_s / walk_s,
        f"{wall_s:.2f} s incl. detection and catalog open",
    )

    # (b) ingest with statistics computed from the data
    read_rate = n_bytes / GB / read_s
    add("plain read of every byte (page cache)", read_rate, "GB/s", note=f"{read_s:.2f} s, {tree_desc}")
    cli_ingest(tree, cat, True, workers)  # warm-up
    cli_s, _ = best(lambda: cli_ingest(tree, cat, True, workers), repeat)
    add(
        "(b) ingest with computed stats, whole `dumpcat ingest`",
        npy_bytes / GB / cli_s,
        "GB/s",
        read_rate,
        cli_s / read_s,
        f"{cli_s:.2f} s wall clock, GB/s of .npy bytes",
    )
    inproc_ingest(tree, cat, True, workers)  # warm-up
    runs = timed_ingests(tree, cat, True, workers, repeat)
    own_s, flat_s = min((s.seconds, flat) for _, s, flat in runs)
    summary = runs[-1][1]
    add(
        "(b) ingest with computed stats, its own timer",
        npy_bytes / GB / own_s,
        "GB/s",
        read_rate,
        own_s / read_s,
        f"{own_s:.2f} s; {summary.computed_stats:,} statistics computed",
    )
    add(
        f"(b) of which {FLAT_FILES[3]}",
        npy_bytes / GB / flat_s,
        "GB/s",
        read_rate,
        flat_s / read_s,
        f"{flat_s:.2f} s of the {own_s:.2f} s above (tensors and stats)",
    )

    # (d) issue 14 part 2 on a real tree: the statistics alone vs reading the same tensors' data
    stats_rate, data_read_rate, n_jobs = stats_vs_read(cat, repeat)
    add(
        "(d) statistics alone (compute_stats_many as ingest calls it)",
        stats_rate,
        "GB/s",
        data_read_rate,
        data_read_rate / stats_rate,
        f"{stats_rate / data_read_rate:.2f}x the read rate (target >= 0.5x); {n_jobs:,} tensors of the "
        "catalog; baseline: reading their data (page cache), same run",
    )

    # (c) peak memory of the ingest's process tree
    try:
        import psutil  # noqa: F401
    except ImportError:
        add("(c) peak memory", float("nan"), "MiB", note="psutil not installed")
        return rows
    for stats, label in ((False, "metadata-only"), (True, "computed stats")):
        m = cli_ingest_memory(tree, cat, stats, workers)
        note = f"{m['processes']} processes at most, {m['samples']} samples, {m['seconds']:.1f} s"
        add(f"(c) peak RSS sum over the process tree, {label}", m["peak_rss"] / MIB, "MiB", note=note)
        if m["peak_pss"] is not None:
            add(f"(c) peak PSS sum over the process tree, {label}", m["peak_pss"] / MIB, "MiB", note=note)
    shutil.rmtree(cat, ignore_errors=True)
    cores = len(os.sched_getaffinity(0))
    load_note = f"{load_start:.2f} at start; {cores} cores"
    add("load average (1 min) at the end", os.getloadavg()[0], "", note=load_note)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tree", type=Path, help="a dump tree dumpcat reads (e.g. from ms_resnet_tree.py)")
    p.add_argument("--work", type=Path, help="where catalogs go (default: a temp dir, deleted)")
    p.add_argument("--repeat", type=int, default=2, help="runs per figure, best kept (default 2)")
    p.add_argument("--workers", type=int, help="ingest --workers (default: dumpcat's own)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    tmp = None
    if a.work is None:
        tmp = tempfile.mkdtemp(prefix="dumpcat-real-tree-")
    try:
        rows = measure_real_tree(a.tree, a.work or Path(tmp), repeat=a.repeat, workers=a.workers)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    for r in rows:
        if r["ratio"] is not None:
            stats = r["figure"].startswith("(d)")
            emit.summary(
                f"real tree ({a.tree.name}): {r['figure']}",
                "ratio <= 2 (>= 0.5x the read rate)" if stats else "",
                f"{r['value']:,.4g} {r['unit']}, {r['ratio']:.2f}x the baseline's time",
                r["ratio"] <= 2 if stats else None,
            )
    emit.report_follows()
    print("| figure | value | baseline | time ratio | note |")
    print("|---|---|---|---|---|")
    for r in rows:
        base = "" if r["baseline"] is None else f"{r['baseline']:,.4g} {r['unit']}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        print(f"| {r['figure']} | {r['value']:,.4g} {r['unit']} | {base} | {ratio} | {r['note']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
