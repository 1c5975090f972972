"""Time and peak memory of `dumpcat ingest` on the hostile dump against the same dump clean (issue 33).

The hostile tree is tests/hostile_tree.py's: the real MindSpore 2.10 `nan_log` dump with links out
of the root (to an npy, a folder, `/`, `/dev/zero`), FIFOs, a socket, truncated and garbage npy
files, 50 statistic.csv rows of 10^5-character names, a 64 MiB sparse json, a 16 GiB sparse npy,
names with terminal escapes and undecodable bytes, a folder 64 levels deep, and a file held
half-written. Both trees are ingested by a real `dumpcat ingest` process, interleaved, `--repeat`
times each; the report gives the medians of wall time and of the process's peak RSS (`wait4`'s
`ru_maxrss`), and their ratios (`python -m bench` puts it into docs/benchmarks.md).

    python bench/bench_hostile_ingest.py --repeat 5
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

from bench import emit  # noqa: E402
from tests.conftest import dump_of  # noqa: E402
from tests.hostile_tree import LEAF, GrowingNpy, _npy_name, build_hostile_tree  # noqa: E402


def ingest(root: Path, cat: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one `dumpcat ingest` into a new catalog."""
    shutil.rmtree(cat, ignore_errors=True)
    cmd = [sys.executable, "-m", "catalog.cli", "ingest", str(root), "-c", str(cat), "--run", "r"]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ingest of {root} failed: {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clean = Path(shutil.copytree(dump_of("nan_log"), work / "clean"))
        hostile = build_hostile_tree(work / "hostile", dump_of("nan_log"))
        growing = GrowingNpy(hostile.root / LEAF / _npy_name("Grow", 0))
        times: dict[str, list[float]] = {"clean": [], "hostile": []}
        rss: dict[str, list[float]] = {"clean": [], "hostile": []}
        for _ in range(args.repeat):
            for name, root in (("clean", clean), ("hostile", hostile.root)):
                wall, peak = ingest(root, work / f"{name}.cat")
                times[name].append(wall)
                rss[name].append(peak)
        growing.finish()
    t = {k: statistics.median(v) for k, v in times.items()}
    m = {k: statistics.median(v) for k, v in rss.items()}
    emit.summary(
        "hostile dump ingest: wall time vs the same dump clean",
        "",
        f"{t['hostile'] / t['clean']:.2f}x ({t['hostile']:.2f} s vs {t['clean']:.2f} s)",
    )
    emit.summary(
        "the same, peak RSS of the ingest",
        "< 1 GiB",
        f"{m['hostile']:.0f} MiB ({m['hostile'] / m['clean']:.2f}x the clean dump's)",
        m["hostile"] < 1024,
    )
    emit.report_follows()
    lines = [
        f"Medians of {args.repeat} interleaved runs of each tree.",
        "",
        "| tree | `dumpcat ingest` wall (s) | peak RSS (MiB) |",
        "|---|---|---|",
        f"| clean `nan_log` (180 tensors) | {t['clean']:.2f} | {m['clean']:.0f} |",
        f"| the same, hostile ({len(hostile.planted)} planted entries, 50 huge csv rows) "
        f"| {t['hostile']:.2f} | {m['hostile']:.0f} |",
        f"| ratio hostile / clean | {t['hostile'] / t['clean']:.2f}× | {m['hostile'] / m['clean']:.2f}× |",
        "",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
