"""Tests for ingest.formats.mindspore.statistic_csv against real files: per-version fixtures, resume,
partial lines, garbage."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.formats.mindspore.statistic_csv import (
    OUTPUT_SCHEMA,
    _read_statistic_csv,
    _scan_lines,
    parse_statistic_csv_bytes,
    read_statistic_csv,
)
from ingest.storage.schema import STAT_ROWS
from tests.conftest import DATA as TEST_DATA

DATA = TEST_DATA / "statistic_csv"
V23_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
    "Max Value,Min Value,L2Norm Value\n"
)
ADD0 = "Default_network-WithLossCell__backbone-Net_Add-op0"


def rows(result) -> list[dict]:
    return result.table.to_pylist()


def by_line(result) -> dict[int, dict]:
    return {r["line_no"]: r for r in rows(result)}


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Table equality where NaN equals NaN (arrow's ``equals`` says NaN != NaN)."""

    def key(t: pa.Table) -> list:
        return [
            {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in t.to_pylist()
        ]

    return a.schema.equals(b.schema) and key(a) == key(b)


def check_clean(result, path: Path, nrows: int) -> None:
    """No errors, the whole file consumed, and the table typed exactly like STAT_ROWS."""
    assert result.errors == []
    assert result.table.num_rows == nrows
    assert result.end_offset == path.stat().st_size
    assert result.end_line == nrows + 1
    assert result.table.schema.equals(OUTPUT_SCHEMA)
    for f in result.table.schema:
        assert STAT_ROWS.field(f.name).type == f.type


# ---------------------------------------------------------------- fixtures, one per generation


def test_v16_20col():
    path = DATA / "v16_20col.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 6)
    assert r.header[:3] == ["Op Type", "Op Name", "Task ID"] and len(r.header) == 20
    lines = by_line(r)
    assert sorted(lines) == [2, 3, 4, 5, 6, 7]
    add_in = lines[2]
    assert add_in["op_type"] == "Add" and add_in["file_op_name"] == "Add-op1"
    assert (add_in["task_id"], add_in["stream_id"], add_in["timestamp_us"]) == (0, 0, 1655271093812345)
    assert (add_in["io"], add_in["slot"], add_in["data_size"], add_in["data_type"]) == (
        "input",
        0,
        24,
        "float32",
    )
    assert add_in["shape"] == [2, 3]
    assert (add_in["max"], add_in["min"], add_in["avg"]) == (3.0, 0.5, 1.75)
    assert (add_in["count"], add_in["neg_count"], add_in["pos_count"], add_in["zero_count"]) == (6, 0, 6, 0)
    # absent from the v1.6 header -> NULL
    assert all(row["l2norm"] is None and row["md5"] is None and row["format"] is None for row in rows(r))
    param = lines[4]
    assert (param["op_type"], param["file_op_name"]) == ("Parameter", "conv1.weight")
    assert param["shape"] == [6, 1, 3, 3] and param["avg"] == 2.75947e-09
    assert (param["neg_count"], param["pos_count"]) == (27, 27)
    div = lines[5]  # ≤2.2 writes null when every element is nan/inf
    assert div["shape"] == [] and div["max"] is None and div["min"] is None and div["avg"] is None
    assert div["nan_count"] == 1 and div["count"] == 1
    mul = lines[6]
    assert mul["max"] == math.inf and mul["min"] == -math.inf and math.isnan(mul["avg"])
    assert mul["shape"] == [4]
    assert (mul["neg_inf_count"], mul["pos_inf_count"], mul["zero_count"]) == (1, 1, 1)
    fill = lines[7]
    assert fill["max"] == 1234570.0 and fill["count"] == 1_000_000 and fill["shape"] == [1000, 1000]


def test_v2214_md5():
    path = DATA / "v2214_md5.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 4)
    assert r.header[-1] == "MD5"
    lines = by_line(r)
    assert lines[2]["md5"] == "fa85978152c7dfb5f1322082915cb050"
    assert lines[3]["md5"] == "09db9f4f62754a72d54e11b7922bdbab"
    assert lines[4]["shape"] == [] and lines[4]["max"] == 42.5 and lines[4]["pos_count"] == 1
    assert lines[5]["max"] is None and lines[5]["md5"] == "d6fd2bac25776d9a7269ca0e24b21b36"
    assert all(row["l2norm"] is None for row in rows(r))


def test_v23_default_trailing_comma_is_not_an_error():
    path = DATA / "v23_default.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 5)
    assert len(r.header) == 13
    lines = by_line(r)
    out = lines[3]
    assert (out["file_op_name"], out["io"], out["timestamp_us"]) == (ADD0, "output", 1719312345678901)
    assert (out["max"], out["min"], out["l2norm"]) == (6.0, 1.0, 9.53939)
    # not in the default header -> NULL
    for name in ("avg", "count", "neg_count", "pos_count", "nan_count", "zero_count", "md5", "format"):
        assert out[name] is None
    assert lines[4]["file_op_name"] == "conv1_weight" and lines[4]["op_type"] == "Parameter"
    div = lines[5]
    assert (
        div["shape"] == [] and math.isnan(div["max"]) and math.isnan(div["min"]) and math.isnan(div["l2norm"])
    )
    mul = lines[6]
    assert (mul["max"], mul["min"], mul["l2norm"]) == (math.inf, -math.inf, math.inf)


def test_v23_custom_order_maps_by_name():
    path = DATA / "v23_custom_order.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 3)
    lines = by_line(r)
    add = lines[2]
    assert add["md5"] == "fa85978152c7dfb5f1322082915cb050"
    assert (add["max"], add["min"], add["avg"], add["l2norm"]) == (6.0, 1.0, 3.5, 9.53939)
    assert (add["count"], add["neg_count"], add["pos_count"], add["zero_count"]) == (6, 0, 6, 0)
    mul = lines[3]
    assert (mul["max"], mul["min"], mul["l2norm"]) == (math.inf, -math.inf, math.inf)
    assert math.isnan(mul["avg"])
    assert (mul["count"], mul["neg_count"], mul["pos_count"], mul["zero_count"]) == (4, 1, 2, 1)
    assert (mul["nan_count"], mul["neg_inf_count"], mul["pos_inf_count"]) == (0, 1, 1)
    div = lines[4]
    assert all(math.isnan(div[k]) for k in ("max", "min", "avg", "l2norm"))
    assert (div["nan_count"], div["count"], div["md5"]) == (1, 1, "d6fd2bac25776d9a7269ca0e24b21b36")


def test_dev_build_spellings():
    path = DATA / "dev_nan_count_l2value.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 2)
    lines = by_line(r)
    assert lines[2]["l2norm"] == 9.53939 and lines[2]["nan_count"] == 0
    assert lines[3]["nan_count"] == 1 and math.isnan(lines[3]["l2norm"])
    assert lines[3]["md5"] == "d6fd2bac25776d9a7269ca0e24b21b36"


def test_msprobe_variant():
    path = DATA / "msprobe.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 3)
    lines = by_line(r)
    assert (lines[2]["io"], lines[2]["format"], lines[2]["task_id"], lines[2]["stream_id"]) == (
        "input",
        "ND",
        12,
        2,
    )
    assert lines[2]["md5"] == "9c5ac82ebbdf2851fef43e63cda77a19" and lines[2]["l2norm"] == 4.7697
    conv = lines[4]
    assert (
        conv["format"] == "NC1HWC0" and conv["shape"] == [1, 1, 2, 2, 16] and conv["data_type"] == "float16"
    )
    assert conv["md5"] is None  # empty field -> NULL
    assert (conv["neg_inf_count"], conv["pos_inf_count"], conv["nan_count"]) == (2, 3, 0)
    assert conv["count"] is None and conv["zero_count"] is None  # not in this header


def test_appended_rerun_uses_first_header():
    path = DATA / "appended_rerun.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 6)
    assert [row["line_no"] for row in rows(r)] == [2, 3, 4, 5, 6, 7]
    assert [row["timestamp_us"] for row in rows(r)][3:] == [
        1719399999000001,
        1719399999000001,
        1719399999000100,
    ]
    assert by_line(r)[7]["max"] == 0.25


def test_garbled_rows_become_errors():
    path = DATA / "garbled.csv"
    r = read_statistic_csv(path)
    assert [row["line_no"] for row in rows(r)] == [2, 5]
    assert [ln for ln, _ in r.errors] == [3, 4]
    assert "fields" in r.errors[0][1]
    assert "Count" in r.errors[1][1] and "abc" in r.errors[1][1]
    assert r.end_line == 5 and r.end_offset == path.stat().st_size
    assert by_line(r)[5]["shape"] == []


# ---------------------------------------------------------------- resume and partial lines


def test_resume_after_append(tmp_path):
    path = tmp_path / "statistic.csv"
    shutil.copy(DATA / "v23_default.csv", path)
    first = read_statistic_csv(path)
    assert first.table.num_rows == 5 and first.end_line == 6
    with open(path, "a") as f:
        f.write(f'Add,{ADD0},0,0,1719400000000001,input,1,24,float32,"(2,3)",7,2,11.2694,\n')
        f.write(f'Add,{ADD0},0,0,1719400000000001,output,0,24,float32,"()",-inf,nan,null,\n')
    again = read_statistic_csv(path, start_offset=first.end_offset, start_line=first.end_line)
    assert again.errors == []
    assert again.header == first.header
    got = rows(again)
    assert [row["line_no"] for row in got] == [7, 8]
    assert (got[0]["slot"], got[0]["max"], got[0]["l2norm"]) == (1, 7.0, 11.2694)
    assert got[1]["max"] == -math.inf and math.isnan(got[1]["min"]) and got[1]["l2norm"] is None
    assert got[1]["shape"] == []
    assert again.end_offset == path.stat().st_size and again.end_line == 8
    nothing = read_statistic_csv(path, start_offset=again.end_offset, start_line=again.end_line)
    assert nothing.table.num_rows == 0 and nothing.errors == [] and nothing.end_line == 8


def test_partial_last_line_is_not_consumed_until_complete(tmp_path):
    path = tmp_path / "statistic.csv"
    complete = V23_HEADER + f'Add,{ADD0},0,0,1,output,0,24,float32,"(2,3)",6,1,9.53939,\n'
    partial = f'Mul,{ADD0},0,0,2,output,0,24,float32,"(2,3)",6,'
    path.write_text(complete + partial)
    r1 = read_statistic_csv(path)
    assert r1.table.num_rows == 1 and r1.errors == []
    assert r1.end_offset == len(complete.encode()) and r1.end_line == 2
    with open(path, "a") as f:
        f.write("1,9.53939,\n")
    r2 = read_statistic_csv(path, r1.end_offset, r1.end_line)
    assert r2.errors == [] and [row["line_no"] for row in rows(r2)] == [3]
    assert rows(r2)[0]["op_type"] == "Mul" and r2.end_offset == path.stat().st_size


def test_partial_header_consumes_nothing(tmp_path):
    path = tmp_path / "statistic.csv"
    path.write_text("Op Type,Op Name,Task ID")
    r = read_statistic_csv(path)
    assert (r.table.num_rows, r.errors, r.end_offset, r.end_line, r.header) == (0, [], 0, 0, [])
    path.write_text("")
    assert read_statistic_csv(path).end_offset == 0


def test_chunked_reading_matches_whole_read(tmp_path):
    path = tmp_path / "statistic.csv"
    rerun_rows = (DATA / "appended_rerun.csv").read_text().split("\n", 1)[1]
    text = (DATA / "v23_default.csv").read_text() + rerun_rows  # 12 lines
    path.write_text(text + "Add,broken\n" + f'Add,{ADD0},0,0,1,output,0,24,float32,"(2,3)",6,1,9.53939,\n')
    whole = read_statistic_csv(path)
    assert [ln for ln, _ in whole.errors] == [13]
    assert whole.table.num_rows == 12 and whole.end_line == 14
    for chunk in (1, 7, 64, 300):
        part = _read_statistic_csv(path, 0, 0, chunk)
        assert same_rows(part.table, whole.table)
        assert (part.errors, part.end_offset, part.end_line) == (whole.errors, whole.end_offset, 14)


def test_bad_resume_offset_is_reported_not_raised(tmp_path):
    path = tmp_path / "statistic.csv"
    shutil.copy(DATA / "v23_default.csv", path)
    size = path.stat().st_size
    beyond = read_statistic_csv(path, start_offset=size + 10, start_line=9)
    assert beyond.table.num_rows == 0 and beyond.errors[0][0] == 0 and "beyond" in beyond.errors[0][1]
    mid = read_statistic_csv(path, start_offset=5, start_line=1)
    assert mid.table.num_rows == 0 and "line boundary" in mid.errors[0][1]


# ---------------------------------------------------------------- bad content


def test_headerless_file_gives_one_error(tmp_path):
    path = tmp_path / "statistic.csv"
    path.write_text(
        'Add,Add-op1,0,0,1655271093812345,output,0,24,float32,"(2,3)",6,1,3.5,6,0,6,0,0,0,0\n'
        'Add,Add-op1,0,0,1655271093812345,input,0,24,float32,"(2,3)",6,1,3.5,6,0,6,0,0,0,0\n'
    )
    r = read_statistic_csv(path)
    assert r.table.num_rows == 0 and len(r.errors) == 1 and r.errors[0][0] == 1
    assert "header" in r.errors[0][1]
    assert r.end_line == 2 and r.end_offset == path.stat().st_size


def test_headerless_file_that_grows_is_reported_once(tmp_path):
    path = tmp_path / "statistic.csv"
    line = 'Add,Add-op1,0,0,1655271093812345,output,0,24,float32,"(2,3)",6,1,3.5,6,0,6,0,0,0,0\n'
    path.write_text(line)
    first = read_statistic_csv(path)
    with path.open("a") as fh:
        fh.write(line)
    again = read_statistic_csv(path, start_offset=first.end_offset, start_line=first.end_line)
    assert len(first.errors) == 1 and again.errors == [] and again.end_line == 2


def test_dimension_beyond_int64_is_one_bad_row(tmp_path):
    """A shape no BIGINT holds fails its own row; the rows around it keep their shapes."""
    path = tmp_path / "statistic.csv"
    path.write_text(
        V23_HEADER
        + f'Add,{ADD0},0,0,1,output,0,4,float32,"(2,3)",1,0,1,\n'
        + f'Add,{ADD0},0,0,2,output,0,4,float32,"({"9" * 30},1)",1,0,1,\n'
        + f'Add,{ADD0},0,0,3,output,0,4,float32,"(5)",1,0,1,\n'
    )
    r = read_statistic_csv(path)
    assert [ln for ln, _ in r.errors] == [3]
    assert {ln: row["shape"] for ln, row in by_line(r).items()} == {2: [2, 3], 4: [5]}


def test_binary_garbage_gives_one_error(tmp_path):
    path = tmp_path / "statistic.csv"
    path.write_bytes(bytes(range(256)) * 40 + b"\n\xff\xfe,,,\n")
    r = read_statistic_csv(path)
    assert r.table.num_rows == 0 and len(r.errors) == 1 and r.errors[0][0] == 1


def test_overlong_line_is_skipped_with_bounded_memory(tmp_path):
    """A newline-less run of garbage is dropped, not buffered; unfinished it is left unconsumed."""
    path = tmp_path / "statistic.csv"
    good = f'Add,{ADD0},0,0,1,output,0,24,float32,"(2,3)",6,1,9.53939,\n'
    head = V23_HEADER + good
    path.write_text(head + "x" * (3 << 20) + "\n" + good)
    for chunk in (1 << 16, 1 << 24):
        r = _read_statistic_csv(path, 0, 0, chunk)
        assert [row["line_no"] for row in rows(r)] == [2, 4]
        assert [ln for ln, _ in r.errors] == [3]  # 'longer than' or 'found 1' fields, by chunk size
        assert r.end_line == 4 and r.end_offset == path.stat().st_size
    path.write_text(head + "x" * (3 << 20))
    r = _read_statistic_csv(path, 0, 0, 1 << 16)
    assert r.errors == [] and r.end_offset == len(head) and r.end_line == 2


def test_missing_file_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        read_statistic_csv(tmp_path / "nope.csv")


def test_field_count_quotes_utf8_and_blank_lines(tmp_path):
    path = tmp_path / "statistic.csv"
    good = f'Add,{ADD0},0,0,1,output,0,24,float32,"(2,3)",6,1,9.53939,'
    lines = [
        V23_HEADER.rstrip("\n"),
        good,  # 2
        good[:-1],  # 3: no trailing comma, matches the header count: fine
        good + "x,",  # 4: two extra fields
        good[:-1] + ",extra",  # 5: one extra field that is not empty
        f'Add,{ADD0},0,0,1,output,0,24,float32,"(2,3,6,1,9.53939,',  # 6: unbalanced quote
        "",  # 7: blank line, skipped silently
        good.replace("Add,", "Add\xe9,", 1),  # 8: latin-1 byte below
        f',{ADD0},0,0,1,output,0,24,float32,"(2,3)",6,1,9.53939,',  # 9: missing Op Type
        good.replace('"(2,3)"', '"(2,x)"'),  # 10: bad shape
        good.replace(",6,1,", ",-nan,nan(ind),"),  # 11: glibc/MSVC NaN spellings
        good,  # 12
    ]
    data = "\n".join(lines).encode("latin-1") + b"\n"
    path.write_bytes(data)
    r = read_statistic_csv(path)
    assert [row["line_no"] for row in rows(r)] == [2, 3, 11, 12]
    assert [ln for ln, _ in r.errors] == [4, 5, 6, 8, 9, 10]
    reasons = dict(r.errors)
    assert "quote" in reasons[6] and "UTF-8" in reasons[8] and "missing" in reasons[9]
    assert "Shape" in reasons[10]
    assert math.isnan(by_line(r)[11]["max"]) and math.isnan(by_line(r)[11]["min"])
    assert r.end_line == 12


def test_unknown_columns_ignored_and_mixed_trailing_comma(tmp_path):
    """A v2.2 file later appended by a v2.3 run (trailing commas) keeps file order."""
    path = tmp_path / "statistic.csv"
    path.write_text(
        "OP TYPE,op name,Extra Thing,io,SLOT,Max Value\n"
        "Add,Add-op1,zzz,output,0,1.5\n"
        "Add,Add-op1,zzz,input,1,2.5,\n"
        "Add,Add-op1,zzz,input,2,3.5\n"
    )
    r = read_statistic_csv(path)
    assert r.errors == []
    assert [(row["line_no"], row["slot"], row["max"]) for row in rows(r)] == [
        (2, 0, 1.5),
        (3, 1, 2.5),
        (4, 2, 3.5),
    ]
    assert rows(r)[0]["task_id"] is None and rows(r)[0]["shape"] is None


def test_null_is_null_only_in_numeric_columns(tmp_path):
    path = tmp_path / "statistic.csv"
    path.write_text(V23_HEADER + "Cast,null,0,null,1,output,0,24,null,null,null,null,null,\n")
    r = read_statistic_csv(path)
    assert r.errors == []
    (row,) = rows(r)
    assert (row["file_op_name"], row["data_type"]) == ("null", "null")  # strings stay literal
    assert row["stream_id"] is None and row["shape"] is None
    assert row["max"] is None and row["min"] is None and row["l2norm"] is None


def test_crlf_line_endings(tmp_path):
    path = tmp_path / "statistic.csv"
    body = (DATA / "v23_default.csv").read_text()
    path.write_bytes(body.replace("\n", "\r\n").encode())
    r = read_statistic_csv(path)
    assert r.errors == [] and r.table.num_rows == 5
    assert by_line(r)[3]["l2norm"] == 9.53939


def test_parse_bytes_with_external_header():
    body = f'Add,{ADD0},0,0,1,output,0,24,float32,"(2,3)",6,1,9.53939,\nAdd,{ADD0},0,'
    r = parse_statistic_csv_bytes(body.encode(), header_line=V23_HEADER.encode(), first_line_no=10)
    assert [row["line_no"] for row in rows(r)] == [10]
    assert r.end_offset == body.index("\n") + 1 and r.end_line == 10
    whole = parse_statistic_csv_bytes((DATA / "v23_custom_order.csv").read_bytes())
    assert whole.table.num_rows == 3 and whole.end_line == 4


# ---------------------------------------------------------------- timestamp units


def test_timestamp_units_are_detected():
    """Seconds, milliseconds and nanoseconds give the µs value, to the precision the unit has;
    non-epoch values (0, small counters) are kept as written."""
    path = DATA / "timestamp_units.csv"
    r = read_statistic_csv(path)
    check_clean(r, path, 9)
    us = 1719312345678901
    assert {ln: row["timestamp_us"] for ln, row in by_line(r).items()} == {
        2: us,  # µs, as MindSpore writes it
        3: us,  # seconds with a 6-digit fraction: exact, not through a float
        4: us // 10**6 * 10**6,  # whole seconds
        5: us,  # milliseconds with a fraction
        6: us // 1000 * 1000,  # whole milliseconds
        7: us,  # nanoseconds
        8: us,  # a fraction of a µs is dropped
        9: 0,
        10: 42,
    }


def test_timestamp_unit_thresholds():
    stamps = ["99999999", "100000000", "99999999999", "100000000000", "99999999999999"]
    stamps += ["100000000000000", "99999999999999999", "100000000000000000", "-5", "12.9"]
    stamps += ["-1719312345.5", "9223372036854775807"]
    body = "".join(f'Add,{ADD0},0,0,{t},output,0,24,float32,"(2,3)",6,1,9.53939,\n' for t in stamps)
    r = parse_statistic_csv_bytes((V23_HEADER + body).encode())
    assert r.errors == []
    assert [row["timestamp_us"] for row in rows(r)] == [
        99999999,  # below 1e8: not an epoch time in any unit, kept
        100000000 * 10**6,  # seconds from 1e8 (1973-03-03)
        99999999999 * 10**6,
        100000000000 * 10**3,  # milliseconds from 1e11
        99999999999999 * 10**3,
        100000000000000,  # µs from 1e14
        99999999999999999,
        100000000000000,  # ns from 1e17
        -5,  # negative: kept
        12,  # small with a fraction: kept, fraction dropped
        -1719312345,
        9223372036854775,  # the largest int64 as ns
    ]


def test_unparseable_timestamps_are_row_errors(tmp_path):
    good = f'Add,{ADD0},0,0,1719312345.5,output,0,24,float32,"(2,3)",6,1,9.53939,\n'
    path = tmp_path / "statistic.csv"
    path.write_text(
        V23_HEADER
        + good
        + good.replace("1719312345.5", "1.7e9")  # 3: exponent notation is not accepted
        + good.replace("1719312345.5", "17193x")  # 4
        + good.replace("1719312345.5", "9" * 25)  # 5: beyond int64
        + good.replace("1719312345.5", "")  # 6: empty is NULL
        + good.replace("1719312345.5", "null")  # 7: null is NULL
    )
    r = read_statistic_csv(path)
    assert [ln for ln, _ in r.errors] == [3, 4, 5]
    assert all("Timestamp" in reason for _, reason in r.errors)
    assert {ln: row["timestamp_us"] for ln, row in by_line(r).items()} == {
        2: 1719312345500000,
        6: None,
        7: None,
    }


@settings(max_examples=200, deadline=None)
@given(us=st.integers(10**14, 10**17 - 1))
def test_any_epoch_us_value_survives_every_unit(us):
    """An epoch µs value written in s (6 decimals), ms (3 decimals), µs or ns reads back the same;
    whole s and ms lose only the digits they do not have. (ns in an int64 end in 2262.)"""
    texts = [
        f"{us // 10**6}.{us % 10**6:06d}",
        f"{us // 1000}.{us % 1000:03d}",
        str(us),
        str(us // 10**6),
        str(us // 1000),
    ]
    want = [us, us, us, us // 10**6 * 10**6, us // 1000 * 1000]
    if us * 1000 + 999 < 2**63:
        texts.append(str(us * 1000 + 999))
        want.append(us)
    body = "".join(f'Add,{ADD0},0,0,{t},output,0,24,float32,"(2,3)",6,1,9.53939,\n' for t in texts)
    r = parse_statistic_csv_bytes((V23_HEADER + body).encode())
    assert r.errors == []
    assert [row["timestamp_us"] for row in rows(r)] == want


# ---------------------------------------------------------------- round-trip property

CATEGORY = {
    "max": ("Max Value", "max"),
    "min": ("Min Value", "min"),
    "avg": ("Avg Value", "avg"),
    "count": ("Count", "count"),
    "negative zero count": ("Negative Zero Count", "neg_count"),
    "positive zero count": ("Positive Zero Count", "pos_count"),
    "nan count": ("NaN Count", "nan_count"),
    "negative inf count": ("Negative Inf Count", "neg_inf_count"),
    "positive inf count": ("Positive Inf Count", "pos_inf_count"),
    "zero count": ("Zero Count", "zero_count"),
    "l2norm": ("L2Norm Value", "l2norm"),
    "md5": ("MD5", "md5"),
}
FLOAT_STATS = {"max", "min", "avg", "l2norm"}

float_values = st.floats(allow_nan=True, allow_infinity=True, width=64)
count_values = st.integers(min_value=0, max_value=2**53)
name_text = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", min_size=1, max_size=60
)
row_strategy = st.fixed_dictionaries(
    {
        "op_type": st.sampled_from(["Add", "Conv2D", "Parameter", "MatMul", "Cast"]),
        "file_op_name": name_text,
        "task_id": st.integers(0, 2**31),
        "stream_id": st.integers(0, 64),
        # What the writer puts there: µs since the epoch, or a small non-epoch number (kept as is).
        "timestamp_us": st.one_of(st.integers(0, 10**8 - 1), st.integers(10**14, 10**17 - 1)),
        "io": st.sampled_from(["input", "output"]),
        "slot": st.integers(0, 2**31 - 1),
        "data_size": st.integers(0, 2**40),
        "data_type": st.sampled_from(["float32", "float16", "bfloat16", "int4", "bool", "int64"]),
        "shape": st.lists(st.integers(0, 2**31), max_size=6),
        "stats": st.fixed_dictionaries(
            {k: (float_values if k in FLOAT_STATS else count_values) for k in CATEGORY if k != "md5"}
            | {"md5": st.binary(min_size=16, max_size=16).map(bytes.hex)}
        ),
        "neg_nan": st.booleans(),
    }
)


def write_g(x: float, neg_nan: bool) -> str:
    """C++ ostream default formatting (== printf %g); glibc may print a negative NaN as -nan."""
    if math.isnan(x):
        return "-nan" if neg_nan else "nan"
    return f"{x:g}"


@settings(max_examples=150, deadline=None)
@given(
    category=st.lists(st.sampled_from(sorted(CATEGORY)), unique=True, min_size=1, max_size=12),
    data_rows=st.lists(row_strategy, min_size=1, max_size=20),
)
def test_v23_writer_round_trip(category, data_rows):
    header = "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape"
    header += "".join("," + CATEGORY[c][0] for c in category) + "\n"
    lines = [header]
    for row in data_rows:
        fields = [
            str(row[k]) for k in ("op_type", "file_op_name", "task_id", "stream_id", "timestamp_us", "io")
        ]
        fields += [str(row["slot"]), str(row["data_size"]), row["data_type"]]
        fields.append('"(' + ",".join(map(str, row["shape"])) + ')"')
        for c in category:
            v = row["stats"][c]
            fields.append(write_g(v, row["neg_nan"]) if c in FLOAT_STATS else str(v))
        lines.append(",".join(fields) + ",\n")  # CsvWriter: every value followed by ','
    data = "".join(lines).encode()

    result = parse_statistic_csv_bytes(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "statistic.csv")
        with open(path, "wb") as f:
            f.write(data)
        from_file = _read_statistic_csv(path, 0, 0, 97)
    assert same_rows(from_file.table, result.table) and from_file.errors == result.errors

    assert result.errors == []
    assert result.end_offset == len(data) and result.end_line == len(data_rows) + 1
    got = result.table.to_pylist()
    assert len(got) == len(data_rows)
    chosen = {CATEGORY[c][1]: c for c in category}
    for i, (want, have) in enumerate(zip(data_rows, got, strict=True)):
        assert have["line_no"] == i + 2
        for k in ("op_type", "file_op_name", "task_id", "stream_id", "timestamp_us", "io", "slot"):
            assert have[k] == want[k]
        assert (have["data_size"], have["data_type"], have["shape"]) == (
            want["data_size"],
            want["data_type"],
            want["shape"],
        )
        for _, (_, col) in CATEGORY.items():
            if col not in chosen:
                assert have[col] is None
                continue
            v = want["stats"][chosen[col]]
            if chosen[col] in FLOAT_STATS:
                expect = float(f"{v:g}")
                assert math.isnan(have[col]) if math.isnan(expect) else have[col] == expect
            else:
                assert have[col] == v


def test_output_schema_is_stat_rows_subset():
    assert isinstance(OUTPUT_SCHEMA, pa.Schema)
    assert [f.name for f in OUTPUT_SCHEMA][:3] == ["line_no", "op_type", "file_op_name"]
    for f in OUTPUT_SCHEMA:
        assert STAT_ROWS.field(f.name).type == f.type


def _fields_of_line(line: bytes) -> tuple[int, bool]:
    """Reference field count of one line (without its newline): commas outside quoted fields
    + 1, as the scanner counts them; a line with an odd number of quotes counts every comma."""
    if line.count(b'"') % 2:
        return line.count(b",") + 1, True
    fields, quoted = 1, False
    for byte in line:
        if byte == 34:
            quoted = not quoted
        elif byte == 44 and not quoted:
            fields += 1
    return fields, False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=',"ab\r1 ', max_size=30), max_size=40))
def test_line_scan_counts_fields_like_a_reading_line_by_line(lines):
    """The vectorised line scan (comma offsets, not a per-byte int64 mask) counts each line's
    fields and flags odd quotes exactly as a plain line-by-line count does."""
    import numpy as np

    data = b"".join(line.encode() + b"\n" for line in lines)
    if not data:
        return
    scanned = _scan_lines(np.frombuffer(data, np.uint8))
    expected = [_fields_of_line(line.encode()) for line in lines]
    assert scanned.nfields.tolist() == [f for f, _ in expected]
    assert scanned.odd_quotes.tolist() == [odd for _, odd in expected]
