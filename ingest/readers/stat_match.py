"""Join `statistic.csv` rows to the tensor files they describe, and check what the files contradict.

A pure step of the ingest: rows and file keys in, rows with `row_id` and `mismatch` out. A row is
matched by (op type, op name, io, slot, timestamp), else by the same key without the timestamp when
exactly one file has it; its Shape and Data Size are then compared with the file's npy header.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.formats.npy_header import NpyHeaderError, read_npy_header
from ingest.storage.schema import TABLES

_MATCH_EXACT = ["op_type", "file_op_name", "io", "slot", "timestamp_us"]
_MATCH_LOOSE = _MATCH_EXACT[:-1]
# A tensor file's match keys, plus what a statistic row is checked against (shape and nbytes from
# the npy header; NULL for a file whose header was not read yet, see `match_stat_rows`).
_FILE_FACTS = ["row_id", "file_name", "format", "shape", "nbytes"]
FILE_KEYS = pa.schema([TABLES["tensors"].field(c) for c in [*_MATCH_EXACT, *_FILE_FACTS]])

# Device layouts (Ascend, trans_flag false): the npy holds the device shape (e.g. 5-D NC1HWC0),
# which a csv may legitimately give as the logical shape, so the shape is not compared.
_DEVICE_LAYOUTS = frozenset(
    {
        "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "C1HWNCoC0", "NC1HWC0_C04", "FRACTAL_Z_C04",
        "NDC1HWC0", "FRACTAL_Z_3D", "FRACTAL_ZN_LSTM", "FRACTAL_ZN_RNN", "ND_RNN_BIAS",
    }
)  # fmt: skip
# Dtypes converted before the npy is written (bf16 -> float32, int4 -> int8, uint1 -> uint8):
# the csv's Data Size is the packed buffer, so it is compared with elements * bits / 8, rounded up.
_PACKED_BITS = {"bfloat16": 16, "int4": 4, "uint1": 1}


def match_stat_rows(table: pa.Table, files: pa.Table, dir_path: str | None = None) -> pa.Table:
    """Give each statistic row the row id of its tensor file (NULL when none matches), and say
    what that file contradicts (`mismatch`).

    Host-mode rows carry the same timestamp as the file name, so (op, io, slot, timestamp)
    matches exactly; device-stat rows have their own timestamp, so fall back to (op, io, slot)
    when exactly one file in the directory has it. A key that several files share matches none
    of them. Two hash joins, so a directory of 10^5 files costs milliseconds.

    A matched file whose shape is not known yet (cataloged by an earlier ingest, or not scanned)
    has its npy header read from `dir_path`, if given. Also appended, for the ingest_errors note:
    `_file_name`, `_file_shape` and `_file_bytes` (the byte size the csv's Data Size should be).
    """
    n = table.num_rows
    facts = None
    if files.num_rows:
        files = files.append_column("_file", pa.array(np.arange(files.num_rows, dtype=np.int64)))
        order = pa.array(np.arange(n, dtype=np.int64))
        stat_keys = table.select(_MATCH_EXACT).append_column("_order", order)
        found = []
        for keys in (_MATCH_EXACT, _MATCH_LOOSE):
            unique = (
                files.group_by(keys)
                .aggregate([("_file", "min"), ("_file", "count")])
                .filter(pc.equal(pc.field("_file_count"), 1))
                .select([*keys, "_file_min"])
            )
            joined = stat_keys.select([*keys, "_order"]).join(unique, keys, join_type="left outer")
            found.append(joined.sort_by("_order").column("_file_min"))
        index = pc.coalesce(*found).combine_chunks()
        facts = {c: _column(files, c).take(index) for c in _FILE_FACTS}
    if facts is None:
        facts = {c: pa.nulls(n, FILE_KEYS.field(c).type) for c in _FILE_FACTS}
    if dir_path is not None:
        facts = _read_missing_headers(facts, dir_path)
    mismatch, expected = _stat_mismatch(table, facts)
    table = table.append_column("row_id", facts["row_id"].cast(pa.int64()))
    table = table.append_column("mismatch", mismatch)
    table = table.append_column("_file_name", facts["file_name"])
    table = table.append_column("_file_shape", facts["shape"])
    return table.append_column("_file_bytes", expected)


def _column(table: pa.Table, name: str) -> pa.Array:
    """A file-keys column, all NULL when the table lacks it (callers may pass keys only)."""
    if name in table.column_names:
        return table.column(name).combine_chunks()
    return pa.nulls(table.num_rows, FILE_KEYS.field(name).type)


def _read_missing_headers(facts: dict[str, pa.Array], dir_path: str) -> dict[str, pa.Array]:
    """Shape and nbytes of matched files not known yet, from their npy headers (a file that
    cannot be read is left unknown: it is not checked, and its own error is reported elsewhere)."""
    need = pc.and_(pc.is_valid(facts["row_id"]), pc.is_null(facts["nbytes"]))
    rows = np.flatnonzero(need.to_numpy(zero_copy_only=False))
    if not len(rows):
        return facts
    shapes = facts["shape"].to_pylist()
    nbytes = facts["nbytes"].to_pylist()
    names = facts["file_name"].to_pylist()
    read: dict[str, tuple[list[int], int] | None] = {}
    for i in rows:
        name = names[i]
        if name is None:
            continue
        if name not in read:
            try:
                header, _ = read_npy_header(os.path.join(dir_path, name))
                read[name] = (list(header.shape), header.nbytes)
            except (NpyHeaderError, OSError):
                read[name] = None
        if read[name] is not None:
            shapes[i], nbytes[i] = read[name]
    facts = dict(facts)
    facts["shape"] = pa.array(shapes, FILE_KEYS.field("shape").type)
    facts["nbytes"] = pa.array(nbytes, pa.int64())
    return facts


def _stat_mismatch(table: pa.Table, facts: dict[str, pa.Array]) -> tuple[pa.Array, pa.Array]:
    """(`mismatch`, expected byte size) per statistic row: 'shape', 'nbytes', 'shape,nbytes' or
    NULL. A value absent on either side (NULL shape or Data Size, no matched file, a header not
    read) is no contradiction."""
    n = table.num_rows
    csv_shape = _stat_column(table, "shape", facts["shape"].type)
    shape_bad = _shapes_differ(csv_shape, facts["shape"])
    if shape_bad.any():
        layout = pc.is_in(facts["format"], pa.array(sorted(_DEVICE_LAYOUTS)))
        shape_bad &= ~layout.fill_null(False).to_numpy(zero_copy_only=False)
    expected = facts["nbytes"]
    dtype = pc.utf8_lower(_stat_column(table, "data_type", pa.string()))
    packed = pc.is_in(dtype, pa.array(list(_PACKED_BITS))).fill_null(False).to_numpy(zero_copy_only=False)
    if packed.any():
        bits = np.zeros(n, dtype=np.int64)
        for name, b in _PACKED_BITS.items():
            bits[pc.equal(dtype, name).fill_null(False).to_numpy(zero_copy_only=False)] = b
        packed_bytes = (_elements(facts["shape"]) * bits + 7) // 8
        use = pa.array(packed & pc.is_valid(facts["shape"]).to_numpy(zero_copy_only=False))
        expected = pc.if_else(use, pa.array(packed_bytes, pa.int64()), expected)
    size = _stat_column(table, "data_size", pa.int64())
    nbytes_bad = pc.fill_null(pc.not_equal(size, expected), False).to_numpy(zero_copy_only=False)
    labels = np.array([None, "nbytes", "shape", "shape,nbytes"], dtype=object)
    mismatch = pa.array(labels[shape_bad.astype(np.int64) * 2 + nbytes_bad], pa.string())
    return mismatch, expected


def _stat_column(table: pa.Table, name: str, typ: pa.DataType) -> pa.Array:
    if name in table.column_names:
        return table.column(name).combine_chunks()
    return pa.nulls(table.num_rows, typ)


def _shapes_differ(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per row: both shapes known and not equal (list columns, compared without a Python loop)."""
    both = pc.and_(pc.is_valid(a), pc.is_valid(b)).to_numpy(zero_copy_only=False)
    len_a = pc.list_value_length(a).fill_null(0).to_numpy(zero_copy_only=False)
    len_b = pc.list_value_length(b).fill_null(0).to_numpy(zero_copy_only=False)
    differ = both & (len_a != len_b)
    same = np.flatnonzero(both & (len_a == len_b))
    if len(same):
        take = pa.array(same)
        sub_a, sub_b = a.take(take), b.take(take)
        flat_a = pc.list_flatten(sub_a).to_numpy(zero_copy_only=False)
        flat_b = pc.list_flatten(sub_b).to_numpy(zero_copy_only=False)
        parents = pc.list_parent_indices(sub_a).to_numpy(zero_copy_only=False)
        differ[same[np.unique(parents[flat_a != flat_b])]] = True
    return differ


def _elements(shapes: pa.Array) -> np.ndarray:
    """Element count of each shape (a scalar `[]` has one; NULL gives 1 too, callers mask it)."""
    lengths = pc.list_value_length(shapes).fill_null(0).to_numpy(zero_copy_only=False)
    out = np.ones(len(lengths), dtype=np.int64)
    rows = np.flatnonzero(lengths)
    if len(rows):
        flat = pc.list_flatten(shapes).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        starts = (np.cumsum(lengths) - lengths)[rows]  # non-empty rows' segments are contiguous
        out[rows] = np.multiply.reduceat(flat, starts)
    return out


def mismatch_note(table: pa.Table) -> str | None:
    """The ingest_errors reason for a statistic.csv chunk whose rows contradict their files."""
    if "mismatch" not in table.column_names or table.column("mismatch").null_count == table.num_rows:
        return None
    bad = table.filter(pc.is_valid(table.column("mismatch")))
    first = bad.slice(0, 1).to_pylist()[0]
    what = first["mismatch"].split(",")
    file = first["_file_name"]
    parts = []
    if "shape" in what:
        parts.append(f"shape {first['shape']} in the csv, {first['_file_shape']} in {file}")
    if "nbytes" in what:
        parts.append(f"Data Size {first['data_size']} in the csv, {first['_file_bytes']} bytes in {file}")
    count = bad.num_rows
    rows = "1 row disagrees with its" if count == 1 else f"{count} rows disagree with their"
    return f"{rows} tensor file; first: line {first['line_no']} " + "; ".join(parts)


def file_keys(rows: list[tuple]) -> pa.Table:
    """The keys of tensor files given as (op_type, op_name, io, slot, timestamp, row_id,
    file_name, format, shape, nbytes)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in FILE_KEYS]
    return pa.Table.from_arrays(
        [pa.array(col, f.type) for col, f in zip(columns, FILE_KEYS, strict=True)], schema=FILE_KEYS
    )
