"""Containment cost: `dumpcat serve` now vs. an earlier checkout vs. in-process DuckDB, interleaved.

    git worktree add BEFORE_DIR <commit>       # e.g. the last commit before the contained server
    python bench/bench_server_compare.py --before BEFORE_DIR [--rounds 6] [--slice 1.5]

Builds a catalog from the committed nan_log dump, starts the earlier checkout's server and this
one's as separate processes on it, and measures queries/s and p95 latency of a point lookup and
the NaN query at 1, 10 and 50 psycopg clients (server-side prepared statements). The three sides
take turns in short slices (`--rounds` × `--slice` seconds each), so a busy moment of the machine
hits all of them alike; the in-process side is threads with one `Catalog.cursor()` each. Prints a
markdown table: after/before is the containment's cost (1.00 = none).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import emit
import psycopg

from catalog.api import Catalog
from tests.conftest import dump_of

HERE = Path(__file__).resolve().parents[1]
POINT = "SELECT row_id, op_name, shape, max FROM stats WHERE row_id = %s"
NAN = "SELECT op_name, iteration, nan_count FROM stats WHERE nan_count > 0 ORDER BY iteration, exec_index"


def start_server(tree: Path, cat: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """`dumpcat serve` of the checkout at `tree` (with `args`), on a free port; returns (process, port)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from catalog.cli.commands import main; "
        "sys.argv = ['dumpcat', 'serve', sys.argv[2], '--port', '0', *sys.argv[3:]]; main()"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(tree), str(cat), *args], env=env, cwd=tree,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # (its workers hold the pipe open too: a failed start ends here, not at EOF)
        m = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(m.group(1))
        seen.append(line)
        if line.startswith("dumpcat: error"):
            break
    proc.terminate()
    proc.wait(30)
    raise RuntimeError(f"the server of {tree} did not start: {''.join(seen[-5:]).strip()}")


class Side:
    """One side of the comparison: a function making a per-client query callable."""

    def __init__(self, name: str, make) -> None:
        self.name, self.make = name, make
        self.count = 0
        self.seconds = 0.0
        self.latencies: list[float] = []


def run_slice(side: Side, workers: list, seconds: float) -> None:
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def body(q) -> None:
        mine = []
        while time.perf_counter() < stop:
            t = time.perf_counter()
            q()
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=body, args=(q,)) for q in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    side.count += len(lat)
    side.seconds += seconds
    side.latencies += lat


def interleaved(sides: dict[str, object], clients: int, rounds: int, seconds: float) -> tuple[dict, dict]:
    """Queries/s and p95 ms of each side (name -> function making one client's query callable),
    the sides taking turns in `rounds` slices of `seconds` each with `clients` clients."""
    runs = [Side(name, make) for name, make in sides.items()]
    pools = {s.name: [s.make() for _ in range(clients)] for s in runs}
    for _ in range(rounds):
        for s in runs:
            run_slice(s, pools[s.name], seconds)
    qps = {s.name: s.count / s.seconds for s in runs}
    p95 = {s.name: statistics.quantiles(s.latencies, n=20)[-1] * 1000 for s in runs}
    return qps, p95


def server_client(port: int, sql: str, params):
    """A psycopg client of the server on `port` running `sql` as a server-side prepared statement."""
    c = psycopg.connect(host="127.0.0.1", port=port, user="u", dbname="d", autocommit=True)
    return lambda: c.execute(sql, params, prepare=True).fetchall()


def local_client(cat: Catalog, sql: str, params):
    """The same query on a cursor of its own of the in-process catalog."""
    cur = cat.cursor()
    q = sql.replace("%s", "?")
    return lambda: cur.sql(q, params=params).to_arrow_table()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", type=Path, required=True, help="checkout of the earlier commit")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--slice", type=float, default=1.5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cat"
        cat = Catalog.open(path, create=True)
        cat.ingest(dump_of("nan_log"), run="nan_log")
        row_id = cat.sql("SELECT row_id FROM stats ORDER BY row_id LIMIT 1").column(0)[0].as_py()
        before, before_port = start_server(args.before.resolve(), path)
        after, after_port = start_server(HERE, path)
        rows = []
        try:
            for name, sql, params in (("point lookup", POINT, [row_id]), ("NaN query", NAN, None)):
                for clients in (1, 10, 50):
                    qps, p95 = interleaved(
                        {"after": partial(server_client, after_port, sql, params),
                         "before": partial(server_client, before_port, sql, params),
                         "in-process": partial(local_client, cat, sql, params)},
                        clients, args.rounds, args.slice,
                    )  # fmt: skip
                    rows.append((name, clients, qps, p95))
                    print(
                        f"{name}, {clients} clients: after / before {qps['after'] / qps['before']:.2f}x",
                        flush=True,
                    )
        finally:
            for proc in (before, after):
                proc.terminate()
                proc.wait(30)
    report(rows, args)


def report(rows: list, args: argparse.Namespace) -> None:
    """BENCH-SUMMARY lines (per query: after / before at every client count) and the table."""
    before = (
        subprocess.run(
            ["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "a checkout outside git"
    )  # (its path would name this machine's folders)
    for name in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == name]
        counts = " / ".join(str(c) for _, c, _, _ in mine)
        emit.summary(
            f"`dumpcat serve` now vs the checkout given by --before ({before}), {name}, queries/s at "
            f"{counts} psycopg clients",
            "-",
            " / ".join(f"{q['after'] / q['before']:.2f}x" for _, _, q, _ in mine),
        )
    emit.report_follows()
    print(
        f"`python bench/bench_server_compare.py --before CHECKOUT --rounds {args.rounds} "
        f"--slice {args.slice}` (CHECKOUT at {before}); load average {os.getloadavg()[0]:.1f} at the end.\n"
    )
    print(
        "| query | clients | after q/s | after p95 ms | before q/s | before p95 ms | in-process q/s "
        "| after / before q/s | after / in-process q/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, clients, qps, p95 in rows:
        a, b, local_qps = qps["after"], qps["before"], qps["in-process"]
        print(
            f"| {name} | {clients} | {a:.0f} | {p95['after']:.1f} | {b:.0f} | {p95['before']:.1f} "
            f"| {local_qps:.0f} | {a / b:.2f} | {a / local_qps:.2f} |"
        )


if __name__ == "__main__":
    main()
