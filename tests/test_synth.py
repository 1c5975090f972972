"""The synthetic dump generator (bench/synth.py) writes trees dumpcat ingests exactly."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench import synth
from catalog import Catalog

N = 200


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth") / "dump"
    summary = synth.generate(root, N, ranks=2, iterations=2, nan_fraction=0.1, seed=3, workers=1)
    return root, summary


@pytest.fixture(scope="module")
def cat(tree, tmp_path_factory):
    root, _ = tree
    catalog = Catalog.open(tmp_path_factory.mktemp("c") / "cat", create=True)
    ingest = catalog.ingest(root, run="synth")
    return catalog, ingest


def test_tree_layout(tree):
    root, s = tree
    files = sorted(root.rglob("*.npy"))
    assert s.tensors == len(files) == N
    assert {p.parent.relative_to(root).as_posix() for p in files} == {
        f"rank_{r}/Net/0/{i}" for r in (0, 1) for i in (0, 1)
    }
    for r in (0, 1):
        rank = root / f"rank_{r}"
        assert json.loads((rank / ".dump_metadata/config.json").read_text())["device_target"] == "CPU"
        cfg = json.loads((rank / ".dump_metadata/data_dump.json").read_text())["common_dump_settings"]
        assert cfg["net_name"] == "Net" and len(cfg["statistic_category"]) == 12
        assert (rank / "execution_order/ms_global_execution_order_graph_0.csv").read_text() == "0\n1\n"
    for p in files:
        parts = p.name.split(".")
        assert parts[2:4] == ["0", "0"] and len(parts[4]) == 16 and parts[5] in ("input", "output")
        assert parts[7] == "DefaultFormat" and parts[8] in ("Float32", "Int32", "Int64", "Bool")
        assert len(p.name.encode()) <= 255
    names = {p.name.split(".")[1] for p in files}
    assert any(n.startswith("Gradients_Default_network-WithLossCell__backbone-Net_layer") for n in names)
    assert "Default_network-WithLossCell__backbone-Net_layer0-Dense_MatMul-op0" in names
    assert any(p.name.startswith("Parameter.layer0_weight.0.0.") for p in files)


def test_npy_files_are_what_np_save_writes(tree):
    root, _ = tree
    for p in sorted(root.rglob("*.npy"))[:60]:
        raw = p.read_bytes()
        arr = np.load(p)
        buf = io.BytesIO()
        np.save(buf, arr)
        assert buf.getvalue() == raw, p.name
        assert (len(raw) - arr.nbytes) % 64 == 0


def test_statistic_csv_format_and_values(tree):
    root, _ = tree
    csv_path = root / "rank_1/Net/0/1/statistic.csv"
    lines = csv_path.read_text().splitlines()
    header = lines[0].split(",")
    assert header[:10] == synth.CSV_HEADER_COMMON.split(",") and len(header) == 22
    assert header[10:] == [h for _, h in synth.STAT_CATEGORIES]
    rows = list(csv.reader(lines[1:]))
    files = {p.name: p for p in csv_path.parent.glob("*.npy")}
    assert len(rows) == len(files) == N // 4
    for row in rows:
        assert len(row) == 23 and row[-1] == ""  # the v2.3+ trailing comma
        rec = dict(zip(header, row, strict=False))
        matches = [
            f
            for f in files
            if f.startswith(
                f"{rec['Op Type']}.{rec['Op Name']}.0.0.{rec['Timestamp']}.{rec['IO']}.{rec['Slot']}."
            )
        ]
        assert len(matches) == 1
        a = np.load(files[matches[0]])
        assert rec["Shape"] == "(" + ",".join(map(str, a.shape)) + ")"
        assert int(rec["Data Size"]) == a.nbytes and rec["Data Type"] == a.dtype.name
        x = a.astype(np.float64).ravel()
        assert int(rec["Count"]) == x.size
        assert int(rec["NaN Count"]) == int(np.isnan(x).sum())
        assert int(rec["Negative Zero Count"]) == int((x < 0).sum())
        assert int(rec["Positive Zero Count"]) == int((x > 0).sum())
        assert int(rec["Zero Count"]) == int((x == 0).sum())
        assert int(rec["Positive Inf Count"]) == int(np.isposinf(x).sum())
        if np.isnan(x).any():
            assert rec["Max Value"] == rec["Min Value"] == rec["Avg Value"] == rec["L2Norm Value"] == "nan"
        else:
            assert float(rec["Max Value"]) == pytest.approx(float(np.float32(x.max())), rel=1e-5)
            assert rec["Max Value"] == f"{x.max():g}"
            if np.isfinite(x).all():
                assert float(rec["L2Norm Value"]) == pytest.approx(math.sqrt((x * x).sum()), rel=1e-5)


def test_execution_order_names_match_files(tree):
    root, _ = tree
    order = (root / "rank_0/execution_order/ms_execution_order_graph_0.csv").read_text().splitlines()
    assert order[0] == "NodeExecutionOrder-FullNameWithScope"
    kernels = order[1:]
    assert all("/" in k for k in kernels) and len(set(kernels)) == len(kernels)
    sanitized = {synth.sanitize(k) for k in kernels}
    file_ops = {p.name.split(".")[1] for p in root.rglob("*.npy") if not p.name.startswith("Parameter.")}
    assert file_ops <= sanitized


def test_ingests_without_errors(cat):
    catalog, ingest = cat
    assert ingest.errors == 0
    assert ingest.tensors == N and ingest.stat_rows == N and ingest.computed_stats == 0
    assert catalog.sql("SELECT count(*) AS n FROM ingest_errors").to_pylist() == [{"n": 0}]
    n = catalog.sql("SELECT count(*) AS n FROM stats WHERE row_id IS NOT NULL").to_pylist()
    assert n == [{"n": N}]
    unresolved = catalog.sql(
        "SELECT count(*) AS n FROM tensors WHERE op_type <> 'Parameter' AND exec_index IS NULL"
    ).to_pylist()
    assert unresolved == [{"n": 0}]


def test_nan_rows_are_what_the_generator_wrote(tree, cat):
    _, summary = tree
    catalog, _ = cat
    rows = catalog.sql(
        "SELECT t.rel_path, s.nan_count FROM stats s JOIN tensors t USING (row_id) WHERE s.nan_count > 0"
    ).to_pylist()
    assert summary.nan_tensors > 0
    assert {r["rel_path"]: r["nan_count"] for r in rows} == summary.nan_files
    total = catalog.sql("SELECT sum(nan_count) AS n FROM stats").to_pylist()[0]["n"]
    assert total == summary.nan_elements


def test_catalog_tensor_equals_np_load(cat):
    catalog, _ = cat
    for r in catalog.sql("SELECT row_id, path FROM tensors").to_pylist():
        got = catalog.tensor(r["row_id"])
        want = np.load(r["path"])
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_computed_stats_match_the_csv(tree, tmp_path):
    """The same seed without statistic.csv: dumpcat computes what the generator wrote in the csv."""
    _, with_csv = tree
    root = tmp_path / "nocsv"
    s = synth.generate(
        root, N, ranks=2, iterations=2, nan_fraction=0.1, seed=3, workers=1, statistic_csv=False
    )
    assert not list(root.rglob("statistic.csv"))
    assert s.nan_files == {k: v for k, v in with_csv.nan_files.items()}
    catalog = Catalog.open(tmp_path / "cat", create=True)
    ingest = catalog.ingest(root, run="nocsv")
    assert ingest.errors == 0 and ingest.computed_stats == N
    computed = {
        r["rel_path"]: r
        for r in catalog.sql("SELECT t.rel_path, s.* FROM stats s JOIN tensors t USING (row_id)").to_pylist()
    }
    csv_cat = Catalog.open(tmp_path / "cat2", create=True)
    csv_cat.ingest(tree[0], run="csv")
    from_csv = csv_cat.sql("SELECT t.rel_path, s.* FROM stats s JOIN tensors t USING (row_id)").to_pylist()
    assert len(from_csv) == len(computed) == N
    for r in from_csv:
        c = computed[r["rel_path"]]
        assert c["stat_source"] == "computed" and r["stat_source"] == "statistic.csv"
        for k in (
            "count",
            "neg_count",
            "pos_count",
            "nan_count",
            "neg_inf_count",
            "pos_inf_count",
            "zero_count",
        ):
            assert c[k] == r[k], (r["rel_path"], k)
        for k in ("max", "min", "avg", "l2norm"):
            if math.isnan(r[k]):
                assert math.isnan(c[k]), (r["rel_path"], k)
            else:
                assert c[k] == pytest.approx(r[k], rel=1e-5, abs=1e-6), (r["rel_path"], k)


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    manifest = tmp_path / "m.json"
    argv = [str(out), "--tensors", "37", "--iterations", "3", "--no-statistic-csv", "--device", "GPU"]
    assert synth.main([*argv, "--size-bytes", "1024", "--manifest", str(manifest), "--workers", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["tensors"] == 37 and "nan_files" not in printed
    assert "nan_files" in json.loads(manifest.read_text())
    files = list(Path(out).rglob("*.npy"))
    assert len(files) == 37 and not list(Path(out).rglob("statistic.csv"))
    assert all(p.name.split(".")[-2] in ("float32", "int32", "int64", "bool") for p in files)
    big = [np.load(p) for p in files if p.name.endswith(".float32.npy")]
    assert {a.nbytes for a in big if a.ndim} == {1024}


def test_deterministic(tmp_path):
    a = synth.generate(tmp_path / "a", 50, seed=9, workers=1, nan_fraction=0.2)
    b = synth.generate(tmp_path / "b", 50, seed=9, workers=2, nan_fraction=0.2)
    assert a.nan_files == b.nan_files
    fa = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    fb = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert fa == fb
    for rel in fa:
        if rel.name != "data_dump.json":  # it records the dump path
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
