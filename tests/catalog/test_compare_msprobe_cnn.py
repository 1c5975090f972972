"""`dumpcat compare` of real msprobe runs against `msprobe compare`'s own CSV, row by row.

tests/data/msprobe/cnn (msprobe 26.2, torch 2.13 CPU; its README says how it was made): a CNN
trained under bf16 autocast and in fp32, and a run with a NaN planted at a known line beside its
clean twin. msprobe lists a module's parameters_grad entries in the order autograd finished them:
`weight, bias` for the Linear layer in the bf16 runs, `bias, weight` in the fp32 ones. Pairs must
be made by argument name, and steps ordered by dump.json position (msprobe's tensor files carry no
timestamp).
"""

from __future__ import annotations

import csv
import math

import pytest

from catalog import Catalog
from tests.conftest import DATA

CNN = DATA / "msprobe" / "cnn"
COMPARE = CNN / "compare"
# (run, baseline, msprobe's csv per step)
PAIRS = {
    "bf16": ("cnn_bf16_tensor", "cnn_fp32_tensor", "bf16_vs_fp32_tensor_step{}.csv", 2),
    "nan": ("cnn_nan_tensor", "cnn_clean_tensor", "nan_vs_clean_tensor_step{}.csv", 3),
}


def _msprobe_name(op_name: str, arg_path: str) -> str:
    """msprobe compare's name of a tensor: {entry}.{argument}, keyword arguments as input.{name},
    a parameter gradient as {entry}.{parameter}."""
    if arg_path.startswith("parameters_grad."):
        return f"{op_name}.{arg_path.split('.', 1)[1]}"
    return f"{op_name}.{arg_path.replace('kwargs.', 'input.')}"


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None  # N/A, unsupported, Nan
    return None if math.isnan(value) else value


@pytest.fixture(scope="module", params=sorted(PAIRS))
def compared(request, tmp_path_factory):
    run, baseline, csv_name, steps = PAIRS[request.param]
    cat = Catalog.open(tmp_path_factory.mktemp(request.param) / "cat", create=True)
    cat.ingest(CNN / run)
    cat.ingest(CNN / baseline)
    cat.compare(run, baseline, workers=1)
    yield cat, request.param, csv_name, steps
    cat.close()


def _ours(cat: Catalog) -> dict[tuple[int, str], dict]:
    rows = cat.sql(
        "SELECT c.*, s.arg_path FROM comparisons c JOIN stats s ON s.row_id = c.row_id "
        "WHERE s.stat_source = 'dump.json'"
    ).to_pylist()
    return {(r["iteration"], _msprobe_name(r["op_name"], r["arg_path"])): r for r in rows}


def _theirs(csv_name: str, steps: int) -> list[tuple[int, dict]]:
    out = []
    for step in range(steps):
        with open(COMPARE / csv_name.format(step), newline="") as f:
            # tensors (msprobe lists scalar arguments too: strides, eps, ...)
            out += [(step, row) for row in csv.DictReader(f) if row["NPU Dtype"].startswith("torch.")]
    return out


def test_every_pair_msprobe_compares_is_ours_with_the_same_metrics(compared):
    cat, _name, csv_name, steps = compared
    ours = _ours(cat)
    theirs = _theirs(csv_name, steps)
    assert len(theirs) > 200
    assert cat.sql("SELECT count(*) AS n FROM comparisons WHERE status IN ('shape_mismatch', 'only_in_run', "
                   "'only_in_baseline')").to_pylist() == [{"n": 0}]  # fmt: skip
    checked = 0
    for step, row in theirs:
        r = ours[(step, row["NPU Name"])]  # every tensor msprobe pairs, we pair
        assert row["Bench Name"] == row["NPU Name"]
        assert r["shape"] == [int(d) for d in row["NPU Tensor Shape"].strip("[]").split(",") if d.strip()]
        n = r["numel"]
        for column, metric, scale in (
            ("Cosine", "cosine", 1.0), ("MaxAbsErr", "max_abs_err", 1.0),
            ("MaxRelativeErr", "max_rel_err", 1.0), ("One Thousandth Err Ratio", "err_ratio_1e3", 1.0),
            ("Five Thousandths Err Ratio", "err_ratio_5e3", 1.0),
            ("EucDist", "rmse", math.sqrt(n) if n else None),
        ):  # fmt: skip
            want = _number(row[column])
            if want is None or scale is None:
                continue
            got = r[metric]
            assert got is not None, (step, row["NPU Name"], column, row[column], r["status"])
            # msprobe writes 12 decimals (cosine: 6 above 0.9999)
            assert got * scale == pytest.approx(want, rel=1e-6, abs=2e-6), (step, row["NPU Name"], column)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("compared", ["bf16"], indirect=True)  # the order differs between these runs
def test_parameter_gradients_pair_by_name_whatever_order_msprobe_lists_them(compared):
    cat = compared[0]
    order = cat.sql(
        "SELECT run, list(arg_path ORDER BY slot) AS args FROM stats "
        "WHERE op_name = 'Module.fc.Linear.parameters_grad.0' AND iteration = 0 GROUP BY run ORDER BY run"
    ).to_pylist()
    assert order == [
        {"run": "cnn_bf16_tensor", "args": ["parameters_grad.weight", "parameters_grad.bias"]},
        {"run": "cnn_fp32_tensor", "args": ["parameters_grad.bias", "parameters_grad.weight"]},
    ]
    grads = {k: r for k, r in _ours(cat).items() if ".parameters_grad." in k[1]}
    assert len(grads) == 12 and {r["status"] for r in grads.values()} <= {"ok", "unsupported"}
    stats = cat.sql(
        "SELECT status, count(*) AS n FROM compare_stats('cnn_bf16_tensor', 'cnn_fp32_tensor') GROUP BY ALL"
    ).to_pylist()
    assert stats == [{"status": "ok", "n": 214}]


def test_first_divergence_is_the_first_output_past_the_tolerances_in_dump_order(compared):
    """The answer is the first output row of msprobe's CSV (in dump.json order) whose cosine is
    below 0.99 or whose max abs error is above 0.001, or that holds NaN on one side only."""
    cat, _name, csv_name, steps = compared
    expected = {}
    for step, row in _theirs(csv_name, steps):
        if step in expected or ".output." not in row["NPU Name"]:
            continue
        cosine, max_abs = _number(row["Cosine"]), _number(row["MaxAbsErr"])
        maxes = (row["NPU max"].lower(), row["Bench max"].lower())  # msprobe writes "Nan"
        nan_one_side = "nan" in maxes and maxes[0] != maxes[1]
        if (
            (cosine is not None and cosine < 0.99)
            or (max_abs is not None and max_abs > 0.001)
            or nan_one_side
        ):
            expected[step] = row["NPU Name"].rsplit(".output.", 1)[0]
    got = {
        r["iteration"]: r["op_name"]
        for r in cat.sql("SELECT iteration, op_name FROM first_divergence() ORDER BY iteration").to_pylist()
    }
    assert got == expected
    assert cat.sql("SELECT count(*) AS n FROM comparisons WHERE exec_index IS NULL").to_pylist() == [{"n": 0}]
