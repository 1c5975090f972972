"""What starting a statement worker of `dumpcat serve` costs: forked by the launcher, or a program.

The server's workers are forked by one launcher process that imported their modules once
(catalog/server/worker_launcher.py). The baseline is what each worker cost before: a Python
program (`python -m catalog.server.statement_worker`) that imports DuckDB, Arrow, the guard and
the PostgreSQL front itself. Both open the contained engine on the same catalog, warm up and say
READY on their socket; measured interleaved in one process, CPU seconds of the worker (user +
system, from the process's own accounting when it ends) and wall seconds to READY. Also the whole
server: `Server.start()` wall and the CPU of every process it started, per start.

    python bench/bench_worker_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import emit  # noqa: E402

from catalog.api import Catalog  # noqa: E402
from catalog.server.sandbox import build_views_database, private_folder  # noqa: E402
from catalog.server.server import Server  # noqa: E402
from catalog.server.statement_worker import HEADER, READY  # noqa: E402
from catalog.server.worker_pool import worker_environment  # noqa: E402

NAN_LOG = ROOT / "tests" / "data" / "ms210" / "nan_log" / "dump"


def _read_ready(sock: socket.socket) -> None:
    head = b""
    while len(head) < HEADER.size:
        head += sock.recv(HEADER.size - len(head))
    kind, n = HEADER.unpack(head)
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    if kind != READY:
        raise RuntimeError(json.loads(body).get("message"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def program_worker(config: dict) -> tuple[float, float]:
    """(wall to READY, CPU) of a worker started as its own program."""
    data, data_child = socket.socketpair()
    control, control_child = socket.socketpair()
    cfg = {**config, "data_fd": data_child.fileno(), "control_fd": control_child.fileno()}
    env = worker_environment()
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog.server.statement_worker", json.dumps(cfg)],
        pass_fds=(data_child.fileno(), control_child.fileno()), env=env,
    )  # fmt: skip
    data_child.close()
    control_child.close()
    _read_ready(data)
    wall = time.perf_counter() - t0
    data.close()
    control.close()
    proc.wait()
    return wall, _children_cpu() - cpu0


class Forker:
    """A launcher started once; each call forks one worker from it."""

    def __init__(self) -> None:
        self.requests, requests_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.notices, notices_child = socket.socketpair()
        env = worker_environment()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "catalog.server.worker_launcher",
             str(requests_child.fileno()), str(notices_child.fileno())],
            pass_fds=(requests_child.fileno(), notices_child.fileno()), env=env,
        )  # fmt: skip
        requests_child.close()
        notices_child.close()
        self.lines = self.notices.makefile("rb")

    def worker(self, config: dict) -> tuple[float, float]:
        """(wall to READY, CPU) of a forked worker (its CPU from /proc before it ends)."""
        data, data_child = socket.socketpair()
        control, control_child = socket.socketpair()
        t0 = time.perf_counter()
        socket.send_fds(self.requests, [json.dumps({"n": 1, "config": config}).encode()],
                        [data_child.fileno(), control_child.fileno()])  # fmt: skip
        data_child.close()
        control_child.close()
        pid = json.loads(self.lines.readline())["pid"]
        _read_ready(data)
        wall = time.perf_counter() - t0
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        data.close()
        control.close()
        json.loads(self.lines.readline())  # its exit notice
        return wall, cpu

    def close(self) -> None:
        self.requests.close()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cat = Path(tmp) / "cat"
        Catalog.open(cat, create=True).ingest(NAN_LOG, run="nan_log")
        views_db = build_views_database(private_folder(), flat=True)
        config = {"catalog": str(cat), "views_db": str(views_db), "memory_limit": "1GB", "threads": 1}
        forker = Forker()
        forked, program, servers = [], [], []
        for _ in range(args.rounds):
            forked.append(forker.worker(config))
            program.append(program_worker(config))
            cpu0, t0 = _children_cpu(), time.perf_counter()
            srv = Server(cat, port=0).start()
            wall = time.perf_counter() - t0
            srv.stop()
            servers.append((wall, _children_cpu() - cpu0))
        forker.close()
    med = statistics.median
    fw, fc = med(w for w, _ in forked), med(c for _, c in forked)
    pw, pc = med(w for w, _ in program), med(c for _, c in program)
    sw, sc = med(w for w, _ in servers), med(c for _, c in servers)
    emit.summary(
        "a statement worker forked by the launcher vs started as a program: wall to READY",
        "-",
        f"{fw / pw:.2f}x ({fw:.3f} s vs {pw:.3f} s)",
    )
    emit.summary("the same, CPU of the worker", "-", f"{fc / pc:.2f}x ({fc:.3f} s vs {pc:.3f} s)")
    emit.summary("`Server.start()` (4 workers and a spare)", "-", f"{sw:.2f} s wall, {sc:.2f} s CPU")
    emit.report_follows()
    print(
        f"`python bench/bench_worker_start.py --rounds {args.rounds}`, medians of {args.rounds} rounds; "
        f"load average {os.getloadavg()[0]:.2f} at the end.\n"
    )
    print("| | to READY | CPU |")
    print("|---|---|---|")
    print(f"| forked by the launcher | {fw:.3f} s | {fc:.3f} s |")
    print(f"| started as a program (baseline) | {pw:.3f} s | {pc:.3f} s |")
    print(f"| ratio | {fw / pw:.2f}x | {fc / pc:.2f}x |")
    print(
        f"\nA whole `Server.start()` (launcher, 4 workers and a spare): {sw:.2f} s wall, {sc:.2f} s of CPU "
        "in its processes."
    )


if __name__ == "__main__":
    main()
