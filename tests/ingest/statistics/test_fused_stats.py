"""The one-pass statistics kernel (ingest/statistics/_fused_stats.c) and its pure-numpy fallback.

Both must follow the summation order ingest/statistics/kernel.py defines (8 lanes by global element index,
each lane in storage order, lanes combined 0..7; float16/bfloat16: 16 lanes with float32 partials over
blocks of 256 elements, bfloat16 outside [2^-60, 2^60) straight to float64) and so give bit-identical
results on every dtype and size. Tensors are real npy files written with np.save into tmp_path and read
back the way ingest does (compute_stats_many, open_tensor), plus in-memory arrays for the layouts only
compute_stats sees.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
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
from ingest.statistics import kernel as ts
from ingest.statistics.kernel import (
    BLOCK_ELEMS,
    HALF_BLOCK,
    HALF_LANES,
    LANES,
    StatJob,
    compute_stats,
    compute_stats_many,
    open_tensor,
)

ROOT = Path(ts.__file__).resolve().parents[2]
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


def via_mapping(job: StatJob, window: int) -> dict:
    """compute_stats_many reading the tensor through the C kernel's mappings whatever its size, at most
    ``window`` bytes mapped at a time (the default is 4 MiB, for tensors of 1 MiB and more)."""
    before = ts._MAPPED_MIN, ts._MAPPED_WINDOW
    ts._MAPPED_MIN, ts._MAPPED_WINDOW = 1, window
    try:
        return via_file(job)
    finally:
        ts._MAPPED_MIN, ts._MAPPED_WINDOW = before


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
        x[rng.integers(0, n, 1 + n // 900)] = -np.inf
        x[rng.integers(0, n, 1 + n // 900)] = np.inf  # infinities beside NaN are still counted
        x[rng.integers(0, n, 1 + n // 300)] = rng.choice([np.nan, -np.nan], 1 + n // 300)
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
        stats_only = {**c_file, "md5": None}
        with backend(True):  # read through mappings (big tensors do), windows that start mid-row
            assert_identical(via_mapping(job, window=12_344), stats_only)
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


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_blocks_of_any_size_give_the_same_bits(dtype: str) -> None:
    """The lanes (and the half kinds' float32 blocks) follow the global element index: splitting a
    tensor into blocks of any length (the C path reads 512 KiB at a time, the fallback BLOCK_ELEMS
    elements) changes nothing, on either backend, and both backends agree."""
    rng = np.random.default_rng(8)
    x, _ = make(dtype, 10_007, "finite", rng)
    if dtype == "bfloat16":
        x = x.view(ml_dtypes.bfloat16)
    results = []
    for c_kernel in (True, False):
        with backend(c_kernel):
            whole = ts._Accumulator(x.dtype, False)
            whole.update(x)
            want = whole.result()
            results.append(want)
            for step in (1, 3, 8, 13, 16, 17, 255, 256, 257, 1000, 1024, 4096):
                acc = ts._Accumulator(x.dtype, False)
                for i in range(0, x.size, step):
                    acc.update(x[i : i + step])
                assert_identical(acc.result(), want)
    assert_identical(results[0], results[1])


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


def f32(v: float) -> float:
    """v rounded to float32 (a float32 sum or product computed in float64 and rounded once more is
    the correctly rounded float32 result: 53 >= 2 * 24 + 2)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def half_definition(x: np.ndarray, lo: float = 2.0**-60, hi: float = 2.0**60) -> tuple[float, float]:
    """The float16/bfloat16 definition in plain Python: element i into lane i % 16; per block of 256
    elements (by index) float32 partials of x and x * x per lane, added to the lane's float64 sums at
    the block's end (and the tensor's); bfloat16 elements outside 2^-60 <= |x| < 2^60 (other than 0)
    straight into the float64 sums. Lanes combined 0..15."""
    bf16 = x.dtype == ml_dtypes.bfloat16
    s, q, p, r = ([0.0] * HALF_LANES for _ in range(4))
    for i, v in enumerate(x.astype(np.float64).tolist()):
        lane = i % HALF_LANES
        if not bf16 or v == 0 or lo <= abs(v) < hi:
            p[lane] = f32(p[lane] + v)
            r[lane] = f32(r[lane] + f32(v * v))
        else:
            s[lane] += v
            q[lane] += v * v
        if (i + 1) % HALF_BLOCK == 0:
            s = [a + b for a, b in zip(s, p, strict=True)]
            q = [a + b for a, b in zip(q, r, strict=True)]
            p, r = [0.0] * HALF_LANES, [0.0] * HALF_LANES
    total, squares = s[0] + p[0], q[0] + r[0]
    for j in range(1, HALF_LANES):
        total += s[j] + p[j]
        squares += q[j] + r[j]
    return total, squares


def save_any(tmp_path: Path, name: str, x: np.ndarray) -> StatJob:
    if x.dtype == ml_dtypes.bfloat16:
        return save(tmp_path, name, x.view(np.uint16), "bfloat16")
    return save(tmp_path, name, x)


HALF_SIZES = [1, 15, 16, 17, 255, 256, 257, 511, 512, 513, 3 * HALF_BLOCK + 5, 1000]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint64"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 1003, 2049, BLOCK_ELEMS + 11])
def test_sums_follow_the_documented_order(tmp_path: Path, dtype: str, n: int) -> None:
    rng = np.random.default_rng(n)
    if dtype.startswith(("float", "bfloat")):
        # wide magnitudes: any other order (pairwise, BLAS, other lanes or blocks) gives other bits
        x, _ = make(dtype, n, "finite", rng)
        if dtype == "bfloat16":
            x = x.view(ml_dtypes.bfloat16)
        x[~np.isfinite(x.astype(np.float64))] = 1.0
    else:
        x, _ = make(dtype, n, "full", rng)
    total, squares = (
        half_definition(x) if x.itemsize == 2 and dtype.endswith("float16") else lane_definition(x)
    )
    job = save_any(tmp_path, "order", x)
    for c_kernel in (True, False):
        with backend(c_kernel):
            got = via_file(job)
        assert bits(got["avg"]) == bits(total / n)
        assert bits(got["l2norm"]) == bits(math.sqrt(squares))


def half_edge_values(dtype: str, n: int, rng: np.random.Generator, where: str) -> np.ndarray:
    """Half-kind tensors whose special elements sit at block and row boundaries: bfloat16 values near
    3e38 (their squares overflow float32, two of them their sum), subnormal and tiny ones (squares
    underflow float32), exactly 2^-60 and 2^60 (the range's ends) and their neighbours, ±0, ±inf, NaN."""
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    spots = sorted(
        {k for b in range(0, n + HALF_BLOCK, HALF_BLOCK) for k in (b - 1, b, b + 1, b + 15, b + 16)}
    )
    spots = [k for k in spots if 0 <= k < n]
    if dtype == "bfloat16":
        edge = [3.0e38, -3.3e38, 1.0e-39, -2.0e-30, 2.0**-60, -(2.0**-60), 2.0**60, 2.0**59 * 1.99, 2.0**-61]
    else:
        edge = [65504.0, -65504.0, 6e-8, -6e-8, 1e-5]
    edge += [0.0, -0.0]
    if where == "inf":
        edge += [np.inf, -np.inf, np.inf]
    if where == "nan":
        edge += [np.nan, np.inf, -np.nan, -np.inf]
    for j, k in enumerate(spots):
        x[k] = edge[j % len(edge)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("where", ["finite", "inf", "nan"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_kinds_at_block_boundaries(tmp_path: Path, dtype: str, where: str) -> None:
    """Sizes around the 256-element blocks and 16-element rows, special values on their edges:
    C kernel, fallback (files, mmap and odd splits) and the plain-Python definition agree."""
    rng = np.random.default_rng([len(dtype), len(where)])
    for n in HALF_SIZES:
        x = half_edge_values(dtype, n, rng, where)
        job = save_any(tmp_path, f"{dtype}_{n}", x)
        with backend(True):
            want = via_file(job)
        with backend(False):
            assert_identical(via_file(job), want)
        for c_kernel in (True, False):
            with backend(c_kernel):
                assert_identical(compute_stats(x), want)
                acc = ts._Accumulator(x.dtype, False)
                for i in range(0, n, 1000):  # blocks that start anywhere in a row and a block
                    acc.update(x[i : i + 1000])
                assert_identical(acc.result(), want)
        nan = int(np.isnan(x.astype(np.float64)).sum())
        assert want["nan_count"] == nan
        if nan:
            assert math.isnan(want["avg"]) and math.isnan(want["l2norm"])
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf in the reference
            total, squares = half_definition(x)
        assert bits(want["avg"]) == bits(total / n)
        assert bits(want["l2norm"]) == bits(math.sqrt(squares))


def bf16_pattern(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """bfloat16 tensors with elements outside the float32-safe range in the patterns real ones have:
    sparse -inf, dense -inf, runs (a causal attention mask), tiny values, all huge."""
    x = rng.standard_normal(n) * 3
    if name == "sparse":
        x[::997] = -np.inf
    elif name == "dense":
        x[::19] = -np.inf
    elif name == "runs":
        for start in range(0, n, 700):
            x[start : start + rng.integers(1, 600)] = -3.3e38
    elif name == "tiny":
        x[::101] = 1e-30
        x[5::203] = -2e-39
    elif name == "huge":
        x[:] = -3e38
        x[::7] = 2.0**60
    return x.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("pattern", ["sparse", "dense", "runs", "tiny", "huge"])
def test_bfloat16_out_of_range_patterns(tmp_path: Path, pattern: str) -> None:
    """The AVX2 kernel checks each 256-element segment and redoes (or starts) it carefully when it has
    such elements: same bits as the fallback and the definition, in one piece or split anywhere."""
    rng = np.random.default_rng(len(pattern))
    for n in (4099, 70_001):
        x = bf16_pattern(pattern, n, rng)
        job = save_any(tmp_path, f"{pattern}_{n}", x)
        with backend(True):
            want = via_file(job)
        with backend(False):
            assert_identical(via_file(job), want)
        for c_kernel in (True, False):
            with backend(c_kernel):
                acc = ts._Accumulator(x.dtype, False)
                for i in range(0, n, 4567):
                    acc.update(x[i : i + 4567])
                assert_identical(acc.result(), want)
        if n < 10_000:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                total, squares = half_definition(x)
            assert bits(want["avg"]) == bits(total / n)
            assert bits(want["l2norm"]) == bits(math.sqrt(squares))


@pytest.mark.parametrize("around", [-60, 60])
def test_bfloat16_range_boundaries(tmp_path: Path, around: int) -> None:
    """Values on both sides of 2^-60 and 2^60 (the float32-safe range's ends) next to companions that
    make float32 partials round (at the low end 2^-36 and 2^-30: float32 ulps of 2^-59 and 2^-53; at the
    high end 2^30, lost next to 2^60 in float32): which side each value lands on shows in the bits, and
    the C kernel, the fallback and the definition put every one on the same side. The first blocks hold
    the exact ends and their neighbours among companions only; the rest random values around the end."""
    rng = np.random.default_rng(around + 100)
    n = 3001
    x = np.where(rng.random(n) < 0.5, -1.0, 1.0) * 2.0 ** rng.uniform(around - 2, around + 2, n)
    x[::3] = rng.uniform(1, 2, x[::3].shape) * (2.0**-36 if around < 0 else 2.0**30)
    x[: 4 * HALF_BLOCK] = rng.uniform(1, 2, 4 * HALF_BLOCK) * (2.0**-30 if around < 0 else 2.0**30)
    x = x.astype(ml_dtypes.bfloat16)
    # the end exactly, its neighbours below and above, two negative ones (of other magnitudes: +v and -v
    # in two lanes would cancel whichever way they go), each in a lane and a block of its own
    low = [0x2180, 0x217F, 0x2181, 0xA17E, 0xA182]
    high = [0x5D80, 0x5D7F, 0x5D81, 0xDD7E, 0xDD82]
    for j, b in enumerate(low if around < 0 else high):
        x[j * (HALF_BLOCK + 1) % (4 * HALF_BLOCK)] = np.array([b], np.uint16).view(ml_dtypes.bfloat16)[0]
    job = save_any(tmp_path, f"edges{around}", x)
    with backend(True):
        want = via_file(job)
    with backend(False):
        assert_identical(via_file(job), want)
    total, squares = half_definition(x)
    assert bits(want["avg"]) == bits(total / n)
    assert bits(want["l2norm"]) == bits(math.sqrt(squares))
    # and the check has teeth: with the range's end one bfloat16 step up or down, other bits
    step = 2.0**-7
    for f in (1 - step / 2, 1 + step):
        moved = half_definition(x, lo=2.0**-60 * f) if around < 0 else half_definition(x, hi=2.0**60 * f)
        assert moved != (total, squares), f


def test_bfloat16_outside_the_float32_range_keeps_full_precision() -> None:
    """bfloat16 values whose squares (or sums) would overflow or underflow float32 give the float64
    results: no inf, no lost tiny tensor."""
    for c_kernel in (True, False):
        with backend(c_kernel):
            big = compute_stats(np.array([3.0e38] * 2000, dtype=ml_dtypes.bfloat16))
            v = float(np.float64(ml_dtypes.bfloat16(3.0e38)))
            assert big["avg"] == pytest.approx(v, rel=1e-12) and big["l2norm"] == pytest.approx(
                v * math.sqrt(2000), rel=1e-12
            )
            tiny = compute_stats(np.array([1e-30, -3e-39] * 1500, dtype=ml_dtypes.bfloat16))
            a = float(np.float64(ml_dtypes.bfloat16(1e-30)))
            b = float(np.float64(ml_dtypes.bfloat16(-3e-39)))
            assert tiny["l2norm"] == pytest.approx(math.sqrt(1500 * (a * a + b * b)), rel=1e-12)
            assert tiny["avg"] == pytest.approx((a + b) / 2, rel=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_kinds_error_bound(dtype: str) -> None:
    """The documented bound: |sum error| <= 2^-20 * sum |x| and |sum of squares error| <= 2^-20 * sum
    of squares (the float32 partials add 16 values: <= 15 * 2^-24 relative; float64 adds nothing
    visible), far below the dtypes' own precision (2^-11 and 2^-8). Checked against exact sums."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    n = 50_000
    for scale in (1.0, 1e-3, 300.0):
        x = (rng.standard_normal(n) * scale + rng.choice([0.0, scale * 5], n)).astype(
            ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
        )
        v = x.astype(np.float64).tolist()
        exact_s = sum(Fraction(a) for a in v)
        exact_q = sum(Fraction(a) * Fraction(a) for a in v)
        abs_sum = math.fsum(abs(a) for a in v)
        for c_kernel in (True, False):
            with backend(c_kernel):
                got = compute_stats(x)
            assert abs(Fraction(got["avg"] * n) - exact_s) <= 2.0**-20 * abs_sum + abs(exact_s) * 2.0**-50
            assert abs(Fraction(got["l2norm"]) ** 2 - exact_q) <= 2.0**-20 * exact_q


def test_half_kinds_do_not_count_negative_nan_as_negative(tmp_path: Path) -> None:
    """NaN with the sign bit set is NaN, not a negative value (the C kernel counts on 16-bit patterns)."""
    for stored, nan_bits, neg_one in (("float16", 0xFE00, 0xBC00), ("bfloat16", 0xFFC0, 0xBF80)):
        a = np.array([nan_bits, neg_one, 0x8000, nan_bits & 0x7FFF] * 300, dtype=np.uint16)
        job = save(tmp_path, stored, a if stored == "bfloat16" else a.view(np.float16), stored)
        for c_kernel in (True, False):
            with backend(c_kernel):
                got = via_file(job)
            assert (got["nan_count"], got["neg_count"], got["zero_count"], got["pos_count"]) == (
                600,
                300,
                300,
                0,
            )


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
    assert np.shares_memory(sc.hgrid_flat, sc.hgrid) and np.shares_memory(sc.hgrid64_flat, sc.hgrid64)


def test_numpy_reduces_the_middle_axis_of_blocks_row_by_row() -> None:
    """The half kinds' fallback relies on np.add.reduce(a, axis=1, out=...) of a C-contiguous
    (blocks, 64, 16) complex64 array adding, per block and column, row after row in float32 (real and
    imaginary parts independently), starting from row 0: no pairwise summation, no float64."""
    rng = np.random.default_rng(1)

    def wild(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)).astype(np.float32)

    rows = HALF_BLOCK // HALF_LANES
    for blocks in (1, 2, 7, BLOCK_ELEMS // HALF_BLOCK):
        a = (wild(blocks, rows, HALF_LANES) + 1j * wild(blocks, rows, HALF_LANES)).astype(np.complex64)
        out = np.empty((blocks, HALF_LANES), np.complex64)
        np.add.reduce(a, axis=1, out=out)
        want = a[:, 0].copy()
        for k in range(1, rows):
            want = (want + a[:, k]).astype(np.complex64)  # complex64 + complex64 stays float32
        assert want.dtype == np.complex64
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
        # and the check has teeth: float64 accumulation or another order gives other bits
        if blocks > 2:
            assert not np.array_equal(a.astype(np.complex128).sum(axis=1).astype(np.complex64), out)


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
    # NaN beside the infinities: the half kinds' C kernel counted these on bit keys, where NaN hid them
    ([1.0, NAN, -2.0, 0.0, INF, -INF, NAN], "float16", hand(NAN, NAN, NAN, NAN, 7, 2, 2, 2, 1, 1, 1)),
    ([1.0, NAN, -2.0, 0.0, INF, -INF, NAN], "bfloat16", hand(NAN, NAN, NAN, NAN, 7, 2, 2, 2, 1, 1, 1)),
    ([1.0, NAN, -2.0, 0.0, INF, -INF, NAN], "float32", hand(NAN, NAN, NAN, NAN, 7, 2, 2, 2, 1, 1, 1)),
    ([-NAN, INF, -INF, 1.0], "float16", hand(NAN, NAN, NAN, NAN, 4, 1, 2, 1, 1, 1, 0)),
    ([-NAN, INF, -INF, 1.0], "bfloat16", hand(NAN, NAN, NAN, NAN, 4, 1, 2, 1, 1, 1, 0)),
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
    from ingest.statistics import _fused_stats

    assert ts._c_kernel is _fused_stats
    assert tuple(_fused_stats.KINDS) == ts._KINDS and _fused_stats.LANES == LANES
    assert (_fused_stats.HALF_LANES, _fused_stats.HALF_BLOCK, _fused_stats.STATE) == (16, 256, ts._STATE)
    if os.environ.get("DUMPCAT_PURE_NUMPY_STATS", "").strip() in ("", "0"):
        assert ts._kernel is _fused_stats
        assert ts.stats_backend().startswith("C kernel")
    # a fresh interpreter (like a helper process) picks it up by itself
    code = "from ingest.statistics import kernel as ts; print(ts.stats_backend())"
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_NUMPY_STATS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0 and out.stdout.startswith("C kernel ("), out.stdout + out.stderr


def test_portable_kernels_give_the_same_bits(tmp_path: Path) -> None:
    """The portable C kernels (used where there is no AVX2, e.g. on ARM; DUMPCAT_STATS_PORTABLE=1 picks
    them at import) give the bits the kernels in use here give, on every kind and the half kinds' edges."""
    rng = np.random.default_rng(11)
    jobs = []
    for dtype, profile in cases():
        for n in (0, 1, 17, 1000, 4099, BLOCK_ELEMS + 5, 300_007):
            a, stored = make(dtype, n, profile, rng)
            jobs.append(save(tmp_path, f"{dtype}_{profile}_{n}", a, stored))
    for dtype in ("float16", "bfloat16"):
        for where in ("finite", "inf", "nan"):
            for n in HALF_SIZES:
                jobs.append(
                    save_any(tmp_path, f"edge_{dtype}_{where}_{n}", half_edge_values(dtype, n, rng, where))
                )
    for pattern in ("sparse", "dense", "runs", "tiny", "huge"):
        jobs.append(save_any(tmp_path, f"pattern_{pattern}", bf16_pattern(pattern, 70_001, rng)))
    for i, job in enumerate(jobs):
        job.row_id = i
    with backend(True):
        want = [{k: bits(v) for k, v in stats.items()} for _, stats, _ in compute_stats_many(jobs, workers=1)]
    code = (
        "import json, sys\n"
        "from ingest.statistics import kernel as ts\n"
        "from ingest.statistics import _fused_stats\n"
        "from tests.ingest.statistics.test_fused_stats import bits\n"
        "jobs = [ts.StatJob(*j) for j in json.load(sys.stdin)]\n"
        "got = [{k: bits(v) for k, v in s.items()} for _, s, _ in ts.compute_stats_many(jobs, workers=1)]\n"
        "print(json.dumps([_fused_stats.ISA, ts.stats_backend(), got]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_NUMPY_STATS"}
    env["DUMPCAT_STATS_PORTABLE"] = "1"
    payload = json.dumps([[j.row_id, j.path, j.data_offset, j.stored_dtype, list(j.shape)] for j in jobs])
    out = subprocess.run(
        [sys.executable, "-c", code], input=payload, capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.returncode == 0, out.stderr
    isa, backend_note, got = json.loads(out.stdout)
    assert isa == "portable" and backend_note == "C kernel (portable)"
    for job, g, w in zip(jobs, got, want, strict=True):
        assert g == w, (job.path, g, w)


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
    code = "from ingest.statistics import kernel as ts; print(ts.stats_backend())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "numpy fallback (DUMPCAT_PURE_NUMPY_STATS is set)"


def test_without_the_module_the_fallback_is_used_quietly(tmp_path: Path) -> None:
    """As after an install without a C compiler: no traceback, no warning, a note, same results."""
    a = float_values("float64", 1000, "finite", np.random.default_rng(1))
    job = save(tmp_path, "nomod", a)
    with backend(True):
        want = via_file(job)
    code = (
        "import sys, json; sys.modules['ingest.statistics._fused_stats'] = None\n"  # `import` now fails
        "from ingest.statistics import kernel as ts\n"
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
    assert note == "numpy fallback (the C kernel ingest.statistics._fused_stats is not built)"
    assert_identical(json.loads(stats), want)


def test_kernel_rejects_bad_arguments() -> None:
    k = ts._c_kernel
    lanes = bytearray(ts._STATE * 8)
    with pytest.raises(ValueError):
        k.block(b"\0" * 3, ts._KINDS.index("float32"), 0, lanes)  # not whole elements
    with pytest.raises(ValueError):
        k.block(b"", len(ts._KINDS), 0, lanes)
    with pytest.raises(ValueError):
        k.block(b"", 0, HALF_BLOCK, lanes)
    with pytest.raises(ValueError):
        k.block(b"", 0, -1, lanes)
    with pytest.raises(ValueError):
        k.block(b"", 0, 0, bytearray(128))  # the 16 float64 of before
    with pytest.raises(BufferError):
        k.block(b"", 0, 0, b"\0" * (ts._STATE * 8))  # read-only lanes
    with pytest.raises(ValueError):
        k.count(b"", ts._KINDS.index("int32"), 0.0)
    assert k.block(b"", 0, 0, lanes) == (0, 0, 0, 0, 0, -INF, INF)


def _np_blocks(a: np.ndarray, kind: int, phase: int, lanes: bytearray) -> list[float]:
    """The fallback's `_np_block` over `a` in blocks of at most BLOCK_ELEMS elements (its limit), the
    lanes carried from block to block as the C kernel carries them within one call: the five counts
    (neg, zero, nan, -inf, +inf) summed, max and min of the blocks'."""
    out = None
    for at in range(0, max(len(a), 1), BLOCK_ELEMS):
        block = a[at : at + BLOCK_ELEMS]
        got = [float(v) for v in ts._np_block(block, kind, (phase + at) % LANES, lanes, True)]
        if out is not None:
            counts = [x + y for x, y in zip(out[:5], got[:5], strict=True)]
            got = [*counts, max(out[5], got[5]), min(out[6], got[6])]
        out = got
    return out


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_byte_and_word_kinds_sum_exactly_and_hand_over_near_2_53(dtype: str) -> None:
    """int8, uint8, int16 and uint16 lanes are summed in integers (exact, so the lanes the float64
    definition gives); where a lane is near 2^53, where float64 additions start to round, the float64
    kernel takes over. Either way each lane's bits are the fallback's, from lanes that start anywhere,
    also for tensors of the kind's extremes only (two int16 -32768 square to 2^31 in one int32 slot)
    long enough to pass the kernels' counter flushes (240 rows of bytes, 8,192 pairs of rows of words)
    and to overflow 16-bit counters that were not flushed (over 32,768 pairs of rows)."""
    rng = np.random.default_rng(4)
    kind = ts._KINDS.index(dtype)
    info = np.iinfo(dtype)
    sizes = ((1, 0), (31, 5), (1000, 3), (7713, 7), (BLOCK_ELEMS - 3, 0), (1_100_007, 2))
    for start in (0.0, 12345.0, 2.0**52 - 1000, 2.0**53 - 7, 2.0**53 + 2, 2.0**60):
        for (n, phase), values in itertools.product(sizes, ("random", "extremes", "min", "max", "zero")):
            if values == "random":
                a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
            elif values == "extremes":
                a = rng.choice(np.array([info.min, info.max, 0], dtype), n)
            else:  # every element counted (negative, zero) or squared at the kind's largest
                a = np.full(n, {"min": info.min, "max": info.max, "zero": 0}[values], dtype)
            init = np.zeros(ts._STATE)
            init[: 2 * LANES] = start * rng.choice([-1.0, 1.0], 2 * LANES)  # sums S (and unused slots)
            init[16 : 16 + LANES] = start  # squares Q
            c_lanes, np_lanes = bytearray(init.tobytes()), bytearray(init.tobytes())
            c = ts._c_kernel.block(a.tobytes(), kind, phase, c_lanes)
            f = _np_blocks(a, kind, phase, np_lanes)
            assert c_lanes == np_lanes, (start, n, phase, values)
            assert [float(v) for v in c] == [float(v) for v in f], (start, n, phase, values)
            if start == 0.0:  # and they are the exact integer sums
                lane = (np.arange(n) + phase) % LANES
                got = np.frombuffer(c_lanes, np.float64)
                assert list(got[:LANES]) == list(np.bincount(lane, a.astype(np.int64), LANES))
                assert list(got[16 : 16 + LANES]) == list(np.bincount(lane, a.astype(np.int64) ** 2, LANES))


@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_64_bit_integers_at_the_edges_of_the_fast_conversion(tmp_path: Path, dtype: str) -> None:
    """The AVX2 kernels convert 64-bit integers through the bits of 2^52 + 2^51 (uint64: 2^52) when a
    row of 8 lies in [-2^51, 2^51) (uint64: below 2^52), element by element otherwise: values on both
    sides of those edges, and ones that round (above 2^53), in rows of either kind, as the fallback."""
    edges = [2**51 - 1, 2**51, 2**52 - 1, 2**52, 2**53 + 1, 2**63 - 1, 0, 1, 12345]
    if dtype == "int64":
        edges += [-(2**51), -(2**51) - 1, -(2**63), -1, -(2**53) - 1]
    rng = np.random.default_rng(12)
    for n in (8, 9, 64, 1001):
        small = rng.integers(0, 100, n).astype(dtype)  # rows that take the fast conversion
        for k in range(0, n, 3):  # every third row gets one edge value
            if k % 8 == 0:
                small[k + int(rng.integers(0, min(8, n - k)))] = edges[(k // 8) % len(edges)]
        job = save(tmp_path, f"{dtype}_{n}", small)
        with backend(True):
            c = via_file(job)
        with backend(False):
            assert_identical(via_file(job), c)


def test_bool_bytes_other_than_0_and_1_count_as_true(tmp_path: Path) -> None:
    """A bool file's bytes are read as they are (pread and mapped): any byte that is not 0 is True, as
    numpy counts them, on both backends."""
    raw = np.random.default_rng(13).choice(np.array([0, 1, 2, 255], np.uint8), 3_000_001)
    job = save(tmp_path, "bools", raw.view(np.bool_))
    want = int(np.count_nonzero(raw))
    for c_kernel in (True, False):
        with backend(c_kernel):
            for got in (via_file(job), via_file(job, md5=True), via_mapping(job, window=65_537)):
                assert (got["pos_count"], got["zero_count"]) == (want, raw.size - want)
