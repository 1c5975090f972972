"""Metrics comparing a run tensor (N, x: NPU, fp16, ...) with its baseline (B, y: GPU, fp32, ...).

dumpcat stores, per matched pair of tensors, the metric set of msprobe ``compare`` and msaccucmp
(reference §4.1, §4.2). Where the two tools differ, cosine, max abs/rel error and the error ratios
follow msprobe (what ``msprobe compare`` users see); accumulated relative error, relative Euclidean
distance, KL divergence, RMSE and mean absolute error exist only in msaccucmp and follow it.
With ``n`` elements, every sum accumulated in float64:

- ``cosine`` (msprobe) = Σxy / (‖x‖‖y‖); both norms ≤ eps64 → 1.0; one norm ≤ eps64 → NULL (msprobe
  "Nan"); a non-finite quotient → NULL; clipped to ≤ 1.0 (msprobe rounds values > 0.9999 to 6
  decimals for display, which hides the last-ulp excess; we keep full precision instead).
  1-element and 0-d tensors → NULL (msprobe "unsupported").
- ``max_abs_err`` (msprobe = msaccucmp) = max|x − y|, differences in float64.
- ``max_rel_err`` (msprobe) = max RE, RE = |(x' − y') / y'| computed in ``rt = result_type(x, y,
  float32)`` (so float16/bfloat16/float32 pairs in float32, float64 and int32/int64 in float64),
  where x' = x + eps_rt and y' = y + eps_rt at the positions where y == 0 and x' = x, y' = y elsewhere
  (eps_rt = finfo(rt).eps). msaccucmp instead skips |y| ≤ eps64, see ``acc_rel_err``.
- ``err_ratio_1e3`` / ``err_ratio_5e3`` (msprobe) = count(RE < 0.001) / n, count(RE < 0.005) / n,
  the thresholds compared in ``rt`` like msprobe's numpy does; 0-d tensors → NULL (msprobe
  "unsupported"), 1-element tensors are computed.
- ``mean_abs_err`` (msaccucmp) = Σ|x − y| / n.
- ``rmse`` (msaccucmp) = sqrt(Σ(x − y)² / n).
- ``rel_euclidean`` (msaccucmp) = sqrt(Σ(x − y)² / Σy²), 0.0 when sqrt(Σy²) ≤ eps64.
- ``acc_rel_err`` (msaccucmp) = Σ over |y| > eps64 of |x − y| / |y| (msaccucmp writes |x/y − 1|, the
  same number; x − y is exact in float64 for float32 data, x/y − 1 is not).
- ``kl_div`` (msaccucmp) = Σ p·log(p/q) with p from the run and q from the baseline: each side is
  min-max normalised, u = (v − min) / (max − min) (a constant side gives u = 0), floored at
  eps32 = finfo(float32).eps, and divided by its sum (p = u / Σu); |KL| < eps64 → 0.0. The min and
  max are needed before the sums, so KL takes a second streaming pass over the data (the only
  metric that does); a tensor that fits in one processing step is not read twice.

eps64 = finfo(float64).eps, msaccucmp's mask and msprobe's ``Const.FLOAT_EPSILON`` for the norms.

NaN and ±inf follow msprobe's ``handle_inf_nan``: when either side has any, the NaN positions and
the inf positions (``isinf``, whatever the sign: msprobe's own rule) must be the same on both sides;
then those elements are set to 0 on both sides and every metric is computed on the rest (including
KL and the msaccucmp metrics, so that one pair has one set of numbers). Otherwise msprobe writes
"N/A" everywhere and every metric here is NULL. ``status`` says where the NaN are:

- ``nan_in_run`` / ``nan_in_baseline``: NaN on one side only (metrics always NULL);
- ``nan_in_both``: NaN on both sides (metrics computed iff the positions coincide);
- ``inf_mismatch``: no NaN, but ±inf at different positions (metrics NULL); matching ±inf are
  zeroed silently, like msprobe, and the status is that of the rest;
- ``shape_mismatch`` (``numel`` NULL), ``dtype_mismatch`` (msprobe's merge rule: dtypes whose names
  differ are compared only when both are float16, float32 or bfloat16), ``unsupported_dtype``
  (complex, raw bytes), ``empty`` (0 elements): every metric NULL;
- ``unsupported``: 1 element or 0-d; the metrics msprobe still computes are given (see above);
- ``ok``; and, from ``compare_jobs`` / ``compare_batch`` only, ``only_in_run`` /
  ``only_in_baseline`` / ``absent``, ``unreadable_run`` / ``unreadable_baseline`` (the run side is
  tried first); ``error`` if computing failed unexpectedly (never seen; it keeps one bad pair from
  failing a batch).

Integers and bool are compared as numbers (bool: 1/0); ml_dtypes types (bfloat16, float8, int4)
through float32, which holds them exactly; int64 beyond 2^53 rounds in float64.

Streaming: both tensors are walked in C order, ``step`` elements at a time (at most ``block`` and at
most ``_STEP``: big enough to amortise a step's Python cost, small enough to stay in cache), into
reused scratch buffers.
C-contiguous arrays (memory maps included) are sliced, never copied whole; other layouts go through
``np.nditer``'s bounded buffer. Pages of big read-only file mappings are dropped from this
process's mapping (``MADV_DONTNEED``, page cache untouched) once processed, so that the RSS of
comparing two 2 GB memory-mapped tensors stays at a few MB instead of 4 GB.

The C kernel (``ingest/_compare_kernel.c``, an optional extension built by ``pip install``) computes
float16, bfloat16, float32 and float64 pairs: every first-pass accumulation of a step in one pass over
both sides, and KL's pass, with the semantics above; integers, bool, float8 and byte-swapped arrays
stay on numpy. Its sums are added in another order than numpy's (4 lanes per 256-element chunk, the
chunks into compensated sums), so they agree with the numpy path to a few ulps rather than bit for bit;
max_abs_err, max_rel_err, the error ratios, statuses and NULLs are identical
(``tests/ingest/test_compare_kernel.py``). ``compare_jobs`` gives small plain float pairs of a batch to
one kernel call that reads both files itself (one pread each). Without the extension, with
``DUMPCAT_PURE_NUMPY_COMPARE=1`` or after ``use_c_kernel(False)``, numpy computes everything.

Batches as columns (``dumpcat compare``): with 4 KB tensors a pair's metrics take a few µs, so any
Python per pair (a job tuple, a result object, pickling it to and from a helper, a row dict) costs
more than the work. ``plan_batches`` therefore cuts the pairs table (sql/queries/compare_pairs.sql's
Arrow columns) into tasks of 4-64 MB of tensor data (``BATCH_TASK_BYTES``), deciding over whole columns which
pairs the kernel can read itself (``_file_job``'s rule); a ``PairBatch`` carries those as numpy
columns (paths end to end, offsets, kinds, counts) and only the others as ``PairJob`` objects.
``compare_batch`` (the task) hands the columns to the kernel's ``columns()``, which reads (each file
opened relative to its directory, kept open for the call), computes and finishes each pair into a
status code and a row of metric columns (the same operations as ``_from_state`` / ``_result``, so the
same bits as ``compare_jobs``: tests/ingest/test_compare_batches.py), and returns ``MetricColumns``,
which ``catalog.compare`` turns into ``comparisons`` rows with Arrow take/array calls.
``compare_table`` runs the tasks in threads of the calling process, since ``columns()`` holds no GIL:
helper processes (a pickle each way, a queue of two tasks per helper that left one core idle at the
end of a run) only take the tasks that have ``compare_jobs`` pairs.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "METRIC_FIELDS",
    "STATUSES",
    "MetricColumns",
    "PairBatch",
    "PairJob",
    "PairMetrics",
    "compare_arrays",
    "compare_backend",
    "compare_batch",
    "compare_jobs",
    "compare_table",
    "metric_columns",
    "pair_batches",
    "pair_jobs",
    "plan_batches",
    "use_c_kernel",
]

METRIC_FIELDS = (
    "cosine",
    "max_abs_err",
    "max_rel_err",
    "mean_abs_err",
    "rmse",
    "rel_euclidean",
    "kl_div",
    "acc_rel_err",
    "err_ratio_1e3",
    "err_ratio_5e3",
)

# Elements per processing step. Measured (bench/bench_compare.py, 1.25 M-element float32 pairs):
# 32 Ki 12.7 ms, 64 Ki 11.9 ms, 128 Ki 11.0 ms, 256 Ki 11.7 ms per pair; the ~40 numpy calls of a
# step cost ~40 µs of Python, so steps must be large, but the buffers should stay near L2/L3 size.
_STEP = 1 << 16
# Dot products run as rows of this length: OpenBLAS multithreads ddot above 10000 elements, which
# collides with helper-process parallelism (same reason as in tensor_stats).
_DOT_ROW = 8192
# Release processed pages of read-only file mappings at least this big, this many bytes at a time.
_RELEASE_MIN_BYTES = 64 << 20
_RELEASE_CHUNK = 8 << 20
_PAGE = mmap.PAGESIZE

_EPS64 = float(np.finfo(np.float64).eps)
_EPS32 = float(np.finfo(np.float32).eps)
_FLOAT_GROUP = frozenset({"float16", "float32", "bfloat16"})  # msprobe DTYPE_MATCH_GROUPS

# The C kernel (ingest/_compare_kernel.c): its element kinds, and the slots of its state (float64; a
# sum is a value and its Neumaier compensation in the next slot). _load_kernel checks both.
_CKINDS = ("float16", "bfloat16", "float32", "float64")
_CKIND = {name: i for i, name in enumerate(_CKINDS)}
_F64 = _CKIND["float64"]
_DD, _XY, _XX, _YY, _AD, _ACC = 0, 2, 4, 6, 8, 10
_MAD, _MRE, _C1, _C5, _MNX, _MXX, _MNY, _MXY = 12, 13, 14, 15, 16, 17, 18, 19
_NANX, _NANY, _MISMATCH, _N, _P, _Q, _PL, _CODE = 20, 21, 22, 23, 24, 26, 28, 30
_SLOTS = (
    _DD, _XY, _XX, _YY, _AD, _ACC, _MAD, _MRE, _C1, _C5, _MNX, _MXX, _MNY, _MXY, _NANX, _NANY, _MISMATCH,
    _N, _P, _Q, _PL, _CODE,
)  # fmt: skip
_STATE = 32

# Every status a pair can have (the module doc), as the codes of MetricColumns.status; the kernel's
# columns() writes the first eight (its STATUSES, checked at import).
STATUSES = (
    "ok", "unsupported", "nan_in_run", "nan_in_baseline", "nan_in_both", "inf_mismatch", "unreadable_run",
    "unreadable_baseline", "shape_mismatch", "dtype_mismatch", "unsupported_dtype", "empty", "only_in_run",
    "only_in_baseline", "absent", "error",
)  # fmt: skip
_STATUS_CODE = {name: i for i, name in enumerate(STATUSES)}
_UNREADABLE = (_STATUS_CODE["unreadable_run"], _STATUS_CODE["unreadable_baseline"])

_maxr = np.maximum.reduce
_minr = np.minimum.reduce
_addr = np.add.reduce
_cnz = np.count_nonzero
_isfinite = math.isfinite


def _load_kernel():
    """The C kernel module and a note for compare_backend(); (None, why) when it cannot be used."""
    try:
        from ingest import _compare_kernel
    except ImportError:
        return None, "numpy (the C kernel ingest._compare_kernel is not built)"
    if (
        tuple(_compare_kernel.KINDS) != _CKINDS
        or tuple(_compare_kernel.SLOTS) != _SLOTS
        or _compare_kernel.STATE != _STATE
    ):
        return None, "numpy (ingest._compare_kernel is out of date: reinstall dumpcat to rebuild it)"
    return _compare_kernel, "C kernel"


_c_kernel, _backend_note = _load_kernel()
# The kernel's columns() (a whole batch read and finished into metric columns) when this build has it
# and agrees on the statuses and metric count; else compare_batch goes pair by pair.
_C_COLUMNS = (
    _c_kernel is not None
    and hasattr(_c_kernel, "columns")
    and tuple(getattr(_c_kernel, "STATUSES", ())) == STATUSES[: len(getattr(_c_kernel, "STATUSES", ()))]
    and getattr(_c_kernel, "METRICS", 0) == len(METRIC_FIELDS)
)
if os.environ.get("DUMPCAT_PURE_NUMPY_COMPARE", "").strip() not in ("", "0"):
    _kernel = None
    _backend_note = "numpy (DUMPCAT_PURE_NUMPY_COMPARE is set)"
else:
    _kernel = _c_kernel  # None: numpy computes every pair
# compare_jobs hands small plain tensors to the kernel's files() (it reads them itself); the bytes are
# little-endian, as ingest.formats.dtypes decodes them, so only where that is native.
_C_FILES = sys.byteorder == "little"


def compare_backend() -> str:
    """What computes pair metrics in this process: ``"C kernel"`` or ``"numpy (why)"``."""
    if _kernel is not None:
        return "C kernel"
    if _c_kernel is not None and "DUMPCAT_PURE_NUMPY_COMPARE" not in _backend_note:
        return "numpy (use_c_kernel(False))"
    return _backend_note


def use_c_kernel(enabled: bool) -> bool:
    """Use the C kernel (if built) or force the numpy path, in this process only (helper processes
    follow ``DUMPCAT_PURE_NUMPY_COMPARE``); tests compare the two. Returns whether C is now in use."""
    global _kernel
    _kernel = _c_kernel if enabled else None
    return _kernel is not None


@dataclass(frozen=True, slots=True)
class PairMetrics:
    """The metrics of one pair; NULL (None) where they cannot be computed (see the module doc)."""

    status: str
    numel: int | None
    cosine: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mean_abs_err: float | None = None
    rmse: float | None = None
    rel_euclidean: float | None = None
    kl_div: float | None = None
    acc_rel_err: float | None = None
    err_ratio_1e3: float | None = None
    err_ratio_5e3: float | None = None


@dataclass(frozen=True, slots=True)
class PairJob:
    """One pair located in files as the catalog's ``tensors`` rows say; a side is
    ``(path, data_offset, stored_dtype, shape, format, host_shape)``, or None when absent."""

    key: int
    run: tuple | None
    baseline: tuple | None


# --------------------------------------------------------------------------------------------------
# Scratch buffers


class _Scratch(threading.local):
    """Per-thread reused step buffers: fresh allocations would page-fault on every step."""

    def __init__(self) -> None:
        self.n = 0
        self.f64: list[np.ndarray] = []
        self.rt: dict[np.dtype, list[np.ndarray]] = {}
        self.mask = np.empty(0, np.bool_)

    def get(self, n: int, rt: np.dtype) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """4 float64 buffers, 5 ``rt`` buffers and a bool mask of at least ``n`` elements."""
        if n > self.n:
            self.n = n
            self.f64 = [np.empty(n, np.float64) for _ in range(4)]
            self.rt = {}
            self.mask = np.empty(n, np.bool_)
        bufs = self.rt.get(rt)
        if bufs is None:
            bufs = self.rt[rt] = [np.empty(self.n, rt) for _ in range(5)]
        return self.f64, bufs, self.mask


_scratch = _Scratch()


class _Sum:
    """Neumaier-compensated running sum of per-step partial sums: thousands of steps added into one
    float lose ~sqrt(steps) ulps, which KL's cancellation (Σu·log(u/v)/Σu against log(Σv/Σu))
    would turn into 1e-9 relative errors."""

    __slots__ = ("c", "s")

    def __init__(self) -> None:
        self.s = 0.0
        self.c = 0.0

    def add(self, v: float) -> None:
        s = self.s
        t = s + v
        if abs(s) >= abs(v):
            self.c += (s - t) + v
        else:
            self.c += (v - t) + s
        self.s = t

    @property
    def value(self) -> float:
        return self.s + self.c


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b of two float64 vectors, BLAS-fast but never BLAS-multithreaded (see _DOT_ROW)."""
    m = a.shape[0]
    if m <= _DOT_ROW:
        return float(np.dot(a, b))
    q = m - m % _DOT_ROW
    s = float(np.vecdot(a[:q].reshape(-1, _DOT_ROW), b[:q].reshape(-1, _DOT_ROW)).sum())
    if q < m:
        s += float(np.dot(a[q:], b[q:]))
    return s


# --------------------------------------------------------------------------------------------------
# Walking a pair in steps


def _work_dtype(dt: np.dtype) -> np.dtype | None:
    """The numpy dtype a side is computed from (ml_dtypes types through float32), None if it has no
    numeric comparison (complex, raw bytes, strings)."""
    if dt.kind in "biu":
        return np.dtype(dt.name)
    if dt.kind == "f":
        return np.dtype(np.float64) if dt.itemsize > 8 else np.dtype(dt.name)
    if dt.kind == "V" and getattr(dt.type, "__module__", "").startswith("ml_dtypes"):
        return np.dtype(np.float32)
    return None


class _Release:
    """Drops processed pages of a big read-only file mapping from this process (page cache stays)."""

    __slots__ = ("addr", "base", "done", "itemsize", "mm")

    def __init__(self, mm: mmap.mmap, flat: np.ndarray) -> None:
        self.mm = mm
        self.base = np.frombuffer(mm, np.uint8).ctypes.data
        self.addr = flat.ctypes.data
        self.itemsize = flat.itemsize
        self.done = (self.addr // _PAGE + 1) * _PAGE  # never the page holding data before the tensor

    def upto(self, elems: int, force: bool = False) -> None:
        end = (self.addr + elems * self.itemsize) // _PAGE * _PAGE
        if end - self.done >= _RELEASE_CHUNK or (force and end > self.done):
            with contextlib.suppress(OSError, ValueError):  # closed, unsupported: only memory is at stake
                self.mm.madvise(mmap.MADV_DONTNEED, self.done - self.base, end - self.done)
            self.done = end


def _releaser(flat: np.ndarray) -> _Release | None:
    """A _Release for a big 1-D view of a read-only shared file mapping, else None (anything else
    would lose data or gain nothing)."""
    if flat.nbytes < _RELEASE_MIN_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    obj: object = flat
    for _ in range(16):
        if isinstance(obj, np.memmap):
            mm = getattr(obj, "_mmap", None)
            obj = mm if mm is not None else obj.base
        elif isinstance(obj, np.ndarray):
            obj = obj.base
        elif isinstance(obj, memoryview):
            obj = obj.obj
        elif isinstance(obj, mmap.mmap):
            try:
                if not memoryview(obj).readonly:  # ACCESS_COPY / ACCESS_WRITE: pages may be private
                    return None
                return _Release(obj, flat)
            except (ValueError, TypeError):
                return None
        else:
            return None
    return None


def _steps(x: np.ndarray, y: np.ndarray, step: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Equal-length 1-D C-order chunks of both arrays, at most ``step`` elements, no whole copy."""
    if x.flags.c_contiguous and y.flags.c_contiguous:
        xf = x.reshape(-1)
        yf = y.reshape(-1)
        n = xf.shape[0]
        rel = [r for r in (_releaser(xf), _releaser(yf)) if r is not None]
        for i in range(0, n, step):
            yield xf[i : i + step], yf[i : i + step]
            for r in rel:
                r.upto(i + step)
        for r in rel:
            r.upto(n, force=True)
        return
    try:
        it = np.nditer(
            [x, y], flags=["external_loop", "buffered", "zerosize_ok"], op_flags=[["readonly"], ["readonly"]],
            buffersize=step, order="C",
        )  # fmt: skip
    except (TypeError, ValueError):  # a dtype nditer cannot buffer: copy (rare: non-contiguous views)
        yield from _steps(np.ascontiguousarray(x), np.ascontiguousarray(y), step)
        return
    with it:
        for xc, yc in it:
            for i in range(0, xc.shape[0], step):  # buffered chunks never exceed step; be safe
                yield xc[i : i + step], yc[i : i + step]


# --------------------------------------------------------------------------------------------------
# The computation


def _null(status: str, numel: int | None) -> PairMetrics:
    return PairMetrics(status, numel)


class _Pass1:
    """Running sums of the first pass; ``mismatch`` once non-finite positions differ."""

    __slots__ = (
        "c1", "c5", "mad", "mismatch", "mnx", "mny", "mre", "mxx", "mxy", "nan_x", "nan_y", "nonfinite",
        "sacc", "sad", "sdd", "sxx", "sxy", "syy",
    )  # fmt: skip

    def __init__(self) -> None:
        self.sdd, self.sxy, self.sxx, self.syy, self.sad, self.sacc = (_Sum() for _ in range(6))
        self.mad = self.mre = 0.0
        self.c1 = self.c5 = 0
        self.mnx = self.mny = math.inf
        self.mxx = self.mxy = -math.inf
        self.nan_x = self.nan_y = self.mismatch = False
        self.nonfinite: set[int] = set()  # steps whose non-finite elements were zeroed


def _as_rt(c: np.ndarray, rt: np.dtype, buf: np.ndarray) -> np.ndarray:
    """``c`` in dtype ``rt``: itself when it already is (read-only is fine), else converted into buf."""
    if c.dtype == rt and c.dtype.isnative:
        return c
    out = buf[: c.shape[0]]
    np.copyto(out, c, casting="unsafe")
    return out


def _zero_nonfinite(xr: np.ndarray, yr: np.ndarray, bx: np.ndarray, by: np.ndarray, mask: np.ndarray):
    """Copies of xr, yr with their (same) non-finite positions set to 0, msprobe's handle_inf_nan."""
    m = xr.shape[0]
    xo, yo = bx[:m], by[:m]
    np.copyto(xo, xr)  # a no-op copy when xr already is the buffer
    np.copyto(yo, yr)
    np.isfinite(xo, out=mask)
    np.logical_not(mask, out=mask)
    np.copyto(xo, 0, where=mask)
    np.copyto(yo, 0, where=mask)
    return xo, yo


def _pass1(
    x: np.ndarray, y: np.ndarray, rt: np.dtype, step: int, floats: bool
) -> tuple[_Pass1, tuple[np.ndarray, np.ndarray] | None]:
    """The one-pass metrics: the sums, and the float64 (zeroed) sides when the whole tensor was one
    step, so that KL needs no second read."""
    acc = _Pass1()
    f64, rbuf, mask_all = _scratch.get(step, rt)
    X64, Y64, D, YA = f64
    XR, YR, T, XE, YE = rbuf
    eps_rt = rt.type(np.finfo(rt).eps)
    is64 = rt == np.float64
    k = -1
    x64 = y64 = D
    for k, (xs, ys) in enumerate(_steps(x, y, step)):
        m = xs.shape[0]
        mask = mask_all[:m]
        xr = _as_rt(xs, rt, XR)
        yr = _as_rt(ys, rt, YR)
        mxx, mnx, mxy, mny = float(_maxr(xr)), float(_minr(xr)), float(_maxr(yr)), float(_minr(yr))
        if floats and not (_isfinite(mxx) and _isfinite(mnx) and _isfinite(mxy) and _isfinite(mny)):
            acc.nan_x |= mxx != mxx  # np.maximum propagates NaN
            acc.nan_y |= mxy != mxy
            if acc.mismatch:
                if acc.nan_x and acc.nan_y:
                    break  # nothing left to learn
                continue
            if not (
                np.array_equal(np.isnan(xr), np.isnan(yr)) and np.array_equal(np.isinf(xr), np.isinf(yr))
            ):
                acc.mismatch = True
                continue
            xr, yr = _zero_nonfinite(xr, yr, XR, YR, mask)
            mxx, mnx, mxy, mny = float(_maxr(xr)), float(_minr(xr)), float(_maxr(yr)), float(_minr(yr))
            acc.nonfinite.add(k)
        if acc.mismatch:
            continue
        acc.mxx = max(acc.mxx, mxx)
        acc.mnx = min(acc.mnx, mnx)
        acc.mxy = max(acc.mxy, mxy)
        acc.mny = min(acc.mny, mny)
        # float64 metrics
        if is64 and xr.flags.c_contiguous:
            x64 = xr
        else:
            x64 = X64[:m]
            np.copyto(x64, xr)
        if is64 and yr.flags.c_contiguous:
            y64 = yr
        else:
            y64 = Y64[:m]
            np.copyto(y64, yr)
        d = np.subtract(x64, y64, out=D[:m])
        acc.sdd.add(_dot(d, d))
        acc.sxy.add(_dot(x64, y64))
        acc.sxx.add(_dot(x64, x64))
        acc.syy.add(_dot(y64, y64))
        np.abs(d, out=d)
        acc.sad.add(float(_addr(d)))
        acc.mad = max(acc.mad, float(_maxr(d)))
        ya = np.abs(y64, out=YA[:m])
        if float(_minr(ya)) > _EPS64:
            acc.sacc.add(float(_addr(np.divide(d, ya, out=d))))
        else:
            np.greater(ya, _EPS64, out=mask)
            np.divide(d, ya, out=d, where=mask)
            acc.sacc.add(float(_addr(d, where=mask)))
        # msprobe relative error, in rt
        t = T[:m]
        np.equal(yr, 0, out=mask)
        if _cnz(mask):
            xe = XE[:m]
            np.copyto(xe, xr)
            ye = YE[:m]
            np.copyto(ye, yr)
            np.add(xe, eps_rt, out=xe, where=mask)
            np.add(ye, eps_rt, out=ye, where=mask)
            np.subtract(xe, ye, out=t)
            np.divide(t, ye, out=t)
        else:
            np.subtract(xr, yr, out=t)
            np.divide(t, yr, out=t)
        np.abs(t, out=t)
        acc.mre = max(acc.mre, float(_maxr(t)))
        acc.c1 += int(_cnz(np.less(t, 0.001, out=mask)))
        acc.c5 += int(_cnz(np.less(t, 0.005, out=mask)))
    return acc, ((x64, y64) if k == 0 and not acc.mismatch else None)


class _KL:
    """Sums of the KL pass: Σu, Σv, Σ u·log(u/v) for the floored min-max normalised sides."""

    __slots__ = ("mnx", "mny", "rx", "ry", "sp", "spl", "sq")

    def __init__(self, mnx: float, mxx: float, mny: float, mxy: float) -> None:
        self.mnx, self.mny = mnx, mny
        self.rx, self.ry = mxx - mnx, mxy - mny
        self.sp, self.sq, self.spl = _Sum(), _Sum(), _Sum()

    def update(self, x64: np.ndarray, y64: np.ndarray, P: np.ndarray, Q: np.ndarray) -> None:
        m = x64.shape[0]
        p, q = P[:m], Q[:m]
        for v, out, mn, r in ((x64, p, self.mnx, self.rx), (y64, q, self.mny, self.ry)):
            if r > 0:
                np.subtract(v, mn, out=out)
                np.divide(out, r, out=out)
                if float(_minr(out)) < _EPS32:  # the floor: only steps near the side's minimum
                    np.maximum(out, _EPS32, out=out)
            else:
                out.fill(_EPS32)
        self.sp.add(float(_addr(p)))
        self.sq.add(float(_addr(q)))
        np.divide(p, q, out=q)
        np.log(q, out=q)
        self.spl.add(_dot(p, q))

    def value(self) -> float | None:
        return _kl_value(self.sp.value, self.sq.value, self.spl.value)


def _kl_value(sp: float, sq: float, spl: float) -> float | None:
    """KL from Σu, Σv and Σu·log(u/v): Σp·log(p/q) = Σu·log(u/v)/Σu + log(Σv/Σu)."""
    if not (sp > 0 and sq > 0):
        return None
    kl = spl / sp + math.log(sq / sp)
    if not _isfinite(kl):
        return None
    return 0.0 if abs(kl) < _EPS64 else kl


def _kl_pass(x: np.ndarray, y: np.ndarray, rt: np.dtype, step: int, acc: _Pass1) -> float | None:
    """Second pass: KL needs each side's min and max before its sums."""
    kl = _KL(acc.mnx, acc.mxx, acc.mny, acc.mxy)
    f64, rbuf, mask_all = _scratch.get(step, rt)
    X64, Y64, P, Q = f64
    XR, YR = rbuf[0], rbuf[1]
    for k, (xs, ys) in enumerate(_steps(x, y, step)):
        m = xs.shape[0]
        xr = _as_rt(xs, rt, XR)
        yr = _as_rt(ys, rt, YR)
        if k in acc.nonfinite:
            xr, yr = _zero_nonfinite(xr, yr, XR, YR, mask_all[:m])
        x64, y64 = X64[:m], Y64[:m]
        np.copyto(x64, xr)
        np.copyto(y64, yr)
        kl.update(x64, y64, P, Q)
    return kl.value()


def _compare(x: np.ndarray, y: np.ndarray, block: int) -> PairMetrics:
    wx, wy = _work_dtype(x.dtype), _work_dtype(y.dtype)
    if wx is None or wy is None:
        return _null("unsupported_dtype", x.size if x.shape == y.shape else None)
    if x.shape != y.shape:
        return _null("shape_mismatch", None)
    n = int(x.size)
    if x.dtype.name != y.dtype.name and not (x.dtype.name in _FLOAT_GROUP and y.dtype.name in _FLOAT_GROUP):
        return _null("dtype_mismatch", n)
    if n == 0:
        return _null("empty", 0)
    step = max(1, min(int(block), _STEP))
    kx, ky = _ckind(x.dtype), _ckind(y.dtype)
    if _kernel is not None and kx is not None and ky is not None:
        return _from_state(_c_state(x, y, kx, ky, step), n, x.ndim == 0)
    rt = np.result_type(wx, wy, np.float32)
    floats = wx.kind == "f" or wy.kind == "f"
    with np.errstate(all="ignore"):
        acc, whole = _pass1(x, y, rt, step, floats)
        status = _status(acc.nan_x, acc.nan_y, acc.mismatch, n)
        if acc.mismatch:
            return _null(status, n)
        if whole is not None:  # one step: KL from the data in hand, no second read
            f64 = _scratch.get(step, rt)[0]
            klacc = _KL(acc.mnx, acc.mxx, acc.mny, acc.mxy)
            klacc.update(whole[0], whole[1], f64[2], f64[3])  # D and YA are free now
            kl = klacc.value()
        else:
            kl = _kl_pass(x, y, rt, step, acc)
    return _result(
        status, n, x.ndim == 0, acc.sdd.value, acc.sxx.value, acc.syy.value, acc.sxy.value, acc.sad.value,
        acc.sacc.value, acc.mad, acc.mre, acc.c1, acc.c5, kl,
    )  # fmt: skip


def _status(nan_x: bool, nan_y: bool, mismatch: bool, n: int) -> str:
    if nan_x and nan_y:
        return "nan_in_both"
    if nan_x:
        return "nan_in_run"
    if nan_y:
        return "nan_in_baseline"
    if mismatch:
        return "inf_mismatch"
    return "unsupported" if n == 1 else "ok"


def _result(
    status: str, n: int, zero_d: bool, sdd: float, sxx: float, syy: float, sxy: float, sad: float,
    sacc: float, mad: float, mre: float, c1: float, c5: float, kl: float | None,
) -> PairMetrics:  # fmt: skip
    """The metrics from the sums of either path (numpy or C): one set of formulas for both."""
    cosine: float | None = None
    if n > 1:
        a, b = math.sqrt(sxx), math.sqrt(syy)
        if a <= _EPS64 and b <= _EPS64:
            cosine = 1.0
        elif a > _EPS64 and b > _EPS64:
            c = sxy / (a * b)
            cosine = min(c, 1.0) if _isfinite(c) else None
    rel_euc = 0.0 if math.sqrt(syy) <= _EPS64 else math.sqrt(sdd / syy)
    return PairMetrics(
        status,
        n,
        cosine=cosine,
        max_abs_err=_num(mad),
        max_rel_err=_num(mre),
        mean_abs_err=_num(sad / n),
        rmse=_num(math.sqrt(sdd / n)),
        rel_euclidean=_num(rel_euc),
        kl_div=kl,
        acc_rel_err=_num(sacc),
        err_ratio_1e3=None if zero_d else int(c1) / n,
        err_ratio_5e3=None if zero_d else int(c5) / n,
    )


# --------------------------------------------------------------------------------------------------
# The C kernel's path


def _ckind(dt: np.dtype) -> int | None:
    """The C kernel's kind of a dtype, None when it has none (integers, bool, float8, byte-swapped:
    numpy computes those)."""
    return _CKIND.get(dt.name) if dt.isnative else None


def _raw(a: np.ndarray) -> np.ndarray:
    """The bytes of a chunk as a flat uint8 array (bfloat16 has no buffer format of its own)."""
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8)


def _c_state(x: np.ndarray, y: np.ndarray, kx: int, ky: int, step: int) -> list[float]:
    """The kernel's state after both passes: the whole pair in one call when it is one step, else a
    first pass and a KL pass step by step (memory bounded, pages released as the numpy path does)."""
    k = _kernel
    st = np.frombuffer(k.new_state(), np.float64)
    if x.size <= step:
        k.pair(_raw(x), kx, _raw(y), ky, st)
        return st.tolist()
    for xs, ys in _steps(x, y, step):
        k.block(_raw(xs), kx, _raw(ys), ky, st)
        if st[_MISMATCH] and st[_NANX] and st[_NANY]:
            break  # nothing left to learn
    if not st[_MISMATCH]:
        for xs, ys in _steps(x, y, step):
            k.kl_block(_raw(xs), kx, _raw(ys), ky, st)
    return st.tolist()


def _from_state(s: list[float], n: int, zero_d: bool) -> PairMetrics:
    """The metrics of a pair from the kernel's final state."""
    mismatch = s[_MISMATCH] != 0.0
    status = _status(s[_NANX] != 0.0, s[_NANY] != 0.0, mismatch, n)
    if mismatch:
        return _null(status, n)
    kl = _kl_value(s[_P] + s[_P + 1], s[_Q] + s[_Q + 1], s[_PL] + s[_PL + 1])
    return _result(
        status, n, zero_d, s[_DD] + s[_DD + 1], s[_XX] + s[_XX + 1], s[_YY] + s[_YY + 1],
        s[_XY] + s[_XY + 1], s[_AD] + s[_AD + 1], s[_ACC] + s[_ACC + 1], s[_MAD], s[_MRE], s[_C1], s[_C5], kl,
    )  # fmt: skip


def _num(v: float) -> float | None:
    """A float for the catalog; NaN (never expected after zeroing) becomes NULL, ±inf is kept."""
    return None if v != v else float(v)


def compare_arrays(run: np.ndarray, baseline: np.ndarray, *, block: int = 1 << 20) -> PairMetrics:
    """The metrics of ``run`` against ``baseline`` (see the module doc), streaming in steps of at
    most ``block`` elements; never raises (status ``error`` if computing fails unexpectedly)."""
    try:
        return _compare(np.asarray(run), np.asarray(baseline), block)
    except Exception:
        return _null("error", None)


_READ_BELOW = 1 << 20  # bytes: smaller tensors are read into memory, bigger ones mapped


BATCH_PAIRS = 256  # pairs per helper task: enough to pay for the hand-off (small pairs take ~20 µs)
BATCH_BYTES = 64 << 20  # and at most this much tensor data, so that big pairs spread over the workers


def pair_batches(jobs: Iterable[PairJob]) -> Iterator[list[PairJob]]:
    """``compare_jobs`` tasks: ``BATCH_PAIRS`` pairs, or fewer once they hold ``BATCH_BYTES`` of data
    (pairs count by both sides' bytes; one side of unknown size counts as ``BATCH_BYTES``)."""
    from ingest.formats.tensor_data import stored_nbytes

    batch: list[PairJob] = []
    size = 0
    for job in jobs:
        batch.append(job)
        for side in (job.run, job.baseline):
            if side is not None:
                try:
                    nb = stored_nbytes(side[2], side[3])
                except Exception:
                    nb = None
                size += BATCH_BYTES if nb is None else nb
        if len(batch) >= BATCH_PAIRS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _file_job(job: PairJob) -> tuple[tuple, int, bool] | None:
    """``(kernel job, elements, 0-d)`` for a pair the C kernel can read from its files itself: both sides
    plain float16/bfloat16/float32/float64 bytes in host layout, comparable dtypes, the same shape, small
    enough to read whole (``_READ_BELOW``), not empty. None otherwise (read_tensor and numpy then)."""
    r, b = job.run, job.baseline
    kr, kb = _CKIND.get(r[2]), _CKIND.get(b[2])
    if kr is None or kb is None or (kr == _F64) != (kb == _F64):
        return None
    shape = tuple(int(d) for d in r[3])
    if tuple(int(d) for d in b[3]) != shape or not (_host_layout(r) and _host_layout(b)):
        return None
    n = math.prod(shape)
    if n == 0 or n * max(_CSIZE[kr], _CSIZE[kb]) > _READ_BELOW:
        return None
    return (os.fsencode(r[0]), int(r[1]), kr, os.fsencode(b[0]), int(b[1]), kb, n), n, not shape


_CSIZE = (2, 2, 4, 8)


def _host_layout(side: tuple) -> bool:
    """Are a side's stored bytes its values in C order (what read_tensor would return as is)?"""
    from ingest.formats.ascend import device_format
    from ingest.formats.tensor_data import FORTRAN_ORDER

    fmt, host_shape = side[4], side[5]
    if fmt == FORTRAN_ORDER:
        return False
    return host_shape is None or not device_format.needs_transform(fmt or "", side[3], host_shape)


def compare_jobs(batch: list[PairJob]) -> list[tuple[int, PairMetrics]]:
    """Compare pairs located in files (a ``helper_pool`` task); never raises. Small float pairs go to
    the C kernel in one call for the whole batch (it reads both files with one pread each): per pair,
    Python's file reading and array set-up would cost more than the metrics."""
    from ingest.formats.tensor_data import read_tensor, stored_nbytes  # (pure numpy: imports fast)

    def read(side: tuple) -> np.ndarray:
        # A small tensor is read into memory (one pread): a memory map's set-up and tear-down
        # cost more than its bytes; a big one is mapped, so memory stays bounded.
        size = stored_nbytes(side[2], side[3])
        return read_tensor(*side, mapped=size is None or size > _READ_BELOW)

    out: list[tuple[int, PairMetrics]] = []
    by_kernel: list[tuple[int, tuple, int, bool]] = []  # (place in out, kernel job, elements, 0-d)
    files = _kernel is not None and _C_FILES and getattr(_kernel, "FILES", 0)
    for job in batch:
        if job.run is None or job.baseline is None:
            status = "absent" if job.run is None and job.baseline is None else (
                "only_in_baseline" if job.run is None else "only_in_run")  # fmt: skip
            out.append((job.key, _null(status, None)))
            continue
        if files:
            try:
                fj = _file_job(job)
            except Exception:  # odd rows (shapes, paths): read_tensor says what is wrong with them
                fj = None
            if fj is not None:
                by_kernel.append((len(out), *fj))
                out.append((job.key, _null("error", None)))  # replaced below
                continue
        try:
            x = read(job.run)
        except Exception:
            out.append((job.key, _null("unreadable_run", None)))
            continue
        try:
            y = read(job.baseline)
        except Exception:
            out.append((job.key, _null("unreadable_baseline", None)))
            continue
        out.append((job.key, compare_arrays(x, y)))
        del x, y
    if by_kernel:
        _kernel_files(by_kernel, out)
    return out


def _kernel_files(by_kernel: list[tuple[int, tuple, int, bool]], out: list) -> None:
    """Fill ``out`` at the places of ``by_kernel``'s pairs from one kernel call over all of them."""
    rows = np.empty((len(by_kernel), _STATE), np.float64)
    try:
        _kernel.files([j for _, j, _, _ in by_kernel], rows)
    except Exception:
        return  # never seen; the pairs stay "error" rather than failing the batch
    for (place, _, n, zero_d), s in zip(by_kernel, rows.tolist(), strict=True):
        code = s[_CODE]
        if code == 1.0:
            m = _null("unreadable_run", None)
        elif code == 2.0:
            m = _null("unreadable_baseline", None)
        else:
            try:
                m = _from_state(s, n, zero_d)
            except Exception:
                m = _null("error", None)
        out[place] = (out[place][0], m)


# --------------------------------------------------------------------------------------------------
# Batches as columns: the tasks of `dumpcat compare`


class MetricColumns(NamedTuple):
    """The metrics of a batch of pairs as columns (no Python object per pair): ``key`` int64,
    ``status`` int8 (indices of ``STATUSES``), ``numel`` int64 (-1 for NULL) and ``metrics`` float64
    of shape (pairs, len(METRIC_FIELDS)) with NaN for NULL (no metric is ever NaN: see ``_num``)."""

    key: np.ndarray
    status: np.ndarray
    numel: np.ndarray
    metrics: np.ndarray

    @staticmethod
    def concat(parts: list[MetricColumns]) -> MetricColumns:
        if len(parts) == 1:
            return parts[0]
        return MetricColumns(*(np.concatenate([getattr(p, f) for p in parts]) for f in MetricColumns._fields))

    def pair_metrics(self) -> list[tuple[int, PairMetrics]]:
        """``(key, PairMetrics)`` per pair, as ``compare_jobs`` gives them (tests compare the two)."""
        out = []
        for key, code, numel, row in zip(
            self.key.tolist(), self.status.tolist(), self.numel.tolist(), self.metrics.tolist(), strict=True
        ):
            values = [None if v != v else v for v in row]
            out.append((key, PairMetrics(STATUSES[code], None if numel < 0 else numel, *values)))
        return out


def metric_columns(results: list[tuple[int, PairMetrics]]) -> MetricColumns:
    """``compare_jobs``' results (a list of ``(key, PairMetrics)``) as columns."""
    n = len(results)
    metrics = np.full((n, len(METRIC_FIELDS)), np.nan)
    for i, (_, m) in enumerate(results):
        for j, f in enumerate(METRIC_FIELDS):
            v = getattr(m, f)
            if v is not None:
                metrics[i, j] = v
    return MetricColumns(
        np.array([k for k, _ in results], np.int64),
        np.array([_STATUS_CODE[m.status] for _, m in results], np.int8),
        np.array([-1 if m.numel is None else m.numel for _, m in results], np.int64),
        metrics,
    )


@dataclass
class PairBatch:
    """A ``compare_batch`` task: pairs the kernel reads from their files, as columns (``key``, both
    sides' paths end to end as UTF-8 with their end offsets, data offsets (pairs, 2), kinds (pairs, 2),
    elements, 0-d flags); ``jobs``, the other pairs, one ``PairJob`` each (device formats, integers,
    big tensors: ``compare_jobs``); ``fixed``, pairs with a side missing: (keys, status codes)."""

    key: np.ndarray
    run_paths: bytes
    run_ends: np.ndarray
    baseline_paths: bytes
    baseline_ends: np.ndarray
    offsets: np.ndarray
    kinds: np.ndarray
    numel: np.ndarray
    zero_d: np.ndarray
    jobs: list[PairJob] = field(default_factory=list)
    fixed: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.key) + len(self.jobs) + (0 if self.fixed is None else len(self.fixed[0]))


def compare_batch(batch: PairBatch) -> MetricColumns:
    """A ``PairBatch``'s metrics (a ``compare_table`` thread's or a ``helper_pool`` task); never
    raises. Its kernel pairs go through the C kernel in one call (reads, both passes and the final
    metrics, GIL released), the rest through ``compare_jobs``: the same numbers as ``compare_jobs``
    pair by pair, bit for bit."""
    parts: list[MetricColumns] = []
    m = len(batch.key)
    if m:
        if _kernel is not None and _C_COLUMNS and _C_FILES:
            status = np.empty(m, np.int8)
            metrics = np.empty((m, len(METRIC_FIELDS)), np.float64)
            try:
                _kernel.columns(
                    batch.run_paths, batch.run_ends, batch.baseline_paths, batch.baseline_ends, batch.offsets,
                    batch.kinds, batch.numel, batch.zero_d, status, metrics,
                )  # fmt: skip
                unread = (status == _UNREADABLE[0]) | (status == _UNREADABLE[1])  # numel NULL, as before
                parts.append(MetricColumns(batch.key, status, np.where(unread, -1, batch.numel), metrics))
            except Exception:  # never seen; the pairs are "error" rather than failing the batch
                parts.append(_error_columns(batch.key))
        else:  # numpy, or a kernel without columns(): the same pairs one by one
            parts.append(metric_columns(compare_jobs(_kernel_jobs(batch))))
    if batch.jobs:
        parts.append(metric_columns(compare_jobs(batch.jobs)))
    if batch.fixed is not None and len(batch.fixed[0]):
        keys, codes = batch.fixed
        parts.append(
            MetricColumns(
                keys,
                codes,
                np.full(len(keys), -1, np.int64),
                np.full((len(keys), len(METRIC_FIELDS)), np.nan),
            )
        )
    if not parts:
        return _error_columns(np.empty(0, np.int64))
    return MetricColumns.concat(parts)


def _error_columns(keys: np.ndarray) -> MetricColumns:
    n = len(keys)
    return MetricColumns(
        keys, np.full(n, _STATUS_CODE["error"], np.int8), np.full(n, -1, np.int64),
        np.full((n, len(METRIC_FIELDS)), np.nan),
    )  # fmt: skip


def _kernel_jobs(batch: PairBatch) -> list[PairJob]:
    """A batch's kernel pairs as PairJobs (1-D, or 0-d: the metrics depend only on the values in C
    order, their count and 0-d), for a process without the kernel's columns()."""
    jobs = []
    rp, bp = batch.run_paths, batch.baseline_paths
    re_, be = batch.run_ends.tolist(), batch.baseline_ends.tolist()
    for j, (key, (ro, bo), (rk, bk), n, z) in enumerate(
        zip(batch.key.tolist(), batch.offsets.tolist(), batch.kinds.tolist(), batch.numel.tolist(),
            batch.zero_d.tolist(), strict=True)
    ):  # fmt: skip
        shape = () if z else (n,)
        run = (os.fsdecode(rp[re_[j] : re_[j + 1]]), ro, _CKINDS[rk], shape, None, None)
        base = (os.fsdecode(bp[be[j] : be[j + 1]]), bo, _CKINDS[bk], shape, None, None)
        jobs.append(PairJob(key, run, base))
    return jobs


# Tensor bytes (both sides) per compare_batch task: an eighth of a worker's share of the whole, but at
# least BATCH_TASK_BYTES (a few ms of work: 4 KB pairs, 512 a task) and at most BATCH_TASK_MAX_BYTES
# (64 MB: big pairs still spread over the workers; fewer, bigger tasks hand over less).
BATCH_TASK_BYTES = 4 << 20
BATCH_TASK_MAX_BYTES = 64 << 20
BATCH_TASK_PAIRS = 4096  # and at most this many pairs a task (tiny tensors)


def plan_batches(
    pairs: pa.Table,
    *,
    task_bytes: int | None = None,
    task_pairs: int = BATCH_TASK_PAIRS,
    workers: int = 1,
) -> Iterator[PairBatch]:
    """``compare_batch`` tasks for the rows of ``pairs`` (sql/queries/compare_pairs.sql's columns;
    a pair's key is its row number), cut in row order at ``task_bytes`` of tensor data (default:
    from the total, estimated from the first slice of rows, and ``workers``, see BATCH_TASK_BYTES)
    or ``task_pairs`` pairs (a pair bigger than ``task_bytes`` is a task of its own). Which pairs the
    kernel reads is decided over the columns of a slice of rows at a time (Arrow and numpy), as
    ``_file_job`` decides it pair by pair; only the other pairs become ``PairJob`` objects."""
    n = pairs.num_rows
    start, rows = 0, _PLAN_FIRST_ROWS
    while start < n:  # in slices, the first one small: the first task is out before all are planned
        part = pairs.slice(start, rows)
        task_bytes, tasks = _plan_part(part, pairs, start, n, task_bytes, task_pairs, workers)
        yield from tasks
        start += part.num_rows
        rows = min(4 * rows, _PLAN_ROWS)


# plan_batches plans this many rows first, then four times as many each time up to _PLAN_ROWS: the
# columns of 40,000 pairs take ~16 ms to plan, while the first task's threads would be idle.
_PLAN_FIRST_ROWS = 1024
_PLAN_ROWS = 65536


def _plan_part(
    pairs: pa.Table, whole: pa.Table, base: int, total_rows: int, task_bytes: int | None, task_pairs: int,
    workers: int,
) -> tuple[int, Iterator[PairBatch]]:  # fmt: skip
    """The tasks of the rows of ``pairs``, a slice of ``whole`` from its row ``base`` (keys are rows of
    ``whole``), and the task size (a default one estimated from this slice's bytes a pair and
    ``total_rows``: the slices after the first keep it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = pairs.num_rows
    present = {}
    for s, prefix in (("run", ""), ("baseline", "baseline_")):
        present[s] = pc.is_valid(pairs.column(prefix + "path")).to_numpy(zero_copy_only=False)
    both = present["run"] & present["baseline"]
    kinds = np.full((n, 2), -1, np.int8)
    sizes = np.zeros((n, 2), np.int64)  # item sizes; 0: unknown
    numel = {}
    ndim = {}
    for j, (s, prefix) in enumerate((("run", ""), ("baseline", "baseline_"))):
        dt = pairs.column(prefix + "stored_dtype").combine_chunks().dictionary_encode()
        names = dt.dictionary.to_pylist()
        idx = dt.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        kind_of = np.array([_CKIND.get(v, -1) for v in names] + [-1], np.int8)
        size_of = np.array([_itemsize_or_0(v) for v in names] + [0], np.int64)
        kinds[:, j] = kind_of[idx]
        sizes[:, j] = size_of[idx]
        shape = pairs.column("shape" if s == "run" else "baseline_shape").combine_chunks()
        numel[s], ndim[s] = _shape_numel(shape)
    same_shape = _same_lists(
        pairs.column("shape").combine_chunks(), pairs.column("baseline_shape").combine_chunks()
    )
    nbytes = np.where(both, numel["run"] * sizes[:, 0] + numel["baseline"] * sizes[:, 1], 0)
    if task_bytes is None:
        share = int(nbytes.sum()) * total_rows // n // (8 * max(1, workers))
        task_bytes = min(BATCH_TASK_MAX_BYTES, max(BATCH_TASK_BYTES, share))
    nbytes[both & ((sizes[:, 0] == 0) | (sizes[:, 1] == 0))] = task_bytes  # raw bytes: size unknown here
    kernel = both & same_shape & (kinds[:, 0] >= 0) & (kinds[:, 1] >= 0)
    kernel &= (kinds[:, 0] == _F64) == (kinds[:, 1] == _F64)
    n_el = numel["run"]
    kernel &= (n_el > 0) & (n_el * np.maximum(sizes[:, 0], sizes[:, 1]) <= _READ_BELOW)
    from ingest.formats.tensor_data import FORTRAN_ORDER

    for prefix in ("", "baseline_"):  # plain layouts only (a host_shape: leave it to _host_layout)
        kernel &= pc.is_valid(pairs.column(prefix + "data_offset")).to_numpy(zero_copy_only=False)
        kernel &= pc.is_null(pairs.column(prefix + "host_shape")).to_numpy(zero_copy_only=False)
        fmt = pairs.column(prefix + "format")
        kernel &= ~pc.fill_null(pc.equal(fmt, FORTRAN_ORDER), False).to_numpy(zero_copy_only=False)
    if not (_kernel is not None and _C_COLUMNS and _C_FILES and sys.getfilesystemencoding() == "utf-8"):
        kernel[:] = False
    fixed_code = np.where(
        present["run"], _STATUS_CODE["only_in_run"],
        np.where(present["baseline"], _STATUS_CODE["only_in_baseline"], _STATUS_CODE["absent"]),
    ).astype(np.int8)  # fmt: skip
    blobs = [_paths(pairs.column(p + "path"), pa) for p in ("", "baseline_")]
    offsets = np.stack(
        [
            pc.fill_null(pairs.column(c), 0).to_numpy(zero_copy_only=False)
            for c in ("data_offset", "baseline_data_offset")
        ],
        axis=1,
    ).astype(np.int64)
    zero_d = (ndim["run"] == 0).astype(np.uint8)

    def tasks(task_bytes: int) -> Iterator[PairBatch]:
        for a, b in _cuts(nbytes, task_bytes, task_pairs):
            rows = np.arange(a, b)
            k_rows = rows[kernel[a:b]]
            fixed_rows = rows[~both[a:b]]
            job_rows = rows[both[a:b] & ~kernel[a:b]]
            (rp, re_), (bp, be) = (_gather(data, ends, k_rows) for data, ends in blobs)
            fixed = None
            if len(fixed_rows):
                fixed = ((fixed_rows + base).astype(np.int64), fixed_code[fixed_rows])
            yield PairBatch(
                key=(k_rows + base).astype(np.int64), run_paths=rp, run_ends=re_, baseline_paths=bp,
                baseline_ends=be, offsets=offsets[k_rows], kinds=kinds[k_rows], numel=n_el[k_rows],
                zero_d=zero_d[k_rows], jobs=pair_jobs(whole, job_rows + base) if len(job_rows) else [],
                fixed=fixed,
            )  # fmt: skip

    return task_bytes, tasks(task_bytes)


def _paths(column, pa) -> tuple[np.ndarray, np.ndarray]:
    """A string column's UTF-8 bytes (uint8) and its len + 1 end offsets (int64, from 0); NULL: ''."""
    arr = column.combine_chunks().cast(pa.large_string())
    if not len(arr):
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    data = np.zeros(0, np.uint8) if data is None else np.frombuffer(data, np.uint8)
    return data, offsets - offsets[0] if offsets[0] else offsets


def _gather(data: np.ndarray, ends: np.ndarray, rows: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The strings of ``rows`` end to end (bytes) and their len(rows) + 1 end offsets."""
    if not len(rows):
        return b"", np.zeros(1, np.int64)
    starts, stops = ends[rows], ends[rows + 1]
    lengths = stops - starts
    out_ends = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if rows[-1] - rows[0] + 1 == len(rows):  # consecutive rows: one slice
        return data[starts[0] : stops[-1]].tobytes(), out_ends
    idx = np.repeat(starts - out_ends[:-1], lengths) + np.arange(out_ends[-1])
    return data[idx].tobytes(), out_ends


def _itemsize_or_0(stored: str | None) -> int:
    from ingest.formats import dtypes

    try:
        nb = dtypes.nbytes_of(stored, 2)
    except Exception:
        return 0
    return 0 if nb is None else max(1, nb // 2)


def _shape_numel(shape: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Elements and dimensions of each row of a list<int64> shape column (NULL: 0-d, as the pair
    tuples of ``dumpcat compare`` have always read it)."""
    import pyarrow.compute as pc

    n = len(shape)
    ndim = pc.fill_null(pc.list_value_length(shape), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(shape).to_numpy(zero_copy_only=False).astype(np.int64)
    parent = pc.list_parent_indices(shape).to_numpy(zero_copy_only=False)
    numel = np.ones(n, np.int64)
    if len(values):
        np.multiply.at(numel, parent, values)
    return numel, ndim


def _same_lists(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Row by row, do two list<int64> columns hold the same values (NULL reads as empty)?"""
    import pyarrow.compute as pc

    la = pc.fill_null(pc.list_value_length(a), 0).to_numpy(zero_copy_only=False)
    lb = pc.fill_null(pc.list_value_length(b), 0).to_numpy(zero_copy_only=False)
    same = la == lb
    va = pc.list_flatten(a).to_numpy(zero_copy_only=False)
    vb = pc.list_flatten(b).to_numpy(zero_copy_only=False)
    pa_ = pc.list_parent_indices(a).to_numpy(zero_copy_only=False)
    pb = pc.list_parent_indices(b).to_numpy(zero_copy_only=False)
    ma, mb = same[pa_], same[pb]  # the values of rows of equal lengths, aligned
    differ = pa_[ma][va[ma] != vb[mb]]
    same[differ] = False
    return same


def _cuts(nbytes: np.ndarray, task_bytes: int, task_pairs: int) -> Iterator[tuple[int, int]]:
    """Row ranges of tasks in row order: at most task_bytes of tensor data (a bigger pair is a task of
    its own) and task_pairs pairs each. (Tasks that shrink towards the end, to shorten the last
    worker's tail, measured slower at 4 KB pairs: each task costs ~35 µs here and more to hand over.)"""
    n = len(nbytes)
    cum = np.cumsum(nbytes)
    a = 0
    while a < n:
        done = int(cum[a - 1]) if a else 0
        # the first row whose pair would end past done + task_bytes starts the next task
        b = int(np.searchsorted(cum, done + task_bytes, side="right"))
        b = min(max(b, a + 1), a + task_pairs, n)
        yield a, b
        a = b


def pair_jobs(pairs: pa.Table, rows: np.ndarray) -> list[PairJob]:
    """PairJobs of some rows of ``pairs`` (the sides as ``read_tensor`` takes them)."""
    cols = ("path", "data_offset", "stored_dtype", "shape", "format", "host_shape")
    part = pairs.take(rows)
    run = [part.column(c).to_pylist() for c in cols]
    base = [part.column("baseline_" + c).to_pylist() for c in cols]
    jobs = []
    for i, key in enumerate(rows.tolist()):
        sides = []
        for c in (run, base):
            if c[0][i] is None:
                sides.append(None)
            else:
                sides.append((c[0][i], c[1][i], c[2][i], tuple(c[3][i] or ()), c[4][i], c[5][i]))
        jobs.append(PairJob(key, sides[0], sides[1]))
    return jobs


def compare_table(pairs: pa.Table, workers: int = 1, **plan: int) -> Iterator[MetricColumns]:
    """The metrics of every row of ``pairs`` (``plan_batches``' columns), a ``MetricColumns`` per task
    in task order. With ``workers`` > 1, ``workers`` threads of this process take the tasks as they
    come (the kernel's ``columns()`` runs without the GIL, so the threads share nothing but the task
    queue: no pickling, no pipe, and no core idles at the end while another still holds two queued
    tasks); a task with pairs for ``compare_jobs`` (the numpy path holds the GIL) goes on to a helper
    process from its thread. ``plan`` passes ``task_bytes`` / ``task_pairs`` on to ``plan_batches``."""
    batches = plan_batches(pairs, workers=workers, **plan)
    if workers <= 1:
        for batch in batches:
            yield compare_batch(batch)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    # Tasks submitted ahead of the one the caller waits for: the threads keep computing while it
    # commits; results are small (about 100 bytes a pair), so this bounds memory too.
    ahead = 4 * workers + 4
    with ThreadPoolExecutor(workers, thread_name_prefix="dumpcat-compare") as pool:
        window: deque = deque()
        try:
            for batch in batches:
                window.append(pool.submit(_thread_task, batch))
                if len(window) >= ahead:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for future in window:  # the caller stopped early: drop what has not started
                future.cancel()


def _thread_task(batch: PairBatch) -> MetricColumns:
    """A ``compare_table`` thread's task: the kernel's pairs here, without the GIL; a task that also has
    ``compare_jobs`` pairs in a helper process (computed here while none is ready)."""
    if not batch.jobs:
        return compare_batch(batch)
    from ingest.helper_pool import run_ordered

    [metrics] = run_ordered("ingest.compare_metrics:compare_batch", iter([batch]), 1)
    return metrics
