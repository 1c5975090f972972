"""Ascend device formats <-> host layout (ingest/formats/ascend/device_format.py).

The expected device arrays are built here element by element, with explicit index loops written from
the format definitions (msprobe-cann-formats.md §3.3 and the enum of §3.1), independently of the
module's reshape/transpose plans; one NC1HWC0 example is also spelled out literally.
"""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.formats.ascend.device_format import (
    DEVICE_FORMATS,
    DeviceFormatError,
    device_shape,
    device_to_host,
    host_format,
    host_to_device,
    needs_transform,
)


def ceil(a: int, b: int) -> int:
    return -(-a // b)


# --- expected device arrays, one element at a time, from the format definitions --------------------


def ref_nc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n_, c_, h_, w_ = x.shape
    dev = np.zeros((n_, ceil(c_, c0), h_, w_, c0), x.dtype)
    for n, c, h, w in np.ndindex(*x.shape):
        dev[n, c // c0, h, w, c % c0] = x[n, c, h, w]
    return dev


def ref_c1hwnc0(x: np.ndarray, c0: int) -> np.ndarray:
    n_, c_, h_, w_ = x.shape
    dev = np.zeros((ceil(c_, c0), h_, w_, n_, c0), x.dtype)
    for n, c, h, w in np.ndindex(*x.shape):
        dev[c // c0, h, w, n, c % c0] = x[n, c, h, w]
    return dev


def ref_fractal_z(x: np.ndarray, c0: int, ni: int = 16) -> np.ndarray:
    n_, c_, h_, w_ = x.shape
    dev = np.zeros((ceil(c_, c0) * h_ * w_, ceil(n_, ni), ni, c0), x.dtype)
    for n, c, h, w in np.ndindex(*x.shape):
        dev[(c // c0) * h_ * w_ + h * w_ + w, n // ni, n % ni, c % c0] = x[n, c, h, w]
    return dev


def ref_fractal_z_c04(x: np.ndarray) -> np.ndarray:
    n_, c_, h_, w_ = x.shape
    k_total = ceil(c_, 4) * h_ * w_ * 4
    dev = np.zeros((ceil(k_total, 16), ceil(n_, 16), 16, 16), x.dtype)
    for n, c, h, w in np.ndindex(*x.shape):
        k = (((c // 4) * h_ + h) * w_ + w) * 4 + c % 4
        dev[k // 16, n // 16, n % 16, k % 16] = x[n, c, h, w]
    return dev


def ref_ndc1hwc0(x: np.ndarray, c0: int) -> np.ndarray:
    n_, c_, d_, h_, w_ = x.shape
    dev = np.zeros((n_, d_, ceil(c_, c0), h_, w_, c0), x.dtype)
    for n, c, d, h, w in np.ndindex(*x.shape):
        dev[n, d, c // c0, h, w, c % c0] = x[n, c, d, h, w]
    return dev


def ref_fractal_z_3d(x: np.ndarray, c0: int, ni: int = 16) -> np.ndarray:
    n_, c_, d_, h_, w_ = x.shape
    c1 = ceil(c_, c0)
    dev = np.zeros((d_ * c1 * h_ * w_, ceil(n_, ni), ni, c0), x.dtype)
    for n, c, d, h, w in np.ndindex(*x.shape):
        dev[((d * c1 + c // c0) * h_ + h) * w_ + w, n // ni, n % ni, c % c0] = x[n, c, d, h, w]
    return dev


def ref_fractal_nz(x: np.ndarray, c0: int, ni: int = 16) -> np.ndarray:
    shape = x.shape if x.ndim >= 2 else (1, x.shape[0])
    rows, cols = shape[-2:]
    dev = np.zeros((*shape[:-2], ceil(cols, c0), ceil(rows, ni), ni, c0), x.dtype)
    for idx in np.ndindex(*shape):
        *b, r, c = idx
        dev[(*b, c // c0, r // ni, r % ni, c % c0)] = x.reshape(shape)[idx]
    return dev


def ref_nhwc(x: np.ndarray) -> np.ndarray:
    dev = np.zeros((x.shape[0], x.shape[2], x.shape[3], x.shape[1]), x.dtype)
    for n, c, h, w in np.ndindex(*x.shape):
        dev[n, h, w, c] = x[n, c, h, w]
    return dev


def ref_hwcn(x: np.ndarray) -> np.ndarray:
    dev = np.zeros((x.shape[2], x.shape[3], x.shape[1], x.shape[0]), x.dtype)
    for n, c, h, w in np.ndindex(*x.shape):
        dev[h, w, c, n] = x[n, c, h, w]
    return dev


def numbered(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    """1, 2, 3 ...: no element is zero, so padding (zero) and data never look alike."""
    return np.arange(1, int(np.prod(shape)) + 1).reshape(shape).astype(dtype)


# (format, host shape, c0 passed to host_to_device, expected device array builder)
HAND_CASES = [
    ("NC1HWC0", (1, 3, 2, 2), 4, lambda x: ref_nc1hwc0(x, 4)),
    ("NC1HWC0", (2, 19, 2, 3), 16, lambda x: ref_nc1hwc0(x, 16)),
    ("NC1HWC0_C04", (2, 3, 2, 2), None, lambda x: ref_nc1hwc0(x, 4)),
    ("C1HWNC0", (3, 5, 2, 2), 4, lambda x: ref_c1hwnc0(x, 4)),
    ("FRACTAL_Z", (1, 3, 2, 2), 4, lambda x: ref_fractal_z(x, 4)),
    ("FRACTAL_Z", (17, 18, 2, 1), 16, lambda x: ref_fractal_z(x, 16)),
    ("FRACTAL_Z_C04", (3, 3, 2, 3), None, ref_fractal_z_c04),
    ("FRACTAL_Z_C04", (17, 6, 2, 2), None, ref_fractal_z_c04),  # C > 4: two channel blocks
    ("NDC1HWC0", (2, 5, 2, 2, 3), 4, lambda x: ref_ndc1hwc0(x, 4)),
    ("FRACTAL_Z_3D", (3, 5, 2, 2, 1), 4, lambda x: ref_fractal_z_3d(x, 4)),
    ("FRACTAL_NZ", (5,), 16, lambda x: ref_fractal_nz(x, 16)),
    ("FRACTAL_NZ", (3, 5), 4, lambda x: ref_fractal_nz(x, 4)),
    ("FRACTAL_NZ", (2, 17, 9), 8, lambda x: ref_fractal_nz(x, 8)),
    ("FRACTAL_NZ", (2, 1, 3, 5), 4, lambda x: ref_fractal_nz(x, 4)),
    ("NHWC", (2, 3, 4, 5), None, ref_nhwc),
    ("HWCN", (2, 3, 4, 5), None, ref_hwcn),
]


@pytest.mark.parametrize(
    ("fmt", "shape", "c0", "ref"), HAND_CASES, ids=lambda v: v.__name__ if callable(v) else str(v)
)  # stable ids: pytest-xdist's workers must collect the same names
def test_hand_computed(fmt, shape, c0, ref):
    host = numbered(shape)
    want = ref(host)
    dev = host_to_device(host, fmt, c0=c0)
    assert dev.shape == want.shape == device_shape(fmt, shape, c0=c0)
    np.testing.assert_array_equal(dev, want)
    back = device_to_host(want, fmt, shape)
    assert back.flags.c_contiguous and back.dtype == host.dtype
    np.testing.assert_array_equal(back, host)


def test_nc1hwc0_literal():
    """N=1, C=3, H=W=2, C0=4 written out by hand.

    dev[0, 0, h, w, :] = (x[0,0,h,w], x[0,1,h,w], x[0,2,h,w], 0): the fourth channel is padding.
    """
    host = np.array([[[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]]], np.float16)
    want = np.array([[[[[1, 5, 9, 0], [2, 6, 10, 0]], [[3, 7, 11, 0], [4, 8, 12, 0]]]]], np.float16)
    np.testing.assert_array_equal(host_to_device(host, "NC1HWC0", c0=4), want)
    np.testing.assert_array_equal(device_to_host(want, "NC1HWC0", (1, 3, 2, 2)), host)


def test_fractal_z_literal_first_fractal():
    """N=1, C=3, H=W=1, C0=4: fractal row ni=0 is (x[0,0], x[0,1], x[0,2], 0); rows 1..15 are padding."""
    host = np.array([7, 8, 9], np.int32).reshape(1, 3, 1, 1)
    dev = host_to_device(host, "FRACTAL_Z", c0=4)
    assert dev.shape == (1, 1, 16, 4)
    assert dev[0, 0, 0].tolist() == [7, 8, 9, 0]
    assert not dev[0, 0, 1:].any()


def test_fractal_nz_literal_1d():
    """A 1-D host (c,) is the row (1, c): dev[c1, 0, 0, c0] = x[c1*C0 + c0], every other row padding."""
    host = np.arange(1, 6, dtype=np.float32)
    dev = host_to_device(host, "FRACTAL_NZ", c0=4)
    assert dev.shape == (2, 1, 16, 4)
    assert dev[0, 0, 0].tolist() == [1, 2, 3, 4] and dev[1, 0, 0].tolist() == [5, 0, 0, 0]
    assert not dev[:, :, 1:].any()


# --- round trips and padding, over many shapes -------------------------------------------------------

DTYPES = [np.float16, np.float32, np.int8, np.uint8, np.int64, ml_dtypes.bfloat16, np.float64, np.complex64]


def host_shapes(fmt: str) -> st.SearchStrategy[tuple[int, ...]]:
    d = st.integers(1, 5)
    big = st.integers(1, 40)  # N and C: exercise C % C0 != 0 and N % 16 != 0
    if fmt == "FRACTAL_NZ":
        return st.lists(st.integers(1, 40), min_size=1, max_size=4).map(tuple)
    if fmt in ("NDC1HWC0", "FRACTAL_Z_3D"):
        return st.tuples(big, big, d, d, d)
    return st.tuples(big, big, d, d)


def c0_for(fmt: str) -> st.SearchStrategy[int | None]:
    if fmt in ("FRACTAL_Z_C04", "NHWC", "HWCN"):
        return st.just(None)
    if fmt == "NC1HWC0_C04":
        return st.sampled_from([None, 4])
    return st.sampled_from([None, 4, 8, 16, 32])


@st.composite
def cases(draw):
    fmt = draw(st.sampled_from(sorted(DEVICE_FORMATS)))
    return fmt, draw(host_shapes(fmt)), draw(c0_for(fmt)), draw(st.sampled_from(DTYPES))


def unique_bits(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Distinct non-zero bit patterns (cycling only for 1-byte types), viewed as ``dtype``."""
    dt = np.dtype(dtype)
    top = min(2 ** (8 * dt.itemsize) - 1, 2**62)
    vals = np.arange(int(np.prod(shape)), dtype=np.uint64) % np.uint64(top) + np.uint64(1)
    return vals.astype(f"u{dt.itemsize}").reshape(shape).view(dt)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


@settings(max_examples=300, deadline=None)
@given(cases())
def test_round_trip_and_padding(case):
    fmt, shape, c0, dtype = case
    host = unique_bits(shape, dtype)
    dev = host_to_device(host, fmt, c0=c0)
    assert dev.shape == device_shape(fmt, shape, c0=c0)
    assert dev.dtype == host.dtype and dev.flags.c_contiguous
    # every host element lands exactly once and everything else (the padding) is zero
    assert np.count_nonzero(bits(dev)) == host.size
    back = device_to_host(dev, fmt, shape)
    if fmt in ("NHWC", "HWCN") and dev.shape == shape:
        # C == H == W (or the like): a device shape equal to original_shape means "already host layout"
        np.testing.assert_array_equal(bits(back), bits(dev))
        return
    assert back.shape == shape and back.dtype == host.dtype and back.flags.c_contiguous
    np.testing.assert_array_equal(bits(back), bits(host))
    # padding never leaks: fill it with garbage, the host tensor is unchanged
    mask = host_to_device(np.ones(shape, bool), fmt, c0=c0)
    dirty = dev.copy()
    bits(dirty)[~mask] = 0x55
    np.testing.assert_array_equal(bits(device_to_host(dirty, fmt, shape)), bits(host))


@pytest.mark.parametrize(
    ("fmt", "shape"),
    [
        ("NC1HWC0", (2, 65, 7, 9)),
        ("FRACTAL_Z", (33, 31, 7, 7)),  # big kernel: the gather-then-transpose path
        ("FRACTAL_Z", (64, 64, 5, 5)),
        ("FRACTAL_Z_3D", (32, 64, 3, 3, 3)),
        ("FRACTAL_Z_3D", (17, 20, 3, 3, 3)),
        ("HWCN", (64, 64, 3, 3)),
        ("FRACTAL_NZ", (3, 100, 130)),
        ("FRACTAL_NZ", (1,)),
        ("NDC1HWC0", (1, 33, 4, 6, 6)),
    ],
)
def test_round_trip_larger(fmt, shape):
    host = np.random.default_rng(0).standard_normal(shape).astype(np.float16)
    dev = host_to_device(host, fmt)
    np.testing.assert_array_equal(device_to_host(dev, fmt, shape), host)


def test_larger_matches_reference_loops():
    """The fast paths (two-step gather, void blocks) against the element loops on mid-size tensors."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((18, 20, 5, 5)).astype(np.float16)
    np.testing.assert_array_equal(host_to_device(x, "FRACTAL_Z"), ref_fractal_z(x, 16))
    np.testing.assert_array_equal(device_to_host(ref_fractal_z(x, 16), "FRACTAL_Z", x.shape), x)
    y = rng.standard_normal((17, 20, 3, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(device_to_host(ref_fractal_z_3d(y, 16), "FRACTAL_Z_3D", y.shape), y)
    z = rng.standard_normal((2, 40, 50)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(device_to_host(ref_fractal_nz(z, 16), "FRACTAL_NZ", z.shape), z)


def test_zero_sized():
    host = np.zeros((0, 3, 2, 2), np.float32)
    dev = host_to_device(host, "NC1HWC0")
    assert dev.shape == (0, 1, 2, 2, 16)
    assert device_to_host(dev, "NC1HWC0", (0, 3, 2, 2)).shape == (0, 3, 2, 2)


def test_input_layouts_and_readonly():
    """Non-contiguous, Fortran-ordered and read-only (np.frombuffer / mmap) device arrays."""
    host = numbered((3, 20, 4, 5))
    dev = host_to_device(host, "FRACTAL_Z")
    ro = np.frombuffer(dev.tobytes(), dev.dtype).reshape(dev.shape)
    assert not ro.flags.writeable
    np.testing.assert_array_equal(device_to_host(ro, "FRACTAL_Z", host.shape), host)
    np.testing.assert_array_equal(device_to_host(np.asfortranarray(dev), "FRACTAL_Z", host.shape), host)
    wide = np.zeros((*dev.shape[:-1], 2 * dev.shape[-1]), dev.dtype)
    wide[..., ::2] = dev
    np.testing.assert_array_equal(device_to_host(wide[..., ::2], "FRACTAL_Z", host.shape), host)


def test_c0_and_ni_read_from_the_device_shape():
    host = numbered((20, 40, 2, 2)).astype(np.int8)
    for c0 in (8, 32):
        dev = ref_fractal_z(host, c0)
        np.testing.assert_array_equal(device_to_host(dev, "FRACTAL_Z", host.shape), host)
    dev = ref_fractal_z(host, 16, ni=8)  # Ni comes from device_shape[-2] too
    np.testing.assert_array_equal(device_to_host(dev, "FRACTAL_Z", host.shape), host)
    np.testing.assert_array_equal(host_to_device(host, "FRACTAL_Z", n0=8), dev)


def test_nz_batch_axes_may_be_merged():
    host = numbered((2, 3, 17, 33))
    dev = host_to_device(host, "FRACTAL_NZ")
    assert dev.shape == (2, 3, 3, 2, 16, 16)
    merged = dev.reshape(6, 3, 2, 16, 16)
    np.testing.assert_array_equal(device_to_host(merged, "FRACTAL_NZ", host.shape), host)


def test_nhwc_hwcn_already_host():
    x = numbered((2, 3, 4, 5))
    for fmt in ("NHWC", "HWCN"):
        out = device_to_host(x, fmt, x.shape)  # device shape == original_shape: no transform
        np.testing.assert_array_equal(out, x)
        assert not needs_transform(fmt, x.shape, x.shape)
        assert host_format(fmt, x.shape, device_shape=x.shape) == fmt


def test_format_spellings():
    host = numbered((1, 3, 2, 2))
    want = host_to_device(host, "NC1HWC0")
    for spelling in (3, np.uint32(3), "FORMAT_NC1HWC0", "nc1hwc0", " NC1HWC0 "):
        np.testing.assert_array_equal(host_to_device(host, spelling), want)
        np.testing.assert_array_equal(device_to_host(want, spelling, host.shape), host)
    z = host_to_device(host, "FRACTAL_Z")
    np.testing.assert_array_equal(device_to_host(z, "FracZ", host.shape), host)
    np.testing.assert_array_equal(device_to_host(z, 4, host.shape), host)


def test_host_formats_pass_through():
    x = numbered((2, 3, 4))
    for fmt in ("ND", "NCHW", "DefaultFormat", "NCDHW", 2):
        out = device_to_host(x, fmt, (2, 12))
        assert out.shape == (2, 12)
        assert not needs_transform(fmt, x.shape, (2, 12))


# --- host_format and needs_transform ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "shape", "want"),
    [
        ("NC1HWC0", (1, 3, 2, 2), "NCHW"),
        ("FRACTAL_Z", (16, 3, 3, 3), "NCHW"),
        ("FRACTAL_Z_C04", (16, 3, 3, 3), "NCHW"),
        ("C1HWNC0", (16, 3, 3, 3), "NCHW"),
        ("NHWC", (1, 3, 2, 2), "NCHW"),
        ("HWCN", (1, 3, 2, 2), "NCHW"),
        ("FRACTAL_NZ", (4, 5), "ND"),
        ("FRACTAL_NZ", (2, 4, 5), "ND"),
        ("FRACTAL_NZ", (5,), "ND"),
        ("FRACTAL_NZ", (1, 2, 3, 4, 5), "ND"),
        ("FRACTAL_NZ", (2, 2, 4, 5), "NCHW"),  # the reference's rule: rank 4 -> NCHW
        ("NDC1HWC0", (1, 3, 2, 2, 2), "NCDHW"),
        ("FRACTAL_Z_3D", (1, 3, 2, 2, 2), "NCDHW"),
        ("ND", (3, 4), "ND"),
        ("FORMAT_NCHW", (1, 2, 3, 4), "NCHW"),
        (29, (3, 4), "ND"),
    ],
)
def test_host_format(fmt, shape, want):
    assert host_format(fmt, shape) == want


def test_needs_transform():
    assert needs_transform("NC1HWC0", (1, 1, 2, 2, 16), (1, 3, 2, 2))
    assert needs_transform("NHWC", (2, 4, 5, 3), (2, 3, 4, 5))
    assert needs_transform("FRACTAL_NZ", (2, 2, 16, 16), (17, 20))
    # nothing moves: no padding, only size-1 axes change place
    assert not needs_transform("NC1HWC0", (4, 1, 1, 1, 16), (4, 16, 1, 1))
    assert not needs_transform("FRACTAL_NZ", (1, 1, 16, 16), (16, 16))
    assert not needs_transform("ND", (3, 4), (3, 4))
    assert not needs_transform("NCHW", (1, 2, 3, 4), (1, 2, 3, 4))
    # unsupported device layouts and shapes that do not fit: the bytes are not host order
    assert needs_transform("FRACTAL_ZN_LSTM", (4, 4, 16, 16), (64, 64))
    assert needs_transform("NC1HWC0", (1, 2, 2, 2, 16), (1, 3, 2, 2))
    assert needs_transform("NC1HWC0", (1, 1, 2, 2, 16), (1, 3, 2))
    # the no-op plan really is a no-op
    x = numbered((4, 16, 1, 1))
    np.testing.assert_array_equal(device_to_host(host_to_device(x, "NC1HWC0"), "NC1HWC0", x.shape), x)


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "dev_shape", "host_shape", "words"),
    [
        ("NC1HWC0", (1, 2, 2, 2, 16), (1, 3, 2, 2), "expected device shape (1, 1, 2, 2, 16)"),
        ("NC1HWC0", (1, 1, 2, 2, 16), (1, 3, 2), "4-D"),
        ("NC1HWC0", (1, 1, 2, 2, 0), (1, 3, 2, 2), "positive"),
        ("NC1HWC0", (1, 1, 2, 16), (1, 3, 2, 2), "expected device shape"),
        ("FRACTAL_Z", (2 * 9, 1, 16, 16), (16, 16, 3, 3), "group convolution"),
        ("FRACTAL_Z", (9, 16), (16, 16, 3, 3), "rank"),
        ("FRACTAL_NZ", (2, 2, 16, 16), (40, 20), "expected device shape"),
        ("FRACTAL_NZ", (3, 2, 2, 16, 16), (2, 17, 20), "expected device shape"),
        ("FRACTAL_NZ", (2, 2, 16, 16), (), "rank >= 1"),
        ("NDC1HWC0", (1, 2, 1, 2, 2, 16), (1, 3, 2, 2), "5-D"),
        ("FRACTAL_Z_3D", (8, 1, 16, 16), (1, 3, 2, 2, 3), "expected device shape"),
        ("NHWC", (2, 4, 3, 5), (2, 3, 4, 5), "expected device shape (2, 4, 5, 3)"),
        ("HWCN", (2, 3, 4, 5, 1), (2, 3, 4, 5), "expected device shape"),
        ("FRACTAL_ZN_LSTM", (4, 4, 16, 16), (64, 64), "not supported"),
        ("C1HWNCoC0", (1, 3, 3, 16, 16, 16), (16, 16, 3, 3), "not supported"),
        ("NC1HWC0", (1, 1, 2, 2, 16), (1, -3, 2, 2), "negative"),
        ("NC1HWC0", (1, 1, 2, 2, 16), ("a", 3, 2, 2), "integers"),
        ("ND", (2, 3), (4, 5), "elements"),
    ],
)
def test_bad_shapes(fmt, dev_shape, host_shape, words):
    arr = np.zeros(dev_shape, np.float16)
    with pytest.raises(DeviceFormatError) as ei:
        device_to_host(arr, fmt, host_shape)
    msg = str(ei.value)
    assert words in msg
    assert str(ei.value.fmt) in msg and "device shape" in msg and "host shape" in msg
    assert isinstance(ei.value, ValueError)


def test_host_to_device_errors():
    with pytest.raises(DeviceFormatError, match="not a device format"):
        host_to_device(np.zeros((2, 3)), "ND")
    with pytest.raises(DeviceFormatError, match="channel block of 4"):
        host_to_device(np.zeros((1, 3, 2, 2)), "FRACTAL_Z_C04", c0=16)
    with pytest.raises(DeviceFormatError, match="4-D"):
        host_to_device(np.zeros((3, 2, 2)), "NC1HWC0")
    with pytest.raises(DeviceFormatError, match="positive"):
        device_shape("FRACTAL_Z", (1, 3, 2, 2), c0=0)


def test_error_pickles():
    """Errors cross helper-process boundaries (ingest's helper pool) intact."""
    try:
        device_to_host(np.zeros((1, 2, 2, 2, 16)), "NC1HWC0", (1, 3, 2, 2))
    except DeviceFormatError as e:
        again = pickle.loads(pickle.dumps(e))
        assert str(again) == str(e) and again.fmt == "NC1HWC0" and again.host_shape == (1, 3, 2, 2)
    else:
        pytest.fail("no error")
