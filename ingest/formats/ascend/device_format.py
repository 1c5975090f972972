"""Ascend device-format tensors to their host layout and back, in pure numpy.

Why: CANN raw dumps, and MindSpore dumps taken with ``trans_flag=false``, store a tensor in the layout
the AI Core computes in (NC1HWC0, FRACTAL_Z, FRACTAL_NZ ...), padded up to whole C0 channel blocks and
16-row fractal blocks. The header's ``original_shape`` is the host shape. Statistics and comparisons
must run on the host tensor with the padding cropped, or the padding zeros skew min, mean and the zero
count, and element-wise comparison against a GPU/CPU dump pairs the wrong elements.

Every transform here is: reshape the device array into its named axes, transpose them into host order,
merge each (outer block, inner block) pair of axes into one host axis and crop it to the host size. The
copy goes straight into the C-contiguous result, with no Python loop over elements and no intermediate
padded copy: one ``np.copyto`` per piece, and a cropped axis has at most two pieces (its whole blocks
and its last, partial block).

Index formulas, device index -> host index (reference: msprobe-cann-formats.md §3.3, and the format
definitions of the proto enum in §3.1). ``C0`` is the device's last axis (16 for 2-byte types, 32 for
int8, 4 for the C04 formats ...), ``Ni`` (= N0, 16) the one before it in the fractal formats;
``C1 = ceil(C / C0)``, ``No = ceil(N / Ni)``. Device positions whose host index falls outside the host
shape are padding: zero when written, dropped when read.

- NC1HWC0, NC1HWC0_C04 ``(N, C1, H, W, C0)``: ``[n, c1, h, w, c0] -> NCHW[n, c1*C0 + c0, h, w]``
- C1HWNC0 ``(C1, H, W, N, C0)``: ``[c1, h, w, n, c0] -> NCHW[n, c1*C0 + c0, h, w]``
- FRACTAL_Z ``(C1*H*W, No, Ni, C0)``: ``[(c1*H + h)*W + w, no, ni, c0] -> NCHW[no*Ni + ni, c1*C0 + c0, h, w]``
- FRACTAL_Z_C04 ``(K1, No, Ni, K0)``, K0 = 16: the reduction axis ``k = ((c1*H + h)*W + w)*4 + c4``
  (C1 = ceil(C/4)) is cut into K0-wide blocks:
  ``[k // K0, no, ni, k % K0] -> NCHW[no*Ni + ni, c1*4 + c4, h, w]``
- NDC1HWC0 ``(N, D, C1, H, W, C0)``: ``[n, d, c1, h, w, c0] -> NCDHW[n, c1*C0 + c0, d, h, w]``
- FRACTAL_Z_3D ``(D*C1*H*W, No, Ni, C0)``: ``[((d*C1 + c1)*H + h)*W + w, no, ni, c0]
  -> NCDHW[no*Ni + ni, c1*C0 + c0, d, h, w]``
- FRACTAL_NZ ``(*B, C1, No, Ni, C0)`` for an ND host ``(*B, n, c)`` (a 1-D host ``(c,)`` is ``(1, c)``):
  ``[*b, c1, no, ni, c0] -> ND[*b, no*Ni + ni, c1*C0 + c0]``
- NHWC ``(N, H, W, C)``: ``[n, h, w, c] -> NCHW[n, c, h, w]``;
  HWCN ``(H, W, C, N)``: ``[h, w, c, n] -> NCHW[n, c, h, w]``.
  When the device shape already equals ``original_shape`` the tensor is in its own (host) layout.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ingest.formats.dtypes import FORMAT_NAMES, format_name

__all__ = [
    "DEVICE_FORMATS",
    "DeviceFormatError",
    "device_shape",
    "device_to_host",
    "host_format",
    "host_to_device",
    "needs_transform",
]

DEVICE_FORMATS: frozenset[str] = frozenset(
    {
        "NC1HWC0",
        "NC1HWC0_C04",
        "FRACTAL_Z",
        "FRACTAL_Z_C04",
        "FRACTAL_NZ",
        "NDC1HWC0",
        "FRACTAL_Z_3D",
        "C1HWNC0",
        "NHWC",
        "HWCN",
    }
)

_KNOWN: dict[str, str] = {name.upper(): name for name in FORMAT_NAMES.values()}
_KNOWN["DEFAULTFORMAT"] = "DefaultFormat"  # MindSpore kOpFormat_DEFAULT
_ALIASES = {"FRACZ": "FRACTAL_Z", "FRAC_Z": "FRACTAL_Z", "FRAC_NZ": "FRACTAL_NZ"}  # older kOpFormat spellings

# Padded / blocked device layouts this module cannot convert: their data is not in host order, so a
# caller must not treat it as such (needs_transform says True, device_to_host raises).
_UNSUPPORTED_DEVICE = frozenset(
    {
        "NC1C0HWPAD",
        "NHWC1C0",
        "FRACTAL_DECONV",
        "FRACTAL_DECONV_TRANSPOSE",
        "FRACTAL_DECONV_SP_STRIDE_TRANS",
        "FRACTAL_DECONV_SP_STRIDE8_TRANS",
        "NC1KHKWHWC0",
        "C1HWNCoC0",
        "FRACTAL_ZZ",
        "FRACTAL_Z_3D_TRANSPOSE",
        "FRACTAL_ZN_LSTM",
        "FRACTAL_Z_G",
        "ND_RNN_BIAS",
        "FRACTAL_ZN_RNN",
        "FRACTAL_Z_WINO",
        "C1HWC0",
    }
)

_NCHW_FAMILY = frozenset({"NC1HWC0", "NC1HWC0_C04", "FRACTAL_Z", "FRACTAL_Z_C04", "C1HWNC0", "NHWC", "HWCN"})
_NCDHW_FAMILY = frozenset({"NDC1HWC0", "FRACTAL_Z_3D"})
_CUBE = 16  # Ni / N0 and the FRACTAL_Z_C04 reduction block K0
_C04 = 4  # the channel block of the *_C04 formats


class DeviceFormatError(ValueError):
    """A device tensor that cannot be brought to its host layout (or a host tensor to a device one).

    Carries the format, both shapes and the reason, so a catalog row can record why a tensor was left
    in device layout instead of silently storing statistics over padding.
    """

    def __init__(self, fmt: object, device_shape: object = None, host_shape: object = None, why: str = ""):
        self.fmt = fmt
        self.device_shape = device_shape
        self.host_shape = host_shape
        self.why = why
        super().__init__(
            f"{fmt}: cannot convert between device shape {_fmt_shape(device_shape)} "
            f"and host shape {_fmt_shape(host_shape)}: {why}"
        )

    def __reduce__(self) -> tuple:  # picklable across helper processes despite the custom __init__
        return (type(self), (self.fmt, self.device_shape, self.host_shape, self.why))


def _fmt_shape(shape: object) -> str:
    if shape is None:
        return "?"
    try:
        return "(" + ", ".join(str(int(d)) for d in shape) + ")"  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return repr(shape)


def _canon(fmt: str | int) -> str:
    """Canonical format name: ``FORMAT_`` prefix and case dropped, enum numbers and old aliases mapped."""
    if isinstance(fmt, (int, np.integer)) and not isinstance(fmt, bool):
        return format_name(int(fmt))
    s = str(fmt).strip()
    u = s.upper()
    if u.startswith("FORMAT_"):
        u = u[len("FORMAT_") :]
    u = _ALIASES.get(u, u)
    return _KNOWN.get(u, s)


def _shape(shape: object, fmt: str, what: str, other: object = None) -> tuple[int, ...]:
    """A shape as a tuple of non-negative Python ints (protobuf gives uint64 lists, npy tuples ...).

    ``what`` is "device" or "host"; ``other`` is the other shape, for the error message.
    """

    def fail(why: str) -> DeviceFormatError:
        return (
            DeviceFormatError(fmt, shape, other, why)
            if what == "device"
            else DeviceFormatError(fmt, other, shape, why)
        )

    try:
        dims = tuple(int(d) for d in shape)  # type: ignore[union-attr]
    except (TypeError, ValueError) as e:
        raise fail(f"the {what} shape is not a sequence of integers") from e
    if any(d < 0 for d in dims):
        raise fail(f"negative dimension in the {what} shape")
    return dims


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class _Plan:
    """One reshape -> transpose -> merge-and-crop step between a device and a host shape.

    ``view``: the device array's named axes; ``perm``: their host order; ``groups``: how many consecutive
    transposed axes merge into each host axis (2 = an outer block axis and an inner one); ``host``: the
    cropped host shape (each merged axis is at most outer*inner long; the rest is padding).
    """

    view: tuple[int, ...]
    perm: tuple[int, ...]
    groups: tuple[int, ...]
    host: tuple[int, ...]

    @cached_property
    def tshape(self) -> tuple[int, ...]:
        return tuple(self.view[p] for p in self.perm)

    @cached_property
    def padded(self) -> tuple[int, ...]:
        ts, out, i = self.tshape, [], 0
        for g in self.groups:
            out.append(math.prod(ts[i : i + g]))
            i += g
        return tuple(out)

    def is_identity(self) -> bool:
        """True when no padding is cropped and the transpose only moves size-1 axes: a pure reshape."""
        if self.padded != self.host:
            return False
        order = [p for p in self.perm if self.view[p] != 1]
        return order == sorted(order)

    @cached_property
    def pieces(self) -> tuple[tuple[tuple[slice, ...], tuple[slice, ...], tuple[tuple[int, ...], ...]], ...]:
        """(slices of the transposed view, slices of the host array, host-axis splits) per piece.

        A merged host axis of size h over (outer o, inner i) axes has whole blocks ``[0, h // i)`` and,
        if ``h % i``, one partial block; pieces are the cartesian product over the host axes.
        """
        per_axis = []
        ts, t = self.tshape, 0
        for g, h in zip(self.groups, self.host, strict=True):
            if g == 1:
                per_axis.append([((slice(None),), slice(None), (h,))])
            else:
                inner = ts[t + 1]
                full, tail = divmod(h, inner)
                opts = []
                if full:
                    opts.append(((slice(0, full), slice(None)), slice(0, full * inner), (full, inner)))
                if tail:
                    opts.append(((slice(full, full + 1), slice(0, tail)), slice(full * inner, h), (1, tail)))
                per_axis.append(opts)
            t += g
        return tuple(
            (
                tuple(s for piece in combo for s in piece[0]),
                tuple(piece[1] for piece in combo),
                tuple(piece[2] for piece in combo),
            )
            for combo in itertools.product(*per_axis)
        )


def _split(a: np.ndarray, splits: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """View of ``a`` with axis k split into ``splits[k]`` (one or two sizes); never a copy."""
    shape = tuple(d for sp in splits for d in sp)
    try:
        return a.reshape(shape, copy=False)  # numpy >= 2.1: raises instead of copying
    except TypeError:  # older numpy: build the strides by hand
        strides: list[int] = []
        for stride, sp in zip(a.strides, splits, strict=True):
            strides += [stride] if len(sp) == 1 else [stride * sp[1], stride]
        return as_strided(a, shape, tuple(strides))


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``, moving a last axis contiguous on both sides as one wide void element.

    numpy iterates in the destination's order, so its inner loop is the last axis; when that is a C0
    run contiguous in both arrays (FRACTAL_NZ) this makes the inner loop the next axis and each
    element a block memcpy (~1.6x faster).
    """
    item = dst.itemsize
    if (
        dst.ndim > 1
        and dst.size > 0
        and dst.shape[-1] > 1
        and dst.strides[-1] == item
        and src.strides[-1] == item
        and not dst.dtype.hasobject
    ):
        wide = np.dtype((np.void, item * dst.shape[-1]))
        dst, src = dst.view(wide)[..., 0], src.view(wide)[..., 0]
    np.copyto(dst, src)


_TWO_STEP_RUN = 16  # destination elements in a row that read the source at a large stride ...
_TWO_STEP_STRIDE = 2048  # ... a multiple of this many bytes: L1 sets alias, lines get evicted


def _reorder_first(plan: _Plan, v: np.ndarray) -> np.ndarray | None:
    """For weights with big kernels (FRACTAL_Z 7x7, FRACTAL_Z_3D 3x3x3 ...): gather the C0 runs in
    host order first, then transpose small (kernel x C0) blocks in cache. Returns the host-ordered view
    of that gathered copy, or None when the direct copy is the faster one (measured: 3x for a
    3x3x3 FRACTAL_Z_3D, 2.8x for a 7x7 FRACTAL_Z; 0.7x for a 3x3 FRACTAL_Z, hence the thresholds).
    """
    last = len(plan.view) - 1
    pos = plan.perm.index(last)
    trailing = [p for p in plan.perm[pos + 1 :] if plan.view[p] > 1]
    if not trailing or math.prod(plan.view[p] for p in trailing) <= _TWO_STEP_RUN:
        return None
    if v.strides[trailing[-1]] % _TWO_STEP_STRIDE:
        return None
    perm_a = plan.perm[:pos] + plan.perm[pos + 1 :] + (last,)
    tmp = np.empty([plan.view[p] for p in perm_a], dtype=v.dtype)
    _copy(tmp, v.transpose(perm_a))
    return tmp.transpose((*range(pos), last, *range(pos, last)))


def _to_host(plan: _Plan, a: np.ndarray) -> np.ndarray:
    if plan.is_identity():
        return np.ascontiguousarray(a).reshape(plan.host)
    v = a.reshape(plan.view)
    t = _reorder_first(plan, v)
    if t is None:
        t = v.transpose(plan.perm)
    out = np.empty(plan.host, dtype=a.dtype)
    for tsl, hsl, splits in plan.pieces:
        _copy(_split(out[hsl], splits), t[tsl])
    return out


def _to_device(plan: _Plan, h: np.ndarray) -> np.ndarray:
    dev = np.zeros(plan.view, dtype=h.dtype)  # zeros: the padding
    t = dev.transpose(plan.perm)
    for tsl, hsl, splits in plan.pieces:
        _copy(t[tsl], _split(h[hsl], splits))
    return dev


@dataclass(frozen=True)
class _Layout:
    device: tuple[int, ...]
    stages: tuple[_Plan, ...]  # device -> host order; empty: no transform


def _layout(fmt: str, host: tuple[int, ...], c0: int, ni: int, dev: object = None) -> _Layout:
    """Device shape and transform steps of ``fmt`` for ``host`` with the given C0 and Ni."""

    def fail(why: str) -> DeviceFormatError:
        return DeviceFormatError(fmt, dev, host, why)

    if c0 <= 0 or ni <= 0:
        raise fail(f"C0 ({c0}) and Ni ({ni}) must be positive")
    if fmt in _NCHW_FAMILY and len(host) != 4:
        raise fail(f"{fmt} needs a 4-D NCHW original shape, got rank {len(host)}")
    if fmt in _NCDHW_FAMILY and len(host) != 5:
        raise fail(f"{fmt} needs a 5-D NCDHW original shape, got rank {len(host)}")
    nchw4 = (1, 2, 1, 1)
    if fmt in ("NC1HWC0", "NC1HWC0_C04"):
        n, c, h, w = host
        c1 = _ceil(c, c0)
        return _Layout((n, c1, h, w, c0), (_Plan((n, c1, h, w, c0), (0, 1, 4, 2, 3), nchw4, host),))
    if fmt == "C1HWNC0":
        n, c, h, w = host
        c1 = _ceil(c, c0)
        return _Layout((c1, h, w, n, c0), (_Plan((c1, h, w, n, c0), (3, 0, 4, 1, 2), nchw4, host),))
    if fmt == "FRACTAL_Z":
        n, c, h, w = host
        c1, no = _ceil(c, c0), _ceil(n, ni)
        view = (c1, h, w, no, ni, c0)
        return _Layout((c1 * h * w, no, ni, c0), (_Plan(view, (3, 4, 0, 5, 1, 2), (2, 2, 1, 1), host),))
    if fmt == "FRACTAL_Z_C04":
        n, c, h, w = host
        c1, no = _ceil(c, _C04), _ceil(n, ni)
        k = c1 * h * w * _C04
        k1 = _ceil(k, c0)  # here c0 is the fractal's K0 (device_shape[-1]), the channel block is 4
        fractal = _Plan((k1, no, ni, c0), (1, 2, 0, 3), (2, 2), (n, k))
        channels = _Plan((n, c1, h, w, _C04), (0, 1, 4, 2, 3), nchw4, host)
        return _Layout((k1, no, ni, c0), (fractal, channels))
    if fmt == "NDC1HWC0":
        n, c, d, h, w = host
        c1 = _ceil(c, c0)
        view = (n, d, c1, h, w, c0)
        return _Layout(view, (_Plan(view, (0, 2, 5, 1, 3, 4), (1, 2, 1, 1, 1), host),))
    if fmt == "FRACTAL_Z_3D":
        n, c, d, h, w = host
        c1, no = _ceil(c, c0), _ceil(n, ni)
        view = (d, c1, h, w, no, ni, c0)
        plan = _Plan(view, (4, 5, 1, 6, 0, 2, 3), (2, 2, 1, 1, 1), host)
        return _Layout((d * c1 * h * w, no, ni, c0), (plan,))
    if fmt == "FRACTAL_NZ":
        if len(host) == 0:
            raise fail("FRACTAL_NZ needs an original shape of rank >= 1")
        batch = host[:-2]
        rows, cols = (1, host[0]) if len(host) == 1 else host[-2:]
        b = math.prod(batch)
        c1, no = _ceil(cols, c0), _ceil(rows, ni)
        plan = _Plan((b, c1, no, ni, c0), (0, 2, 3, 1, 4), (1, 2, 2), (b, rows, cols))
        return _Layout((*batch, c1, no, ni, c0), (plan,))
    if fmt == "NHWC":
        n, c, h, w = host
        return _Layout((n, h, w, c), (_Plan((n, h, w, c), (0, 3, 1, 2), (1, 1, 1, 1), host),))
    if fmt == "HWCN":
        n, c, h, w = host
        return _Layout((h, w, c, n), (_Plan((h, w, c, n), (3, 2, 0, 1), (1, 1, 1, 1), host),))
    if fmt in _UNSUPPORTED_DEVICE:
        raise fail(f"device format {fmt} is not supported")
    raise fail(f"{fmt} is not a device format this module converts (one of {sorted(DEVICE_FORMATS)})")


@functools.lru_cache(maxsize=1024)
def _device_layout(fmt: str, dev: tuple[int, ...], host: tuple[int, ...]) -> _Layout:
    """The layout a dumped device shape implies (C0, Ni read from it), checked against ``host``."""

    def fail(why: str) -> DeviceFormatError:
        return DeviceFormatError(fmt, dev, host, why)

    if fmt in ("NHWC", "HWCN") and dev == host:
        return _Layout(dev, ())  # already the layout original_shape describes
    if fmt in _UNSUPPORTED_DEVICE or fmt not in DEVICE_FORMATS:
        return _layout(fmt, host, 1, 1, dev)  # raises with the reason
    fractal = fmt in ("FRACTAL_Z", "FRACTAL_Z_C04", "FRACTAL_Z_3D", "FRACTAL_NZ")
    min_rank = 4 if fractal else 1
    if len(dev) < min_rank:
        raise fail(f"device rank {len(dev)} is too small for {fmt}")
    c0 = dev[-1] if fmt not in ("NHWC", "HWCN") else 1
    ni = dev[-2] if fractal else 1
    if c0 <= 0 or ni <= 0:
        raise fail(f"the block axes must be positive (C0={c0}, Ni={ni})")
    lay = _layout(fmt, host, c0, ni, dev)
    want = lay.device
    if fmt == "FRACTAL_NZ":
        # Batch axes may be dumped merged or split: only their product has to agree.
        ok = dev[-4:] == want[-4:] and math.prod(dev[:-4]) == math.prod(want[:-4])
    else:
        ok = dev == want
    if not ok:
        why = f"expected device shape {_fmt_shape(want)} for C0={c0}"
        if fractal:
            why += f", Ni={ni}"
        if fmt == "FRACTAL_Z":
            why += " (a group convolution weight, sub_format > 1, is not supported)"
        raise fail(why)
    return lay


def _as_bits(a: np.ndarray) -> tuple[np.ndarray, np.dtype | None]:
    """View as the unsigned integer of the same width: numpy's fastest copy loops, for any dtype
    (ml_dtypes bfloat16 and float8 included). Returns the view and the dtype to view back to."""
    dt = a.dtype
    if dt.hasobject or dt.itemsize not in (1, 2, 4, 8) or dt.kind == "u":
        return a, None
    return a.view(np.dtype(f"u{dt.itemsize}")), dt


def host_format(
    fmt: str | int, host_shape: Sequence[int], *, device_shape: Sequence[int] | None = None
) -> str:
    """The host layout ``device_to_host`` yields, by the msaccucmp rule on ``len(original_shape)``.

    4 -> NCHW, 2 or 3 -> ND, 5 for NDC1HWC0 / FRACTAL_Z_3D -> NCDHW, any other FRACTAL_NZ rank -> ND;
    otherwise the format is kept. NHWC / HWCN whose ``device_shape`` equals ``host_shape`` stay as they
    are (no transform happens); without ``device_shape`` the rule alone answers.
    """
    f = _canon(fmt)
    if f not in DEVICE_FORMATS:
        return f
    rank = len(tuple(host_shape))
    if (
        f in ("NHWC", "HWCN")
        and device_shape is not None
        and tuple(int(d) for d in device_shape) == tuple(int(d) for d in host_shape)
    ):
        return f
    if rank == 4:
        return "NCHW"
    if rank in (2, 3) or f == "FRACTAL_NZ":
        return "ND"
    if rank == 5 and f in _NCDHW_FAMILY:
        return "NCDHW"
    return f


def needs_transform(fmt: str | int, device_shape: Sequence[int], host_shape: Sequence[int]) -> bool:
    """Whether the dumped bytes are not already the host tensor in C order.

    False for host formats (ND, NCHW, NCDHW, DefaultFormat ...), for a device shape equal to the host
    shape, and when the transform is a pure reshape (no padding, only size-1 axes move). True for a
    device format whose shapes do not fit or that is unsupported: ``device_to_host`` then says why.
    """
    f = _canon(fmt)
    if f not in DEVICE_FORMATS:
        return f in _UNSUPPORTED_DEVICE
    try:
        dev = _shape(device_shape, f, "device", host_shape)
        host = _shape(host_shape, f, "host", device_shape)
        if dev == host:
            return False
        lay = _device_layout(f, dev, host)
    except DeviceFormatError:
        return True
    return not all(p.is_identity() for p in lay.stages)


def device_shape(
    fmt: str | int, host_shape: Sequence[int], *, c0: int | None = None, n0: int | None = None
) -> tuple[int, ...]:
    """The device shape ``host_to_device`` produces for ``host_shape``.

    ``c0`` is the channel block C0 (default 16; 4 for NC1HWC0_C04; FRACTAL_Z_C04 always uses 4, its
    last axis is the 16-wide fractal block); ``n0`` is Ni/N0 of the fractal formats (default 16).
    """
    f = _canon(fmt)
    host = _shape(host_shape, f, "host")
    return _host_layout(f, host, c0, n0).device


def _host_layout(f: str, host: tuple[int, ...], c0: int | None, n0: int | None) -> _Layout:
    if f == "FRACTAL_Z_C04":
        if c0 not in (None, _C04):
            raise DeviceFormatError(f, None, host, f"FRACTAL_Z_C04 has a channel block of 4, not c0={c0}")
        cc0 = _CUBE
    elif f == "NC1HWC0_C04":
        cc0 = _C04 if c0 is None else int(c0)
    else:
        cc0 = _CUBE if c0 is None else int(c0)
    return _layout(f, host, cc0, _CUBE if n0 is None else int(n0))


def device_to_host(arr: np.ndarray, fmt: str | int, host_shape: Sequence[int]) -> np.ndarray:
    """The host tensor (C-contiguous, padding cropped) of a device tensor given in its dumped shape.

    C0 is read from ``arr.shape[-1]`` and Ni from ``arr.shape[-2]`` (fractal formats); every other axis
    is checked against ``host_shape`` (the header's ``original_shape``). Host formats pass through.
    When nothing moves (see ``needs_transform``) the result may be a reshaped view of ``arr``, read-only
    if ``arr`` is. Raises DeviceFormatError when the shapes do not fit the format.
    """
    a = np.asarray(arr)
    f = _canon(fmt)
    host = _shape(host_shape, f, "host", a.shape)
    if f not in DEVICE_FORMATS and f not in _UNSUPPORTED_DEVICE:
        if a.size != math.prod(host):
            raise DeviceFormatError(f, a.shape, host, f"{a.size} elements do not fill the host shape")
        return np.ascontiguousarray(a).reshape(host)
    lay = _device_layout(f, a.shape, host)
    x, back = _as_bits(a)
    for plan in lay.stages:
        x = _to_host(plan, x)
    x = np.ascontiguousarray(x).reshape(host)
    return x if back is None else x.view(back)


def host_to_device(
    arr: np.ndarray, fmt: str | int, *, c0: int | None = None, n0: int | None = None
) -> np.ndarray:
    """The device tensor (zero padded, C-contiguous) of a host tensor: the forward transform.

    For test writers and round trips. ``arr`` is in the host layout of ``host_format`` (NCHW, NCDHW, ND);
    ``c0`` and ``n0`` as in ``device_shape``.
    """
    h = np.asarray(arr)
    f = _canon(fmt)
    if f not in DEVICE_FORMATS:
        raise DeviceFormatError(f, None, h.shape, f"{f} is not a device format this module converts")
    lay = _host_layout(f, h.shape, c0, n0)
    x, back = _as_bits(h)
    for plan in reversed(lay.stages):
        x = _to_device(plan, np.ascontiguousarray(x).reshape(plan.host))
    x = np.ascontiguousarray(x).reshape(lay.device)
    return x if back is None else x.view(back)
