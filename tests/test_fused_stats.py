"""The one-pass statistics kernel (ingest/_fused_stats.c) and its pure-numpy fallback.

Both must follow the summation order ingest/tensor_stats.py defines (8 lanes by global element index,
each lane in storage order, lanes combined 0..7) and so give bit-identical results on every dtype and
size. Tensors are real npy files written with np.save into tmp_path and read back the way ingest does
(compute_stats_many, open_tensor), plus in-memory arrays for the layouts only compute_stats sees.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ingest import helper_pool as hp
from ingest import tensor_stats as ts
from ingest.tensor_stats import BLOCK_ELEMS, LANES, StatJob, compute_stats, compute_stats_many, open_tensor

ROOT = Path(ts.__file__).resolve().parents[1]
FLOAT_KEYS = ("max", "min", "avg", "l2norm")


@pytest.fixture(autouse=True)
def _restore_backend():
    """Every test leaves the process on the backend it found, and no helper behind."""
    before = ts._kernel
    yield
    ts._kernel = before
    hp._shutdown_helpers()


@contextlib.contextmanager
def backend(c_kernel: bool):
    before = ts._kernel
    assert ts.use_c_kernel(c_kernel) == c_kernel
    try:
        yield
    finally:
        ts._kernel = before


def bits(v):
    """A float's exact bit pattern (NaN as one value: NaN payloads are not part of the contract)."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v).hex()
    return v


def assert_identical(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        assert type(a[key]) is type(b[key]), (key, a[key], b[key])
        assert bits(a[key]) == bits(b[key]), (key, a[key], b[key])


def save(tmp_path: Path, name: str, arr: np.ndarray, stored: str | None = None) -> StatJob:
    path = tmp_path / f"{name}.npy"
    np.save(path, arr)
    offset = path.stat().st_size - arr.nbytes
    return StatJob(1, str(path), offset, stored or arr.dtype.str, arr.shape)


def via_file(job: StatJob, md5: bool = False) -> dict:
    [(_, stats, err)] = list(compute_stats_many([job], md5=md5, workers=1))
    assert err is None, err
    return stats


# -- random tensors with every kind of edge value ------------------------------------------------------

FLOAT_RANGES = {  # log10 of the smallest subnormal and of the largest finite value
    "float16": (-7.7, 4.8),
    "bfloat16": (-40.0, 38.5),
    "float32": (-44.8, 38.5),
    "float64": (-323.0, 308.2),
}
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
SIZES = [0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 1000, 4099]
BIG_SIZES = [BLOCK_ELEMS - 1, BLOCK_ELEMS + 5, 2 * BLOCK_ELEMS + 13, 300_007]


def float_values(dtype: str, n: int, profile: str, rng: np.random.Generator) -> np.ndarray:
    """float64 values representable in ``dtype``: huge, subnormal, normal and ±0 mixed, plus ±inf
    (profile 'inf') or NaN (profile 'nan')."""
    lo, hi = FLOAT_RANGES[dtype]
    mag = 10.0 ** rng.uniform(lo, hi, n)
    x = np.where(rng.random(n) < 0.5, -mag, mag)
    x = np.where(rng.random(n) < 0.3, rng.standard_normal(n) * 100, x)
    x[rng.random(n) < 0.05] = 0.0
    x[rng.random(n) < 0.05] = -0.0
    if profile == "inf" and n:
        x[rng.integers(0, n, 1 + n // 500)] = np.inf
        if rng.random() < 0.5:
            x[rng.integers(0, n, 1 + n // 700)] = -np.inf
    if profile == "nan" and n:
        x[rng.integers(0, n, 1 + n // 300)] = np.nan
        x[rng.integers(0, n, 1 + n // 900)] = -np.inf
    return x


def make(dtype: str, n: int, profile: str, rng: np.random.Generator) -> tuple[np.ndarray, str | None]:
    """(array as it is saved, stored dtype for the catalog if not the array's)."""
    if dtype in FLOAT_RANGES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # values past float16's range become inf
            x = float_values(dtype, n, profile, rng)
            if dtype == "bfloat16":
                return x.astype(ml_dtypes.bfloat16).view(np.uint16), "bfloat16"
            return x.astype(dtype), None
    if dtype == "bool":
        return rng.random(n) < 0.4, None
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if profile == "small":
        a = (a % 7).astype(dtype)
    if n >= 3:
        a[:3] = [info.min, info.max, 0]
    return a, None


ALL_DTYPES = [*FLOAT_RANGES, *INT_DTYPES, "bool"]


def cases():
    for dtype in ALL_DTYPES:
        profiles = ["finite", "inf", "nan"] if dtype in FLOAT_RANGES else ["full", "small"]
        for profile in profiles:
            yield dtype, profile


@pytest.mark.filterwarnings("error")  # neither backend may warn on overflow, inf - inf or NaN
@pytest.mark.parametrize(("dtype", "profile"), list(cases()))
def test_c_and_fallback_are_bit_identical_on_files(tmp_path: Path, dtype: str, profile: str) -> None:
    rng = np.random.default_rng([ALL_DTYPES.index(dtype), len(profile)])
    for n in SIZES + (BIG_SIZES if profile != "small" else []):
        a, stored = make(dtype, n, profile, rng)
        job = save(tmp_path, f"{dtype}_{n}", a, stored)
        with backend(True):
            c_file = via_file(job, md5=True)
        with backend(False):
            np_file = via_file(job, md5=True)
        assert_identical(c_file, np_file)
        if stored is None:  # the mmap path (compute_stats walks BLOCK_ELEMS blocks) agrees as well
            view = open_tensor(job.path, job.data_offset, job.stored_dtype, job.shape)
            with backend(True):
                assert_identical(compute_stats(view, md5=True), c_file)
            with backend(False):
                assert_identical(compute_stats(view, md5=True), c_file)
        path = Path(job.path)
        if n > 100_000:
            path.unlink()


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    "make_view",
    [
        lambda a: a.astype(a.dtype.newbyteorder(">")),  # byte-swapped data
        lambda a: np.asfortranarray(a.reshape(-1, 7)),  # Fortran order: memory order is walked
        lambda a: a.reshape(-1, 7)[::2, 1:6],  # non-contiguous: C order, nditer blocks
        lambda a: a[::-3],  # negative stride
        lambda a: a.reshape(-1, 7).T,  # transposed view of C data
    ],
    ids=["byteswapped", "fortran", "strided-2d", "reversed", "transposed"],
)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int16", "int64", "uint64", "bool"])
def test_c_and_fallback_are_bit_identical_on_layouts(make_view, dtype: str) -> None:
    rng = np.random.default_rng(5)
    for n in (7 * 3, 7 * 1001, 7 * (BLOCK_ELEMS // 7 + 3)):
        for profile in ("finite", "inf", "nan") if dtype.startswith("float") else ("full",):
            a, _ = make(dtype, n, profile, rng)
            view = make_view(a)
            with backend(True):
                c = compute_stats(view, md5=True)
            with backend(False):
                f = compute_stats(view, md5=True)
            assert_identical(c, f)


def test_blocks_of_any_size_give_the_same_bits() -> None:
    """The lanes follow the global element index: splitting a tensor into blocks of any length
    (the C path reads 512 KiB at a time, the fallback BLOCK_ELEMS elements) changes nothing."""
    x = float_values("float32", 10_007, "finite", np.random.default_rng(8)).astype(np.float32)
    for c_kernel in (True, False):
        with backend(c_kernel):
            whole = ts._Accumulator(x.dtype, False)
            whole.update(x)
            want = whole.result()
            for step in (1, 3, 8, 13, 1000, 4096):
                acc = ts._Accumulator(x.dtype, False)
                for i in range(0, x.size, step):
                    acc.update(x[i : i + step])
                assert_identical(acc.result(), want)


# -- the summation order, checked against its definition ---------------------------------------------


def lane_definition(x: np.ndarray) -> tuple[float, float]:
    """sum and sum of squares exactly as the module docstring defines them, in plain Python floats
    (IEEE doubles): element i into lane i % 8, each lane in index order, lanes combined 0..7."""
    s = [0.0] * LANES
    q = [0.0] * LANES
    for i, v in enumerate(x.astype(np.float64).tolist()):
        s[i % LANES] += v
        q[i % LANES] += v * v
    total, squares = s[0], q[0]
    for j in range(1, LANES):
        total += s[j]
        squares += q[j]
    return total, squares


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint64"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 1003, BLOCK_ELEMS + 11])
def test_sums_follow_the_documented_order(tmp_path: Path, dtype: str, n: int) -> None:
    rng = np.random.default_rng(n)
    if dtype.startswith("float"):
        # wide magnitudes: any other order (pairwise, BLAS, 16 lanes) gives other bits
        x = float_values(dtype, n, "finite", rng).astype(dtype)
        x[~np.isfinite(x)] = 1.0
    else:
        x, _ = make(dtype, n, "full", rng)
    total, squares = lane_definition(x)
    job = save(tmp_path, "order", x)
    for c_kernel in (True, False):
        with backend(c_kernel):
            got = via_file(job)
        assert bits(got["avg"]) == bits(total / n)
        assert bits(got["l2norm"]) == bits(math.sqrt(squares))


def test_numpy_reduces_a_non_innermost_axis_row_by_row() -> None:
    """The fallback relies on np.add.reduce(a, axis=0, out=...) of a C-contiguous (rows, 8) complex128
    array (real: elements, imaginary: squares) adding row after row into each column, real and
    imaginary parts as two independent IEEE additions (no pairwise summation, no reordering). Checked
    on data where any other order changes the bits, for this numpy."""
    rng = np.random.default_rng(0)

    def wild(rows: int) -> np.ndarray:
        return rng.standard_normal((rows, LANES)) * 10.0 ** rng.integers(-8, 17, (rows, LANES))

    for rows in (2, 3, 9, 129, 1000, BLOCK_ELEMS // LANES + 1):
        a = wild(rows) + 1j * wild(rows)
        want_re, want_im = a[0].real.tolist(), a[0].imag.tolist()
        for row in a[1:]:
            want_re = [w + v for w, v in zip(want_re, row.real.tolist(), strict=True)]
            want_im = [w + v for w, v in zip(want_im, row.imag.tolist(), strict=True)]
        out = np.empty(LANES, np.complex128)
        np.add.reduce(a, axis=0, out=out)
        assert [bits(v) for v in out.real.tolist()] == [bits(v) for v in want_re]
        assert [bits(v) for v in out.imag.tolist()] == [bits(v) for v in want_im]
    # and the check has teeth: numpy's pairwise sum over a contiguous axis differs on such data
    a = wild(8193)
    assert not np.array_equal(np.add.reduce(np.ascontiguousarray(a.T), axis=1), np.add.reduce(a, axis=0))
    # the fallback's scratch views are views (a reshape that silently copied would lose the data)
    sc = ts._scratch
    assert np.shares_memory(sc.grid_re, sc.grid) and np.shares_memory(sc.grid_im, sc.grid)


# -- MindSpore semantics on hand-computed examples, on both backends ---------------------------------


def hand(max_, min_, avg, l2norm, count, neg, pos, nan, ninf, pinf, zero) -> dict:
    return dict(
        max=max_,
        min=min_,
        avg=avg,
        count=count,
        neg_count=neg,
        pos_count=pos,
        nan_count=nan,
        neg_inf_count=ninf,
        pos_inf_count=pinf,
        zero_count=zero,
        l2norm=l2norm,
        md5=None,
    )


NAN = math.nan
INF = math.inf
EXAMPLES = [
    # values, dtype, expected (max, min, avg, l2norm, count, neg, pos, nan, -inf, +inf, zero)
    ([1.0, -2.0, 0.0, -0.0, 3.5], "float32", hand(3.5, -2.0, 0.5, math.sqrt(17.25), 5, 1, 2, 0, 0, 0, 2)),
    ([1.0, -2.0, 0.0, -0.0, 3.5], "float16", hand(3.5, -2.0, 0.5, math.sqrt(17.25), 5, 1, 2, 0, 0, 0, 2)),
    ([1.5, -0.25, 4.0], "bfloat16", hand(4.0, -0.25, 1.75, math.sqrt(18.3125), 3, 1, 2, 0, 0, 0, 0)),
    ([1.0, NAN, -2.0, 0.0, INF, -INF, NAN], "float64", hand(NAN, NAN, NAN, NAN, 7, 2, 2, 2, 1, 1, 1)),
    ([INF, 1.0, -3.0], "float32", hand(INF, -3.0, INF, INF, 3, 1, 2, 0, 0, 1, 0)),
    ([INF, -INF, 2.0], "float16", hand(INF, -INF, NAN, INF, 3, 1, 2, 0, 1, 1, 0)),
    ([1e300, -1e300, 1e300], "float64", hand(1e300, -1e300, 1e300 / 3, INF, 3, 1, 2, 0, 0, 0, 0)),
    ([65504.0] * 4, "float16", hand(65504.0, 65504.0, 65504.0, 131008.0, 4, 0, 4, 0, 0, 0, 0)),
    ([-0.0, -0.0], "float32", hand(0.0, 0.0, 0.0, 0.0, 2, 0, 0, 0, 0, 0, 2)),
    ([3, -4, 0, 0], "int8", hand(3.0, -4.0, -0.25, 5.0, 4, 1, 1, 0, 0, 0, 2)),
    ([2**64 - 1, 0], "uint64", hand(2.0**64, 0.0, 2.0**63, 2.0**64, 2, 0, 1, 0, 0, 0, 1)),
    ([True, False, True, True], "bool", hand(1.0, 0.0, 0.75, math.sqrt(3), 4, 0, 3, 0, 0, 0, 1)),
    ([], "float32", hand(None, None, None, 0.0, 0, 0, 0, 0, 0, 0, 0)),
]


@pytest.mark.parametrize(
    ("values", "dtype", "want"), EXAMPLES, ids=[f"{e[1]}-{i}" for i, e in enumerate(EXAMPLES)]
)
def test_mindspore_semantics_by_hand(tmp_path: Path, values: list, dtype: str, want: dict) -> None:
    if dtype == "bfloat16":
        a, stored = np.array(values, dtype=ml_dtypes.bfloat16).view(np.uint16), "bfloat16"
    else:
        a, stored = np.array(values, dtype=dtype), None
    job = save(tmp_path, "hand", a, stored)
    for c_kernel in (True, False):
        with backend(c_kernel):
            assert_identical(via_file(job), want)
            if dtype == "bfloat16":
                assert_identical(compute_stats(np.array(values, dtype=ml_dtypes.bfloat16)), want)


def test_complex_keeps_only_count_on_both_backends(tmp_path: Path) -> None:
    job = save(tmp_path, "c", np.array([1 + 1j, np.nan], dtype=np.complex128))
    for c_kernel in (True, False):
        with backend(c_kernel):
            got = via_file(job)
            assert got["count"] == 2 and all(v is None for k, v in got.items() if k != "count")


def test_bfloat16_direct_read_equals_the_decoded_path(tmp_path: Path) -> None:
    """bfloat16 files are read as 16-bit patterns; the result is the one the ml_dtypes-decoded
    tensor (widened to float32, as ingest.formats.dtypes.numeric_view does) gives, to the bit, and
    md5 is of the bytes as stored."""
    rng = np.random.default_rng(4)
    for profile in ("finite", "inf", "nan"):
        x = float_values("bfloat16", 3 * BLOCK_ELEMS + 5, profile, rng).astype(ml_dtypes.bfloat16)
        job = save(tmp_path, f"bf_{profile}", x.view(np.uint16), "bfloat16")
        decoded = ts._stats_of_decoded(job.path, job.data_offset, "bfloat16", job.shape, None, None, False)
        raw_md5 = hashlib.md5(x.tobytes()).hexdigest()
        for c_kernel in (True, False):
            with backend(c_kernel):
                direct = via_file(job, md5=True)
                assert direct["md5"] == raw_md5
                assert_identical({**direct, "md5": None}, decoded)
                assert_identical(compute_stats(x, md5=True), direct)


# -- the C module is built and used ------------------------------------------------------------------


def test_the_c_kernel_is_built_and_used_here() -> None:
    """CI builds the extension (pip install -e '.[test]' with gcc): its absence is a failure."""
    from ingest import _fused_stats

    assert ts._c_kernel is _fused_stats
    assert tuple(_fused_stats.KINDS) == ts._KINDS and _fused_stats.LANES == LANES
    if os.environ.get("DUMPCAT_PURE_NUMPY_STATS", "").strip() in ("", "0"):
        assert ts._kernel is _fused_stats
        assert ts.stats_backend().startswith("C kernel")
    # a fresh interpreter (like a helper process) picks it up by itself
    code = "from ingest import tensor_stats as ts; print(ts.stats_backend())"
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_NUMPY_STATS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0 and out.stdout.startswith("C kernel ("), out.stdout + out.stderr


def test_env_var_forces_the_fallback_in_helpers_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    jobs = []
    for i in range(12):
        a = float_values("float32", int(rng.integers(1, 5000)), "finite", rng).astype(np.float32)
        job = save(tmp_path, f"h{i}", a)
        job.row_id = i
        jobs.append(job)
    with backend(True):
        want = list(compute_stats_many(jobs, workers=1))
    hp._shutdown_helpers()
    monkeypatch.setenv("DUMPCAT_PURE_NUMPY_STATS", "1")
    monkeypatch.setattr(ts, "_INLINE_JOBS", 0)
    monkeypatch.setattr(hp, "_CALLER_COMPUTES", False)  # helpers (fresh interpreters) do all the work
    got = list(compute_stats_many(jobs, workers=2))
    assert [r[0] for r in got] == [r[0] for r in want]
    for (_, g, ge), (_, w, we) in zip(got, want, strict=True):
        assert ge is None and we is None
        assert_identical(g, w)
    code = "from ingest import tensor_stats as ts; print(ts.stats_backend())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "numpy fallback (DUMPCAT_PURE_NUMPY_STATS is set)"


def test_without_the_module_the_fallback_is_used_quietly(tmp_path: Path) -> None:
    """As after an install without a C compiler: no traceback, no warning, a note, same results."""
    a = float_values("float64", 1000, "finite", np.random.default_rng(1))
    job = save(tmp_path, "nomod", a)
    with backend(True):
        want = via_file(job)
    code = (
        "import sys, json; sys.modules['ingest._fused_stats'] = None\n"  # `import` now fails
        "from ingest import tensor_stats as ts\n"
        f"[(_, s, e)] = ts.compute_stats_many([ts.StatJob(1, {job.path!r}, {job.data_offset}, "
        f"{job.stored_dtype!r}, {job.shape!r})], workers=1)\n"
        "print(ts.stats_backend()); print(json.dumps(s))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_NUMPY_STATS"}
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    note, stats = out.stdout.splitlines()
    assert note == "numpy fallback (the C kernel ingest._fused_stats is not built)"
    assert_identical(json.loads(stats), want)


def test_kernel_rejects_bad_arguments() -> None:
    k = ts._c_kernel
    lanes = bytearray(128)
    with pytest.raises(ValueError):
        k.block(b"\0" * 3, ts._KINDS.index("float32"), 0, lanes)  # not whole elements
    with pytest.raises(ValueError):
        k.block(b"", len(ts._KINDS), 0, lanes)
    with pytest.raises(ValueError):
        k.block(b"", 0, 8, lanes)
    with pytest.raises(ValueError):
        k.block(b"", 0, 0, bytearray(64))
    with pytest.raises(BufferError):
        k.block(b"", 0, 0, b"\0" * 128)  # read-only lanes
    with pytest.raises(ValueError):
        k.count(b"", ts._KINDS.index("int32"), 0.0)
    assert k.block(b"", 0, 0, lanes) == (0, 0, 0, -INF, INF)
