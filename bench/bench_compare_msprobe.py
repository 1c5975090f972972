"""dumpcat vs `msprobe compare` on the same two msprobe statistics dumps.

The pair is tests/data/msprobe/compare_fp16 (run) and compare_fp32 (baseline), step 0, rank 0, or
a bigger pair built from them (`--repeat-entries N`: every entry of each dump.json repeated N times
with fresh call counts, the same in both). msprobe's side is its CLI on the two dump.json files
(`msprobe compare -tp … -gp … -o …`, statistics mode), run from a Python where msprobe is installed
(`--msprobe PATH` to its executable); dumpcat's side is ingesting both dumps into a fresh catalog
and reading `compare_stats(run, baseline)` in full, in this process. Rounds interleave, best of
`--rounds`, at two sizes by default (31 and 3,100 entries per dump). Both produce the same numbers
(tests/catalog/test_compare.py checks them against msprobe's CSV). Prints BENCH-SUMMARY lines (one
per size) and its report, so `python -m bench` generates its section.

    python bench/bench_compare_msprobe.py --msprobe <producer venv>/bin/msprobe
    python bench/bench_compare_msprobe.py --msprobe <producer venv>/bin/msprobe --repeat-entries 200
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
from bench_msprobe import renamed_key  # noqa: E402

DATA = HERE.parent / "tests" / "data" / "msprobe"


def build(src: Path, dst: Path, repeat: int) -> Path:
    """A copy of `src`'s step0/rank0 with every entry repeated `repeat` times; its dump.json."""
    rank = dst / "step0" / "rank0"
    rank.mkdir(parents=True)
    doc = json.loads((src / "step0" / "rank0" / "dump.json").read_text())
    data = {renamed_key(k, c): v for c in range(repeat) for k, v in doc["data"].items()}
    (rank / "dump.json").write_text(json.dumps(dict(doc, data=data), indent=1))
    return rank / "dump.json"


def _msprobe_version(msprobe: str) -> str:
    """The msprobe package's version, from the Python its executable runs under ("?" if unknown)."""
    try:
        first = Path(msprobe).read_text(errors="replace").splitlines()[0]
        python = first[2:].strip() if first.startswith("#!") else sys.executable
        code = "from importlib.metadata import version; print(version('mindstudio-probe'))"
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "?"
    except (OSError, IndexError, subprocess.SubprocessError):
        return "?"


def measure(work: Path, repeat: int, rounds: int, msprobe: str | None) -> dict:
    """One size: both dumps with every entry repeated `repeat` times; dumpcat's and msprobe's times,
    rounds interleaved."""
    from catalog import Catalog

    run_json = build(DATA / "compare_fp16", work / f"fp16x{repeat}", repeat)
    base_json = build(DATA / "compare_fp32", work / f"fp32x{repeat}", repeat)
    entries = len(json.loads(run_json.read_text())["data"])
    ours: list[float] = []
    theirs: list[float] = []
    rows = 0
    for i in range(rounds):
        cat_dir = work / f"cat{repeat}_{i}"
        t = time.perf_counter()
        cat = Catalog.open(cat_dir, create=True)
        cat.ingest(work / f"fp16x{repeat}", run="fp16")
        cat.ingest(work / f"fp32x{repeat}", run="fp32")
        rows = cat.sql("SELECT * FROM compare_stats('fp16', 'fp32')").num_rows
        ours.append(time.perf_counter() - t)
        cat.close()
        shutil.rmtree(cat_dir)
        if msprobe:
            out = work / f"msprobe{repeat}_{i}"
            out.mkdir()
            t = time.perf_counter()
            subprocess.run(
                [msprobe, "compare", "-tp", str(run_json), "-gp", str(base_json), "-o", str(out)],
                check=True, capture_output=True,
            )  # fmt: skip
            theirs.append(time.perf_counter() - t)
        print(f"{entries:,} entries, round {i + 1}: dumpcat {ours[-1]:.2f} s"
              + (f", msprobe compare {theirs[-1]:.2f} s" if theirs else ""), flush=True)  # fmt: skip
    return {"entries": entries, "rows": rows, "ours": ours, "theirs": theirs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--msprobe", help="the msprobe executable (a Python with msprobe installed)")
    p.add_argument(
        "--repeat-entries", type=int, action="append",
        help="one size: every entry repeated N times (repeatable; default: 1 and 100, 31 and 3,100 entries)",
    )  # fmt: skip
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    started = time.time()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as td:
        results = [measure(Path(td), n, args.rounds, args.msprobe) for n in args.repeat_entries or (1, 100)]
    for r in results:
        size = f"{r['entries']:,} entries per dump ({r['rows']:,} compared rows)"
        best = min(r["ours"])
        if r["theirs"]:
            ratio = min(r["theirs"]) / best
            emit.summary(
                "statistics comparison of two msprobe dumps (ingest both + `compare_stats`) vs "
                f"`msprobe compare` on the same dump.json files, {size}",
                "faster", f"{ratio:.1f}x faster ({best:.2f} s vs {min(r['theirs']):.2f} s)", ratio > 1.0,
            )  # fmt: skip
        else:
            emit.summary(f"dumpcat: ingest both msprobe dumps + `compare_stats`, {size}", "", f"{best:.2f} s")
    if not args.msprobe:
        print("msprobe not given (--msprobe): only dumpcat's side was timed")
    emit.report_follows()
    version = "msprobe " + _msprobe_version(args.msprobe) if args.msprobe else "msprobe not run"
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, {version}, load average {load:.1f} at the "
          f"start, {os.getloadavg()[0]:.1f} at the end, {time.time() - started:.0f} s; rounds interleaved, "
          f"best of {args.rounds}.\n")  # fmt: skip
    print(
        "| entries per dump | dumpcat | `msprobe compare` | msprobe / dumpcat | rounds (dumpcat; msprobe) |"
    )
    print("|---|---|---|---|---|")
    for r in results:
        ours = ", ".join(f"{x:.2f}" for x in r["ours"])
        theirs = ", ".join(f"{x:.2f}" for x in r["theirs"]) or "-"
        if r["theirs"]:
            cells = f"{min(r['theirs']):.2f} s | {min(r['theirs']) / min(r['ours']):.1f}x"
        else:
            cells = "not run | -"
        print(f"| {r['entries']:,} ({r['rows']:,} compared rows) | {min(r['ours']):.2f} s | {cells} | "
              f"{ours}; {theirs} s |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
