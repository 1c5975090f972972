"""Parser for MindSpore's ``statistic.csv`` (and its look-alikes) into STAT_ROWS-typed arrow tables.

Why this module exists and is shaped the way it is:

* The header differs by version (20 columns in v1.6-2.2, ``+MD5`` in 2.2.14, user-ordered and
  user-chosen from 2.3, dev-build spellings such as ``Nan Count``/``L2 Value``, msprobe's
  ``Input/Output``/``Format``/``MD5 Value``), so columns are mapped *by header name*, never by
  position.
* From v2.3 every data row ends with a trailing comma, one field more than the header. That
  extra empty field is accepted; any other field-count mismatch is a per-line error.
* MindSpore writes the header only when it creates the file and appends header-less rows on
  reruns, and a running job keeps appending. So the reader is resumable from a byte offset
  (the header is re-read from line 1), and a final line without ``'\\n'`` is left unconsumed.
* Files reach millions of rows, so parsing is vectorised: numpy finds line boundaries and field
  counts, pyarrow.csv splits the well-formed lines into string columns, and pyarrow compute casts
  them. The ``csv`` module is only a fallback for chunks pyarrow rejects. Files are streamed in
  bounded chunks.
* Bad content never raises: each bad line becomes one ``(line_no, reason)`` entry in ``errors``;
  only an unreadable file raises ``OSError``.

Line numbers are 1-based physical lines of the file (the header is line 1). Errors not tied to a
line (a resume offset that no longer fits the file) use line number 0. Blank lines are skipped
silently (they lose no data). ``io`` is lower-cased. An empty field is NULL in every column;
``null`` is NULL in numeric and shape columns but kept literally in string columns (op names).
Stat columns absent from the header are NULL.

``Timestamp`` should be µs since the epoch, but files written in seconds (often with a fraction,
``1795302020.817320``), milliseconds or nanoseconds exist. The unit is told by the magnitude of the
integer part, and ``timestamp_us`` is always µs:

* ``< 1e8``: no epoch time after 1973-03-03 in any unit (1e8 s is that date; 1e8 ms and 1e8 µs
  are a day and 100 s after 1970-01-01). Such values (``0``, a counter, a negative number) are not
  rescaled: they are kept as written, fraction dropped, so they still equal the same number in a
  tensor file name.
* ``1e8 .. 1e11``: seconds; ``1e11 .. 1e14``: milliseconds; ``1e14 .. 1e17``: microseconds;
  ``>= 1e17``: nanoseconds. Each range covers the dates 1973-03-03 .. 5138-11-16 in its unit
  (nanoseconds: up to 2262-04-11, the int64 limit), so no real epoch value is ambiguous.

Digits finer than a µs are dropped (truncated); a fraction is read digit by digit, not through a
float, so ``1795302020.817320`` is exactly ``1795302020817320``. Exponent notation is not accepted.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ingest.storage.schema import STAT_ROWS, STAT_VALUE_FIELDS

__all__ = ["OUTPUT_SCHEMA", "StatCsvResult", "parse_statistic_csv_bytes", "read_statistic_csv"]

_OUT_NAMES = [
    "line_no",
    "op_type",
    "file_op_name",
    "task_id",
    "stream_id",
    "timestamp_us",
    "io",
    "slot",
    "data_size",
    "data_type",
    "format",
    "shape",
    *(name for name, _ in STAT_VALUE_FIELDS),
]

#: Schema of ``StatCsvResult.table``: the STAT_ROWS fields a csv line can supply, same types.
OUTPUT_SCHEMA = pa.schema([STAT_ROWS.field(name) for name in _OUT_NAMES])

# Normalised header name (casefolded, whitespace collapsed) -> output column.
_HEADER_ALIASES: dict[str, str] = {
    "op type": "op_type",
    "op name": "file_op_name",
    "task id": "task_id",
    "stream id": "stream_id",
    "timestamp": "timestamp_us",
    "io": "io",
    "input/output": "io",  # msprobe / CANN acl-dump processor
    "slot": "slot",
    "data size": "data_size",
    "data type": "data_type",
    "format": "format",  # msprobe only
    "shape": "shape",
    "max value": "max",
    "min value": "min",
    "avg value": "avg",
    "count": "count",
    # MindSpore's names are misleading: these count elements < 0 and > 0 (reference §1.3).
    "negative zero count": "neg_count",
    "positive zero count": "pos_count",
    "nan count": "nan_count",  # 'NaN Count' and the 2024-06 dev spelling 'Nan Count'
    "negative inf count": "neg_inf_count",
    "positive inf count": "pos_inf_count",
    "zero count": "zero_count",
    "l2norm value": "l2norm",
    "l2 value": "l2norm",  # 2024-05-30..06-03 dev builds
    "l2norm": "l2norm",  # CANN device-side lines
    "md5": "md5",
    "md5 value": "md5",  # msprobe
}
_REQUIRED = ("op_type", "file_op_name", "io", "slot")
_STRING_COLS = frozenset({"op_type", "file_op_name", "io", "data_type", "format", "md5"})
_NULL_STRING = pa.scalar(None, pa.string())

_INT_RE = r"^-?[0-9]+$"
# A decimal Timestamp: integer part and optional fraction (seconds and milliseconds carry one).
_DECIMAL_RE = r"^\s*\+?(?P<int>-?[0-9]+)(?:\.(?P<frac>[0-9]*))?\s*$"
# Timestamp unit by the magnitude of the integer part (see the module docstring).
_EPOCH_FLOOR = 10**8  # below: not an epoch time in any unit, kept as written
_SECONDS_BELOW = 10**11
_MILLIS_BELOW = 10**14
_MICROS_BELOW = 10**17  # at or above: nanoseconds
_FLOAT_RE = r"(?i)^[-+]?(([0-9]+\.?[0-9]*|\.[0-9]+)(e[-+]?[0-9]+)?|nan|inf|infinity)$"
# MSVC prints NaN as 'nan(ind)' / '-nan(ind)'; normalise before casting.
_MSVC_NAN_RE = r"(?i)^([-+]?)nan\([a-z0-9_]*\)$"
_SHAPE_RE = r"^\s*[\(\[]\s*(-?[0-9]+\s*(,\s*-?[0-9]+\s*)*,?)?\s*[\)\]]\s*$"

_DEFAULT_CHUNK_BYTES = 16 << 20
_MAX_LINE_BYTES = 1 << 20  # real rows are < 1 KiB; longer 'lines' are garbage
# A field longer than this (an op name of 10^5 characters) makes its row an error: real op names
# are under 1 KiB (MindSpore renames a tensor file whose name passes 255 bytes, see mapping.csv).
# Kept, 2,000 such rows (a 542 MB file) became one half-GB batch: the writer's DuckDB retried its
# joins up to 3.9 GiB and the ingest took a minute and 2.9 GB (a 30 GB malloc in Table.cast for the
# issue's reporter). Checked on lines longer than this only, so real files pay nothing.
MAX_FIELD_BYTES = 64 << 10


@dataclass
class StatCsvResult:
    """What one parse of (part of) a statistic.csv produced, plus where to resume."""

    table: pa.Table  # OUTPUT_SCHEMA
    errors: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason)
    end_offset: int = 0  # byte offset just after the last complete line consumed
    end_line: int = 0  # physical lines consumed so far, header included
    header: list[str] = field(default_factory=list)  # raw header fields


@dataclass
class _Header:
    raw: list[str]
    nfields: int  # expected data fields (a trailing comma may add one empty field)
    cols: dict[str, int]  # output column -> field index
    labels: dict[str, str]  # output column -> header name as written (for error messages)


def _empty_table() -> pa.Table:
    return OUTPUT_SCHEMA.empty_table()


def _parse_header(line: bytes) -> tuple[list[str], _Header | None, str | None]:
    """Map header fields to output columns; returns (raw fields, header or None, error reason)."""
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")
    try:
        raw = next(csv.reader([text]), [])
    except csv.Error:
        raw = text.split(",")
    nfields = len(raw)
    if nfields > 1 and raw[-1].strip() == "":
        nfields -= 1  # tolerate a header that itself ends in a comma
    cols: dict[str, int] = {}
    labels: dict[str, str] = {}
    for idx, name in enumerate(raw[:nfields]):
        key = _HEADER_ALIASES.get(" ".join(name.split()).casefold())
        if key is not None and key not in cols:  # first occurrence wins; unknown names ignored
            cols[key] = idx
            labels[key] = name.strip()
    missing = [k for k in _REQUIRED if k not in cols]
    if missing:
        shown = text if len(text) <= 120 else text[:117] + "..."
        reason = f"no recognisable statistic.csv header (missing {', '.join(missing)}): {shown!r}"
        return raw, None, reason
    return raw, _Header(raw, nfields, cols, labels), None


# --------------------------------------------------------------------------------------------
# Splitting complete lines into string columns
# --------------------------------------------------------------------------------------------


@dataclass
class _Lines:
    """Per-line structure of a buffer of complete lines, computed with numpy in a few passes."""

    starts: np.ndarray
    ends: np.ndarray  # index of the '\n'
    content_end: np.ndarray  # exclusive, before an optional '\r'
    nfields: np.ndarray
    odd_quotes: np.ndarray
    last_is_comma: np.ndarray


def _scan_lines(buf: np.ndarray) -> _Lines:
    """Line boundaries and field counts; ``buf`` must end with '\\n'.

    Field count = commas per line - commas inside quoted fields + 1. Both comma counts are
    differences of positions in the sorted comma offsets (``np.searchsorted``): 8 bytes per
    comma, where segment sums over the comma mask (``np.add.reduceat``) cast the whole chunk to
    int64 first, 8 bytes per byte (128 MB for a 16 MB chunk).
    """
    ends = np.flatnonzero(buf == 10)
    n = len(ends)
    starts = np.empty(n, dtype=np.int64)
    if not n:
        return _Lines(starts, ends, ends, starts, starts.astype(bool), starts.astype(bool))
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    nonempty = ends > starts
    content_end = ends - (nonempty & (buf[ends - 1] == 13))
    commas = np.flatnonzero(buf == 44)
    nfields = np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1
    quotes = np.flatnonzero(buf == 34)
    odd_quotes = np.zeros(n, dtype=bool)
    if len(quotes):
        nquotes = np.searchsorted(quotes, ends) - np.searchsorted(quotes, starts)
        odd_quotes = (nquotes & 1).astype(bool)
        if odd_quotes.any():  # drop those lines' quotes so the rest pair up within their lines
            quotes = quotes[~odd_quotes[np.searchsorted(ends, quotes)]]
    if len(quotes):
        opening, closing = quotes[::2], quotes[1::2]  # [q0,q1), [q2,q3), ...
        inside = np.searchsorted(commas, closing) - np.searchsorted(commas, opening)
        pair_line = np.searchsorted(ends, opening)
        nfields -= np.bincount(pair_line, weights=inside, minlength=n).astype(np.int64)
    last_is_comma = (content_end > starts) & (buf[np.maximum(content_end - 1, 0)] == 44)
    return _Lines(starts, ends, content_end, nfields, odd_quotes, last_is_comma)


def _arrow_split(data: pa.Buffer, ncols: int, wanted: list[int], nrows: int) -> dict[int, pa.Array] | None:
    """Split well-formed lines into string columns with pyarrow.csv; None if it disagrees."""
    names = [f"c{i}" for i in range(ncols)]
    try:
        table = pacsv.read_csv(
            data,
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=8 << 20),
            parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types={f"c{i}": pa.string() for i in wanted},
                include_columns=[f"c{i}" for i in wanted],
                strings_can_be_null=True,
                null_values=[""],  # 'null' only means NULL in numeric columns: see _null_token
            ),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != nrows:
        return None
    return {i: table.column(f"c{i}").combine_chunks() for i in wanted}


def _python_split(
    buf: np.ndarray, lines: _Lines, idx: np.ndarray, ncols: int, wanted: list[int]
) -> tuple[dict[int, pa.Array], np.ndarray, list[tuple[int, str]]]:
    """Slow, forgiving per-line split used when pyarrow rejects a chunk (e.g. bad UTF-8).

    Returns the columns for the lines that split cleanly, their positions in ``idx``, and the
    reasons for the others.
    """
    values: dict[int, list[str | None]] = {i: [] for i in wanted}
    kept: list[int] = []
    errors: list[tuple[int, str]] = []
    raw = buf.tobytes()
    for pos, li in enumerate(idx):
        chunk = raw[lines.starts[li] : lines.content_end[li]]
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError:
            errors.append((int(li), "line is not valid UTF-8"))
            continue
        try:
            fields = next(csv.reader([text]), [])
        except csv.Error as exc:
            errors.append((int(li), f"unparseable CSV line: {exc}"))
            continue
        if len(fields) != ncols:
            errors.append((int(li), f"expected {ncols} fields, found {len(fields)}"))
            continue
        kept.append(pos)
        for i in wanted:
            v = fields[i]
            values[i].append(v or None)
    cols = {i: pa.array(v, type=pa.string()) for i, v in values.items()}
    return cols, np.asarray(kept, dtype=np.int64), errors


# --------------------------------------------------------------------------------------------
# Typed conversion of string columns
# --------------------------------------------------------------------------------------------


def _valid_mask(arr: pa.Array, pattern: str) -> np.ndarray:
    """True where the value is NULL or matches ``pattern``."""
    return pc.match_substring_regex(arr, pattern).fill_null(True).to_numpy(zero_copy_only=False)


def _cast_masked(arr: pa.Array, ok: np.ndarray, typ: pa.DataType, convert) -> tuple[pa.Array, np.ndarray]:
    """Cast the values where ``ok``; values the cast still rejects are found one by one."""
    masked = pc.if_else(pa.array(ok), arr, _NULL_STRING)
    try:
        return pc.cast(masked, typ), ~ok
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out: list = []
    bad = ~ok
    for i, s in enumerate(masked.to_pylist()):
        if s is None:
            out.append(None)
            continue
        try:
            out.append(convert(s))
        except (ValueError, OverflowError):
            out.append(None)
            bad[i] = True
    return pa.array(out, type=typ), bad


def _null_token(arr: pa.Array) -> pa.Array:
    """``null`` (≤2.2 Max/Min/Avg, device-mode stats of dtype none) -> NULL.

    Only numeric and shape columns get this: an op could legitimately be named ``null``.
    """
    return pc.if_else(pc.equal(arr, "null"), _NULL_STRING, arr)


def _to_int(arr: pa.Array, typ: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    try:
        return pc.cast(arr, typ), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        arr = _null_token(arr)
        limit = 1 << (typ.bit_width - 1)

        def convert(s: str) -> int:
            v = int(s)
            if not -limit <= v < limit:
                raise OverflowError(s)
            return v

        return _cast_masked(arr, _valid_mask(arr, _INT_RE), typ, convert)


def _to_timestamp_us(arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """Timestamps in s, ms, µs or ns (told apart by magnitude) -> µs, vectorised.

    Integers cast directly; otherwise one regex splits integer part and fraction, and the first
    nine fraction digits give the sub-unit part exactly (no float rounding)."""
    frac9 = None
    bad = None
    try:
        whole = pc.cast(arr, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        arr = _null_token(arr)
        parts = pc.extract_regex(arr, _DECIMAL_RE)
        ok = pc.or_kleene(pc.is_valid(parts), pc.is_null(arr)).to_numpy(zero_copy_only=False)
        whole, bad = _to_int(pc.struct_field(parts, "int"), pa.int64())
        bad = ~ok if bad is None else (bad | ~ok)
        digits = pc.utf8_slice_codeunits(pc.utf8_rpad(pc.struct_field(parts, "frac"), 9, "0"), 0, 9)
        frac9 = pc.cast(digits, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    v = whole.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if frac9 is None:
        frac9 = np.zeros(len(v), dtype=np.int64)
    with np.errstate(over="ignore"):  # np.select computes every branch; the unused ones may wrap
        us = np.select(
            [v < _EPOCH_FLOOR, v < _SECONDS_BELOW, v < _MILLIS_BELOW, v < _MICROS_BELOW],
            [v, v * 1_000_000 + frac9 // 1_000, v * 1_000 + frac9 // 1_000_000, v],
            v // 1_000,
        )
    mask = pc.is_null(whole).to_numpy(zero_copy_only=False)
    out = pa.array(us, type=pa.int64(), mask=mask if mask.any() else None)
    if bad is not None and not bad.any():
        bad = None
    return out, bad


def _to_float(arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    try:
        return pc.cast(arr, pa.float64()), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        norm = pc.replace_substring_regex(_null_token(arr), _MSVC_NAN_RE, r"\1nan")
        return _cast_masked(norm, _valid_mask(norm, _FLOAT_RE), pa.float64(), float)


def _shape_from_text(s: str) -> list[int]:
    inner = s.strip().strip("()[]")
    return [int(p) for p in inner.split(",") if p.strip()]


def _to_shape(arr: pa.Array) -> tuple[pa.Array, np.ndarray | None]:
    """``"(2,3)"`` -> [2, 3], ``"()"`` -> [] (the CSV layer already removed the quotes)."""
    typ = OUTPUT_SCHEMA.field("shape").type
    ok = _valid_mask(arr, _SHAPE_RE)
    if not ok.all():  # rare: only then pay for the 'null' pass
        arr = _null_token(arr)
        ok = _valid_mask(arr, _SHAPE_RE)
    bad = None if ok.all() else ~ok
    valid = pa.array(ok) if bad is not None else None
    src = pc.if_else(valid, arr, _NULL_STRING) if valid is not None else arr
    inner = pc.replace_substring_regex(src, r"[\s\(\)\[\]]", "")
    parts = pc.split_pattern(inner, ",")
    flat = pc.list_flatten(parts)
    parents = pc.list_parent_indices(parts).to_numpy()
    keep = pc.not_equal(flat, "").fill_null(False)
    flat = flat.filter(keep)
    parents = parents[keep.to_numpy(zero_copy_only=False)]
    try:
        values = pc.cast(flat, pa.int64())
    except (pa.ArrowInvalid, OverflowError):  # a dimension beyond int64: fall back row by row
        out: list[list[int] | None] = []
        bad = np.zeros(len(arr), dtype=bool) if bad is None else bad
        for i, s in enumerate(src.to_pylist()):
            try:
                shape = None if s is None else _shape_from_text(s)
                pa.array([shape], type=typ)
            except (ValueError, OverflowError, pa.ArrowInvalid):
                shape = None
                bad[i] = True
            out.append(shape)
        return pa.array(out, type=typ), bad
    offsets = np.zeros(len(arr) + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents, minlength=len(arr)), out=offsets[1:])
    mask = pc.is_null(src)
    result = pa.ListArray.from_arrays(pa.array(offsets), values, type=typ, mask=mask)
    return result, bad


def _convert(
    hdr: _Header, cols: dict[int, pa.Array], line_nos: np.ndarray
) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Type every mapped column; rows with a missing required value or a bad number become errors."""
    n = len(line_nos)
    bad = np.zeros(n, dtype=bool)
    reasons: dict[int, str] = {}

    def flag(mask: np.ndarray | None, name: str, raw: pa.Array | None, what: str) -> None:
        if mask is None:
            return
        new = np.flatnonzero(mask & ~bad)
        for i in new:
            label = hdr.labels.get(name, name)
            value = "" if raw is None else raw[int(i)].as_py()
            reasons[int(i)] = f"{what} {label!r}: {value!r}" if value else f"{what} {label!r}"
        bad[new] = True

    out: dict[str, pa.Array] = {"line_no": pa.array(line_nos, type=pa.int64())}
    for name in _REQUIRED:
        arr = cols[hdr.cols[name]]
        if arr.null_count:
            flag(pc.is_null(arr).to_numpy(zero_copy_only=False), name, None, "missing required")
    for fld in OUTPUT_SCHEMA:
        name = fld.name
        if name == "line_no":
            continue
        if name not in hdr.cols:
            out[name] = pa.nulls(n, fld.type)
            continue
        arr = cols[hdr.cols[name]]
        if name == "io":
            out[name] = pc.utf8_lower(arr)
        elif name in _STRING_COLS:
            out[name] = arr
        elif name == "timestamp_us":
            out[name], mask = _to_timestamp_us(arr)
            flag(mask, name, arr, "unparseable timestamp in")
        elif name == "shape":
            out[name], mask = _to_shape(arr)
            flag(mask, name, arr, "unparseable")
        elif pa.types.is_floating(fld.type):
            out[name], mask = _to_float(arr)
            flag(mask, name, arr, "unparseable number in")
        else:
            out[name], mask = _to_int(arr, fld.type)
            flag(mask, name, arr, "unparseable integer in")
    table = pa.Table.from_arrays([out[f.name] for f in OUTPUT_SCHEMA], schema=OUTPUT_SCHEMA)
    errors = [(int(line_nos[i]), r) for i, r in reasons.items()]
    if bad.any():
        table = table.filter(pa.array(~bad))
    return table, errors


def _parse_lines(
    view: memoryview | bytes, hdr: _Header, first_line_no: int
) -> tuple[list[pa.Table], list[tuple[int, str]], int]:
    """Parse a buffer of complete data lines; returns (tables, errors, number of lines)."""
    buf = np.frombuffer(view, dtype=np.uint8)
    lines = _scan_lines(buf)
    nlines = len(lines.ends)
    if not nlines:
        return [], [], 0
    line_nos = first_line_no + np.arange(nlines, dtype=np.int64)
    blank = lines.content_end == lines.starts
    expected = hdr.nfields
    errors: list[tuple[int, str]] = []
    oversize = _oversize_lines(view, lines, hdr, line_nos, errors)
    plain = (lines.nfields == expected) & ~lines.odd_quotes & ~blank & ~oversize
    trailing = (lines.nfields == expected + 1) & lines.last_is_comma & ~lines.odd_quotes & ~blank & ~oversize
    for li in np.flatnonzero(~(plain | trailing | blank | oversize)):
        if lines.odd_quotes[li]:
            reason = "unbalanced double quote"
        else:
            found = int(lines.nfields[li])
            reason = f"expected {expected} fields (or {expected + 1} with a trailing comma), found {found}"
        errors.append((int(line_nos[li]), reason))

    wanted = sorted(hdr.cols.values())
    tables: list[pa.Table] = []
    for group, ncols in ((plain, expected), (trailing, expected + 1)):
        idx = np.flatnonzero(group)
        if not len(idx):
            continue
        if len(idx) == nlines:
            data = pa.py_buffer(view)
        else:  # copy just this group's lines (each line including its '\n')
            data = pa.py_buffer(buf[np.repeat(group, lines.ends - lines.starts + 1)])
        cols = _arrow_split(data, ncols, wanted, len(idx))
        if cols is None:
            cols, kept, split_errors = _python_split(buf, lines, idx, ncols, wanted)
            errors.extend((int(line_nos[li]), r) for li, r in split_errors)
            idx = idx[kept]
        table, conv_errors = _convert(hdr, cols, line_nos[idx])
        errors.extend(conv_errors)
        tables.append(table)
    if len(tables) == 2:  # a file with both row shapes: restore file order
        both = pa.concat_tables(tables)
        tables = [both.take(pc.sort_indices(both.column("line_no")))]
    return tables, errors, nlines


def _oversize_lines(
    view: memoryview | bytes, lines: _Lines, hdr: _Header, line_nos: np.ndarray, errors: list[tuple[int, str]]
) -> np.ndarray:
    """Lines holding a field over MAX_FIELD_BYTES, or over _MAX_LINE_BYTES in all: each is an error
    naming its line and the cap, and is not parsed (the other lines are)."""
    long = (lines.content_end - lines.starts) > MAX_FIELD_BYTES
    if not long.any():
        return long
    labels = {i: name for name, i in hdr.cols.items()}
    for li in np.flatnonzero(long):
        start, end = int(lines.starts[li]), int(lines.content_end[li])
        if end - start > _MAX_LINE_BYTES:
            errors.append((int(line_nos[li]), f"line longer than {_MAX_LINE_BYTES} bytes"))
            continue
        text = bytes(view[start:end]).decode("utf-8", errors="replace")
        try:
            fields = next(csv.reader([text]), [])
        except csv.Error:
            fields = text.split(",")
        sizes = [len(f.encode("utf-8", errors="replace")) for f in fields]
        big = max(range(len(sizes)), key=sizes.__getitem__)
        if sizes[big] > MAX_FIELD_BYTES:
            name = hdr.labels.get(labels.get(big, ""), f"field {big + 1}")
            errors.append(
                (int(line_nos[li]), f"{name!r} is {sizes[big]:,} bytes, over the {MAX_FIELD_BYTES:,}-byte "
                 "cap on a statistic.csv field: row skipped")
            )  # fmt: skip
        else:
            long[li] = False  # a long line of ordinary fields: parsed as any other
    return long


def _finish(tables: list[pa.Table], errors: list[tuple[int, str]]) -> tuple[pa.Table, list]:
    tables = [t for t in tables if t.num_rows]
    table = pa.concat_tables(tables) if tables else _empty_table()
    return table, sorted(errors)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def parse_statistic_csv_bytes(
    data: bytes, header_line: bytes | None = None, first_line_no: int = 1
) -> StatCsvResult:
    """Parse an in-memory piece of a statistic.csv.

    With ``header_line=None`` the first line of ``data`` is the header (line ``first_line_no``);
    otherwise ``header_line`` (the file's line 1) supplies the columns and ``data`` holds only
    data lines, the first being line ``first_line_no``. Only complete lines are consumed:
    ``end_offset`` is relative to ``data`` and ``end_line`` is the last consumed line number.
    """
    last_nl = data.rfind(b"\n")
    if last_nl < 0:
        return StatCsvResult(_empty_table(), [], 0, first_line_no - 1, [])
    consumed = last_nl + 1
    header_no = 1
    body_start = 0
    body_line = first_line_no
    if header_line is None:
        nl = data.find(b"\n")
        header_line = data[: nl + 1]
        header_no = first_line_no
        body_start = nl + 1
        body_line = first_line_no + 1
    raw, hdr, reason = _parse_header(header_line)
    view = memoryview(data)[body_start:consumed]
    if hdr is None:
        nlines = data.count(b"\n", body_start, consumed)
        end_line = body_line - 1 + nlines
        return StatCsvResult(_empty_table(), [(header_no, str(reason))], consumed, end_line, raw)
    tables, errors, nlines = _parse_lines(view, hdr, body_line)
    table, errors = _finish(tables, errors)
    return StatCsvResult(table, errors, consumed, body_line - 1 + nlines, raw)


def read_statistic_csv(path: str | os.PathLike, start_offset: int = 0, start_line: int = 0) -> StatCsvResult:
    """Parse a statistic.csv from ``start_offset`` (0, or a previous ``end_offset``) to its last full line.

    On resume (``start_offset > 0``) the header is still read from the file's first line, since
    appended reruns carry no header; lines are numbered from ``start_line + 1``. The file is
    streamed in bounded chunks. Raises only ``OSError`` (missing/unreadable file).
    """
    return _read_statistic_csv(path, start_offset, start_line, _DEFAULT_CHUNK_BYTES)


def _read_statistic_csv(
    path: str | os.PathLike, start_offset: int, start_line: int, chunk_bytes: int
) -> StatCsvResult:
    """``read_statistic_csv`` with a configurable chunk size (tests use tiny chunks)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if start_offset > size:
            problem = f"start_offset {start_offset} is beyond the file size {size} (truncated or replaced?)"
            return StatCsvResult(_empty_table(), [(0, problem)], start_offset, start_line, [])
        header_line = f.readline(_MAX_LINE_BYTES)
        if not header_line.endswith(b"\n"):
            if len(header_line) < _MAX_LINE_BYTES:  # header still being written, or empty file
                return StatCsvResult(_empty_table(), [], start_offset, start_line, [])
            header_line += b"\n"  # an absurdly long first line: let it fail as a header
        raw, hdr, reason = _parse_header(header_line)
        if start_offset == 0:
            pos = f.tell()
            next_line = start_line + 2  # the header was line start_line + 1
        else:
            f.seek(start_offset - 1)
            if f.read(1) != b"\n":
                problem = f"start_offset {start_offset} is not at a line boundary"
                return StatCsvResult(_empty_table(), [(0, problem)], start_offset, start_line, raw)
            pos = start_offset
            next_line = start_line + 1
        tables: list[pa.Table] = []
        # A missing header is reported once, on the first read, not again on every resume.
        errors: list[tuple[int, str]] = [(1, str(reason))] if hdr is None and start_offset == 0 else []
        consumed = pos
        carry = b""
        skipping = 0  # bytes so far of an over-long line that is dropped instead of buffered
        f.seek(pos)
        while block := f.read(chunk_bytes):
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    skipping += len(block)
                    continue
                if hdr is not None:
                    errors.append((next_line, f"line longer than {_MAX_LINE_BYTES} bytes"))
                next_line += 1
                consumed += skipping + nl + 1
                skipping = 0
                block = block[nl + 1 :]
            data = carry + block if carry else block
            last_nl = data.rfind(b"\n")
            if last_nl >= 0:
                if hdr is None:  # count lines only, so the caller can record the file as consumed
                    nlines = data.count(b"\n", 0, last_nl + 1)
                else:
                    view = memoryview(data)[: last_nl + 1]
                    chunk_tables, chunk_errors, nlines = _parse_lines(view, hdr, next_line)
                    tables.extend(chunk_tables)
                    errors.extend(chunk_errors)
                next_line += nlines
                consumed += last_nl + 1
            carry = data[last_nl + 1 :]
            if len(carry) > _MAX_LINE_BYTES:  # keep memory bounded on newline-less garbage
                skipping, carry = len(carry), b""
    table, errors = _finish(tables, errors)
    return StatCsvResult(table, errors, consumed, next_line - 1, raw)
