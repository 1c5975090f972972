"""MindSpore 2.10 float16 and bfloat16 tensors, on a real dump (tests/data/ms210/lowp, written by
MindSpore 2.10.0 on CPU; its README says what the files hold and how that was established).

Every answer is checked against the file bytes decoded here independently: bfloat16 as the upper
half of a float32 bit pattern, the float16-named files of a float32 kernel as float32."""

from __future__ import annotations

import ast
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from catalog import Catalog
from tests.conftest import MS210

DUMP = MS210 / "lowp" / "dump"
STEPS = DUMP / "rank_0" / "Net" / "0"
GRAD = "Gradients/Default/network-WithLoss/_backbone-Net/Grad_MatMul/MatMul-op1"


def _raw(path: Path) -> tuple[dict, bytes]:
    """(header dict, data bytes) of an npy file, read with the standard library only."""
    blob = path.read_bytes()
    assert blob[:6] == b"\x93NUMPY" and blob[6] == 1
    (length,) = struct.unpack_from("<H", blob, 8)
    return ast.literal_eval(blob[10 : 10 + length].decode("latin1")), blob[10 + length :]


def _bf16_as_float32(data: bytes) -> np.ndarray:
    return (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    path = tmp_path_factory.mktemp("lowp") / "cat"
    with Catalog.open(path, create=True) as c:
        c.ingest(DUMP)
    c = Catalog.open(path)
    yield c
    c.close()


def test_bfloat16_npy_files_are_read_with_their_nan_and_inf(cat):
    files = sorted(STEPS.glob("*/*.BFloat16.npy"))
    assert len(files) > 100
    assert cat.sql("SELECT count(*) AS n FROM ingest_errors").to_pylist() == [{"n": 0}]
    got = {
        r["rel_path"].rsplit("/", 1)[-1]: r
        for r in cat.sql(
            "SELECT t.rel_path, t.row_id, t.dtype, t.stored_dtype, s.count, s.nan_count, s.pos_inf_count, "
            "s.neg_inf_count, s.max, s.min FROM tensors t JOIN stats s USING (row_id) "
            "WHERE t.stored_dtype = 'bfloat16'"
        ).to_pylist()
    }
    assert set(got) == {f.name for f in files}
    anomalous = 0
    for f in files:
        header, data = _raw(f)
        assert header["descr"] == "<E2"
        values = _bf16_as_float32(data)
        row = got[f.name]
        expect = (values.size, int(np.isnan(values).sum()), int(np.isposinf(values).sum()),
                  int(np.isneginf(values).sum()))  # fmt: skip
        assert (row["count"], row["nan_count"], row["pos_inf_count"], row["neg_inf_count"]) == expect, f.name
        assert row["dtype"] == "bfloat16"
        if not np.isnan(values).any():
            assert row["max"] == float(values.max()) and row["min"] == float(values.min()), f.name
        anomalous += expect[1] + expect[2] + expect[3] > 0
        tensor = cat.tensor(row["row_id"])
        assert tensor.dtype == np.dtype(ml_dtypes.bfloat16) and tensor.shape == tuple(header["shape"])
        assert tensor.view("<u2").tobytes() == data
    assert anomalous >= 8  # the overflow of step 2 and the NaN gradients after it


def test_the_first_anomaly_is_the_bfloat16_overflow_at_its_line(cat):
    rows = cat.sql(
        "SELECT iteration, op_name, io, nan_count, pos_inf_count, neg_inf_count, source_line, mismatch "
        "FROM first_anomaly ORDER BY iteration"
    ).to_pylist()
    mul = STEPS / "2"
    (out,) = mul.glob("Mul.Default_network-WithLoss__backbone-Net_Mul-op2.*.output.0.*.npy")
    values = _bf16_as_float32(_raw(out)[1])
    assert rows == [
        {"iteration": 2, "op_name": "Default/network-WithLoss/_backbone-Net/Mul-op2", "io": "output",
         "nan_count": 0, "pos_inf_count": int(np.isposinf(values).sum()),
         "neg_inf_count": int(np.isneginf(values).sum()), "source_line": 97, "mismatch": None}
    ]  # fmt: skip


def test_float16_files_holding_a_float32_kernels_buffer_are_read_as_float32(cat):
    """On CPU MindSpore runs a float32 MatMul for a float16 layer and dumps the float32 buffer under
    a float16 header: twice the bytes the header promises. numpy would read half of it as float16
    garbage (a false NaN in step 0); dumpcat reads float32 and says so in `mismatch`."""
    rows = cat.sql(
        "SELECT t.rel_path, t.row_id, t.dtype, t.stored_dtype, s.nan_count, s.max, s.min, s.mismatch "
        "FROM tensors t JOIN stats s USING (row_id) WHERE s.mismatch IS NOT NULL ORDER BY t.rel_path"
    ).to_pylist()
    assert len(rows) == 12 and {r["mismatch"] for r in rows} == {"dtype"}
    for row in rows:
        path = DUMP / row["rel_path"]
        header, data = _raw(path)
        assert header["descr"] == "<f2" and len(data) == 4 * int(np.prod(header["shape"]))
        truth = np.frombuffer(data, "<f4")
        assert (row["dtype"], row["stored_dtype"]) == ("float16", "float32")
        assert row["nan_count"] == int(np.isnan(truth).sum())
        if not np.isnan(truth).any():
            assert (row["max"], row["min"]) == (float(truth.max()), float(truth.min()))
        assert np.array_equal(cat.tensor(row["row_id"]), truth.reshape(header["shape"]), equal_nan=True)
    # the MatMul output is the product of its (float32) inputs
    step0 = STEPS / "0"
    (out,) = step0.glob("MatMul.Default_network-WithLoss__backbone-Net_MatMul-op0.*.output.0.*.npy")
    matmul = "MatMul.Default_network-WithLoss__backbone-Net_MatMul-op0"
    a, b = (np.load(next(step0.glob(f"{matmul}.*.input.{i}.*.npy"))) for i in (0, 1))
    row = next(r for r in rows if r["rel_path"].endswith(out.name))
    np.testing.assert_allclose(cat.tensor(row["row_id"]), a @ b.T, rtol=1e-6)
    # read as its header says, step 0's weight gradient holds a false NaN; dumpcat reports none
    (grad,) = step0.glob("MatMul.Gradients_*Grad_MatMul_MatMul-op1.*.output.0.*.npy")
    assert np.isnan(np.load(grad)).any()
    assert not any(r["nan_count"] for r in rows if r["rel_path"].endswith(grad.name))


def test_anomalies_says_when_its_answer_is_such_a_file(tmp_path):
    """Step 2 with only its weight gradient (truly NaN, a float32 buffer in a float16 file): the
    answer of `first_anomaly` has mismatch 'dtype', and `dumpcat anomalies` says what that means."""
    dump = tmp_path / "dump"
    shutil.copytree(DUMP, dump)
    steps = dump / "rank_0" / "Net" / "0"
    shutil.rmtree(steps / "0")
    shutil.rmtree(steps / "1")
    for f in (steps / "2").iterdir():
        if "Grad_MatMul_MatMul-op1" not in f.name:
            f.unlink()
    cat_dir = tmp_path / "cat"
    run = [sys.executable, "-m", "catalog.cli"]
    subprocess.run([*run, "ingest", str(dump), "--catalog", str(cat_dir)], check=True, capture_output=True)
    with Catalog.open(cat_dir) as c:
        rows = c.sql("SELECT iteration, op_name, nan_count, mismatch FROM first_anomaly").to_pylist()
    assert rows == [{"iteration": 2, "op_name": GRAD, "nan_count": 32, "mismatch": "dtype"}]
    out = subprocess.run([*run, "anomalies", str(cat_dir)], capture_output=True, text=True, check=True)
    assert GRAD in out.stdout
    assert f"(iteration 2, {GRAD}: the file is named float16 but holds float32 data" in out.stderr


def test_the_run_folder_above_the_dump_is_ingested_as_its_dump(tmp_path):
    """`dumpcat ingest FOLDER` where FOLDER is the run folder holding dump.json and dump/."""
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(DUMP.parent), "--catalog", str(tmp_path / "cat")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert all(part in out.stdout for part in ("run 'lowp'", "603 new tensors", " 0 errors")), out.stdout
    several = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(MS210.parent / "msprobe" / "cnn"), "--catalog",
         str(tmp_path / "cat2")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert several.returncode != 0 and "Traceback" not in several.stderr
    assert "holds 6 dumps (cnn_bf16_statistics, cnn_bf16_tensor," in several.stderr, several.stderr
    assert not (tmp_path / "cat2").exists()


def test_a_truncated_bfloat16_file_is_an_error_row_and_the_rest_is_cataloged(tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(DUMP, dump)
    victim = sorted((dump / "rank_0" / "Net" / "0" / "2").glob("*.BFloat16.npy"))[0]
    victim.write_bytes(victim.read_bytes()[:-3])
    with Catalog.open(tmp_path / "cat", create=True) as c:
        c.ingest(dump)
        errors = c.sql("SELECT path, reason FROM ingest_errors").to_pylist()
        tensors = c.sql("SELECT count(*) AS n FROM tensors").to_pylist()
    assert len(errors) == 1 and errors[0]["path"].endswith(victim.name)
    assert "truncated" in errors[0]["reason"]
    assert tensors == [{"n": 602}]
