"""CANN data types: the tables match the proto, and every stored dtype decodes bit-exactly."""

from __future__ import annotations

import mmap

import ml_dtypes
import numpy as np
import pytest

from ingest.formats import dtypes
from ingest.formats.ascend import dump_data_pb2 as pb
from ingest.formats.dtypes import DTypeError, decode, nbytes_of, numeric_view, stored_dtype_of
from tests.conftest import dump_of
from tests.writers.ascend_raw import bf16_bytes_by_truncation, encode

EXPECTED_STORED = {
    "DT_UNDEFINED": "raw",
    "DT_FLOAT": "float32",
    "DT_FLOAT16": "float16",
    "DT_INT8": "int8",
    "DT_UINT8": "uint8",
    "DT_INT16": "int16",
    "DT_UINT16": "uint16",
    "DT_INT32": "int32",
    "DT_INT64": "int64",
    "DT_UINT32": "uint32",
    "DT_UINT64": "uint64",
    "DT_BOOL": "bool",
    "DT_DOUBLE": "float64",
    "DT_STRING": "raw",
    "DT_DUAL_SUB_INT8": "raw",
    "DT_DUAL_SUB_UINT8": "raw",
    "DT_COMPLEX64": "complex64",
    "DT_COMPLEX128": "complex128",
    "DT_QINT8": "int8",
    "DT_QINT16": "int16",
    "DT_QINT32": "int32",
    "DT_QUINT8": "uint8",
    "DT_QUINT16": "uint16",
    "DT_RESOURCE": "int64",
    "DT_STRING_REF": "raw",
    "DT_DUAL": "raw",
    "DT_VARIANT": "raw",
    "DT_BF16": "bfloat16",
    "DT_INT4": "int4",
    "DT_UINT1": "uint1",
    "DT_INT2": "raw",
    "DT_UINT2": "raw",
    "DT_COMPLEX32": "complex32",
    "DT_HIFLOAT8": "raw",
    "DT_FLOAT8_E5M2": "float8_e5m2",
    "DT_FLOAT8_E4M3FN": "float8_e4m3fn",
    "DT_FLOAT8_E8M0": "float8_e8m0fnu",
    "DT_FLOAT6_E3M2": "raw",
    "DT_FLOAT6_E2M3": "raw",
    "DT_FLOAT4_E2M1": "raw",
    "DT_FLOAT4_E1M2": "raw",
    "DT_HIFLOAT4": "raw",
    "DT_HIFLOAT4_SCALE": "raw",
}


STEP0 = dump_of("nan_log") / "rank_0" / "Net" / "0" / "0"


def real_float32() -> np.ndarray:
    """A real MindSpore 2.10 tensor holding NaN (the Log output of the nan_log run, shape (2, 3))."""
    arr = np.load(next(STEP0.glob("Log.*.output.0.DefaultFormat.Float32.npy")))
    assert arr.dtype == np.float32 and np.isnan(arr).any()
    return arr


def real_pool() -> np.ndarray:
    """Every float32 value of step 0 of the real run, in file-name order (finite ones and NaN)."""
    arrays = [np.load(p).reshape(-1) for p in sorted(STEP0.glob("*.Float32.npy"))]
    pool = np.concatenate(arrays)
    assert pool.size >= 48 and np.isnan(pool).any() and np.isfinite(pool).any()
    return pool


def test_tables_match_the_proto():
    assert {v.number: v.name for v in pb.OutputDataType.DESCRIPTOR.values} == dtypes.DATA_TYPE_NAMES
    assert sorted(dtypes.DATA_TYPE_NAMES) == list(range(43))
    assert {v.number: v.name.removeprefix("FORMAT_") for v in pb.OutputFormat.DESCRIPTOR.values} == (
        dtypes.FORMAT_NAMES
    )
    assert dtypes.FORMAT_NAMES[3] == "NC1HWC0" and dtypes.FORMAT_NAMES[2] == "ND"
    assert dtypes.DATA_TYPE_NAMES[1] == "DT_FLOAT"
    assert dtypes.data_type_name(99) == "DT_99" and dtypes.format_name(77) == "FORMAT_77"


def test_every_data_type_has_a_stored_dtype():
    assert set(EXPECTED_STORED) == set(dtypes.DATA_TYPE_NAMES.values())
    for name, stored in EXPECTED_STORED.items():
        assert stored_dtype_of(name) == stored, name
        assert stored in dtypes.STORED_DTYPES
    assert stored_dtype_of("DT_99") == "raw"
    assert stored_dtype_of("") == "raw"


def test_nbytes_of():
    assert nbytes_of("float32", 6) == 24
    assert nbytes_of("complex128", 2) == 32
    assert nbytes_of("bfloat16", 3) == 6
    assert nbytes_of("float8_e8m0fnu", 3) == 3
    assert nbytes_of("complex32", 3) == 12
    assert nbytes_of("bool", 5) == 5
    assert [nbytes_of("int4", n) for n in (0, 1, 2, 3)] == [0, 1, 1, 2]
    assert [nbytes_of("uint1", n) for n in (0, 1, 8, 9)] == [0, 1, 1, 2]
    assert nbytes_of("raw", 10) is None
    with pytest.raises(DTypeError, match="unknown stored dtype"):
        nbytes_of("float128x", 1)
    with pytest.raises(DTypeError, match="negative"):
        nbytes_of("float32", -1)


PLAIN = ["float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16"]
PLAIN += ["uint32", "uint64", "bool", "complex64", "complex128"]


@pytest.mark.parametrize("stored", PLAIN)
def test_plain_types_are_zero_copy_views(stored):
    arr = real_pool()[:48].reshape(4, 3, 4)
    if stored == "bool":
        arr = np.isnan(arr) | (arr > 0)
    elif stored.startswith("complex"):
        arr = (arr + 1j * arr[::-1]).astype(stored)
    else:
        with np.errstate(invalid="ignore"):
            arr = np.nan_to_num(arr * 100).astype(stored)
    buf = encode(arr, stored)
    out = decode(buf, stored, arr.shape)
    assert out.dtype == np.dtype(stored) and out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()
    assert np.shares_memory(out, np.frombuffer(buf, dtype=np.uint8))
    assert numeric_view(out) is out


def test_float32_with_nan_is_bit_exact_from_a_readonly_mmap(tmp_path):
    arr = real_float32()
    path = tmp_path / "t.bin"
    path.write_bytes(b"pad!" + encode(arr, "float32"))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)[4:]
        out = decode(view, "float32", arr.shape)
        assert not out.flags.writeable
        assert out.tobytes() == arr.tobytes()
        assert np.isnan(out).sum() == np.isnan(arr).sum()
        del out, view


def test_bfloat16_matches_the_reference_widening():
    arr = real_pool()
    buf = bf16_bytes_by_truncation(arr)
    out = decode(buf, "bfloat16", arr.shape)
    assert out.dtype == ml_dtypes.bfloat16
    # reference §5.3: bf16 bits shifted into the top half of a float32
    widened = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(arr.shape)
    num = numeric_view(out)
    assert num.dtype == np.float32
    assert num.tobytes() == widened.tobytes()
    assert np.isnan(num).sum() == np.isnan(arr).sum()
    # and an ml_dtypes-encoded tensor round-trips
    assert (
        decode(encode(arr, "bfloat16"), "bfloat16", arr.shape).tobytes()
        == arr.astype(ml_dtypes.bfloat16).tobytes()
    )


@pytest.mark.parametrize(
    ("stored", "byte", "value"),
    [
        ("float8_e4m3fn", 0x38, 1.0),
        ("float8_e4m3fn", 0xC0, -2.0),
        ("float8_e4m3fn", 0x7F, np.nan),
        ("float8_e5m2", 0x3C, 1.0),
        ("float8_e5m2", 0x7C, np.inf),
        ("float8_e5m2", 0xFC, -np.inf),
        ("float8_e8m0fnu", 0x7F, 1.0),
        ("float8_e8m0fnu", 0x80, 2.0),
        ("float8_e8m0fnu", 0x7E, 0.5),
        ("float8_e8m0fnu", 0xFF, np.nan),
    ],
)
def test_float8_bit_layouts(stored, byte, value):
    out = decode(bytes([byte, byte]), stored, (2,))
    assert out.dtype.name == stored
    num = numeric_view(out)
    assert num.dtype == np.float32
    np.testing.assert_array_equal(num, np.array([value, value], dtype=np.float32))


@pytest.mark.parametrize("stored", ["float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"])
def test_float8_round_trip_of_a_real_tensor(stored):
    pool = real_pool()
    arr = np.abs(np.nan_to_num(pool)) + 0.25 if stored == "float8_e8m0fnu" else pool
    expected = arr.astype(getattr(ml_dtypes, stored))
    out = decode(encode(arr, stored), stored, arr.shape)
    assert out.tobytes() == expected.tobytes()


def test_int4_low_nibble_first_and_signed():
    # -1 -> 0xF (low), 7 -> 0x7 (high): 0x7F; -8 -> 0x8 then a zero pad nibble: 0x08
    assert encode(np.array([-1, 7, -8]), "int4") == bytes([0x7F, 0x08])
    out = decode(bytes([0x7F, 0x08]), "int4", (3,))
    assert out.dtype == np.int8
    assert out.tolist() == [-1, 7, -8]
    assert decode(bytes([0x98]), "int4", (2,)).tolist() == [-8, -7]


@pytest.mark.parametrize("count", [1, 2, 7, 15, 16, 101])
def test_int4_round_trip_odd_and_even_counts(count):
    rng = np.random.default_rng(count)
    arr = rng.integers(-8, 8, size=count).astype(np.int8)
    buf = encode(arr, "int4")
    assert len(buf) == nbytes_of("int4", count)
    np.testing.assert_array_equal(decode(buf, "int4", (count,)), arr)
    if count % 2 == 0 and count >= 4:
        shaped = decode(buf, "int4", (2, count // 2))
        np.testing.assert_array_equal(shaped, arr.reshape(2, count // 2))


def test_uint1_most_significant_bit_first():
    bits = np.array([1, 0, 0, 0, 0, 0, 0, 1, 1])
    assert encode(bits, "uint1") == bytes([0x81, 0x80])
    out = decode(bytes([0x81, 0x80]), "uint1", (3, 3))
    assert out.dtype == np.uint8
    assert out.reshape(-1).tolist() == bits.tolist()
    # and the same as msaccucmp's np.unpackbits reading
    assert np.unpackbits(np.frombuffer(bytes([0x81, 0x80]), np.uint8))[:9].tolist() == bits.tolist()


def test_uint1_round_trip_of_a_real_mask():
    mask = np.isnan(real_pool()).astype(np.uint8)
    out = decode(encode(mask, "uint1"), "uint1", mask.shape)
    np.testing.assert_array_equal(out, mask)


def test_complex32_is_float16_pairs():
    buf = np.array([1.5, -2.0, np.inf, 0.25], dtype="<f2").tobytes()
    out = decode(buf, "complex32", (2,))
    assert out.dtype == np.complex64
    assert out.tolist() == [complex(1.5, -2.0), complex(np.inf, 0.25)]
    arr = real_pool().astype(np.float16).astype(np.float32)
    cplx = (arr + 1j * arr[::-1]).astype(np.complex64)
    back = decode(encode(cplx, "complex32"), "complex32", cplx.shape)
    assert back.tobytes() == cplx.tobytes()


def test_raw_is_uint8_bytes_whatever_the_shape():
    buf = bytes(range(7))
    out = decode(buf, "raw", (100, 100))
    assert out.dtype == np.uint8 and out.shape == (7,)
    assert out.tobytes() == buf


def test_scalar_and_empty_shapes():
    assert decode(encode(np.float32(2.5), "float32"), "float32", ()).item() == 2.5
    assert decode(b"", "float32", (0, 4)).shape == (0, 4)
    assert decode(b"", "int4", (0,)).shape == (0,)


def test_decode_accepts_uint8_arrays_and_bytearrays():
    arr = np.arange(4, dtype=np.int32)
    raw = np.frombuffer(encode(arr, "int32"), dtype=np.uint8)
    np.testing.assert_array_equal(decode(raw, "int32", (4,)), arr)
    np.testing.assert_array_equal(decode(bytearray(raw.tobytes()), "int32", (2, 2)), arr.reshape(2, 2))


@pytest.mark.parametrize(
    ("buf", "stored", "shape", "message"),
    [
        (b"\0" * 20, "float32", (2, 3), r"shape \(2, 3\) of float32 needs 24 bytes, the buffer holds 20"),
        (b"\0" * 28, "float32", (2, 3), "needs 24 bytes"),
        (b"\0" * 3, "int4", (7,), "needs 4 bytes"),
        (b"\0" * 4, "float32", (-1,), "non-negative"),
        (b"\0" * 4, "nosuch", (1,), "unknown stored dtype"),
        (12345, "float32", (1,), "not a contiguous bytes-like buffer"),
    ],
)
def test_decode_errors(buf, stored, shape, message):
    with pytest.raises(DTypeError, match=message):
        decode(buf, stored, shape)


def test_numeric_view_widens_any_ml_dtype():
    assert numeric_view(np.ones(2, ml_dtypes.int4)).dtype == np.int8
    assert numeric_view(np.ones(2, ml_dtypes.uint1)).dtype == np.uint8
    assert numeric_view(np.ones(2, ml_dtypes.float4_e2m1fn)).dtype == np.float32
    assert numeric_view(np.ones(2, ml_dtypes.complex32)).dtype == np.complex64
