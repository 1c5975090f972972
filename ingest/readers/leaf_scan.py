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
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ingest.formats.mindspore.npy_name import TensorNameError, parse_tensor_name, without_op_index
from ingest.formats.npy_header import NpyHeaderError, read_npy_header, stored_as
from ingest.ids import TensorIdHasher

if TYPE_CHECKING:
    import pyarrow as pa

# (run, rank, net, graph_id, iteration, dir_kind): what every file of a leaf directory shares.
LeafContext = tuple[str, int, str, int, int | None, str]
# One leaf directory's share of a batch: context, absolute dir, dir relative to the dump root,
# file names, and for each the original name from mapping.csv (or None).
LeafChunk = tuple[LeafContext, str, str, list[str], list[str | None]]
# A chunk scanned: its context, its well-formed files' values per column of _FILE_COLUMNS (empty
# when there are none), and the names of the other files.
ScannedColumns = tuple[LeafContext, list[tuple], list[str]]

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


def scan_tensor_files(batch: list[LeafChunk]) -> list[tuple[pa.Table, list[str]]]:
    """For each chunk of `batch`: `tensors` rows of its well-formed complete files, and the names
    of the others."""
    return [columns_table(scanned) for scanned in scan_tensor_columns(batch)]


def scan_tensor_columns(batch: list[LeafChunk]) -> list[ScannedColumns]:
    """`scan_tensor_files` without pyarrow (what helpers run): for each chunk, its rows as
    columns of Python values, and the names of its irregular files."""
    out: list[ScannedColumns] = []
    for ctx, dir_path, rel_dir, names, originals in batch:
        rows = []
        irregular: list[str] = []
        hasher = _hashers.get(ctx[0])
        if hasher is None:
            hasher = _hashers[ctx[0]] = TensorIdHasher(ctx[0])
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
            base = _op_base.get(op_name)
            if base is None:
                if len(_op_base) > 100_000:
                    _op_base.clear()
                base = _op_base[op_name] = without_op_index(op_name)
            rel = rel_prefix + name
            stored, nbytes = stored_as(header, size)
            rows.append(
                (
                    hasher(rel), rel, name, original, tn.op_type, op_name, base, tn.task_id,
                    tn.stream_id, tn.timestamp_us, tn.io, tn.slot, tn.format, tn.dtype or stored,
                    stored, header.shape, header.data_offset, nbytes, size, tn.era,
                )
            )  # fmt: skip
        out.append((ctx, list(zip(*rows, strict=True)), irregular))
    return out


def columns_table(scanned: ScannedColumns) -> tuple[pa.Table, list[str]]:
    """A scanned chunk as (`tensors` rows, irregular names)."""
    import pyarrow as pa

    from ingest.storage.schema import TENSORS

    ctx, values, irregular = scanned
    if not values:
        return TENSORS.empty_table(), irregular
    n = len(values[0])
    columns = dict(zip(_FILE_COLUMNS, values, strict=True))
    arrays = []
    for field in TENSORS:
        if field.name in columns:
            arrays.append(pa.array(columns[field.name], field.type))
        elif field.name in _READER_COLUMNS:
            arrays.append(pa.array([_READER_COLUMNS[field.name]] * n, field.type))
        else:
            value = ctx[_CONSTANT_COLUMNS.index(field.name)]
            arrays.append(pa.array([value] * n, field.type))
    return pa.Table.from_arrays(arrays, schema=TENSORS), irregular
