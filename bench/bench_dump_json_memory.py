"""Peak memory of `dumpcat ingest` on one big msprobe dump.json (issue 33: a 255 MB file took 2.4 GB).

Builds a dump.json of `--entries` entries (bench_msprobe's generator: the real entries of
tests/data/msprobe/pt_md5 repeated; 320,000 entries are ~250 MB) with its stack.json and
construct.json, then runs a real `dumpcat ingest` of it in a new process, with `--workers 1` (one
process) and with the default workers, and reports its wall time and peak RSS: the largest process's
(`ru_maxrss`) and the process tree's sum (sampled every 20 ms with psutil). With `--baseline DIR`
(a checkout of another version, e.g. `git archive` of the commit before), the same runs of that
version are interleaved with this one's, and the ratios printed.

    python bench/bench_dump_json_memory.py --baseline BEFORE_DIR
    python bench/bench_dump_json_memory.py --entries 50000 --repeat 1
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
from bench_msprobe import build  # noqa: E402

_MEASURE = """
import resource, subprocess, sys
out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(out.stdout.strip().splitlines()[-1] + "\\n" if out.returncode == 0 else out.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, out.returncode)
"""


def run(src: Path, dump: Path, cat: Path, workers: int | None) -> tuple[float, int, int, str]:
    """(seconds, largest process's peak RSS, sampled peak of the tree's summed RSS, summary line)."""
    cmd = [sys.executable, "-m", "catalog.cli", "ingest", str(dump), "-c", str(cat), "--run", "r"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _MEASURE, *cmd], cwd=src, stdout=subprocess.PIPE, text=True
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        top = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [top, *top.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    out, _ = proc.communicate()
    done.set()
    thread.join()
    seconds = time.perf_counter() - started
    summary, last = out.strip().rsplit("\n", 1)
    maxrss_kib, code = (int(x) for x in last.split())
    if code != 0:
        raise SystemExit(f"ingest failed in {src}:\n{summary}")
    return seconds, maxrss_kib << 10, peak, summary.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=320_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--baseline", type=Path, default=None, help="a checkout of the version to compare with")
    args = p.parse_args()
    versions = {"this": HERE.parent}
    if args.baseline is not None:
        versions["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory() as td:
        work = Path(td)
        path, entries, tensors = build(work, args.entries)
        size = path.stat().st_size
        print(f"dump.json: {entries:,} entries, {tensors:,} tensors, {size / 1e6:.1f} MB")
        best: dict[tuple[str, int | None], tuple[float, int, int]] = {}
        for i in range(args.repeat):
            for workers in (1, None):
                for name, src in versions.items():
                    cat = work / f"cat_{name}_{workers}_{i}"
                    seconds, maxrss, tree, summary = run(src, work / "dump", cat, workers)
                    shutil.rmtree(cat)
                    label = "workers=1" if workers == 1 else "default workers"
                    print(
                        f"  {name:8} {label:15} {seconds:6.2f} s  largest process {maxrss / 2**20:7.0f} MiB  "
                        f"tree {tree / 2**20:7.0f} MiB   ({summary.split(': ', 1)[-1]})"
                    )
                    old = best.get((name, workers))
                    best[(name, workers)] = (
                        min(seconds, old[0]) if old else seconds,
                        min(maxrss, old[1]) if old else maxrss,
                        min(tree, old[2]) if old else tree,
                    )
        for workers in (1, None):
            t1, m1, s1 = best[("this", workers)]
            label = "one process (`--workers 1`)" if workers == 1 else "default workers"
            emit.summary(
                f"`dumpcat ingest` of a {size / 1e6:.0f} MB msprobe dump.json ({entries:,} entries), "
                f"{label}: peak RSS of the process tree",
                "",
                f"{s1 / 2**20:,.0f} MiB (largest process {m1 / 2**20:,.0f} MiB), {t1:.1f} s",
            )
        if "baseline" in versions:
            for workers in (1, None):
                (t1, m1, s1), (t0, m0, s0) = best[("this", workers)], best[("baseline", workers)]
                label = "workers=1" if workers == 1 else "default workers"
                print(
                    f"{label}: time {t1:.2f} / {t0:.2f} s = {t1 / t0:.2f}x; largest process "
                    f"{m1 / 2**20:.0f} / {m0 / 2**20:.0f} MiB = {m1 / m0:.2f}x; tree {s1 / 2**20:.0f} / "
                    f"{s0 / 2**20:.0f} MiB = {s1 / s0:.2f}x"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
