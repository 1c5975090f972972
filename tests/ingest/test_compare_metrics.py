"""ingest.compare_metrics against a whole-array float64 reference written here from the formulas
(msprobe §4.1 / msaccucmp §4.2 of the format reference), never from the module's code."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ingest.compare_metrics import METRIC_FIELDS, PairJob, PairMetrics, compare_arrays, compare_jobs
from tests.conftest import REPO

ROOT = REPO
NPY_DUMP = ROOT / "tests/data/ms210/nan_log/dump"
RAW_DUMP = ROOT / "tests/data/ascend_raw/nan_log_rank"

EPS64 = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps


# --------------------------------------------------------------------------------------------------
# The reference: straightforward numpy on whole arrays


def reference(n: np.ndarray, b: np.ndarray) -> dict[str, float | None]:
    """Every metric by its textbook formula on whole arrays (no NaN/inf, same shape, size > 0)."""

    def as_np(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float32) if a.dtype.kind == "V" else a  # ml_dtypes through float32

    n, b = as_np(n), as_np(b)
    rt = np.result_type(n, b, np.float32)
    # msprobe relative error, in rt, eps where b == 0
    nn, bb = n.astype(rt).reshape(-1), b.astype(rt).reshape(-1)
    eps = np.finfo(rt).eps
    zero = bb == 0
    nn = np.where(zero, nn + eps, nn)
    bb = np.where(zero, bb + eps, bb)
    re = np.abs((nn - bb) / bb)
    x = n.astype(np.float64).reshape(-1)
    y = b.astype(np.float64).reshape(-1)
    size = x.size
    out: dict[str, float | None] = {}
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    if size == 1:
        out["cosine"] = None
    elif nx <= EPS64 and ny <= EPS64:
        out["cosine"] = 1.0
    elif nx <= EPS64 or ny <= EPS64:
        out["cosine"] = None
    else:
        out["cosine"] = min(float(np.dot(x, y) / (nx * ny)), 1.0)
    out["max_abs_err"] = float(np.max(np.abs(x - y)))
    out["max_rel_err"] = float(np.max(re))
    out["mean_abs_err"] = float(np.mean(np.abs(x - y)))
    out["rmse"] = float(np.sqrt(np.mean((x - y) ** 2)))
    out["rel_euclidean"] = 0.0 if ny <= EPS64 else float(np.sqrt(np.sum((x - y) ** 2) / np.sum(y**2)))
    big = np.abs(y) > EPS64
    out["acc_rel_err"] = float(np.sum(np.abs(x[big] - y[big]) / np.abs(y[big])))

    def pdf(v: np.ndarray) -> np.ndarray:
        lo, hi = v.min(), v.max()
        u = (v - lo) / (hi - lo) if hi > lo else np.zeros_like(v)
        u = np.maximum(u, EPS32)
        return u / u.sum()

    p, q = pdf(x), pdf(y)
    kl = float(np.sum(p * np.log(p / q)))
    out["kl_div"] = 0.0 if abs(kl) < EPS64 else kl
    scalar = n.ndim == 0
    out["err_ratio_1e3"] = None if scalar else float(np.sum(re < 0.001) / size)
    out["err_ratio_5e3"] = None if scalar else float(np.sum(re < 0.005) / size)
    return out


def assert_close(got: PairMetrics, want: dict[str, float | None], rel: float = 1e-9, kl_abs: float = 0.0):
    for f in METRIC_FIELDS:
        g, w = getattr(got, f), want[f]
        if w is None:
            assert g is None, (f, g)
            continue
        assert g is not None, f
        abs_tol = kl_abs if f == "kl_div" else 0.0
        assert g == pytest.approx(w, rel=rel, abs=abs_tol), (f, g, w)


def pair(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> tuple[np.ndarray, np.ndarray]:
    """A baseline and a run close to it (plus a few exact zeros on the baseline side)."""
    if np.dtype(dtype).kind in "iu":
        y = rng.integers(-50, 50, size=shape).astype(dtype)
        x = (y + rng.integers(-2, 3, size=shape)).astype(dtype)
        return x, y
    y = rng.standard_normal(shape)
    x = y + rng.standard_normal(shape) * 1e-3 * np.abs(y)
    if y.size > 10:
        y.reshape(-1)[:: max(1, y.size // 5)] = 0.0
    return x.astype(dtype), y.astype(dtype)


# --------------------------------------------------------------------------------------------------
# Exactness


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int32, np.int8])
@pytest.mark.parametrize("shape", [(2,), (7,), (50,), (3, 101), (1000, 33)])
@pytest.mark.parametrize("block", [7, 1 << 20])
def test_metrics_match_reference(dtype, shape, block):
    rng = np.random.default_rng(zlib.crc32(f"{np.dtype(dtype).name}{shape}{block}".encode()))
    x, y = pair(rng, shape, dtype)
    got = compare_arrays(x, y, block=block)
    assert got.status == "ok"
    assert got.numel == x.size
    assert_close(got, reference(x, y), kl_abs=1e-15)


def test_mixed_float_dtypes_and_large_values():
    """float16 run against a float32 baseline (allowed by msprobe's dtype group), RE in float32."""
    rng = np.random.default_rng(3)
    y = (rng.standard_normal(100_003) * 100).astype(np.float32)
    x = y.astype(np.float16)
    for block in (7, 4096, 1 << 20):
        got = compare_arrays(x, y, block=block)
        assert got.status == "ok"
        assert_close(got, reference(x, y), kl_abs=1e-15)


def test_non_contiguous_views_stream():
    rng = np.random.default_rng(4)
    x, y = pair(rng, (300, 170), np.float32)
    xt, yt = x.T, y.T[::-1][::-1]  # a Fortran-order view; a view through two reversed strides
    assert not xt.flags.c_contiguous and not yt.flags.c_contiguous
    got = compare_arrays(xt, yt, block=64)
    assert_close(got, reference(np.ascontiguousarray(xt), np.ascontiguousarray(yt)), kl_abs=1e-15)
    got = compare_arrays(xt[::-1], yt[::-1], block=7)
    assert_close(got, reference(xt[::-1].copy(), yt[::-1].copy()), kl_abs=1e-15)
    bx = x.astype(ml_dtypes.bfloat16).T
    got = compare_arrays(bx, y.T, block=7)
    assert_close(got, reference(np.ascontiguousarray(bx), np.ascontiguousarray(y.T)), kl_abs=1e-15)


def test_identical_tensors():
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.bool_):
        x = (
            (rng.standard_normal(10_001) > 0)
            if dtype is np.bool_
            else rng.standard_normal(10_001).astype(dtype)
        )
        for block in (7, 1 << 20):
            m = compare_arrays(x, x.copy(), block=block)
            assert m.status == "ok"
            assert m.cosine == pytest.approx(1.0, abs=1e-12)
            assert m.cosine <= 1.0
            for f in ("max_abs_err", "max_rel_err", "mean_abs_err", "rmse", "rel_euclidean", "acc_rel_err"):
                assert getattr(m, f) == 0.0, f
            assert m.kl_div == 0.0
            assert m.err_ratio_1e3 == 1.0 and m.err_ratio_5e3 == 1.0


def test_zeros_on_the_baseline_side_eps_rule():
    y = np.array([0.0, 0.0, 1.0, 2.0, 0.0], np.float32)
    x = np.array([0.0, 1e-3, 1.0, 2.002, 1e-7], np.float32)
    m = compare_arrays(x, y, block=2)
    assert_close(m, reference(x, y))
    eps = np.finfo(np.float32).eps
    # where b == 0 both get +eps: RE = |(x + eps) - eps| / eps, in float32
    re1 = abs((np.float32(1e-3) + eps - eps) / eps)
    assert m.max_rel_err == pytest.approx(float(re1), rel=1e-6)
    assert m.err_ratio_1e3 == 2 / 5  # the 0/0 pair and 1.0/1.0; 2.002/2 is exactly 1e-3 off
    # msaccucmp skips |y| <= eps64 in the accumulated relative error
    assert m.acc_rel_err == pytest.approx((float(np.float32(2.002)) - 2.0) / 2.0, rel=1e-12)
    # all-zero baseline: cosine NULL (msprobe "Nan"), relative Euclidean distance 0 (msaccucmp)
    z = np.zeros(5, np.float32)
    m = compare_arrays(x, z)
    assert m.status == "ok" and m.cosine is None and m.rel_euclidean == 0.0
    assert_close(m, reference(x, z))
    m = compare_arrays(z, z.copy())
    assert m.cosine == 1.0 and m.max_rel_err == 0.0 and m.err_ratio_1e3 == 1.0 and m.kl_div == 0.0


# --------------------------------------------------------------------------------------------------
# NaN / inf, statuses


def _nulls(m: PairMetrics) -> bool:
    return all(getattr(m, f) is None for f in METRIC_FIELDS)


@pytest.mark.parametrize("block", [3, 1 << 20])
def test_nan_inf_statuses(block):
    rng = np.random.default_rng(6)
    y = rng.standard_normal(20).astype(np.float32)
    x = y + np.float32(1e-3)
    xn = x.copy()
    xn[11] = np.nan
    yn = y.copy()
    yn[11] = np.nan
    yn2 = y.copy()
    yn2[12] = np.nan

    m = compare_arrays(xn, y, block=block)
    assert m.status == "nan_in_run" and _nulls(m) and m.numel == 20
    m = compare_arrays(x, yn, block=block)
    assert m.status == "nan_in_baseline" and _nulls(m)
    m = compare_arrays(xn, yn2, block=block)  # NaN on both sides, different positions
    assert m.status == "nan_in_both" and _nulls(m)
    # same NaN positions: msprobe zeroes them on both sides and compares the rest
    m = compare_arrays(xn, yn, block=block)
    assert m.status == "nan_in_both"
    xz, yz = x.copy(), y.copy()
    xz[11] = yz[11] = 0
    assert_close(m, reference(xz, yz), kl_abs=1e-15)

    # inf: same positions (any sign, msprobe's isinf rule) are zeroed; different ones: all NULL
    xi, yi = x.copy(), y.copy()
    xi[3], yi[3] = np.inf, -np.inf
    m = compare_arrays(xi, yi, block=block)
    xz, yz = x.copy(), y.copy()
    xz[3] = yz[3] = 0
    assert m.status == "ok"
    assert_close(m, reference(xz, yz), kl_abs=1e-15)
    m = compare_arrays(xi, y, block=block)
    assert m.status == "inf_mismatch" and _nulls(m)
    # NaN matched but inf not: still NULL
    xb, yb = xn.copy(), yn.copy()
    xb[0] = np.inf
    m = compare_arrays(xb, yb, block=block)
    assert m.status == "nan_in_both" and _nulls(m)
    # all NaN on both sides: zeroed everywhere, i.e. two zero tensors
    m = compare_arrays(np.full(9, np.nan, np.float16), np.full(9, np.nan, np.float32), block=block)
    assert m.status == "nan_in_both" and m.cosine == 1.0 and m.max_abs_err == 0.0


def test_shape_dtype_empty_scalar():
    a = np.ones((2, 3), np.float32)
    m = compare_arrays(a, np.ones((3, 2), np.float32))
    assert m.status == "shape_mismatch" and m.numel is None and _nulls(m)
    m = compare_arrays(a, np.ones((6,), np.float32))
    assert m.status == "shape_mismatch"
    m = compare_arrays(a.astype(np.int32), a.astype(np.int64))
    assert m.status == "dtype_mismatch" and m.numel == 6 and _nulls(m)
    m = compare_arrays(a.astype(np.float32), a.astype(np.float64))  # float64 is outside msprobe's group
    assert m.status == "dtype_mismatch"
    m = compare_arrays(a.astype(ml_dtypes.bfloat16), a.astype(np.float16))
    assert m.status == "ok" and m.cosine == pytest.approx(1.0)
    assert compare_arrays(a.astype(">f4"), a).status == "ok"  # byte order is not a dtype difference
    m = compare_arrays(a.astype(np.complex64), a.astype(np.complex64))
    assert m.status == "unsupported_dtype" and _nulls(m)
    m = compare_arrays(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    assert m.status == "empty" and m.numel == 0 and _nulls(m)
    # 0-d: cosine and error ratios unsupported, errors computed
    m = compare_arrays(np.array(2.5, np.float32), np.array(2.0, np.float32))
    assert m.status == "unsupported" and m.numel == 1
    assert m.cosine is None and m.err_ratio_1e3 is None and m.err_ratio_5e3 is None
    assert m.max_abs_err == 0.5 and m.max_rel_err == 0.25 and m.rmse == 0.5 and m.kl_div == 0.0
    assert_close(m, reference(np.array(2.5, np.float32), np.array(2.0, np.float32)))
    # 1 element: cosine unsupported, ratios computed
    m = compare_arrays(np.array([[2.0]], np.float32), np.array([[2.001]], np.float32))
    assert m.status == "unsupported" and m.cosine is None and m.err_ratio_1e3 == 1.0
    # bool and ints
    b = np.array([True, False, True, True])
    m = compare_arrays(b, ~b)
    assert_close(m, reference(b, ~b))


def test_never_raises_on_odd_input():
    m = compare_arrays(np.array(["a", "b"]), np.array(["a", "b"]))
    assert m.status == "unsupported_dtype"
    m = compare_arrays(np.zeros(3, [("a", "f4")]), np.zeros(3, [("a", "f4")]))
    assert m.status == "unsupported_dtype"


# --------------------------------------------------------------------------------------------------
# Memory: two 512 MB memory-mapped tensors


def test_memory_bounded_on_big_memmaps(tmp_path):
    """Peak RSS growth < 64 MB while comparing two 512 MB float32 memmaps (run in a fresh process so
    that ru_maxrss is this comparison's alone)."""
    code = textwrap.dedent(
        f"""
        import resource, sys
        import numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        from ingest.compare_metrics import compare_arrays
        n = 128 << 20
        paths = [{str(tmp_path / "a.f32")!r}, {str(tmp_path / "b.f32")!r}]
        for i, p in enumerate(paths):
            with open(p, "wb") as f:
                f.truncate(n * 4)  # sparse: zeros, written quickly
            w = np.memmap(p, np.float32, "r+", shape=(n,))
            w[:: 1 << 16] = np.arange(n >> 16, dtype=np.float32) + i  # a few nonzero pages
            w.flush()
            del w
        a = np.memmap(paths[0], np.float32, "r", shape=(n,))
        b = np.memmap(paths[1], np.float32, "r", shape=(n,))
        compare_arrays(np.arange(10.0), np.arange(10.0) + 1)  # imports and scratch buffers
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m = compare_arrays(a, b)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(m.status, m.numel, m.max_abs_err, (after - before) / 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True
    )
    status, numel, max_abs, growth_mb = out.stdout.split()
    assert status == "ok" and int(numel) == 128 << 20 and float(max_abs) == 1.0
    assert float(growth_mb) < 64, growth_mb


# --------------------------------------------------------------------------------------------------
# compare_jobs on real files


def _npy_jobs_fields(path: Path) -> tuple:
    arr = np.load(path, mmap_mode="r")
    offset = arr.offset
    dtype = arr.dtype.name
    return (str(path), int(offset), dtype, tuple(arr.shape), None, None)


def test_compare_jobs_npy_files():
    files = sorted(NPY_DUMP.rglob("*.npy"))
    by_shape: dict[tuple, list[Path]] = {}
    for f in files:
        a = np.load(f)
        if a.dtype == np.float32 and a.size > 1 and not np.isnan(a).any():
            by_shape.setdefault(a.shape, []).append(f)
    _, group = max(by_shape.items(), key=lambda kv: (len(kv[1]) > 1, math.prod(kv[0])))
    assert len(group) > 1
    f1 = next(f for f in group if np.abs(np.load(f)).sum() > 0)
    f2 = next(f for f in group if f != f1 and not np.array_equal(np.load(f), np.load(f1)))
    s1, s2 = _npy_jobs_fields(f1), _npy_jobs_fields(f2)
    missing = (str(f1) + ".missing", *s1[1:])
    res = dict(
        compare_jobs(
            [
                PairJob(1, s1, s1),
                PairJob(2, s1, s2),
                PairJob(3, missing, s1),
                PairJob(4, s1, missing),
                PairJob(5, s1, None),
                PairJob(6, None, s1),
            ]
        )
    )
    assert res[1].status == "ok" and res[1].max_abs_err == 0.0
    assert res[1].cosine == pytest.approx(1.0)
    assert_close(res[2], reference(np.load(f1), np.load(f2)), kl_abs=1e-15)
    assert res[3].status == "unreadable_run" and _nulls(res[3])
    assert res[4].status == "unreadable_baseline"
    assert res[5].status == "only_in_run" and res[6].status == "only_in_baseline"
    # a NaN tensor of the dump against itself: NaN at the same positions
    nan_file = next((f for f in files if np.load(f).dtype.kind == "f" and np.isnan(np.load(f)).any()), None)
    if nan_file is not None:
        s = _npy_jobs_fields(nan_file)
        ((_, m),) = compare_jobs([PairJob(7, s, s)])
        assert m.status == "nan_in_both" and m.max_abs_err == 0.0


def test_compare_jobs_raw_fractal_nz(tmp_path):
    """A FRACTAL_NZ slot of a raw Ascend dump, located by its tensors row, against the npy of the
    same tensor: read_tensor converts it to the host layout."""
    from catalog import Catalog

    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(str(RAW_DUMP))
    rows = cat.sql(
        "SELECT path, data_offset, stored_dtype, shape, format, host_shape FROM tensors "
        "WHERE format = 'FRACTAL_NZ' ORDER BY path, data_offset"
    ).to_pylist()
    assert rows
    sides = [
        (r["path"], r["data_offset"], r["stored_dtype"], r["shape"], r["format"], r["host_shape"])
        for r in rows
    ]
    same_host = [s for s in sides if s[5] == sides[0][5]]
    jobs = [PairJob(0, sides[0], sides[0])]
    if len(same_host) > 1:
        jobs.append(PairJob(1, same_host[0], same_host[1]))
    res = dict(compare_jobs(jobs))
    assert res[0].status in ("ok", "nan_in_both") and res[0].numel == math.prod(sides[0][5])
    if res[0].status == "ok":
        assert res[0].max_abs_err == 0.0
    if 1 in res:
        from ingest.formats.tensor_data import read_tensor

        a, b = read_tensor(*same_host[0]), read_tensor(*same_host[1])
        assert a.shape == tuple(same_host[0][5])
        if not (np.isnan(a).any() or np.isnan(b).any()):
            assert_close(res[1], reference(a, b), kl_abs=1e-15)
    # a raw slot whose file is gone
    gone = (str(tmp_path / "nope.bin"), *sides[0][1:])
    ((_, m),) = compare_jobs([PairJob(9, gone, sides[0])])
    assert m.status == "unreadable_run"


def test_compare_jobs_through_helpers():
    """The task name helper processes run."""
    from ingest import helper_pool

    files = sorted(NPY_DUMP.rglob("*.npy"))[:20]
    batches = [[PairJob(i, _npy_jobs_fields(f), _npy_jobs_fields(f)) for i, f in enumerate(files)]]
    out = list(helper_pool.run_ordered("ingest.compare_metrics:compare_jobs", iter(batches), 1))
    assert [k for k, _ in out[0]] == list(range(len(files)))
    assert all(m.max_abs_err in (0.0, None) for _, m in out[0])
