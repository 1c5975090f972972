"""`ingest.formats.tensor_data.read_tensor` on the committed raw trees: a memory map (what `Catalog.tensor`
uses) and a read into memory (what statistics use) give the same values for every slot, in both
layouts, and a file too short for its row is a TensorDataError either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.tensor_data import TensorDataError, read_tensor
from tests.conftest import DATA

RAW = DATA / "ascend_raw" / "nan_log_rank"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    cat = Catalog.open(tmp_path_factory.mktemp("cat"), create=True)
    cat.ingest(RAW)
    return cat.sql(
        "SELECT rel_path, data_offset, stored_dtype, shape, format, host_shape, nbytes FROM tensors"
    ).to_pylist()


def _read(row: dict, root: Path, **kwargs) -> np.ndarray:
    return read_tensor(
        root / row["rel_path"], row["data_offset"], row["stored_dtype"], row["shape"], row["format"],
        row["host_shape"], nbytes=row["nbytes"], **kwargs,
    )  # fmt: skip


def test_mapped_and_read_give_the_same_values(rows):
    converted = 0
    for row in rows:
        for layout in ("host", "device"):
            mapped = _read(row, RAW, layout=layout)
            read = _read(row, RAW, layout=layout, mapped=False)
            assert mapped.dtype == read.dtype and mapped.shape == read.shape, row
            assert mapped.tobytes() == read.tobytes(), row
        converted += row["host_shape"] is not None
    assert len(rows) > 50 and converted > 0  # device layouts among them


def test_a_short_file_is_an_error_both_ways(rows, tmp_path):
    row = max(rows, key=lambda r: r["nbytes"])
    data = (RAW / row["rel_path"]).read_bytes()
    cut = tmp_path / row["rel_path"]
    cut.parent.mkdir(parents=True)
    cut.write_bytes(data[: row["data_offset"] + row["nbytes"] - 1])
    for mapped in (True, False):
        with pytest.raises(TensorDataError, match="data needs"):
            _read(row, tmp_path, mapped=mapped)
