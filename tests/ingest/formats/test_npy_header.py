"""npy headers are read without touching data, and corrupt files are reported, not crashed on."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ingest.formats.npy_header import NpyHeaderError, read_npy_header
from tests.conftest import SAMPLES


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array(3.5, dtype=np.float64),
        np.zeros((0, 4), dtype=np.int32),
        np.array([True, False]),
        np.ones((2, 1, 3, 3), dtype=np.float16),
        np.arange(5, dtype=np.int64),
        np.array([1 + 2j], dtype=np.complex64),
    ],
)
def test_header_matches_numpy(tmp_path, array):
    path = tmp_path / "t.npy"
    np.save(path, array)
    header, size = read_npy_header(path)
    assert header.dtype == array.dtype
    assert header.shape == array.shape
    assert size == path.stat().st_size
    assert header.data_offset + header.nbytes == size
    assert header.data_offset % 64 == 0


def test_header_v2_large(tmp_path):
    path = tmp_path / "big_header.npy"
    arr = np.zeros((3,), dtype=[(f"f{i}", "<f4") for i in range(3000)])  # header > 65535 bytes
    np.save(path, arr)
    header, _ = read_npy_header(path)
    assert header.shape == (3,) and header.dtype == arr.dtype


def test_real_sample_headers():
    files = sorted(SAMPLES.glob("simple/dump/rank_0/Net/0/0/*.npy"))
    assert files
    for f in files:
        header, _ = read_npy_header(f)
        loaded = np.load(f, mmap_mode="r")
        assert (header.dtype, header.shape) == (loaded.dtype, loaded.shape)


def test_truncated_data(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.arange(100, dtype=np.float32))
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(NpyHeaderError, match="truncated"):
        read_npy_header(path)


def _v1(header: bytes) -> bytes:
    """An npy v1.0 preamble for this header text (padded to 64 bytes, as numpy writes it)."""
    text = header + b" " * (-(len(header) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "bad magic"),
        (b"not numpy at all", "bad magic"),
        (b"\x93NUMPY\x01\x00\xff\x00{'descr'", "truncated npy header"),
        (b"\x93NUMPY\x01\x00\x10\x00{'descr': garbage", "garbled"),
        (b"\x93NUMPY\x09\x00\x10\x00" + b" " * 16, "unsupported npy version"),
        (b"\x93NUMPY\x02\x00\xf0\xff\xff\xff{", "implausible"),  # a 4 GiB header is never read
        (b"\x93NUMPY\x01\x00\x40\x00" + b"(" * 64, "garbled"),
        (b"\x93NUMPY\x02\x00\x00\x00\x02\x00" + b"[" * 65000 + b"]" * 65000 + b" " * 1072, "garbled"),
        (
            _v1(b"{'descr': '<f4', 'fortran_order': False, 'shape': (" + b"9" * 5000 + b",), }"),
            "out of range",
        ),
        (_v1(b"{'descr': '<f4', 'fortran_order': False, 'shape': (True,), }"), "bad shape"),
        (_v1(b"{'descr': '<f4', 'fortran_order': False, 'shape': (, ), }"), "garbled"),
        (b"\x93NUMPY\x03\x00\x10\x00\x00\x00{'descr': '\xff'}   ", "not UTF-8"),
        # a product of 20,000 dims: more digits than str(int) converts, still the reader's own error
        (_v1(b"{'descr': '<f4', 'fortran_order': False, 'shape': (" + b"2," * 20000 + b"), }"), "truncated"),
    ],
)
def test_corrupt_headers(tmp_path, content, reason):
    path = tmp_path / "bad.npy"
    path.write_bytes(content)
    with pytest.raises(NpyHeaderError, match=reason):
        read_npy_header(path)


def test_mindspore_bfloat16_descr_is_read_as_bfloat16(tmp_path):
    """MindSpore 2.x writes bfloat16 with descr '<E2' (numpy has no such descr): two bytes an
    element, the upper half of float32 (tests/data/ms210/lowp holds real ones)."""
    values = np.array([1.5, -np.inf, np.nan, 3.0e38], dtype=np.float32)
    raw = (values.view(np.uint32) >> 16).astype("<u2")
    header = "{'descr': '<E2', 'fortran_order': False, 'shape': (4,), }"
    header = header + " " * (64 - 10 - len(header) - 1) + "\n"
    path = tmp_path / "bf16.npy"
    prefix = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
    path.write_bytes(prefix + header.encode() + raw.tobytes())
    header, size = read_npy_header(path)
    assert (header.dtype_name, header.shape, header.nbytes) == ("bfloat16", (4,), 8)
    assert header.dtype == np.dtype(ml_dtypes.bfloat16) and size == header.data_offset + 8


def test_big_endian_keeps_its_byte_order(tmp_path):
    path = tmp_path / "be.npy"
    np.save(path, np.arange(4, dtype=">f4"))
    header, _ = read_npy_header(path)
    assert header.dtype_name == ">f4"
    np.save(path, np.arange(4, dtype="<f4"))
    assert read_npy_header(path)[0].dtype_name == "float32"


def test_plain_dtype_table_names_what_numpy_names():
    """The table that reads plain descrs without numpy gives numpy's itemsize and name for every
    entry (both byte orders, with and without an order character)."""
    from ingest.formats.npy_header import _PLAIN_DTYPES, _dtype_name

    assert len(_PLAIN_DTYPES) == 70
    for descr, (itemsize, name) in _PLAIN_DTYPES.items():
        dtype = np.lib.format.descr_to_dtype(descr)
        assert (itemsize, name) == (dtype.itemsize, _dtype_name(dtype)), descr


@pytest.mark.parametrize("descr", ["<f4", ">f4", "|b1", "<i8", ">u2", "<c16", "<M8[ns]", "<U3", ">f2"])
def test_headers_of_plain_and_other_dtypes(tmp_path, descr):
    """Plain dtypes come from the table, others (datetime, unicode) from numpy: the same header."""
    path = tmp_path / "t.npy"
    array = np.zeros((2, 3), dtype=np.dtype(descr))
    np.save(path, array)
    header, size = read_npy_header(path)
    assert header.dtype == array.dtype and header.shape == (2, 3)
    assert header.nbytes == array.nbytes and header.data_offset + header.nbytes == size
    assert header.dtype_name == (array.dtype.name if array.dtype.isnative else array.dtype.str)
