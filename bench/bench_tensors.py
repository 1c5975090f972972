"""Many tensors in one call: `Catalog.tensors(ids)` against a loop of `Catalog.tensor(id)` over the
same ids (the baseline), in one process, interleaved, on the committed dumps of each producer whose
tensors dumpcat reads: MindSpore npy (ms210/nan_log and lowp), raw Ascend (ascend_raw/nan_log_rank,
device layouts among them), msprobe (pt_mix_tensor) and MindSpore .bin (kernels_filter_device).

Both read every tensor of a run, memory-mapped where the bytes are the values; `tensors` searches
the location index once for all ids and opens and maps each file once for all the tensors it holds.
Wall milliseconds, median of the rounds, and the loop's time over the batch's.

    python bench/bench_tensors.py [--rounds 15]
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
from catalog import Catalog  # noqa: E402

DATA = ROOT / "tests" / "data"
PRODUCERS = {
    "mindspore-npy": ["ms210/nan_log/dump", "ms210/lowp/dump"],
    "ascend-raw": ["ascend_raw/nan_log_rank"],
    "msprobe": ["msprobe/pt_mix_tensor"],
    "mindspore-bin": ["mindspore_bin/kernels_filter_device"],
}


def measure(cat: Catalog, ids: list[int], rounds: int) -> tuple[float, float]:
    """Median wall ms of the loop and of the batch, interleaved (one warm-up of each first)."""
    loop, batch = [], []
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        looped = [cat.tensor(row_id) for row_id in ids]
        t1 = time.perf_counter()
        batched = cat.tensors(ids)
        t2 = time.perf_counter()
        assert len(looped) == len(batched) == len(ids)
        if i:
            loop.append(t1 - t0)
            batch.append(t2 - t1)
    return 1e3 * statistics.median(loop), 1e3 * statistics.median(batch)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tensors-") as tmp:
        cat = Catalog.open(Path(tmp) / "cat", create=True)
        for producer, trees in PRODUCERS.items():
            for i, tree in enumerate(trees):
                cat.ingest(DATA / tree, run=f"{producer}-{i}", producer=producer)
        rows = []
        for producer in PRODUCERS:
            ids = cat.sql("SELECT row_id FROM tensors WHERE producer = ? ORDER BY row_id", [producer])
            ids = ids.column("row_id").to_pylist()
            loop_ms, batch_ms = measure(cat, ids, args.rounds)
            rows.append((producer, len(ids), loop_ms, batch_ms))
            print(
                f"{producer}: {len(ids)} tensors, loop {loop_ms:.1f} ms, tensors() {batch_ms:.1f} ms",
                flush=True,
            )
        cat.close()
    for producer, n, loop_ms, batch_ms in rows:
        emit.summary(
            f"Catalog.tensors vs a tensor() loop, {producer} ({n} tensors)", "", f"{loop_ms / batch_ms:.2f}x"
        )
    emit.report_follows()
    print(
        f"Every tensor of the committed dumps of each producer, median of {args.rounds} interleaved rounds:\n"
    )
    print("| producer | tensors | loop of `tensor()` ms (baseline) | `tensors(ids)` ms | speed-up |")
    print("|---|---|---|---|---|")
    for producer, n, loop_ms, batch_ms in rows:
        print(f"| {producer} | {n} | {loop_ms:.1f} | {batch_ms:.1f} | {loop_ms / batch_ms:.2f}x |")


if __name__ == "__main__":
    main()
