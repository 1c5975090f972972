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
    ingest_all(Path(tempfile.mkdtemp(prefix="bench-runs-")), shared=False)  # warm: caches, imports
    times: dict[str, list[tuple[float, float]]] = {"own": [], "shared": []}
    for _ in range(args.rounds):
        for how in ("own", "shared"):
            times[how].append(
                ingest_all(Path(tempfile.mkdtemp(prefix="bench-runs-")), shared=how == "shared")
            )
    med = {
        how: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
        for how, t in times.items()
    }
    print(f"{len(ROOTS)} committed dumps, median of {args.rounds}:")
    print(f"  a catalog each   wall {med['own'][0]:6.2f} s   CPU {med['own'][1]:6.2f} s")
    print(
        f"  one catalog      wall {med['shared'][0]:6.2f} s   CPU {med['shared'][1]:6.2f} s   "
        f"{med['shared'][1] / med['own'][1]:.2f}x the CPU of a catalog each"
    )


if __name__ == "__main__":
    main()
