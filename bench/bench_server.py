"""Queries/s and p95 latency through `dumpcat serve` (psycopg) vs. in-process DuckDB on the same catalog.

    python bench/bench_server.py [--rounds 5] [--slice 1.5]

Builds a catalog from the committed nan_log dump in a temporary directory and starts two `dumpcat
serve` processes of this checkout on it (default limits: 4 statement workers): one whose workers'
DuckDB reads the catalog's files itself (`--reads auto`, where the kernel offers Landlock) and one
through Arrow datasets (`--reads arrow`). For a point lookup (by row_id) and the NaN query, at 1,
10 and 50 psycopg clients (server-side prepared statements), the two servers and in-process DuckDB
(threads with one `Catalog.cursor()` each) take turns in short slices (`--rounds` x `--slice`
seconds each), so a busy moment of the machine hits all three alike. Prints a markdown table of
queries/s, p95 latency and the ratios server / in-process (targets: >= 0.8x queries/s, p95 <= 2x).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import emit
from bench_server_compare import HERE, NAN, POINT, interleaved, local_client, server_client, start_server

from catalog.api import Catalog
from catalog.server import landlock
from tests.conftest import dump_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--slice", type=float, default=1.5)
    args = ap.parse_args()
    if landlock.abi_version() < 1:
        print("this kernel has no Landlock: both servers read through Arrow datasets")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cat"
        cat = Catalog.open(path, create=True)
        cat.ingest(dump_of("nan_log"), run="nan_log")
        row_id = cat.sql("SELECT row_id FROM stats ORDER BY row_id LIMIT 1").column(0)[0].as_py()
        servers = {reads: start_server(HERE, path, "--reads", reads, "--max-connections", "256")
                   for reads in ("auto", "arrow")}  # fmt: skip
        rows = []
        try:
            for name, sql, params in (("point lookup", POINT, [row_id]), ("NaN query", NAN, None)):
                for clients in (1, 10, 50):
                    qps, p95 = interleaved(
                        {"server": partial(server_client, servers["auto"][1], sql, params),
                         "arrow": partial(server_client, servers["arrow"][1], sql, params),
                         "in-process": partial(local_client, cat, sql, params)},
                        clients, args.rounds, args.slice,
                    )  # fmt: skip
                    rows.append((name, clients, qps, p95))
                    print(f"{name}, {clients} clients: {qps['server'] / qps['in-process']:.2f}x", flush=True)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
    report(rows, args)


def report(rows: list, args: argparse.Namespace) -> None:
    """The headline figures (BENCH-SUMMARY lines, per query: the ratios at every client count) and
    the markdown table."""
    for name in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == name]
        ratios = [q["server"] / q["in-process"] for _, _, q, _ in mine]
        p95s = [p["server"] / p["in-process"] for _, _, _, p in mine]
        counts = " / ".join(str(c) for _, c, _, _ in mine)
        emit.summary(f"`dumpcat serve` vs in-process DuckDB, {name}, queries/s at {counts} psycopg clients",
                     ">= 0.8x", " / ".join(f"{r:.2f}x" for r in ratios), min(ratios) >= 0.8)  # fmt: skip
        emit.summary(f"the same, p95 latency vs in-process, {name}", "<= 2x",
                     f"{min(p95s):.2f}-{max(p95s):.2f}x", max(p95s) <= 2.0)  # fmt: skip
    emit.report_follows()
    print(
        f"`python bench/bench_server.py --rounds {args.rounds} --slice {args.slice}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f} at the end.\n"
    )
    print("| query | clients | server q/s | p95 ms | Arrow-datasets server q/s | p95 ms "
          "| in-process q/s | p95 ms | server / in-process q/s | p95 server / in-process "
          "| Arrow server / in-process q/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, clients, qps, p95 in rows:
        local_qps, local_p95 = qps["in-process"], p95["in-process"]
        print(f"| {name} | {clients} | {qps['server']:.0f} | {p95['server']:.1f} "
              f"| {qps['arrow']:.0f} | {p95['arrow']:.1f} | {local_qps:.0f} | {local_p95:.1f} "
              f"| {qps['server'] / local_qps:.2f} | {p95['server'] / local_p95:.2f} "
              f"| {qps['arrow'] / local_qps:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
