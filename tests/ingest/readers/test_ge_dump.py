"""GE / TorchAir / ATC om dumps through the whole pipeline: the trees of tests/data/ge (written by
tests/writers/ge_tree.py from real MindSpore 2.10 and torch 2.13 tensors) give back every value,
CANN statistics keep CANN's definitions and still find the NaN, and TorchAir's GE ops link to the FX
tensors they were converted from."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.ascend.cann_stats_csv import read_cann_stats_csv
from ingest.formats.mindspore.npy_name import parse_tensor_name
from ingest.pipeline import detect_dump
from tests.conftest import DATA

GE = DATA / "ge"
SOURCE = DATA / "ms210" / "nan_log" / "dump" / "rank_0" / "Net" / "0"
LOG = "Default/network-WithLossCell/_backbone-Net/Log-op0"


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("cat"), create=True)
    for tree in ("ge_tensor", "ge_stats", "om", "torchair"):
        s = c.ingest(GE / tree, run=tree)
        assert s.errors == 0, (tree, s)
    return c


def _rows(cat: Catalog, sql: str) -> list[dict]:
    return cat.sql(sql).to_pylist()


@pytest.mark.parametrize(
    "where, reader",
    [
        ("ge_tensor", "ge"),
        ("ge_tensor/worldsize2_global_rank1", "ge"),
        ("ge_stats", "ge"),
        ("torchair", "ge"),
        ("om", "atc-om"),
    ],
)
def test_each_root_is_detected(where, reader):
    assert detect_dump(GE / where).reader.name == reader


def _source_npy(iteration: int, file_op_name: str, io: str, slot: int) -> Path:
    hits = [
        p
        for p in (SOURCE / str(iteration)).glob("*.npy")
        if (t := parse_tensor_name(p.name)).op_name == file_op_name and t.io == io and t.slot == slot
    ]
    assert len(hits) == 1, (iteration, file_op_name, io, slot)
    return hits[0]


def test_ge_tensors_are_the_values_mindspore_wrote(cat):
    rows = _rows(
        cat,
        "SELECT row_id, rank, iteration, file_op_name, io, slot, format, host_shape FROM tensors "
        "WHERE run = 'ge_tensor'",
    )
    assert len(rows) == 308 and {r["rank"] for r in rows} == {0, 1}
    assert any(r["format"] == "FRACTAL_NZ" and r["host_shape"] for r in rows)
    for r in rows:
        want = np.load(_source_npy(r["iteration"], r["file_op_name"], r["io"], r["slot"]))
        got = cat.tensor(r["row_id"])
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), r


def test_cann_statistics_keep_their_definitions_and_find_the_nan(cat):
    files = sorted((GE / "ge_stats").rglob("*.csv"))
    expected = sum(len(read_cann_stats_csv(f)[0]) for f in files)
    rows = _rows(
        cat,
        "SELECT iteration, rank, op_name, io, slot, max, nan_count, has_nan, stat_semantics, stat_source "
        "FROM stats WHERE run = 'ge_stats'",
    )
    assert len(rows) == expected == 308
    assert {(r["stat_semantics"], r["stat_source"]) for r in rows} == {("cann", "cann_stats_csv")}
    # CANN's max skips NaN: the Log output holding a NaN has a finite max, and the counts still tell
    log = [
        r for r in rows if r["iteration"] == 0 and r["op_name"].endswith("Log-op0") and r["io"] == "output"
    ]
    assert log and all(r["nan_count"] == 1 and math.isfinite(r["max"]) and r["has_nan"] for r in log)
    assert all(r["has_nan"] == (r["nan_count"] > 0) for r in rows if r["nan_count"] is not None)
    nan_ops = {
        r["op_name"] for r in _rows(cat, "SELECT op_name FROM stats WHERE nan_count > 0 AND run = 'ge_stats'")
    }
    assert any(op.endswith("Log-op0") for op in nan_ops)


def test_first_anomaly_on_each_tree(cat):
    first = {(r["run"], r["rank"], r["iteration"]): r for r in _rows(cat, "SELECT * FROM first_anomaly")}
    for rank in (0, 1):
        assert (first[("ge_tensor", rank, 0)]["op_name"], first[("ge_tensor", rank, 0)]["io"]) == (
            LOG,
            "output",
        )
        assert first[("ge_stats", rank, 0)]["op_name"].endswith("Log-op0")
    assert first[("om", 0, 0)]["op_name"] == "Log-op0"
    assert first[("torchair", 0, 0)]["op_name"] in ("log-aten.log.default", "Log")


def test_torchair_ge_ops_link_to_their_fx_tensors(cat):
    links = _rows(cat, "SELECT * FROM fx_links WHERE run = 'torchair'")
    assert len(links) == 12 and all(r["ge_row_id"] and r["fx_row_id"] for r in links)
    for r in links:
        ge, fx = cat.tensor(r["ge_row_id"]), cat.tensor(r["fx_row_id"])
        assert ge.shape == fx.shape and np.array_equal(ge, fx, equal_nan=True), r["ge_op"]
    assert {r["fx_aten_op"] for r in links} >= {"aten.addmm.default", "aten.log.default"}


def test_om_rank_is_the_device_and_iteration_the_data_index(cat):
    got = _rows(
        cat, "SELECT DISTINCT rank, iteration, net, graph_id FROM tensors WHERE run = 'om' ORDER BY ALL"
    )
    assert got == [
        {"rank": 0, "iteration": 0, "net": "nan_log_backbone", "graph_id": 1},
        {"rank": 0, "iteration": 1, "net": "nan_log_backbone", "graph_id": 1},
    ]


def test_reingest_adds_nothing(cat):
    for tree in ("ge_tensor", "ge_stats", "torchair"):
        s = cat.ingest(GE / tree, run=tree)
        assert (s.tensors, s.stat_rows, s.computed_stats, s.errors) == (0, 0, 0, 0), tree


def test_bad_files_are_error_rows_and_the_rest_is_cataloged(tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(GE / "ge_stats", dump)
    csvs = sorted(dump.rglob("*.csv"))
    csvs[0].write_text("Foo,Bar\n1,2\n")
    lines = csvs[1].read_text().splitlines()
    csvs[1].write_text("\n".join([*lines[:-1], "Output,0,64"]) + "\n")
    raw = csvs[2].with_name(csvs[2].name.removesuffix(".csv"))
    raw.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 8)
    (dump / "notes.txt").write_text("hello")
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    errors = {r["path"]: r["reason"] for r in _rows(cat, "SELECT path, reason FROM ingest_errors")}
    rel = [str(p.relative_to(dump)) for p in (csvs[0], raw)]
    assert rel[0] in errors and "Foo" in errors[rel[0]]
    assert any(p.startswith(str(csvs[1].relative_to(dump)) + ":") for p in errors)
    assert rel[1] in errors and "notes.txt" in errors
    assert s.errors == 4
    lost = len(read_cann_stats_csv(sorted((GE / "ge_stats").rglob("*.csv"))[0])[0])
    expected = sum(len(read_cann_stats_csv(f)[0]) for f in csvs[1:])
    assert s.stat_rows == expected == 308 - lost - 1  # the unreadable file's rows and the short line
