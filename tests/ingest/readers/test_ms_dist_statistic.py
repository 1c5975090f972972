"""A statistics-only 4-rank MindSpore dump (tests/data/ms_dist_statistic/dist_allreduce, written by
tests/writers/ms_dist_statistic.py from the real run tests/data/ms210/dist_allreduce): no counts,
only max/min/l2norm. Checked against the CSV files read with the `csv` module and against the npy
files of the run they describe."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from catalog import Catalog
from tests.conftest import DATA, MS210

TREE = DATA / "ms_dist_statistic" / "dist_allreduce"
NPY = MS210 / "dist_allreduce" / "dump"
RANKS = (0, 1, 2, 3)


def read_csv(rank: int, iteration: int) -> list[dict]:
    with open(TREE / f"rank_{rank}" / "Net" / "0" / str(iteration) / "statistic.csv", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = []
        for fields in reader:
            assert fields[-1] == ""  # the >= 2.3 trailing comma
            rows.append(dict(zip(header, fields[:-1], strict=True)))
    return rows


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("stat") / "cat", create=True)
    assert c.ingest(TREE, run="stat").errors == 0
    yield c
    c.close()


def test_one_row_per_npy_file_of_the_real_run(cat):
    for rank in RANKS:
        for iteration in (0, 1, 2):
            rows = read_csv(rank, iteration)
            files = list((NPY / f"rank_{rank}" / "Net" / "0" / str(iteration)).glob("*.npy"))
            assert len(rows) == len(files)
            by_key = {(r["Op Name"], r["Timestamp"], r["IO"], r["Slot"]): r for r in rows}
            for f in files:
                _, op, _, _, ts, io, slot = f.name.split(".")[:7]
                r = by_key[(op, ts, io, slot)]
                a = np.load(f).astype(np.float64)
                if np.isnan(a).any():
                    assert (r["Max Value"], r["Min Value"]) == ("nan", "nan")
                elif a.size:
                    assert math.isclose(float(r["Max Value"]), a.max(), rel_tol=1e-5, abs_tol=1e-30)
    n = cat.sql("SELECT count(*) FROM stats WHERE nan_count IS NULL AND max IS NOT NULL").column(0)[0].as_py()
    assert n == sum(len(read_csv(r, i)) for r in RANKS for i in (0, 1, 2))


def test_first_anomaly_from_max_and_min_alone(cat):
    """Per rank and step, the first row (outputs first, then timestamp) whose max or min is NaN or
    Inf: found in the CSV here, and named by first_anomaly, with no counts to go on."""
    got = {
        (r["rank"], r["iteration"]): (r["op_name"], r["io"], r["slot"], r["nan_count"])
        for r in cat.sql("SELECT * FROM first_anomaly").to_pylist()
    }
    want = {}
    for rank in RANKS:
        for iteration in (0, 1, 2):
            bad = [
                r
                for r in read_csv(rank, iteration)
                if any(r[c] in ("nan", "inf", "-inf") for c in ("Max Value", "Min Value"))
            ]
            if bad:
                r = min(bad, key=lambda r: (r["IO"] != "output", int(r["Timestamp"]), int(r["Slot"])))
                want[(rank, iteration)] = (r["Op Name"], r["IO"], int(r["Slot"]))
    assert set(got) == set(want) == {(r, i) for r in RANKS for i in (1, 2)}
    for key, (op_name, io, slot, nan_count) in got.items():
        # the CSV has the sanitised name (`/` -> `_`), first_anomaly the full one
        assert (op_name.replace("/", "_"), io, slot) == want[key] and nan_count is None
    assert got[(2, 1)][0] == "Default/network-WithLoss/_backbone-LogNet/Log-op0"
    assert {got[(r, 1)][0] for r in (0, 1, 3)} == {"Default/AllReduce-op2"}


def test_has_nan_and_has_inf_are_known_without_an_average(cat):
    """The tree has max, min and l2norm but no average: a row of finite max and min holds no NaN
    (MindSpore's max and min are NaN when any element is), so has_nan is false, not NULL; the
    rows the CSV shows nan in say true."""
    rows = cat.sql(
        "SELECT rank, iteration, op_name, io, slot, has_nan, has_inf, max, min FROM stats"
    ).to_pylist()
    assert rows and all(r["has_nan"] is not None and r["has_inf"] is not None for r in rows)
    for r in rows:
        assert r["has_nan"] == (math.isnan(r["max"]) or math.isnan(r["min"]))
        assert r["has_inf"] == (math.isinf(r["max"]) or math.isinf(r["min"]))
    nan_rows = {(r["rank"], r["iteration"]) for r in rows if r["has_nan"]}
    assert nan_rows == {(rank, i) for rank in RANKS for i in (1, 2)}
