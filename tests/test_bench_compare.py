"""bench/bench_compare.py's naive loop is a correct baseline: on tensors of several shapes (N-d
included, where `np.dot` of the unflattened arrays is a tensor product) it computes the metrics
dumpcat computes, so its speed-up figures compare like with like."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ingest.compare_metrics import METRIC_FIELDS, MetricColumns, PairJob, compare_jobs, compare_table
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import bench_compare


@pytest.mark.parametrize("shape", [(1000,), (40, 25), (4, 5, 6, 7)])
def test_the_naive_loop_computes_dumpcats_metrics(tmp_path, shape):
    rng = np.random.default_rng(7)
    y = rng.standard_normal(shape).astype(np.float32)
    y.flat[::97] = 0  # exact zeros on the baseline side (the epsilon rule)
    x = (y + rng.standard_normal(shape).astype(np.float32) * 1e-3 * np.abs(y)).astype(np.float32)
    px, py = tmp_path / "run.npy", tmp_path / "base.npy"
    np.save(px, x)
    np.save(py, y)
    [(_, got)] = compare_jobs([PairJob(0, bench_compare.side(px), bench_compare.side(py))])
    want = bench_compare.naive(px, py)
    assert got.status == "ok"
    for field in METRIC_FIELDS:
        assert getattr(got, field) == pytest.approx(want[field], rel=1e-6, abs=1e-12), field


def test_the_timed_path_is_dumpcat_compares_and_agrees_with_the_naive_loop(tmp_path):
    """What the benchmark times (its pairs as `dumpcat compare` gets them, through compare_table with a
    thread each for 2 workers) gives the naive loop's metrics on its own generated pairs."""
    files = bench_compare.write_pairs(tmp_path, 6, 0.004)
    parts = list(compare_table(bench_compare.pairs_table(files), 2, task_bytes=16_000))
    assert len(parts) == 3  # 8 KB a pair: two pairs a task
    got = sorted(MetricColumns.concat(parts).pair_metrics(), key=lambda km: km[0])
    for (key, m), (px, py) in zip(got, files, strict=True):
        want = bench_compare.naive(px, py)
        assert m.status == "ok", key
        for field in METRIC_FIELDS:
            assert getattr(m, field) == pytest.approx(want[field], rel=1e-6, abs=1e-12), (key, field)
