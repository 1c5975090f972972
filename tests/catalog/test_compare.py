"""Run-vs-run comparison on real runs: two MindSpore 2.10 CPU runs of one net where run `cast`
rounds fc2's input through float16 (tests/data/ms210/compare), and two msprobe statistics dumps of
one MLP with fc2 in float16 (tests/data/msprobe/compare_fp16, compare_fp32) with msprobe compare's
own CSV of them."""

from __future__ import annotations

import csv
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from catalog import Catalog
from catalog.compare import CompareError
from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import DATA

MS = DATA / "ms210" / "compare"
MSPROBE = DATA / "msprobe"
FC2 = "Default/network-WithLossCell/_backbone-Net/fc2-Dense/MatMul-op0"
FC1 = "Default/network-WithLossCell/_backbone-Net/fc1-Dense/MatMul-op0"


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("cat"), create=True)
    c.ingest(MS / "base" / "dump", run="base")
    c.ingest(MS / "cast" / "dump", run="cast")
    summary = c.compare("cast", "base", workers=2)
    assert summary.pairs > 100
    return c


def _rows(cat: Catalog, sql: str, params=None) -> list[dict]:
    return cat.sql(sql, params).to_pylist()


def test_first_divergence_is_the_operator_after_the_cast(cat):
    first = _rows(cat, "SELECT * FROM first_divergence(max_abs := 0) WHERE iteration = 0")
    assert len(first) == 1
    f = first[0]
    assert (f["op_name"], f["io"], f["source_line"], f["source_code"]) == (
        FC2,
        "output",
        89,
        "x = self.fc2(x)",
    )
    # with msprobe's default tolerances the float16 rounding (1e-4) is within bounds
    assert _rows(cat, "SELECT * FROM first_divergence() WHERE iteration = 0") == []


def test_identical_tensors_have_cosine_1_and_no_error(cat):
    rows = _rows(
        cat,
        "SELECT op_name, io, cosine, max_abs_err, max_rel_err, mean_abs_err, rmse, rel_euclidean, kl_div, "
        "acc_rel_err, err_ratio_1e3, err_ratio_5e3, status FROM comparisons "
        "WHERE iteration = 0 AND op_name IN ($a, $b) AND numel > 1",
        {"a": FC1, "b": "Default/network-WithLossCell/_backbone-Net/relu-ReLU/ReLU-op0"},
    )
    assert len(rows) >= 4
    for r in rows:
        assert r["status"] == "ok" and r["cosine"] == pytest.approx(1.0, abs=1e-12), r
        for m in ("max_abs_err", "max_rel_err", "mean_abs_err", "rmse", "rel_euclidean", "acc_rel_err"):
            assert r[m] == 0.0, (r["op_name"], m)
        assert r["err_ratio_1e3"] == 1.0 and r["err_ratio_5e3"] == 1.0


def test_metrics_equal_an_independent_float64_computation(cat):
    rows = _rows(
        cat,
        "SELECT * FROM comparisons WHERE status = 'ok' AND row_id IS NOT NULL "
        "AND baseline_row_id IS NOT NULL",
    )
    checked = 0
    for r in rows:
        x = cat.tensor(r["row_id"]).astype(np.float64).ravel()
        y = cat.tensor(r["baseline_row_id"]).astype(np.float64).ravel()
        d = x - y
        assert r["max_abs_err"] == pytest.approx(np.abs(d).max(), rel=1e-9, abs=1e-300)
        assert r["mean_abs_err"] == pytest.approx(np.abs(d).mean(), rel=1e-9, abs=1e-300)
        assert r["rmse"] == pytest.approx(math.sqrt((d * d).mean()), rel=1e-9, abs=1e-300)
        ny = math.sqrt((y * y).sum())
        if ny > np.finfo(float).eps:
            assert r["rel_euclidean"] == pytest.approx(math.sqrt((d * d).sum()) / ny, rel=1e-9, abs=1e-300)
        nx = math.sqrt((x * x).sum())
        if nx > 1e-6 and ny > 1e-6 and x.size > 1:
            assert r["cosine"] == pytest.approx(min(1.0, float(x @ y) / (nx * ny)), rel=1e-9)
        checked += 1
    assert checked > 100


def test_operators_of_one_run_only_are_rows(cat):
    only = _rows(cat, "SELECT DISTINCT file_op_name FROM tensors t JOIN comparisons c USING (row_id) "
                      "WHERE c.status = 'only_in_run'")  # fmt: skip
    names = {r["file_op_name"] for r in only}
    cast_files = {p.name.split(".")[1] for p in (MS / "cast" / "dump").rglob("Cast.*.npy")}
    assert names == cast_files and len(names) == 4
    assert _rows(cat, "SELECT count(*) AS n FROM comparisons WHERE status = 'only_in_baseline'")[0]["n"] == 0


def test_rerun_adds_nothing_and_a_subset_adds_only_its_pairs(cat):
    again = cat.compare("cast", "base")
    assert again.pairs == 0
    before = _rows(cat, "SELECT count(*) AS n FROM comparisons")[0]["n"]
    reverse = cat.compare("base", "cast", iterations=[1])
    assert reverse.pairs > 0 and reverse.statuses["only_in_baseline"] == 8
    after = _rows(cat, "SELECT count(*) AS n FROM comparisons")[0]["n"]
    assert after == before + reverse.pairs


def test_killed_compare_resumes_to_the_one_shot_result(tmp_path):
    """A compare SIGKILLed after some batches were committed, then run again, gives exactly the
    rows one uninterrupted compare gives."""
    dump = {}
    for name in ("base", "cast"):  # 8 ranks each: enough pairs for several committed batches
        dump[name] = tmp_path / name
        for r in range(8):
            shutil.copytree(MS / name / "dump" / "rank_0", dump[name] / f"rank_{r}")
    path = tmp_path / "killed"
    cat = Catalog.open(path, create=True)
    for name in dump:
        cat.ingest(dump[name], run=name)
    cat.close()
    # the reference: a copy of the same ingested catalog (a catalog folder is relocatable), compared
    # in one go
    shutil.copytree(path, tmp_path / "ref")
    ref = Catalog.open(tmp_path / "ref")
    ref.compare("cast", "base", workers=1)
    query = "SELECT * EXCLUDE (compared_at) FROM comparisons ORDER BY row_id NULLS LAST, baseline_row_id"
    expected = [{k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in _rows(ref, query)]  # fmt: skip
    script = (
        "import sys, os, signal\n"
        "import catalog.compare as c\n"
        "from catalog import Catalog\n"
        "c._COMMIT_PAIRS = 100\n"
        "seen = [0]\n"
        "def progress(n):\n"
        "    seen[0] += n\n"
        "    if seen[0] >= 600: os.kill(os.getpid(), signal.SIGKILL)\n"
        "Catalog.open(sys.argv[1]).compare('cast', 'base', workers=1, on_progress=progress)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    partial = Catalog.open(path)
    done = _rows(partial, "SELECT count(*) AS n FROM comparisons")[0]["n"]
    assert 0 < done < len(expected)
    resumed = partial.compare("cast", "base", workers=1)
    assert resumed.pairs == len(expected) - done
    got = [{k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
           for r in _rows(partial, query)]  # fmt: skip
    assert got == expected


def test_bad_input_gives_rows_with_a_status(tmp_path):
    dump = {n: tmp_path / n for n in ("base", "cast")}
    for name, path in dump.items():
        shutil.copytree(MS / name / "dump", path)
    cat = Catalog.open(tmp_path / "cat", create=True)
    for name, path in dump.items():
        cat.ingest(path, run=name)
    cat.ingest(MSPROBE / "compare_fp32", run="msprobe")
    # a tensor unreadable on one side (truncated after ingest)
    victim = _rows(cat, "SELECT rel_path FROM tensors WHERE run = 'cast' AND op_name = $n AND io = 'output' "
                        "AND iteration = 0", {"n": FC1})[0]["rel_path"]  # fmt: skip
    (dump["cast"] / victim).write_bytes((dump["cast"] / victim).read_bytes()[:100])
    # shapes that differ: fc1's MatMul mapped onto fc2's
    mapping = tmp_path / "map.csv"
    mapping.write_text(f"op_name,baseline_op_name\n{FC1},{FC2}\n")
    s = cat.compare("cast", "base", mapping=mapping, iterations=[0])
    assert s.statuses["unreadable_run"] == 1
    assert s.statuses["shape_mismatch"] >= 1
    unreadable = "SELECT count(*) AS n FROM comparisons WHERE status = 'unreadable_run' AND op_name = $n"
    assert _rows(cat, unreadable, {"n": FC1})[0]["n"] == 1
    # runs with no common tensor: every row is one side's
    s = cat.compare("msprobe", "base")
    assert set(s.statuses) == {"only_in_run", "only_in_baseline"} or set(s.statuses) == {"only_in_baseline"}
    with pytest.raises(CompareError, match="not in the catalog"):
        cat.compare("nope", "base")
    with pytest.raises(CompareError, match="mapping file"):
        cat.compare("cast", "base", mapping=tmp_path / "missing.csv")


def test_statistics_only_runs_compare_and_agree_with_msprobe(tmp_path):
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(MSPROBE / "compare_fp16", run="fp16")
    cat.ingest(MSPROBE / "compare_fp32", run="fp32")
    first = _rows(cat, "SELECT * FROM first_stat_divergence('fp16', 'fp32', max_rel := 0)")
    step0 = [f for f in first if f["iteration"] == 0]
    assert step0[0]["op_name"] == "Functional.linear.1.forward"
    stats = "SELECT * FROM compare_stats('fp16', 'fp32') WHERE iteration = 0 AND arg_path IS NOT NULL"
    # msprobe compare names a tensor {entry}.{arg}, keyword arguments as input.{name}
    ours = {(r["op_name"] + "." + r["arg_path"].replace("kwargs.", "input.")): r for r in _rows(cat, stats)}
    checked = 0
    with open(MSPROBE / "compare_msprobe_result.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Max diff"] in ("N/A", "") or row["NPU Name"] not in ours:
                continue
            r = ours[row["NPU Name"]]
            for theirs, diff, rel in (
                ("Max", "max_diff", "max_rel_diff"), ("Min", "min_diff", "min_rel_diff"),
                ("Mean", "avg_diff", "avg_rel_diff"), ("L2norm", "l2norm_diff", "l2norm_rel_diff"),
            ):  # fmt: skip
                assert r[diff] == pytest.approx(float(row[f"{theirs} diff"]), rel=1e-9, abs=1e-12), row[
                    "NPU Name"
                ]
                name = "NormRelativeErr" if theirs == "L2norm" else f"{theirs}RelativeErr"
                pct = row[name].rstrip("%")
                if pct not in ("N/A", "inf", "Nan"):
                    assert r[rel] * 100 == pytest.approx(float(pct), rel=1e-9, abs=1e-12), (
                        row["NPU Name"],
                        name,
                    )
            checked += 1
    assert checked > 30


def test_cli_compare_prints_the_first_divergence(tmp_path, cat):
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "compare", str(cat.path), "cast", "base"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "compared 'cast' with 'base': 0 new pairs" in out.stderr
    bad = dumpcat_in_process("compare", cat.path, "cast", "nope")  # the command's code, in this process
    assert bad.returncode == 1 and "not in the catalog" in bad.stderr and "Traceback" not in bad.stderr


def test_runs_that_agree_do_not_diverge_even_where_both_hold_nan(tmp_path):
    """Two runs with the same NaN at the same places agree (msprobe: those elements count as equal):
    no first divergence; NaN in one run only is one."""
    nan_log = DATA / "ms210" / "nan_log" / "dump"
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(nan_log, run="a")
    copy = tmp_path / "b"
    shutil.copytree(nan_log, copy)
    cat.ingest(copy, run="b")
    s = cat.compare("b", "a", workers=1)
    assert s.statuses["nan_in_both"] > 0 and set(s.statuses) <= {"ok", "unsupported", "nan_in_both"}
    assert _rows(cat, "SELECT * FROM first_divergence(max_abs := 0)") == []
    # now the NaN in one run only: another copy, whose first NaN output gets a finite value, compared
    # with the same baseline as run `b2`
    first_nan = "SELECT row_id FROM first_anomaly WHERE run = 'b' ORDER BY iteration LIMIT 1"
    row = _rows(cat, f"SELECT rel_path FROM tensors WHERE run = 'b' AND row_id = ({first_nan})")[0]
    copy2 = tmp_path / "b2"
    shutil.copytree(nan_log, copy2)
    arr = np.load(copy2 / row["rel_path"])
    np.save(copy2 / row["rel_path"], np.nan_to_num(arr, nan=1.0))
    cat.ingest(copy2, run="b2")
    cat.compare("b2", "a", workers=1)
    first = _rows(cat, "SELECT iteration, reason FROM first_divergence() WHERE run = 'b2' ORDER BY iteration")
    assert first and first[0]["reason"] == "nan_in_baseline"
    assert _rows(cat, "SELECT * FROM first_divergence() WHERE run = 'b'") == []


def test_cli_compare_says_where_runs_differ_below_the_tolerances(tmp_path):
    """Drift below msprobe's tolerances (the usual fp16/bf16 case) leaves first_divergence empty:
    the command says so and names the first output that differs at all, in execution order."""
    base = MS / "base" / "dump"
    copy = tmp_path / "drift"
    shutil.copytree(base, copy)
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(base, run="a")
    last = (
        "SELECT t.rel_path, t.op_name, t.iteration FROM tensors t JOIN stats s USING (row_id) "
        "WHERE t.run = 'a' AND t.io = 'output' AND t.exec_index IS NOT NULL AND t.stored_dtype = 'float32' "
        "AND s.nan_count = 0 AND s.count > 1 ORDER BY t.iteration DESC, t.exec_index DESC LIMIT 1"
    )
    first = _rows(cat, last)[0]
    arr = np.load(copy / first["rel_path"])
    np.save(copy / first["rel_path"], (arr + np.float32(1.8e-4)).astype(arr.dtype))
    cat.ingest(copy, run="b")
    shutil.copytree(base, tmp_path / "same")
    cat.ingest(tmp_path / "same", run="c")
    cat.close()
    run = [sys.executable, "-m", "catalog.cli", "compare", str(tmp_path / "cat")]
    out = subprocess.run([*run, "b", "a"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(0 rows)" in out.stdout
    said = out.stderr.replace("\n", " ")
    assert "no output breaks the tolerances (cosine < 0.99, max_abs_err > 0.001); 1 of " in said, said
    where = (
        f"the first in execution order: {first['op_name']} output 0 (rank 0, iteration {first['iteration']})"
    )
    assert f"{where}, max_abs_err 0.00018" in said, said
    same = dumpcat_in_process("compare", tmp_path / "cat", "c", "a")  # the command's code, in this process
    assert "compared outputs are identical)" in same.stderr, same.stderr
