"""Issue 37: what `nan_origin` (which rank started it) costs against `first_anomaly` (the baseline),
on a synthetic 64-rank catalog, in one process, interleaved.

The catalog is bench/bench_scale.py's (a MindSpore 2.4+ Ascend dump as a one-shot ingest leaves it,
written directly): 64 ranks x `--iterations` steps x `--step-rows` statistic rows, an `AllReduce`
kernel after each layer's gradients (`collectives=True`), 5 % of the steps going bad at one kernel
with NaN spreading to the 30 kernels after it on that rank. The synthetic NaN does not cross ranks
(each bad step is its own origin), so the figure is the cost of the view's scans and joins over
collectives, not of a long chain of received ranks.

Each round runs `SELECT * FROM first_anomaly` and `SELECT * FROM nan_origin` (order alternating),
after one warm-up of each; the figure is the median over rounds of nan_origin's time over
first_anomaly's in the same round. Target (issue 37): <= 1.2x.

    python bench/bench_nan_origin.py [--iterations 8] [--step-rows 2000] [--rounds 21]
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

from bench import bench_scale, emit  # noqa: E402
from catalog import Catalog  # noqa: E402

RANKS = 64
TARGET = 1.2
QUERIES = {
    "first_anomaly": "SELECT * FROM first_anomaly",
    "nan_origin": "SELECT * FROM nan_origin",
}


def measure(cat: Catalog, rounds: int) -> tuple[dict[str, list[float]], list[float]]:
    """Wall seconds of each query per round, and nan_origin's over first_anomaly's per round."""
    for text in QUERIES.values():
        cat.sql(text)  # warm-up: binds the views, reads the files once
    times: dict[str, list[float]] = {name: [] for name in QUERIES}
    ratios = []
    names = list(QUERIES)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            cat.sql(QUERIES[name])
            times[name].append(time.perf_counter() - t0)
        ratios.append(times["nan_origin"][-1] / times["first_anomaly"][-1])
    return times, ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=8, help="steps per rank")
    parser.add_argument("--step-rows", type=int, default=2000, help="statistic rows per step and rank")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args(argv)
    rows = RANKS * args.iterations * args.step_rows
    with tempfile.TemporaryDirectory(prefix="bench-nan-origin-") as tmp:
        path = Path(tmp) / "cat"
        t0 = time.perf_counter()
        bench_scale.generate(
            path, rows, step_rows=args.step_rows, iterations=args.iterations, collectives=True
        )
        print(f"generated {rows:,} rows, {RANKS} ranks, in {time.perf_counter() - t0:.1f} s", flush=True)
        cat = Catalog.open(path)
        try:
            counts = cat.sql(
                "SELECT (SELECT count(*) FROM first_anomaly) AS first_rows, "
                "(SELECT count(*) FROM nan_origin) AS origin_rows, "
                "(SELECT count(*) FROM communication_ops) AS collectives, "
                "(SELECT count(DISTINCT rank) FROM communication_ops) AS ranks"
            ).to_pylist()[0]
            assert counts["ranks"] == RANKS and counts["origin_rows"] > 0, counts
            times, ratios = measure(cat, args.rounds)
        finally:
            cat.close()
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    ratio = statistics.median(ratios)
    print(
        f"first_anomaly {ms['first_anomaly']:.1f} ms, nan_origin {ms['nan_origin']:.1f} ms, "
        f"ratio {ratio:.2f}x (rounds {args.rounds})",
        flush=True,
    )
    emit.summary(
        f"nan_origin vs first_anomaly, {RANKS} ranks, {rows:,} statistic rows",
        f"<= {TARGET}x",
        f"{ratio:.2f}x",
        ratio <= TARGET,
    )
    emit.report_follows()
    cpu, mem = emit.cpu_and_memory()
    print(
        f"A synthetic catalog of {rows:,} statistic rows: {RANKS} ranks x {args.iterations} steps x "
        f"{args.step_rows:,} rows, {counts['collectives']:,} `AllReduce` calls in `communication_ops`, "
        f"{counts['first_rows']} rows of `first_anomaly`, {counts['origin_rows']} of `nan_origin` "
        f"({cpu or 'CPU unknown'}, {mem:.0f} GiB). Median of {args.rounds} interleaved rounds, "
        "wall time of `Catalog.sql` (the result as Arrow):\n"
    )
    print("| query | median ms |")
    print("|---|---|")
    for name, value in ms.items():
        print(f"| `SELECT * FROM {name}` | {value:.1f} |")
    print(
        f"\nnan_origin / first_anomaly, median of the per-round ratios: **{ratio:.2f}x** "
        f"(target <= {TARGET}x)."
    )
    print(
        "\n`nan_origin` is two parts: `nan_origin_ranks`, one row per rank and step with an anomaly (its "
        "first anomaly, the collective call it is an output of, the ranks it received it from), which "
        "reads the anomalous statistics and `communication_ops` and depends on the snapshot alone, so "
        "the snapshot's views database stores it (catalog/views.py STORED_VIEWS) like "
        "`communication_ops`; and the step's answer from those few rows (the origin, the ranks it reached, "
        "the step an inherited anomaly points back to). `first_anomaly` reads the anomalous statistics at "
        "query time."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
