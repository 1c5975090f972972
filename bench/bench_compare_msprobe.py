"""dumpcat vs `msprobe compare` on the same two msprobe statistics dumps.

The pair is tests/data/msprobe/compare_fp16 (run) and compare_fp32 (baseline), step 0, rank 0, or
a bigger pair built from them (`--repeat-entries N`: every entry of each dump.json repeated N times
with fresh call counts, the same in both). msprobe's side is its CLI on the two dump.json files
(`msprobe compare -tp … -gp … -o …`, statistics mode), run from a Python where msprobe is installed
(`--msprobe PATH` to its executable); dumpcat's side is ingesting both dumps into a fresh catalog
and reading `compare_stats(run, baseline)` in full, in this process. Rounds interleave, best of
`--rounds`. Both produce the same numbers (tests/catalog/test_compare.py checks them against msprobe's CSV).

    python bench/bench_compare_msprobe.py --msprobe <producer venv>/bin/msprobe
    python bench/bench_compare_msprobe.py --msprobe <producer venv>/bin/msprobe --repeat-entries 200
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_core import Report, machine  # noqa: E402
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--msprobe", help="the msprobe executable (a Python with msprobe installed)")
    p.add_argument("--repeat-entries", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from catalog import Catalog

    rep = Report()
    started = time.time()
    with tempfile.TemporaryDirectory() as td:
        work = Path(td)
        run_json = build(DATA / "compare_fp16", work / "fp16", args.repeat_entries)
        base_json = build(DATA / "compare_fp32", work / "fp32", args.repeat_entries)
        entries = len(json.loads(run_json.read_text())["data"])
        ours: list[float] = []
        theirs: list[float] = []
        rows = 0
        for i in range(args.rounds):
            cat_dir = work / f"cat{i}"
            t = time.perf_counter()
            cat = Catalog.open(cat_dir, create=True)
            cat.ingest(work / "fp16", run="fp16")
            cat.ingest(work / "fp32", run="fp32")
            rows = cat.sql("SELECT * FROM compare_stats('fp16', 'fp32')").num_rows
            ours.append(time.perf_counter() - t)
            cat.close()
            shutil.rmtree(cat_dir)
            if args.msprobe:
                out = work / f"msprobe{i}"
                out.mkdir()
                t = time.perf_counter()
                subprocess.run(
                    [args.msprobe, "compare", "-tp", str(run_json), "-gp", str(base_json), "-o", str(out)],
                    check=True, capture_output=True,
                )  # fmt: skip
                theirs.append(time.perf_counter() - t)
        best = min(ours)
        rounds = ", ".join(f"{x:.2f}" for x in ours)
        note = f"{entries:,} entries per dump, {rows:,} compared rows; rounds {rounds} s"
        rep.add("a", "dumpcat: ingest both + compare_stats", best, "s", note=note)
        if theirs:
            fastest = min(theirs)
            rep.add(
                "a", "msprobe compare (CLI) / dumpcat", fastest, "s", baseline=best, ratio=fastest / best,
                target="dumpcat faster", ok=fastest > best,
                note="rounds " + ", ".join(f"{x:.2f}" for x in theirs) + " s",
            )  # fmt: skip
        else:
            print("msprobe not given (--msprobe): only dumpcat's side was timed")
    params = {
        "command": "python bench/bench_compare_msprobe.py " + " ".join(sys.argv[1:]),
        "total runtime": f"{time.time() - started:.0f} s",
    }
    print()
    print(rep.markdown(machine(), params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
