"""What a process writes to a pty, read until it closes the terminal: the tests that run `dumpcat`
on a real terminal (progress bars, escapes in dump names) share this loop."""

from __future__ import annotations

import os
import select
import subprocess


def read_until_closed(leader: int, proc: subprocess.Popen, timeout: float = 300) -> bytes:
    """Everything written to the pty whose leader side is `leader` until the child closes it (EIO
    or end of file); closes `leader`. A child silent for `timeout` seconds is killed, so that a
    hung command fails with what it wrote instead of hanging the suite."""
    out = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            if not ready:
                proc.kill()
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    return out
