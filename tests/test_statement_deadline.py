"""The statement worker's timeouts under its address-space cap (catalog.statement_worker.Deadline).

A worker caps its own address space (RLIMIT_AS). A thread started under that cap needs address space for
its stack, so a statement timer started per statement failed once an earlier statement had left the
process near its cap, and the worker died on the next statement (seen once in CI: "the statement's worker
process exited with status 1" for `SELECT 1` during an attack). The deadline thread is started before the
cap. These tests put a real process under a real cap with almost no room left.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

UNDER_A_TIGHT_CAP = """
import resource, threading, time
from catalog.statement_worker import Deadline

fired = []
deadline = Deadline(fired.append)  # started before the cap, like the worker's

def cap_with_little_room():
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 20), vm + (1 << 20)))  # 1 MiB: less than a stack

cap_with_little_room()
try:
    threading.Timer(0.05, lambda: None).start()
    print("a new thread started under the cap")
except RuntimeError as exc:
    print("a new thread cannot start under the cap:", exc)
for job in (1, 2, 3):
    deadline.arm(job, 0.05)
    time.sleep(0.3)
deadline.arm(4, 5.0)
deadline.disarm()  # a statement that finished in time is not interrupted
time.sleep(0.2)
print("fired", fired)
"""


def test_the_deadline_thread_serves_statements_under_a_full_cap() -> None:
    out = subprocess.run(
        [sys.executable, "-c", UNDER_A_TIGHT_CAP], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # the hazard is real here: a thread per statement could not be started
    assert lines[0].startswith("a new thread cannot start under the cap: can't start new thread"), lines
    assert lines[-1] == "fired [1, 2, 3]"
