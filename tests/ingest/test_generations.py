"""Dump trees of older MindSpore generations, built from a real 2.10 dump by renaming its files
and writing statistic.csv exactly as the reference describes each generation's writer."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.mindspore.npy_name import parse_tensor_name

V16_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
    "Avg Value,Count,Negative Zero Count,Positive Zero Count,NaN Count,Negative Inf Count,Positive Inf Count,"
    "Zero Count"
)
V23_DEFAULT_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
    "Max Value,Min Value,L2Norm Value"
)


def _g(x: float) -> str:
    """C++ ostream default formatting: 6 significant digits, nan/inf spelled like glibc."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"


def _shape(shape: tuple[int, ...]) -> str:
    return '"(' + ",".join(str(d) for d in shape) + ')"'


def _rename_tree(dump: Path, rename) -> None:
    for f in sorted(dump.rglob("*.npy")):
        f.rename(f.with_name(rename(f.name)))


def _to_v22_name(name: str) -> str:
    """v1.3-2.2 sync: short op name (last scope component), no dtype token; params keep dots."""
    n = parse_tensor_name(name)
    op = n.op_name
    if n.op_type == "Parameter":
        op = op.replace("_", ".") if op.startswith(("conv1_", "fc_")) else op
    else:
        op = re.sub(r"^.*?([A-Za-z0-9]+-op\d+)$", r"\1", op)
    return f"{n.op_type}.{op}.{n.task_id}.{n.stream_id}.{n.timestamp_us}.{n.io}.{n.slot}.{n.format}.npy"


def _to_v23_name(name: str) -> str:
    """v2.3: full sanitised name, no dtype token."""
    return re.sub(r"\.[A-Za-z0-9]+\.npy$", ".npy", name)


def _write_csv(it_dir: Path, header: str, row, trailing_comma: bool) -> list[Path]:
    lines = [header]
    files = sorted(it_dir.glob("*.npy"))
    for f in files:
        n = parse_tensor_name(f.name)
        a = np.load(f).astype(np.float64)
        fields = [
            n.op_type,
            n.op_name,
            str(n.task_id),
            str(n.stream_id),
            str(n.timestamp_us),
            n.io,
            str(n.slot),
        ]
        fields += [str(np.load(f).nbytes), np.load(f).dtype.name, _shape(a.shape), *row(a)]
        lines.append(",".join(fields) + ("," if trailing_comma else ""))
    (it_dir / "statistic.csv").write_text("\n".join(lines) + "\n")
    return files


def _v16_values(a: np.ndarray) -> list[str]:
    if a.size == 0:
        return ["null", "null", "null", "0", "0", "0", "0", "0", "0", "0"]
    return [
        _g(a.max()), _g(a.min()), _g(a.mean()), str(a.size), str(int((a < 0).sum())), str(int((a > 0).sum())),
        str(int(np.isnan(a).sum())), str(int(np.isneginf(a).sum())), str(int(np.isposinf(a).sum())),
        str(int((a == 0).sum())),
    ]  # fmt: skip


def _v23_values(a: np.ndarray) -> list[str]:
    return [_g(a.max()), _g(a.min()), _g(float(np.sqrt((a * a).sum())))]


@pytest.mark.parametrize(
    "era, rename, header, values, trailing",
    [
        ("v1.3-2.2", _to_v22_name, V16_HEADER, _v16_values, False),
        ("v2.3", _to_v23_name, V23_DEFAULT_HEADER, _v23_values, True),
    ],
)
def test_generation_with_statistic_csv(tmp_path, copy_dump, era, rename, header, values, trailing):
    dump = copy_dump("simple")
    _rename_tree(dump, rename)
    it0 = dump / "rank_0/Net/0/0"
    files = _write_csv(it0, header, values, trailing)
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.errors == 0, cat.sql("SELECT * FROM ingest_errors").to_pylist()
    assert s.stat_rows == len(files) == 81
    eras = cat.sql("SELECT DISTINCT name_era FROM tensors WHERE op_type <> 'Parameter'").column(0)
    assert eras.to_pylist() == [era]
    # Iteration 0 has statistic.csv: every tensor there gets exactly its csv row and no computed row.
    src = cat.sql(
        "SELECT stat_source, count(*) AS n, count(row_id) AS matched FROM stats "
        "WHERE iteration = 0 GROUP BY 1"
    ).to_pylist()
    assert src == [{"stat_source": "statistic.csv", "n": 81, "matched": 81}]
    # Other iterations are computed from the data.
    other = cat.sql("SELECT DISTINCT stat_source FROM stats WHERE iteration > 0").column(0).to_pylist()
    assert other == ["computed"]
    # csv values are the ones written, 6 significant digits.
    conv = cat.sql(
        "SELECT s.max, s.min, t.path FROM stats s JOIN tensors t USING (row_id) "
        "WHERE s.iteration = 0 AND s.op_type = 'Conv2D' AND s.io = 'output'"
    ).to_pylist()[0]
    data = np.load(conv["path"]).astype(np.float64)
    assert conv["max"] == float(_g(data.max())) and conv["min"] == float(_g(data.min()))
    # Full names resolve: v2.3 through the sanitised name, v2.2 through the unique short name.
    resolved = (
        cat.sql("SELECT op_name FROM tensors WHERE op_type = 'Conv2D' AND iteration = 0 AND io = 'output'")
        .column(0)[0]
        .as_py()
    )
    assert resolved == "Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op0"


def test_v22_parameters_with_dots(tmp_path, copy_dump):
    dump = copy_dump("simple")
    _rename_tree(dump, _to_v22_name)
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    names = set(
        cat.sql("SELECT DISTINCT op_name FROM tensors WHERE op_type = 'Parameter'").column(0).to_pylist()
    )
    assert {"conv1.weight", "fc.bias", "fc.weight"} <= names


def test_ambiguous_short_names_stay_unresolved(tmp_path, copy_dump):
    """2.10's op indices repeat across scopes (`MatMul-op0` forward and backward): a short name
    shared by two operators must not be guessed."""
    dump = copy_dump("simple")
    _rename_tree(dump, _to_v22_name)
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    rows = cat.sql(
        "SELECT DISTINCT op_name, name_match FROM tensors WHERE file_op_name = 'MatMul-op0'"
    ).to_pylist()
    assert rows == [{"op_name": "MatMul-op0", "name_match": "unresolved"}]


def test_device_stat_rows_match_without_timestamp(tmp_path, copy_dump):
    """Device-mode statistic rows carry their own timestamp: they still find their unique file."""
    dump = copy_dump("simple")
    it0 = dump / "rank_0/Net/0/0"
    f = sorted(it0.glob("ReLU.*.output.0.*.npy"))[0]
    n = parse_tensor_name(f.name)
    row = f'ReLU,{n.op_name},0,0,{n.timestamp_us + 17},output,0,8192,float32,"(4,8,16,16)",1,0,2,'
    orphan = 'Abs,Default_Abs-op9,0,0,5,output,0,4,float32,"()",1,1,1,'
    (it0 / "statistic.csv").write_text(V23_DEFAULT_HEADER + "\n" + row + "\n" + orphan + "\n")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    rows = cat.sql(
        "SELECT op_type, row_id FROM stats WHERE stat_source = 'statistic.csv' ORDER BY 1"
    ).to_pylist()
    want = cat.sql(f"SELECT row_id FROM tensors WHERE file_name = '{f.name}'").column(0)[0].as_py()
    assert rows == [{"op_type": "Abs", "row_id": None}, {"op_type": "ReLU", "row_id": want}]
