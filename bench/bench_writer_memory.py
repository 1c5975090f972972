"""The catalog writer's memory cap against an ingest's time and peak memory (issue 35, item 2).

The flat-file writer's DuckDB runs under a cap (`DUMPCAT_WRITER_MEMORY`, default 128MB; past it,
sorts spill to the catalog's tmp/). A lower cap keeps the ingest's peak down, a higher one lets
the run's final sort stay in memory. This script ingests the same synthetic tree with a real
`dumpcat ingest --no-stats` process at each cap, interleaved (`--rounds` rounds of every cap), and
reports per cap: the median wall time and CPU time of the process tree (helpers included, from
`wait4`), its ratio to the default cap's, and the peak RSS summed over the process tree (psutil,
every 20 ms). Time is measured against the same tree's bare `os.scandir` walk as well.

    python bench/bench_writer_memory.py --tensors 100000 --caps 48MB,64MB,96MB,128MB,256MB,512MB
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_core import _own_memory, best, walk  # noqa: E402

from bench import emit  # noqa: E402

DEFAULT_CAP = "128MB"


def ingest(tree: Path, cat: Path, cap: str) -> tuple[float, float, float]:
    """(wall s, CPU s of the process tree, peak RSS MiB of the tree) of one `dumpcat ingest`."""
    import psutil

    shutil.rmtree(cat, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "catalog.cli",
        "ingest",
        str(tree),
        "-c",
        str(cat),
        "--run",
        "r",
        "--no-stats",
    ]
    env = dict(os.environ, DUMPCAT_WRITER_MEMORY=cap)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ps = psutil.Process(proc.pid)
    peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            procs = _own_memory([ps, *ps.children(recursive=True)])
            peak = max(peak, sum(p.memory_info().rss for p in procs))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ingest at {cap} failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensors", type=int, default=100_000)
    ap.add_argument("--caps", default="48MB,64MB,96MB,128MB,256MB,512MB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="scratch space (default: a temporary folder)")
    args = ap.parse_args()
    caps = [c.strip() for c in args.caps.split(",") if c.strip()]
    if DEFAULT_CAP not in caps:
        caps.append(DEFAULT_CAP)
    import synth

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        tree = work / "tree"
        synth.generate(tree, args.tensors, ranks=2, iterations=20)
        files = walk(str(tree))
        walk_s, _ = best(lambda: walk(str(tree)), 3)
        ingest(tree, work / "warm.cat", DEFAULT_CAP)  # page cache, and the user cache's views database
        results: dict[str, list[tuple[float, float, float]]] = {c: [] for c in caps}
        for r in range(args.rounds):
            for cap in caps:
                results[cap].append(ingest(tree, work / "cat", cap))
                wall, cpu, peak = results[cap][-1]
                print(
                    f"round {r + 1}: {cap:>6} {wall:6.2f} s wall, {cpu:6.2f} s CPU, {peak:5.0f} MiB",
                    flush=True,
                )
        load = os.getloadavg()[0]
    median = {c: tuple(statistics.median(x[i] for x in results[c]) for i in range(3)) for c in caps}
    base_wall, base_cpu, _ = median[DEFAULT_CAP]
    for cap in caps:
        wall, cpu, peak = median[cap]
        emit.summary(
            f"`dumpcat ingest --no-stats`, {args.tensors:,} tensors, writer cap {cap}: wall / CPU / peak "
            f"RSS of the process tree (medians of {args.rounds}), vs the {DEFAULT_CAP} default",
            "",
            f"{wall:.2f} s ({wall / base_wall:.2f}x) / {cpu:.2f} s ({cpu / base_cpu:.2f}x) / {peak:.0f} MiB",
        )
    emit.report_follows()
    model, memory = emit.cpu_and_memory()
    print(
        f"{args.tensors:,} synthetic tensors with statistic.csv (2 ranks, 20 iterations; {files:,} files), "
        f"`dumpcat ingest --no-stats` in a new process per ingest, {args.rounds} interleaved rounds of "
        f"every cap; {os.cpu_count()} cores ({model}), {memory:.1f} GiB, load {load:.1f} at the end. "
        f"The bare walk of the tree: {walk_s * 1000:.0f} ms.\n"
    )
    print(
        "| writer cap | wall (median) | vs default | CPU, process tree | vs default "
        "| peak RSS, process tree | wall / walk |"
    )
    print("|---|---|---|---|---|---|---|")
    for cap in caps:
        wall, cpu, peak = median[cap]
        mark = " (default)" if cap == DEFAULT_CAP else ""
        print(
            f"| {cap}{mark} | {wall:.2f} s | {wall / base_wall:.2f}x | {cpu:.2f} s | {cpu / base_cpu:.2f}x | "
            f"{peak:.0f} MiB | {wall / walk_s:.0f}x |"
        )


if __name__ == "__main__":
    main()
