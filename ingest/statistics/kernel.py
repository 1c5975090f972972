"""Per-tensor statistics computed from tensor data, for dumps that have no ``statistic.csv``.

CPU dumps cannot write a ``statistic.csv``, so dumpcat computes the same columns itself
(``schema.STAT_VALUE_FIELDS``). The semantics are those of MindSpore's host-mode
``TensorSummary<T>::TensorStatisticsSingleThread`` (≥ v2.3), see reference §1.3:

- every element is converted to ``double`` first; sums (avg, l2norm) are accumulated in float64, so
  no data can overflow them (float16 and bfloat16 go through float32 partial sums of 16 elements first,
  within 2^-20 of exact: see below);
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

bfloat16 (stored as ``"bfloat16"`` in the catalog, or an ``ml_dtypes.bfloat16`` array) is computed
from its 16-bit patterns (the high half of a float32); int4, uint1 and the float8 types are decoded
first (``ingest.formats.dtypes``). MindSpore itself saves bfloat16/int4/uint1 as float32/int8/uint8 npy.
MindSpore ≤ 2.2 wrote ``null`` for max/min/avg when every element was NaN or ±inf; like ≥ 2.3 we give
NaN/±inf instead (a SQL NULL stays reserved for "not computed").

How the sums are formed (so that every build gives the same bits): every element x goes, by its index
``i`` in storage order (the order of the bytes in the file; for a non-contiguous array, C order), to one
of a few running sums, each added to strictly in index order across blocks (a block that starts
anywhere continues the sums where they were):

- float32, float64 and the integer kinds: ``LANES`` = 8 lanes. Element ``i`` adds ``x`` (converted
  to float64) to lane ``i % 8`` and ``x * x`` (a float64 product) to square lane ``i % 8``.
- float16 and bfloat16: ``HALF_LANES`` = 16 lanes (lane ``i % 16``) and blocks of ``HALF_BLOCK`` = 256
  elements by index (block ``i // 256``: 16 elements per lane). Within a block each lane adds its
  elements, in index order, to a float32 partial sum, and their squares ``x * x`` (exact in float32 for
  these values) to a float32 partial sum of squares, both starting at 0; at the end of the block, and
  of the tensor, the two partials are added in float64 to the lane's float64 sum and sum of squares.
  bfloat16 elements outside the float32-safe range (nonzero ``|x| < 2^-60``, ``|x| >= 2^60``, ±inf,
  NaN) skip the partials: ``x`` and ``x * x`` go, in float64, straight to the lane's float64 sums at
  their place in index order.

At the end ``sum = ((lane0 + lane1) + lane2) ... + lane7`` (or ``lane15``), likewise the sum of squares;
``avg = sum / count`` and ``l2norm = sqrt(sum of squares)``. max, min and the counts are exact whatever
the order; a zero max or min is reported as +0.0.

Error bound: a float32 partial adds at most 16 values (15 roundings of 2^-24, no underflow for these
values), so for float16 and bfloat16 ``|sum - exact| <= 2^-20 * sum(|x|)`` and the sum of squares is
within a relative ``2^-20`` (l2norm ``2^-21``), plus the float64 rounding of the lanes, about ``count /
16 * 2^-53`` at most (the other kinds have only that, about ``count / 8 * 2^-53``). float16 itself is
precise to ``2^-11``, bfloat16 to ``2^-8``: 512 and 4096 times coarser than the bound.

The C kernel (``ingest/statistics/_fused_stats.c``, built with ``-ffp-contract=off`` and without
fast-math) and the pure-numpy fallback both follow this definition and give bit-identical results
(``tests/ingest/statistics/test_fused_stats.py``); the fallback is used when the extension is not built or
``DUMPCAT_PURE_NUMPY_STATS=1`` is set at import (``STATS_BACKEND`` says which).

Speed (figures in ``bench/bench_stats.py``): data is processed in cache-sized blocks (``BLOCK_ELEMS``);
the C kernel computes every statistic of a block in one pass (AVX2 on x86-64 CPUs that have it), so
statistics run at about the speed of reading the files from the page cache. The fallback needs a few
numpy passes per block: max and min first, which decide whether the NaN, inf and sign passes are needed
at all, then one float64 copy of the block, reduced row by row as an (n/8, 8) array for the lane sums
(float16/bfloat16: a float32 copy reduced per 256-element block as a (blocks, 16, 16) array, then the
block partials in float64).
``compute_stats_many`` reads small files with ``pread`` into a reused buffer (no header re-parse) and big
ones (``_MAPPED_MIN``) through read-only mappings of the page cache, a few MiB at a time: the copy of a
read costs as much as the statistics themselves. A file that shrinks while it is mapped would raise
SIGBUS; the C kernel catches that fault inside its own mapping and the tensor is reported truncated,
like one that was short to begin with. It uses every core: the calling process computes
batches of jobs, and ``workers - 1`` helper processes (``helper_pool``) take batches as soon as they have
started. Threads do not scale here: the per-file Python work of small files is too short to amortise
the GIL hand-off.

A sparse file (`truncate`d to 16 GiB, most of it holes) would cost statistics time by its apparent
size while holding almost no data. A file of at least ``_SPARSE_MIN_BYTES`` with under 1/``_SPARSE_RATIO``
of its bytes allocated (``st_blocks``) and a hole in its data (``SEEK_HOLE``: a compressed file has
few blocks but no hole) gets no statistics: its tensor is cataloged and readable, and the reason is a
``sparse: ...`` error (an ``ingest_errors`` row of stage ``tensor_stats``). Computing over the
allocated extents alone would be exact only by re-deriving every statistic of the zeros in between
(counts, min/max, the fixed-order lane sums) and hashing them for md5, so it is not done.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import mmap
import os
import struct
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ingest.formats.special_dtypes import SPECIAL_STORED
from ingest.helper_pool import resolve_workers, run_ordered

__all__ = [
    "BLOCK_ELEMS",
    "STAT_KEYS",
    "StatJob",
    "TruncatedTensorError",
    "compute_stats",
    "compute_stats_many",
    "open_tensor",
    "stats_backend",
    "use_c_kernel",
    "view_tensor",
]

# The names of schema.STAT_VALUE_FIELDS, spelled out so that this module needs only numpy (a helper
# that computes statistics alone starts fast); test_tensor_stats.py checks the two agree.
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
# Running sums per tensor (module docstring): element i (storage order) goes to lane i % LANES, or for
# float16/bfloat16 to lane i % HALF_LANES through float32 partials over blocks of HALF_BLOCK elements.
LANES = 8
HALF_LANES = 16
HALF_BLOCK = 256
_HALF_ROWS = HALF_BLOCK // HALF_LANES
# The running state (the kernel's lanes buffer), float64 slots: sums S, squares Q (8 or 16 lanes), then
# the float32 partials P and R of the half kinds. A block's phase is its first global index % HALF_BLOCK.
_STATE = 64
_S, _Q, _P, _R = 0, 16, 32, 48
# bfloat16 bits of 2^-60 and 2^60 (|x|): elements outside [2^-60, 2^60) other than 0 skip the partials.
_BF16_LO, _BF16_HI = 0x2180, 0x5D80
# compute_stats_many: a batch handed to a worker holds at most this many jobs / bytes of tensor data.
_BATCH_JOBS = 256
_BATCH_BYTES = 32 << 20
# Below this much work, starting helpers (~150 ms of CPU each: Python + numpy) costs more than they save.
_INLINE_JOBS = 512
_INLINE_BYTES = 64 << 20
# compute_stats_many with the C kernel: bytes per read (a multiple of every item size).
_DIRECT_READ = 512 << 10
# Tensors of at least this many bytes are read through mappings of the page cache (no copy), at most
# this many bytes mapped at a time (see _fold_mapped).
_MAPPED_MIN = 1 << 20
_MAPPED_WINDOW = 4 << 20

_NAN = float("nan")
_INF = math.inf


class TruncatedTensorError(ValueError):
    """The file holds fewer data bytes than its npy header promises."""


class SparseTensorError(ValueError):
    """The file is mostly holes: its statistics are not computed (see the module docstring)."""


_SPARSE_MIN_BYTES = (
    64 << 20
)  # smaller files cost little whatever they hold (and tiny files may have 0 blocks)
_SPARSE_RATIO = 8
_SPARSE_CHECK_ELEMS = (
    _SPARSE_MIN_BYTES // 8
)  # tensors this big pay one stat() for the check (sub-byte dtypes too)


def check_not_sparse(path: str, data_offset: int) -> None:
    """SparseTensorError when the file at `path` is mostly holes and has one in its data."""
    st = os.stat(path)
    if st.st_size < _SPARSE_MIN_BYTES or st.st_blocks * 512 * _SPARSE_RATIO >= st.st_size:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        hole = os.lseek(fd, data_offset, os.SEEK_HOLE)
    except OSError:  # no SEEK_HOLE here (or the offset is past the end): read it as any file
        return
    finally:
        os.close(fd)
    if hole < st.st_size:
        raise SparseTensorError(
            f"{st.st_blocks * 512:,} of the file's {st.st_size:,} bytes are allocated (the rest are "
            "holes); statistics not computed, the tensor is still cataloged"
        )


# --------------------------------------------------------------------------------------------------
# Element kinds and the kernel that computes a block: the C extension or the numpy fallback.

# The C module exports the same tuple (KINDS); a block's kind is an index into it.
_KINDS = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
)
_F16, _BF16, _F32, _F64 = 0, 1, 2, 3  # float kinds are the first four
_U8 = _KINDS.index("uint8")
_KIND_OF = {(np.dtype(name).kind, np.dtype(name).itemsize): k for k, name in enumerate(_KINDS) if k != _BF16}
_BF16_BITS = np.dtype("<u2")  # how bfloat16 data is read: its 16-bit patterns, little-endian on disk


def _load_kernel():
    """The C module (None if it is not built or out of date) and a note saying which backend is used."""
    try:
        from ingest.statistics import _fused_stats
    except ImportError:
        return None, "numpy fallback (the C kernel ingest.statistics._fused_stats is not built)"
    layout = tuple(
        getattr(_fused_stats, name, None) for name in ("LANES", "HALF_LANES", "HALF_BLOCK", "STATE")
    )
    if tuple(_fused_stats.KINDS) != _KINDS or layout != (LANES, HALF_LANES, HALF_BLOCK, _STATE):
        return (
            None,
            "numpy fallback (ingest.statistics._fused_stats is out of date: reinstall dumpcat to rebuild it)",
        )
    return _fused_stats, f"C kernel ({_fused_stats.ISA})"


_c_kernel, _backend_note = _load_kernel()
if os.environ.get("DUMPCAT_PURE_NUMPY_STATS", "").strip() not in ("", "0"):
    _kernel = None
    _backend_note = "numpy fallback (DUMPCAT_PURE_NUMPY_STATS is set)"
else:
    _kernel = _c_kernel  # None: the numpy fallback computes every block


def stats_backend() -> str:
    """What computes statistics in this process: ``"C kernel (avx2)"``, ``"numpy fallback (...)"``."""
    if _kernel is not None:
        return f"C kernel ({_kernel.ISA})"
    if _c_kernel is not None and "DUMPCAT_PURE_NUMPY_STATS" not in _backend_note:
        return "numpy fallback (use_c_kernel(False))"
    return _backend_note


def use_c_kernel(enabled: bool) -> bool:
    """Use the C kernel (if it is built) or force the numpy fallback, in this process only (helper
    processes follow ``DUMPCAT_PURE_NUMPY_STATS``). Returns whether the C kernel is now in use."""
    global _kernel
    _kernel = _c_kernel if enabled else None
    return _kernel is not None


# --------------------------------------------------------------------------------------------------
# Scratch buffers, one set per thread (and so per worker process).


class _Scratch(threading.local):
    """Reusable block buffers: fresh 512 KiB allocations would page-fault on every block."""

    def __init__(self) -> None:
        # the fallback's sums (_np_lane_sums): running lanes, then rows of 8 elements + i * squares
        self.grid = np.empty((BLOCK_ELEMS // LANES + 1, LANES), np.complex128)
        self.grid_flat = self.grid.reshape(-1).view(np.float64)  # contiguous: views, never copies
        self.grid_re = self.grid_flat[2 * LANES :: 2]
        self.grid_im = self.grid_flat[2 * LANES + 1 :: 2]
        self.grid_out = np.empty(LANES, np.complex128)
        self.grid_out_flat = self.grid_out.view(np.float64)
        # the half kinds' sums (_np_half_sums): float32 partial + i * partial of squares, then rows
        self.hgrid = np.empty((BLOCK_ELEMS // HALF_LANES + 1, HALF_LANES), np.complex64)
        self.hgrid_flat = self.hgrid.reshape(-1).view(np.float32)
        self.hout = np.empty((BLOCK_ELEMS // HALF_BLOCK + 1, HALF_LANES), np.complex64)
        self.hgrid64 = np.empty((max(BLOCK_ELEMS // HALF_BLOCK, _HALF_ROWS) + 1, HALF_LANES), np.complex128)
        self.hgrid64_flat = self.hgrid64.reshape(-1).view(np.float64)
        self.hout64 = np.empty(HALF_LANES, np.complex128)
        self.u16 = np.empty(BLOCK_ELEMS, np.uint16)  # bfloat16 |bits| (fallback)
        self.f32 = np.empty(BLOCK_ELEMS, np.float32)  # float16 widened (fallback)
        self.u32 = np.empty(BLOCK_ELEMS, np.uint32)  # bfloat16 widened to float32 bits (fallback)
        self.mask = np.empty(BLOCK_ELEMS, np.bool_)
        self.read = bytearray(BLOCK_ELEMS * 16)


_scratch = _Scratch()

_maxr = np.maximum.reduce
_minr = np.minimum.reduce
_addr = np.add.reduce
_cnz = np.count_nonzero


def _np_lane_sums(v: np.ndarray, phase: int, lanes: np.ndarray) -> None:
    """Fold the block ``v`` (any real dtype, converted to float64 as a C cast does) into the 8 running
    sums ``lanes[_S:_S + 8]`` and sums of squares ``lanes[_Q:_Q + 8]``, exactly as the C kernel does.

    The first ``head`` elements finish the lanes ``phase..7`` of the previous group of 8. The whole
    groups that follow are rows 1.. of a (groups + 1, 8) complex128 array whose real parts are the
    elements and imaginary parts their squares; row 0 holds the running lanes (sum + i * squares).
    ``np.add.reduce`` over axis 0 adds row after row into each column (a reduction over a non-innermost
    axis runs row by row; complex addition is two independent IEEE additions), which is the kernel's
    order, sums and squares in one numpy call. test_fused_stats.py checks that this numpy does so.
    """
    m = v.shape[0]
    head = min((LANES - phase) & (LANES - 1), m)
    if head:
        h = v[:head].astype(np.float64)
        lanes[_S + phase : _S + phase + head] += h
        lanes[_Q + phase : _Q + phase + head] += h * h
    rows = (m - head) >> 3
    if rows:
        sc = _scratch
        flat = sc.grid_flat
        flat[0 : 2 * LANES : 2] = lanes[_S : _S + LANES]
        flat[1 : 2 * LANES : 2] = lanes[_Q : _Q + LANES]
        k = rows * LANES
        re = sc.grid_re[:k]
        np.copyto(re, v[head : head + k], casting="unsafe")
        np.multiply(re, re, out=sc.grid_im[:k])
        _addr(sc.grid[: rows + 1], axis=0, out=sc.grid_out)
        out = sc.grid_out_flat
        lanes[_S : _S + LANES] = out[0::2]
        lanes[_Q : _Q + LANES] = out[1::2]
    r = m - head - rows * LANES
    if r:
        t = v[m - r :].astype(np.float64)
        lanes[_S : _S + r] += t
        lanes[_Q : _Q + r] += t * t


_F32_ZERO = np.float32(0.0)


def _np_half_flush(lanes: np.ndarray) -> None:
    """End of a block of a half kind: S += P and Q += R (float64 additions of float32 values), P = R = 0."""
    lanes[_S : _S + HALF_LANES] += lanes[_P : _P + HALF_LANES]
    lanes[_Q : _Q + HALF_LANES] += lanes[_R : _R + HALF_LANES]
    lanes[_P : _R + HALF_LANES] = 0.0


def _np_half_elems(x: np.ndarray, ext: np.ndarray | None, lane: int, lanes: np.ndarray) -> None:
    """Elements ``x`` (float32, at most one per lane) into lanes ``lane``, ``lane + 1``, ...; ``ext``
    marks the ones that go to S and Q as float64 instead of into the partials."""
    k = x.shape[0]
    p = lanes[_P + lane : _P + lane + k].astype(np.float32)  # exact: they hold float32 values
    r = lanes[_R + lane : _R + lane + k].astype(np.float32)
    if ext is not None and ext.any():
        xe = np.where(ext, x, _F32_ZERO).astype(np.float64)  # + 0.0 leaves the other lanes as they are
        lanes[_S + lane : _S + lane + k] += xe
        lanes[_Q + lane : _Q + lane + k] += xe * xe
        x = np.where(ext, _F32_ZERO, x)
    lanes[_P + lane : _P + lane + k] = p + x
    lanes[_R + lane : _R + lane + k] = r + x * x


def _np_half_partial(x: np.ndarray, rows: int, lanes: np.ndarray) -> None:
    """``rows`` whole rows of 16 float32 elements (inside one block) added, row after row, to the partials
    P and R: one reduce of a (rows + 1, 16) complex64 array (row 0: P + i * R; then x + i * x * x)."""
    sc = _scratch
    flat = sc.hgrid_flat
    flat[0 : 2 * HALF_LANES : 2] = lanes[_P : _P + HALF_LANES]
    flat[1 : 2 * HALF_LANES : 2] = lanes[_R : _R + HALF_LANES]
    k = rows * HALF_LANES
    re = flat[2 * HALF_LANES : 2 * (HALF_LANES + k) : 2]
    np.copyto(re, x)
    np.multiply(re, re, out=flat[2 * HALF_LANES + 1 : 2 * (HALF_LANES + k) : 2])
    out = _addr(sc.hgrid[: rows + 1], axis=0).view(np.float32)
    lanes[_P : _P + HALF_LANES] = out[0::2]
    lanes[_R : _R + HALF_LANES] = out[1::2]


def _np_half_block_partials(x: np.ndarray, blocks: int) -> np.ndarray:
    """The float32 partials (x + i * x * x, complex64) of ``blocks`` whole blocks of float32 elements:
    one reduce over axis 1 of a (blocks, 16, 16) complex64 array, row after row. A view of scratch."""
    sc = _scratch
    k = blocks * HALF_BLOCK
    flat = sc.hgrid_flat
    re = flat[0 : 2 * k : 2]
    np.copyto(re, x)
    np.multiply(re, re, out=flat[1 : 2 * k : 2])
    part = sc.hout[:blocks]
    _addr(sc.hgrid[: blocks * _HALF_ROWS].reshape(blocks, _HALF_ROWS, HALF_LANES), axis=1, out=part)
    return part


def _np_half_rows(x: np.ndarray, ext: np.ndarray | None, rows: int, row0: int, lanes: np.ndarray) -> None:
    """``rows`` whole rows of 16 float32 elements, the first at row ``row0`` of its block, into the
    lanes: the in-range elements into the partials (a first segment up to its block's end, whole blocks,
    a last segment that stays pending), and into S and Q, in float64 and in order, each completed block's
    partials and the elements ``ext`` marks (bfloat16 outside the float32-safe range; None: none)."""
    L, R = HALF_LANES, _HALF_ROWS
    first = min(rows, R - row0) if row0 else 0
    blocks = (rows - first) // R
    last = rows - first - blocks * R
    xm = x if ext is None else np.where(ext, _F32_ZERO, x)
    flushed = None  # the first segment's partials when it completes its block
    if first:
        _np_half_partial(xm[: first * L], first, lanes)
        if row0 + first == R:
            flushed = lanes[_P : _R + L].copy()
            lanes[_P : _R + L] = 0.0
    part = _np_half_block_partials(xm[first * L : (first + blocks * R) * L], blocks) if blocks else None
    if last:  # starts a block: P and R are 0
        _np_half_partial(xm[(rows - last) * L :], last, lanes)
    sc = _scratch
    if ext is None:
        if flushed is not None:
            lanes[_S : _S + L] += flushed[:L]
            lanes[_Q : _Q + L] += flushed[L:]
        if blocks:
            g = sc.hgrid64[: blocks + 1]
            flat64 = sc.hgrid64_flat
            flat64[0 : 2 * L : 2] = lanes[_S : _S + L]
            flat64[1 : 2 * L : 2] = lanes[_Q : _Q + L]
            np.copyto(g[1:], part)  # complex64 -> complex128: exact
            _addr(g, axis=0, out=sc.hout64)
            out = sc.hout64.view(np.float64)
            lanes[_S : _S + L] = out[0::2]
            lanes[_Q : _Q + L] = out[1::2]
        return
    # Elements outside the range in float64 (0 elsewhere: adding 0.0 leaves a lane as it is, so rows
    # without one are left out), row after row, each completed block's partials after its last row: the
    # sequence is put in order by a key (2 * row for a row, 2 * row + 1 for the flush after it) and
    # reduced in one call for S and one for Q.
    e2 = ext.reshape(rows, L)
    keep = np.flatnonzero(e2.any(axis=1))
    ends = first + R - 1 + R * np.arange(blocks)  # the last row of each completed block
    if flushed is not None:
        ends = np.concatenate([[first - 1], ends])
    keys = np.concatenate([2 * keep, 2 * ends + 1])
    order = np.argsort(keys, kind="stable")
    n_g = 1 + keys.shape[0]
    gs = np.empty((n_g, L))
    gq = np.empty((n_g, L))
    gs[0] = lanes[_S : _S + L]
    gq[0] = lanes[_Q : _Q + L]
    vs = np.empty((keys.shape[0], L))
    vq = np.empty((keys.shape[0], L))
    k = keep.shape[0]
    np.copyto(vs[:k], np.where(e2[keep], x.reshape(rows, L)[keep], _F32_ZERO))
    np.multiply(vs[:k], vs[:k], out=vq[:k])
    flush_s = np.empty((ends.shape[0], L))
    flush_q = np.empty((ends.shape[0], L))
    j = 0
    if flushed is not None:
        flush_s[0] = flushed[:L]
        flush_q[0] = flushed[L:]
        j = 1
    if blocks:
        pv = part.view(np.float32).reshape(blocks, 2 * L)
        flush_s[j : j + blocks] = pv[:, 0::2]
        flush_q[j : j + blocks] = pv[:, 1::2]
    vs[k:] = flush_s
    vq[k:] = flush_q
    np.take(vs, order, axis=0, out=gs[1:])
    np.take(vq, order, axis=0, out=gq[1:])
    lanes[_S : _S + L] = _addr(gs, axis=0)
    lanes[_Q : _Q + L] = _addr(gq, axis=0)


def _np_half_sums(v: np.ndarray, phase: int, lanes: np.ndarray, ext: np.ndarray | None) -> None:
    """Fold the float16/bfloat16 block ``v`` (widened to float32, exact) whose first global index is
    ``phase`` modulo HALF_BLOCK into ``lanes`` (S, Q, P, R), exactly as the C kernel does (module
    docstring). ``ext``: the bfloat16 elements outside the float32-safe range (None: there are none).
    Head (up to the next row of 16) and tail (after the last whole row) go element by element."""
    m = v.shape[0]
    pos = phase
    head = min(-pos & (HALF_LANES - 1), m)
    if head:
        _np_half_elems(v[:head], None if ext is None else ext[:head], pos & (HALF_LANES - 1), lanes)
        pos += head
        if pos == HALF_BLOCK:
            _np_half_flush(lanes)
            pos = 0
    rows = (m - head) // HALF_LANES
    if rows:
        end = head + rows * HALF_LANES
        e = None if ext is None or not ext[head:end].any() else ext[head:end]
        _np_half_rows(v[head:end], e, rows, pos // HALF_LANES, lanes)
    r = m - head - rows * HALF_LANES
    if r:
        _np_half_elems(v[m - r :], None if ext is None else ext[m - r :], 0, lanes)


def _np_bf16_outside(c: np.ndarray, mx: float, mn: float) -> np.ndarray | None:
    """The bfloat16 elements (16-bit patterns ``c``, NaN-free, max/min known) that skip the float32
    partials: nonzero |x| < 2^-60, or |x| >= 2^60 (inf included); None when there are none."""
    m = c.shape[0]
    ab = np.bitwise_and(c, 0x7FFF, out=_scratch.u16[:m])
    huge = mx >= 2.0**60 or mn <= -(2.0**60)
    if not huge and int(_minr(ab - np.uint16(1))) >= _BF16_LO - 1:  # wraps: 0 - 1 is 0xffff
        return None
    return (ab != 0) & ((ab < _BF16_LO) | (ab >= _BF16_HI))


def _np_signs(c: np.ndarray, m: int, mx, mn, *, float_zero: bool) -> tuple[int, int]:
    """(neg, zero) of a NaN-free block; max and min spare the passes they can."""
    if mn > 0:
        return 0, 0
    if mx < 0:
        return m, 0
    mask = _scratch.mask[:m]
    # count_nonzero is SIMD for integers but a slow per-element loop for floats.
    zero = int(_cnz(np.equal(c, 0, out=mask))) if float_zero else m - int(_cnz(c))
    if mn == 0:
        return 0, zero
    if mx == 0:
        return m - zero, zero
    return int(_cnz(np.less(c, 0, out=mask))), zero


def _np_block(c: np.ndarray, kind: int, phase: int, lanes: bytearray, sums: bool) -> tuple:
    """The numpy fallback of ``_fused_stats.block`` plus the ±inf counts:
    ``(neg, zero, nan, ninf, pinf, max, min)``; max/min are meaningless if nan > 0. ``sums=False``
    skips the lane sums (a NaN came earlier: they will not be used)."""
    m = c.shape[0]
    if kind == _F16:  # float16 comparisons are slow in numpy: widen first (exact)
        v = _scratch.f32[:m]
        np.copyto(v, c)
    elif kind == _BF16:  # the high half of a float32
        u = _scratch.u32[:m]
        np.copyto(u, c, casting="unsafe")
        np.left_shift(u, 16, out=u)
        v = u.view(np.float32)
    else:
        v = c
    ninf = pinf = nan = 0
    if kind <= _F64:
        mx = float(_maxr(v))
        mn = float(_minr(v))
        mask = _scratch.mask[:m]
        if mx != mx:  # np.maximum propagates NaN: this block has at least one
            nan = int(_cnz(np.isnan(v, out=mask)))
            neg = int(_cnz(np.less(v, 0, out=mask)))
            zero = int(_cnz(np.equal(v, 0, out=mask)))
            if int(_cnz(np.isinf(v, out=mask))):
                ninf = int(_cnz(np.equal(v, -_INF, out=mask)))
                pinf = int(_cnz(np.equal(v, _INF, out=mask)))
            return neg, zero, nan, ninf, pinf, mx, mn
        # No NaN here, so max/min finite means every element is finite.
        if mx == _INF:
            pinf = int(_cnz(np.equal(v, _INF, out=mask)))
        if mn == -_INF:
            ninf = int(_cnz(np.equal(v, -_INF, out=mask)))
        neg, zero = _np_signs(v, m, mx, mn, float_zero=True)
    else:
        imx = _maxr(v)
        imn = _minr(v)
        neg, zero = _np_signs(v, m, imx, imn, float_zero=False)
        mx = float(imx)
        mn = float(imn)
    if sums:
        lane_view = np.frombuffer(lanes, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, squares past float64: IEEE results
            if kind <= _BF16:
                ext = _np_bf16_outside(c, mx, mn) if kind == _BF16 else None
                _np_half_sums(v, phase, lane_view, ext)
            else:
                _np_lane_sums(v, phase & (LANES - 1), lane_view)
    return neg, zero, nan, ninf, pinf, mx, mn


class _Accumulator:
    """Running statistics over the 1-D contiguous blocks of one tensor, in storage order."""

    __slots__ = (
        "_hash",
        "_kind",
        "_lanes",
        "_size",
        "direct",
        "has_nan",
        "kind",
        "mn",
        "mx",
        "n",
        "nan",
        "neg",
        "ninf",
        "pinf",
        "zero",
    )

    def __init__(self, dtype: np.dtype, md5: bool, *, bf16: bool = False) -> None:
        """``bf16``: ``dtype`` is uint16 holding bfloat16 bit patterns."""
        kind = dtype.kind
        if bf16 or _is_bfloat16(dtype):
            self.kind = _BF16
        elif kind in "fiu":
            # a float of another width (long double) is converted to float64 block by block
            self.kind = _KIND_OF.get((kind, dtype.itemsize), _F64 if kind == "f" else None)
        elif kind in "bc":
            self.kind = None
        else:
            raise TypeError(f"statistics are not defined for dtype {dtype.str!r}")
        if self.kind is None and kind not in "bc":
            raise TypeError(f"statistics are not defined for dtype {dtype.str!r}")
        self._kind = kind
        self._size = dtype.itemsize
        # blocks of these bytes go to the kernel as they are (no numpy array, no conversion)
        # (bool too: its True count is the count of bytes that are not zero, see _add_bools)
        self.direct = kind == "b" or (
            self.kind is not None and dtype.isnative and (kind != "f" or dtype.itemsize <= 8)
        )
        self._hash = hashlib.md5() if md5 else None
        self._lanes = bytearray(_STATE * 8)
        self.n = self.neg = self.zero = self.nan = self.ninf = self.pinf = 0
        self.has_nan = False
        self.mx = -math.inf
        self.mn = math.inf

    def update(self, c: np.ndarray) -> None:
        """Fold in one 1-D C-contiguous block (at most BLOCK_ELEMS elements)."""
        m = c.shape[0]
        if m == 0:
            return
        if self._hash is not None:
            self._hash.update(c)
        kind = self._kind
        if kind == "c":
            self.n += m
            return
        if not c.dtype.isnative:
            c = c.astype(c.dtype.newbyteorder("="))
        if kind == "b":
            self.n += m
            self.neg += int(_cnz(c))  # bool: the True count, kept in `neg` (see result)
            return
        if self.kind == _BF16:
            c = c.view(np.uint16)
        elif c.dtype.itemsize != self._size or (kind == "f" and self._size > 8):
            c = c.astype(np.float64)
        self._fold(c, m)

    def update_bytes(self, buf: memoryview, m: int) -> None:
        """Fold in ``m`` elements given as raw bytes; only when ``direct``."""
        if self._hash is not None:
            self._hash.update(buf)
        if self._kind == "b":
            self._add_bools(buf, m)
        elif _kernel is None:
            self._fold(np.frombuffer(buf, _NATIVE[self.kind], m), m)
        else:
            self._fold(buf, m)

    def update_mapped(self, fd: int, offset: int, m: int) -> None:
        """Fold in ``m`` elements read from bytes ``offset..`` of the open file ``fd`` through a mapping
        (the C kernel's ``mapped``; only when ``direct`` and not hashing). EOFError: the file shrank."""
        if self._kind == "b":
            zero = _kernel.mapped(fd, offset, m, _U8, 0, self._lanes)[1]
            self.n += m
            self.neg += m - zero
            return
        phase = self.n & (HALF_BLOCK - 1)
        tallies = _kernel.mapped(fd, offset, m * self._size, self.kind, phase, self._lanes)
        self.n += m
        self._add(*tallies)

    def _add_bools(self, buf, m: int) -> None:
        """bool, as bytes: the True count (kept in ``neg``) is the count of bytes that are not 0, as numpy
        counts them; the C kernel counts zero bytes as uint8 (its sums in the lanes go unused)."""
        self.n += m
        if _kernel is None:
            self.neg += int(_cnz(np.frombuffer(buf, np.uint8, m)))
        else:
            self.neg += m - _kernel.block(buf, _U8, 0, self._lanes)[1]

    def _fold(self, c, m: int) -> None:
        phase = self.n & (HALF_BLOCK - 1)
        self.n += m
        if _kernel is not None:
            self._add(*_kernel.block(c, self.kind, phase, self._lanes))
        else:
            self._add(*_np_block(c, self.kind, phase, self._lanes, not self.has_nan))

    def _add(self, neg: int, zero: int, nan: int, ninf: int, pinf: int, mx: float, mn: float) -> None:
        """Take in one block's tallies (max and min mean nothing once a NaN has been seen)."""
        self.ninf += ninf
        self.pinf += pinf
        self.neg += neg
        self.zero += zero
        if nan:
            self.nan += nan
            self.has_nan = True
        elif not self.has_nan:
            if mx > self.mx:
                self.mx = mx
            if mn < self.mn:
                self.mn = mn

    def result(self) -> dict[str, float | int | str | None]:
        """The STAT_VALUE_FIELDS record."""
        n = self.n
        out: dict[str, float | int | str | None] = dict.fromkeys(STAT_KEYS)
        out["count"] = n
        if self._hash is not None:
            out["md5"] = self._hash.hexdigest()
        kind = self._kind
        if kind == "c":
            return out
        if kind == "b":
            true = self.neg
            out.update(neg_count=0, pos_count=true, nan_count=0, neg_inf_count=0, pos_inf_count=0)
            out.update(zero_count=n - true, l2norm=math.sqrt(true))
            if n:
                out.update(max=1.0 if true else 0.0, min=0.0 if true < n else 1.0, avg=true / n)
            return out
        out.update(
            neg_count=self.neg,
            pos_count=n - self.neg - self.zero - self.nan,
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
        # left to right: ((lane0 + lane1) + lane2) ... + lane7 (or lane15), as the module docstring defines;
        # a half kind first adds the partials of its last, unfinished block (the C kernel's finish() does
        # the same additions, in a fraction of the time: it matters for small tensors)
        if _kernel is not None:
            s, q = _kernel.finish(self._lanes, self.kind)
        elif self.kind <= _BF16:  # written out, a loop is slower: S 0-15, Q 16-31, P 32-47, R 48-63
            ln = _unpack_lanes(self._lanes)
            s = ((ln[0] + ln[32]) + (ln[1] + ln[33]) + (ln[2] + ln[34]) + (ln[3] + ln[35])
                 + (ln[4] + ln[36]) + (ln[5] + ln[37]) + (ln[6] + ln[38]) + (ln[7] + ln[39])
                 + (ln[8] + ln[40]) + (ln[9] + ln[41]) + (ln[10] + ln[42]) + (ln[11] + ln[43])
                 + (ln[12] + ln[44]) + (ln[13] + ln[45]) + (ln[14] + ln[46]) + (ln[15] + ln[47]))  # fmt: skip
            q = ((ln[16] + ln[48]) + (ln[17] + ln[49]) + (ln[18] + ln[50]) + (ln[19] + ln[51])
                 + (ln[20] + ln[52]) + (ln[21] + ln[53]) + (ln[22] + ln[54]) + (ln[23] + ln[55])
                 + (ln[24] + ln[56]) + (ln[25] + ln[57]) + (ln[26] + ln[58]) + (ln[27] + ln[59])
                 + (ln[28] + ln[60]) + (ln[29] + ln[61]) + (ln[30] + ln[62]) + (ln[31] + ln[63]))  # fmt: skip
        else:
            ln = _unpack_lanes(self._lanes)
            s = ln[0] + ln[1] + ln[2] + ln[3] + ln[4] + ln[5] + ln[6] + ln[7]
            q = ln[16] + ln[17] + ln[18] + ln[19] + ln[20] + ln[21] + ln[22] + ln[23]
        # + 0.0 turns a -0.0 max/min into +0.0 (which zero numpy or SIMD max returns is unspecified)
        out.update(max=self.mx + 0.0, min=self.mn + 0.0, avg=s / n, l2norm=math.sqrt(q))
        return out


_unpack_lanes = struct.Struct(f"={_STATE}d").unpack
_NATIVE = {k: np.dtype(name if k != _BF16 else "uint16") for k, name in enumerate(_KINDS)}


def _is_bfloat16(dtype: np.dtype) -> bool:
    """An ``ml_dtypes.bfloat16`` array (without importing ml_dtypes)."""
    return dtype.itemsize == 2 and dtype.kind == "V" and dtype.name == "bfloat16"


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
    if type(shape) is not tuple or not all(type(d) is int for d in shape):
        shape = tuple(int(d) for d in shape)
    if shape and min(shape) < 0:
        raise ValueError(f"negative dimension in shape {shape}")
    count = math.prod(shape)
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
    _, nbytes = _nbytes(dtype, shape)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < data_offset + nbytes or nbytes == 0:
            return view_tensor(None, size, data_offset, stored_dtype, shape, fortran_order=fortran_order)
        # Map from 0: mmap offsets must be page-aligned and npy data offsets are not.
        mm = mmap.mmap(f.fileno(), data_offset + nbytes, access=mmap.ACCESS_READ)
    return view_tensor(mm, size, data_offset, stored_dtype, shape, fortran_order=fortran_order)


def view_tensor(
    mapped: mmap.mmap | None,
    file_size: int,
    data_offset: int,
    stored_dtype: str,
    shape: Sequence[int],
    *,
    fortran_order: bool = False,
) -> np.ndarray:
    """`open_tensor` over a map of the file made already (`mapped`, from byte 0; None when the file
    is empty): `Catalog.tensors` maps each file once for all the tensors it holds."""
    dtype = _check_dtype(stored_dtype)
    shape = tuple(int(d) for d in shape)
    count, nbytes = _nbytes(dtype, shape)
    order = "F" if fortran_order else "C"
    if file_size < data_offset + nbytes:
        raise TruncatedTensorError(
            f"file has {file_size} bytes, data needs {nbytes} bytes from offset {data_offset}"
        )
    if nbytes == 0:
        arr = np.empty(shape, dtype, order=order)
        arr.flags.writeable = False
        return arr
    flat = np.frombuffer(mapped, dtype=dtype, count=count, offset=data_offset)  # keeps the map alive
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
    bf16 = stored_dtype == "bfloat16"
    dtype = _BF16_BITS if bf16 else _check_dtype(stored_dtype)
    _, nbytes = _nbytes(dtype, shape)
    acc = _Accumulator(dtype, md5, bf16=bf16)
    itemsize = dtype.itemsize
    fd = os.open(path, os.O_RDONLY)
    try:
        if nbytes == 0:
            size = os.fstat(fd).st_size
            if size < data_offset:
                raise TruncatedTensorError(f"file has {size} bytes, header promises {data_offset}")
            return acc.result()
        direct = acc.direct and _kernel is not None
        if direct and not md5 and nbytes >= _MAPPED_MIN and _fold_mapped(acc, fd, data_offset, nbytes):
            return acc.result()
        # the C kernel takes any length: bigger reads, fewer Python steps (still L2-sized)
        step = _DIRECT_READ if direct else BLOCK_ELEMS * itemsize
        buf = _scratch.read
        if len(buf) < step:
            buf = bytearray(step)
        mv = memoryview(buf)
        pos = data_offset
        left = nbytes
        while left:
            want = min(left, step)
            view = mv[:want]
            got = os.preadv(fd, [view], pos)
            if got < want:
                got += _read_into(fd, view[got:], pos + got)
                if got < want:
                    raise _truncated(fd, data_offset, nbytes)
            if direct:
                acc.update_bytes(view, want // itemsize)
            else:
                acc.update(np.frombuffer(buf, dtype=dtype, count=want // itemsize))
            pos += want
            left -= want
    finally:
        os.close(fd)
    return acc.result()


def _fold_mapped(acc: _Accumulator, fd: int, data_offset: int, nbytes: int) -> bool:
    """A big tensor through the C kernel's mappings, a window at a time (at most _MAPPED_WINDOW bytes of
    the file are mapped, so the process's resident size grows by no more than that). False, with
    nothing folded, where the file cannot be mapped (some FUSE and special files): the caller reads it."""
    if not hasattr(_kernel, "mapped"):
        return False
    if os.fstat(fd).st_size < data_offset + nbytes:
        raise _truncated(fd, data_offset, nbytes)
    itemsize = acc._size
    window = _MAPPED_WINDOW - _MAPPED_WINDOW % itemsize
    pos, left = data_offset, nbytes
    while left:
        want = min(left, window)
        try:
            acc.update_mapped(fd, pos, want // itemsize)
        except EOFError:
            raise _truncated(fd, data_offset, nbytes, while_read=True) from None
        except OSError:
            if pos == data_offset:
                return False
            raise
        pos += want
        left -= want
    return True


def _truncated(fd: int, data_offset: int, nbytes: int, *, while_read: bool = False) -> TruncatedTensorError:
    size = os.fstat(fd).st_size
    when = " (it shrank while it was read)" if while_read else ""
    return TruncatedTensorError(
        f"file has {size} bytes, data needs {nbytes} bytes from offset {data_offset}{when}"
    )


def _stats_of_decoded(
    path: str, offset: int, stored_dtype: str, shape: tuple[int, ...], fmt, host_shape, md5: bool
) -> dict[str, float | int | str | None]:
    """Stats of a tensor that needs decoding first (packed or ml_dtypes elements, a device layout):
    computed on its host-layout values, so device padding (C0, fractal blocks) is never counted.
    One tensor is decoded whole; raw dumps hold one operator's tensors, bounded by device memory."""
    from ingest.formats.dtypes import numeric_view
    from ingest.formats.tensor_data import read_tensor

    arr = read_tensor(path, offset, stored_dtype, shape, fmt, host_shape, mapped=False)
    if not _is_bfloat16(arr.dtype):
        return compute_stats(numeric_view(arr), md5=md5)
    # bfloat16 keeps its own definition of the sums (16 lanes, float32 blocks), like a bfloat16 file read
    # directly; md5 stays that of the float32-widened values, as for the other decoded types
    out = compute_stats(arr)
    if md5:
        wide = numeric_view(arr)
        flat = wide.ravel(order="K") if wide.flags.c_contiguous or wide.flags.f_contiguous else wide.ravel()
        out["md5"] = hashlib.md5(np.ascontiguousarray(flat)).hexdigest()
    return out


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
    if isinstance(exc, SparseTensorError):
        return f"sparse: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _run_batch(batch: list[_JobTuple], md5: bool) -> list[_Result]:
    """One batch of jobs, every failure turned into an error reason."""
    out: list[_Result] = []
    for row_id, path, offset, stored_dtype, shape, fmt, host_shape in batch:
        try:
            if math.prod(shape) >= _SPARSE_CHECK_ELEMS:
                check_not_sparse(path, offset)
            if host_shape is not None or (stored_dtype in SPECIAL_STORED and stored_dtype != "bfloat16"):
                out.append(
                    (row_id, _stats_of_decoded(path, offset, stored_dtype, shape, fmt, host_shape, md5), None)
                )
                continue
            out.append((row_id, _stats_from_file(path, offset, stored_dtype, shape, md5), None))
        except Exception as exc:
            out.append((row_id, None, _error_reason(exc)))
    return out


def compute_stats_batch(batch: list[_JobTuple], md5: bool = False) -> list[_Result]:
    """Statistics of a few jobs in this process, as `compute_stats_many` gives them: for a caller
    that already runs in a helper (a metadata scan that has just read the files' headers)."""
    return _run_batch(batch, md5)


def _job_tuple(job: StatJob) -> tuple[_JobTuple, int]:
    """The picklable form of a job and its data size; a malformed job is left for _run_batch to report."""
    try:
        shape = tuple(int(d) for d in job.shape)
        host = None if job.host_shape is None else tuple(int(d) for d in job.host_shape)
        st = job.stored_dtype
        itemsize = (2 if st == "bfloat16" else 1) if st in SPECIAL_STORED else np.dtype(st).itemsize
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
        for results in run_ordered("ingest.statistics.kernel:_run_batch", all_batches, workers - 1, md5):
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
