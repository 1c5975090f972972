"""Turn a chunk of tensor file names into `tensors` rows: parse each name, read each npy header.

This is the per-file loop of a metadata ingest (a million files is a million opens), so it runs in
helper processes as well as in the ingesting one (`helper_pool.run_ordered`). Helpers return the
rows as columns of Python values (`scan_tensor_columns`), which the ingesting process makes Arrow
arrays of in one C loop each (`columns_table`): a helper that imported pyarrow took ~25 MiB more
(~65 MiB, two of them on two cores), and memory, not the caller's few milliseconds per batch, is
what bounds an ingest of millions of files.

Only files that are complete and well-formed become rows here. Every other file (a name that
fits no pattern, an unreadable or truncated npy) is handed back as *irregular*: the caller judges
it with its full rules (live ingest may wait for it, a one-shot ingest records an error).

A one-shot ingest that computes statistics has them computed here too, for the rows of a directory
without a statistic.csv (`stats_md5`): the helper has just read the file's header and knows where
its data is, so the data is read while the walk goes on, on every core, instead of in a pass of its
own after the walk (the real MindSpore tree: 2.3 s -> see docs/benchmarks.md, real_tree). The
values are those `compute_stats_many` gives (the same kernel, the same jobs).
"""

from __future__ import annotations

import os
from array import array
from itertools import accumulate, chain
from typing import TYPE_CHECKING

from ingest.formats.mindspore.npy_name import (
    TensorNameError,
    parse_tensor_name,
    parse_tensor_names,
    without_op_index,
)
from ingest.formats.npy_header import (
    SCAN_DEFER,
    SCAN_OK,
    STORED_NAMES,
    NpyHeaderError,
    read_npy_header,
    scan_npy_headers,
    stored_as,
)
from ingest.ids import TensorIdHasher

if TYPE_CHECKING:
    import pyarrow as pa

# (run, rank, net, graph_id, iteration, dir_kind): what every file of a leaf directory shares.
LeafContext = tuple[str, int, str, int, int | None, str]
# One leaf directory's share of a batch: context, absolute dir, dir relative to the dump root,
# file names, and for each the original name from mapping.csv (or None).
LeafChunk = tuple[LeafContext, str, str, list[str], list[str | None]]
# A chunk scanned: its context, its well-formed files' values per column of _FILE_COLUMNS (empty
# when there are none), the names of the other files, and the statistics of the well-formed ones
# when they were computed (`ScannedStats`), else None.
ScannedColumns = tuple[LeafContext, list[tuple], list[str], "ScannedStats | None"]
# A chunk's rows before their statistics: context, columns, irregular names.
_ChunkColumns = tuple[LeafContext, list["EncodedColumn"], list[str]]
# Statistics of a chunk's rows: for each row whether it has them, their values per column of
# STAT_VALUE_FIELDS for the rows that do (encoded as the row columns are), and (row index, reason)
# of the rows whose data could not be read.
ScannedStats = tuple[bytes, list["EncodedColumn"], list[tuple[int, str]]]

_CONSTANT_COLUMNS = ("run", "rank", "net", "graph_id", "iteration", "dir_kind")
# Columns filled per file, in the order of the row tuples built below.
_FILE_COLUMNS = (
    "row_id", "rel_path", "file_name", "original_name", "op_type", "file_op_name", "file_op_base",
    "task_id", "stream_id", "timestamp_us", "io", "slot", "format", "dtype", "stored_dtype", "shape",
    "data_offset", "nbytes", "file_size", "name_era",
)  # fmt: skip
# Columns other readers fill; an npy file names its producer and has nothing else to say there.
_READER_COLUMNS = {
    "producer": "mindspore-npy",
    "host_shape": None,
    "op_full_name": None,
    "source_row_id": None,
}
# (tests/ingest/readers/test_leaf_scan.py checks that these three name every column of `tensors`)

_op_base: dict[str, str] = {}  # file op name -> without its -opN (op names repeat across iterations)
_hashers: dict[str, TensorIdHasher] = {}


def _new_op_base(op_name: str) -> str:
    """`op_name` without its -opN, remembered (the cache is cleared past 100,000 names)."""
    if len(_op_base) > 100_000:
        _op_base.clear()
    base = _op_base[op_name] = without_op_index(op_name)
    return base


def scan_tensor_files(batch: list[LeafChunk]) -> list[tuple[pa.Table, list[str]]]:
    """For each chunk of `batch`: `tensors` rows of its well-formed complete files, and the names
    of the others."""
    return [columns_table(scanned) for scanned in scan_tensor_columns(batch)]


def scan_tensor_columns(batch: list[LeafChunk], stats_md5: bool | None = None) -> list[ScannedColumns]:
    """`scan_tensor_files` without pyarrow (what helpers run): for each chunk, its rows as
    columns of Python values, and the names of its irregular files; with `stats_md5` (not None:
    whether an md5 is computed too), the statistics of the rows of a directory that has no
    statistic.csv (whose rows would be its tensors' statistics)."""
    out: list[ScannedColumns] = []
    for ctx, dir_path, rel_dir, names, originals in batch:
        hasher = _hashers.get(ctx[0])
        if hasher is None:
            hasher = _hashers[ctx[0]] = TensorIdHasher(ctx[0])
        scan = scan_npy_headers(dir_path, names)
        if scan is None:
            _, columns, irregular = _scan_chunk(ctx, dir_path, rel_dir, names, originals, hasher)
        else:
            _, columns, irregular = _scan_chunk_c(ctx, dir_path, rel_dir, names, originals, hasher, scan)
        stats = None
        dir_prefix = dir_path + os.sep
        if columns and stats_md5 is not None and not os.path.exists(dir_prefix + "statistic.csv"):
            stats = _scanned_stats(columns, dir_prefix, stats_md5)
        out.append((ctx, columns, irregular, stats))
    return out


def _scan_chunk(
    ctx: LeafContext, dir_path: str, rel_dir: str, names: list[str], originals: list[str | None], hasher
) -> _ChunkColumns:
    """One chunk, headers read by read_npy_header (without the C reader; the reference of the C path)."""
    rows = []
    irregular: list[str] = []
    dir_prefix = dir_path + os.sep
    rel_prefix = rel_dir + "/"
    for name, original in zip(names, originals, strict=True):
        try:
            tn = parse_tensor_name(original or name)
            header, size = read_npy_header(dir_prefix + name)
        except (TensorNameError, NpyHeaderError, OSError):
            irregular.append(name)
            continue
        op_name = tn.op_name
        base = _op_base.get(op_name) or _new_op_base(op_name)
        rel = rel_prefix + name
        stored, nbytes = stored_as(header, size)
        rows.append(
            (
                hasher(rel), rel, name, original, tn.op_type, op_name, base, tn.task_id,
                tn.stream_id, tn.timestamp_us, tn.io, tn.slot, tn.format, tn.dtype or stored,
                stored, header.shape, header.data_offset, nbytes, size, tn.era,
            )
        )  # fmt: skip
    columns = zip(_FILE_KINDS, zip(*rows, strict=True), strict=True) if rows else ()
    return ctx, [_encode(kind, values) for kind, values in columns], irregular


# The header columns of _FILE_COLUMNS (stored_dtype, shape, data_offset, nbytes, file_size): where
# they start, and how many.
_HEADER_AT, _HEADER_N = _FILE_COLUMNS.index("stored_dtype"), 5


def _scan_chunk_c(
    ctx: LeafContext,
    dir_path: str,
    rel_dir: str,
    names: list[str],
    originals: list[str | None],
    hasher,
    scan,
) -> _ChunkColumns:
    """`_scan_chunk` with the headers read and the names parsed in C (`scan_npy_headers`,
    `parse_tensor_names`; what either leaves undecided goes to the Python): the same columns. When the
    rows are exactly the files the C reader accepted (nearly always) its buffers are the header
    columns as they are; a file it leaves to Python (DEFER), or one it read whose name is bad, makes
    the header columns be built per row as `_scan_chunk` does."""
    status, stored_idx = scan.status, memoryview(scan.stored).cast("i")
    rows = []
    headers: list = []  # per row: its index among the C reader's files, or the Python-read values
    irregular: list[str] = []
    exact = True  # the rows are the C reader's files, all of them
    dir_prefix = dir_path + os.sep
    rel_prefix = rel_dir + "/"
    k = -1
    # names parsed in C too, where it is sure to give parse_tensor_name's fields (else None)
    fields = parse_tensor_names(
        [o or n for n, o in zip(names, originals, strict=True)] if any(originals) else names
    )
    for i, (name, original) in enumerate(zip(names, originals, strict=True)):
        st = status[i]
        if st == SCAN_OK:
            k += 1
        tn = fields[i]
        if tn is None:
            try:
                tn = parse_tensor_name(original or name)
            except TensorNameError:
                irregular.append(name)
                exact = exact and st != SCAN_OK
                continue
        op_type, op_name, task_id, stream_id, timestamp_us, io, slot, fmt, dtype, era = tn
        if st == SCAN_OK:
            stored = STORED_NAMES[stored_idx[k]]
            headers.append(k)
        elif st == SCAN_DEFER:
            try:
                header, size = read_npy_header(dir_prefix + name)
            except (NpyHeaderError, OSError):
                irregular.append(name)
                continue
            stored, nbytes = stored_as(header, size)
            headers.append((stored, header.shape, header.data_offset, nbytes, size))
            exact = False
        else:
            irregular.append(name)
            continue
        base = _op_base.get(op_name) or _new_op_base(op_name)
        rel = rel_prefix + name
        rows.append(
            (
                hasher(rel), rel, name, original, op_type, op_name, base, task_id,
                stream_id, timestamp_us, io, slot, fmt, dtype or stored, era,
            )
        )  # fmt: skip
    if not rows:
        return ctx, [], irregular
    kinds = _FILE_KINDS[:_HEADER_AT] + _FILE_KINDS[_HEADER_AT + _HEADER_N :]
    columns = [_encode(kind, values) for kind, values in zip(kinds, zip(*rows, strict=True), strict=True)]
    n = len(rows)
    if exact:
        header_columns = [
            _encode("s", tuple(map(STORED_NAMES.__getitem__, stored_idx))),
            ("l", n, None, scan.shape_offsets, scan.dims),
            ("q", n, None, None, scan.data_offset),
            ("q", n, None, None, scan.nbytes),
            ("q", n, None, None, scan.file_size),
        ]
    else:
        header_columns = [
            _encode(kind, values)
            for kind, values in zip(
                _FILE_KINDS[_HEADER_AT : _HEADER_AT + _HEADER_N],
                zip(*_header_values(headers, scan), strict=True),
                strict=True,
            )
        ]
    columns[_HEADER_AT:_HEADER_AT] = header_columns
    return ctx, columns, irregular


def _header_values(headers: list, scan) -> list[tuple]:
    """(stored, shape, data_offset, nbytes, file_size) per row, from the C reader's buffers (an
    index) or as read_npy_header read them (a tuple)."""
    stored = memoryview(scan.stored).cast("i")
    offset, nbytes, size = (memoryview(b).cast("q") for b in (scan.data_offset, scan.nbytes, scan.file_size))
    ends = memoryview(scan.shape_offsets).cast("i")
    dims = memoryview(scan.dims).cast("q")
    return [
        h
        if type(h) is tuple
        else (STORED_NAMES[stored[h]], tuple(dims[ends[h] : ends[h + 1]]), offset[h], nbytes[h], size[h])
        for h in headers
    ]


def _scanned_stats(columns: list[EncodedColumn], dir_prefix: str, md5: bool) -> ScannedStats:
    """Statistics of a chunk's scanned rows (`columns`, encoded as they travel), as
    `compute_stats_many` computes those of the same `tensors` rows: the same job of each (an npy
    file's data is in host layout, so no device format or host shape), the same batch function."""
    from ingest.statistics.kernel import STAT_KEYS, compute_stats_batch

    at = _FILE_COLUMNS.index
    row_ids, names, offsets, stored, shapes, formats = (
        _values(columns[at(name)])
        for name in ("row_id", "file_name", "data_offset", "stored_dtype", "shape", "format")
    )
    jobs = [
        (row_id, dir_prefix + name, offset, dtype, shape, fmt, None)
        for row_id, name, offset, dtype, shape, fmt in zip(
            row_ids, names, offsets, stored, shapes, formats, strict=True
        )
    ]
    ok = bytearray(len(jobs))
    values: list[tuple] = []
    errors: list[tuple[int, str]] = []
    for i, (_, stats, error) in enumerate(compute_stats_batch(jobs, md5)):
        if error is not None:
            errors.append((i, error))
            continue
        ok[i] = 1
        values.append(tuple(stats.get(name) for name in STAT_KEYS))
    columns = zip(_STAT_KINDS, zip(*values, strict=True), strict=True)
    encoded = [_encode(kind, column) for kind, column in columns]
    return bytes(ok), encoded if values else [], errors


def _values(column: EncodedColumn) -> list:
    """The Python values of an encoded column (the inverse of `_encode`)."""
    kind, n, validity, offsets, data = column
    if kind in "qid":
        values = memoryview(data).cast(kind).tolist()
    else:
        ends = memoryview(offsets).cast("i").tolist()
        if kind == "l":
            dims = memoryview(data).cast("q").tolist()
            values = [tuple(dims[ends[i] : ends[i + 1]]) for i in range(n)]
        else:
            text = data.decode("utf-8", "surrogateescape")
            if len(text) == len(data):  # ASCII: character offsets are the byte offsets
                values = [text[ends[i] : ends[i + 1]] for i in range(n)]
            else:
                values = [data[ends[i] : ends[i + 1]].decode("utf-8", "replace") for i in range(n)]
    if validity is not None:
        values = [v if validity[i >> 3] >> (i & 7) & 1 else None for i, v in enumerate(values)]
    return values


# How each of _FILE_COLUMNS travels from a helper: as the buffers of its Arrow array (q: int64,
# i: int32, d: float64, s: string, l: list of int64), built with the standard library's `array`
# (helpers import neither pyarrow nor numpy), wrapped by the ingesting process without a copy
# (`pa.Array.from_buffers`). Converting Python values there instead (`pa.array(list)`) was a third
# of its walk (10^5 tensors: ~0.4 s of ~1.2 s), and pyarrow's first conversion of Python values
# imports pandas when it is installed (0.3-0.8 s on this machine), which from_buffers never does.
_FILE_KINDS = (
    "q", "s", "s", "s", "s", "s", "s", "q",
    "q", "q", "s", "i", "s", "s", "s", "l",
    "q", "q", "q", "s",
)  # fmt: skip
# How each statistic (kernel.STAT_KEYS, in the order of STAT_VALUE_FIELDS) travels: the helper that
# computes them imports numpy for the kernel, but not pyarrow (~25 MiB more each), so not the schema.
_STAT_KINDS = ("d", "d", "d", "q", "q", "q", "q", "q", "q", "q", "d", "s")
# An encoded column: (kind, rows, validity bitmap or None, offsets or None, data), buffers as bytes.
EncodedColumn = tuple[str, int, "bytes | None", "bytes | None", bytes]


def _validity(values: tuple) -> bytes | None:
    """Arrow's validity bitmap of `values` (bit i set: values[i] is not None), None when none is."""
    if None not in values:
        return None
    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits)


def _encode(kind: str, values: tuple) -> EncodedColumn:
    """One column's values as the buffers of its Arrow array (see _FILE_KINDS)."""
    n = len(values)
    validity = _validity(values)
    if kind in "qid":
        filled = values if validity is None else [0 if v is None else v for v in values]
        return kind, n, validity, None, array(kind, filled).tobytes()
    if kind == "l":
        shapes = values if validity is None else [() if v is None else v for v in values]
        offsets = array("i", accumulate(map(len, shapes), initial=0))
        return kind, n, validity, offsets.tobytes(), array("q", chain.from_iterable(shapes)).tobytes()
    texts = values if validity is None else ["" if v is None else v for v in values]
    joined = "".join(texts)
    if joined.isascii():  # (nearly always: one byte a character, the lengths are the str lengths)
        offsets = array("i", accumulate(map(len, texts), initial=0))
        return kind, n, validity, offsets.tobytes(), joined.encode("ascii")
    encoded = [t.encode("utf-8", "replace") for t in texts]  # (a lone surrogate: "?", as valid UTF-8)
    offsets = array("i", accumulate(map(len, encoded), initial=0))
    return kind, n, validity, offsets.tobytes(), b"".join(encoded)


def _decode(column: EncodedColumn, type_: pa.DataType) -> pa.Array:
    """The Arrow array of an encoded column (its buffers wrapped, not copied)."""
    import pyarrow as pa

    kind, n, validity, offsets, data = column
    mask = None if validity is None else pa.py_buffer(validity)
    if kind in "qid":
        return pa.Array.from_buffers(type_, n, [mask, pa.py_buffer(data)])
    if kind == "l":
        values = pa.Array.from_buffers(pa.int64(), len(data) // 8, [None, pa.py_buffer(data)])
        return pa.Array.from_buffers(type_, n, [mask, pa.py_buffer(offsets)], children=[values])
    return pa.Array.from_buffers(type_, n, [mask, pa.py_buffer(offsets), pa.py_buffer(data)])


def columns_table(scanned: ScannedColumns) -> tuple[pa.Table, list[str]]:
    """A scanned chunk as (`tensors` rows, irregular names)."""
    import pyarrow as pa

    from ingest.storage.schema import TENSORS

    ctx, values, irregular, _ = scanned
    if not values:
        return TENSORS.empty_table(), irregular
    n = values[0][1]
    columns = dict(zip(_FILE_COLUMNS, values, strict=True))
    arrays = []
    for field in TENSORS:
        if field.name in columns:
            arrays.append(_decode(columns[field.name], field.type))
        else:
            value = (
                _READER_COLUMNS[field.name]
                if field.name in _READER_COLUMNS
                else ctx[_CONSTANT_COLUMNS.index(field.name)]
            )
            arrays.append(_repeated(value, n, field.type))
    return pa.Table.from_arrays(arrays, schema=TENSORS), irregular


def stats_table(scanned: ScannedColumns, tensors: pa.Table) -> tuple[pa.Table, list[tuple[str, str]]] | None:
    """The `tensor_stats` rows a scan computed for the chunk whose `tensors` rows are `tensors`
    (`columns_table`), as `computed_stats_rows` makes them (the keys from the tensors rows, the
    values from the data), and (rel_path, reason) of the rows whose data could not be read; None
    when the scan computed none."""
    import pyarrow as pa

    from ingest.statistics.rows import STAT_VALUES, stats_rows_of

    if scanned[3] is None:
        return None
    ok, columns, errors = scanned[3]
    if errors:
        rels = tensors.column("rel_path").to_pylist()
        tensors = tensors.filter(pa.array([flag == 1 for flag in ok], pa.bool_()))
    arrays = [_decode(column, field.type) for column, field in zip(columns, STAT_VALUES, strict=True)]
    values = pa.Table.from_arrays(arrays, schema=STAT_VALUES) if arrays else STAT_VALUES.empty_table()
    return stats_rows_of(tensors, values), [(rels[i], reason) for i, reason in errors]


def _repeated(value: object, n: int, type_: pa.DataType) -> pa.Array:
    """`value` n times, as a column of `type_` (a scalar broadcast: no Python list of n values)."""
    import pyarrow as pa

    if value is None:
        return pa.nulls(n, type_)
    if pa.types.is_string(type_):
        data = str(value).encode("utf-8", "replace")
        offsets = (
            array("i", range(0, len(data) * n + 1, len(data))) if data else array("i", bytes(4 * (n + 1)))
        )
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])
    code = "q" if type_.bit_width == 64 else "i"
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(array(code, [int(value)]) * n)])
