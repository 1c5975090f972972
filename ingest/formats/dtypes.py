"""CANN raw-dump data types and formats, and how their elements are laid out on disk.

The numbering is `toolkit.dumpdata.OutputDataType` / `OutputFormat` (the proto numbering, see
ingest/formats/ascend/dump_data.proto), NOT GE's `ge::DataType` used by the TLV "nano" format, whose
numbers differ (reference msprobe-cann-formats.md §3.1 "two numbering schemes").

The catalog records a *stored dtype* per tensor: a short string naming how the bytes on disk
decode to elements. It is a plain numpy name where numpy has the type, an `ml_dtypes` name for
the narrow floats, and three packed/paired encodings numpy has no dtype for (`int4`, `uint1`,
`complex32`). Anything whose encoding the reference does not pin down is `raw`: its bytes come
back as uint8, so an unknown type can never be read as silently wrong numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np

# Index = OutputDataType number. 0..31: the vendored toolkit.dumpdata proto; 32..40: msaccucmp's
# `DD` class (newer CANN proto); 41, 42: msaicerr's map (mindspore-dump-formats.md §5.1).
DATA_TYPE_NAMES: dict[int, str] = {
    0: "DT_UNDEFINED",
    1: "DT_FLOAT",
    2: "DT_FLOAT16",
    3: "DT_INT8",
    4: "DT_UINT8",
    5: "DT_INT16",
    6: "DT_UINT16",
    7: "DT_INT32",
    8: "DT_INT64",
    9: "DT_UINT32",
    10: "DT_UINT64",
    11: "DT_BOOL",
    12: "DT_DOUBLE",
    13: "DT_STRING",
    14: "DT_DUAL_SUB_INT8",
    15: "DT_DUAL_SUB_UINT8",
    16: "DT_COMPLEX64",
    17: "DT_COMPLEX128",
    18: "DT_QINT8",
    19: "DT_QINT16",
    20: "DT_QINT32",
    21: "DT_QUINT8",
    22: "DT_QUINT16",
    23: "DT_RESOURCE",
    24: "DT_STRING_REF",
    25: "DT_DUAL",
    26: "DT_VARIANT",
    27: "DT_BF16",
    28: "DT_INT4",
    29: "DT_UINT1",
    30: "DT_INT2",
    31: "DT_UINT2",
    32: "DT_COMPLEX32",
    33: "DT_HIFLOAT8",
    34: "DT_FLOAT8_E5M2",
    35: "DT_FLOAT8_E4M3FN",
    36: "DT_FLOAT8_E8M0",
    37: "DT_FLOAT6_E3M2",
    38: "DT_FLOAT6_E2M3",
    39: "DT_FLOAT4_E2M1",
    40: "DT_FLOAT4_E1M2",
    41: "DT_HIFLOAT4",
    42: "DT_HIFLOAT4_SCALE",
}
DATA_TYPE_NUMBERS: dict[str, int] = {name: number for number, name in DATA_TYPE_NAMES.items()}

# Index = OutputFormat number (the `FORMAT_` prefix dropped), reference msprobe-cann-formats.md §3.1.
FORMAT_NAMES: dict[int, str] = {
    0: "NCHW",
    1: "NHWC",
    2: "ND",
    3: "NC1HWC0",
    4: "FRACTAL_Z",
    5: "NC1C0HWPAD",
    6: "NHWC1C0",
    7: "FSR_NCHW",
    8: "FRACTAL_DECONV",
    9: "C1HWNC0",
    10: "FRACTAL_DECONV_TRANSPOSE",
    11: "FRACTAL_DECONV_SP_STRIDE_TRANS",
    12: "NC1HWC0_C04",
    13: "FRACTAL_Z_C04",
    14: "CHWN",
    15: "FRACTAL_DECONV_SP_STRIDE8_TRANS",
    16: "HWCN",
    17: "NC1KHKWHWC0",
    18: "BN_WEIGHT",
    19: "FILTER_HWCK",
    20: "HASHTABLE_LOOKUP_LOOKUPS",
    21: "HASHTABLE_LOOKUP_KEYS",
    22: "HASHTABLE_LOOKUP_VALUE",
    23: "HASHTABLE_LOOKUP_OUTPUT",
    24: "HASHTABLE_LOOKUP_HITS",
    25: "C1HWNCoC0",
    26: "MD",
    27: "NDHWC",
    28: "FRACTAL_ZZ",
    29: "FRACTAL_NZ",
    30: "NCDHW",
    31: "DHWCN",
    32: "NDC1HWC0",
    33: "FRACTAL_Z_3D",
    34: "CN",
    35: "NC",
    36: "DHWNC",
    37: "FRACTAL_Z_3D_TRANSPOSE",
    38: "FRACTAL_ZN_LSTM",
    39: "FRACTAL_Z_G",
    40: "RESERVED",
    41: "ALL",
    42: "NULL",
    43: "ND_RNN_BIAS",
    44: "FRACTAL_ZN_RNN",
    45: "YUV",
    46: "YUV_A",
    47: "NCL",
    48: "FRACTAL_Z_WINO",
    49: "C1HWC0",
    0xFF: "MAX",
}
FORMAT_NUMBERS: dict[str, int] = {name: number for number, name in FORMAT_NAMES.items()}


class DTypeError(ValueError):
    """A buffer does not fit the stored dtype and shape it is decoded with, or the dtype is unknown."""


def data_type_name(number: int) -> str:
    """'DT_FLOAT16' for 2; 'DT_<number>' for a number this table does not know (a newer CANN)."""
    return DATA_TYPE_NAMES.get(number, f"DT_{number}")


def format_name(number: int) -> str:
    """'NC1HWC0' for 3; 'FORMAT_<number>' for a number this table does not know."""
    return FORMAT_NAMES.get(number, f"FORMAT_{number}")


# Plain numpy types: msaccucmp's DATA_TYPE_TO_DTYPE_MAP (reference §3.1). The quantised types hold
# plain integers of their width; DT_RESOURCE is a 64-bit handle (msaccucmp maps it to int64).
_PLAIN = {
    "DT_FLOAT": "float32",
    "DT_FLOAT16": "float16",
    "DT_DOUBLE": "float64",
    "DT_INT8": "int8",
    "DT_INT16": "int16",
    "DT_INT32": "int32",
    "DT_INT64": "int64",
    "DT_UINT8": "uint8",
    "DT_UINT16": "uint16",
    "DT_UINT32": "uint32",
    "DT_UINT64": "uint64",
    "DT_BOOL": "bool",
    "DT_COMPLEX64": "complex64",
    "DT_COMPLEX128": "complex128",
    "DT_QINT8": "int8",
    "DT_QINT16": "int16",
    "DT_QINT32": "int32",
    "DT_QUINT8": "uint8",
    "DT_QUINT16": "uint16",
    "DT_RESOURCE": "int64",
}
# One element per byte (or two for bf16), exactly the ml_dtypes encodings: bf16 is the top half of
# an IEEE float32; FLOAT8_E5M2 / E4M3FN are the OCP FP8 types; FLOAT8_E8M0 is the OCP MX scale
# (exponent only, bias 127, 0xFF = NaN), ml_dtypes' float8_e8m0fnu.
_ML = {
    "DT_BF16": "bfloat16",
    "DT_FLOAT8_E5M2": "float8_e5m2",
    "DT_FLOAT8_E4M3FN": "float8_e4m3fn",
    "DT_FLOAT8_E8M0": "float8_e8m0fnu",
}
# ml_dtypes types torch can save (.pt) that no CANN DT_* names
_TORCH_ONLY_ML = ("float8_e4m3fnuz", "float8_e5m2fnuz")
_ML_DTYPES = {name: np.dtype(getattr(ml_dtypes, name)) for name in (*_ML.values(), *_TORCH_ONLY_ML)}
_SPECIAL = {"DT_INT4": "int4", "DT_UINT1": "uint1", "DT_COMPLEX32": "complex32"}

STORED_DTYPES: frozenset[str] = frozenset(
    [*_PLAIN.values(), *_ML.values(), *_TORCH_ONLY_ML, *_SPECIAL.values(), "raw"]
)


def stored_dtype_of(dt_name: str) -> str:
    """How the elements of a tensor of type `dt_name` ('DT_FLOAT16') are encoded on disk.

    - plain numpy names for the IEEE, integer, bool and complex types; DT_QINT*/DT_QUINT* hold
      plain integers of their width; DT_RESOURCE is read as int64 (as msaccucmp does);
    - 'bfloat16', 'float8_e5m2', 'float8_e4m3fn', 'float8_e8m0fnu': the ml_dtypes types, whose bit
      layouts are those of DT_BF16 and the OCP FP8 / MX-scale types DT_FLOAT8_*;
    - 'int4': DT_INT4, two signed nibbles per byte, LOW nibble first (CANN `SplitInt8ToInt4x2`);
    - 'uint1': DT_UINT1, eight bits per byte, most significant bit first: msaccucmp reads it with
      `np.unpackbits`, whose default bit order is 'big';
    - 'complex32': DT_COMPLEX32, (real, imag) pairs of float16, decoded to complex64;
    - 'raw' for everything else: strings and variants (no fixed element size), the DT_DUAL* types
      (two sub-tensors in one buffer), DT_UNDEFINED, DT_HIFLOAT8 and DT_HIFLOAT4* (Huawei encodings
      with no reference decoder), the float6/float4 types and DT_INT2/DT_UINT2 (their packing in a
      dump file is not in the reference), and numbers this table does not know.
    """
    return _PLAIN.get(dt_name) or _ML.get(dt_name) or _SPECIAL.get(dt_name) or "raw"


def _itemsize(stored: str) -> int:
    if stored in _ML_DTYPES:
        return _ML_DTYPES[stored].itemsize
    if stored == "complex32":
        return 4
    if stored in ("raw", "int4", "uint1") or stored not in STORED_DTYPES:
        raise DTypeError(f"unknown or packed stored dtype {stored!r}")
    return np.dtype(stored).itemsize


def nbytes_of(stored: str, count: int) -> int | None:
    """Bytes that `count` elements take on disk; None for 'raw' (the size is unknowable).

    Packed types round up to whole bytes: int4 ceil(count/2), uint1 ceil(count/8).
    """
    if count < 0:
        raise DTypeError(f"negative element count {count}")
    if stored == "raw":
        return None
    if stored == "int4":
        return (count + 1) // 2
    if stored == "uint1":
        return (count + 7) // 8
    if stored not in STORED_DTYPES:
        raise DTypeError(f"unknown stored dtype {stored!r}")
    return _itemsize(stored) * count


def _check_shape(shape: Sequence[int]) -> int:
    for dim in shape:
        if not isinstance(dim, (int, np.integer)) or dim < 0:
            raise DTypeError(f"bad shape {tuple(shape)!r}: dims must be non-negative integers")
    return math.prod(int(d) for d in shape)


def _as_uint8(buf: object) -> np.ndarray:
    """A zero-copy uint8 view of any bytes-like object (bytes, memoryview of an mmap, ndarray)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1:
            buf = buf.reshape(-1).view(np.uint8)
        return buf
    try:
        return np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"not a contiguous bytes-like buffer: {type(buf).__name__}") from exc


def decode(buf: object, stored: str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode the on-disk bytes of one tensor into an array of `shape`.

    Plain and ml_dtypes types are zero-copy views of `buf` (read-only if `buf` is); the packed
    types are unpacked into new arrays: int4 -> int8, uint1 -> uint8 of 0/1, complex32 ->
    complex64. 'raw' ignores `shape` and returns the bytes as a 1-D uint8 view. Multi-byte
    elements are little-endian, as every Ascend host writes them. `buf` must hold exactly the
    bytes `nbytes_of` asks for: a longer or shorter buffer means the header and data disagree.
    'bool' is a view too: a byte other than 0 or 1 reads as True, as numpy treats it.
    """
    data = _as_uint8(buf)
    if stored == "raw":
        return data
    count = _check_shape(shape)
    need = nbytes_of(stored, count)
    if need != data.size:
        raise DTypeError(
            f"shape {tuple(shape)!r} of {stored} needs {need} bytes, the buffer holds {data.size}"
        )
    shape = tuple(int(d) for d in shape)
    if stored == "int4":
        nibbles = np.empty(2 * data.size, dtype=np.int8)
        nibbles[0::2] = data & 0x0F
        nibbles[1::2] = data >> 4
        nibbles[nibbles >= 8] -= 16
        return nibbles[:count].reshape(shape)
    if stored == "uint1":
        return np.unpackbits(data, count=count).reshape(shape)
    if stored == "complex32":
        halves = np.frombuffer(data, dtype="<f2").astype(np.float32)
        out = np.empty(count, dtype=np.complex64)
        out.real = halves[0::2]
        out.imag = halves[1::2]
        return out.reshape(shape)
    dtype = _ML_DTYPES[stored] if stored in _ML_DTYPES else np.dtype(stored).newbyteorder("<")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def numeric_view(arr: np.ndarray) -> np.ndarray:
    """`arr` itself, or a widened copy if its dtype comes from ml_dtypes, for statistics.

    numpy's reductions on bfloat16 / float8 arrays are slow and accumulate in the narrow type;
    float32 holds every value of those types exactly (NaN and inf included). ml_dtypes' sub-byte
    integers and complex types (should a caller build them) widen to int8 / uint8 / complex64.
    """
    dtype = arr.dtype
    if dtype.type.__module__.split(".")[0] != "ml_dtypes":
        return arr
    if "complex" in dtype.name:
        return arr.astype(np.complex64)
    try:
        ml_dtypes.finfo(dtype)
        return arr.astype(np.float32)
    except (TypeError, ValueError):
        pass
    try:
        return arr.astype(np.int8 if ml_dtypes.iinfo(dtype).min < 0 else np.uint8)
    except (TypeError, ValueError):
        return arr.astype(np.float32)
