"""Read only the header of an `.npy` file: stored dtype, shape and where the data starts.

Ingest touches millions of files, so this reads one small block per file and parses the header
dict with a regular expression (the exact form numpy and MindSpore's `npy_header.cc` write),
falling back to Python's literal parser for anything unusual.

It does not import numpy: the plain dtypes every dump holds (bool, ints, floats, complex, either
byte order) are read from a table, and numpy is imported only for anything else (a structured
dtype, a datetime). The helper processes that read headers during a metadata ingest then stay
~15 MiB smaller each (numpy's import), and memory bounds an ingest of millions of files.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import stat
import struct
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from ingest.formats.numbers import INT64_MAX, parse_uint

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"\x93NUMPY"
_FAST = re.compile(
    r"^\{'descr': '(?P<descr>[^']+)', 'fortran_order': (?P<fortran>False|True), "
    r"'shape': \((?P<shape>(?:[0-9]+, ?)*[0-9]*)\), \}\s*$"
)
_READ_SIZE = 512


class NpyHeaderError(ValueError):
    """The file is not a readable npy file (bad magic, garbled header, truncated data)."""


@dataclass(frozen=True, slots=True)
class NpyHeader:
    descr: object  # the header's descr: '<f4', or a list for a structured dtype
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int
    dtype_name: str  # 'float32', or the exact '>f4' form for a non-native byte order
    nbytes: int  # data bytes the header promises

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype (imports numpy)."""
        return _dtype_of_descr(self.descr) if isinstance(self.descr, str) else _descr_to_dtype(self.descr)


def _header(descr: object, shape: tuple[int, ...], fortran: bool, data_offset: int) -> NpyHeader:
    itemsize, name = _plain_dtype(descr) if isinstance(descr, str) else _numpy_dtype_info(descr)
    nbytes = itemsize
    for d in shape:
        nbytes *= d
    return NpyHeader(descr, shape, fortran, data_offset, name, nbytes)


def _plain_dtypes() -> dict[str, tuple[int, str]]:
    """descr -> (itemsize, dtype name) of the plain dtypes, as numpy names them: `dtype.name` in
    the native byte order (or none, for one byte), `dtype.str` ('>f4') in the other.
    tests/ingest/formats/test_npy_header.py checks every entry against numpy."""
    native, other = ("<", ">") if sys.byteorder == "little" else (">", "<")
    kinds = {"b": ("bool", (1,)), "i": ("int", (1, 2, 4, 8)), "u": ("uint", (1, 2, 4, 8)),
             "f": ("float", (2, 4, 8)), "c": ("complex", (8, 16))}  # fmt: skip
    table = {}
    for kind, (name, sizes) in kinds.items():
        for size in sizes:
            plain = name if kind == "b" else f"{name}{8 * size}"
            for order in ("", "=", "|", native):
                table[f"{order}{kind}{size}"] = (size, plain)
            table[f"{other}{kind}{size}"] = (size, plain if size == 1 else f"{other}{kind}{size}")
    return table


_PLAIN_DTYPES = _plain_dtypes()


# MindSpore (2.x, `mindspore/ccsrc/.../npy_header.cc`) writes bfloat16 tensors with descr '<E2': two
# bytes an element, the upper half of the float32 bit pattern (ml_dtypes' bfloat16). numpy has no
# such descr; the stored dtype is named as ingest/formats/dtypes.py names it.
_MINDSPORE_DESCRS = {"<E2": (2, "bfloat16")}


def _plain_dtype(descr: str) -> tuple[int, str]:
    """(itemsize, dtype name) of a descr string: from the table, or from numpy for the rest."""
    found = _PLAIN_DTYPES.get(descr) or _MINDSPORE_DESCRS.get(descr)
    return found if found is not None else _numpy_dtype_info(descr)


def _numpy_dtype_info(descr: object) -> tuple[int, str]:
    dtype = _dtype_of_descr(descr) if isinstance(descr, str) else _descr_to_dtype(descr)
    return dtype.itemsize, _dtype_name(dtype)


# Parsed headers by their exact bytes. A dump repeats the same few hundred headers (each
# operator's tensors have the same shape at every iteration and on every rank), so most files
# cost a dict lookup instead of a parse. Bounded: cleared when it outgrows _CACHE_MAX.
_PARSED: dict[bytes, NpyHeader] = {}
_CACHE_MAX = 65_536


@functools.lru_cache(maxsize=256)
def _dtype_of_descr(descr: str) -> np.dtype:
    """Cached: a dump holds a handful of dtypes across a million headers."""
    return _descr_to_dtype(descr)


def _descr_to_dtype(descr: object) -> np.dtype:
    import numpy as np

    if isinstance(descr, str) and descr in _MINDSPORE_DESCRS:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)

    try:
        return np.lib.format.descr_to_dtype(descr)
    except Exception as exc:
        raise NpyHeaderError(f"unknown dtype descr {descr!r}") from exc


@functools.lru_cache(maxsize=256)
def _dtype_name(dtype: np.dtype) -> str:
    """'float32' for native or byte-order-free dtypes; the exact '>f4' form otherwise, so a
    big-endian file is never read as little-endian."""
    return dtype.name if dtype.byteorder in ("=", "|") else dtype.str


def _header_span(block: bytes) -> tuple[int, int, int]:
    """(npy major version, where the header text starts, where it ends) from a file's first bytes."""
    if len(block) < 10 or not block.startswith(MAGIC):
        raise NpyHeaderError("not an npy file (bad magic)")
    major = block[6]
    if major == 1:
        return major, 10, 10 + struct.unpack_from("<H", block, 8)[0]
    if major in (2, 3):
        if len(block) < 12:
            raise NpyHeaderError("truncated npy header")
        return major, 12, 12 + struct.unpack_from("<I", block, 8)[0]
    raise NpyHeaderError(f"unsupported npy version {major}")


def parse_header_block(block: bytes) -> NpyHeader:
    """Parse the header from the first bytes of a file (must include the whole header)."""
    major, start, end = _header_span(block)
    if len(block) < end:
        raise NpyHeaderError("truncated npy header")
    key = block[:end]
    cached = _PARSED.get(key)
    if cached is not None:
        return cached
    try:
        text = block[start:end].decode("latin1" if major < 3 else "utf8")
    except UnicodeDecodeError as exc:
        raise NpyHeaderError("npy v3 header is not UTF-8") from exc
    header = _parse_header_text(text, end)
    if len(_PARSED) >= _CACHE_MAX:
        _PARSED.clear()
    _PARSED[key] = header
    return header


def _parse_header_text(text: str, end: int) -> NpyHeader:
    m = _FAST.match(text)
    if m:
        fortran = m.group("fortran") == "True"
        dims = m.group("shape").replace(" ", "")
        shape = tuple(_dim(d) for d in dims.split(",") if d)
        return _header(m.group("descr"), shape, fortran, end)
    else:
        try:
            d = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            raise NpyHeaderError("garbled npy header") from exc
        if not isinstance(d, dict) or not {"descr", "fortran_order", "shape"} <= d.keys():
            raise NpyHeaderError("npy header lacks descr/fortran_order/shape")
        descr, fortran, shape = d["descr"], bool(d["fortran_order"]), d["shape"]
        if not isinstance(shape, tuple) or not all(type(x) is int and 0 <= x <= INT64_MAX for x in shape):
            raise NpyHeaderError(f"bad shape {str(shape)[:80]} in npy header")
    return _header(descr, shape, fortran, end)


def _dim(text: str) -> int:
    value = parse_uint(text)
    if value is None:
        raise NpyHeaderError(f"shape dimension {text[:30]} is out of range")
    return value


# numpy refuses headers over 10,000 bytes by default; a corrupt length field must not make us
# allocate gigabytes. Real headers are 128 bytes, or a few KiB for shapes of thousands of dims.
MAX_HEADER_BYTES = 1 << 20


def _read_rest(fd: int, n: int) -> bytes:
    if n > MAX_HEADER_BYTES:
        raise NpyHeaderError(f"npy header length {n} bytes is implausible (corrupt file?)")
    return os.read(fd, n)


def read_npy_header(path: str | os.PathLike) -> tuple[NpyHeader, int]:
    """Return (header, file size). Raise NpyHeaderError when the file is corrupt or truncated."""
    # Non-blocking, and only a regular file is read: a FIFO put in the listing's place would
    # otherwise wait for a writer forever, /dev/zero never end (the walk leaves both out).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NpyHeaderError("not a regular file")
        block = os.read(fd, _READ_SIZE)
        if len(block) >= 12 and block.startswith(MAGIC):
            end = _header_span(block)[2]
            if end > len(block):
                block += _read_rest(fd, end - len(block))
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    header = parse_header_block(block)
    expected = header.data_offset + header.nbytes
    if size < expected:
        # (a product of thousands of dims has more digits than str(int) converts: no ValueError here)
        promised = expected if expected < 1 << 64 else "over 2**64"
        raise NpyHeaderError(f"truncated: header promises {promised} bytes, file has {size}")
    return header, size


def stored_as(header: NpyHeader, size: int) -> tuple[str, int]:
    """(stored dtype, data bytes) of a MindSpore npy file: what its header says, except for a
    float16 header over exactly twice the bytes it promises. MindSpore (2.x, CPU) runs a float32
    kernel where it has no float16 one (MatMul), leaves the node's type float16 and dumps the
    float32 device buffer under a float16 header (tests/data/ms210/lowp/README.md); numpy would read
    the first half of those bytes as float16 garbage (false NaN). Such a file is float32 data."""
    if header.dtype_name == "float16" and size - header.data_offset == 2 * header.nbytes > 0:
        return "float32", 2 * header.nbytes
    return header.dtype_name, header.nbytes


# -- many headers of one directory, read in C ------------------------------------------------------
# ingest/formats/_npy_scan.c (optional: built by `pip install` where there is a C compiler) reads the
# headers of a list of files of one directory with the GIL released: ~2 µs of CPU a file where
# read_npy_header + stored_as take ~9. It follows the two functions above rule by rule and answers
# DEFER wherever that would take more than a plain header (non-ASCII header text, a header the fast
# pattern does not match, a descr outside the table), so that a caller asks read_npy_header then.
# DUMPCAT_PURE_PYTHON_HEADERS=1 makes every caller use read_npy_header (measurements, tests).

_SCAN_DESCRS = {**_PLAIN_DTYPES, **_MINDSPORE_DESCRS}
# The stored dtype of scan_npy_headers' index i: the table's names, then float32 (stored_as's rule).
STORED_NAMES: tuple[str, ...] = (*(name for _, name in _SCAN_DESCRS.values()), "float32")
SCAN_OK, SCAN_IRREGULAR, SCAN_DEFER = 0, 1, 2


def npy_scan_extension():  # -> the extension module, or None
    """ingest/formats/_npy_scan.c (its header reader, and the tensor-name parser of npy_name), or
    None: not built, or DUMPCAT_PURE_PYTHON_HEADERS set (one switch for both)."""
    if os.environ.get("DUMPCAT_PURE_PYTHON_HEADERS", "").strip() not in ("", "0"):
        return None
    try:
        from ingest.formats import _npy_scan
    except ImportError:
        return None
    return _npy_scan


def _c_scanner():  # -> the extension module, or None
    _npy_scan = npy_scan_extension()
    if _npy_scan is None:
        return None
    if (_npy_scan.OK, _npy_scan.IRREGULAR, _npy_scan.DEFER) != (SCAN_OK, SCAN_IRREGULAR, SCAN_DEFER) or (
        _npy_scan.MAX_HEADER_BYTES,
        _npy_scan.READ_SIZE,
    ) != (MAX_HEADER_BYTES, _READ_SIZE):
        return None  # built from another version of this file: reinstall to rebuild it
    _npy_scan.table([(d.encode("ascii"), n, name == "float16") for d, (n, name) in _SCAN_DESCRS.items()])
    return _npy_scan


_npy_scan = _c_scanner()


class HeaderScan(NamedTuple):
    """What `scan_npy_headers` returns: no per-file object.

    status: bytes, one a name: SCAN_OK, SCAN_IRREGULAR (read_npy_header raises NpyHeaderError or
    OSError), SCAN_DEFER (ask read_npy_header). The rest hold the SCAN_OK files only, in order, as
    Arrow buffers: stored (int32, an index into STORED_NAMES), data_offset, nbytes (stored_as's),
    file_size (int64), shape_offsets (int32, one more than the files) and dims (int64)."""

    status: bytes
    stored: bytes
    data_offset: bytes
    nbytes: bytes
    file_size: bytes
    shape_offsets: bytes
    dims: bytes


def scan_npy_headers(dir_path: str, names: list[str]) -> HeaderScan | None:
    """The headers of `names` in `dir_path`, read in C (see HeaderScan); None when the C reader is
    not built (or DUMPCAT_PURE_PYTHON_HEADERS is set): then read_npy_header is the way."""
    if _npy_scan is None:
        return None
    return HeaderScan._make(_npy_scan.scan(dir_path, names))
