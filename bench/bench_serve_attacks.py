"""A bystander's latency and the server's memory under each availability attack (issue 33).

Starts a real `dumpcat serve` (4 workers, 6 s statement timeout, --send-timeout 3, 12 connections)
on the committed nan_log dump and runs each attack of tests/catalog/server/test_server_availability.py in turn
while a bystander logs in anew and runs `SELECT 1` every 0.2 s (the stop-reading attack with 11
sessions: the 12th slot is the bystander's). Prints, per attack, the bystander's median and worst
latency beside its latency on the idle server (the baseline, same run), and the peak resident memory
of the server's process tree (main process, workers and spare).

    python bench/bench_serve_attacks.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import emit

from tests.catalog.server import test_server_availability as attacks
from tests.conftest import nan_log_catalog
from tests.hostile import ServeProcess

A = attacks
ATTACKS = {
    "idle server (baseline)": None,
    "4 sessions: SELECT 1, then a 10^12-row cross join": (
        A.test_sessions_that_ran_a_quick_statement_cannot_take_the_reserve
    ),
    "4 clients: 16 KB pathological Parse": A.test_pathological_parse_messages_leave_others_answered,
    "silent sockets and SSLRequests, reopened": A.test_sockets_that_never_log_in_take_no_login_slot,
    "11 sessions stop reading 80 MB": lambda srv: A.stop_reading_attack(srv, 11, check_outcomes=False),
    "4 heavy portals described and left": A.test_portals_described_and_left_hold_no_worker_past_the_deadline,
}


class Sampler:
    def __init__(self, srv: ServeProcess) -> None:
        self.srv, self.peak = srv, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.srv.tree_rss())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-attacks-") as tmp:
        folder = Path(tmp)
        cat = nan_log_catalog(folder)
        srv = ServeProcess(
            cat, folder, "--query-timeout", "6", "--max-concurrent", "4", "--max-connections", "12",
            "--max-pending", "16", "--login-timeout", "4", "--send-timeout", "3",
        )  # fmt: skip
        try:
            for name, attack in ATTACKS.items():  # one server, settled between attacks (as the tests do)
                attacks.settled(srv)
                with Sampler(srv) as rss, attacks.Bystander(srv, reconnect=True) as bystander:
                    if attack is None:
                        time.sleep(5)
                    else:
                        attack(srv)
                lat = bystander.latencies
                rows.append((name, statistics.median(lat), max(lat), len(bystander.errors), rss.peak))
                print(f"{name}: worst {max(lat) * 1000:.0f} ms", flush=True)
        finally:
            srv.stop()
    attacked = rows[1:]
    worst = max(attacked, key=lambda r: r[2])
    errors = sum(r[3] for r in rows)
    emit.summary(
        "`dumpcat serve` under availability attacks: a bystander's worst `SELECT 1` (logging in anew), "
        f"{len(attacked)} attacks",
        "< 1 s, no failed login",
        f"{worst[2] * 1000:.0f} ms ({worst[0]}; idle server {rows[0][2] * 1000:.0f} ms), {errors} failed",
        worst[2] < 1.0 and errors == 0,
    )
    emit.summary(
        "the same, peak RSS of the server's process tree",
        "< 4 GiB",
        f"{max(r[4] for r in rows) / 2**20:,.0f} MiB (idle {rows[0][4] / 2**20:,.0f} MiB)",
        max(r[4] for r in rows) < 4 * 2**30,
    )
    emit.report_follows()
    print(f"`python bench/bench_serve_attacks.py`; load average {os.getloadavg()[0]:.2f} at the end.\n")
    print("| attack | bystander median | bystander worst | server tree peak RSS |")
    print("|---|---|---|---|")
    for name, median, worst_s, failed, peak in rows:
        note = f" ({failed} errors)" if failed else ""
        print(f"| {name} | {median * 1000:.0f} ms | {worst_s * 1000:.0f} ms{note} | {peak / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()
