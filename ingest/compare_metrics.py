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
- ``ok``; and, from ``compare_jobs`` only, ``only_in_run`` / ``only_in_baseline`` / ``absent``,
  ``unreadable_run`` / ``unreadable_baseline`` (the run side is tried first); ``error`` if
  computing failed unexpectedly (never seen; it keeps one bad pair from failing a batch).

Integers and bool are compared as numbers (bool: 1/0); ml_dtypes types (bfloat16, float8, int4)
through float32, which holds them exactly; int64 beyond 2^53 rounds in float64.

Streaming: both tensors are walked in C order, ``step`` elements at a time (at most ``block`` and at
most ``_STEP``: big enough to amortise a step's Python cost, small enough to stay in cache), into
reused scratch buffers.
C-contiguous arrays (memory maps included) are sliced, never copied whole; other layouts go through
``np.nditer``'s bounded buffer. Pages of big read-only file mappings are dropped from this
process's mapping (``MADV_DONTNEED``, page cache untouched) once processed, so that the RSS of
comparing two 2 GB memory-mapped tensors stays at a few MB instead of 4 GB.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["METRIC_FIELDS", "PairJob", "PairMetrics", "compare_arrays", "compare_jobs"]

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

_maxr = np.maximum.reduce
_minr = np.minimum.reduce
_addr = np.add.reduce
_cnz = np.count_nonzero
_isfinite = math.isfinite


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
        sp, sq = self.sp.value, self.sq.value
        if not (sp > 0 and sq > 0):
            return None
        kl = self.spl.value / sp + math.log(sq / sp)
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
    rt = np.result_type(wx, wy, np.float32)
    step = max(1, min(int(block), _STEP))
    floats = wx.kind == "f" or wy.kind == "f"
    with np.errstate(all="ignore"):
        acc, whole = _pass1(x, y, rt, step, floats)
        if acc.nan_x and acc.nan_y:
            status = "nan_in_both"
        elif acc.nan_x:
            status = "nan_in_run"
        elif acc.nan_y:
            status = "nan_in_baseline"
        elif acc.mismatch:
            status = "inf_mismatch"
        else:
            status = "unsupported" if n == 1 else "ok"
        if acc.mismatch:
            return _null(status, n)
        if whole is not None:  # one step: KL from the data in hand, no second read
            f64 = _scratch.get(step, rt)[0]
            klacc = _KL(acc.mnx, acc.mxx, acc.mny, acc.mxy)
            klacc.update(whole[0], whole[1], f64[2], f64[3])  # D and YA are free now
            kl = klacc.value()
        else:
            kl = _kl_pass(x, y, rt, step, acc)
    sdd, syy, sxy = acc.sdd.value, acc.syy.value, acc.sxy.value
    cosine: float | None = None
    if n > 1:
        a, b = math.sqrt(acc.sxx.value), math.sqrt(syy)
        if a <= _EPS64 and b <= _EPS64:
            cosine = 1.0
        elif a > _EPS64 and b > _EPS64:
            c = sxy / (a * b)
            cosine = min(c, 1.0) if _isfinite(c) else None
    rel_euc = 0.0 if math.sqrt(syy) <= _EPS64 else math.sqrt(sdd / syy)
    zero_d = x.ndim == 0
    return PairMetrics(
        status,
        n,
        cosine=cosine,
        max_abs_err=_num(acc.mad),
        max_rel_err=_num(acc.mre),
        mean_abs_err=_num(acc.sad.value / n),
        rmse=_num(math.sqrt(sdd / n)),
        rel_euclidean=_num(rel_euc),
        kl_div=kl,
        acc_rel_err=_num(acc.sacc.value),
        err_ratio_1e3=None if zero_d else acc.c1 / n,
        err_ratio_5e3=None if zero_d else acc.c5 / n,
    )


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


def compare_jobs(batch: list[PairJob]) -> list[tuple[int, PairMetrics]]:
    """Compare pairs located in files (a ``helper_pool`` task); never raises."""
    from ingest.formats.tensor_data import read_tensor, stored_nbytes  # (pure numpy: imports fast)

    def read(side: tuple) -> np.ndarray:
        # A small tensor is read into memory (one pread): a memory map's set-up and tear-down
        # cost more than its bytes; a big one is mapped, so memory stays bounded.
        size = stored_nbytes(side[2], side[3])
        return read_tensor(*side, mapped=size is None or size > _READ_BELOW)

    out: list[tuple[int, PairMetrics]] = []
    for job in batch:
        if job.run is None or job.baseline is None:
            status = "absent" if job.run is None and job.baseline is None else (
                "only_in_baseline" if job.run is None else "only_in_run")  # fmt: skip
            out.append((job.key, _null(status, None)))
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
    return out
