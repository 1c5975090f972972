"""The peak memory of a command run by a test, measured so the test's own size does not count.

`os.wait4` on a child that the test process starts reports, as the child's peak RSS, the *test
process's* peak too: Python starts children with vfork, and the kernel records the high-water mark of
the address space a process leaves at exec, which for a vfork child is its parent's. A pytest worker
that ran a memory-hungry test earlier (a Spark session, a big compare) would therefore lend that peak
to every command it measures later (seen in CI: 2,701 MiB for an ingest that peaks near 230 MiB). A
small launcher process sits in between: the command is exec'd from the launcher's small address space,
and the launcher hands back wait4's figure for the command and the helpers it waited for.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_with_peak_rss(cmd: list[str], **popen) -> tuple[int, float, str]:
    """Run `cmd` to its end: its exit status, its peak RSS in MiB (its own or its largest waited-for
    helper's), and its stdout and stderr together."""
    with tempfile.TemporaryDirectory() as tmp:
        figure = Path(tmp) / "maxrss"
        done = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, str(figure), *cmd],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen,
        )  # fmt: skip
        return done.returncode, int(figure.read_text()) / 1024, done.stdout
