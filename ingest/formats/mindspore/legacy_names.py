"""File names of MindSpore 1.0-1.2 sync `.bin` dumps and of CANN msaccucmp conversions.

Two name families that carry tensor metadata MindSpore's own npy names
(ingest.formats.mindspore.npy_name) do not:

1. Old sync `.bin` (reference mindspore-dump-formats §3.7):
   `{kernel_name with "/" -> "--"}_{input|output}_{slot}_shape_{d0}_{d1}…_{dtype}_{format}.bin`.
   Names contain underscores, so the suffix is matched from the right, and the dtype against the
   known spellings below: the format may contain `_` (FRACTAL_Z) but a dtype never does, so
   everything after the dtype is the format.
   Scalars are written `shape_0` (§3.7); this module reads `shape_0` as the scalar shape `()`.
   A one-element-per-dim reading `(0,)` would describe an empty tensor, which has no bytes to
   dump, while a scalar file holds one element: a reader that wants to be sure can check that
   the file size is one item. `shape_0_3` and the like stay `(0, 3)`.

2. msaccucmp conversions (msprobe-cann §3.3) of a raw dump `{raw}`:
   - npy:   `{raw}.{input|output}.{idx}.{d0}x{d1}x….npy`
   - bin:   `{raw}.{input|output}.{idx}.{d0}_{d1}_….{dtype}.{FORMAT}.bin`
   - plain: `{raw}.{input|output}.{idx}.npy` (converted without a format change)
   The msnpy mode writes MindSpore's own npy naming and is not this module's business.

   Telling msaccucmp npy names from MindSpore's (`….{io}.{slot}.{FORMAT}.npy` and, from v2.4,
   `….{io}.{slot}.{FORMAT}.{dtype}.npy`), reading dot-separated fields from the right:
   - after `.{io}.{idx}` there is nothing before `.npy` -> plain;
   - there is exactly one field and it is made of digits and `x` only (`2x3x4`, a 1-D `5`) ->
     msaccucmp npy. MindSpore never puts such a field there: every format name (`kOpFormat_*`,
     §3.4) starts with a letter, and its dtype token follows a format field, making two fields;
   - anything else (a field with other letters, or two fields) -> None.
   `io` is a word and raw names end in digits, so the plain and npy readings cannot overlap.
   An empty shape field (`….output.0..npy`, what joining an empty shape gives) is read as the
   scalar shape `()`; the reference does not show msaccucmp's scalar spelling, so this is an
   inference, and it collides with nothing else.

   `{raw}` must look like a raw dump name: `{op_type}.{op_name}.{n}.{n}…` (op_name non-empty and
   possibly dotted, then at least two decimal fields: task[.stream].timestamp, so v1.2's 4-field
   names fit too), optionally ending in `.bin` (msprobe-cann §2.4), or a bare decimal mapping.csv
   name (§3.5). The raw name is returned whole; splitting it is the raw-name parser's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ingest.formats.numbers import INT32_MAX, INT64_MAX, parse_uint

# Every dtype spelling a 1.0-1.2 `.bin` name can carry, mapped to the numpy dtype name of the
# stored bytes. trans_flag=true writes `TypeIdLabel` (`kNumberType…`), trans_flag=false writes
# `TypeIdToType(t)->ToString()` (`Float16`…), §3.7. The generic `kNumberTypeInt/UInt/Float` have
# no fixed width and are left out: such a name does not parse. BFloat16 did not exist in 1.0-1.2;
# it is listed so that a later name in this form still parses (numpy name from ml_dtypes).
_NUMPY_OF_BASE = {
    "Bool": "bool",
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "UInt8": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Float16": "float16",
    "Float32": "float32",
    "Float64": "float64",
    "BFloat16": "bfloat16",
    "Complex64": "complex64",
    "Complex128": "complex128",
}
LEGACY_DTYPES: dict[str, str] = {
    **_NUMPY_OF_BASE,
    **{f"kNumberType{base}": numpy for base, numpy in _NUMPY_OF_BASE.items()},
}

_DTYPE_ALTERNATION = "|".join(re.escape(token) for token in sorted(LEGACY_DTYPES, key=len, reverse=True))
_LEGACY_BIN = re.compile(
    r"(?P<name>.+)_(?P<io>input|output)_(?P<slot>[0-9]+)_shape_(?P<shape>[0-9]+(?:_[0-9]+)*)"
    rf"_(?P<dtype>{_DTYPE_ALTERNATION})_(?P<format>[A-Za-z][A-Za-z0-9_]*)\.bin"
)


@dataclass(frozen=True, slots=True)
class LegacyBinName:
    """Fields of a MindSpore 1.0-1.2 sync `.bin` dump file name."""

    kernel_name: str  # full scope name, `--` turned back into `/`
    io: str  # 'input' | 'output'
    slot: int
    shape: tuple[int, ...]  # () for `shape_0`
    dtype_token: str  # as written: 'kNumberTypeFloat32' or 'Float16'
    stored_dtype: str  # numpy dtype name of the raw bytes
    format: str  # 'DefaultFormat', 'NC1HWC0', 'FRACTAL_Z', …


def _dims(text: str, sep: str) -> tuple[int, ...] | None:
    dims = []
    for part in text.split(sep):
        dim = parse_uint(part, INT64_MAX)
        if dim is None:
            return None
        dims.append(dim)
    return tuple(dims)


def _base_name(file_name: str) -> str:
    # Neither family can hold a '/' in its file name (sync names turn '/' into '--'), so a
    # directory part can only be a path: drop it.
    return file_name.rsplit("/", 1)[-1]


def parse_legacy_bin_name(file_name: str) -> LegacyBinName | None:
    """The fields of a 1.0-1.2 sync `.bin` name, or None when the name is not of that form."""
    match = _LEGACY_BIN.fullmatch(_base_name(file_name))
    if match is None:
        return None
    slot = parse_uint(match["slot"], INT32_MAX)
    shape = _dims(match["shape"], "_")
    if slot is None or shape is None:
        return None
    if shape == (0,):
        shape = ()
    dtype = match["dtype"]
    return LegacyBinName(
        kernel_name=match["name"].replace("--", "/"),
        io=match["io"],
        slot=slot,
        shape=shape,
        dtype_token=dtype,
        stored_dtype=LEGACY_DTYPES[dtype],
        format=match["format"],
    )


@dataclass(frozen=True, slots=True)
class ConvertedName:
    """Fields of an msaccucmp-converted tensor file name."""

    raw_name: str  # the raw dump file name the tensor came from
    io: str  # 'input' | 'output'
    slot: int
    shape: tuple[int, ...] | None  # None for 'plain'
    dtype_token: str | None  # 'bin' only, as written
    format: str | None  # 'bin' only
    kind: str  # 'npy' | 'bin' | 'plain'


_RAW_NAME = re.compile(r"[^.]+\.[^.].*?(?:\.[0-9]+){2,}(?:\.bin)?|[0-9]+")
_NPY_SHAPE = re.compile(r"(?:[0-9]+(?:x[0-9]+)*)?")
_BIN_SHAPE = re.compile(r"(?:[0-9]+(?:_[0-9]+)*)?")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_IO = ("input", "output")


def _converted(
    parts: list[str],
    n_tail: int,
    shape_text: str | None,
    sep: str,
    dtype: str | None,
    fmt: str | None,
    kind: str,
) -> ConvertedName | None:
    """Check `parts[:-n_tail]` is a raw name and `parts[-n_tail:]` starts with io, idx."""
    raw = ".".join(parts[:-n_tail])
    io, idx = parts[-n_tail], parts[-n_tail + 1]
    if io not in _IO or not _RAW_NAME.fullmatch(raw):
        return None
    slot = parse_uint(idx, INT32_MAX)
    if slot is None:
        return None
    shape: tuple[int, ...] | None = None
    if shape_text is not None:
        shape = _dims(shape_text, sep) if shape_text else ()
        if shape is None:
            return None
    return ConvertedName(raw, io, slot, shape, dtype, fmt, kind)


def parse_converted_name(file_name: str) -> ConvertedName | None:
    """The fields of an msaccucmp output name, or None for anything else, MindSpore's own npy
    names included (the rule is in the module docstring)."""
    name = _base_name(file_name)
    if name.endswith(".npy"):
        parts = name[:-4].split(".")
        if len(parts) >= 3 and parts[-2] in _IO:
            return _converted(parts, 2, None, "x", None, None, "plain")
        if len(parts) >= 4 and parts[-3] in _IO and _NPY_SHAPE.fullmatch(parts[-1]):
            return _converted(parts, 3, parts[-1], "x", None, None, "npy")
        return None
    if name.endswith(".bin"):
        parts = name[:-4].split(".")
        if len(parts) < 6:
            return None
        shape_text, dtype, fmt = parts[-3], parts[-2], parts[-1]
        if not (_BIN_SHAPE.fullmatch(shape_text) and _WORD.fullmatch(dtype) and _WORD.fullmatch(fmt)):
            return None
        return _converted(parts, 5, shape_text, "_", dtype, fmt, "bin")
    return None
