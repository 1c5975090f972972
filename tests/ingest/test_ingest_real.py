"""End-to-end: real MindSpore 2.10 dumps ingested into a real catalog and queried with DuckDB."""

from __future__ import annotations

import math
import mmap

import numpy as np
import pytest

from catalog import Catalog, TensorNotFoundError
from tests.conftest import MS210, dump_of


@pytest.fixture(scope="module")
def simple_cat(tmp_path_factory):
    cat = Catalog.open(tmp_path_factory.mktemp("c") / "cat", create=True)
    summary = cat.ingest(dump_of("simple"), run="simple")
    return cat, summary


def test_every_npy_file_is_a_tensor_row(simple_cat):
    cat, summary = simple_cat
    files = sorted(p for p in dump_of("simple").rglob("*.npy"))
    assert summary.tensors == len(files) == 243
    assert summary.errors == 0
    rows = cat.sql("SELECT path, shape, stored_dtype, dtype FROM tensors ORDER BY path").to_pylist()
    assert [r["path"] for r in rows] == [str(p.resolve()) for p in files]
    for row in rows[:40]:
        arr = np.load(row["path"], mmap_mode="r")
        assert list(arr.shape) == row["shape"]
        assert arr.dtype.name == row["stored_dtype"]


def test_keys_of_a_tensor(simple_cat):
    cat, _ = simple_cat
    row = cat.sql(
        "SELECT * FROM tensors WHERE iteration = 1 AND op_type = 'Conv2D' AND io = 'output'"
    ).to_pylist()
    assert len(row) == 1
    r = row[0]
    assert r["run"] == "simple" and r["rank"] == 0 and r["net"] == "Net" and r["graph_id"] == 0
    assert r["op_name"] == "Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op0"
    assert r["file_op_name"] == "Default_network-WithLossCell__backbone-Net_conv1-Conv2d_Conv2D-op0"
    assert (
        r["exec_index"] == 0 and r["slot"] == 0 and r["dtype"] == "float32" and r["shape"] == [4, 8, 16, 16]
    )
    assert r["format"] == "DefaultFormat" and r["name_era"] == "v2.4+" and r["dir_kind"] == "iteration"


def test_full_names_resolve_through_execution_order(simple_cat):
    cat, _ = simple_cat
    resolved = cat.sql(
        "SELECT DISTINCT op_name, exec_index FROM tensors WHERE exec_index IS NOT NULL ORDER BY exec_index"
    ).to_pylist()
    order = (
        (dump_of("simple") / "rank_0/execution_order/ms_execution_order_graph_0.csv").read_text().split()[1:]
    )
    for r in resolved:
        assert order[r["exec_index"]] == r["op_name"]
    assert len(resolved) >= 17


def test_parameters_keep_their_file_name(simple_cat):
    cat, _ = simple_cat
    names = cat.sql("SELECT DISTINCT op_name FROM tensors WHERE op_type = 'Parameter' ORDER BY 1").column(0)
    assert "conv1_weight" in names.to_pylist() and "moments_fc_bias" in names.to_pylist()


def test_stats_are_computed_for_cpu_dumps(simple_cat):
    cat, summary = simple_cat
    assert summary.computed_stats == 243
    rows = cat.sql("SELECT * FROM stats ORDER BY row_id").to_pylist()
    assert len(rows) == 243 and {r["stat_source"] for r in rows} == {"computed"}
    for r in rows[:60]:
        arr = cat.tensor(r["row_id"]).astype(np.float64)
        assert r["count"] == arr.size
        if arr.size:
            assert math.isclose(r["max"], arr.max(), rel_tol=1e-6)
            assert math.isclose(r["min"], arr.min(), rel_tol=1e-6)
            assert math.isclose(r["l2norm"], float(np.sqrt((arr * arr).sum())), rel_tol=1e-5)
        assert r["neg_count"] == int((arr < 0).sum()) and r["pos_count"] == int((arr > 0).sum())
        assert r["zero_count"] == int((arr == 0).sum()) and r["nan_count"] == 0


def test_execution_history_and_metadata(simple_cat):
    cat, _ = simple_cat
    runs = cat.sql("SELECT iteration FROM graph_runs ORDER BY seq").column(0).to_pylist()
    assert runs == [0, 1, 2]
    meta = cat.sql("SELECT * FROM runs").to_pylist()[0]
    assert (meta["device_target"], meta["ms_version"], meta["ranks"]) == ("CPU", "2.10.0", 1)
    assert '"saved_data": "tensor"' in meta["dump_config"]
    assert cat.sql("SELECT count(*) FROM ops").column(0)[0].as_py() == 19


def test_tensor_by_row_id_is_the_file(simple_cat):
    cat, _ = simple_cat
    for r in cat.sql("SELECT row_id, path FROM tensors USING SAMPLE 30 ROWS").to_pylist():
        got = cat.tensor(r["row_id"])
        want = np.load(r["path"])
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable
        assert got.size == 0 or _is_memory_mapped(got)


def _is_memory_mapped(array: np.ndarray) -> bool:
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap | np.memmap):
            return True
        base = getattr(base, "base", None) if not isinstance(base, memoryview) else base.obj
    return False


def test_unknown_row_id(simple_cat):
    cat, _ = simple_cat
    with pytest.raises(TensorNotFoundError, match="no tensor with row id 12345"):
        cat.tensor(12345)


def test_nan_query_on_nan_dump(tmp_path):
    """The user's query: which ops produced NaN. The real Log net makes NaN at iteration 0."""
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump_of("nan_log"))
    rows = cat.sql("SELECT op_name, iteration, nan_count FROM stats WHERE nan_count > 0").to_pylist()
    assert rows
    first = cat.sql(
        "SELECT op_name, io FROM stats WHERE nan_count > 0 AND iteration = 0 AND op_type <> 'Parameter' "
        "ORDER BY exec_index, io DESC LIMIT 1"
    ).to_pylist()[0]
    assert first["op_name"].endswith("/Log-op0") and first["io"] == "output"
    log_out = cat.sql(
        "SELECT nan_count, count, max, avg FROM stats "
        "WHERE op_type = 'Log' AND io = 'output' AND iteration = 0"
    ).to_pylist()[0]
    assert log_out["nan_count"] == 1 and log_out["count"] == 6
    assert math.isnan(log_out["max"]) and math.isnan(log_out["avg"])


def test_multigraph_sample(tmp_path):
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump_of("multigraph"))
    assert s.errors == 0
    assert s.tensors == len(list(dump_of("multigraph").rglob("*.npy")))
    graphs = cat.sql("SELECT DISTINCT graph_id FROM tensors ORDER BY 1").column(0).to_pylist()
    assert graphs == [0, 1, 2, 3, 4, 7, 8, 9]
    its = cat.sql("SELECT graph_id, list(iteration ORDER BY seq) AS it FROM graph_runs GROUP BY 1 ORDER BY 1")
    assert its.to_pylist() == [{"graph_id": 0, "it": [0, 2]}, {"graph_id": 7, "it": [3]}]
    # The same op appears in kernel graphs 0 and 7 (train and eval): each resolves in its own graph.
    conv = cat.sql(
        "SELECT DISTINCT graph_id, op_name, exec_index FROM tensors WHERE op_type = 'Conv2D' ORDER BY 1"
    ).to_pylist()
    assert [c["graph_id"] for c in conv] == [0, 7]
    assert all(c["op_name"].endswith("conv-Conv2d/Conv2D-op0") and c["exec_index"] == 0 for c in conv)


@pytest.mark.parametrize("scenario", ["kernels_filter", "outputs_only", "iter_filter", "long_names"])
def test_other_real_dumps_ingest_cleanly(tmp_path, scenario):
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump_of(scenario))
    assert s.errors == 0, cat.sql("SELECT * FROM ingest_errors").to_pylist()
    assert s.tensors == len(list(dump_of(scenario).rglob("*.npy")))
    assert cat.sql("SELECT count(*) FROM stats").column(0)[0].as_py() == s.tensors


def test_outputs_only_has_no_inputs(tmp_path):
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump_of("outputs_only"))
    assert cat.sql("SELECT DISTINCT io FROM tensors").column(0).to_pylist() == ["output"]


def test_iteration_filter(tmp_path):
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump_of("iter_filter"))
    its = cat.sql("SELECT DISTINCT iteration FROM tensors ORDER BY 1").column(0).to_pylist()
    assert its == [1, 3, 4]


def test_kernel_filter(tmp_path):
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump_of("kernels_filter"))
    types = set(cat.sql("SELECT DISTINCT op_type FROM tensors").column(0).to_pylist())
    assert types == {"Conv2D", "ReLU", "BiasAdd", "BiasAddGrad"}


def test_long_names_resolved_through_mapping_csv(tmp_path):
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump_of("long_names"))
    rows = cat.sql(
        "SELECT file_name, original_name, op_type, op_name FROM tensors WHERE original_name IS NOT NULL"
    )
    rows = rows.to_pylist()
    assert len(rows) == 26
    mapping = {}
    for csv in (MS210 / "long_names" / "dump").rglob("mapping.csv"):
        for line in csv.read_text().splitlines():
            mapped, original = line.split(",", 1)
            mapping[mapped] = original
    for r in rows:
        assert r["file_name"].split(".")[0].isdigit()
        assert mapping[r["file_name"]] == r["original_name"]
        assert r["original_name"].startswith(r["op_type"] + ".")
        assert len(r["original_name"]) > 255


def test_nan_filters_on_float_columns(tmp_path):
    """`WHERE isnan(max)` finds every NaN row: parquet min/max statistics, which leave NaN out,
    would let DuckDB skip those row groups, so float columns are written without them."""
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump_of("nan_log"))
    by_count = cat.sql("SELECT count(*) FROM stats WHERE nan_count > 0").column(0)[0].as_py()
    assert by_count > 0
    assert cat.sql("SELECT count(*) FROM stats WHERE isnan(max)").column(0)[0].as_py() == by_count
    assert cat.sql("SELECT count(*) FROM raw_tensor_stats WHERE isnan(avg)").column(0)[0].as_py() == by_count


def test_first_anomaly_without_counts(tmp_path, copy_dump):
    """A default v2.3+ statistic.csv has only max, min and l2norm: NaN is found through max."""
    dump = copy_dump("nan_log")
    it0 = dump / "rank_0/Net/0/0"
    header = (
        "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
        "Max Value,Min Value,L2Norm Value\n"
    )
    lines = [header]
    for f in sorted(it0.glob("*.npy")):
        op_type, op, task, stream, ts, io, slot = f.name.split(".")[:7]
        a = np.load(f).astype(np.float64)
        mx = "nan" if np.isnan(a).any() else f"{a.max():g}" if a.size else "0"
        mn = "nan" if np.isnan(a).any() else f"{a.min():g}" if a.size else "0"
        lines.append(
            f'{op_type},{op},{task},{stream},{ts},{io},{slot},{a.nbytes},float32,"()",{mx},{mn},1,\n'
        )
    (it0 / "statistic.csv").write_text("".join(lines))
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    first = cat.sql(
        "SELECT op_name, nan_count, source_line FROM first_anomaly WHERE iteration = 0"
    ).to_pylist()
    assert first == [
        {
            "op_name": "Default/network-WithLossCell/_backbone-Net/Log-op0",
            "nan_count": None,
            "source_line": 16,
        }
    ]
