"""Find a tensor's file by row id, fast enough that `Catalog.tensor` costs about what
`np.load(mmap_mode='r')` costs.

A DuckDB point query over parquet costs around a millisecond, so the lookup columns
(row id, path, data offset, dtype, shape) of each committed batch are loaded once, sorted by
row id, and searched with `numpy.searchsorted`. New batches are loaded as they are committed;
batches already loaded are never re-read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

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
    """Where a tensor's bytes are and how they are laid out (see ingest.tensor_data)."""

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


class TensorIndex:
    """row id -> TensorLocation across the committed batches of a catalog."""

    def __init__(self) -> None:
        self._batches: dict[str, _BatchIndex] = {}

    def sync(self, tensor_files: list[str]) -> None:
        live = set(tensor_files)
        for path in list(self._batches):
            if path not in live:
                del self._batches[path]
        for path in tensor_files:
            if path not in self._batches:
                self._batches[path] = _BatchIndex(Path(path))

    def find(self, row_id: int) -> TensorLocation | None:
        for batch in self._batches.values():
            loc = batch.find(row_id)
            if loc is not None:
                return loc
        return None
