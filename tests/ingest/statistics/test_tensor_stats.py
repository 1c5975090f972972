"""Computed tensor statistics (ingest/statistics/kernel.py) against a straightforward float64 reference.

Every tensor is a real npy file written by numpy into tmp_path (plus the committed MindSpore samples)
and read back through `open_tensor` / `compute_stats_many` with the offset, dtype and shape the catalog
takes from the npy header.
"""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import psutil
import pytest

from ingest import helper_pool as hp
from ingest.statistics import kernel as ts
from ingest.statistics.kernel import (
    BLOCK_ELEMS,
    StatJob,
    TruncatedTensorError,
    compute_stats,
    compute_stats_many,
    open_tensor,
)
from ingest.storage.schema import STAT_VALUE_FIELDS
from tests.conftest import SAMPLES

KEYS = [name for name, _ in STAT_VALUE_FIELDS]


# -- helpers -----------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _stop_helpers():
    """Leave no helper process behind for other test modules."""
    yield
    hp._shutdown_helpers()


def assert_only_idle_helpers_left() -> None:
    idle = {h.proc.pid for h in hp._idle_helpers}
    ours = {
        c.pid: c.cmdline()
        for c in psutil.Process().children()
        if c.status() != psutil.STATUS_ZOMBIE and "_serve" in " ".join(c.cmdline())
    }
    assert set(ours) <= idle, f"helper processes left behind: {ours}"


def header_of(path: Path) -> tuple[int, str, tuple[int, ...], bool]:
    """(data_offset, stored dtype, shape, fortran_order), as the catalog records them."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read(f)
        return f.tell(), dtype.str, shape, fortran


def save(tmp_path: Path, name: str, arr: np.ndarray) -> StatJob:
    path = tmp_path / f"{name}.npy"
    np.save(path, arr)
    offset, dtype, shape, _ = header_of(path)
    return StatJob(abs(hash(name)) % 10**9, str(path), offset, dtype, shape)


def stats_via_file(job: StatJob, md5: bool = False) -> dict:
    """Both read paths (mmap + compute_stats, pread in compute_stats_many) must agree; return one."""
    mapped = compute_stats(open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape), md5=md5)
    [(row_id, streamed, err)] = list(compute_stats_many([job], md5=md5, workers=1))
    assert row_id == job.row_id and err is None
    assert_same(mapped, streamed)
    return streamed


def reference(arr: np.ndarray) -> dict:
    """MindSpore's semantics, element by element in float64, the obvious way."""
    x = np.asarray(arr).astype(np.float64).ravel()
    n = x.size
    nan = int(np.isnan(x).sum())
    finite_or_inf = x[~np.isnan(x)]
    out = {
        "count": n,
        "neg_count": int((finite_or_inf < 0).sum()),
        "pos_count": int((finite_or_inf > 0).sum()),
        "nan_count": nan,
        "neg_inf_count": int(np.isneginf(x).sum()),
        "pos_inf_count": int(np.isposinf(x).sum()),
        "zero_count": int((x == 0).sum()),
        "md5": None,
    }
    if n == 0:
        out.update(max=None, min=None, avg=None, l2norm=0.0)
    elif nan:
        out.update(max=math.nan, min=math.nan, avg=math.nan, l2norm=math.nan)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            total = math.fsum(x) if np.isfinite(x).all() else float(np.sum(x))
            squares = math.fsum(x * x) if np.isfinite(x).all() else float(np.sum(x * x))
        out.update(max=float(x.max()), min=float(x.min()), avg=total / n, l2norm=math.sqrt(squares))
        out["_scale"] = float(np.abs(x).mean()) if np.isfinite(x).all() else 0.0
    return out


def assert_same(got: dict, want: dict, rel: float = 1e-12) -> None:
    """Counts and max/min exactly; avg/l2norm to summation-order rounding; NaN equals NaN."""
    scale = want.get("_scale", 0.0)
    for key in KEYS:
        g, w = got[key], want[key]
        if key in ("avg", "l2norm") and isinstance(w, float) and math.isfinite(w):
            assert isinstance(g, float), key
            assert math.isclose(g, w, rel_tol=rel, abs_tol=rel * scale), (key, g, w)
        elif isinstance(w, float) and math.isnan(w):
            assert isinstance(g, float) and math.isnan(g), (key, g)
        else:
            assert g == w and type(g) is type(w), (key, g, w)


# -- values ------------------------------------------------------------------------------------------


def test_keys_are_exactly_the_schema_fields(tmp_path: Path) -> None:
    job = save(tmp_path, "a", np.arange(5, dtype=np.float32))
    assert list(stats_via_file(job)) == KEYS
    assert list(ts.STAT_KEYS) == KEYS


@pytest.mark.parametrize(
    "n", [1, 7, 8191, 8192, 8193, BLOCK_ELEMS - 1, BLOCK_ELEMS, BLOCK_ELEMS + 8193, 3 * BLOCK_ELEMS + 5]
)
def test_float32_matches_reference(tmp_path: Path, n: int) -> None:
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * 10).astype(np.float32)
    a[rng.integers(0, n, max(1, n // 10))] = 0.0
    a[rng.integers(0, n, max(1, n // 20))] = -0.0
    job = save(tmp_path, f"f32_{n}", a.reshape(-1, 1) if n % 2 else a)
    assert_same(stats_via_file(job), reference(a))


def test_float64_matches_reference(tmp_path: Path) -> None:
    a = np.random.default_rng(3).standard_normal((300, 301)) * 1e3
    assert_same(stats_via_file(save(tmp_path, "f64", a)), reference(a))


def test_float16_sums_in_float64(tmp_path: Path) -> None:
    # 100k elements near float16's max: the sum and the squares overflow float16. They are summed
    # in float32 partials of 16 elements per lane, then in float64: within 2^-20 of the exact sum
    # (see ingest/statistics/kernel.py), and nothing overflows.
    a = np.full(100_000, 65504.0, dtype=np.float16)
    a[::3] = -60000.0
    a[1::7] = np.float16(1e-4)
    got = stats_via_file(save(tmp_path, "f16", a))
    assert_same(got, reference(a), rel=2.0**-20)
    assert math.isfinite(got["avg"]) and math.isfinite(got["l2norm"]) and got["l2norm"] > 1e7


@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
)
def test_integers(tmp_path: Path, dtype: type) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    a = rng.integers(max(info.min, -1000), min(info.max, 1000), BLOCK_ELEMS + 999, dtype=dtype)
    a[:3] = [info.min, info.max, 0]
    got = stats_via_file(save(tmp_path, np.dtype(dtype).name, a))
    assert_same(got, reference(a))
    assert got["max"] == float(info.max) and got["min"] == float(info.min)
    assert got["nan_count"] == got["neg_inf_count"] == got["pos_inf_count"] == 0


def test_int64_beyond_2_53_converts_like_a_double(tmp_path: Path) -> None:
    a = np.array([2**62 + 1, -(2**62) - 1, 3], dtype=np.int64)
    got = stats_via_file(save(tmp_path, "i64big", a))
    assert got["max"] == float(2**62) and got["min"] == -float(2**62)
    assert_same(got, reference(a))


@pytest.mark.parametrize("n", [1, 5, BLOCK_ELEMS + 3])
def test_bool_is_zero_one(tmp_path: Path, n: int) -> None:
    a = np.random.default_rng(n).random(n) < 0.3
    got = stats_via_file(save(tmp_path, f"b{n}", a))
    assert_same(got, reference(a))
    assert got["pos_count"] == int(a.sum()) and got["neg_count"] == 0


@pytest.mark.parametrize("value", [True, False])
def test_bool_all_same(tmp_path: Path, value: bool) -> None:
    a = np.full(10, value)
    got = stats_via_file(save(tmp_path, f"b{value}", a))
    assert got["max"] == got["min"] == float(value) and got["avg"] == float(value)


@pytest.mark.parametrize(
    "scalar",
    [np.float32(-2.5), np.float16(0.0), np.int64(7), np.int32(-3), np.bool_(True), np.float64(np.nan)],
)
def test_scalars(tmp_path: Path, scalar: np.generic) -> None:
    a = np.array(scalar)
    job = save(tmp_path, "scalar", a)
    assert job.shape == ()
    view = open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape)
    assert view.shape == () and view.dtype == a.dtype
    got = stats_via_file(job)
    assert got["count"] == 1
    assert_same(got, reference(a))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 0, 4)])
@pytest.mark.parametrize("dtype", ["<f4", "<i8", "|b1"])
def test_empty(tmp_path: Path, shape: tuple[int, ...], dtype: str) -> None:
    job = save(tmp_path, "empty", np.empty(shape, dtype))
    view = open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape)
    assert view.shape == shape and not view.flags.writeable
    got = stats_via_file(job, md5=True)
    assert got["count"] == 0
    assert got["max"] is None and got["min"] is None and got["avg"] is None
    assert got["l2norm"] == 0.0 and got["zero_count"] == 0 and got["nan_count"] == 0
    assert got["md5"] == hashlib.md5(b"").hexdigest()


def test_nan_makes_max_min_avg_nan_and_counts_stay_exact(tmp_path: Path) -> None:
    a = np.array([1.0, np.nan, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 5.0], dtype=np.float32)
    got = stats_via_file(save(tmp_path, "nan", a))
    assert all(math.isnan(got[k]) for k in ("max", "min", "avg", "l2norm"))
    assert (got["nan_count"], got["neg_inf_count"], got["pos_inf_count"]) == (2, 1, 1)
    # NaN is neither < 0 nor > 0; ±inf count as negative/positive (MindSpore's signbit rule).
    assert (got["neg_count"], got["pos_count"], got["zero_count"]) == (2, 3, 2)
    assert_same(got, reference(a))


@pytest.mark.parametrize("where", ["first", "last"])
def test_nan_in_one_block_poisons_all_blocks(tmp_path: Path, where: str) -> None:
    a = np.random.default_rng(0).standard_normal(3 * BLOCK_ELEMS).astype(np.float32)
    a[0 if where == "first" else -1] = np.nan
    a[BLOCK_ELEMS + 1] = -np.inf
    got = stats_via_file(save(tmp_path, "nanblk", a))
    assert math.isnan(got["max"]) and math.isnan(got["min"]) and math.isnan(got["avg"])
    assert got["nan_count"] == 1 and got["neg_inf_count"] == 1
    assert_same(got, reference(a))


def test_inf_follows_ieee_without_warnings(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        only_pos = stats_via_file(save(tmp_path, "pinf", np.array([np.inf, 1, -3], np.float32)))
        both = stats_via_file(save(tmp_path, "both", np.array([np.inf, -np.inf, 2], np.float32)))
        huge = stats_via_file(save(tmp_path, "huge", np.array([1e300, -1e300, 1e300])))
    assert only_pos["max"] == math.inf and only_pos["min"] == -3.0
    assert only_pos["avg"] == math.inf and only_pos["l2norm"] == math.inf
    assert (only_pos["pos_inf_count"], only_pos["neg_inf_count"], only_pos["nan_count"]) == (1, 0, 0)
    assert both["max"] == math.inf and both["min"] == -math.inf and math.isnan(both["avg"])
    assert both["l2norm"] == math.inf and both["nan_count"] == 0
    assert (both["neg_count"], both["pos_count"]) == (1, 2)
    assert huge["l2norm"] == math.inf and huge["max"] == 1e300  # squares overflow float64: IEEE inf


@pytest.mark.parametrize(
    ("values", "neg", "pos", "zero"),
    [
        ([-0.0, 0.0, -1.0, 2.0], 1, 1, 2),
        ([-0.0, -0.0], 0, 0, 2),
        ([0.0, 3.0, 0.0], 0, 1, 2),  # min == 0 (a ReLU output)
        ([-3.0, -0.0, -1.0], 2, 0, 1),  # max == 0
        ([1.0, 2.0], 0, 2, 0),  # all positive
        ([-1.0, -2.0], 2, 0, 0),  # all negative
    ],
)
@pytest.mark.parametrize("dtype", ["<f2", "<f4", "<f8", "<i4"])
def test_sign_and_zero_counts(
    tmp_path: Path, values: list[float], neg: int, pos: int, zero: int, dtype: str
) -> None:
    a = np.array(values).astype(dtype)
    got = stats_via_file(save(tmp_path, "signs", a))
    assert (got["neg_count"], got["pos_count"], got["zero_count"]) == (neg, pos, zero)
    assert_same(got, reference(a))


def test_complex_has_only_count_and_md5(tmp_path: Path) -> None:
    a = np.array([1 + 2j, np.nan, -3j], dtype=np.complex64)
    job = save(tmp_path, "c64", a)
    got = stats_via_file(job, md5=True)
    assert got["count"] == 3
    assert got["md5"] == hashlib.md5(a.tobytes()).hexdigest()
    assert all(got[k] is None for k in KEYS if k not in ("count", "md5"))


def test_unsupported_dtype_is_an_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        compute_stats(np.array(["a", "b"]))
    job = save(tmp_path, "str", np.array(["ab", "c"]))
    [(_, stats, err)] = list(compute_stats_many([job], workers=1))
    assert stats is None and "TypeError" in err


# -- md5 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(100_000, dtype=np.float32).reshape(100, 1000),
        np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
        np.arange(10, dtype=">f4"),
        np.array([True, False, True]),
        np.array(np.float32(3.0)),
        np.random.default_rng(1).standard_normal(2 * BLOCK_ELEMS + 11).astype(np.float16),
    ],
    ids=["f32-2d", "fortran", "big-endian", "bool", "scalar", "f16-blocks"],
)
def test_md5_is_of_the_raw_bytes_after_the_header(tmp_path: Path, arr: np.ndarray) -> None:
    job = save(tmp_path, "md5", arr)
    raw = Path(job.path).read_bytes()[job.data_offset :]
    want = hashlib.md5(raw).hexdigest()
    _, _, _, fortran = header_of(Path(job.path))
    view = open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape, fortran_order=fortran)
    assert compute_stats(view, md5=True)["md5"] == want
    [(_, got, err)] = list(compute_stats_many([job], md5=True, workers=1))
    assert err is None and got["md5"] == want
    assert_same(got, {**reference(arr), "md5": want}, rel=2.0**-20 if arr.dtype == np.float16 else 1e-12)
    assert compute_stats(view)["md5"] is None  # only when asked


def test_non_contiguous_array_is_walked_in_c_order() -> None:
    base = np.random.default_rng(2).standard_normal((400, 500)).astype(np.float32)
    view = base[::3, 1::2]
    got = compute_stats(view, md5=True)
    assert got["md5"] == hashlib.md5(np.ascontiguousarray(view).tobytes()).hexdigest()
    assert_same({**got, "md5": None}, reference(view))


# -- big tensors -------------------------------------------------------------------------------------


def test_big_memmap_is_processed_in_bounded_memory(tmp_path: Path) -> None:
    n = 40 * 1024 * 1024  # 160 MiB of float32, well past any chunk
    path = tmp_path / "big.npy"
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n // 1024, 1024))
    flat = mm.reshape(-1)
    step = 1 << 22
    rng = np.random.default_rng(5)
    for i in range(0, n, step):
        flat[i : i + step] = rng.standard_normal(step, dtype=np.float32)
    flat[n // 2] = 0.0
    flat[-1] = -np.inf
    mm.flush()
    del mm, flat
    offset, dtype, shape, _ = header_of(path)

    # Reference, chunk by chunk in float64 (the whole tensor in float64 would be 320 MiB).
    mx, mn, total, squares = -math.inf, math.inf, [], []
    counts = dict.fromkeys(["neg", "pos", "zero", "ninf"], 0)
    ref_view = np.load(path, mmap_mode="r").reshape(-1)
    for i in range(0, n, step):
        x = ref_view[i : i + step].astype(np.float64)
        mx, mn = max(mx, x.max()), min(mn, x.min())
        total.append(x.sum())
        squares.append(np.dot(x, x))
        counts["neg"] += int((x < 0).sum())
        counts["pos"] += int((x > 0).sum())
        counts["zero"] += int((x == 0).sum())
        counts["ninf"] += int(np.isneginf(x).sum())
    del ref_view

    tracemalloc.start()
    try:
        got = compute_stats(open_tensor(path, offset, dtype, shape))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak numpy allocation {peak} bytes"  # scratch is < 1 MiB per block

    [(_, streamed, err)] = list(compute_stats_many([StatJob(1, str(path), offset, dtype, shape)], workers=1))
    assert err is None
    assert_same(got, streamed)
    assert got["count"] == n and got["max"] == mx and got["min"] == -math.inf
    assert got["avg"] == -math.inf  # a -inf among finite values
    assert got["l2norm"] == math.inf
    assert (got["neg_count"], got["pos_count"], got["zero_count"]) == (
        counts["neg"],
        counts["pos"],
        counts["zero"],
    )
    assert got["neg_inf_count"] == counts["ninf"] == 1 and got["nan_count"] == 0
    path.unlink()  # 160 MiB: do not keep it in pytest's retained tmp dirs


def test_big_finite_sums_match(tmp_path: Path) -> None:
    n = 5 * BLOCK_ELEMS + 12345
    a = (np.random.default_rng(9).standard_normal(n) * 100 + 3).astype(np.float32)
    got = stats_via_file(save(tmp_path, "bigfinite", a))
    assert_same(got, reference(a))


# -- open_tensor and compute_stats_many ---------------------------------------------------------------


def test_open_tensor_is_a_read_only_map(tmp_path: Path) -> None:
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    job = save(tmp_path, "ro", a)
    view = open_tensor(Path(job.path), job.data_offset, job.stored_dtype, list(job.shape))
    np.testing.assert_array_equal(view, a)
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0, 0] = 1


def truncate(job: StatJob, keep: int) -> None:
    with open(job.path, "r+b") as f:
        f.truncate(job.data_offset + keep)


def test_open_tensor_rejects_truncated_and_missing(tmp_path: Path) -> None:
    job = save(tmp_path, "cut", np.arange(1000, dtype=np.float32))
    truncate(job, 100)
    with pytest.raises(TruncatedTensorError):
        open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape)
    with pytest.raises(FileNotFoundError):
        open_tensor(tmp_path / "nope.npy", 128, "float32", (0,))


def make_mixed_jobs(tmp_path: Path, n_good: int) -> tuple[list[StatJob], dict[int, dict], set[int]]:
    """Good tensors interleaved with a truncated one, a missing one and a pickled-object one."""
    rng = np.random.default_rng(11)
    jobs: list[StatJob] = []
    want: dict[int, dict] = {}
    for i in range(n_good):
        a = rng.standard_normal(int(rng.integers(0, 3000))).astype(np.float32 if i % 3 else np.int32)
        job = save(tmp_path, f"good{i}", a)
        job.row_id = i
        jobs.append(job)
        want[i] = reference(a)
    cut = save(tmp_path, "cut", np.arange(5000, dtype=np.float32))
    truncate(cut, 7)
    cut.row_id = 10_001
    cut_header = save(tmp_path, "cuthdr", np.arange(5, dtype=np.float32))
    truncate(cut_header, -20)  # header itself cut: data_offset beyond EOF
    cut_header.row_id = 10_002
    cut_header.shape = (0,)
    missing = StatJob(10_003, str(tmp_path / "missing.npy"), 128, "float32", (4,))
    obj = StatJob(10_004, str(tmp_path / "good0.npy"), 128, "object", (1,))
    bad = [cut, cut_header, missing, obj]
    for k, b in enumerate(bad):
        jobs.insert(1 + k * (len(jobs) // len(bad)), b)
    return jobs, want, {b.row_id for b in bad}


@pytest.mark.parametrize(
    ("workers", "backend", "caller_computes"),
    [(1, "process", True), (2, "process", True), (3, "process", False), (2, "thread", True)],
    ids=["inline", "caller+helper", "helpers-only", "threads"],
)
def test_many_reports_errors_and_carries_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, backend: str, caller_computes: bool
) -> None:
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)  # use helpers even for this small run
    monkeypatch.setattr(ts, "_BATCH_JOBS", 7)  # several batches in flight
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", caller_computes)
    here = []  # batches computed in this process (helper processes run the unpatched module)
    run_batch = ts._run_batch
    monkeypatch.setattr(ts, "_run_batch", lambda batch, md5: here.append(1) or run_batch(batch, md5))
    jobs, want, bad = make_mixed_jobs(tmp_path, 40)
    results = list(compute_stats_many(jobs, workers=workers, backend=backend))
    if backend == "process" and not caller_computes:
        assert not here, "the helpers should have done all the work"
    assert [r[0] for r in results] == [j.row_id for j in jobs]  # job order
    errors = {row_id: err for row_id, stats, err in results if err is not None}
    assert set(errors) == bad
    assert errors[10_001].startswith("truncated:") and errors[10_002].startswith("truncated:")
    assert errors[10_003].startswith("FileNotFoundError")
    for row_id, stats, err in results:
        if row_id not in bad:
            assert err is None
            assert_same(stats, want[row_id])
        else:
            assert stats is None
    assert_only_idle_helpers_left()


READY_THEN_DIE = (
    "import pickle, sys; d = pickle.dumps((-1, None)); "
    "sys.stdout.buffer.write(len(d).to_bytes(8, 'little') + d); sys.stdout.flush(); sys.stdin.buffer.read(9)"
)


@pytest.mark.parametrize(
    "code", ["raise SystemExit(3)", READY_THEN_DIE], ids=["never-starts", "dies-on-work"]
)
def test_dead_helpers_cost_nothing_but_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(ts, "_BATCH_JOBS", 5)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)  # rely on the helpers until they are gone
    monkeypatch.setattr(hp, "_helper_argv", lambda preload=(): [sys.executable, "-c", code])
    jobs, want, bad = make_mixed_jobs(tmp_path, 30)
    results = list(compute_stats_many(jobs, workers=3))
    assert [r[0] for r in results] == [j.row_id for j in jobs]
    assert {r for r, _, err in results if err} == bad
    for row_id, stats, _ in results:
        if row_id not in bad:
            assert_same(stats, want[row_id])
    assert_only_idle_helpers_left()


def test_idle_helpers_are_reused_then_time_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)
    monkeypatch.setattr(hp, "_HELPER_IDLE_S", 1.0)
    jobs = [save(tmp_path, f"r{i}", np.arange(i, dtype=np.float32)) for i in range(20)]
    assert all(err is None for _, _, err in compute_stats_many(jobs, workers=3))
    first = sorted(h.proc.pid for h in hp._idle_helpers)
    assert len(first) == 2
    assert all(err is None for _, _, err in compute_stats_many(jobs, workers=3))
    assert sorted(h.proc.pid for h in hp._idle_helpers) == first  # same processes, no new start-up
    procs = [h.proc for h in hp._idle_helpers]
    for proc in procs:
        proc.wait(timeout=30)  # they exit by themselves when idle
    results = list(compute_stats_many(jobs, workers=3))  # dead idle helpers are replaced
    assert all(err is None for _, _, err in results) and len(results) == 20
    assert not set(first) & {h.proc.pid for h in hp._idle_helpers}


def test_helpers_do_not_rerun_an_unguarded_main_script(tmp_path: Path) -> None:
    """A user script without `if __name__ == "__main__"` must run once, not once per worker."""
    for i in range(600):
        np.save(tmp_path / f"t{i}.npy", np.arange(i % 50, dtype=np.float32))
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(ts.__file__).parents[2])!r})\n"
        "from pathlib import Path\n"
        "from ingest.statistics import kernel as ts\n"
        f"d = Path({str(tmp_path)!r})\n"
        "with open(d / 'runs.log', 'a') as f:\n"
        "    f.write('ran\\n')\n"
        "from ingest import helper_pool\n"
        "helper_pool._CALLER_COMPUTES = False\n"
        "jobs = [ts.StatJob(i, str(d / f't{i}.npy'), 128, 'float32', (i % 50,)) for i in range(600)]\n"
        "res = list(ts.compute_stats_many(jobs, workers=2))\n"
        "print(sum(err is None for _, _, err in res))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["600"]
    assert (tmp_path / "runs.log").read_text() == "ran\n"


def test_many_streams_with_bounded_look_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts, "_INLINE_JOBS", 4)
    monkeypatch.setattr(ts, "_BATCH_JOBS", 3)
    job = save(tmp_path, "one", np.arange(10, dtype=np.float32))
    pulled = 0

    def endless():
        nonlocal pulled
        for i in range(10**9):
            pulled += 1
            yield StatJob(i, job.path, job.data_offset, job.stored_dtype, job.shape)

    gen = compute_stats_many(endless(), workers=2)
    for k, (row_id, stats, err) in enumerate(gen):
        assert row_id == k and err is None and stats["count"] == 10
        if k == 50:
            break
    gen.close()
    # at most: the results yielded, plus one batch per in-flight slot and one being filled
    assert pulled <= 51 + (2 * 2 + 1) * 3 + 4


def test_many_with_md5_and_default_workers(tmp_path: Path) -> None:
    jobs = [save(tmp_path, f"m{i}", np.arange(i * 100, dtype=np.int64)) for i in range(5)]
    for i, job in enumerate(jobs):
        job.row_id = i
    for row_id, stats, err in compute_stats_many(iter(jobs), md5=True):
        raw = Path(jobs[row_id].path).read_bytes()[jobs[row_id].data_offset :]
        assert err is None and stats["md5"] == hashlib.md5(raw).hexdigest()


# -- real MindSpore dumps ------------------------------------------------------------------------------


def sample_files() -> list[Path]:
    return sorted(SAMPLES.glob("*/dump/rank_0/*/*/*/*.npy"))


def test_samples_all_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sample_files()
    assert len(files) > 100
    jobs = []
    arrays = {}
    for i, p in enumerate(files):
        offset, dtype, shape, _ = header_of(p)
        # the pipeline records the dtype's name ('float32', 'bool'), not its descr
        jobs.append(StatJob(i, str(p), offset, np.dtype(dtype).name, shape))
        arrays[i] = np.load(p)
    kinds = {a.dtype.kind for a in arrays.values()}
    assert {"f", "i", "b"} <= kinds and any(a.ndim == 0 for a in arrays.values())
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)
    results = list(compute_stats_many(jobs, md5=True, workers=2))
    assert len(results) == len(jobs)
    for row_id, stats, err in results:
        assert err is None, (files[row_id], err)
        want = reference(arrays[row_id])
        want["md5"] = hashlib.md5(arrays[row_id].tobytes()).hexdigest()
        assert_same(stats, want)


def test_read_into_stops_at_eof(tmp_path: Path) -> None:
    """_read_into fills the view, or reports how much there was before EOF."""
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(range(256)) * 4)
    buf = bytearray(1024)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert ts._read_into(fd, memoryview(buf), 0) == 1024
        assert ts._read_into(fd, memoryview(buf), 1000) == 24
    finally:
        os.close(fd)
    assert bytes(buf[:24]) == (bytes(range(256)) * 4)[1000:]


def test_malformed_jobs_are_errors_not_exceptions(tmp_path: Path) -> None:
    good = save(tmp_path, "g", np.arange(8, dtype=np.float32))
    good.row_id = 4
    jobs = [
        StatJob(1, good.path, good.data_offset, "nonsense", good.shape),
        StatJob(2, good.path, good.data_offset, good.stored_dtype, None),  # type: ignore[arg-type]
        StatJob(3, good.path, -5, good.stored_dtype, good.shape),
        good,
    ]
    results = list(compute_stats_many(jobs, workers=1))
    assert [r[0] for r in results] == [1, 2, 3, 4]
    assert all(stats is None and err for _, stats, err in results[:3])
    assert results[3][2] is None and results[3][1]["max"] == 7.0


def test_relative_paths_resolve_in_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)
    (tmp_path / "d").mkdir()
    job = save(tmp_path / "d", "rel", np.arange(6, dtype=np.int32))
    monkeypatch.chdir(tmp_path)
    rel = StatJob(1, os.path.join("d", "rel.npy"), job.data_offset, job.stored_dtype, job.shape)
    [(_, stats, err)] = list(compute_stats_many([rel], workers=2))
    assert err is None and stats["max"] == 5.0


def test_start_helpers_ahead_of_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)
    hp.start_helpers(workers=3)
    started = sorted(h.proc.pid for h in hp._idle_helpers)
    assert len(started) == 2
    jobs = [save(tmp_path, f"s{i}", np.full(i + 1, -i, dtype=np.int16)) for i in range(10)]
    results = list(compute_stats_many(jobs, workers=3))
    assert [stats["min"] for _, stats, _ in results] == [float(-i) for i in range(10)]
    assert sorted(h.proc.pid for h in hp._idle_helpers) == started


def test_helpers_ignore_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C reaches the whole terminal process group: a helper must survive it, so that the
    caller (a watcher flushing on SIGINT) still has its helpers."""
    import signal
    import time

    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)
    hp.start_helpers(workers=2)
    [helper] = hp._idle_helpers
    deadline = time.monotonic() + 30
    while not helper.ready and time.monotonic() < deadline:  # SIGINT before the handler is set kills
        helper.receive()
        time.sleep(0.01)
    os.kill(helper.proc.pid, signal.SIGINT)
    time.sleep(0.3)
    assert helper.proc.poll() is None, "the helper died of SIGINT"
    jobs = [save(tmp_path, f"c{i}", np.arange(i + 1, dtype=np.float32)) for i in range(6)]
    results = list(compute_stats_many(jobs, workers=2))
    assert [stats["max"] for _, stats, _ in results] == [float(i) for i in range(6)]
    assert [h.proc.pid for h in hp._idle_helpers] == [helper.proc.pid]  # the same helper did the work
