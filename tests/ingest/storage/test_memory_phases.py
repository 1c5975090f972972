"""bench/memory_phases.py, the probe of where an ingest's memory peaks, still runs against the
ingest it wraps (it tags methods of the pipeline, the store and the flat writer by name)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))


def test_every_step_of_a_real_ingest_gets_its_peak(tmp_path):
    import synth

    tree = tmp_path / "tree"
    synth.generate(tree, 600, ranks=1, iterations=2, statistic_csv=True, workers=1)
    out = subprocess.run(
        [sys.executable, str(BENCH / "memory_phases.py"), str(tree), "--catalog", str(tmp_path / "cat")],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    assert out.startswith("600 tensors in "), out
    peaks = {
        m.group(1).strip(): (int(m.group(2)), int(m.group(3)), int(m.group(4)))
        for m in re.finditer(r"^  (.+?)\s+(\d+)  ingesting process (\d+)\+(\d+), helpers", out, re.M)
    }
    # every tagged step ran, each seen at its start and end at least
    assert set(peaks) >= {"walk", "batch tables", "commit", "flat: the run's final files"}, out
    for step, (total, anonymous, mapped) in peaks.items():
        # an interpreter with DuckDB, pyarrow and numpy loaded: tens of MiB, both kinds
        assert anonymous > 10 and mapped > 10 and total >= anonymous + mapped, (step, out)
