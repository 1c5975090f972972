"""PostgreSQL values on the wire, vectorized over Arrow: type OIDs, DataRow and COPY payloads in
text and binary format, and Bind parameters decoded to Python values for DuckDB.

Why vectorized: the server streams results of up to millions of rows, and one Python call per value
(the old `pgwire.encode_rows`) costs tens of microseconds per row of the `stats` view. Here each
column becomes a few *parts* (constant bytes, fixed-width big-endian values, or variable-length
bytes: offsets into one buffer), computed with numpy and pyarrow kernels, and the rows are laid out
chunk by chunk in a padded matrix (one slot per part, as wide as its longest value in the chunk)
that one boolean-mask copy turns into the concatenated messages. Python runs per value only for the
rare types (numeric, intervals, structs, maps, out-of-range dates). Pure: no sockets, no DuckDB.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import math
import re
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# -- type OIDs ---------------------------------------------------------------------------------

BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, UNKNOWN, BPCHAR, VARCHAR = 114, 142, 700, 701, 705, 1042, 1043
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
NUMERIC, UUID, JSONB = 1700, 2950, 3802
ARRAY_OF = {
    BOOL: 1000, BYTEA: 1001, CHAR: 1002, NAME: 1003, INT2: 1005, INT4: 1007, TEXT: 1009, BPCHAR: 1014,
    VARCHAR: 1015, INT8: 1016, FLOAT4: 1021, FLOAT8: 1022, OID: 1028, TIMESTAMP: 1115, DATE: 1182,
    TIME: 1183, TIMESTAMPTZ: 1185, INTERVAL: 1187, NUMERIC: 1231, TIMETZ: 1270, UUID: 2951, JSON: 199,
    JSONB: 3807,
}  # fmt: skip
ELEMENT_OF = {a: e for e, a in ARRAY_OF.items()}
TYPE_NAMES = {
    BOOL: "bool", BYTEA: "bytea", NAME: "name", INT8: "int8", INT2: "int2", INT4: "int4", TEXT: "text",
    OID: "oid", JSON: "json", FLOAT4: "float4", FLOAT8: "float8", VARCHAR: "varchar", DATE: "date",
    TIME: "time", TIMESTAMP: "timestamp", TIMESTAMPTZ: "timestamptz", INTERVAL: "interval",
    NUMERIC: "numeric", UUID: "uuid", 1000: "_bool", 1001: "_bytea", 1005: "_int2", 1007: "_int4",
    1009: "_text", 1015: "_varchar", 1016: "_int8", 1021: "_float4", 1022: "_float8", 1115: "_timestamp",
    1182: "_date", 1183: "_time", 1185: "_timestamptz", 1187: "_interval", 1231: "_numeric", 2951: "_uuid",
}  # fmt: skip
TYPE_SIZES = {
    BOOL: 1, INT2: 2, INT4: 4, INT8: 8, OID: 4, FLOAT4: 4, FLOAT8: 8, DATE: 4, TIME: 8, TIMESTAMP: 8,
    TIMESTAMPTZ: 8, INTERVAL: 16, UUID: 16, NAME: 64, CHAR: 1, TIMETZ: 12,
}  # fmt: skip

_PG_EPOCH_DAYS = 10957  # 2000-01-01 - 1970-01-01
_PG_EPOCH_US = _PG_EPOCH_DAYS * 86_400_000_000
_I64_MAX, _I64_MIN = 2**63 - 1, -(2**63)
_I32_MAX, _I32_MIN = 2**31 - 1, -(2**31)
_UNIT_US = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 1}  # multiplier to microseconds (ns: divide)


def type_size(oid: int) -> int:
    """RowDescription's typlen: the byte size of a fixed-width type, -1 for variable width."""
    return TYPE_SIZES.get(oid, -1)


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _ext_name(t: pa.DataType) -> str:
    if not isinstance(t, pa.BaseExtensionType):
        return ""
    if t.extension_name == "arrow.opaque":
        return f"opaque.{getattr(t, 'type_name', '')}"
    return t.extension_name


def _is_listlike(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _scalar_oid(t: pa.DataType) -> int:
    if pa.types.is_dictionary(t):
        return _scalar_oid(t.value_type)
    ext = _ext_name(t)
    if ext == "arrow.uuid":
        return UUID
    if ext == "arrow.json":
        return JSON
    if ext in ("opaque.hugeint", "opaque.uhugeint"):
        return NUMERIC
    t = _storage(t)
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return INT2
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return INT4
    if pa.types.is_uint32(t):  # PostgreSQL's oid is an unsigned 32-bit integer
        return OID
    if pa.types.is_int64(t):
        return INT8
    if pa.types.is_uint64(t) or pa.types.is_decimal(t):
        return NUMERIC
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return FLOAT4
    if pa.types.is_float64(t):
        return FLOAT8
    if pa.types.is_timestamp(t):
        return TIMESTAMPTZ if t.tz else TIMESTAMP
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_time(t):
        return TIME
    if pa.types.is_interval(t) or pa.types.is_duration(t):
        return INTERVAL
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return BYTEA
    return TEXT


def oid_of(t: pa.DataType) -> int:
    """PostgreSQL type OID for an Arrow column type: 1-D lists of scalars are PostgreSQL arrays of
    the element's array type; nested lists, structs, maps and unions are sent as text."""
    if pa.types.is_dictionary(t):
        return oid_of(t.value_type)
    if _is_listlike(_storage(t)) and not isinstance(t, pa.BaseExtensionType):
        inner = t.value_type
        if pa.types.is_dictionary(inner):
            inner = inner.value_type
        if _is_listlike(_storage(inner)) or pa.types.is_struct(inner) or pa.types.is_map(inner):
            return TEXT
        return ARRAY_OF.get(_scalar_oid(inner), TEXT)
    return _scalar_oid(t)


# -- text of single Python values (the per-value path, kept for rare types and SHOW rows) ----

_ARRAY_QUOTE_CHARS = ',{}"\\ \t\n\r\v\f'


def _float_text(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def _array_elem(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, list):
        return "{" + ",".join(_array_elem(x) for x in v) + "}"
    s = text_value(v)
    if isinstance(v, bool | int | float) and not isinstance(v, str):
        return s
    if s == "" or s.upper() == "NULL" or any(c in s for c in _ARRAY_QUOTE_CHARS):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return s


def interval_text(months: int, days: int, micros: int) -> str:
    """An interval as PostgreSQL prints it with IntervalStyle 'postgres' (what the server reports)."""
    out: list[str] = []
    is_before = False
    years, mons = int(months / 12), months - int(months / 12) * 12  # C division: toward zero
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            out.append(f"{'+' if is_before and value > 0 else ''}{value} {unit}{'' if value == 1 else 's'}")
            is_before = value < 0
    if not out or micros:
        minus = micros < 0
        a = -micros if minus else micros
        hours, rest = divmod(a, 3_600_000_000)
        mins, rest = divmod(rest, 60_000_000)
        secs, frac = divmod(rest, 1_000_000)
        t = f"{'-' if minus else '+' if is_before else ''}{hours:02d}:{mins:02d}:{secs:02d}"
        if frac:
            t += f".{frac:06d}".rstrip("0")
        out.append(t)
    return " ".join(out)


def text_value(v: object) -> str:
    """The PostgreSQL text representation of one Python value (as Arrow's to_pylist gives it)."""
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, int | str):
        return str(v)
    if isinstance(v, pa.MonthDayNano):
        return interval_text(v.months, v.days, v.nanoseconds // 1000)
    if isinstance(v, list):
        return "{" + ",".join(_array_elem(x) for x in v) + "}"
    if isinstance(v, dt.datetime):
        s = v.isoformat(sep=" ")
        if v.tzinfo is not None and s.endswith("+00:00"):
            s = s[:-6] + "+00"
        return s
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return f"{v.days} days {v.seconds} seconds {v.microseconds} microseconds" if v.days else str(v)
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dict):
        return json.dumps(v, default=str)
    return str(v)


# -- parts: a column's bytes for every row, without a Python loop per row ---------------------


@dataclass(slots=True)
class _Const:
    """The same bytes in every row."""

    data: bytes


@dataclass(slots=True)
class _Fixed:
    """`width` bytes per row: numpy arrays written at byte offsets, cast to the given dtype
    (big-endian integers and floats, or `(k,)u1` for (n, k) byte matrices)."""

    width: int
    fields: list[tuple[int, np.ndarray, np.dtype]]


@dataclass(slots=True)
class _Var:
    """Variable-length bytes: row i is data[starts[i] : starts[i] + lens[i]]; or, when `padded` is
    set, the first lens[i] bytes of padded[i]."""

    starts: np.ndarray | None
    lens: np.ndarray
    data: np.ndarray | None = None
    padded: np.ndarray | None = None


_Part = _Const | _Fixed | _Var
_Seg = tuple[_Part, "np.ndarray | None"]  # a part and the rows it is present in (None: all)


def _and(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    return a if b is None else a & b


@dataclass(slots=True)
class _Field:
    """One column: parts concatenated per row (each present where its mask says); `valid` False
    is SQL NULL (length -1 in DataRows, the null string in COPY)."""

    n: int
    valid: np.ndarray | None
    parts: list[_Seg]
    alphabet: bytes | None = None  # every byte the text can hold, when the type tells (else None)

    def segs(self) -> list[_Seg]:
        return [(p, _and(w, self.valid)) for p, w in self.parts]

    def lengths(self) -> np.ndarray:
        total = np.zeros(self.n, np.int64)
        for p, w in self.segs():
            total += _seg_lens(p, w, self.n)
        if self.valid is not None:
            total[~self.valid] = -1
        return total


def _seg_lens(p: _Part, when: np.ndarray | None, n: int) -> np.ndarray | int:
    if isinstance(p, _Var):
        return p.lens if when is None else np.where(when, p.lens, 0)
    w = len(p.data) if isinstance(p, _Const) else p.width
    return w if when is None else np.where(when, w, 0)


def _var_of(arr: pa.Array) -> _Var:
    """The bytes of a string/binary array (any offset width) without copying its data."""
    t = arr.type
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
        t = arr.type
    bufs = arr.buffers()
    n = len(arr)
    otype = np.int64 if (pa.types.is_large_string(t) or pa.types.is_large_binary(t)) else np.int32
    if n == 0 or bufs[1] is None:
        return _Var(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(0, np.uint8))
    offs = np.frombuffer(bufs[1], otype)[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return _Var(offs[:-1], np.diff(offs), data)


def _var_from_list(items: list[bytes | None]) -> _Var:
    lens = np.fromiter((0 if b is None else len(b) for b in items), np.int64, len(items))
    starts = np.zeros(len(items), np.int64)
    if len(items) > 1:
        np.cumsum(lens[:-1], out=starts[1:])
    data = np.frombuffer(b"".join(b for b in items if b), np.uint8)
    return _Var(starts, lens, data)


def _var_to_array(v: _Var, valid: np.ndarray | None) -> pa.Array:
    """A large_string Arrow array of a _Var's rows (copied contiguous when they are not)."""
    n = len(v.lens)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(v.lens, out=offs[1:])
    if v.padded is not None or not (n == 0 or np.array_equal(v.starts, offs[:-1] + v.starts[0])):
        data = _join(_assemble(n, [(v, None)])[0])
        base = 0
    else:
        data, base = v.data, (int(v.starts[0]) if n else 0)
    data = np.ascontiguousarray(data[base : base + int(offs[-1])])
    mask = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = 0 if valid is None else int(n - valid.sum())
    return pa.Array.from_buffers(
        pa.large_string(), n, [mask, pa.py_buffer(offs), pa.py_buffer(data)], null_count=nulls
    )


# -- assembly: parts -> concatenated rows ----------------------------------------------------

_BUDGET = 1 << 22  # bytes of one chunk's padded matrix: small enough to stay in cache


@functools.lru_cache(maxsize=256)
def _prefix_rows(w: int) -> np.ndarray:
    """Rows k = 0..w of a (w + 1, w) view: row k is w - k True then k False (a read-only view)."""
    base = np.concatenate([np.ones(w, bool), np.zeros(w, bool)])
    return np.lib.stride_tricks.as_strided(base, shape=(w + 1, w), strides=(1, 1), writeable=False)


def _windows(data: np.ndarray, starts: np.ndarray, w: int) -> np.ndarray:
    """(len(starts), w) matrix of data[s : s + w] (bytes past the end are zeros)."""
    lo, hi = int(starts.min()), int(starts.max()) + w
    if hi <= len(data):
        base = data[lo:hi]
    else:
        base = np.zeros(hi - lo, np.uint8)
        if lo < len(data):
            base[: len(data) - lo] = data[lo:]
    view = np.lib.stride_tricks.as_strided(base, shape=(hi - lo - w + 1, w), strides=(1, 1), writeable=False)
    return view[starts - lo]


def _assemble(n: int, segs: list[_Seg]) -> tuple[list[np.ndarray], np.ndarray]:
    """Rows made of the segments in order: (chunks of the concatenated bytes, row end offsets
    with a leading 0). Each chunk of rows is laid out in a padded matrix, one slot per segment as
    wide as its longest value in the chunk, then compressed by a mask of the bytes present."""
    lens = [_seg_lens(p, w, n) for p, w in segs]
    totals = np.zeros(n, np.int64)
    for ln in lens:
        totals += ln
    ends = np.zeros(n + 1, np.int64)
    np.cumsum(totals, out=ends[1:])
    widest = sum(ln if isinstance(ln, int) else int(ln.max(initial=0)) for ln in lens)
    step = int(min(max(_BUDGET // max(widest, 1), 64), 1 << 16))
    chunks: list[np.ndarray] = []
    a = 0
    while a < n:
        m = min(step, n - a)
        while True:
            widths = [ln if isinstance(ln, int) else int(ln[a : a + m].max()) for ln in lens]
            if m == 1 or m * sum(widths) <= max(_BUDGET, 2 * int(ends[a + m] - ends[a])):
                break
            m = (m + 1) // 2
        chunks.append(_chunk(segs, lens, widths, a, m))
        a += m
    return chunks, ends


def _chunk(segs: list[_Seg], lens: list, widths: list[int], a: int, m: int) -> np.ndarray:
    width = sum(widths)
    if width == 0:
        return np.zeros(0, np.uint8)
    out = np.empty((m, width), np.uint8)
    names: list[str] = []
    formats: list = []
    offsets: list[int] = []
    values: list = []
    regions: list[tuple[int, int, np.ndarray]] = []
    pos = 0
    for (p, when), ln, w in zip(segs, lens, widths, strict=True):
        if w == 0:
            continue
        if isinstance(p, _Const):
            names.append(f"f{len(names)}")
            formats.append((np.uint8, (w,)))
            offsets.append(pos)
            values.append(np.frombuffer(p.data, np.uint8))
        elif isinstance(p, _Fixed):
            for off, arr, dtype in p.fields:
                names.append(f"f{len(names)}")
                formats.append(dtype)
                offsets.append(pos + off)
                values.append(arr[a : a + m])
        else:
            if p.padded is not None:
                out[:, pos : pos + w] = p.padded[a : a + m, :w]
            else:
                out[:, pos : pos + w] = _windows(p.data, p.starts[a : a + m], w)
            chunk_lens = ln[a : a + m]
            if int(chunk_lens.min()) < w:
                regions.append((pos, w, _prefix_rows(w)[w - chunk_lens]))
            pos += w
            continue
        if when is not None:
            present = when[a : a + m]
            if not present.all():
                regions.append((pos, w, np.broadcast_to(present[:, None], (m, w))))
        pos += w
    if names:
        rec = out.view(np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": width}))
        rec = rec.reshape(m)
        for name, v in zip(names, values, strict=True):
            rec[name] = v
    flat = out.reshape(-1)
    if not regions:
        return flat
    mask = np.ones((m, width), bool)
    for pos, w, region in regions:
        mask[:, pos : pos + w] = region
    return flat[mask.reshape(-1)]


def _join(chunks: list[np.ndarray]) -> bytes:
    return chunks[0].tobytes() if len(chunks) == 1 else b"".join(chunks)


# -- Arrow values as numpy --------------------------------------------------------------------


def _valid(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _prim(arr: pa.Array, dtype) -> np.ndarray:
    """The value buffer of a fixed-width array as numpy (garbage under nulls)."""
    dtype = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None or len(arr) == 0:
        return np.zeros(len(arr), dtype)
    return np.frombuffer(buf, dtype)[arr.offset : arr.offset + len(arr)]


def _bools(arr: pa.Array) -> np.ndarray:
    buf = arr.buffers()[1]
    if buf is None or len(arr) == 0:
        return np.zeros(len(arr), bool)
    bits = np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + len(arr)].view(bool)


def _fixed_matrix(arr: pa.Array, w: int) -> np.ndarray:
    buf = arr.buffers()[1]
    if buf is None or len(arr) == 0:
        return np.zeros((len(arr), w), np.uint8)
    data = np.frombuffer(buf, np.uint8)
    return data[arr.offset * w : (arr.offset + len(arr)) * w].reshape(len(arr), w)


def _hugeints(arr: pa.Array, valid: np.ndarray | None) -> list[int | None]:
    """DuckDB's HUGEINT/UHUGEINT (Arrow opaque extension, 16 little-endian bytes) as ints."""
    signed = _ext_name(arr.type) == "opaque.hugeint"
    raw = _fixed_matrix(arr.storage, 16).tobytes()
    return [
        None
        if valid is not None and not valid[i]
        else int.from_bytes(raw[16 * i : 16 * i + 16], "little", signed=signed)
        for i in range(len(arr))
    ]


def _list_layout(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(offsets relative to the returned values, values) of a list-like array."""
    t = arr.type
    n = len(arr)
    if pa.types.is_fixed_size_list(t):
        offs = (np.arange(n + 1, dtype=np.int64) + arr.offset) * t.list_size
    else:
        otype = np.int64 if pa.types.is_large_list(t) else np.int32
        offs = np.frombuffer(arr.buffers()[1], otype)[arr.offset : arr.offset + n + 1].astype(np.int64)
    start = int(offs[0]) if n else 0
    values = arr.values.slice(start, int(offs[-1]) - start if n else 0)
    return offs - start, values


def _plain(arr: pa.Array) -> pa.Array:
    """Dictionary-decoded, views cast to plain arrays, extension types other than uuid/json/
    hugeint as their storage."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return _plain(arr.dictionary_decode())
    if isinstance(t, pa.BaseExtensionType) and _ext_name(t) not in (
        "arrow.uuid",
        "opaque.hugeint",
        "opaque.uhugeint",
    ):
        return _plain(arr.storage)
    if pa.types.is_string_view(t):
        return arr.cast(pa.large_string())
    if pa.types.is_binary_view(t):
        return arr.cast(pa.large_binary())
    return arr


def _digits(mat: np.ndarray, col: int, v: np.ndarray, width: int) -> None:
    """Write v (non-negative ints) as zero-padded decimal into mat[:, col : col + width]."""
    for k in range(width - 1, -1, -1):
        v, d = np.divmod(v, 10)
        mat[:, col + k] = d + 48


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(year, month, day) of days since 1970-01-01, proleptic Gregorian (H. Hinnant's algorithm)."""
    z = days + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = np.where(mp < 10, mp + 3, mp - 9)
    y = yoe + era * 400 + (m <= 2)
    return y, m, d


def _pg_date_text(y: int, m: int, d: int) -> str:
    """A date outside years 1-9999 as PostgreSQL prints it (more digits, or BC)."""
    return f"{y:04d}-{m:02d}-{d:02d}" if y > 0 else f"{1 - y:04d}-{m:02d}-{d:02d} BC"


# -- text format ------------------------------------------------------------------------------

_NUMERIC_ELEMS = ("bool", "int", "float")


def _kind(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if _is_listlike(t):
        return "list"
    return "other"


_DIGITS = b"0123456789"
_INF = b"infinity-"


def _alphabet(t: pa.DataType) -> bytes | None:
    """The bytes the text of a type can hold (COPY needs no scan for escapes when it knows)."""
    if _ext_name(t) == "arrow.uuid":
        return b"0123456789abcdef-"
    if _ext_name(t) in ("opaque.hugeint", "opaque.uhugeint"):
        return _DIGITS + b"-"
    t = _storage(t)
    if pa.types.is_boolean(t):
        return b"tf"
    if pa.types.is_integer(t):
        return _DIGITS + b"-"
    if pa.types.is_floating(t):
        return _DIGITS + b"-+.eNaInfity"
    if pa.types.is_decimal(t):
        return _DIGITS + b"-.E+"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return b"\\x0123456789abcdef"
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        return _DIGITS + _INF + b"-+:. BC"
    return None


def _text_field(arr: pa.Array) -> _Field:
    """The PostgreSQL text of every value of a column (same text as `text_value` per value)."""
    arr = _plain(arr)
    f = _text_field_of(arr)
    f.alphabet = _alphabet(arr.type)
    return f


def _text_field_of(arr: pa.Array) -> _Field:
    t = arr.type
    n = len(arr)
    valid = _valid(arr)
    if pa.types.is_null(t):
        return _Field(n, np.zeros(n, bool), [])
    ext = _ext_name(t)
    if ext == "arrow.uuid":
        return _Field(n, valid, [(_uuid_text(_fixed_matrix(arr.storage, 16)), None)])
    if ext in ("opaque.hugeint", "opaque.uhugeint"):
        items = [None if v is None else str(v).encode() for v in _hugeints(arr, valid)]
        return _Field(n, valid, [(_var_from_list(items), None)])
    if pa.types.is_boolean(t):
        letters = np.where(_bools(arr), np.uint8(116), np.uint8(102))
        return _Field(n, valid, [(_Fixed(1, [(0, letters, np.dtype("u1"))]), None)])
    if pa.types.is_integer(t):
        return _Field(n, valid, [(_var_of(arr.cast(pa.large_string())), None)])
    if pa.types.is_floating(t):
        return _float_field(arr, valid)
    if pa.types.is_decimal(t):
        return _decimal_field(arr, valid)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _Field(n, valid, [(_var_of(arr), None)])
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _Field(n, valid, [(_Const(b"\\x"), None), (_hex(arr), None)])
    if pa.types.is_date(t):
        return _date_field(arr, valid)
    if pa.types.is_timestamp(t):
        return _timestamp_field(arr, valid)
    if pa.types.is_time(t):
        return _time_field(arr, valid)
    if t == pa.month_day_nano_interval():
        months, days, micros = _month_day_micros(arr)
        items = [
            None if valid is not None and not valid[i] else interval_text(mo, d, us).encode()
            for i, (mo, d, us) in enumerate(zip(months.tolist(), days.tolist(), micros.tolist(), strict=True))
        ]
        return _Field(n, valid, [(_var_from_list(items), None)])
    if _is_listlike(t):
        inner = _plain_type(t.value_type)
        if not (pa.types.is_struct(inner) or pa.types.is_map(inner) or pa.types.is_union(inner)):
            return _list_text(arr, valid)
    return _pylist_field(arr, valid)


def _plain_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _pylist_field(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    """Per-value text via Python (structs, maps, durations, unions, ...): the rare types."""
    items = [None if v is None else text_value(v).encode() for v in arr.to_pylist()]
    return _Field(len(arr), valid, [(_var_from_list(items), None)])


def _float_field(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    """Floats as Python's repr (shortest round trip), NaN/Infinity/-Infinity as PostgreSQL.

    Arrow's cast gives the same shortest digits but its own layout: positional for exponents
    -6..9, exponent form otherwise with one-digit exponents. Python's repr is positional for
    exponents -4..15 and adds '.0' to integral values. So: integral values in 1e-4..1e10 get a
    '.0' part; 1e-6..1e-4 are rewritten to exponent form and one-digit exponents padded by
    regular expressions over just those values; 1e10..1e16 and non-finite values per value.
    """
    n = len(arr)
    if not pa.types.is_float64(arr.type):
        arr = arr.cast(pa.float64())
    x = _prim(arr, "<f8")
    if valid is not None:
        x = np.where(valid, x, 0.0)
    text = arr.cast(pa.large_string())
    ax = np.abs(x)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(x)
        tiny = (ax < 1e-4) & (ax > 0)
        big = (ax >= 1e10) & (ax < 1e16)
        dot0 = finite & ~tiny & ~big & (ax < 1e10) & (x == np.floor(x))
    fix = tiny | big | ~finite
    if valid is not None:
        fix &= valid
        dot0 &= valid
    if fix.any():
        idx = np.flatnonzero(fix)
        sub = text.take(pa.array(idx))
        a = ax[idx]
        positional = (a >= 1e-6) & (a < 1e-4)  # Arrow: '0.0000123' -> '1.23e-05'
        if positional.any():
            part = sub.filter(pa.array(positional))
            for pattern, repl in _TINY_REWRITES:
                part = pc.replace_substring_regex(part, pattern, repl)
            sub = pc.replace_with_mask(sub, pa.array(positional), pc.replace_substring(part, ".e", "e"))
        short_exp = (a >= 9e-11) & (a < 1e-6)  # Arrow: '1.5e-7' -> '1.5e-07'
        if short_exp.any():
            part = pc.replace_substring_regex(sub.filter(pa.array(short_exp)), r"e-([1-9])$", r"e-0\1")
            sub = pc.replace_with_mask(sub, pa.array(short_exp), part)
        nonfinite = ~finite[idx]
        if nonfinite.any():
            xs = x[idx][nonfinite]
            codes = np.where(np.isnan(xs), 0, np.where(xs > 0, 1, 2))
            sub = pc.replace_with_mask(sub, pa.array(nonfinite), _NONFINITE.take(pa.array(codes)))
        bigs = big[idx]
        if bigs.any():  # 1e10..1e16: positional in Python, exponent form in Arrow; rare, per value
            texts = [repr(v) for v in x[idx][bigs].tolist()]
            sub = pc.replace_with_mask(sub, pa.array(bigs), pa.array(texts, pa.large_string()))
        text = pc.replace_with_mask(text, pa.array(fix), sub)
    parts: list[_Seg] = [(_var_of(text), None)]
    if dot0.any():
        parts.append((_Const(b".0"), dot0))
    return _Field(n, valid, parts)


_NONFINITE = pa.array(["NaN", "Infinity", "-Infinity"], pa.large_string())
_TINY_REWRITES = [  # exponent -6 then -5 ('1.e-05' for one digit: the '.' is dropped after)
    (r"^(-?)0\.00000([1-9])(\d*)$", r"\1\2.\3e-06"),
    (r"^(-?)0\.0000([1-9])(\d*)$", r"\1\2.\3e-05"),
]


def _decimal_field(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    """Decimals as str(Decimal): Arrow's cast matches it for scales up to 6; larger scales can
    print in exponent form ('0E-10'), so those go through Python."""
    if arr.type.scale <= 6 and arr.type.scale >= 0:
        return _Field(len(arr), valid, [(_var_of(arr.cast(pa.large_string())), None)])
    return _pylist_field(arr, valid)


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _hex(arr: pa.Array) -> _Var:
    """Lower-case hex of each binary value (two bytes per byte)."""
    if pa.types.is_fixed_size_binary(arr.type):
        w = arr.type.byte_width
        mat = _fixed_matrix(arr, w)
        out = np.empty((len(arr), 2 * w), np.uint8)
        out[:, 0::2] = _HEX[mat >> 4]
        out[:, 1::2] = _HEX[mat & 15]
        return _Var(None, np.full(len(arr), 2 * w, np.int64), padded=out)
    v = _var_of(arr)
    n = len(v.lens)
    if n == 0:
        return v
    lo = int(v.starts[0])
    hi = int(v.starts[-1] + v.lens[-1])
    data = v.data[lo:hi]
    out = np.empty(2 * len(data), np.uint8)
    out[0::2] = _HEX[data >> 4]
    out[1::2] = _HEX[data & 15]
    return _Var(2 * (v.starts - lo), 2 * v.lens, out)


def _uuid_text(mat: np.ndarray) -> _Fixed:
    n = len(mat)
    out = np.full((n, 36), 45, np.uint8)  # '-'
    cols = [i for i in range(36) if i not in (8, 13, 18, 23)]
    hexed = np.empty((n, 32), np.uint8)
    hexed[:, 0::2] = _HEX[mat >> 4]
    hexed[:, 1::2] = _HEX[mat & 15]
    out[:, cols] = hexed
    return _Fixed(36, [(0, out, np.dtype((np.uint8, (36,))))])


def _sparse_var(n: int, idx: np.ndarray, items: list[bytes]) -> _Var:
    """A _Var with items at rows idx (increasing) and nothing elsewhere."""
    lens = np.zeros(n, np.int64)
    lens[idx] = [len(b) for b in items]
    starts = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(lens[:-1], out=starts[1:])
    return _Var(starts, lens, np.frombuffer(b"".join(items), np.uint8))


def _odd_parts(
    n: int, pos_inf: np.ndarray, neg_inf: np.ndarray, other: np.ndarray, texts: list[bytes]
) -> _Seg:
    """'infinity', '-infinity' and per-value texts (out-of-range dates) for the rows that need them."""
    odd = pos_inf | neg_inf | other
    idx = np.flatnonzero(odd)
    by_row = dict(zip(np.flatnonzero(other).tolist(), texts, strict=True))
    items = [b"infinity" if pos_inf[i] else b"-infinity" if neg_inf[i] else by_row[i] for i in idx.tolist()]
    return (_sparse_var(n, idx, items), odd)


def _date_matrix(y: np.ndarray, m: np.ndarray, d: np.ndarray, extra: int = 0) -> np.ndarray:
    mat = np.empty((len(y), 10 + extra), np.uint8)
    _digits(mat, 0, np.clip(y, 0, 9999), 4)
    mat[:, 4] = mat[:, 7] = 45
    _digits(mat, 5, m, 2)
    _digits(mat, 8, d, 2)
    return mat


def _date_field(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    n = len(arr)
    if pa.types.is_date64(arr.type):
        days = np.floor_divide(_prim(arr, "<i8"), 86_400_000)
        pos_inf = neg_inf = np.zeros(n, bool)
    else:
        days = _prim(arr, "<i4").astype(np.int64)
        pos_inf, neg_inf = days >= _I32_MAX, days <= -_I32_MAX
    if valid is not None:
        days = np.where(valid, days, 0)
        pos_inf, neg_inf = pos_inf & valid, neg_inf & valid
    special = pos_inf | neg_inf
    days = np.where(special, 0, days)
    y, m, d = _civil(days)
    out_of_range = (y < 1) | (y > 9999)
    parts: list[_Seg] = [(_Fixed(10, [(0, _date_matrix(y, m, d), np.dtype((np.uint8, (10,))))]), None)]
    if special.any() or out_of_range.any():
        odd = special | out_of_range
        parts[0] = (parts[0][0], ~odd)
        others = np.flatnonzero(out_of_range & ~special)
        texts = [_pg_date_text(int(y[i]), int(m[i]), int(d[i])).encode() for i in others]
        parts.append(_odd_parts(n, pos_inf, neg_inf, out_of_range & ~special, texts))
    return _Field(n, valid, parts)


def _hms(mat: np.ndarray, col: int, tod_us: np.ndarray) -> None:
    secs = tod_us // 1_000_000
    _digits(mat, col, secs // 3600, 2)
    mat[:, col + 2] = mat[:, col + 5] = 58  # ':'
    _digits(mat, col + 3, (secs // 60) % 60, 2)
    _digits(mat, col + 6, secs % 60, 2)


def _fraction(frac: np.ndarray, digits: int) -> _Fixed:
    mat = np.empty((len(frac), digits + 1), np.uint8)
    mat[:, 0] = 46  # '.'
    _digits(mat, 1, frac, digits)
    return _Fixed(digits + 1, [(0, mat, np.dtype((np.uint8, (digits + 1,))))])


_UTC_NAMES = {
    "utc",
    "etc/utc",
    "z",
    "+00:00",
    "-00:00",
    "gmt",
    "etc/gmt",
    "universal",
    "zulu",
    "etc/universal",
}


def _timestamp_field(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    """'YYYY-MM-DD HH:MM:SS[.ffffff]' (nanosecond columns: 9 digits when the nanoseconds are not
    a whole microsecond, as pandas prints them), tz-aware ones in the zone with its offset ('+00'
    for UTC, '+05:30', '-04:56:02'). Infinities as 'infinity'; years outside 1-9999 PostgreSQL's
    way."""
    t = arr.type
    n = len(arr)
    raw = _prim(arr, "<i8")
    pos_inf, neg_inf = raw == _I64_MAX, raw <= -_I64_MAX
    if valid is not None:
        raw = np.where(valid, raw, 0)
        pos_inf, neg_inf = pos_inf & valid, neg_inf & valid
    special = pos_inf | neg_inf
    raw = np.where(special, 0, raw)
    offset_s = np.zeros(n, np.int64)
    if t.tz and t.tz.lower() not in _UTC_NAMES:
        local = pc.local_timestamp(pa.Array.from_buffers(t, n, [None, pa.py_buffer(raw)]))
        offset_s = (_prim(local, "<i8") - raw) // _per_second(t.unit)
    local_raw = raw + offset_s * _per_second(t.unit)
    per_day = 86400 * _per_second(t.unit)
    days, tod = np.divmod(local_raw, per_day)
    y, mo, d = _civil(days)
    mat = _date_matrix(y, mo, d, 9)
    mat[:, 10] = 32
    tod_us = tod * _UNIT_US[t.unit] if t.unit != "ns" else tod // 1000
    _hms(mat, 11, tod_us)
    parts: list[_Seg] = [(_Fixed(19, [(0, mat, np.dtype((np.uint8, (19,))))]), None)]
    frac_us = tod_us % 1_000_000
    if t.unit == "ns":
        frac_ns = tod % 1_000_000_000
        nano = frac_ns % 1000 != 0
        if nano.any():
            parts.append((_fraction(frac_ns, 9), nano))
        parts.append((_fraction(frac_us, 6), ~nano & (frac_us != 0)))
    elif t.unit != "s":
        parts.append((_fraction(frac_us, 6), frac_us != 0))
    if t.tz:
        if not offset_s.any():
            parts.append((_Const(b"+00"), None))
        else:
            parts += _offset_parts(offset_s)
    out_of_range = ((y < 1) | (y > 9999)) & ~special
    if valid is not None:
        out_of_range &= valid
    if special.any() or out_of_range.any():
        odd = special | out_of_range
        parts = [(p, _and(w, ~odd)) for p, w in parts]
        texts = []
        for i in np.flatnonzero(out_of_range).tolist():
            us = int(tod_us[i])
            s = f"{int(y[i]):04d}-{int(mo[i]):02d}-{int(d[i]):02d} {us // 3600_000_000:02d}:"
            s += f"{us // 60_000_000 % 60:02d}:{us // 1_000_000 % 60:02d}"
            s += f".{us % 1_000_000:06d}" if us % 1_000_000 else ""
            if t.tz:
                s += "+00" if not offset_s[i] else _offset_text(int(offset_s[i]))
            if y[i] < 1:
                s = f"{1 - int(y[i]):04d}" + s[s.index("-", 1) :] + " BC"
            texts.append(s.encode())
        parts.append(_odd_parts(n, pos_inf, neg_inf, out_of_range, texts))
    return _Field(n, valid, parts)


def _per_second(unit: str) -> int:
    return {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}[unit]


def _offset_text(off: int) -> str:
    sign = "-" if off < 0 else "+"
    h, rest = divmod(abs(off), 3600)
    m, s = divmod(rest, 60)
    return f"{sign}{h:02d}:{m:02d}" + (f":{s:02d}" if s else "")


def _offset_parts(offset_s: np.ndarray) -> list[_Seg]:
    """'+HH:MM' (':SS' when the offset has seconds), '+00' for UTC, as isoformat + pgwire did."""
    n = len(offset_s)
    a = np.abs(offset_s)
    mat = np.empty((n, 9), np.uint8)
    mat[:, 0] = np.where(offset_s < 0, np.uint8(45), np.uint8(43))
    _digits(mat, 1, a // 3600, 2)
    mat[:, 3] = mat[:, 6] = 58
    _digits(mat, 4, (a // 60) % 60, 2)
    _digits(mat, 7, a % 60, 2)
    zero = offset_s == 0
    has_sec = a % 60 != 0
    return [
        (_Fixed(3, [(0, mat[:, :3], np.dtype((np.uint8, (3,))))]), None),
        (_Fixed(3, [(0, mat[:, 3:6], np.dtype((np.uint8, (3,))))]), ~zero),
        (_Fixed(3, [(0, mat[:, 6:9], np.dtype((np.uint8, (3,))))]), has_sec),
    ]


def _time_us(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_time32(t):
        return _prim(arr, "<i4").astype(np.int64) * _UNIT_US[t.unit]
    raw = _prim(arr, "<i8")
    return raw // 1000 if t.unit == "ns" else raw


def _time_field(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    us = _time_us(arr)
    if valid is not None:
        us = np.where(valid, us, 0)
    mat = np.empty((len(arr), 8), np.uint8)
    _hms(mat, 0, us)
    frac = us % 1_000_000
    parts: list[_Seg] = [(_Fixed(8, [(0, mat, np.dtype((np.uint8, (8,))))]), None)]
    if frac.any():
        parts.append((_fraction(frac, 6), frac != 0))
    return _Field(len(arr), valid, parts)


def _month_day_micros(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(months, days, microseconds) of a month_day_nano interval or a duration column."""
    t = arr.type
    n = len(arr)
    if pa.types.is_duration(t):
        raw = _prim(arr, "<i8")
        us = raw // 1000 if t.unit == "ns" else raw * _UNIT_US[t.unit]
        return np.zeros(n, np.int32), np.zeros(n, np.int32), us
    if pa.types.is_interval(t) and t == pa.month_day_nano_interval():
        buf = arr.buffers()[1]
        rec = np.frombuffer(buf, np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]))[
            arr.offset : arr.offset + n
        ]
        return rec["m"].copy(), rec["d"].copy(), rec["ns"] // 1000
    raise ValueError(f"cannot send values of type {t}")


def _list_text(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    """'{a,b,NULL}': the elements' text, quoted (non-numeric, non-list elements) when PostgreSQL
    would, joined per list by one assembly over all elements (each list's elements are
    contiguous, so its text is one range of the element text)."""
    n = len(arr)
    offs, values = _list_layout(arr)
    ef = _text_field(values)
    m = len(values)
    if _kind(_plain_type(values.type)) not in (*_NUMERIC_ELEMS, "list") and m:
        ef = _quote_elements(ef)
    first = np.zeros(m, bool)
    lens = np.diff(offs)
    first[offs[:-1][lens > 0]] = True
    null_elem = ~ef.valid if ef.valid is not None else None
    segs: list[_Seg] = [(_Const(b","), ~first), *ef.segs()]
    if null_elem is not None:
        segs.append((_Const(b"NULL"), null_elem))
    chunks, ends = _assemble(m, segs)
    data = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
    starts = ends[offs[:-1]]
    body = _Var(starts, ends[offs[1:]] - starts, data)
    return _Field(n, valid, [(_Const(b"{"), None), (body, None), (_Const(b"}"), None)])


def _flat_strings(f: _Field) -> pa.Array:
    """A field's text as a large_string Arrow array (nulls as nulls)."""
    segs = f.segs()
    if len(segs) == 1 and isinstance(segs[0][0], _Var) and segs[0][1] is None and segs[0][0].padded is None:
        return _var_to_array(segs[0][0], f.valid)
    chunks, ends = _assemble(f.n, segs)
    data = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
    return _var_to_array(_Var(ends[:-1], np.diff(ends), data), f.valid)


_QUOTE = pa.scalar('"', pa.large_string())
_EMPTY = pa.scalar("", pa.large_string())


def _quote_elements(ef: _Field) -> _Field:
    """Array elements quoted as array_out does: empty, NULL, or holding , { } " \\ or space."""
    s = _flat_strings(ef)
    need = pc.match_substring_regex(s, r'[,{}"\\ \t\n\r\v\f]')
    need = pc.or_(need, pc.equal(pc.utf8_length(s), 0))
    need = pc.fill_null(pc.or_(need, pc.equal(pc.ascii_upper(s), "NULL")), False)
    if pc.any(need).as_py():
        sub = pc.filter(s, need)
        sub = pc.replace_substring(pc.replace_substring(sub, "\\", "\\\\"), '"', '\\"')
        sub = pc.binary_join_element_wise(_QUOTE, sub, _QUOTE, _EMPTY)
        s = pc.replace_with_mask(s, need, sub)
    return _Field(ef.n, ef.valid, [(_var_of(s), None)])


# -- binary format ----------------------------------------------------------------------------


def _fixed_field(n: int, valid: np.ndarray | None, values: np.ndarray, dtype: str) -> _Field:
    dtype = np.dtype(dtype)
    return _Field(n, valid, [(_Fixed(dtype.itemsize, [(0, values, dtype)]), None)])


def _binary_field(arr: pa.Array) -> _Field:
    """PostgreSQL's binary (`*_send`) format of every value of a column."""
    arr = _plain(arr)
    t = arr.type
    n = len(arr)
    valid = _valid(arr)
    ext = _ext_name(t)
    if pa.types.is_null(t):
        return _Field(n, np.zeros(n, bool), [])
    if ext == "arrow.uuid":
        return _fixed_field(n, valid, _fixed_matrix(arr.storage, 16), "(16,)u1")
    if ext in ("opaque.hugeint", "opaque.uhugeint"):
        items = [None if v is None else _numeric_send(v) for v in _hugeints(arr, valid)]
        return _Field(n, valid, [(_var_from_list(items), None)])
    if pa.types.is_boolean(t):
        return _fixed_field(n, valid, _bools(arr), "u1")
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        kind = "u" if pa.types.is_unsigned_integer(t) else "i"
        wire = {INT2: ">i2", INT4: ">i4", INT8: ">i8", OID: ">u4"}[_scalar_oid(t)]
        return _fixed_field(n, valid, _prim(arr, f"<{kind}{t.bit_width // 8}"), wire)
    if pa.types.is_float16(t):
        return _fixed_field(n, valid, _prim(arr, "<f2"), ">f4")
    if pa.types.is_float32(t):
        return _fixed_field(n, valid, _prim(arr, "<f4"), ">f4")
    if pa.types.is_float64(t):
        return _fixed_field(n, valid, _prim(arr, "<f8"), ">f8")
    if pa.types.is_uint64(t) or pa.types.is_decimal(t):
        items = [None if v is None else _numeric_send(v) for v in arr.to_pylist()]
        return _Field(n, valid, [(_var_from_list(items), None)])
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        return _Field(n, valid, [(_var_of(arr), None)])
    if pa.types.is_fixed_size_binary(t):
        w = t.byte_width
        return _fixed_field(n, valid, _fixed_matrix(arr, w), f"({w},)u1")
    if pa.types.is_timestamp(t):
        return _fixed_field(n, valid, _timestamp_us(arr, valid), ">i8")
    if pa.types.is_date(t):
        if pa.types.is_date64(t):
            days = np.floor_divide(_prim(arr, "<i8"), 86_400_000) - _PG_EPOCH_DAYS
        else:
            raw = _prim(arr, "<i4").astype(np.int64)
            days = np.where(
                raw >= _I32_MAX, _I32_MAX, np.where(raw <= -_I32_MAX, _I32_MIN, raw - _PG_EPOCH_DAYS)
            )
        if valid is not None:
            days = np.where(valid, days, 0)
        if days.size and (days.max() > _I32_MAX or days.min() < _I32_MIN):
            raise ValueError("date out of range")
        return _fixed_field(n, valid, days, ">i4")
    if pa.types.is_time(t):
        return _fixed_field(n, valid, _time_us(arr), ">i8")
    if pa.types.is_duration(t) or t == pa.month_day_nano_interval():
        months, days, micros = _month_day_micros(arr)
        fixed = _Fixed(
            16, [(0, micros, np.dtype(">i8")), (8, days, np.dtype(">i4")), (12, months, np.dtype(">i4"))]
        )
        return _Field(n, valid, [(fixed, None)])
    if _is_listlike(t) and oid_of(t) in ELEMENT_OF:
        return _list_binary(arr, valid)
    return _text_field(arr)  # sent as text: the binary format of text is its UTF-8 bytes


def _timestamp_us(arr: pa.Array, valid: np.ndarray | None) -> np.ndarray:
    """Microseconds since 2000-01-01 (PostgreSQL's infinities kept), ValueError beyond int64."""
    unit = arr.type.unit
    raw = _prim(arr, "<i8")
    if valid is not None:
        raw = np.where(valid, raw, 0)
    pos_inf, neg_inf = raw == _I64_MAX, raw <= -_I64_MAX
    if unit == "ns":
        us = np.floor_divide(raw, 1000)
    elif unit == "us":
        us = raw
    else:
        f = _UNIT_US[unit]
        limit = (_I64_MAX - _PG_EPOCH_US) // f
        bad = (np.abs(raw) > limit) & ~pos_inf & ~neg_inf
        if bad.any():
            raise ValueError("timestamp out of range")
        us = raw * f
    us = np.where(us < _I64_MIN + _PG_EPOCH_US, _I64_MIN + _PG_EPOCH_US, us) - _PG_EPOCH_US
    return np.where(pos_inf, _I64_MAX, np.where(neg_inf, _I64_MIN, us))


def _list_binary(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    """1-D arrays: ndim, has-null flag, element OID, (size, lower bound 1), then each element as
    a length word and its bytes; empty arrays have ndim 0 and no dimension. The elements of all
    lists are encoded in one pass; each list's elements are one contiguous range of those bytes."""
    n = len(arr)
    offs, values = _list_layout(arr)
    elem_oid = _scalar_oid(values.type)
    ef = _binary_field(values)
    m = len(values)
    chunks, ends = _assemble(m, [(_Fixed(4, [(0, ef.lengths(), np.dtype(">i4"))]), None), *ef.segs()])
    data = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
    counts = np.diff(offs)
    if ef.valid is None:
        nulls = np.zeros(n, np.int64)
    else:
        cum = np.zeros(m + 1, np.int64)
        np.cumsum(~ef.valid, out=cum[1:])
        nulls = cum[offs[1:]] - cum[offs[:-1]]
    head = np.zeros((n, 20), np.uint8)
    rec = head.view(np.dtype({"names": ["nd", "fl", "oid", "size", "lb"], "formats": [">i4"] * 5,
                              "offsets": [0, 4, 8, 12, 16], "itemsize": 20})).reshape(n)  # fmt: skip
    nonempty = counts > 0
    rec["nd"] = nonempty
    rec["fl"] = nulls > 0
    rec["oid"] = elem_oid
    rec["size"] = counts
    rec["lb"] = 1
    starts = ends[offs[:-1]]
    body = _Var(starts, ends[offs[1:]] - starts, data)
    return _Field(n, valid, [(_Var(None, np.where(nonempty, 20, 12), padded=head), None), (body, None)])


def _numeric_send(v: decimal.Decimal | int) -> bytes:
    """numeric_send: ndigits, weight, sign, dscale (int16 each), then base-10000 digits."""
    if isinstance(v, int):
        sign, digits, exp = (1 if v < 0 else 0), str(abs(v)), 0
    else:
        if v.is_nan():
            return struct.pack("!hhHh", 0, 0, 0xC000, 0)
        if v.is_infinite():
            return struct.pack("!hhHh", 0, 0, 0xF000 if v < 0 else 0xD000, 0)
        t = v.as_tuple()
        sign, digits, exp = t.sign, "".join(map(str, t.digits)), int(t.exponent)
    dscale = max(0, -exp)
    if exp >= 0:
        whole, frac = digits + "0" * exp, ""
    elif len(digits) > -exp:
        whole, frac = digits[:exp], digits[exp:]
    else:
        whole, frac = "", "0" * (-exp - len(digits)) + digits
    whole = whole.lstrip("0")
    whole = "0" * (-len(whole) % 4) + whole
    frac = frac + "0" * (-len(frac) % 4)
    groups = [int(whole[i : i + 4]) for i in range(0, len(whole), 4)]
    weight = len(groups) - 1
    groups += [int(frac[i : i + 4]) for i in range(0, len(frac), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight, sign = 0, 0
    if len(groups) > 0x7FFF or not -0x8000 <= weight <= 0x7FFF or dscale > 0x3FFF:
        raise ValueError("numeric value out of range")
    head = struct.pack("!hhHh", len(groups), weight, 0x4000 if sign else 0, dscale)
    return head + struct.pack(f"!{len(groups)}H", *groups)


# -- DataRows and COPY -------------------------------------------------------------------------


def _fields(batch: pa.RecordBatch, formats: Sequence[int]) -> list[_Field]:
    if len(formats) != batch.num_columns:
        raise ValueError(f"{len(formats)} format codes for {batch.num_columns} columns")
    out = []
    for col, fmt in zip(batch.columns, formats, strict=True):
        if fmt == 0:
            out.append(_text_field(col))
        elif fmt == 1:
            out.append(_binary_field(col))
        else:
            raise ValueError(f"unsupported format code {fmt}")
    return out


def _tuple_segs(fields: list[_Field], datarow: bool) -> list[_Seg]:
    """Segments of DataRow messages ('D', length, field count, fields) or of COPY binary tuples
    (field count, fields): each field is its length word (-1 for NULL) and its bytes."""
    n = fields[0].n if fields else 0
    segs: list[_Seg] = []
    body = np.full(n, 2, np.int64)
    for f in fields:
        ln = f.lengths()
        body += 4 + np.maximum(ln, 0)
        segs.append((_Fixed(4, [(0, ln, np.dtype(">i4"))]), None))
        segs += f.segs()
    if body.size and body.max() > 0x3FFFFFFF:
        raise ValueError("row is too large to send")
    count = _Const(struct.pack("!h", len(fields)))
    if datarow:
        return [
            (_Const(b"D"), None),
            (_Fixed(4, [(0, body + 4, np.dtype(">i4"))]), None),
            (count, None),
            *segs,
        ]
    return [(count, None), *segs]


def _encode_rows(batch: pa.RecordBatch, formats: Sequence[int]) -> tuple[list[np.ndarray], np.ndarray]:
    """(chunks of the DataRow bytes, row end offsets) of a batch."""
    segs = _tuple_segs(_fields(batch, formats), True)
    if batch.num_columns == 0:
        n = batch.num_rows
        return [np.frombuffer(b"D\x00\x00\x00\x06\x00\x00" * n, np.uint8)], np.arange(
            n + 1, dtype=np.int64
        ) * 7
    return _assemble(batch.num_rows, segs)


def encode_datarows(batch: pa.RecordBatch, formats: Sequence[int]) -> bytes:
    """Every row of the batch as concatenated DataRow messages; formats: one code per column
    (0 text, 1 binary)."""
    if isinstance(batch, pa.Table):
        return b"".join(encode_datarows(b, formats) for b in batch.to_batches())
    if batch.num_rows == 0:
        return b""
    if batch.num_rows <= _SMALL_ROWS:
        return b"".join(_small_rows(batch, formats, True))
    if batch.num_rows <= _GATHER_ROWS and not any(formats):
        gathered = _text_rows_gathered(batch)
        if gathered is not None:
            return gathered
    return _join(_encode_rows(batch, formats)[0])


# -- text DataRows of strings and integers, gathered -------------------------------------------
#
# A result of a few hundred rows of names and counts (the NaN query) is the commonest shape a
# dashboard asks for. The general path above lays each chunk out in a padded matrix, a dozen numpy
# calls per column and segment whatever the row count: most of such a result's encoding time. When
# every column is text already (strings) or becomes it with one Arrow cast (integers: their
# PostgreSQL text is their decimal digits, as the general path makes it too), each row is a header,
# then a length word and the bytes per column, and one gather (`np.repeat` of the segments'
# sources) lays out every byte: about half the time, the same bytes (tests/catalog/server/test_pgcodec.py).

_GATHER_ROWS = 4096
_GATHER_BYTES = 1 << 18  # the index is 8 bytes per byte of output: only small results are gathered


def _text_rows_gathered(batch: pa.RecordBatch) -> bytes | None:
    """The text DataRows of a batch whose columns are all plain strings or integers; else None."""
    n, k = batch.num_rows, batch.num_columns
    if k == 0:
        return None
    lens = np.empty((n, k), np.int64)
    sources: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    for j, col in enumerate(batch.columns):
        t = col.type
        if pa.types.is_integer(t):
            col = col.cast(pa.large_string())
            t = col.type
        elif not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return None
        bufs = col.buffers()
        otype = np.int64 if pa.types.is_large_string(t) else np.int32
        offs = np.frombuffer(bufs[1], otype)[col.offset : col.offset + n + 1].astype(np.int64)
        sizes = np.diff(offs)
        if col.null_count:
            sizes = np.where(col.is_valid().to_numpy(zero_copy_only=False), sizes, -1)
        lens[:, j] = sizes
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        sources.append(data[int(offs[0]) : int(offs[-1])])  # a slice's rows only, not its whole buffer
        starts.append(offs[:-1] - offs[0])
    body = np.maximum(lens, 0)
    row_bytes = 6 + 4 * k + body.sum(axis=1)
    if int(row_bytes.sum()) + n > _GATHER_BYTES:
        return None  # big values: the matrix path copies them in blocks, without an index per byte
    head = np.empty(n, np.dtype([("kind", "u1"), ("length", ">i4"), ("count", ">i2")]))
    head["kind"], head["length"], head["count"] = ord("D"), row_bytes, k
    words = lens.astype(">i4")
    # per row, in order: the 7-byte header, then each column's length word and bytes
    seg = np.empty((n, 1 + 2 * k), np.int64)
    src = np.empty((n, 1 + 2 * k), np.int64)
    rows = np.arange(n, dtype=np.int64)
    seg[:, 0], src[:, 0] = 7, rows * 7
    at = 7 * n + 4 * n * k  # the concatenated sources: headers, length words, each column's bytes
    for j in range(k):
        seg[:, 1 + 2 * j], src[:, 1 + 2 * j] = 4, 7 * n + (rows * k + j) * 4
        seg[:, 2 + 2 * j], src[:, 2 + 2 * j] = body[:, j], at + starts[j]
        at += len(sources[j])
    seg, src = seg.reshape(-1), src.reshape(-1)
    out_at = np.zeros(len(seg), np.int64)
    np.cumsum(seg[:-1], out=out_at[1:])
    index = np.repeat(src - out_at, seg)
    index += np.arange(len(index), dtype=np.int64)
    pool = np.concatenate([head.view(np.uint8), words.view(np.uint8).reshape(-1), *sources])
    return pool[index].tobytes()


def encode_datarow_list(batch: pa.RecordBatch, formats: Sequence[int] | None = None) -> list[bytes]:
    """One DataRow message per row (what `pgwire.encode_rows` returns)."""
    if batch.num_rows == 0:
        return []
    formats = [0] * batch.num_columns if formats is None else formats
    if batch.num_rows <= _SMALL_ROWS:
        return _small_rows(batch, formats, True)
    chunks, ends = _encode_rows(batch, formats)
    buf = _join(chunks)
    e = ends.tolist()
    return [buf[e[i] : e[i + 1]] for i in range(len(e) - 1)]


# -- small batches: value by value ----------------------------------------------------------
#
# The vectorized path costs tens of microseconds per column whatever the row count; a point
# lookup's one row would pay that for every column. Up to _SMALL_ROWS rows, values go one by one
# through the same rules (text_value; struct for fixed-width binary; the vectorized encoder for
# the other types' binary and for what Arrow cannot give as Python values), with the same bytes.

_SMALL_ROWS = 64
_PACKERS = {
    BOOL: lambda v: b"\x01" if v else b"\x00",
    INT2: struct.Struct("!h").pack,
    INT4: struct.Struct("!i").pack,
    INT8: struct.Struct("!q").pack,
    OID: struct.Struct("!I").pack,
    FLOAT4: struct.Struct("!f").pack,
    FLOAT8: struct.Struct("!d").pack,
}


def _packer(t: pa.DataType):
    """A per-value binary encoder for the simple Arrow types, else None."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str.encode
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return bytes
    if isinstance(t, pa.BaseExtensionType) or pa.types.is_uint64(t):
        return None
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return _PACKERS[_scalar_oid(t)]
    return None


def _split(f: _Field) -> list[bytes | None]:
    """A vectorized field as one payload per row (None for NULL)."""
    chunks, ends = _assemble(f.n, f.segs())
    buf, e = _join(chunks), ends.tolist()
    return [None if f.valid is not None and not f.valid[i] else buf[e[i] : e[i + 1]] for i in range(f.n)]


def _small_text(arr: pa.Array) -> list[bytes | None]:
    arr = _plain(arr)
    if _ext_name(arr.type).startswith("opaque."):
        return _split(_text_field(arr))
    try:
        return [None if v is None else text_value(v).encode() for v in arr.to_pylist()]
    except (ValueError, OverflowError):  # infinities, years beyond 1-9999: Python cannot hold them
        return _split(_text_field(arr))


def _small_binary(arr: pa.Array) -> list[bytes | None]:
    arr = _plain(arr)
    t = arr.type
    pack = _packer(t)
    if pack is not None:
        return [None if v is None else pack(v) for v in arr.to_pylist()]
    if _is_listlike(t) and oid_of(t) in ELEMENT_OF:
        inner = _plain_type(t.value_type)
        pack = _packer(inner)
        if pack is not None:
            elem_oid = _scalar_oid(inner)
            return [None if v is None else _array_send(v, elem_oid, pack) for v in arr.to_pylist()]
    if oid_of(t) == TEXT and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return _small_text(arr)
    return _split(_binary_field(arr))


def _array_send(values: list, elem_oid: int, pack) -> bytes:
    if not values:
        return struct.pack("!iiI", 0, 0, elem_oid)
    out = [struct.pack("!iiIii", 1, any(v is None for v in values), elem_oid, len(values), 1)]
    for v in values:
        if v is None:
            out.append(b"\xff\xff\xff\xff")
        else:
            b = pack(v)
            out.append(struct.pack("!i", len(b)) + b)
    return b"".join(out)


def _small_rows(batch: pa.RecordBatch, formats: Sequence[int], datarow: bool) -> list[bytes]:
    """DataRow messages (or COPY binary tuples) of a small batch, value by value."""
    if len(formats) != batch.num_columns:
        raise ValueError(f"{len(formats)} format codes for {batch.num_columns} columns")
    cols = []
    for col, fmt in zip(batch.columns, formats, strict=True):
        if fmt not in (0, 1):
            raise ValueError(f"unsupported format code {fmt}")
        cols.append(_small_binary(col) if fmt else _small_text(col))
    count = struct.pack("!h", batch.num_columns)
    null = b"\xff\xff\xff\xff"
    out = []
    for i in range(batch.num_rows):
        body = count + b"".join(null if c[i] is None else struct.pack("!i", len(c[i])) + c[i] for c in cols)
        if len(body) > 0x3FFFFFFF:
            raise ValueError("row is too large to send")
        out.append(b"D" + struct.pack("!i", len(body) + 4) + body if datarow else body)
    return out


COPY_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
COPY_BINARY_TRAILER = struct.pack("!h", -1)

_TEXT_ESCAPES = {
    0x5C: b"\\\\",
    0x08: b"\\b",
    0x0C: b"\\f",
    0x0A: b"\\n",
    0x0D: b"\\r",
    0x09: b"\\t",
    0x0B: b"\\v",
}


def _byte_option(value: str | None, default: str, what: str) -> bytes:
    b = (default if value is None else value).encode()
    if len(b) != 1:
        raise ValueError(f"COPY {what} must be a single one-byte character")
    return b


def _present(f: _Field, wanted: bytes) -> set[int]:
    """Which of the `wanted` bytes may occur in a field's text: from its type's alphabet when
    known, else by scanning its bytes (one comparison pass per run of consecutive byte values,
    then one per value of a run found)."""
    if f.alphabet is not None:
        return set(wanted) & set(f.alphabet)
    runs: list[list[int]] = []
    for c in sorted(set(wanted)):
        if runs and runs[-1][-1] == c - 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    found: set[int] = set()
    for p, _ in f.parts:
        if isinstance(p, _Const):
            found |= set(wanted) & set(p.data)
            continue
        if isinstance(p, _Fixed):
            blobs = [
                np.ascontiguousarray(arr).astype(dtype).view(np.uint8).reshape(-1)
                for _, arr, dtype in p.fields
            ]
        elif p.padded is not None:
            blobs = [p.padded.reshape(-1)]
        elif len(p.lens):
            blobs = [p.data[int(p.starts.min()) : int((p.starts + p.lens).max())]]
        else:
            blobs = []
        for blob in blobs:
            for run in runs:
                if set(run) <= found or not blob.size:
                    continue
                hit = (
                    (blob == run[0]).any() if len(run) == 1 else ((blob >= run[0]) & (blob <= run[-1])).any()
                )
                if hit:
                    found |= {c for c in run if len(run) == 1 or (blob == c).any()}
    return found


def _text_escaped(f: _Field, delim: bytes) -> _Field:
    """COPY text escaping (PostgreSQL's CopyAttributeOutText): backslash, \\b \\f \\n \\r \\t
    \\v and the delimiter get a backslash. Columns without those bytes are left as they are."""
    escapes = dict(_TEXT_ESCAPES)
    escapes.setdefault(delim[0], b"\\" + delim)
    seen = _present(f, bytes(escapes))
    todo = [(chr(c), e.decode()) for c, e in escapes.items() if c in seen]
    if not todo:
        return f
    s = _flat_strings(f)
    todo.sort(key=lambda ce: ce[0] != "\\")  # the backslash first
    for c, e in todo:
        s = pc.replace_substring(s, c, e)
    return _Field(f.n, f.valid, [(_var_of(s), None)])


def _csv_quoted(
    f: _Field, delim: bytes, quote: bytes, escape: bytes, null: bytes, force: bool, single: bool
) -> _Field:
    """CSV quoting (PostgreSQL's CopyAttributeOutCSV): a value is quoted when forced, when it
    equals the null string, holds the delimiter, the quote, CR or LF, or is '\\.' alone on its
    line; inside quotes, the quote and escape characters get the escape character before them."""
    lengths = f.lengths()
    seen = _present(f, delim + quote + escape + b"\n\r")
    specials = [c.decode() for c in (delim, quote, b"\n", b"\r") if c[0] in seen]
    maybe_null = bool((lengths == len(null)).any())
    maybe_eod = single and bool((lengths == 2).any())
    if not (force or specials or maybe_null or maybe_eod):
        return f
    s = _flat_strings(f)
    if force:
        need = pc.is_valid(s)
    else:
        need = pa.array(np.zeros(f.n, bool))
        if specials:
            need = pc.match_substring_regex(s, _re2_class(specials))
        if maybe_null:
            need = pc.or_(need, pc.equal(s, null.decode()))
        if maybe_eod:
            need = pc.or_(need, pc.equal(s, "\\."))
        need = pc.fill_null(need, False)
    if not pc.any(need).as_py():
        return f
    sub = pc.filter(s, need)
    q, e = quote.decode(), escape.decode()
    if q == e:
        sub = pc.replace_substring(sub, q, q + q)
    else:
        sub = pc.replace_substring_regex(sub, "(" + _re2_class([q, e]) + ")", _re2_literal(e) + "\\1")
    q_scalar = pa.scalar(q, pa.large_string())
    sub = pc.binary_join_element_wise(q_scalar, sub, q_scalar, _EMPTY)
    s = pc.replace_with_mask(s, need, sub)
    return _Field(f.n, f.valid, [(_var_of(s), None)])


def _re2_class(chars: list[str]) -> str:
    return "[" + "".join(f"\\x{ord(c):02x}" for c in chars) + "]"


def _re2_literal(c: str) -> str:
    """c as literal text in an RE2 rewrite string (where a backslash starts a group reference)."""
    return "\\\\" if c == "\\" else c


def _force_set(force_quote, names: list[str]) -> set[int]:
    if force_quote is True or force_quote == "*":
        return set(range(len(names)))
    if not force_quote:
        return set()
    wanted = (
        [c.strip().strip('"') for c in force_quote.split(",")]
        if isinstance(force_quote, str)
        else list(force_quote)
    )
    missing = [c for c in wanted if c not in names]
    if missing:
        raise ValueError(f'FORCE_QUOTE column "{missing[0]}" is not in the result')
    return {names.index(c) for c in wanted}


@functools.lru_cache(maxsize=64)
def _special_re(chars: bytes) -> re.Pattern:
    return re.compile(b"[" + b"".join(re.escape(bytes([c])) for c in chars) + b"]")


def _escape_text(b: bytes, delim: bytes) -> bytes:
    """One value escaped as COPY text does (the per-value form of _text_escaped)."""
    if not _special_re(b"\\\x08\x09\x0a\x0b\x0c\x0d" + delim).search(b):
        return b
    b = b.replace(b"\\", b"\\\\")
    for c, e in _TEXT_ESCAPES.items():
        if c != 0x5C and bytes([c]) in b:
            b = b.replace(bytes([c]), e)
    if delim[0] not in _TEXT_ESCAPES and delim in b:
        b = b.replace(delim, b"\\" + delim)
    return b


def _quote_csv(b: bytes, delim: bytes, q: bytes, esc: bytes, null: bytes, force: bool, single: bool) -> bytes:
    """One non-NULL value as COPY CSV writes it (the per-value form of _csv_quoted)."""
    if force or b == null or _special_re(b"\n\r" + delim + q).search(b) or (single and b == b"\\."):
        inner = b.replace(q, q + q) if esc == q else b.replace(esc, esc + esc).replace(q, esc + q)
        return q + inner + q
    return b


def _copy_text_header(names: Sequence[str], delim: bytes) -> bytes:
    return delim.join(_escape_text(name.encode(), delim) for name in names) + b"\n"


def copy_csv_header(
    names: Sequence[str],
    *,
    delimiter: str | None = None,
    null: str | None = None,
    quote: str | None = None,
    escape: str | None = None,
    force_quote=None,
) -> bytes:
    """The HEADER line of COPY ... CSV: the column names with the values' quoting rules (a name
    equal to the null string is quoted; FORCE_QUOTE does not apply to it, as in PostgreSQL)."""
    delim = _byte_option(delimiter, ",", "delimiter")
    q = _byte_option(quote, '"', "quote")
    esc = _byte_option(escape, q.decode(), "escape")
    nul = (null if null is not None else "").encode()
    single = len(names) == 1
    return delim.join(_quote_csv(n.encode(), delim, q, esc, nul, False, single) for n in names) + b"\n"


@dataclass(slots=True)
class _CopyOptions:
    """COPY TO options, checked once as PostgreSQL checks them."""

    fmt: str
    delim: bytes = b""
    null: bytes = b""
    quote: bytes = b""
    escape: bytes = b""
    force: frozenset[int] = frozenset()
    header: bytes = b""  # the HEADER line, when asked for


def _copy_options(
    names: Sequence[str], fmt: str, delimiter, null, header: bool, quote, escape, force_quote
) -> _CopyOptions:
    fmt = fmt.lower()
    if fmt == "binary":
        if header:
            raise ValueError("cannot specify HEADER in BINARY mode")
        return _CopyOptions("binary")
    if fmt not in ("text", "csv"):
        raise ValueError(f'COPY format "{fmt}" not recognized')
    csv = fmt == "csv"
    delim = _byte_option(delimiter, "," if csv else "\t", "delimiter")
    nul = (null if null is not None else ("" if csv else "\\N")).encode()
    if delim in nul:
        raise ValueError("COPY delimiter character must not appear in the NULL specification")
    if b"\n" in nul or b"\r" in nul:
        raise ValueError("COPY null representation cannot use newline or carriage return")
    if not csv:
        if delim in b"\\.abcdefghijklmnopqrstuvwxyz0123456789\r\n":
            raise ValueError(f'COPY delimiter cannot be "{delim.decode()}"')
        return _CopyOptions("text", delim, nul, header=_copy_text_header(names, delim) if header else b"")
    q = _byte_option(quote, '"', "quote")
    esc = _byte_option(escape, q.decode(), "escape")
    if q == delim:
        raise ValueError("COPY delimiter and quote must be different")
    line = (
        copy_csv_header(names, delimiter=delimiter, null=null, quote=quote, escape=escape) if header else b""
    )
    return _CopyOptions("csv", delim, nul, q, esc, frozenset(_force_set(force_quote, list(names))), line)


def _copy_rows(batch: pa.RecordBatch, o: _CopyOptions) -> list[bytes] | list[_Seg]:
    """A batch's COPY rows: one bytes per row for small batches, else the rows' segments."""
    n = batch.num_rows
    if o.fmt == "binary":
        if n <= _SMALL_ROWS:
            return _small_rows(batch, [1] * batch.num_columns, False)
        return _tuple_segs([_binary_field(c) for c in batch.columns], False)
    if batch.num_columns == 0:
        return [b"\n"] * n
    csv, single = o.fmt == "csv", batch.num_columns == 1
    if n <= _SMALL_ROWS:
        cols = []
        for i, col in enumerate(batch.columns):
            force = i in o.force
            vals = _small_text(col)
            if csv:
                quoted = [
                    None if v is None else _quote_csv(v, o.delim, o.quote, o.escape, o.null, force, single)
                    for v in vals
                ]
                cols.append([o.null if v is None else v for v in quoted])
            else:
                cols.append([o.null if v is None else _escape_text(v, o.delim) for v in vals])
        return [o.delim.join(row) + b"\n" for row in zip(*cols, strict=True)]
    segs: list[_Seg] = []
    for i, col in enumerate(batch.columns):
        f = _text_field(col)
        if csv:
            f = _csv_quoted(f, o.delim, o.quote, o.escape, o.null, i in o.force, single)
        else:
            f = _text_escaped(f, o.delim)
        if i:
            segs.append((_Const(o.delim), None))
        segs += f.segs()
        if f.valid is not None and o.null:
            segs.append((_Const(o.null), ~f.valid))
    segs.append((_Const(b"\n"), None))
    return segs


def _copy_encode(batch: pa.RecordBatch, o: _CopyOptions, framed: bool, signature: bool = False) -> bytes:
    """The rows, concatenated or each framed as a CopyData message ('d', length, row); with
    `signature`, the binary file header starts the first row's message (as PostgreSQL sends it)."""
    n = batch.num_rows
    if n == 0:
        return b""
    rows = _copy_rows(batch, o)
    sig = COPY_BINARY_HEADER if signature else b""
    if rows and isinstance(rows[0], bytes):
        if not framed:
            return sig + b"".join(rows)
        rows[0] = sig + rows[0]
        return b"".join(b"d" + struct.pack("!i", len(r) + 4) + r for r in rows)
    segs = rows
    if framed:
        totals = np.zeros(n, np.int64)
        for p, w in segs:
            totals += _seg_lens(p, w, n)
        first = np.zeros(n, bool)
        first[0] = signature
        frame: list[_Seg] = [
            (_Const(b"d"), None),
            (_Fixed(4, [(0, totals + 4 + len(sig) * first, np.dtype(">i4"))]), None),
        ]
        if signature:
            frame.append((_Const(sig), first))
        segs = frame + segs
        sig = b""
    return sig + _join(_assemble(n, segs)[0])


def encode_copy(
    batch: pa.RecordBatch,
    fmt: str,
    *,
    delimiter: str | None = None,
    null: str | None = None,
    header: bool = False,
    quote: str | None = None,
    escape: str | None = None,
    force_quote: bool | str | Sequence[str] | None = None,
) -> bytes:
    """The CopyData payload of `COPY (query) TO STDOUT` for a batch: format 'text' (tab, '\\N',
    backslash escapes), 'csv' (comma, empty NULL, quoting as PostgreSQL does) or 'binary' (tuples
    only: COPY_BINARY_HEADER and COPY_BINARY_TRAILER are the caller's). `header` prepends the
    column names (text and csv; PostgreSQL refuses it for binary). PostgreSQL sends one row per
    CopyData message and clients (psycopg's Copy.rows()) rely on it: CopyEncoder frames them so."""
    names = batch.schema.names
    o = _copy_options(names, fmt, delimiter, null, header, quote, escape, force_quote)
    if isinstance(batch, pa.Table):
        return o.header + b"".join(_copy_encode(b, o, False) for b in batch.to_batches())
    return o.header + _copy_encode(batch, o, False)


class CopyEncoder:
    """`COPY (query) TO STDOUT` as the backend sends it: CopyData messages of one row each (the
    HEADER line its own message; the binary file header inside the first row's message and the
    trailer alone, as PostgreSQL does). Options as encode_copy's, checked when it is made."""

    def __init__(
        self,
        names: Sequence[str],
        fmt: str,
        *,
        delimiter: str | None = None,
        null: str | None = None,
        header: bool = False,
        quote: str | None = None,
        escape: str | None = None,
        force_quote: bool | str | Sequence[str] | None = None,
    ) -> None:
        self.options = _copy_options(names, fmt, delimiter, null, header, quote, escape, force_quote)
        self._signature_sent = False

    def start(self) -> bytes:
        """The HEADER line's message (text and csv with HEADER), else nothing."""
        h = self.options.header
        return b"d" + struct.pack("!i", len(h) + 4) + h if h else b""

    def rows(self, batch: pa.RecordBatch) -> bytes:
        """One CopyData message per row of the batch."""
        signature = self.options.fmt == "binary" and not self._signature_sent and batch.num_rows > 0
        out = _copy_encode(batch, self.options, True, signature)
        self._signature_sent |= signature
        return out

    def finish(self) -> bytes:
        """The binary trailer's message (with the file header when no row carried it)."""
        if self.options.fmt != "binary":
            return b""
        body = (b"" if self._signature_sent else COPY_BINARY_HEADER) + COPY_BINARY_TRAILER
        return b"d" + struct.pack("!i", len(body) + 4) + body


# -- Bind parameters ---------------------------------------------------------------------------

_MAX_DIMS = 6
_MAX_ELEMENTS = 10_000_000
_NUMERIC_MAX_BEFORE = 131072
_NUMERIC_MAX_AFTER = 16383
_TEXTLIKE = {TEXT, VARCHAR, NAME, BPCHAR, CHAR, UNKNOWN, JSON, XML, 0}


def decode_param(raw: bytes | None, oid: int, fmt: int) -> object:
    """A Bind parameter as a Python value DuckDB accepts (None for NULL). ValueError, with a short
    message, for anything malformed or out of range; the work is bounded by the input's size
    (numerics beyond PostgreSQL's range and arrays beyond 6 dimensions or 10^7 elements are
    refused before they are built)."""
    if raw is None:
        return None
    try:
        if fmt == 1:
            return _decode_binary(bytes(raw), oid)
        if fmt == 0:
            return _decode_text(bytes(raw).decode(), oid)
    except UnicodeDecodeError:
        raise ValueError('invalid byte sequence for encoding "UTF8"') from None
    except ValueError:
        raise
    except (
        struct.error,
        IndexError,
        OverflowError,
        ArithmeticError,
        TypeError,
        KeyError,
        RecursionError,
    ) as exc:
        raise ValueError(f"invalid {TYPE_NAMES.get(oid, 'parameter')} value: {type(exc).__name__}") from None
    raise ValueError(f"unsupported format code {fmt}")


def _exact(raw: bytes, n: int, what: str) -> bytes:
    if len(raw) != n:
        raise ValueError(f"invalid binary {what}: {len(raw)} bytes, expected {n}")
    return raw


_PG_EPOCH = dt.datetime(2000, 1, 1)
_PG_EPOCH_DATE = dt.date(2000, 1, 1)


def _from_micros(us: int, tz: bool) -> object:
    if us == _I64_MAX:
        return "infinity"
    if us == _I64_MIN:
        return "-infinity"
    try:
        v = _PG_EPOCH + dt.timedelta(microseconds=us)
    except OverflowError:
        raise ValueError("timestamp out of range for Python") from None
    return v.replace(tzinfo=dt.UTC) if tz else v


def _decode_binary(raw: bytes, oid: int) -> object:
    if oid == INT2:
        return struct.unpack("!h", _exact(raw, 2, "int2"))[0]
    if oid == INT4:
        return struct.unpack("!i", _exact(raw, 4, "int4"))[0]
    if oid == OID:
        return struct.unpack("!I", _exact(raw, 4, "oid"))[0]
    if oid == INT8:
        return struct.unpack("!q", _exact(raw, 8, "int8"))[0]
    if oid == FLOAT4:
        return struct.unpack("!f", _exact(raw, 4, "float4"))[0]
    if oid == FLOAT8:
        return struct.unpack("!d", _exact(raw, 8, "float8"))[0]
    if oid == BOOL:
        return _exact(raw, 1, "bool") != b"\x00"
    if oid == BYTEA:
        return raw
    if oid == NUMERIC:
        return _numeric_recv(raw)
    if oid == DATE:
        (days,) = struct.unpack("!i", _exact(raw, 4, "date"))
        if days == _I32_MAX:
            return "infinity"
        if days == _I32_MIN:
            return "-infinity"
        try:
            return _PG_EPOCH_DATE + dt.timedelta(days=days)
        except OverflowError:
            raise ValueError("date out of range for Python") from None
    if oid == TIME:
        return _time_of(struct.unpack("!q", _exact(raw, 8, "time"))[0])
    if oid == TIMETZ:
        us, zone = struct.unpack("!qi", _exact(raw, 12, "timetz"))
        t = _time_of(us)
        if isinstance(t, str) or abs(zone) >= 86400:
            raise ValueError("time zone displacement out of range")
        return t.replace(tzinfo=dt.timezone(dt.timedelta(seconds=-zone)))
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return _from_micros(struct.unpack("!q", _exact(raw, 8, "timestamp"))[0], oid == TIMESTAMPTZ)
    if oid == INTERVAL:
        return _interval_value(*struct.unpack("!qii", _exact(raw, 16, "interval")))
    if oid == UUID:
        return str(uuid.UUID(bytes=_exact(raw, 16, "uuid")))
    if oid == JSONB:
        if not raw or raw[0] != 1:
            raise ValueError("unsupported jsonb version number")
        return raw[1:].decode()
    if oid in ELEMENT_OF:
        return _array_recv(raw, oid)
    return raw.decode()


def _time_of(us: int) -> object:
    if not 0 <= us <= 86_400_000_000:
        raise ValueError("time out of range")
    if us == 86_400_000_000:
        return "24:00:00"
    s, frac = divmod(us, 1_000_000)
    return dt.time(s // 3600, s // 60 % 60, s % 60, frac)


def _interval_value(micros: int, days: int, months: int) -> object:
    """timedelta when the interval has no months (DuckDB takes it as INTERVAL); otherwise a string
    DuckDB casts to the same interval."""
    if months:
        return f"{months} months {days} days {micros} microseconds"
    try:
        return dt.timedelta(days=days, microseconds=micros)
    except OverflowError:
        raise ValueError("interval out of range for Python") from None


def _numeric_recv(raw: bytes) -> object:
    if len(raw) < 8:
        raise ValueError("invalid binary numeric: too short")
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", raw)
    if sign == 0xC000:
        return math.nan
    if sign in (0xD000, 0xF000):
        return math.inf if sign == 0xD000 else -math.inf
    if sign not in (0, 0x4000) or ndigits < 0 or dscale < 0 or dscale > 0x3FFF:
        raise ValueError("invalid binary numeric: bad sign or scale")
    if len(raw) != 8 + 2 * ndigits:
        raise ValueError("invalid binary numeric: wrong length")
    groups = struct.unpack_from(f"!{ndigits}H", raw, 8)
    if any(g > 9999 for g in groups):
        raise ValueError("invalid binary numeric: digit out of range")
    digits = "".join(f"{g:04d}" for g in groups) or "0"
    exp = 4 * (weight - ndigits + 1)
    if exp + len(digits) > _NUMERIC_MAX_BEFORE + 4 or max(0, dscale) > _NUMERIC_MAX_AFTER:
        raise ValueError("value overflows numeric format")
    d = decimal.Decimal((1 if sign else 0, tuple(map(int, digits)), exp))
    if dscale == 0:
        return _numeric_value(d, True)
    with decimal.localcontext() as ctx:
        ctx.prec = max(ctx.prec, len(digits) + max(exp, 0) + dscale + 4)  # exact: never rounds
        ctx.Emax, ctx.Emin = decimal.MAX_EMAX, decimal.MIN_EMIN
        d = d.quantize(decimal.Decimal((0, (1,), -dscale)))
    return _numeric_value(d, False)


def _numeric_value(d: decimal.Decimal, integral: bool) -> object:
    """int for integral values DuckDB can hold (128 bits), else the Decimal (DuckDB turns values
    beyond 38 digits into DOUBLE itself). Never builds an int of more than 39 digits."""
    if integral and d.adjusted() < 39:
        v = int(d)
        if -(2**127) <= v < 2**128:
            return v
    return d


_INT_RANGE = {
    INT2: (-(2**15), 2**15 - 1),
    INT4: (-(2**31), 2**31 - 1),
    INT8: (-(2**63), 2**63 - 1),
    OID: (0, 2**32 - 1),
}
_INT_RE = re.compile(
    r"\s*([+-]?)(?:(0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+)|(\d+(?:_\d+)*))\s*", re.ASCII
)
_FLOAT_RE = re.compile(
    r"\s*(?:([+-]?)(nan|inf|infinity)|[+-]?(?:\d+(?:_\d+)*(?:\.(?:\d+(?:_\d+)*)?)?|\.\d+(?:_\d+)*)(?:[eE][+-]?\d+)?)\s*",
    re.ASCII | re.IGNORECASE,
)
_NUMERIC_RE = re.compile(
    r"\s*([+-]?)(?:(nan|inf|infinity)|(\d+(?:_\d+)*)?(?:\.(\d+(?:_\d+)*)?)?(?:[eE]([+-]?\d{1,9}))?)\s*",
    re.ASCII | re.IGNORECASE,
)
_BOOL_WORDS = {
    **dict.fromkeys(("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"), True),
    **dict.fromkeys(("f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"), False),
}


def _decode_text(s: str, oid: int) -> object:
    if oid in _TEXTLIKE:
        return s
    if oid in _INT_RANGE:
        m = _INT_RE.fullmatch(s)
        if not m:
            raise ValueError(f'invalid input syntax for type {TYPE_NAMES[oid]}: "{s[:40]}"')
        v = int(m[2], 0) if m[2] else int(m[3])
        v = -v if m[1] == "-" else v
        lo, hi = _INT_RANGE[oid]
        if not lo <= v <= hi:
            raise ValueError(f'value "{s[:40]}" is out of range for type {TYPE_NAMES[oid]}')
        return v
    if oid in (FLOAT4, FLOAT8):
        m = _FLOAT_RE.fullmatch(s)
        if not m:
            raise ValueError(f'invalid input syntax for type double precision: "{s[:40]}"')
        if m[2]:
            word = m[2].lower()
            v = math.nan if word == "nan" else math.inf
            return -v if m[1] == "-" else v
        v = float(s.replace("_", ""))
        if math.isinf(v):
            raise ValueError(f'"{s[:40]}" is out of range for type double precision')
        return v
    if oid == NUMERIC:
        return _numeric_in(s)
    if oid == BOOL:
        v = _BOOL_WORDS.get(s.strip().lower())
        if v is None:
            raise ValueError(f'invalid input syntax for type boolean: "{s[:40]}"')
        return v
    if oid == BYTEA:
        return _bytea_in(s)
    if oid == DATE:
        return _date_in(s)
    if oid == TIME:
        return _time_in(s)
    if oid == TIMETZ:
        return _time_in(s, tz=True)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return _timestamp_in(s, oid == TIMESTAMPTZ)
    if oid == INTERVAL:
        return _interval_in(s)
    if oid == UUID:
        try:
            return str(uuid.UUID(s.strip()))
        except ValueError:
            raise ValueError(f'invalid input syntax for type uuid: "{s[:40]}"') from None
    if oid == JSONB:
        return s
    if oid in ELEMENT_OF:
        return _array_in(s, ELEMENT_OF[oid])
    return s


def _numeric_in(s: str) -> object:
    """numeric_in, bounded: the digits before the point and the scale are checked against
    PostgreSQL's limits from the text alone, before any number is built."""
    m = _NUMERIC_RE.fullmatch(s)
    if not m or not (m[2] or m[3] or m[4]):
        raise ValueError(f'invalid input syntax for type numeric: "{s[:40]}"')
    if m[2]:
        if m[2].lower() == "nan":
            return math.nan
        return -math.inf if m[1] == "-" else math.inf
    whole = (m[3] or "").replace("_", "")
    frac = (m[4] or "").replace("_", "")
    exp = int(m[5] or 0)
    lead = whole.lstrip("0")
    before = len(lead) + exp if lead else exp - (len(frac) - len(frac.lstrip("0")))
    if (lead or frac.strip("0")) and before > _NUMERIC_MAX_BEFORE:
        raise ValueError("value overflows numeric format")
    if max(0, len(frac) - exp) > _NUMERIC_MAX_AFTER:
        raise ValueError("value overflows numeric format")
    d = decimal.Decimal(f"{m[1]}{whole or '0'}.{frac}e{exp}" if frac else f"{m[1]}{whole or '0'}e{exp}")
    if "." not in s and d == d.to_integral_value():
        return _numeric_value(d, True)
    return d


_HEX_RE = re.compile(r"(?:\s*[0-9a-fA-F]{2})*\s*", re.ASCII)


def _bytea_in(s: str) -> bytes:
    if s.startswith("\\x"):
        body = s[2:]
        if not _HEX_RE.fullmatch(body):
            raise ValueError("invalid hexadecimal data in bytea")
        return bytes.fromhex("".join(body.split()))
    out = bytearray()
    raw = s.encode()
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != 0x5C:
            out.append(c)
            i += 1
        elif raw[i + 1 : i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(rb"[0-3][0-7][0-7]", raw[i + 1 : i + 4]):
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            raise ValueError("invalid input syntax for type bytea")
    return bytes(out)


_DATE_RE = re.compile(r"\s*(\d{4,})-(\d{1,2})-(\d{1,2})(\s+BC)?\s*", re.ASCII | re.IGNORECASE)
_TIME_RE = r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
_ZONE_RE = r"(Z|UTC|[+-]\d{1,2}(?::?\d{2}(?::?\d{2})?)?)"
_TS_RE = re.compile(
    rf"\s*(\d{{4,}})-(\d{{1,2}})-(\d{{1,2}})(?:(?:T|\s+){_TIME_RE})?\s*{_ZONE_RE}?(\s+BC)?\s*",
    re.ASCII | re.IGNORECASE,
)
_TIMEONLY_RE = re.compile(rf"\s*{_TIME_RE}\s*{_ZONE_RE}?\s*", re.ASCII | re.IGNORECASE)
_SPECIAL_TS = {"infinity": "infinity", "+infinity": "infinity", "-infinity": "-infinity"}


def _special(s: str) -> str | None:
    return _SPECIAL_TS.get(s.strip().lower())


def _micros(frac: str | None) -> int:
    """Fractional seconds to microseconds, rounded half up as PostgreSQL does (bounded length)."""
    if not frac:
        return 0
    frac = frac[:7].ljust(7, "0")
    return (int(frac) + 5) // 10


def _zone(z: str | None) -> dt.timezone | None:
    if not z:
        return None
    if z.upper() in ("Z", "UTC"):
        return dt.UTC
    sign = -1 if z[0] == "-" else 1
    body = z[1:].replace(":", "")
    if len(body) <= 2:
        h, m, sec = int(body), 0, 0
    else:
        body = body.rjust(4 if len(body) <= 4 else 6, "0")
        h, m, sec = int(body[:2]), int(body[2:4]), int(body[4:6] or 0)
    if h > 15 or m > 59 or sec > 59:
        raise ValueError(f'time zone displacement out of range: "{z}"')
    return dt.timezone(sign * dt.timedelta(hours=h, minutes=m, seconds=sec))


def _date_in(s: str) -> object:
    sp = _special(s)
    if sp:
        return sp
    m = _DATE_RE.fullmatch(s)
    if not m or m[4]:
        raise ValueError(f'invalid input syntax for type date: "{s[:40]}"')
    try:
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        raise ValueError(f'date out of range: "{s[:40]}"') from None


def _clock(h: str, mi: str, sec: str | None, frac: str | None) -> tuple[int, int]:
    """(seconds since midnight, microseconds); 24:00:00 allowed as PostgreSQL does."""
    total_us = ((int(h) * 60 + int(mi)) * 60 + int(sec or 0)) * 1_000_000 + _micros(frac)
    if int(mi) > 59 or int(sec or 0) > 60 or total_us > 86_400_000_000:
        raise ValueError("time field value out of range")
    return divmod(total_us, 1_000_000)


def _time_in(s: str, tz: bool = False) -> object:
    m = _TIMEONLY_RE.fullmatch(s)
    if not m:
        raise ValueError(f'invalid input syntax for type time: "{s[:40]}"')
    secs, us = _clock(m[1], m[2], m[3], m[4])
    if secs == 86400:
        return "24:00:00"
    t = dt.time(secs // 3600, secs // 60 % 60, secs % 60, us)
    zone = _zone(m[5])
    if tz:
        return t.replace(tzinfo=zone or dt.UTC)
    return t


def _timestamp_in(s: str, tz: bool) -> object:
    sp = _special(s)
    if sp:
        return sp
    m = _TS_RE.fullmatch(s)
    if not m or m[9]:
        raise ValueError(f'invalid input syntax for type timestamp: "{s[:40]}"')
    try:
        day = dt.datetime(int(m[1]), int(m[2]), int(m[3]))
        secs, us = _clock(m[4] or "0", m[5] or "0", m[6], m[7])
        v = day + dt.timedelta(seconds=secs, microseconds=us)
    except (ValueError, OverflowError):
        raise ValueError(f'timestamp out of range: "{s[:40]}"') from None
    if not tz:
        return v
    zone = _zone(m[8]) or dt.UTC
    return v.replace(tzinfo=zone)


_INTERVAL_UNITS = {
    "microsecond": (0, 0, 1), "millisecond": (0, 0, 1000), "second": (0, 0, 1_000_000),
    "minute": (0, 0, 60_000_000), "hour": (0, 0, 3_600_000_000), "day": (0, 1, 0), "week": (0, 7, 0),
    "mon": (1, 0, 0), "month": (1, 0, 0), "year": (12, 0, 0), "decade": (120, 0, 0),
    "century": (1200, 0, 0), "millennium": (12000, 0, 0),
    "us": (0, 0, 1), "usec": (0, 0, 1), "ms": (0, 0, 1000), "msec": (0, 0, 1000), "s": (0, 0, 1_000_000),
    "sec": (0, 0, 1_000_000), "m": (0, 0, 60_000_000), "min": (0, 0, 60_000_000), "h": (0, 0, 3_600_000_000),
    "hr": (0, 0, 3_600_000_000), "d": (0, 1, 0), "w": (0, 7, 0), "y": (12, 0, 0), "yr": (12, 0, 0),
}  # fmt: skip
_INTERVAL_TOKEN = re.compile(
    r"\s*(?:([+-]?\d+(?:\.\d+)?)\s*([a-z]+)\b,?|([+-])?(\d+):(\d{1,2})(?::(\d{1,2})(?:\.(\d+))?)?)", re.ASCII
)
_ISO_INTERVAL = re.compile(
    r"P(?:(\d+(?:\.\d+)?)Y)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?",
    re.ASCII,
)


def _interval_in(s: str) -> object:
    """PostgreSQL interval input: '1 year 2 mons 3 days 04:05:06.7', '@ 1 day ago', '1 day,
    0:00:02' (Python's), ISO 8601 'P1Y2M3DT4H5M6S'. Bounded: one pass over the string."""
    text = s.strip().lower()
    if len(text) > 1000:
        raise ValueError("interval text is too long")
    months = days = micros = 0
    iso = _ISO_INTERVAL.fullmatch(s.strip())
    if iso and s.strip() != "P":
        vals = [decimal.Decimal(g) if g else decimal.Decimal(0) for g in iso.groups()]
        y, mo, w, d, h, mi, sec = vals
        months = int(y * 12 + mo)
        days = int(w * 7 + d)
        micros = int((h * 3600 + mi * 60 + sec) * 1_000_000)
        return _interval_value(micros, days, months)
    ago = False
    if text.startswith("@"):
        text = text[1:]
    if text.endswith(" ago"):
        ago, text = True, text[:-4]
    pos = 0
    seen = False
    while pos < len(text):
        m = _INTERVAL_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f'invalid input syntax for type interval: "{s[:40]}"')
        pos = m.end()
        seen = True
        if m[1] is not None:
            unit = m[2].rstrip("s") if m[2] not in ("s", "ms", "us") else m[2]
            if unit not in _INTERVAL_UNITS:
                unit = {"second": "second", "secs": "sec", "mins": "min", "hrs": "hr", "yrs": "yr"}.get(
                    m[2], unit
                )
            if unit not in _INTERVAL_UNITS:
                raise ValueError(f'invalid input syntax for type interval: "{s[:40]}"')
            mo, d, us = _INTERVAL_UNITS[unit]
            q = decimal.Decimal(m[1])
            months += int(q * mo)
            frac_days = q * d + (q * mo - int(q * mo)) * 30
            days += int(frac_days)
            micros += int(q * us + (frac_days - int(frac_days)) * 86_400_000_000)
        else:
            t = ((int(m[4]) * 60 + int(m[5])) * 60 + int(m[6] or 0)) * 1_000_000 + _micros(m[7])
            micros += -t if m[3] == "-" else t
    if not seen:
        raise ValueError(f'invalid input syntax for type interval: "{s[:40]}"')
    if ago:
        months, days, micros = -months, -days, -micros
    return _interval_value(micros, days, months)


def _array_recv(raw: bytes, oid: int) -> list:
    """array_recv: bounded by the dimension count, the element count and the bytes there are."""
    ndim, flags, elem = struct.unpack_from("!iiI", raw)
    if ndim < 0 or ndim > _MAX_DIMS:
        raise ValueError(f"number of array dimensions ({ndim}) exceeds the maximum allowed ({_MAX_DIMS})")
    if flags not in (0, 1):
        raise ValueError("invalid array flags")
    want = ELEMENT_OF[oid]
    if elem != want and not (want in (TEXT, VARCHAR, NAME, BPCHAR) and elem in (TEXT, VARCHAR, NAME, BPCHAR)):
        raise ValueError(f"binary data has array element type {elem} instead of expected {want}")
    if ndim == 0:
        if len(raw) != 12:
            raise ValueError("invalid binary array: trailing bytes")
        return []
    dims = []
    pos = 12
    count = 1
    for _ in range(ndim):
        size, _lb = struct.unpack_from("!ii", raw, pos)
        pos += 8
        if size < 0:
            raise ValueError("invalid array dimension")
        dims.append(size)
        count *= size
        if count > _MAX_ELEMENTS:
            raise ValueError(f"array has more than {_MAX_ELEMENTS} elements")
    if count * 4 > len(raw) - pos:
        raise ValueError("invalid binary array: too short for its elements")
    flat: list = []
    for _ in range(count):
        (n,) = struct.unpack_from("!i", raw, pos)
        pos += 4
        if n == -1:
            flat.append(None)
            continue
        if n < 0 or pos + n > len(raw):
            raise ValueError("invalid binary array: bad element length")
        flat.append(_decode_binary(raw[pos : pos + n], elem))
        pos += n
    if pos != len(raw):
        raise ValueError("invalid binary array: trailing bytes")
    return _reshape(flat, dims)


def _reshape(flat: list, dims: list[int]) -> list:
    for size in reversed(dims[1:]):
        flat = [flat[i : i + size] for i in range(0, len(flat), size)] if size else [[] for _ in range(0)]
    return flat


_DIMS_RE = re.compile(r"\s*((?:\[\s*[+-]?\d+\s*(?::\s*[+-]?\d+\s*)?\])+)\s*=", re.ASCII)


def _array_in(s: str, elem: int) -> list:
    """array_in: '{a,"b c",NULL,{...}}' with PostgreSQL's quoting and backslash escapes and an
    optional '[1:3]=' decoration; rectangular, at most 6 levels and 10^7 elements."""
    m = _DIMS_RE.match(s)
    pos = m.end() if m else 0
    n = len(s)
    stack: list[list] = []
    result: list | None = None
    count = 0
    leaf_depth: int | None = None
    expect_item = after_item = False
    while pos < n:
        c = s[pos]
        if c.isspace():
            pos += 1
        elif c == "{":
            if stack and not expect_item:
                raise ValueError(f'malformed array literal: "{s[:40]}"')
            if len(stack) >= _MAX_DIMS:
                raise ValueError(f"number of array dimensions exceeds the maximum allowed ({_MAX_DIMS})")
            new: list = []
            if stack:
                stack[-1].append(new)
            stack.append(new)
            pos += 1
            expect_item, after_item = True, False
        elif c == "}":
            if not stack or (stack[-1] and not after_item):
                raise ValueError(f'malformed array literal: "{s[:40]}"')
            done = stack.pop()
            pos += 1
            expect_item, after_item = False, True
            if not stack:
                result = done
                break
        elif c == ",":
            if not stack or not after_item:
                raise ValueError(f'malformed array literal: "{s[:40]}"')
            pos += 1
            expect_item, after_item = True, False
        else:
            if not stack or not expect_item:
                raise ValueError(f'malformed array literal: "{s[:40]}"')
            if leaf_depth is None:
                leaf_depth = len(stack)
            elif leaf_depth != len(stack):
                raise ValueError("multidimensional arrays must have sub-arrays with matching dimensions")
            value, pos, quoted = _array_item(s, pos)
            stack[-1].append(None if not quoted and value.upper() == "NULL" else _decode_text(value, elem))
            count += 1
            if count > _MAX_ELEMENTS:
                raise ValueError(f"array has more than {_MAX_ELEMENTS} elements")
            expect_item, after_item = False, True
    if result is None:
        raise ValueError(f'malformed array literal: "{s[:40]}"')
    if s[pos:].strip():
        raise ValueError(f'malformed array literal: "{s[:40]}": junk after closing right brace')
    _check_rect(result, leaf_depth)
    return result


def _check_rect(root: list, leaf_depth: int | None) -> None:
    """Sub-arrays of one level have one length; elements sit at one depth, lists above it."""
    level, depth = [root], 1
    while True:
        if len({len(x) for x in level}) > 1:
            raise ValueError("multidimensional arrays must have sub-arrays with matching dimensions")
        items = [y for x in level for y in x]
        if leaf_depth is None or depth == leaf_depth:
            if any(isinstance(y, list) for y in items):
                raise ValueError("multidimensional arrays must have sub-arrays with matching dimensions")
            return
        if not all(isinstance(y, list) for y in items):
            raise ValueError("multidimensional arrays must have sub-arrays with matching dimensions")
        level, depth = items, depth + 1


def _array_item(s: str, pos: int) -> tuple[str, int, bool]:
    """One element's text from pos: (text, position after it, was quoted or escaped)."""
    n = len(s)
    out: list[str] = []
    if s[pos] == '"':
        pos += 1
        while pos < n:
            c = s[pos]
            if c == "\\":
                if pos + 1 >= n:
                    break
                out.append(s[pos + 1])
                pos += 2
            elif c == '"':
                return "".join(out), pos + 1, True
            else:
                j = pos
                while j < n and s[j] not in '\\"':
                    j += 1
                out.append(s[pos:j])
                pos = j
        raise ValueError(f'malformed array literal: "{s[:40]}": unterminated quote')
    escaped = False
    trail = 0  # length of trailing unescaped whitespace
    while pos < n:
        c = s[pos]
        if c in ",}":
            break
        if c in '{"':
            raise ValueError(f'malformed array literal: "{s[:40]}": unexpected {c}')
        if c == "\\":
            if pos + 1 >= n:
                raise ValueError(f'malformed array literal: "{s[:40]}"')
            out.append(s[pos + 1])
            escaped = True
            trail = 0
            pos += 2
            continue
        out.append(c)
        trail = trail + 1 if c.isspace() else 0
        pos += 1
    text = "".join(out)
    if trail:
        text = text[:-trail]
    return text, pos, escaped
