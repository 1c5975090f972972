"""MindInsight's watch conditions (sql/95_watch.sql) on real catalogs of the committed dumps.

Each macro is checked against an independent computation in Python: over the tensors' data
(`Catalog.tensor`) where the condition is defined on elements, over the `stats` rows where it is
defined on statistics. Macros that statistics can only bound must return every tensor the data says
hits (never miss) and mark `certain` only tensors that do hit.
"""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np
import psycopg
import pytest

from catalog import guard
from catalog.api import Catalog
from catalog.server.server import Limits, Server
from tests.conftest import DATA, MS210

MS_RUNS = ["nan_log", "control_flow", "iter_filter", "kernels_filter", "long_names", "outputs_only"]
USER, PASSWORD = "alice", "s3cret pw"


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("watch") / "cat"
    cat = Catalog.open(path, create=True)
    for run in MS_RUNS:
        cat.ingest(MS210 / run / "dump", run=run, md5=True)
    cat.ingest(MS210 / "compare" / "base" / "dump", run="compare_base", md5=True)
    cat.ingest(DATA / "msprobe" / "pt_mix_tensor", run="msprobe", md5=True)
    cat.ingest(DATA / "ge" / "ge_stats", run="ge")
    cat.close()
    return path


@pytest.fixture(scope="module")
def cat(cat_path):
    c = Catalog.open(cat_path)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stats(cat) -> list[dict]:
    return cat.sql("SELECT * FROM stats").to_pylist()


@pytest.fixture(scope="module")
def data(cat, stats) -> dict[int, np.ndarray]:
    """Every tensor's values as float64 (host layout), by row id."""
    out = {}
    for r in stats:
        if r["row_id"] is not None:
            arr = cat.tensor(r["row_id"])
            if arr.dtype.kind in "biuf":
                out[r["row_id"]] = arr.astype(np.float64)
    return out


def key(r: dict) -> tuple:
    """A statistic row's identity: its tensor, or where its statistics-only (CANN) row belongs."""
    return (r["run"], r["row_id"], r["rank"], r["graph_id"], r["iteration"], r["op_name"], r["io"], r["slot"])


def rows(cat, query: str) -> list[dict]:
    return cat.sql(query).to_pylist()


def target(r: dict) -> str:
    """The target of a stats row, as the macros' header defines it (written independently)."""
    name, io, msprobe = r["op_name"] or "", r["io"], r["arg_path"] is not None
    if io == "parameter" or (r["op_type"] == "Parameter" and not msprobe):
        return "weight"
    backward = name.endswith(".backward") or ".backward." in name
    if io == "parameter_grad" or (
        io == "output" and (name.startswith("Gradients/") if not msprobe else backward)
    ):
        return "gradient"
    if io == "output" and (r["op_type"] or "").lower() in ("relu", "sigmoid", "tanh"):
        return "activation"
    return "tensor"


def nonfinite(arr: np.ndarray) -> bool:
    return bool(np.isnan(arr).any() or np.isinf(arr).any())


def near(value: float, threshold: float) -> bool:
    """Too close to the threshold for float32-rounded statistics to decide the same way."""
    return abs(value - threshold) <= 1e-6 * max(1.0, abs(threshold))


# -- NaN / Inf ---------------------------------------------------------------------------------


def test_nan_inf_is_exactly_the_tensors_holding_nan_or_inf(cat, stats, data):
    got = {key(r) for r in rows(cat, "SELECT * FROM watch_nan_inf()")}
    by_data = {key(r) for r in stats if r["row_id"] in data and nonfinite(data[r["row_id"]])}
    assert by_data  # the nan_log dump holds NaN
    # GE stats rows have no tensor file: by their own counts.
    by_counts = {
        key(r)
        for r in stats
        if r["row_id"] is None
        and ((r["nan_count"] or 0) + (r["neg_inf_count"] or 0) + (r["pos_inf_count"] or 0) > 0)
    }
    assert got == by_data | by_counts
    nan_only = {key(r) for r in rows(cat, "SELECT * FROM watch_nan_inf(inf := false)")}
    assert nan_only == {
        key(r) for r in stats if r["row_id"] in data and np.isnan(data[r["row_id"]]).any()
    } | {key(r) for r in stats if r["row_id"] is None and (r["nan_count"] or 0) > 0}
    assert rows(cat, "SELECT * FROM watch_nan_inf(nan := false, inf := false)") == []


def test_overflow_conditions_per_target(cat, stats, data):
    bad = {key(r): target(r) for r in stats if r["row_id"] in data and nonfinite(data[r["row_id"]])}
    tensor = {key(r) for r in rows(cat, "SELECT * FROM watch_tensor_overflow()") if r["row_id"] is not None}
    assert tensor == set(bad)
    weight = {key(r) for r in rows(cat, "SELECT * FROM watch_weight_overflow()")}
    assert weight == {k for k, t in bad.items() if t == "weight"}
    grads = {key(r) for r in rows(cat, "SELECT * FROM watch_gradient_exploding()")}
    assert grads == {k for k, t in bad.items() if t == "gradient"}
    assert grads  # the NaN of nan_log reaches its gradients
    # l2norm_gt adds the finite gradients with a larger norm
    big = {
        key(r)
        for r in stats
        if target(r) == "gradient"
        and r["row_id"] in data
        and not nonfinite(data[r["row_id"]])
        and np.linalg.norm(data[r["row_id"]].ravel()) > 1.0
    }
    assert big
    with_l2 = {key(r) for r in rows(cat, "SELECT * FROM watch_gradient_exploding(l2norm_gt := 1.0)")}
    assert with_l2 == grads | big


def test_targets_are_the_documented_ones(cat, stats):
    got = {(r["run"], r["row_id"], r["stat_id"]): r["target"] for r in rows(cat, "SELECT * FROM watch_stats")}
    assert got == {(r["run"], r["row_id"], r["stat_id"]): target(r) for r in stats}
    assert len(got) == len(stats)
    kinds = defaultdict(set)
    for r in stats:
        kinds[target(r)].add(r["run"])
    assert {"nan_log", "msprobe"} <= kinds["weight"] and {"nan_log", "msprobe"} <= kinds["gradient"]
    assert "activation" in kinds


# -- thresholds on values ----------------------------------------------------------------------


def _values(arr: np.ndarray) -> dict[str, float]:
    return {
        "max": arr.max(),
        "min": arr.min(),
        "mean": arr.mean(),
        "abs_mean": np.abs(arr).mean(),
        "l2norm": np.linalg.norm(arr.ravel()),
    }


@pytest.mark.parametrize(
    ("macro", "tgt", "params"),
    [
        ("watch_tensor_too_large", None, {"max_gt": 1.0, "mean_gt": 0.05}),
        ("watch_tensor_too_large", None, {"abs_mean_gt": 0.1}),
        ("watch_tensor_too_large", None, {"min_gt": 0.0, "l2norm_gt": 3.0}),
        ("watch_weight_too_large", "weight", {"abs_mean_gt": 0.05, "max_gt": 0.3}),
        ("watch_gradient_too_large", "gradient", {"abs_mean_gt": 0.01}),
        ("watch_tensor_too_small", None, {"max_lt": 0.0, "mean_lt": -0.01}),
        ("watch_tensor_too_small", None, {"abs_mean_lt": 0.05}),
        ("watch_weight_too_small", "weight", {"abs_mean_lt": 0.2, "min_lt": -0.3}),
        ("watch_gradient_vanishing", "gradient", {"abs_mean_lt": 1e-3, "l2norm_lt": 0.01}),
    ],
)
def test_value_thresholds_against_the_data(cat, stats, data, macro, tgt, params):
    args = ", ".join(f"{k} := {v}" for k, v in params.items())
    got = {key(r): r for r in rows(cat, f"SELECT * FROM {macro}({args})") if r["row_id"] is not None}
    hits, borderline = set(), set()
    for r in stats:
        arr = data.get(r["row_id"])
        if arr is None or arr.size == 0 or nonfinite(arr) or (tgt and target(r) != tgt):
            continue
        v = _values(arr)
        for name, threshold in params.items():
            stat, op = name.rsplit("_", 1)
            if near(v[stat], threshold):
                borderline.add(key(r))
            elif (v[stat] > threshold) if op == "gt" else (v[stat] < threshold):
                hits.add(key(r))
    hits -= borderline
    returned = set(got) - borderline
    certain = {k for k, r in got.items() if r["certain"]} - borderline
    assert hits, "the thresholds should select something"
    assert hits <= returned  # never misses
    assert certain <= hits  # certain rows do hit
    if not any(p.startswith("abs_mean") for p in params):
        assert returned == hits and certain == hits  # max/min/mean/l2norm are exact
    for r in got.values():
        assert r["condition"] == macro.removeprefix("watch_") and r["detail"]


def test_abs_mean_is_exact_for_one_signed_tensors(cat, stats, data):
    got = {key(r): r for r in rows(cat, "SELECT * FROM watch_tensor_too_large(abs_mean_gt := 0.05)")}
    one_signed = 0
    for r in stats:
        arr = data.get(r["row_id"])
        if arr is None or arr.size == 0 or nonfinite(arr) or not (arr.min() >= 0 or arr.max() <= 0):
            continue
        v = np.abs(arr).mean()
        if near(v, 0.05):
            continue
        one_signed += 1
        assert (key(r) in got) == (v > 0.05)
        if key(r) in got:
            assert got[key(r)]["certain"]
    assert one_signed > 50


def test_value_conditions_on_statistics_only_rows(cat, stats):
    """GE's stats rows have no data: max/mean thresholds by their own statistics, NaN rows left out."""
    got = {
        key(r) for r in rows(cat, "SELECT * FROM watch_tensor_too_large(max_gt := 1.0)") if r["run"] == "ge"
    }
    want = {
        key(r)
        for r in stats
        if r["run"] == "ge"
        and r["max"] is not None
        and math.isfinite(r["max"])
        and r["max"] > 1.0
        and not (r["has_nan"] or r["has_inf"])
    }
    assert want and got == want


# -- zero percentage, initialization, range -----------------------------------------------------


@pytest.mark.parametrize("pct", [100, 50, 10, 0])
def test_all_zero_against_the_data(cat, stats, data, pct):
    got = {key(r): r for r in rows(cat, f"SELECT * FROM watch_tensor_all_zero(zero_percentage_ge := {pct})")}
    want = {
        key(r)
        for r in stats
        if r["row_id"] in data
        and data[r["row_id"]].size
        and not nonfinite(data[r["row_id"]])
        and 100.0 * np.count_nonzero(data[r["row_id"]] == 0) / data[r["row_id"]].size >= pct
    }
    assert want
    with_data = {k: r for k, r in got.items() if k[1] is not None}
    assert set(with_data) == want and all(r["certain"] for r in with_data.values())  # zero_count: exact
    # GE rows (no zero_count): certain only for max = min = 0 with no NaN possible (CANN's max/min
    # skip NaN: a row that cannot tell, has_nan NULL, stays undecided), otherwise undecided
    by_key = {key(r): r for r in stats}
    for k, r in got.items():
        if k[0] == "ge":
            all_zero = r["max"] == 0 and r["min"] == 0 and by_key[k]["has_nan"] is False
            assert r["certain"] == (all_zero or pct == 0)


def test_initialization_is_the_first_iteration_only(cat, stats, data):
    got = {
        key(r)
        for r in rows(
            cat, "SELECT * FROM watch_weight_initialization(zero_percentage_ge := 100, max_gt := 0.4)"
        )
    }
    first = {}
    for r in stats:
        k = (r["run"], r["rank"], r["graph_id"], r["op_name"], r["io"], r["slot"])
        if r["iteration"] is not None:
            first[k] = min(first.get(k, r["iteration"]), r["iteration"])
    want = set()
    for r in stats:
        arr = data.get(r["row_id"])
        k = (r["run"], r["rank"], r["graph_id"], r["op_name"], r["io"], r["slot"])
        if arr is None or target(r) != "weight" or nonfinite(arr) or r["iteration"] != first.get(k):
            continue
        if np.count_nonzero(arr == 0) == arr.size or arr.max() > 0.4:
            want.add(key(r))
    assert want and got == want


@pytest.mark.parametrize(
    ("macro", "tgt", "params"),
    [
        ("watch_tensor_range", None, {"range_start_inclusive": -0.1, "range_end_inclusive": 0.1, "range_percentage_lt": 50}),  # noqa: E501
        ("watch_tensor_range", None, {"range_start_inclusive": 0, "range_end_inclusive": 1, "range_percentage_gt": 90}),  # noqa: E501
        ("watch_tensor_range", None, {"max_min_gt": 2.0}),
        ("watch_activation_range", "activation", {"range_start_inclusive": 0, "range_end_inclusive": 0,
                                                   "range_percentage_gt": 20, "max_min_lt": 0.5}),
    ],
)  # fmt: skip
def test_range_against_the_data(cat, stats, data, macro, tgt, params):
    args = ", ".join(f"{k} := {v}" for k, v in params.items())
    got = {key(r): r for r in rows(cat, f"SELECT * FROM {macro}({args})") if r["row_id"] is not None}
    lo, hi = params.get("range_start_inclusive"), params.get("range_end_inclusive")
    hits = set()
    for r in stats:
        arr = data.get(r["row_id"])
        if arr is None or arr.size == 0 or nonfinite(arr) or (tgt and target(r) != tgt):
            continue
        spread = arr.max() - arr.min()
        hit = ("max_min_gt" in params and spread > params["max_min_gt"]) or (
            "max_min_lt" in params and spread < params["max_min_lt"]
        )
        if lo is not None:
            pct = 100.0 * np.count_nonzero((arr >= lo) & (arr <= hi)) / arr.size
            hit |= "range_percentage_lt" in params and pct < params["range_percentage_lt"]
            hit |= "range_percentage_gt" in params and pct > params["range_percentage_gt"]
        if hit:
            hits.add(key(r))
    certain = {k for k, r in got.items() if r["certain"]}
    assert hits and hits <= set(got) and certain <= hits
    if lo is None:
        assert set(got) == hits == certain


# -- between iterations ------------------------------------------------------------------------


def _pairs(stats: list[dict]) -> list[tuple[dict, dict]]:
    """(previous, current) rows of the same tensor at consecutive dumped iterations."""
    series = defaultdict(list)
    for r in stats:
        if r["iteration"] is not None:
            series[(r["run"], r["rank"], r["graph_id"], r["op_name"], r["io"], r["slot"])].append(r)
    out = []
    for rs in series.values():
        rs.sort(key=lambda r: (r["iteration"], r["timestamp_us"] or 0, r["stat_id"] or 0, r["row_id"] or 0))
        out += [(p, c) for p, c in itertools.pairwise(rs) if p["iteration"] < c["iteration"]]
    return out


def _stats_close(p: dict, c: dict, rtol: float, atol: float) -> bool:
    """watch_unchanged's statistics test, written from its documentation."""
    m = max(abs(p["max"]), abs(p["min"]))
    n = c["count"]
    tol = atol + rtol * m
    return (
        abs(c["max"] - p["max"]) <= tol
        and abs(c["min"] - p["min"]) <= tol
        and abs(c["avg"] - p["avg"]) <= tol
        and abs(c["l2norm"] - p["l2norm"]) <= atol * math.sqrt(n) + rtol * p["l2norm"]
    )


@pytest.mark.parametrize(("rtol", "atol"), [(1e-5, 1e-8), (0.5, 1e-3)])
def test_unchanged_never_misses_an_allclose_tensor(cat, stats, data, rtol, atol):
    got = {
        (r["run"], r["row_id"]): r
        for r in rows(cat, f"SELECT * FROM watch_tensor_unchanged(rtol := {rtol}, atol := {atol})")
    }
    allclose, candidates = set(), set()
    for p, c in _pairs(stats):
        a, b = data.get(c["row_id"]), data.get(p["row_id"])
        if a is None or b is None or a.shape != b.shape:
            continue
        if nonfinite(a) or nonfinite(b):
            continue
        k = (c["run"], c["row_id"])
        if np.allclose(a, b, rtol=rtol, atol=atol):
            allclose.add(k)
        if _stats_close(p, c, rtol, atol):
            candidates.add(k)
        if k in got:
            assert got[k]["prev_row_id"] == p["row_id"] and got[k]["prev_iteration"] == p["iteration"]
            if got[k]["certain"]:
                assert np.array_equal(a, b)
    assert allclose, "some tensors (inputs, untrained weights) repeat between iterations"
    with_data = {k for k in got if k[1] is not None and k[1] in data}
    assert allclose <= with_data  # never misses
    assert with_data == candidates  # exactly the documented statistics test
    assert any(r["certain"] for r in got.values())  # md5 decides identical tensors


def test_unchanged_tolerances_widen_the_result(cat):
    strict = {
        r["row_id"] for r in rows(cat, "SELECT row_id FROM watch_tensor_unchanged(rtol := 0, atol := 0)")
    }
    default = {r["row_id"] for r in rows(cat, "SELECT row_id FROM watch_tensor_unchanged()")}
    loose = {r["row_id"] for r in rows(cat, "SELECT row_id FROM watch_tensor_unchanged(rtol := 10)")}
    assert strict <= default < loose
    weights = rows(cat, "SELECT * FROM watch_weight_not_changed(rtol := 10)")
    assert weights and {r["target"] for r in weights} == {"weight"}


@pytest.mark.parametrize(
    ("macro", "op", "threshold"),
    [
        ("watch_tensor_change_too_large", "gt", 0.1),
        ("watch_tensor_change_too_large", "gt", 1.0),
        ("watch_tensor_change_too_small", "lt", 1e-4),
        ("watch_tensor_change_too_small", "lt", 0.05),
        ("watch_weight_change_too_large", "gt", 1e-3),
        ("watch_weight_change_too_small", "lt", 0.1),
    ],
)
def test_change_ratio_bounds_hold_on_the_data(cat, stats, data, macro, op, threshold):
    param = f"abs_mean_update_ratio_{op}"
    got = {(r["run"], r["row_id"]): r for r in rows(cat, f"SELECT * FROM {macro}({param} := {threshold})")}
    hits, seen = set(), 0
    for p, c in _pairs(stats):
        a, b = data.get(c["row_id"]), data.get(p["row_id"])
        if a is None or b is None or a.shape != b.shape or a.size == 0 or nonfinite(a) or nonfinite(b):
            continue
        if macro.startswith("watch_weight") and target(c) != "weight":
            continue
        ratio = np.abs(a - b).mean() / (np.abs(b).mean() + 1e-9)
        if near(ratio, threshold):
            continue
        seen += 1
        k = (c["run"], c["row_id"])
        hit = ratio > threshold if op == "gt" else ratio < threshold
        if hit:
            hits.add(k)
            assert k in got, (c["op_name"], ratio)  # never misses
        elif k in got:
            assert not got[k]["certain"], (c["op_name"], ratio, got[k]["detail"])  # certain rows hit
    assert seen and hits


# -- operator overflow -------------------------------------------------------------------------


def test_operator_overflow_names_the_operator(tmp_path):
    from ingest.formats.ascend.overflow import AI_CORE, DHA, L2, OverflowBlock, encode_opdebug
    from tests.ingest.readers.test_ascend_raw import _one_op_tree
    from tests.writers.ascend_raw import SlotSpec, build_raw_dump

    dump = tmp_path / "dump"
    leaf, _ = _one_op_tree(dump)
    conv = next(p for p in leaf.iterdir() if p.name.startswith("Conv2D"))
    op_type, op_name, _, _, ts = conv.name.removesuffix(".bin").split(".")
    conv.rename(leaf / f"{op_type}.{op_name}.42.3.{ts}")
    blocks = [
        OverflowBlock(DHA, 0, 0, 0, 0, 0, 0, 0, ()),
        OverflowBlock(L2, 0, 0, 0, 0, 0, 0, 0, ()),
        OverflowBlock(AI_CORE, 1, 3, 42, 2, 0x12C0_0000_1000, 0x12C0_0800_0000, 0x10, (), 7, 3),
    ]
    record = encode_opdebug(blocks)
    raw = build_raw_dump(op_name="Node_OpDebug", outputs=[SlotSpec(record, "DT_UINT8", (len(record),))])
    (leaf / "Opdebug.Node_OpDebug.99.1.1795302834999000").write_bytes(raw)
    with Catalog.open(tmp_path / "cat", create=True) as c:
        c.ingest(dump)
        [hit] = rows(c, "SELECT * FROM watch_operator_overflow()")
        assert hit["op_type"] == "Conv2D" and hit["op_name"].endswith("conv1-Conv2d/Conv2D-op0")
        assert hit["condition"] == "operator_overflow" and "status 0x10" in hit["detail"]
        tensors = rows(c, f"SELECT row_id FROM tensors WHERE op_name = '{hit['op_name']}'")
        assert hit["row_id"] in {t["row_id"] for t in tensors}


# -- discovery, parameters, errors --------------------------------------------------------------


def _table_macros(cat) -> dict[str, list[str]]:
    return {
        r["function_name"]: r["parameters"]
        for r in rows(
            cat,
            "SELECT function_name, parameters FROM duckdb_functions() "
            "WHERE function_type = 'table_macro' AND function_name LIKE 'watch%'",
        )
    }


def test_watch_conditions_lists_every_macro_with_its_parameters(cat):
    listed = {r["macro"]: r for r in rows(cat, "SELECT * FROM watch_conditions")}
    macros = _table_macros(cat)
    assert set(listed) == set(macros)
    for name, params in macros.items():
        text = listed[name]["parameters"]
        documented = [part.split(":=")[0].strip() for part in text.split(",")] if text else []
        assert documented == params, name
    mindinsight = {r["mindinsight_condition"].split(" ")[0] for r in listed.values()}
    assert len(mindinsight - {"generic", "nan,", "TensorUnchanged", "TensorChangeAboveThreshold",
                              "TensorChangeBelowThreshold"}) == 18  # fmt: skip
    # every macro runs with its defaults or, when it needs a threshold, says so
    for name in macros:
        try:
            cat.sql(f"SELECT count(*) FROM {name}()")
        except duckdb.InvalidInputException as exc:
            assert "give" in str(exc), name


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("watch_tensor_all_zero(zero_percentage_ge := 150)", "zero_percentage_ge must be a percentage between 0 and 100"),  # noqa: E501
        ("watch_tensor_too_large()", "tensor_too_large: give at least one threshold"),
        ("watch_tensor_too_large(abs_mean_gt := -1)", "abs_mean_gt must be a finite number >= 0"),
        ("watch_tensor_too_small(max_lt := 'nan')", "max_lt must be a finite number"),
        ("watch_tensor_range(range_percentage_lt := 10)", "need both range_start_inclusive and range_end_inclusive"),  # noqa: E501
        ("watch_tensor_range(range_start_inclusive := 1, range_end_inclusive := 0, max_min_gt := 1)", "must not be above"),  # noqa: E501
        ("watch_weight_not_changed(rtol := -1)", "rtol must be a finite number >= 0"),
        ("watch_weight_change_too_large(abs_mean_update_ratio_gt := NULL)", "give abs_mean_update_ratio_gt"),
        ("watch_values(target_type := 'bias', max_gt := 1)", "target_type must be tensor, weight, gradient or activation"),  # noqa: E501
        ("watch_tensor_too_large(max_gt := 'abc')", "Could not convert string 'abc'"),
    ],
)  # fmt: skip
def test_bad_parameters_give_clear_errors(cat, query, message):
    with pytest.raises(duckdb.Error, match=re.escape(message)):
        cat.sql(f"SELECT * FROM {query}")


# -- the guard ---------------------------------------------------------------------------------


def test_guard_allows_dumpcat_table_macros_and_nothing_else():
    sql_dir = Path(guard.__file__).parent.parent / "sql"
    defined = set()
    for f in sql_dir.glob("*.sql"):
        defined |= {
            m.lower()
            for m in re.findall(r"MACRO\s+(\w+)\s*\([^)]*\)\s*AS\s+TABLE", f.read_text(), re.S | re.I)
        }
    assert {"watch_nan_inf", "watch_tensor_too_large"} <= defined
    assert defined == set(guard.dumpcat_table_macros())  # found automatically, any sql file
    for name in sorted(defined):
        guard.classify_query(f"SELECT * FROM {name}()")
        guard.classify_query(f'SELECT * FROM main."{name.upper()}"() t JOIN stats USING (row_id)')
    for text in [
        "CREATE MACRO m() AS TABLE SELECT 1",
        "CREATE OR REPLACE MACRO watch_nan_inf() AS TABLE SELECT * FROM read_text('/etc/passwd')",
        "CREATE TEMP MACRO x(a) AS a",
    ]:
        with pytest.raises(guard.Refused) as exc:
            guard.classify_query(text)
        assert exc.value.sqlstate == guard.SQLSTATE_PRIVILEGE
    for fn in [
        "read_csv('/etc/passwd')",
        "read_text('x')",
        "glob('*')",
        "duckdb_settings()",
        "watch_not_ours()",
    ]:
        with pytest.raises(guard.Refused, match="is not allowed"):
            guard.classify_query(f"SELECT * FROM {fn}")
    # a built-in table function never becomes callable through a dumpcat name
    builtin = {r[0] for r in duckdb.connect().sql("SELECT function_name FROM duckdb_functions()").fetchall()}
    assert not (guard.dumpcat_table_macros() & builtin)


# -- the CLI and the server --------------------------------------------------------------------

CALLS = {
    "watch_nan_inf": "",
    "watch_tensor_overflow": "",
    "watch_weight_overflow": "",
    "watch_gradient_exploding": "l2norm_gt := 1",
    "watch_operator_overflow": "",
    "watch_tensor_too_large": "abs_mean_gt := 0.1, max_gt := 1",
    "watch_weight_too_large": "max_gt := 0.3",
    "watch_gradient_too_large": "abs_mean_gt := 0.01",
    "watch_tensor_too_small": "min_lt := -1",
    "watch_weight_too_small": "abs_mean_lt := 0.2",
    "watch_gradient_vanishing": "l2norm_lt := 0.01",
    "watch_tensor_all_zero": "",
    "watch_tensor_initialization": "max_gt := 1",
    "watch_weight_initialization": "",
    "watch_weight_not_changed": "rtol := 10",
    "watch_tensor_unchanged": "",
    "watch_weight_change_too_large": "",
    "watch_weight_change_too_small": "abs_mean_update_ratio_lt := 0.1",
    "watch_tensor_change_too_large": "",
    "watch_tensor_change_too_small": "",
    "watch_tensor_range": "range_start_inclusive := 0, range_end_inclusive := 1, range_percentage_lt := 50",
    "watch_activation_range": "max_min_gt := 1",
}
ALL_COUNTS = " UNION ALL ".join(
    f"SELECT '{m}' AS macro, count(*) AS n FROM {m}({a})" for m, a in CALLS.items()
)


def test_calls_cover_every_condition_macro(cat):
    listed = {
        r["macro"]
        for r in rows(cat, "SELECT macro FROM watch_conditions WHERE mindinsight_condition <> 'generic'")
    }
    assert listed == set(CALLS)


def test_every_macro_through_the_cli(cat, cat_path):
    want = {r["macro"]: r["n"] for r in rows(cat, ALL_COUNTS)}
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "sql", str(cat_path), ALL_COUNTS, "--format", "csv"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = dict(line.split(",") for line in proc.stdout.splitlines()[1:])
    assert {k: int(v) for k, v in got.items()} == want
    assert sum(want.values()) > 0
    bad = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "sql", str(cat_path), "SELECT * FROM watch_tensor_all_zero(zero_percentage_ge := 101)"],  # noqa: E501
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "zero_percentage_ge must be a percentage between 0 and 100" in bad.stderr


def test_every_macro_through_the_server(cat, cat_path):
    want = {r["macro"]: r["n"] for r in rows(cat, ALL_COUNTS)}
    srv = Server(cat_path, port=0, users={USER: PASSWORD}, limits=Limits(query_timeout=60, max_rows=100000))
    srv.start()
    try:
        args = dict(
            host="127.0.0.1", port=srv.port, user=USER, password=PASSWORD, dbname="dumpcat", autocommit=True
        )
        with psycopg.connect(**args) as conn:
            for macro, call in CALLS.items():
                got = conn.execute(f"SELECT * FROM {macro}({call})").fetchall()
                assert len(got) == want[macro], macro
            listed = conn.execute("SELECT macro FROM watch_conditions").fetchall()
            assert len(listed) == len(CALLS) + 6
            # a bad parameter: a clear error, and the session and the server carry on
            with pytest.raises(psycopg.Error, match="zero_percentage_ge must be a percentage"):
                conn.execute("SELECT * FROM watch_tensor_all_zero(zero_percentage_ge := -5)")
            assert conn.execute("SELECT count(*) FROM watch_nan_inf()").fetchall() == [
                (want["watch_nan_inf"],)
            ]
            with pytest.raises(psycopg.Error) as exc:
                conn.execute("CREATE MACRO mine() AS TABLE SELECT 1")
            assert exc.value.sqlstate == "42501"
            with pytest.raises(psycopg.Error, match="table function read_csv"):
                conn.execute("SELECT * FROM read_csv('/etc/passwd')")
        with psycopg.connect(**args) as conn:
            assert conn.execute("SELECT 1").fetchall() == [(1,)]
    finally:
        srv.stop()
