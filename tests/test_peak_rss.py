"""tests/peak_rss.py measures the command, not the test process that starts it (the hostile-tree
ingest once failed its memory bound in CI with the pytest worker's own peak)."""

from __future__ import annotations

import sys

from tests.peak_rss import run_with_peak_rss

_ALLOCATE = (
    "import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); print('ok')"
)


def test_the_test_process_lends_no_peak_and_the_command_keeps_its_own():
    big = bytearray(600 << 20)
    big[::4096] = b"y" * len(big[::4096])  # resident: this process's high-water mark passes 600 MiB
    status, small_peak, out = run_with_peak_rss([sys.executable, "-c", _ALLOCATE, "1"])
    assert (status, out.strip()) == (0, "ok")
    status, large_peak, out = run_with_peak_rss([sys.executable, "-c", _ALLOCATE, "300"])
    del big
    assert (status, out.strip()) == (0, "ok")
    assert small_peak < 200, small_peak
    assert 300 < large_peak < 600, large_peak
