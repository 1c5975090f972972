"""MindSpore 1.0-1.2 sync `.bin` dumps through the whole pipeline: the committed trees
(tests/data/mindspore_bin, made by tests/writers/mindspore_bin_tree.py from real MindSpore 2.10 CPU
tensors) give back every value MindSpore wrote to its npy files, the same statistics, and full
operator names; broken files become error rows and never stop the rest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.ascend.device_format import host_to_device
from ingest.formats.mindspore.npy_name import parse_tensor_name, sanitize_v23
from ingest.pipeline import DumpRootError, Ingester, detect_dump
from ingest.readers.mindspore_bin import op_type_of_kernel
from ingest.storage.store import CatalogStore
from tests.conftest import DATA
from tests.writers.mindspore_bin_tree import SOURCES, bin_name, write_tree

TREES = DATA / "mindspore_bin"
SRC = DATA / "ms210/kernels_filter/dump"
STAT_COLUMNS = ("count", "nan_count", "zero_count", "neg_count", "pos_count")
FLOAT_STATS = ("avg", "l2norm", "max", "min")
CONV = "Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op0"


def _npy_of(iteration: int, file_op_name: str, io: str, slot: int) -> Path:
    """The npy file MindSpore wrote for this tensor (the `.bin` file was made from it)."""
    hits = [
        f for f in (SRC / "rank_0/Net/0" / str(iteration)).glob("*.npy")
        if (tn := parse_tensor_name(f.name)).op_name == file_op_name and tn.io == io and tn.slot == slot
    ]  # fmt: skip
    assert len(hits) == 1, (iteration, file_op_name, io, slot)
    return hits[0]


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    """Both committed trees and their npy source, in one catalog."""
    c = Catalog.open(tmp_path_factory.mktemp("bin") / "cat", create=True)
    for tree in SOURCES:
        s = c.ingest(TREES / tree, run=tree)
        assert s.producer == "mindspore-bin" and s.errors == 0 and s.tensors == 24
    c.ingest(SRC, run="npy")
    return c


@pytest.mark.parametrize("tree", list(SOURCES))
def test_every_tensor_is_the_npy_bit_for_bit(cat, tree):
    rows = cat.sql(
        "SELECT row_id, rank, graph_id, iteration, op_type, file_op_name, io, slot, dtype, producer_dtype, "
        "stored_dtype, "
        "shape, format, host_shape, producer, name_era, task_id, timestamp_us FROM tensors WHERE run = $run",
        {"run": tree},
    ).to_pylist()
    assert len(rows) == 24
    token = "kNumberType" if tree.endswith("device") else ""
    for r in rows:
        expected = np.load(_npy_of(r["iteration"], r["file_op_name"], r["io"], r["slot"]))
        got = cat.tensor(r["row_id"])
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()
        assert r["producer_dtype"] == token + {"float32": "Float32", "int64": "Int64"}[expected.dtype.name]
        assert r["dtype"] == expected.dtype.name
        assert r["stored_dtype"] == expected.dtype.name and r["shape"] == list(expected.shape)
        assert r["format"] == "DefaultFormat" and r["host_shape"] is None
        assert (r["rank"], r["graph_id"], r["producer"], r["name_era"]) == (0, 0, "mindspore-bin", "v1.0-1.2")
        assert r["task_id"] is None and r["timestamp_us"] is None
        assert r["op_type"] == r["file_op_name"].rsplit("_", 1)[1].removesuffix("-op0")


@pytest.mark.parametrize("tree", list(SOURCES))
def test_statistics_equal_those_of_the_npy_run(cat, tree):
    q = (
        f"SELECT op_name, iteration, io, slot, {', '.join(STAT_COLUMNS + FLOAT_STATS)} "
        "FROM stats WHERE run = $run ORDER BY op_name, iteration, io, slot"
    )
    got = cat.sql(q, {"run": tree}).to_pylist()
    expected = cat.sql(q, {"run": "npy"}).to_pylist()
    assert len(got) == len(expected) == 24
    for a, b in zip(got, expected, strict=True):
        assert (a["op_name"], a["iteration"], a["io"], a["slot"]) == (
            b["op_name"], b["iteration"], b["io"], b["slot"],
        )  # fmt: skip
        for c in STAT_COLUMNS:
            assert a[c] == b[c], (a, c)
        for c in FLOAT_STATS:
            assert a[c] == pytest.approx(b[c], rel=1e-12, nan_ok=True), (a, c)


def test_names_resolve_against_the_execution_order(cat):
    q = "SELECT DISTINCT op_name, name_match, exec_index FROM tensors WHERE run = $run ORDER BY op_name"
    device = cat.sql(q, {"run": "kernels_filter_device"}).to_pylist()
    npy = cat.sql(q, {"run": "npy"}).to_pylist()
    assert device == npy
    assert {r["name_match"] for r in device} == {"exact"}
    assert CONV in {r["op_name"] for r in device}
    # The CPU form has no execution order: the name in the file is the full name all the same.
    cpu = cat.sql(q, {"run": "kernels_filter_cpu"}).to_pylist()
    assert [r["op_name"] for r in cpu] == [r["op_name"] for r in npy]
    assert {r["name_match"] for r in cpu} == {"header"} and {r["exec_index"] for r in cpu} == {None}
    ops = cat.sql("SELECT count(*) FROM ops WHERE run = 'kernels_filter_device'").column(0)[0].as_py()
    assert ops == 17


def test_rank_metadata(cat):
    rows = cat.sql(
        "SELECT run, rank, device_target, dump_config FROM rank_metadata WHERE run <> 'npy' ORDER BY run"
    ).to_pylist()
    assert [(r["run"], r["rank"], r["device_target"]) for r in rows] == [
        ("kernels_filter_cpu", 0, "CPU"),
        ("kernels_filter_device", 0, None),
    ]
    assert '"trans_flag": false' in rows[0]["dump_config"] and '"trans_flag": true' in rows[1]["dump_config"]


def test_detection_and_forced_producer(tmp_path):
    d = detect_dump(TREES / "kernels_filter_device")
    assert d.reader.name == "mindspore-bin"
    assert d.description == (
        "MindSpore 1.0-1.2 (sync .bin), {net}/device_N/iteration_N/ (.bin files in Net/device_0/iteration_0/)"
    )
    d = detect_dump(TREES / "kernels_filter_cpu")
    assert d.reader.name == "mindspore-bin" and d.evidence == ".bin files in Net/iteration_0/"
    d = detect_dump(TREES / "kernels_filter_device" / "Net")  # one net folder: the root is its parent
    assert d.fixed and d.root == TREES / "kernels_filter_device"
    assert d.evidence == ".bin files in Net/device_0/iteration_0/"
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(TREES / "kernels_filter_cpu"), "-c",
         str(tmp_path / "c"), "--producer", "mindspore-bin"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines()[0].endswith(
        "kernels_filter_cpu: MindSpore 1.0-1.2 (sync .bin), {net}/device_N/iteration_N/ "
        "(.bin files in Net/iteration_0/)"
    )
    with pytest.raises(DumpRootError, match=r"is not a mindspore-bin dump\. Looked for mindspore-bin: "):
        detect_dump(SRC, producer="mindspore-bin")
    with pytest.raises(DumpRootError, match="is not a mindspore-npy dump"):
        detect_dump(TREES / "kernels_filter_device", producer="mindspore-npy")


def test_bad_input_is_error_rows_and_the_rest_is_cataloged(tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(TREES / "kernels_filter_device", dump)
    device = dump / "Net/device_0"
    it0 = device / "iteration_0"
    wrong = bin_name("Default/Add-op9", "output", 0, (2, 3), "Float32", "DefaultFormat")
    (it0 / wrong).write_bytes(b"\0" * 20)
    (it0 / "notes.txt").write_text("x")
    (it0 / "Add-op9_output_0_shape_2_Float99_DefaultFormat.bin").write_bytes(b"\0" * 8)
    (it0 / "subdir").mkdir()
    (device / "iteration_7").mkdir()
    (device / "stray.log").write_text("x")
    (dump / "Net/device_x").mkdir()
    (dump / "README").write_text("x")
    (device / "execution_order/ms_execution_order_graph_1.csv").write_text(
        "NodeExecutionOrder-FullNameWithScope\n\x01junk\n"
    )
    empty = bin_name("Default/Empty-op3", "output", 0, (), "Float32", "DefaultFormat")
    (it0 / empty).write_bytes(b"")  # `shape_0` with no bytes: an empty tensor, not a broken scalar
    c = Catalog.open(tmp_path / "cat", create=True)
    s = c.ingest(dump)
    errors = {r["path"]: r["reason"] for r in c.sql("SELECT path, reason FROM ingest_errors").to_pylist()}
    base = "Net/device_0/iteration_0"
    assert set(errors) == {
        f"{base}/{wrong}", f"{base}/notes.txt", f"{base}/Add-op9_output_0_shape_2_Float99_DefaultFormat.bin",
        f"{base}/subdir", "Net/device_0/iteration_7", "Net/device_0/stray.log", "Net/device_x", "README",
        "Net/device_0/execution_order/ms_execution_order_graph_1.csv:2",
    }, errors  # fmt: skip
    assert "shape [2, 3] of Float32: 24 bytes, the file has 20" in errors[f"{base}/{wrong}"]
    assert "empty iteration folder" in errors["Net/device_0/iteration_7"]
    assert s.tensors == 25 and s.errors == len(errors)
    row = c.sql("SELECT row_id, shape, nbytes, op_type FROM tensors WHERE file_name = $f", {"f": empty})
    row = row.to_pylist()[0]
    assert (row["shape"], row["nbytes"], row["op_type"]) == ([0], 0, "Empty")
    assert c.tensor(row["row_id"]).shape == (0,)
    # Re-ingest: nothing new, no error reported twice.
    again = c.ingest(dump)
    assert again.tensors == 0 and again.errors == 0


def test_device_format_is_served_in_the_device_layout(tmp_path):
    """Without trans_flag a device writes its device layout, and the name gives only that shape:
    the tensor is the dumped bytes, in the device layout, with no host shape."""
    write_tree(SRC, tmp_path / "dump", trans_flag=False, device_formats=True)
    c = Catalog.open(tmp_path / "cat", create=True)
    assert c.ingest(tmp_path / "dump").errors == 0
    rows = c.sql(
        "SELECT row_id, iteration, file_op_name, io, slot, format, shape, host_shape, producer_dtype "
        "FROM tensors "
        "WHERE format <> 'DefaultFormat'"
    ).to_pylist()
    assert {r["format"] for r in rows} == {"NC1HWC0", "FRACTAL_Z"}
    for r in rows:
        expected = np.load(_npy_of(r["iteration"], r["file_op_name"], r["io"], r["slot"]))
        got = c.tensor(r["row_id"])
        assert r["host_shape"] is None and r["producer_dtype"] == "Float32" and list(got.shape) == r["shape"]
        np.testing.assert_array_equal(got, host_to_device(expected, r["format"]))


def test_live_mode_waits_for_a_file_still_written(tmp_path):
    """A young file shorter than its name says is retried, never an error; complete, it is read."""
    dump = tmp_path / "dump"
    shutil.copytree(TREES / "kernels_filter_cpu", dump)
    data = np.arange(6, dtype=np.float32)
    name = bin_name("Default/Late-op1", "output", 0, (2, 3), "Float32", "DefaultFormat")
    target = dump / "Net/iteration_1" / name
    target.write_bytes(data.tobytes()[:10])
    ing = Ingester(CatalogStore(tmp_path / "cat", create=True), "live", dump, detect_dump(dump))
    ing.live, ing.grace = True, 30.0
    ing.begin()
    ing.scan_all()
    assert ing.summary.tensors == 24 and ing.summary.errors == 0
    assert ing.pending_files == {"Net/iteration_1/" + target.name: str(target.parent)}
    target.write_bytes(data.tobytes())
    ing.scan_path(str(target.parent))
    ing.commit()
    assert ing.summary.tensors == 25 and ing.summary.errors == 0 and not ing.pending_files
    # Judged once the grace period has passed: then a short file is an error.
    old = time.time() - 60
    short = target.with_name(target.name.replace("Late-op1", "Short-op2"))
    short.write_bytes(b"\0" * 4)
    os.utime(short, (old, old))
    ing.scan_path(str(short.parent))
    ing.commit()
    assert ing.summary.errors == 1


def test_op_type_of_kernel_names():
    assert op_type_of_kernel("Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op107") == (
        "Conv2D"
    )
    assert op_type_of_kernel("conv1.weight") == "Parameter"
    assert op_type_of_kernel("cst3") == "Parameter"
    assert sanitize_v23("Default/a.b/Add-op1") == "Default_a_b_Add-op1"


def test_committed_trees_are_what_the_writer_writes(tmp_path):
    """The committed trees are regenerated byte for byte by tests/writers/mindspore_bin_tree.py."""
    for tree, (src, form, trans_flag) in SOURCES.items():
        out = tmp_path / tree
        write_tree(DATA / src, out, form=form, trans_flag=trans_flag)
        committed = sorted(p.relative_to(TREES / tree) for p in (TREES / tree).rglob("*") if p.is_file())
        written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        assert committed == written
        for rel in committed:
            assert (TREES / tree / rel).read_bytes() == (out / rel).read_bytes(), rel
    size = sum(p.stat().st_size for p in TREES.rglob("*") if p.is_file())
    assert size < 300_000
