"""The location index behind `Catalog.tensor` (catalog/tensor_index.py): its sidecar batches are read
from their Arrow buffers with numpy, so that a first `tensor()` imports neither pandas nor
pyarrow.compute; pyarrow's own decoding of the same batches is the reference."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa

from catalog.tensor_index import TensorLocation, _SidecarBatch
from ingest.storage.flat import INDEX_SCHEMA
from tests.conftest import REPO, nan_log_catalog

ROWS = [
    {"row_id": 3, "run": "a", "rel_path": "rank_0/x.npy", "data_offset": 128, "stored_dtype": "float32",
     "shape": [2, 3], "format": None, "host_shape": None, "nbytes": 24},
    {"row_id": 7, "run": "ä-run", "rel_path": "rank_0/Conv2D.Default.0.0.0.output.0.NC1HWC0.npy",
     "data_offset": 0, "stored_dtype": "float16", "shape": [1, 1, 4, 4, 16], "format": "NC1HWC0",
     "host_shape": [1, 16, 4, 4], "nbytes": None},
    {"row_id": 9, "run": "a", "rel_path": "rank_1/scalar.npy", "data_offset": 80, "stored_dtype": "int64",
     "shape": [], "format": "ND", "host_shape": [], "nbytes": 8},
    {"row_id": 12, "run": "b", "rel_path": "", "data_offset": 2**40, "stored_dtype": "bfloat16",
     "shape": [5], "format": None, "host_shape": None, "nbytes": 10},
]  # fmt: skip


def _expected(row: dict) -> TensorLocation:
    host = row["host_shape"]
    return TensorLocation(row["row_id"], row["run"], row["rel_path"], row["data_offset"], row["stored_dtype"],
                          tuple(row["shape"]), row["format"], None if host is None else tuple(host),
                          row["nbytes"])  # fmt: skip


def test_sidecar_batches_read_from_buffers_as_pyarrow_decodes_them():
    """Nulls in every nullable column, empty shapes, non-ASCII text, and sliced batches (buffers
    that start before the batch's first row)."""
    batch = pa.RecordBatch.from_pylist(ROWS, schema=INDEX_SCHEMA)
    for part in (batch, batch.slice(1, 3), batch.slice(2, 1)):
        view = _SidecarBatch(part)
        assert [view.location(i) for i in range(part.num_rows)] == [_expected(r) for r in part.to_pylist()]


def test_a_first_tensor_imports_neither_pandas_nor_pyarrow_compute(tmp_path):
    cat = nan_log_catalog(tmp_path)
    code = (
        "import sys; from catalog import Catalog; c = Catalog.open(sys.argv[1]); "
        "import pyarrow.parquet as pq, glob; "
        "rid = pq.ParquetFile(glob.glob(sys.argv[1] + '/data/flat/tensors/*/data.parquet')[0])"
        ".read(columns=['row_id']).column(0)[0].as_py(); "
        "a = c.tensor(rid); print(a.size > 0, sorted(m for m in ('pandas', 'pyarrow.compute', "
        "'pyarrow.dataset') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(cat)], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "True []"
