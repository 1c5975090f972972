"""Load: 50 concurrent psycopg clients for a bounded time while the in-process watcher ingests."""

from __future__ import annotations

import shutil
import threading
import time

import psutil
import psycopg

from catalog.api import Catalog
from catalog.server.server import Limits, Server
from tests.conftest import dump_of

CLIENTS, SECONDS = 50, 6.0
QUERIES = [
    ("SELECT count(*) FROM stats", None),
    (
        "SELECT op_name, iteration, nan_count FROM stats WHERE nan_count > 0 ORDER BY iteration, exec_index",
        None,
    ),
    ("SELECT row_id, shape FROM tensors WHERE row_id = %s", "row_id"),
    ("SELECT * FROM first_anomaly", None),
    ("SELECT * FROM range(100000)", "refused"),  # over the row cap: an intended refusal
]


def test_fifty_clients_while_watcher_ingests(tmp_path):
    cat = tmp_path / "cat"
    Catalog.open(cat, create=True).ingest(dump_of("nan_log"), run="nan_log")
    live = tmp_path / "live"
    live.mkdir()
    limits = Limits(query_timeout=10, max_rows=10_000, max_concurrent=8)
    proc = psutil.Process()
    errors: list[str] = []
    counts = {"ok": 0, "refused": 0}
    lock = threading.Lock()
    with Server(cat, port=0, watch=live, run="live", limits=limits) as srv:
        rss0 = proc.memory_info().rss
        stop = time.monotonic() + SECONDS

        def client(i: int) -> None:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=srv.port, user="u", dbname="d", autocommit=True
                ) as c:
                    row_id = c.execute("SELECT min(row_id) FROM tensors").fetchall()[0][0]
                    n = 0
                    while time.monotonic() < stop:
                        q, kind = QUERIES[(i + n) % len(QUERIES)]
                        n += 1
                        try:
                            c.execute(q, [row_id] if kind == "row_id" else None).fetchall()
                            with lock:
                                counts["ok"] += 1
                        except psycopg.errors.ProgramLimitExceeded:
                            with lock:
                                counts["refused"] += 1
            except Exception as exc:
                with lock:
                    errors.append(f"client {i}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        shutil.copytree(dump_of("nan_log"), live, dirs_exist_ok=True)  # the watcher ingests meanwhile
        for t in threads:
            t.join(SECONDS + 60)
        deadline = time.monotonic() + 20
        with psycopg.connect(host="127.0.0.1", port=srv.port, user="u", dbname="d", autocommit=True) as c:
            while time.monotonic() < deadline:
                if c.execute("SELECT count(*) FROM tensors WHERE run = 'live'").fetchall()[0][0] > 0:
                    break
                time.sleep(0.5)
            live_rows = c.execute("SELECT count(*) FROM tensors WHERE run = 'live'").fetchall()[0][0]
        grown = (proc.memory_info().rss - rss0) / 2**20
    assert not errors, errors[:5]
    assert counts["ok"] > CLIENTS and counts["refused"] > 0
    assert live_rows > 0  # the watcher's commits became visible to the server's clients
    assert grown < 1024, f"RSS grew {grown:.0f} MiB"
