"""statistic.csv rows checked against the real dump they describe: a row whose Shape or Data Size
contradicts its tensor file is flagged (`stats.mismatch`, one `ingest_errors` note per csv), and
a Timestamp written in seconds is stored in µs. Dumps are copies of a real MindSpore dump with a
v2.3+ statistic.csv written beside the npy files, its values computed from those files."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from catalog.api import Catalog
from ingest.readers import mindspore_npy as npy_reader
from ingest.readers import stat_match

ITER0 = "rank_0/Net/0/0"
CSV_REL = f"{ITER0}/statistic.csv"
HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
    "Max Value,Min Value,L2Norm Value\n"
)


def dumpcat(*args) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def g(x: float) -> str:
    """C++ ostream formatting of a double (MindSpore's statistic values)."""
    return "nan" if math.isnan(x) else f"{x:g}"


def csv_line(f: Path, *, shape=None, size=None, stamp=None) -> str:
    """The v2.3 host-mode line of npy file `f`, from its real data (or the given wrong values)."""
    op_type, op, task, stream, ts, io, slot = f.name.split(".")[:7]
    data = np.load(f)
    if shape is None:
        shape = data.shape
    size = data.nbytes if size is None else size
    shape_text = '"(' + ",".join(map(str, shape)) + ')"' if shape != "" else ""
    x = data.astype(np.float64)
    mx, mn = (g(x.max()), g(x.min())) if x.size else ("0", "0")
    l2 = g(float(np.sqrt(np.sum(x * x))))
    dtype = data.dtype.name
    stamp = ts if stamp is None else stamp
    return f"{op_type},{op},{task},{stream},{stamp},{io},{slot},{size},{dtype},{shape_text},{mx},{mn},{l2},\n"


def pick(it: Path) -> dict[str, Path]:
    """Some tensor files of the iteration, with at least 2-D shapes where a test needs one."""
    files = sorted(it.glob("*.npy"))
    two_d = [f for f in files if np.load(f).ndim == 2 and len(set(np.load(f).shape)) == 2]
    others = [f for f in files if f not in two_d]
    return {"a": two_d[0], "b": two_d[1], "c": others[0], "d": others[1], "e": others[2], "f": others[3]}


def stat_rows(cat: Catalog) -> list[dict]:
    """The `stats` rows from statistic.csv, in csv line order, with their file's name."""
    return cat.sql(
        "SELECT r.line_no, s.row_id, s.mismatch, s.timestamp_us, s.shape, s.nbytes, t.file_name "
        "FROM stats s JOIN raw_stat_rows r USING (stat_id) LEFT JOIN tensors t ON t.row_id = s.row_id "
        "WHERE s.stat_source = 'statistic.csv' ORDER BY r.line_no"
    ).to_pylist()


def csv_errors(cat: Catalog) -> list[dict]:
    return cat.sql(f"SELECT path, stage, reason FROM ingest_errors WHERE path LIKE '{CSV_REL}%'").to_pylist()


def by_line(cat: Catalog) -> dict[int, dict]:
    return {r["line_no"]: r for r in stat_rows(cat)}


# ---------------------------------------------------------------- contradictions


def test_rows_that_contradict_their_file_are_flagged(tmp_path, copy_dump):
    dump = copy_dump("nan_log")
    it = dump / ITER0
    f = pick(it)
    a_shape = np.load(f["a"]).shape
    c_bytes = np.load(f["c"]).nbytes
    lines = [
        csv_line(f["a"], shape=a_shape[::-1]),  # 2: shape transposed
        csv_line(f["b"]),  # 3: right
        csv_line(f["c"], size=c_bytes + 4),  # 4: wrong byte size
        csv_line(f["d"], shape=(7, 7), size=196),  # 5: both wrong
        csv_line(f["e"], shape="", size=""),  # 6: Shape and Data Size empty: nothing to contradict
        csv_line(f["f"]).replace(f["f"].name.split(".")[1], "Default_NoSuchOp-op99", 1),  # 7: no file
    ]
    (it / "statistic.csv").write_text(HEADER + "".join(lines))
    cat_path = tmp_path / "cat"
    out = dumpcat("ingest", dump, "--catalog", cat_path, "--run", "nan_log")
    assert "6 statistic rows" in out and "1 errors" in out

    cat = Catalog.open(cat_path)
    got = by_line(cat)
    assert {ln: r["mismatch"] for ln, r in got.items()} == {
        2: "shape",
        3: None,
        4: "nbytes",
        5: "shape,nbytes",
        6: None,
        7: None,
    }
    assert got[7]["row_id"] is None
    assert [got[ln]["file_name"] for ln in (2, 3, 4, 5, 6)] == [f[k].name for k in "abcde"]
    # The csv's values are what `stats` shows; `mismatch` says the file disagrees.
    assert got[2]["shape"] == list(a_shape[::-1]) and got[4]["nbytes"] == c_bytes + 4

    (err,) = csv_errors(cat)
    assert err["path"] == CSV_REL and err["stage"] == "statistic_csv"
    rows_a = ", ".join(map(str, a_shape))
    assert err["reason"] == (
        "3 rows disagree with their tensor file; first: line 2 "
        f"shape [{', '.join(map(str, a_shape[::-1]))}] in the csv, [{rows_a}] in {f['a'].name}"
    )
    # Computed statistics have nothing to contradict.
    computed = cat.sql("SELECT count(*) n, count(mismatch) m FROM stats WHERE stat_source = 'computed'")
    assert computed.to_pylist() == [{"n": 180 - 5, "m": 0}]
    # Re-ingesting an unchanged dump adds no second note.
    assert "0 errors" in dumpcat("ingest", dump, "--catalog", cat_path, "--run", "nan_log")
    assert len(csv_errors(Catalog.open(cat_path))) == 1


def test_note_names_both_values_of_the_first_row(tmp_path, copy_dump):
    dump = copy_dump("nan_log")
    it = dump / ITER0
    f = pick(it)
    d = np.load(f["d"])
    (it / "statistic.csv").write_text(HEADER + csv_line(f["b"]) + csv_line(f["d"], shape=(7, 7), size=196))
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.errors == 1
    (err,) = csv_errors(cat)
    assert err["reason"] == (
        "1 row disagrees with its tensor file; first: line 3 "
        f"shape [7, 7] in the csv, {list(d.shape)} in {f['d'].name}; "
        f"Data Size 196 in the csv, {d.nbytes} bytes in {f['d'].name}"
    )


def test_agreeing_csv_has_no_mismatch_and_no_error(tmp_path, copy_dump):
    dump = copy_dump("nan_log")
    it = dump / ITER0
    files = sorted(it.glob("*.npy"))
    (it / "statistic.csv").write_text(HEADER + "".join(csv_line(f) for f in files))
    cat_path = tmp_path / "cat"
    out = dumpcat("ingest", dump, "--catalog", cat_path)
    assert f"{len(files)} statistic rows" in out and "0 errors" in out
    cat = Catalog.open(cat_path)
    rows = stat_rows(cat)
    assert len(rows) == len(files) and all(r["row_id"] is not None for r in rows)
    assert [r["mismatch"] for r in rows] == [None] * len(files)
    assert cat.sql("SELECT count(*) FROM ingest_errors").column(0)[0].as_py() == 0


def test_files_cataloged_earlier_are_checked_from_their_headers(tmp_path, copy_dump):
    """A csv that appears after its tensors were cataloged: the files' npy headers are read."""
    dump = copy_dump("nan_log")
    it = dump / ITER0
    f = pick(it)
    cat = Catalog.open(tmp_path / "cat", create=True)
    assert cat.ingest(dump).errors == 0
    c_bytes = np.load(f["c"]).nbytes
    (it / "statistic.csv").write_text(HEADER + csv_line(f["b"]) + csv_line(f["c"], size=c_bytes * 2))
    s = cat.ingest(dump)
    assert (s.tensors, s.stat_rows, s.errors) == (0, 2, 1)
    assert [(r["file_name"], r["mismatch"]) for r in stat_rows(cat)] == [
        (f["b"].name, None),
        (f["c"].name, "nbytes"),
    ]
    (err,) = csv_errors(cat)
    assert f"line 3 Data Size {c_bytes * 2} in the csv, {c_bytes} bytes in {f['c'].name}" in err["reason"]


def test_directory_read_file_by_file_is_checked_too(tmp_path, copy_dump, monkeypatch):
    """The file-by-file path (huge or live directories) matches before it reads any header."""
    monkeypatch.setattr(npy_reader, "_GIANT_LEAF_FILES", 10)
    dump = copy_dump("nan_log")
    it = dump / ITER0
    f = pick(it)
    a_shape = np.load(f["a"]).shape
    (it / "statistic.csv").write_text(HEADER + csv_line(f["a"], shape=a_shape[::-1]) + csv_line(f["b"]))
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump, workers=1)
    assert (s.stat_rows, s.errors) == (2, 1)
    assert [r["mismatch"] for r in stat_rows(cat)] == ["shape", None]


def _facts(data_type: str, csv_shape, size, file_shape, file_nbytes, fmt="DefaultFormat") -> str | None:
    """`mismatch` of one csv row matched to one file."""
    keys = {"op_type": ["Add"], "file_op_name": ["a"], "io": ["output"], "slot": pa.array([0], pa.int32())}
    stats = pa.table(
        {
            **keys,
            "timestamp_us": pa.array([1], pa.int64()),
            "data_size": pa.array([size], pa.int64()),
            "data_type": [data_type],
            "shape": pa.array([csv_shape], pa.list_(pa.int64())),
        }
    )
    files = stat_match.file_keys(
        [("Add", "a", "output", 0, 1, 7, "Add.a.0.0.1.output.0.npy", fmt, file_shape, file_nbytes)]
    )
    out = stat_match.match_stat_rows(stats, files)
    assert out.column("row_id").to_pylist() == [7]
    return out.column("mismatch")[0].as_py()


def test_converted_dtypes_compare_the_packed_size():
    """bfloat16 is dumped as float32, int4 as int8, uint1 as uint8: the csv's Data Size is the
    original packed buffer."""
    assert _facts("bfloat16", [2, 3], 12, [2, 3], 24) is None
    assert _facts("bfloat16", [2, 3], 24, [2, 3], 24) == "nbytes"
    assert _facts("int4", [5], 3, [5], 5) is None
    assert _facts("uint1", [3, 3], 2, [3, 3], 9) is None
    assert _facts("uint1", [], 1, [], 1) is None
    assert _facts("float32", [2, 3], 24, [2, 3], 24) is None
    assert _facts("float32", [], 4, [], 4) is None
    assert _facts("float32", [2, 3], None, [3, 2], 24) == "shape"
    assert _facts("float32", None, 24, [3, 2], None) is None  # unknown on either side


def test_device_layout_shape_is_not_compared():
    """An NC1HWC0 npy holds the device shape; only its byte size is checked."""
    assert _facts("float16", [1, 3, 4, 4], 512, [1, 1, 4, 4, 16], 512, fmt="NC1HWC0") is None
    assert _facts("float16", [1, 3, 4, 4], 96, [1, 1, 4, 4, 16], 512, fmt="NC1HWC0") == "nbytes"


# ---------------------------------------------------------------- timestamp units


@pytest.mark.parametrize("fraction", [True, False])
def test_csv_in_seconds_is_stored_in_microseconds(tmp_path, copy_dump, fraction):
    """Seconds with the µs fraction still match their files exactly; whole seconds match by
    (op, io, slot). Either way `stats.timestamp_us` is µs."""
    dump = copy_dump("nan_log")
    it = dump / ITER0
    files = sorted(it.glob("*.npy"))[:6]
    lines = []
    for f in files:
        us = int(f.name.split(".")[4])
        seconds = f"{us // 10**6}.{us % 10**6:06d}" if fraction else str(us // 10**6)
        lines.append(csv_line(f, stamp=seconds))
    (it / "statistic.csv").write_text(HEADER + "".join(lines))
    cat_path = tmp_path / "cat"
    assert "0 errors" in dumpcat("ingest", dump, "--catalog", cat_path)
    cat = Catalog.open(cat_path)
    rows = stat_rows(cat)
    assert [r["file_name"] for r in rows] == [f.name for f in files]
    for r, f in zip(rows, files, strict=True):
        us = int(f.name.split(".")[4])
        assert r["timestamp_us"] == (us if fraction else us // 10**6 * 10**6)
        assert r["mismatch"] is None
    file_stamps = cat.sql("SELECT min(timestamp_us), max(timestamp_us) FROM tensors").to_pylist()[0]
    lo, hi = file_stamps.values()
    assert all(lo - 10**6 <= r["timestamp_us"] <= hi for r in rows)
