"""Find a tensor's file by row id, fast enough that `Catalog.tensor` costs about what
`np.load(mmap_mode='r')` costs.

A DuckDB point query over parquet costs around a millisecond. Each flat tensors file
(ingest/storage/flat.py) has a sidecar `index.arrow`: its location columns (row id, run, path, data
offset, dtype, shape, ...) sorted by row id, in Arrow IPC batches. The sidecar is memory-mapped,
never loaded: a lookup is a `searchsorted` over the batches' first ids, one over the batch's
ids, and a few reads of the batch's buffers, a few microseconds; the first lookup on a catalog
of 10^6 tensors maps one file (well under a millisecond), whatever its size.

Catalogs written before flat files existed have no sidecars: their batches' lookup columns are
loaded and sorted instead (`_BatchIndex`), which costs a whole-index load on the first call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.storage.flat import INDEX_SCHEMA

_COLUMNS = [
    "row_id",
    "run",
    "rel_path",
    "data_offset",
    "stored_dtype",
    "shape",
    "format",
    "host_shape",
    "nbytes",
]
_NEWER = {"host_shape"}  # columns older catalogs do not have (read as NULL)


@dataclass(frozen=True, slots=True)
class TensorLocation:
    """Where a tensor's bytes are and how they are laid out (see ingest.formats.tensor_data)."""

    row_id: int
    run: str
    rel_path: str
    data_offset: int
    stored_dtype: str
    shape: tuple[int, ...]
    format: str | None = None
    host_shape: tuple[int, ...] | None = None  # set when `shape`/`format` are a device layout
    nbytes: int | None = None


class _BatchIndex:
    def __init__(self, path: Path) -> None:
        present = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[c for c in _COLUMNS if c in present])
        for name in _COLUMNS:
            if name not in present and name in _NEWER:
                table = table.append_column(name, pa.nulls(table.num_rows, pa.list_(pa.int64())))
        ids = table.column("row_id").to_numpy()
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.table = table.take(pa.array(order))

    def find(self, row_id: int) -> TensorLocation | None:
        i = int(np.searchsorted(self.ids, row_id))
        if i >= len(self.ids) or self.ids[i] != row_id:
            return None
        return self._location(i)

    def find_many(self, row_ids: np.ndarray) -> dict[int, TensorLocation]:
        """The locations of those of `row_ids` this batch holds (one vectorised search)."""
        return {int(self.ids[i]): self._location(int(i)) for i in _positions(self.ids, row_ids)}

    def _location(self, i: int) -> TensorLocation:
        row = {c: self.table.column(c)[i].as_py() for c in _COLUMNS}
        host = row["host_shape"]
        return TensorLocation(
            row["row_id"],
            row["run"],
            row["rel_path"],
            row["data_offset"],
            row["stored_dtype"],
            tuple(row["shape"]),
            row["format"],
            None if host is None else tuple(host),
            row["nbytes"],
        )


def _positions(sorted_ids: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
    """Positions in `sorted_ids` of those of `row_ids` it holds."""
    if not len(sorted_ids) or not len(row_ids):
        return np.empty(0, np.intp)
    i = np.searchsorted(sorted_ids, row_ids)
    inside = i < len(sorted_ids)
    i = i[inside]
    return i[sorted_ids[i] == row_ids[inside]]


# The sidecar's columns are read from their Arrow buffers with numpy: pyarrow's `to_numpy`, `unique`,
# `dictionary_encode` and `is_valid` import pandas and pyarrow.compute, ~0.3 s of a first `tensor()`.


def _validity(arr: pa.Array) -> np.ndarray | None:
    """The array's validity as booleans, or None when it has no nulls."""
    if arr.null_count == 0:
        return None
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + len(arr)].astype(bool)


def _int64s(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, validity or None) of an int64 array (a null's value is undefined)."""
    values = np.frombuffer(arr.buffers()[1], np.int64, arr.offset + len(arr))[arr.offset :]
    return values, _validity(arr)


def _strings(arr: pa.Array) -> tuple[np.ndarray, pa.Buffer, np.ndarray | None]:
    """(offsets, data, validity or None) of a string array."""
    _, offsets, data = arr.buffers()
    return np.frombuffer(offsets, np.int32, arr.offset + len(arr) + 1)[arr.offset :], data, _validity(arr)


def _string_at(column: tuple[np.ndarray, pa.Buffer, np.ndarray | None], i: int) -> str | None:
    offsets, data, valid = column
    if valid is not None and not valid[i]:
        return None
    return data[offsets[i] : offsets[i + 1]].to_pybytes().decode("utf-8")


def _lists(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(offsets, values, validity or None) of a list<int64> array."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32, arr.offset + len(arr) + 1)[arr.offset :]
    return offsets, _int64s(arr.values)[0], _validity(arr)


def _list_at(column: tuple[np.ndarray, np.ndarray, np.ndarray | None], i: int) -> tuple[int, ...] | None:
    offsets, values, valid = column
    if valid is not None and not valid[i]:
        return None
    return tuple(values[offsets[i] : offsets[i + 1]].tolist())


class _SidecarBatch:
    """Zero-copy numpy views of one record batch of a sidecar, made on first use."""

    __slots__ = ("dtypes", "formats", "host", "ids", "nbytes", "offsets", "paths", "runs", "shapes")

    def __init__(self, batch: pa.RecordBatch) -> None:
        col = batch.column
        self.ids = _int64s(col(0))[0]
        self.runs = _strings(col(1))
        self.paths = _strings(col(2))
        self.offsets = _int64s(col(3))[0]
        self.dtypes = _strings(col(4))
        self.shapes = _lists(col(5))
        self.formats = _strings(col(6))
        self.host = _lists(col(7))
        self.nbytes = _int64s(col(8))

    def location(self, i: int) -> TensorLocation:
        nbytes, nbytes_valid = self.nbytes
        return TensorLocation(
            int(self.ids[i]),
            _string_at(self.runs, i),
            _string_at(self.paths, i),
            int(self.offsets[i]),
            _string_at(self.dtypes, i),
            _list_at(self.shapes, i) or (),
            _string_at(self.formats, i),
            _list_at(self.host, i),
            None if nbytes_valid is not None and not nbytes_valid[i] else int(nbytes[i]),
        )


class _SidecarIndex:
    """One flat tensors file's `index.arrow`, memory-mapped; its batches are sorted by row id."""

    def __init__(self, path: Path) -> None:
        self._reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        n = self._reader.num_record_batches
        self._raw = [self._reader.get_batch(i) for i in range(n)]
        self._firsts = np.array([b.column(0)[0].as_py() for b in self._raw if len(b)], np.int64)
        self._raw = [b for b in self._raw if len(b)]
        self._views: list[_SidecarBatch | None] = [None] * len(self._raw)
        if self._raw and self._raw[0].schema != INDEX_SCHEMA:
            raise ValueError(f"{path}: unexpected index schema")

    def _view(self, b: int) -> _SidecarBatch:
        view = self._views[b]
        if view is None:
            view = self._views[b] = _SidecarBatch(self._raw[b])
        return view

    def find_many(self, row_ids: np.ndarray) -> dict[int, TensorLocation]:
        """The locations of those of `row_ids` this file holds: one search over the batches' first
        ids, one per batch touched."""
        out: dict[int, TensorLocation] = {}
        if not len(self._firsts):
            return out
        batch_of = np.searchsorted(self._firsts, row_ids, side="right") - 1
        for b in np.unique(batch_of[batch_of >= 0]).tolist():
            view = self._view(b)
            for i in _positions(view.ids, row_ids[batch_of == b]).tolist():
                out[int(view.ids[i])] = view.location(i)
        return out

    def find(self, row_id: int) -> TensorLocation | None:
        b = int(np.searchsorted(self._firsts, row_id, side="right")) - 1
        if b < 0:
            return None
        view = self._view(b)
        i = int(np.searchsorted(view.ids, row_id))
        if i >= len(view.ids) or view.ids[i] != row_id:
            return None
        return view.location(i)


class TensorIndex:
    """row id -> TensorLocation across the committed batches of a catalog."""

    def __init__(self) -> None:
        self._batches: dict[str, _BatchIndex | _SidecarIndex] = {}

    def sync(self, tensor_files: list[str], flat_index_files: list[str] | None = None) -> None:
        """Follow the catalog's live files: the flat sidecars when it has them, else its batches."""
        if flat_index_files is not None:
            live = set(flat_index_files)
            for path in list(self._batches):
                if path not in live:
                    del self._batches[path]
            for path in flat_index_files:
                if path not in self._batches:
                    self._batches[path] = _SidecarIndex(Path(path))
            return
        live = set(tensor_files)
        for path in list(self._batches):
            if path not in live:
                del self._batches[path]
        for path in tensor_files:
            if path not in self._batches:
                self._batches[path] = _BatchIndex(Path(path))

    def find(self, row_id: int) -> TensorLocation | None:
        found = self.find_with_source(row_id)
        return None if found is None else found[0]

    def find_with_source(self, row_id: int) -> tuple[TensorLocation, str] | None:
        """The location and the file (sidecar or batch) it was found in: its shard's dump root
        is the one the location's path is relative to."""
        for path, batch in self._batches.items():
            loc = batch.find(row_id)
            if loc is not None:
                return loc, path
        return None

    def find_many(self, row_ids: np.ndarray) -> dict[int, tuple[TensorLocation, str]]:
        """`find_with_source` of many row ids at once (distinct int64s, in any order): row id ->
        (location, file) for those found; each file is searched once for all the ids still missing."""
        out: dict[int, tuple[TensorLocation, str]] = {}
        pending = np.sort(np.asarray(row_ids, np.int64))
        for path, batch in self._batches.items():
            if not len(pending):
                break
            found = batch.find_many(pending)
            for row_id, loc in found.items():
                out.setdefault(row_id, (loc, path))
            if found:
                pending = pending[~np.isin(pending, np.fromiter(found, np.int64, len(found)))]
        return out
