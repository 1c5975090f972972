"""Baselines of the benchmarks compute what dumpcat computes, so each ratio in docs/benchmarks.md
compares like with like: the naive statistics loop of bench_core (b) and bench_stats gives dumpcat's
statistics, the bare walk counts every file of the tree, and the two sides of
bench_contained_scan give the same rows. (The naive compare loop: tests/test_bench_compare.py; the
scale generator: tests/test_bench_scale.py; the old pgwire text encoder: tests/catalog/server/
test_pgcodec.py; the server clients' row counts: tests/test_bench_serve_clients.py.)"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from ingest.statistics.kernel import compute_stats
from tests.conftest import REPO

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import bench_core  # noqa: E402
import bench_stats  # noqa: E402
import synth  # noqa: E402

_RNG = np.random.default_rng(3)
_WITH_NAN = _RNG.standard_normal(1000).astype(np.float32)
_WITH_NAN[[3, 70]] = np.nan
_WITH_INF = _RNG.standard_normal(500).astype(np.float32)
_WITH_INF[[1, 9]] = [np.inf, -np.inf]
ARRAYS = {
    "float32": _RNG.standard_normal((40, 25)).astype(np.float32),
    "float32 with zeros": np.where(_RNG.random(999) < 0.2, 0, _RNG.standard_normal(999)).astype(np.float32),
    "float32 with NaN": _WITH_NAN,
    "float32 with inf": _WITH_INF,
    "float64": _RNG.standard_normal(4096) * 1e6,
    "int32": _RNG.integers(-1000, 1000, 777, dtype=np.int32),
    "int64": _RNG.integers(-(2**40), 2**40, 100, dtype=np.int64),
    "bool": _RNG.random(50) < 0.5,
    "scalar": np.array(2.5, dtype=np.float32),
    "empty": np.zeros(0, dtype=np.float32),
}


def _same(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == pytest.approx(b, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("name", list(ARRAYS))
def test_the_naive_statistics_loop_gives_dumpcats_statistics(name):
    """Its every value, by plain numpy, equals the kernel's. (float16 is left out: numpy reduces it
    in float16, whose mean and norm round and overflow where the kernel's float64 do not, so the
    benchmarks' trees are float32, int32 and bool.)"""
    a = ARRAYS[name]
    want = compute_stats(a)
    got = bench_stats.naive_values(a)
    assert set(got) == set(want) - {"md5"}
    for key, value in got.items():
        assert _same(value, want[key]), (name, key, value, want[key])


def test_bench_cores_naive_loop_reads_every_file_through_the_same_values(tmp_path):
    paths = []
    for name, a in ARRAYS.items():
        paths.append(str(tmp_path / f"{name}.npy"))
        np.save(paths[-1], a)
    assert bench_core.naive_stats(paths) == sum(a.nbytes for a in ARRAYS.values())
    # (b)'s other baseline reads every byte of the same files, headers included (one 2 MiB file
    # takes more than one read of its buffer)
    big = tmp_path / "big.npy"
    np.save(big, np.arange(1 << 18, dtype=np.float64))
    paths.append(str(big))
    assert bench_core.read_every_byte(paths) == sum(os.path.getsize(p) for p in paths)


def test_the_bare_walk_counts_every_file_and_the_header_walk_every_npy(tmp_path):
    tree = tmp_path / "tree"
    synth.generate(tree, 300, ranks=2, iterations=3, workers=1)
    files = [os.path.join(d, f) for d, _, names in os.walk(tree) for f in names]
    assert bench_core.walk(str(tree)) == len(files)
    assert bench_core.walk_read_headers(str(tree)) == sum(f.endswith(".npy") for f in files) >= 300


def test_the_per_file_loops_batches_cover_every_npy_and_both_sides_give_the_same_columns(
    tmp_path, monkeypatch
):
    """bench_core (a)'s per-file loop row: its batches hold every npy of the tree once, and the C
    side (ingest/formats/_npy_scan.c) gives the columns its baseline (the Python) gives."""
    from ingest.formats import npy_header
    from ingest.readers.leaf_scan import scan_tensor_columns

    tree = tmp_path / "tree"
    synth.generate(tree, 300, ranks=2, iterations=3, workers=1)
    batches = bench_core.leaf_batches(str(tree), size=64)
    paths = [os.path.join(chunk[1], name) for b in batches for chunk in b for name in chunk[3]]
    npys = sorted(os.path.join(d, f) for d, _, names in os.walk(tree) for f in names if f.endswith(".npy"))
    assert sorted(paths) == npys and len(set(paths)) == len(paths) >= 300
    assert all(sum(len(chunk[3]) for chunk in b) <= 64 for b in batches)
    with_c = [scan_tensor_columns(b) for b in batches]
    monkeypatch.setattr(npy_header, "_npy_scan", None)
    assert with_c == [scan_tensor_columns(b) for b in batches]
    assert all(not irregular for scanned in with_c for _, _, irregular, _ in scanned)
    monkeypatch.undo()
    c_s, py_s, n = bench_core.header_scan_cpu(str(tree), rounds=1)
    assert n == len(npys) and c_s > 0 and py_s > 0


def test_the_two_sides_of_the_contained_scan_give_the_same_rows():
    """The script checks it before it times anything, and stops when they differ."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_contained_scan.py"), "--rows", "4000"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("| `SELECT") == 3
