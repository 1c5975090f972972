"""Per-tensor statistics computed from tensor data, for dumps that have no ``statistic.csv``.

CPU dumps cannot write a ``statistic.csv``, so dumpcat computes the same columns itself
(``schema.STAT_VALUE_FIELDS``). The semantics are those of MindSpore's host-mode
``TensorSummary<T>::TensorStatisticsSingleThread`` (≥ v2.3), see reference §1.3:

- every element is converted to ``double`` first; sums (avg, l2norm) are accumulated in float64, so
  float16/float32 data cannot overflow them;
- any NaN makes ``max``, ``min``, ``avg`` and ``l2norm`` NaN (MindSpore's loop makes NaN sticky and its
  mean and L2 include NaN); the counts stay exact;
- ``neg_count`` ('Negative Zero Count') counts elements < 0 and ``pos_count`` ('Positive Zero Count')
  elements > 0, both including ±inf and excluding NaN and ±0; ``zero_count`` counts +0 and -0;
- without NaN, ±inf behave as IEEE says: ``max`` may be ``inf``, ``avg`` is ``inf`` or NaN (inf - inf);
- integer and bool tensors: no NaN/inf, so those counts are 0; bool is True = 1, False = 0, and
  max/min/avg are numbers like for integers;
- empty tensors: ``count`` 0, every count 0, ``l2norm`` 0.0 (an empty sum), ``max``/``min``/``avg``
  NULL (MindSpore's host loop would print its initial -inf/inf and 0/0; its device mode skips them);
- complex tensors: MindSpore does not support statistics for them, so everything is NULL except
  ``count`` (and ``md5`` when asked);
- ``md5`` (only with ``md5=True``): hex MD5 of the raw tensor bytes exactly as stored in the file after
  the npy header (storage order and byte order untouched).

bfloat16, int4 and uint1 never reach this module: MindSpore saves them as float32/int8/uint8 npy.
MindSpore ≤ 2.2 wrote ``null`` for max/min/avg when every element was NaN or ±inf; like ≥ 2.3 we give
NaN/±inf instead (a SQL NULL stays reserved for "not computed").

Speed (figures in ``bench/bench_stats.py``): data is processed in cache-sized blocks (``BLOCK_ELEMS``)
with few numpy passes per block: max and min come first and decide whether the NaN, inf and sign passes
are needed at all; sums are BLAS dot products on a reused float64 copy. ``compute_stats_many`` reads
files with ``pread`` into a reused buffer (no header re-parse; no mmap, so a file truncated under us
cannot SIGBUS the process) and uses every core: the calling process computes batches of jobs, and
``workers - 1`` helper processes (``helper_pool``) take batches as soon as they have started. Threads
do not scale here: numpy calls on cache-sized blocks and small files are too short to amortise the GIL
hand-off.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import mmap
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ingest.helper_pool import resolve_workers, run_ordered

__all__ = [
    "BLOCK_ELEMS",
    "STAT_KEYS",
    "StatJob",
    "TruncatedTensorError",
    "compute_stats",
    "compute_stats_many",
    "open_tensor",
]

# The names of schema.STAT_VALUE_FIELDS, spelled out so that this module needs only numpy (a helper
# that computes statistics alone starts fast); tests/test_tensor_stats.py checks the two agree.
STAT_KEYS = (
    "max",
    "min",
    "avg",
    "count",
    "neg_count",
    "pos_count",
    "nan_count",
    "neg_inf_count",
    "pos_inf_count",
    "zero_count",
    "l2norm",
    "md5",
)

# Elements per processing block: 64 Ki float32 is 256 KiB, its float64 copy 512 KiB; both stay in L2.
BLOCK_ELEMS = 1 << 16
# Row length for the dot products. OpenBLAS multithreads ddot above 10000 elements, which collides with
# our own worker parallelism (measured: two callers of a threaded ddot halve the throughput), so the
# sums run as a batch of short, single-threaded ddot calls (np.vecdot over rows).
_DOT_ROW = 8192
# compute_stats_many: a batch handed to a worker holds at most this many jobs / bytes of tensor data.
_BATCH_JOBS = 256
_BATCH_BYTES = 32 << 20
# Below this much work, starting helpers (~150 ms of CPU each: Python + numpy) costs more than they save.
_INLINE_JOBS = 512
_INLINE_BYTES = 64 << 20

_NAN = float("nan")
# Stored dtypes that are not numpy dtype names: packed, `ml_dtypes` or raw bytes, decoded by
# ingest.formats.dtypes (imported only when such a tensor comes, so a helper starts with numpy alone).
SPECIAL_STORED = frozenset(
    {"int4", "uint1", "complex32", "raw", "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu",
     "float8_e4m3fnuz", "float8_e5m2fnuz"}
)  # fmt: skip


class TruncatedTensorError(ValueError):
    """The file holds fewer data bytes than its npy header promises."""


# --------------------------------------------------------------------------------------------------
# Scratch buffers, one set per thread (and so per worker process).


class _Scratch(threading.local):
    """Reusable block buffers: fresh 512 KiB allocations would page-fault on every block."""

    def __init__(self) -> None:
        self.f64 = np.empty(BLOCK_ELEMS, np.float64)
        self.mask = np.empty(BLOCK_ELEMS, np.bool_)
        self.ones = np.ones(_DOT_ROW, np.float64)
        self.read = bytearray(BLOCK_ELEMS * 16)


_scratch = _Scratch()

_maxr = np.maximum.reduce
_minr = np.minimum.reduce
_cnz = np.count_nonzero


def _dot_sums(x: np.ndarray) -> tuple[float, float]:
    """(sum x, sum x²) of a float64 block, BLAS-fast but never BLAS-multithreaded (see _DOT_ROW)."""
    m = x.shape[0]
    ones = _scratch.ones
    if m <= _DOT_ROW:
        return float(np.dot(x, ones[:m])), float(np.dot(x, x))
    q = m - m % _DOT_ROW
    rows = x[:q].reshape(-1, _DOT_ROW)
    s = float(np.vecdot(rows, ones).sum())
    sq = float(np.vecdot(rows, rows).sum())
    if q < m:
        tail = x[q:]
        s += float(np.dot(tail, ones[: m - q]))
        sq += float(np.dot(tail, tail))
    return s, sq


class _Accumulator:
    """Running statistics over the 1-D contiguous blocks of one tensor, in storage order."""

    __slots__ = (
        "_cast",
        "_hash",
        "_kind",
        "_native",
        "has_nan",
        "mn",
        "mx",
        "n",
        "nan",
        "neg",
        "ninf",
        "pinf",
        "pos",
        "s",
        "sq",
        "zero",
    )

    def __init__(self, dtype: np.dtype, md5: bool) -> None:
        kind = dtype.kind
        if kind not in "fiubc":
            raise TypeError(f"statistics are not defined for dtype {dtype.str!r}")
        self._kind = kind
        self._native = dtype.isnative
        # float16 and long double: convert each block to float64 once and work on that.
        self._cast = kind == "f" and dtype.itemsize not in (4, 8)
        self._hash = hashlib.md5() if md5 else None
        self.n = self.neg = self.pos = self.zero = self.nan = self.ninf = self.pinf = 0
        self.has_nan = False
        self.mx = -math.inf
        self.mn = math.inf
        self.s = 0.0
        self.sq = 0.0

    def update(self, c: np.ndarray) -> None:
        """Fold in one 1-D C-contiguous block (at most BLOCK_ELEMS elements)."""
        m = c.shape[0]
        if m == 0:
            return
        if self._hash is not None:
            self._hash.update(c)
        self.n += m
        kind = self._kind
        if kind == "c":
            return
        if not self._native:
            c = c.astype(c.dtype.newbyteorder("="))
        if kind == "f":
            if self._cast:
                buf = _scratch.f64[:m]
                np.copyto(buf, c, casting="unsafe")
                self._update_float(buf, buf)
            else:
                self._update_float(c, None)
        elif kind == "b":
            k = int(_cnz(c))
            self.pos += k
            self.zero += m - k
            self.s += k
            self.sq += k
        else:
            self._update_int(c)

    def _update_float(self, c: np.ndarray, f64: np.ndarray | None) -> None:
        m = c.shape[0]
        mask = _scratch.mask[:m]
        mx = float(_maxr(c))
        mn = float(_minr(c))
        if mx != mx:  # np.maximum propagates NaN: this block has at least one
            self.has_nan = True
            nan = int(_cnz(np.isnan(c, out=mask)))
            neg = int(_cnz(np.less(c, 0, out=mask)))
            pos = int(_cnz(np.greater(c, 0, out=mask)))
            self.nan += nan
            self.neg += neg
            self.pos += pos
            self.zero += m - nan - neg - pos
            inf = int(_cnz(np.isinf(c, out=mask)))
            if inf:
                ninf = int(_cnz(np.equal(c, -math.inf, out=mask)))
                self.ninf += ninf
                self.pinf += inf - ninf
            return
        # No NaN here, so max/min finite means every element is finite.
        if mx == math.inf:
            self.pinf += int(_cnz(np.equal(c, math.inf, out=mask)))
        if mn == -math.inf:
            self.ninf += int(_cnz(np.equal(c, -math.inf, out=mask)))
        self._signs(c, m, mx, mn, float_zero=True)
        if self.has_nan:
            return  # max/min/avg/l2norm are NaN whatever else comes
        self.mx = max(self.mx, mx)
        self.mn = min(self.mn, mn)
        if f64 is None:
            if c.dtype.itemsize == 8:
                f64 = c
            else:
                f64 = _scratch.f64[:m]
                np.copyto(f64, c)
        if max(mx, -mn) > 1e140:  # inf - inf, or squares past float64: IEEE results, no warnings
            with np.errstate(over="ignore", invalid="ignore"):
                s, sq = _dot_sums(f64)
        else:
            s, sq = _dot_sums(f64)
        self.s += s
        self.sq += sq

    def _update_int(self, c: np.ndarray) -> None:
        m = c.shape[0]
        mx = int(_maxr(c))
        mn = int(_minr(c))
        self._signs(c, m, mx, mn, float_zero=False)
        self.mx = max(self.mx, mx)
        self.mn = min(self.mn, mn)
        f64 = _scratch.f64[:m]
        np.copyto(f64, c, casting="unsafe")
        s, sq = _dot_sums(f64)
        self.s += s
        self.sq += sq

    def _signs(self, c: np.ndarray, m: int, mx: float, mn: float, *, float_zero: bool) -> None:
        """neg/pos/zero counts of a NaN-free block; max and min spare the passes they can."""
        if mn > 0:
            self.pos += m
            return
        if mx < 0:
            self.neg += m
            return
        # count_nonzero is SIMD for integers but a slow per-element loop for floats.
        zero = int(_cnz(np.equal(c, 0, out=_scratch.mask[:m]))) if float_zero else m - int(_cnz(c))
        self.zero += zero
        if mn == 0:
            self.pos += m - zero
        elif mx == 0:
            self.neg += m - zero
        else:
            neg = int(_cnz(np.less(c, 0, out=_scratch.mask[:m])))
            self.neg += neg
            self.pos += m - zero - neg

    def result(self) -> dict[str, float | int | str | None]:
        """The STAT_VALUE_FIELDS record."""
        n = self.n
        out: dict[str, float | int | str | None] = dict.fromkeys(STAT_KEYS)
        out["count"] = n
        if self._hash is not None:
            out["md5"] = self._hash.hexdigest()
        if self._kind == "c":
            return out
        out.update(
            neg_count=self.neg,
            pos_count=self.pos,
            nan_count=self.nan,
            neg_inf_count=self.ninf,
            pos_inf_count=self.pinf,
            zero_count=self.zero,
        )
        if n == 0:
            out["l2norm"] = 0.0
            return out
        if self.has_nan:
            out.update(max=_NAN, min=_NAN, avg=_NAN, l2norm=_NAN)
            return out
        if self._kind == "b":
            out.update(max=1.0 if self.pos else 0.0, min=0.0 if self.zero else 1.0)
        else:
            out.update(max=float(self.mx), min=float(self.mn))
        out["avg"] = self.s / n
        out["l2norm"] = math.sqrt(self.sq)
        return out


def compute_stats(arr: np.ndarray, *, md5: bool = False) -> dict[str, float | int | str | None]:
    """Statistics of one tensor, keyed exactly like ``schema.STAT_VALUE_FIELDS``.

    ``arr`` may be an ``np.memmap`` (e.g. from ``open_tensor``): it is walked in blocks of
    ``BLOCK_ELEMS`` elements, so memory use is bounded whatever its size. A contiguous array (C or
    Fortran) is walked in memory order, so ``md5`` is of its bytes as stored; a non-contiguous view is
    walked in C order (the bytes ``np.save`` would write). Semantics: see the module docstring.
    Raises TypeError for dtypes without statistics (strings, objects, records, datetimes).
    """
    a = np.asarray(arr)
    acc = _Accumulator(a.dtype, md5)
    if a.flags.c_contiguous or a.flags.f_contiguous:
        flat = a.ravel(order="K")  # a view in memory order
        n = flat.shape[0]
        for i in range(0, n, BLOCK_ELEMS):
            acc.update(flat[i : i + BLOCK_ELEMS])
    elif a.size:
        it = np.nditer(
            a, flags=["external_loop", "buffered", "zerosize_ok"], buffersize=BLOCK_ELEMS, order="C"
        )
        for block in it:
            acc.update(np.ascontiguousarray(block))
    return acc.result()


# --------------------------------------------------------------------------------------------------
# Reading tensor data given what the catalog knows from the npy header.


def _nbytes(dtype: np.dtype, shape: Sequence[int]) -> tuple[int, int]:
    count = math.prod(int(d) for d in shape)
    if count < 0 or any(int(d) < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {tuple(shape)}")
    return count, count * dtype.itemsize


def _check_dtype(stored_dtype: str) -> np.dtype:
    dtype = np.dtype(stored_dtype)
    if dtype.hasobject:
        raise TypeError(f"dtype {stored_dtype!r} holds Python objects (pickled npy); cannot map it")
    return dtype


def open_tensor(
    path: str | os.PathLike,
    data_offset: int,
    stored_dtype: str,
    shape: Sequence[int],
    *,
    fortran_order: bool = False,
) -> np.ndarray:
    """Read-only, memory-mapped view of a tensor's data; the npy header is not parsed again.

    ``data_offset``, ``stored_dtype`` and ``shape`` come from the catalog (what the npy header said).
    Empty tensors (which ``mmap`` cannot map) come back as a read-only empty array after checking the
    file exists; scalars (shape ``()``) map their single element. Raises ``TruncatedTensorError`` when
    the file is shorter than ``data_offset + nbytes`` (a half-written or cut file).
    """
    dtype = _check_dtype(stored_dtype)
    shape = tuple(int(d) for d in shape)
    count, nbytes = _nbytes(dtype, shape)
    order = "F" if fortran_order else "C"
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < data_offset + nbytes:
            raise TruncatedTensorError(
                f"file has {size} bytes, data needs {nbytes} bytes from offset {data_offset}"
            )
        if nbytes == 0:
            arr = np.empty(shape, dtype, order=order)
            arr.flags.writeable = False
            return arr
        # Map from 0: mmap offsets must be page-aligned and npy data offsets are not.
        mm = mmap.mmap(f.fileno(), data_offset + nbytes, access=mmap.ACCESS_READ)
    flat = np.frombuffer(mm, dtype=dtype, count=count, offset=data_offset)  # keeps mm alive
    return flat.reshape(shape, order=order)


def _read_into(fd: int, view: memoryview, offset: int) -> int:
    """pread until ``view`` is full or EOF; returns the bytes read."""
    got = 0
    want = len(view)
    while got < want:
        k = os.preadv(fd, [view[got:]], offset + got)
        if k == 0:
            break
        got += k
    return got


def _stats_from_file(
    path: str, data_offset: int, stored_dtype: str, shape: Sequence[int], md5: bool
) -> dict[str, float | int | str | None]:
    """Stats of the tensor data in a file, read block by block into a reused buffer."""
    dtype = _check_dtype(stored_dtype)
    _, nbytes = _nbytes(dtype, shape)
    acc = _Accumulator(dtype, md5)
    itemsize = dtype.itemsize
    fd = os.open(path, os.O_RDONLY)
    try:
        if nbytes == 0:
            size = os.fstat(fd).st_size
            if size < data_offset:
                raise TruncatedTensorError(f"file has {size} bytes, header promises {data_offset}")
            return acc.result()
        step = BLOCK_ELEMS * itemsize
        buf = _scratch.read
        if len(buf) < step:
            buf = bytearray(step)
        mv = memoryview(buf)
        pos = data_offset
        left = nbytes
        while left:
            want = min(left, step)
            got = _read_into(fd, mv[:want], pos)
            if got < want:
                size = os.fstat(fd).st_size
                raise TruncatedTensorError(
                    f"file has {size} bytes, data needs {nbytes} bytes from offset {data_offset}"
                )
            acc.update(np.frombuffer(buf, dtype=dtype, count=want // itemsize))
            pos += want
            left -= want
    finally:
        os.close(fd)
    return acc.result()


def _stats_of_decoded(
    path: str, offset: int, stored_dtype: str, shape: tuple[int, ...], fmt, host_shape, md5: bool
) -> dict[str, float | int | str | None]:
    """Stats of a tensor that needs decoding first (packed or ml_dtypes elements, a device layout):
    computed on its host-layout values, so device padding (C0, fractal blocks) is never counted.
    One tensor is decoded whole; raw dumps hold one operator's tensors, bounded by device memory."""
    from ingest.formats.dtypes import numeric_view
    from ingest.tensor_data import read_tensor

    arr = read_tensor(path, offset, stored_dtype, shape, fmt, host_shape, mapped=False)
    return compute_stats(numeric_view(arr), md5=md5)


# --------------------------------------------------------------------------------------------------
# Many tensors, in parallel.


@dataclass(slots=True)
class StatJob:
    """One tensor to compute: where its data is, as recorded in the catalog's tensors row."""

    row_id: int
    path: str
    data_offset: int
    stored_dtype: str
    shape: tuple[int, ...]
    format: str | None = None  # with host_shape: a device layout, converted before computing
    host_shape: tuple[int, ...] | None = None


_Result = tuple[int, dict | None, str | None]
_JobTuple = tuple[int, str, int, str, tuple[int, ...], str | None, tuple[int, ...] | None]


def _error_reason(exc: BaseException) -> str:
    if isinstance(exc, TruncatedTensorError):
        return f"truncated: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _run_batch(batch: list[_JobTuple], md5: bool) -> list[_Result]:
    """One batch of jobs, every failure turned into an error reason."""
    out: list[_Result] = []
    for row_id, path, offset, stored_dtype, shape, fmt, host_shape in batch:
        try:
            if stored_dtype in SPECIAL_STORED or host_shape is not None:
                out.append(
                    (row_id, _stats_of_decoded(path, offset, stored_dtype, shape, fmt, host_shape, md5), None)
                )
                continue
            out.append((row_id, _stats_from_file(path, offset, stored_dtype, shape, md5), None))
        except Exception as exc:
            out.append((row_id, None, _error_reason(exc)))
    return out


def _job_tuple(job: StatJob) -> tuple[_JobTuple, int]:
    """The picklable form of a job and its data size; a malformed job is left for _run_batch to report."""
    try:
        shape = tuple(int(d) for d in job.shape)
        host = None if job.host_shape is None else tuple(int(d) for d in job.host_shape)
        itemsize = 1 if job.stored_dtype in SPECIAL_STORED else np.dtype(job.stored_dtype).itemsize
        # absolute: an idle helper kept from an earlier call may have another working directory
        path = os.path.abspath(job.path)
        return (job.row_id, path, job.data_offset, job.stored_dtype, shape, job.format, host), math.prod(
            shape
        ) * itemsize
    except Exception:
        item = (
            job.row_id,
            job.path,
            job.data_offset,
            job.stored_dtype,
            job.shape,
            job.format,
            job.host_shape,
        )
        return item, 0


def _batches(jobs: Iterable[StatJob]) -> Iterator[tuple[list[_JobTuple], int]]:
    """Group jobs so that one hand-off to a worker carries enough work to amortise it."""
    batch: list[_JobTuple] = []
    size = 0
    for job in jobs:
        item, nbytes = _job_tuple(job)
        batch.append(item)
        size += nbytes
        if len(batch) >= _BATCH_JOBS or size >= _BATCH_BYTES:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


def compute_stats_many(
    jobs: Iterable[StatJob],
    *,
    md5: bool = False,
    workers: int | None = None,
    backend: Literal["process", "thread"] = "process",
) -> Iterator[tuple[int, dict | None, str | None]]:
    """Compute stats for many tensors; yields ``(row_id, stats, None)`` or ``(row_id, None, reason)``.

    Never raises for a bad job: a truncated, corrupt, unreadable or malformed one yields an error
    reason (``"truncated: ..."``, ``"FileNotFoundError: ..."``) and the others carry on. Results come
    in job order. Streaming: ``jobs`` is consumed lazily and only a few batches per worker (each ≤ 256
    jobs, ≤ 32 MiB of data) are in flight, so memory stays constant for any number of jobs.

    ``workers`` (default: one per core, at most 8) is the number of computing processes: the calling one
    plus ``workers - 1`` helper processes, which take batches once they have started (~150 ms), so
    nothing waits for them. ``backend="thread"`` uses helper threads instead, for comparison (the GIL
    makes them slower here, see ``bench/bench_stats.py``). A run of fewer than 512 jobs and 64 MiB, or
    ``workers=1``, starts no helpers. If helpers cannot start or die, the caller computes their work.
    """
    workers = resolve_workers(workers)
    batches = _batches(jobs)
    head: list[tuple[list[_JobTuple], int]] = []
    n_jobs = n_bytes = 0
    for item in batches:
        head.append(item)
        n_jobs += len(item[0])
        n_bytes += item[1]
        if n_jobs >= _INLINE_JOBS or n_bytes >= _INLINE_BYTES:
            break
    all_batches = (b for b, _ in itertools.chain(head, batches))
    if workers == 1 or (n_jobs < _INLINE_JOBS and n_bytes < _INLINE_BYTES):
        for batch in all_batches:
            yield from _run_batch(batch, md5)
    elif backend == "thread":
        yield from _run_threads(all_batches, md5, workers)
    else:
        for results in run_ordered("ingest.tensor_stats:_run_batch", all_batches, workers - 1, md5):
            yield from results


def _run_threads(batches: Iterator[list[_JobTuple]], md5: bool, workers: int) -> Iterator[_Result]:
    """Ordered map over a thread pool with at most ``2 * workers`` batches in flight."""
    from concurrent.futures import Future, ThreadPoolExecutor

    window: deque[Future] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dumpcat-stats") as pool:
        try:
            for batch in batches:
                window.append(pool.submit(_run_batch, batch, md5))
                if len(window) >= 2 * workers:
                    yield from window.popleft().result()
            while window:
                yield from window.popleft().result()
        finally:
            for fut in window:
                fut.cancel()
