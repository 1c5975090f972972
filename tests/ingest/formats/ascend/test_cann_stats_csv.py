"""CANN per-operator stats CSVs (ingest/formats/ascend/cann_stats_csv.py): every committed file of
tests/data/ge/ge_stats (written by tests/writers/ge_tree.py from real MindSpore 2.10 tensors) gives
back the statistics of its tensors with CANN semantics, recomputed here element by element; header
variants, NA, empty statistics, BOM/CRLF and bad input."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest

from ingest.formats.ascend.cann_stats_csv import (
    STATS_CSV_NAME,
    CannStatRow,
    CannStatsError,
    parse_stats_csv_name,
    read_cann_stats_csv,
)
from ingest.formats.ascend.raw_dump import parse_raw_name
from ingest.formats.mindspore.npy_name import parse_tensor_name
from tests.conftest import DATA

STATS = DATA / "ge" / "ge_stats"
SOURCE = DATA / "ms210" / "nan_log" / "dump" / "rank_0" / "Net" / "0"
HEADER = (
    "Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,"
    "Nan Count,Negative Inf Count,Positive Inf Count"
)
GE_TYPES = {"float32": "DT_FLOAT", "int32": "DT_INT32", "int64": "DT_INT64", "bool": "DT_BOOL"}


def _expected(arr: np.ndarray) -> dict[str, float | int | None]:
    """CANN-rt statistics (reference §2.3), one element at a time: a running mean over the finite
    values, Max/Min skipping NaN and keeping ±inf; integers have no NaN/inf; bool is unsupported."""
    if arr.dtype.kind == "b":
        return dict.fromkeys(("max", "min", "avg", "count", "nan", "neg", "pos", "l2"))
    values = [float(v) for v in arr.ravel().tolist()]
    nan = sum(1 for v in values if v != v)
    pos = sum(1 for v in values if v == math.inf)
    neg = sum(1 for v in values if v == -math.inf)
    kept = [v for v in values if v == v]
    mean, n = 0.0, 0
    for v in values:
        if math.isfinite(v):
            n += 1
            mean += (v - mean) / n
    if nan or (pos and neg):
        avg = math.nan
    elif pos or neg:
        avg = math.inf if pos else -math.inf
    else:
        avg = mean
    l2 = math.sqrt(sum(v * v for v in values))
    return {
        "max": max(kept) if kept else math.nan, "min": min(kept) if kept else math.nan, "avg": avg,
        "count": len(values), "nan": nan, "neg": neg, "pos": pos, "l2": l2,
    }  # fmt: skip


def _same(got: float | None, want: float | None, rel: float = 0.0) -> bool:
    if got is None or want is None:
        return got is want
    if math.isnan(want) or math.isinf(want):
        return (math.isnan(got) and math.isnan(want)) or got == want
    return math.isclose(got, want, rel_tol=rel, abs_tol=1e-12 if rel else 0.0)


def _source_tensor(step: str, op_name: str, io: str, slot: int) -> np.ndarray:
    hits = [
        f for f in (SOURCE / step).glob("*.npy")
        if (tn := parse_tensor_name(f.name)).op_name == op_name and tn.io == io and tn.slot == slot
    ]  # fmt: skip
    assert len(hits) == 1, (step, op_name, io, slot)
    return np.load(hits[0])


def _committed() -> list[Path]:
    files = sorted(STATS.rglob("*.csv"))
    assert len(files) == 72
    return files


def test_every_committed_stats_csv_holds_the_cann_statistics_of_its_real_tensors():
    slots = 0
    for f in _committed():
        name = parse_stats_csv_name(f.name)
        assert name is not None and STATS_CSV_NAME.match(f.name), f.name
        assert parse_raw_name(f.name[: -len(".csv")]) == dataclasses.replace(name, extension="")
        rows, problems = read_cann_stats_csv(f)
        assert problems == []
        n_sources = sum(
            1
            for p in (SOURCE / f.parent.name).glob("*.npy")
            if parse_tensor_name(p.name).op_name == name.op_name
        )
        assert len(rows) == n_sources, f
        columns = f.read_text().splitlines()[0].split(",")
        for row in rows:
            arr = _source_tensor(f.parent.name, name.op_name, row.io, row.index)
            want = _expected(arr)
            assert row.data_type == GE_TYPES[arr.dtype.name] and row.format == "ND"
            assert row.data_size == arr.nbytes and row.shape == arr.shape
            assert row.count == want["count"]
            assert _same(row.max, want["max"]) and _same(row.min, want["min"]), (f, row)
            if "Avg Value" in columns:
                assert _same(row.avg, want["avg"], 1e-6), (f, row)
                got = (row.nan_count, row.neg_inf_count, row.pos_inf_count)
                assert got == (want["nan"], want["neg"], want["pos"]), (f, row)
            else:
                assert (row.avg, row.nan_count) == (None, None)
            if "l2norm" in columns:
                assert _same(row.l2norm, want["l2"], 1e-6), (f, row)
            else:
                assert row.l2norm is None
            slots += 1
    assert slots == 308


def test_the_committed_files_hold_every_variant_and_the_nan_op():
    texts = {f: f.read_text() for f in _committed()}
    assert sum("l2norm" in t for t in texts.values()) >= 8  # the dump_stats header
    assert sum(t.count("Input/Output") > 1 for t in texts.values()) == 1  # a repeated header row
    assert any(",DT_BOOL,ND,,,,,,,\n" in t for t in texts.values())  # empty statistics
    # iteration 0: the first output with a NaN, in task order, is Log-op0's
    steps = list(STATS.glob("worldsize2_global_rank*/*/*/*/1/0"))
    assert len(steps) == 2
    for rank_root in steps:
        by_task = sorted(rank_root.glob("*.csv"), key=lambda p: parse_stats_csv_name(p.name).task_id)
        first = next(
            p for p in by_task
            if any(r.io == "output" and (r.nan_count or 0) > 0 for r in read_cann_stats_csv(p)[0])
        )  # fmt: skip
        assert parse_stats_csv_name(first.name).op_name.endswith("Net_Log-op0")


def _write(tmp_path: Path, text: str | bytes, name: str = "Add.Add_1.3.2.1725960383079645.csv") -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def test_default_header_na_empty_stats_scalar_and_ieee_spellings(tmp_path):
    p = _write(
        tmp_path,
        f"{HEADER}\n"
        "Input,0,268435456,DT_INT64,ND,100x20x40,100,200,10.1,80000,400,500,600\n"
        "Input,1,320000,DT_FLOAT,ND,100x20x40,NA,NA,NA,80000,NA,NA,NA\n"
        "Input,2,4,DT_BOOL,ND,1,,,,,,\n"
        "Output,0,4,DT_FLOAT,ND,,inf,-Infinity,NaN,1,0,1,1\n"
        "output,1,2,DT_BF16,FRACTAL_NZ,1x16x16x16,-inf,-inf,-inf,4096,0,4096,0\n",
    )
    rows, problems = read_cann_stats_csv(p)
    assert problems == []
    assert rows[0] == CannStatRow(
        2, "input", 0, 268435456, "DT_INT64", "ND", (100, 20, 40), 100.0, 200.0, 10.1, 80000, 400, 500, 600,
        None, None,
    )  # fmt: skip
    assert (rows[1].max, rows[1].count, rows[1].nan_count) == (None, 80000, None)
    assert rows[2].shape == (1,) and rows[2].count is None and rows[2].max is None and rows[2].avg is None
    assert rows[3].shape == () and rows[3].max == math.inf and rows[3].min == -math.inf
    assert math.isnan(rows[3].avg)
    assert rows[4].io == "output" and rows[4].format == "FRACTAL_NZ" and rows[4].data_type == "DT_BF16"


def test_dump_stats_header_l2norm_md5_and_column_order(tmp_path):
    p = _write(
        tmp_path,
        "Input/Output,Index,Data Size,Data Type,Format,Shape,Count,Max Value,Min Value,l2norm\n"
        "Output,0,64,DT_FLOAT,ND,4x4,16,3.5,-1,7.25\n",
    )
    (row,), problems = read_cann_stats_csv(p)
    assert problems == [] and (row.count, row.max, row.min, row.l2norm, row.avg) == (
        16,
        3.5,
        -1.0,
        7.25,
        None,
    )
    p = _write(
        tmp_path,
        "Input/Output,Index,Data Size,Data Type,Format,Shape,L2Norm Value,MD5 Value, nan count \n"
        "Input,3,8,DT_INT32,ND,2,5,9e107d9d372bb6826bd81d3542a419d6,0\n",
    )
    (row,), _ = read_cann_stats_csv(p)
    assert (row.index, row.l2norm, row.md5, row.nan_count) == (3, 5.0, "9e107d9d372bb6826bd81d3542a419d6", 0)


def test_repeated_header_rows_are_skipped_and_a_new_one_remaps(tmp_path):
    p = _write(
        tmp_path,
        f"{HEADER}\nInput,0,4,DT_FLOAT,ND,1,1,1,1,1,0,0,0\n{HEADER}\nOutput,0,4,DT_FLOAT,ND,1,2,2,2,1,0,0,0\n"
        "Input/Output,Index,Data Size,Data Type,Format,Shape,Count,l2norm\nOutput,1,4,DT_FLOAT,ND,1,1,3\n",
    )
    rows, problems = read_cann_stats_csv(p)
    assert problems == []
    assert [(r.line_no, r.io, r.index, r.max, r.l2norm) for r in rows] == [
        (2, "input", 0, 1.0, None), (4, "output", 0, 2.0, None), (6, "output", 1, None, 3.0)
    ]  # fmt: skip


def test_bom_crlf_and_blank_lines(tmp_path):
    text = (
        f"\ufeff{HEADER}\r\n\r\n"
        "Input,0,4,DT_FLOAT,ND,1,1.5,1.5,1.5,1,0,0,0\r\nOutput,0,4,DT_FLOAT,ND,1,2,2,2,1,0,0,0\r\n"
    )
    rows, problems = read_cann_stats_csv(_write(tmp_path, text.encode("utf-8")))
    assert problems == [] and [(r.line_no, r.max) for r in rows] == [(3, 1.5), (4, 2.0)]


def test_bad_lines_are_reported_and_the_other_rows_come_back(tmp_path):
    p = _write(
        tmp_path,
        f"{HEADER}\n"
        "Input,0,4,DT_FLOAT,ND,1,1,1,1,1,0,0,0\n"
        "Input,1,4,DT_FLOAT\n"  # short
        "Input,2,4,DT_FLOAT,ND,1,1,1\n"  # short with statistics
        "Input,3,4,DT_FLOAT,ND,1,one,1,1,1,0,0,0\n"  # bad number
        "Input,4,4,DT_FLOAT,ND,1,1,1,1,1.5,0,0,0\n"  # a count that is no integer
        "Inout,5,4,DT_FLOAT,ND,1,1,1,1,1,0,0,0\n"  # unknown Input/Output
        "Input,6,4,DT_FLOAT,ND,2y3,1,1,1,1,0,0,0\n"  # bad shape
        "Input,7,4,DT_FLOAT,ND,1,1,1,1,1,0,0,0,9\n"  # long
        "Input,,4,DT_FLOAT,ND,1,1,1,1,1,0,0,0\n"  # no index
        "Output,0,4,DT_FLOAT,ND,1,2,2,2,1,0,0,0,\n",  # a trailing comma is fine
    )
    rows, problems = read_cann_stats_csv(p)
    assert [(r.io, r.index) for r in rows] == [("input", 0), ("output", 0)]
    assert [line for line, _ in problems] == [3, 4, 5, 6, 7, 8, 9, 10]
    assert "max" in problems[2][1] and "'one'" in problems[2][1] and "Inout" in problems[4][1]


@pytest.mark.parametrize(
    ("header", "names"),
    [
        ("Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Median Value", ["Median Value"]),
        ("Input/Output,Index,Data Type,Format,Shape,Max Value", ["Data Size"]),
        ("Input/Output,Index,Data Size,Data Type,Format,Shape,Count,count", ["Count", "count"]),
    ],
)
def test_an_unmappable_header_names_the_column(tmp_path, header, names):
    with pytest.raises(CannStatsError) as err:
        read_cann_stats_csv(_write(tmp_path, header + "\nInput,0,4,DT_FLOAT,ND,1,1,1\n"))
    for n in names:
        assert repr(n) in str(err.value)


@pytest.mark.parametrize("text", ["", "\n\n", "Input,0,4,DT_FLOAT,ND,1,1,1,1,1,0,0,0\n"])
def test_no_header_is_an_error(tmp_path, text):
    with pytest.raises(CannStatsError):
        read_cann_stats_csv(_write(tmp_path, text))


def test_file_names():
    assert parse_stats_csv_name("aclnnBatchMatMul_0_L2.aclnnBatchMatMul.65535.65535.1725960383079645.csv")
    assert parse_stats_csv_name("Add.a.b.c.3.2.1725960383079645.csv").op_name == "a.b.c"
    for bad in ("statistic.csv", "Add.Add_1.3.1725960383079645.csv", "Add.Add_1.3.2.17259.bin", "x.npy"):
        assert parse_stats_csv_name(bad) is None


def test_hostile_bytes_raise_only_the_documented_errors(tmp_path):
    good = (STATS.rglob("*.csv").__next__()).read_bytes()
    rng = random.Random(7)
    for i in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            op = rng.random()
            at = rng.randrange(len(data))
            if op < 0.4:
                data[at] = rng.choice(b',"\r\n\x00xNA-e.9\xff\xef')
            elif op < 0.7:
                del data[at : at + rng.randint(1, 20)]
            else:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))
        p = _write(tmp_path, bytes(data), f"Add.Add.1.1.{i}.csv")
        try:
            rows, problems = read_cann_stats_csv(p)
        except (CannStatsError, UnicodeDecodeError):
            continue
        assert all(isinstance(r, CannStatRow) for r in rows)
        assert all(isinstance(line, int) and isinstance(why, str) for line, why in problems)
