"""Queries/s and p95 latency through `dumpcat serve` (psycopg) vs. in-process DuckDB on the same catalog.

    python bench/bench_server.py [--seconds 5]

Builds a catalog from the committed nan_log dump in a temporary directory, then for a point lookup
(by row_id) and the NaN query, at 1, 10 and 50 concurrent clients, runs each side for the same
time: server = psycopg connections to an in-process `Server` (its default limits: 4 statement
worker processes on the contained engine); baseline = threads each with its own `Catalog.cursor()`
(DuckDB reading the parquet files itself). Prints a markdown table with the ratio
server/in-process. Run it at an older commit for the "before" figures: the ratio cancels out the
machine's speed, so before/after ratios compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from catalog.api import Catalog
from catalog.server.server import Limits, Server
from tests.conftest import dump_of

POINT = "SELECT row_id, op_name, shape, max FROM stats WHERE row_id = $1"
NAN = "SELECT op_name, iteration, nan_count FROM stats WHERE nan_count > 0 ORDER BY iteration, exec_index"


def run(clients: int, seconds: float, make_worker) -> tuple[float, float]:
    lat: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    stop = [0.0]

    def body(i: int) -> None:
        q = make_worker()
        barrier.wait()
        mine = []
        while time.perf_counter() < stop[0]:
            t = time.perf_counter()
            q()
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    stop[0] = time.perf_counter() + seconds
    barrier.wait()
    for t in threads:
        t.join()
    p95 = statistics.quantiles(lat, n=20)[-1] if len(lat) > 1 else lat[0]
    return len(lat) / seconds, p95 * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cat"
        cat = Catalog.open(path, create=True)
        cat.ingest(dump_of("nan_log"), run="nan_log")
        row_id = cat.sql("SELECT row_id FROM stats ORDER BY row_id LIMIT 1").column(0)[0].as_py()
        srv = Server(path, port=0, limits=Limits(max_connections=256)).start()  # default workers
        print("| query | clients | server q/s | server p95 ms | in-process q/s | in-process p95 ms "
              "| q/s ratio |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        try:
            for name, sql, params in (("point lookup", POINT, [row_id]), ("NaN query", NAN, None)):
                for clients in (1, 10, 50):

                    def server_worker(sql=sql, params=params):
                        c = psycopg.connect(
                            host="127.0.0.1", port=srv.port, user="u", dbname="d", autocommit=True
                        )
                        q = sql.replace("$1", "%s")
                        return lambda: c.execute(q, params, prepare=True).fetchall()

                    def local_worker(sql=sql, params=params):
                        cur = cat.cursor()
                        return lambda: cur.sql(sql, params=params).to_arrow_table()

                    sq, sp = run(clients, args.seconds, server_worker)
                    lq, lp = run(clients, args.seconds, local_worker)
                    print(
                        f"| {name} | {clients} | {sq:.0f} | {sp:.2f} | {lq:.0f} | {lp:.2f} | {sq / lq:.2f} |"
                    )
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
