"""One dtype vocabulary for every producer (issue 32 point 5, sql/01_dtypes.sql).

`tensors.dtype` and `stats.dtype` hold numpy's name of the type (ml_dtypes' for bfloat16 and the
narrow floats) whichever producer wrote the dump; the producer's own spelling is `producer_dtype`.
Checked on real dumps of each producer: msprobe (torch.bfloat16), MindSpore 2.10 npy (bfloat16
token), MindSpore 1.x `.bin` (kNumberTypeFloat32, Float32), Ascend raw (DT_FLOAT, and a DT_BF16
tensor written from the reference), GE stats CSV; the names are checked against numpy/ml_dtypes
and against the data `Catalog.tensor` returns.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.dtypes import DATA_TYPE_NAMES, stored_dtype_of
from tests.conftest import DATA
from tests.writers.ascend_raw import SlotSpec, build_raw_dump

TREES = {
    "msprobe_bf16": DATA / "msprobe/cnn/cnn_bf16_tensor",
    "msprobe_stats": DATA / "msprobe/cnn/cnn_bf16_statistics",
    "ms210_lowp": DATA / "ms210/lowp",
    "bin_device": DATA / "mindspore_bin/kernels_filter_device",
    "bin_cpu": DATA / "mindspore_bin/kernels_filter_cpu",
    "ge_stats": DATA / "ge/ge_stats",
}
NARROW = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "int4", "uint4", "int2", "uint2"}


def _numpy_type(name: str) -> np.dtype:
    """numpy's dtype of a name, ml_dtypes' for the types numpy lacks."""
    return np.dtype(getattr(ml_dtypes, name)) if name in NARROW else np.dtype(name)


def _raw_tree_with_bfloat16(dst: Path) -> Path:
    """nan_log_rank with one more raw file: a Cast whose output is DT_BF16 (real values, encoded
    as bfloat16 with ml_dtypes), as the reference describes CANN's header and data."""
    shutil.copytree(DATA / "ascend_raw/nan_log_rank", dst)
    leaf = next(p for p in sorted(dst.glob("rank_0/Net/0/*")) if p.is_dir())
    values = np.array([[1.5, -2.25, np.nan], [np.inf, 0.0, 3.0]], dtype=np.float32)
    data = values.astype(ml_dtypes.bfloat16).tobytes()
    raw = build_raw_dump(
        op_name="Default/Cast-op99",
        inputs=[SlotSpec(values.tobytes(), "DT_FLOAT", values.shape)],
        outputs=[SlotSpec(data, "DT_BF16", values.shape)],
    )
    (leaf / "Cast.Default_Cast-op99.9.9.1795302834999999").write_bytes(raw)
    return dst


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dtypes")
    c = Catalog.open(tmp / "cat", create=True)
    for run, tree in TREES.items():
        c.ingest(tree, run=run)
    c.ingest(_raw_tree_with_bfloat16(tmp / "raw"), run="raw_bf16")
    yield c
    c.close()


def test_every_dtype_is_a_numpy_name_and_the_producers_spelling_is_kept(cat):
    rows = cat.sql(
        "SELECT DISTINCT run, dtype, producer_dtype FROM tensors UNION "
        "SELECT DISTINCT run, dtype, producer_dtype FROM stats ORDER BY ALL"
    ).to_pylist()
    spellings = {(r["run"], r["producer_dtype"]): r["dtype"] for r in rows}
    for r in rows:
        _numpy_type(r["dtype"])  # raises for a name numpy and ml_dtypes do not know
    assert spellings[("msprobe_bf16", "torch.bfloat16")] == "bfloat16"
    assert spellings[("msprobe_bf16", "torch.float32")] == "float32"
    assert spellings[("msprobe_stats", "torch.int64")] == "int64"
    assert spellings[("ms210_lowp", "bfloat16")] == "bfloat16"
    assert spellings[("bin_device", "kNumberTypeFloat32")] == "float32"
    assert spellings[("bin_cpu", "Int64")] == "int64"
    assert spellings[("raw_bf16", "DT_FLOAT")] == "float32"
    assert spellings[("raw_bf16", "DT_BF16")] == "bfloat16"
    assert spellings[("ge_stats", "DT_BOOL")] == "bool"


def test_one_where_clause_finds_every_producers_bfloat16(cat):
    runs = cat.sql("SELECT DISTINCT run FROM tensors WHERE dtype = 'bfloat16' ORDER BY run").column(0)
    assert runs.to_pylist() == ["ms210_lowp", "msprobe_bf16", "raw_bf16"]
    runs = cat.sql("SELECT DISTINCT run FROM stats WHERE dtype = 'bfloat16' ORDER BY run").column(0)
    assert runs.to_pylist() == ["ms210_lowp", "msprobe_bf16", "msprobe_stats", "raw_bf16"]
    row = cat.sql(
        "SELECT row_id, nan_count, pos_inf_count FROM stats WHERE run = 'raw_bf16' AND dtype = 'bfloat16'"
    )
    row = row.to_pylist()[0]
    assert (row["nan_count"], row["pos_inf_count"]) == (1, 1)
    assert cat.tensor(row["row_id"]).dtype == np.dtype(ml_dtypes.bfloat16)


def test_dtype_is_the_type_of_the_data_wherever_the_bytes_are_that_type(cat):
    """Where the bytes on disk are of the tensor's own type (not MindSpore's bfloat16-as-float32,
    not a float16 header over a float32 buffer), `Catalog.tensor` returns data of `dtype`."""
    rows = cat.sql(
        "SELECT row_id, dtype, stored_dtype FROM tensors WHERE stored_dtype NOT IN ('raw', 'int4', 'uint1')"
    ).to_pylist()
    checked = 0
    for r in rows:
        if r["dtype"] == r["stored_dtype"]:  # stored dtypes are numpy/ml_dtypes names too
            assert cat.tensor(r["row_id"]).dtype == _numpy_type(r["dtype"]), r
            checked += 1
    assert checked > 1000


def test_every_cann_type_is_named_as_its_stored_dtype(cat):
    """CANN's DT_* names map to the name of the dtype their bytes decode to, wherever dumpcat
    decodes them (quantised and packed types keep a name of their own)."""
    names = list(DATA_TYPE_NAMES.values())
    got = cat.sql("SELECT n, dtype_name(n) AS d FROM unnest($names) AS t(n)", {"names": names}).to_pylist()
    for r in got:
        stored = stored_dtype_of(r["n"])
        if stored not in ("raw", "int4", "uint1", "complex32") and not r["n"].startswith(
            ("DT_Q", "DT_RESOURCE")
        ):
            assert r["d"] == stored, r
    torch = ["torch.float32", "torch.float", "torch.half", "torch.double", "torch.long", "torch.int",
             "torch.bool", "torch.bfloat16", "torch.float8_e4m3fn", "torch.complex64",
             "torch.uint8"]  # fmt: skip
    want = ["float32", "float32", "float16", "float64", "int64", "int32", "bool", "bfloat16",
            "float8_e4m3fn", "complex64", "uint8"]  # fmt: skip
    got = cat.sql(
        "SELECT list(dtype_name(n) ORDER BY i) FROM unnest($n) WITH ORDINALITY AS t(n, i)", {"n": torch}
    )
    assert got.column(0)[0].as_py() == want
    assert cat.sql("SELECT dtype_name(NULL) IS NULL").column(0)[0].as_py()


def test_integer_means_are_null_where_msprobe_wrote_none(cat, tmp_path):
    """msprobe writes no Mean or Norm for an integer tensor with dimensions (`"Mean": null`), and
    its compare CSV says `None` for both means and 0 for `Mean diff`. dumpcat keeps NULL: neither
    run recorded a mean, so there is no difference to report (a 0 would read as "equal")."""
    with Catalog.open(tmp_path / "c", create=True) as c:
        c.ingest(DATA / "msprobe/cnn/cnn_bf16_statistics")
        c.ingest(DATA / "msprobe/cnn/cnn_fp32_statistics")
        rows = c.sql(
            "SELECT avg, baseline_avg, avg_diff, max_diff, status FROM "
            "compare_stats('cnn_bf16_statistics', 'cnn_fp32_statistics') WHERE iteration = 0 "
            "AND op_name = 'Functional.cross_entropy.0.forward' AND arg_path = 'input.1'"
        ).to_pylist()
    assert rows == [{"avg": None, "baseline_avg": None, "avg_diff": None, "max_diff": 0.0, "status": "ok"}]
    with open(DATA / "msprobe/cnn/compare/bf16_vs_fp32_statistics_step0.csv", newline="") as f:
        theirs = next(
            r for r in csv.DictReader(f) if r["NPU Name"] == "Functional.cross_entropy.0.forward.input.1"
        )
    assert (theirs["NPU mean"], theirs["Bench mean"], theirs["Mean diff"], theirs["Max diff"]) == (
        "None",
        "None",
        "0",
        "0",
    )
