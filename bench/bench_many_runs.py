"""Does a commit cost more in a catalog that already holds many runs?

A platform team keeps many jobs in one catalog. Each commit resolves its batch's names in the
writer's DuckDB (ingest/storage/flat.py); that resolution reads the run's own files only, so the
k-th run should cost what the first did. Measured in one process, interleaved: every committed
dump of tests/data (one per producer and layout, 35 trees) ingested one after the other into one
catalog, against each ingested into a catalog of its own (the baseline). CPU and wall seconds.

    python bench/bench_many_runs.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import emit  # noqa: E402
from ingest.pipeline import ingest_dump  # noqa: E402
from tests.ingest.storage.test_flat import ROOTS, _run_name  # noqa: E402


def ingest_all(base: Path, *, shared: bool) -> tuple[float, float]:
    """(wall, CPU) seconds to ingest every tree of ROOTS, into one catalog or one catalog each."""
    wall, cpu = time.perf_counter(), time.process_time()
    for k, root in enumerate(ROOTS):
        ingest_dump(base / ("one" if shared else f"cat{k}"), root, run=_run_name(root), workers=1)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-runs-") as tmp:
        work = Path(tmp)
        ingest_all(work / "warm", shared=False)  # warm: caches, imports
        times: dict[str, list[tuple[float, float]]] = {"own": [], "shared": []}
        for i in range(args.rounds):
            for how in ("own", "shared"):
                times[how].append(ingest_all(work / f"{how}{i}", shared=how == "shared"))
    med = {
        how: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
        for how, t in times.items()
    }
    ratio = med["shared"][1] / med["own"][1]
    emit.summary(
        f"ingesting {len(ROOTS)} dumps into one catalog vs a catalog each, CPU",
        "",
        f"{ratio:.2f}x ({med['shared'][1]:.2f} s vs {med['own'][1]:.2f} s)",
    )
    emit.report_follows()
    print(f"{len(ROOTS)} committed dumps, one after the other, median of {args.rounds} interleaved rounds:")
    print()
    print("| | wall s | CPU s |")
    print("|---|---|---|")
    print(f"| each into a catalog of its own (baseline) | {med['own'][0]:.2f} | {med['own'][1]:.2f} |")
    print(f"| all into one catalog | {med['shared'][0]:.2f} | {med['shared'][1]:.2f} |")
    print(f"| ratio | {med['shared'][0] / med['own'][0]:.2f}x | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
