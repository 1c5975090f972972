"""bench/bench_writer_memory.py runs real `dumpcat ingest` processes at each cap and reports what it
measured: one summary row per cap (the default's added when not asked for), the default's ratios
1.00x, a plausible peak summed over the process tree, and a table row per cap."""

from __future__ import annotations

import subprocess
import sys

from bench.__main__ import parse_output
from tests.conftest import REPO


def test_every_cap_is_measured_and_reported(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_writer_memory.py"), "--tensors", "1500",
         "--caps", "16MB", "--rounds", "1", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows, report = parse_output(done.stdout)
    assert [r[0].split("writer cap ")[1].split(":")[0] for r in rows] == ["16MB", "128MB"]
    default = rows[1][2]
    assert default.count("(1.00x)") == 2 and default.endswith("MiB"), default
    peaks = [int(r[2].rsplit("/ ", 1)[1].split()[0]) for r in rows]
    assert all(100 < p < 1024 for p in peaks), peaks  # an interpreter with DuckDB, summed over helpers
    assert "| 16MB |" in report and "| 128MB (default) |" in report
    assert str(tmp_path) not in report  # the runner names the work folder; the script never prints it
