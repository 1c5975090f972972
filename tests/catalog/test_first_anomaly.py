"""The first anomaly of a step, across kernel graphs, on real dumps: one answer per run, rank and
iteration, ordered by the time kernels ran; the per-graph answer under its own name; and an answer
(never silence) for dumps without an execution order or without graph IR."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.mindspore.npy_name import parse_tensor_name, sanitize_v23, short_name, without_op_index
from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import MS210, SAMPLES, dump_of

LOG_OP = "Default/network-WithLossCell/_backbone-Net/Log-op0"
MATMUL_OP = "Default/network-WithLossCell/_backbone-Net/fc-Dense/MatMul-op0"


def _catalog(tmp_path: Path, dump: Path, run: str) -> Catalog:
    cat = Catalog.open(tmp_path / f"{run}.cat", create=True)
    cat.ingest(dump, run=run)
    return cat


def _poison(path: Path, count: int = 1) -> None:
    """Overwrite the first `count` elements of a real float tensor file with NaN, in place."""
    a = np.load(path)
    flat = a.reshape(-1).copy()
    flat[:count] = np.nan
    np.save(path, flat.reshape(a.shape))


def _kernel_output(iteration_dir: Path, graph_op: str) -> Path:
    """The output.0 file of the kernel whose sanitised full name is `graph_op`, in one iteration."""
    (hit,) = [
        p for p in iteration_dir.glob("*.output.0.*.npy") if parse_tensor_name(p.name).op_name == graph_op
    ]
    return hit


# -- across kernel graphs -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def poisoned_multigraph(tmp_path_factory):
    """The real multigraph dump (an `if` on a tensor: kernel graphs 0-4 run in one training step,
    in the time order 0, 3, 1, 4, 2) with NaN written into the output of the `Mul` of the taken
    branch (graph 3) and of the `MatMul` after it (graph 1), iteration 0: the step's first anomaly
    is in graph 3 although graph 1 has the lower id."""
    base = tmp_path_factory.mktemp("mg")
    dump = base / "multigraph"
    shutil.copytree(dump_of("multigraph"), dump)
    net = dump / "rank_0" / "MultiNet"
    mul = _kernel_output(net / "3" / "0", sanitize_v23("Expand/_Muls/Mul-op0"))
    matmul = _kernel_output(net / "1" / "0", sanitize_v23(MATMUL_OP))
    _poison(mul)
    _poison(matmul, 3)
    cat = Catalog.open(base / "cat", create=True)
    cat.ingest(dump, run="mg")
    return cat, mul, matmul


def test_one_answer_per_step_in_time_order_across_graphs(poisoned_multigraph):
    cat, mul, _matmul = poisoned_multigraph
    rows = cat.sql("SELECT * FROM first_anomaly ORDER BY iteration").to_pylist()
    assert [(r["run"], r["rank"], r["iteration"]) for r in rows] == [("mg", 0, 0)]
    first = rows[0]
    assert (first["graph_id"], first["op_name"], first["io"], first["slot"]) == (
        3,
        "Expand/_Muls/Mul-op0",
        "output",
        0,
    )
    assert first["timestamp_us"] == parse_tensor_name(mul.name).timestamp_us
    assert first["nan_count"] == 1
    # Its row id is the poisoned file, and the rest of the step is counted, not hidden.
    assert cat.locate(first["row_id"])[0] == mul.resolve()
    assert first["anomalous_graphs"] >= 2 and first["anomalous_outputs"] >= 2


def test_per_graph_answers_keep_their_own_name(poisoned_multigraph):
    cat, _mul, _matmul = poisoned_multigraph
    by_graph = cat.sql(
        "SELECT graph_id, op_name, exec_index FROM first_anomaly_by_graph WHERE iteration = 0 "
        "ORDER BY graph_id"
    ).to_pylist()
    graphs = [r["graph_id"] for r in by_graph]
    assert 1 in graphs and 3 in graphs and len(graphs) >= 2
    g1 = next(r for r in by_graph if r["graph_id"] == 1)
    assert g1["op_name"] == MATMUL_OP and g1["exec_index"] == 1
    # The step answer is the earliest of the per-graph answers by time.
    earliest = cat.sql(
        "SELECT graph_id FROM first_anomaly_by_graph WHERE iteration = 0 ORDER BY timestamp_us LIMIT 1"
    ).column(0)
    assert earliest.to_pylist() == [3]


def test_cli_shows_the_step_answer_and_points_to_by_graph(poisoned_multigraph):
    cat, _mul, _matmul = poisoned_multigraph
    cli = [sys.executable, "-m", "catalog.cli", "anomalies", str(cat.path)]
    step = subprocess.run([*cli, "--format", "csv"], capture_output=True, text=True, check=True)
    lines = step.stdout.splitlines()
    assert lines[0].startswith("run,rank,iteration,graph_id,op_name,io,slot,nan_count,")
    assert len(lines) == 2 and ",Expand/_Muls/Mul-op0,output,0," in lines[1]
    # the same command's code in this process, for the other two forms
    table = dumpcat_in_process(*cli[3:])
    assert table.returncode == 0, table.stderr
    assert "Expand/_Muls/Mul-op0" in table.stdout and "(1 row)" in table.stdout
    assert "--by-graph" in table.stderr
    per_graph = dumpcat_in_process(*cli[3:], "--by-graph", "--format", "csv")
    assert per_graph.returncode == 0, per_graph.stderr
    body = per_graph.stdout.splitlines()[1:]
    assert len(body) >= 2
    assert ",Expand/_Muls/Mul-op0," in body[0]  # steps in order, their graphs in time order
    assert any(f",{MATMUL_OP}," in line for line in body)


# -- without an execution order -----------------------------------------------------------------


def _without(tmp_path: Path, scenario: str, *parts: str) -> Path:
    dump = tmp_path / scenario
    shutil.copytree(dump_of(scenario), dump)
    for part in parts:
        shutil.rmtree(dump / "rank_0" / part)
    return dump


COLUMNS = "row_id, op_name, source_file, source_line, source_code, name_match"


IR_SCENARIOS = ["nan_log", "long_names", "kernels_filter", "multigraph", "simple"]


@pytest.fixture(scope="module")
def ir_catalogs(tmp_path_factory) -> tuple[Catalog, Catalog, list[str], Path]:
    """(full, bare, scenarios, folder): `bare` holds every committed real MindSpore dump (ms210 and
    the samples) with its execution_order/ removed (folder/<scenario>), one run per scenario; `full`
    holds IR_SCENARIOS as committed, under the same run names (a row id is a hash of run and file, so
    equal rows have equal ids in both). The tests only read them."""
    tmp = tmp_path_factory.mktemp("ir")
    scenarios = [p.name for p in sorted(MS210.iterdir()) if (p / "dump").is_dir()]
    scenarios += [p.name for p in sorted(SAMPLES.iterdir())]
    assert set(IR_SCENARIOS) <= set(scenarios)
    bare = Catalog.open(tmp / "bare.cat", create=True)
    for scenario in scenarios:
        bare.ingest(_without(tmp, scenario, "execution_order"), run=scenario)
    full = Catalog.open(tmp / "full.cat", create=True)
    for scenario in IR_SCENARIOS:
        full.ingest(dump_of(scenario), run=scenario)
    return full, bare, scenarios, tmp


@pytest.mark.parametrize("scenario", IR_SCENARIOS)
def test_graph_ir_resolves_names_when_there_is_no_execution_order(ir_catalogs, scenario):
    """Without execution_order/ the IR resolves every operator the execution order did: the same
    op_name, source line and match kind for every statistic; only exec_index is unknown."""
    full, bare, _, _ = ir_catalogs
    query = f"SELECT {COLUMNS} FROM stats WHERE run = $run ORDER BY row_id"
    want = full.sql(query, {"run": scenario}).to_pylist()
    got = bare.sql(query, {"run": scenario}).to_pylist()
    assert want and got == want
    assert sum(r["name_match"] != "unresolved" for r in got) > 0
    count = "SELECT count(*) FROM {} WHERE run = $run{}"
    assert (
        bare.sql(count.format("stats", " AND exec_index IS NOT NULL"), {"run": scenario}).column(0)[0].as_py()
        == 0
    )
    assert bare.sql(count.format("ops", ""), {"run": scenario}).column(0)[0].as_py() == 0
    assert full.sql(count.format("ops", ""), {"run": scenario}).column(0)[0].as_py() > 0


def test_first_anomaly_without_execution_order(ir_catalogs):
    _, cat, _, _ = ir_catalogs  # nan_log without execution_order/, run 'nan_log'
    rows = cat.sql(
        "SELECT iteration, op_name, exec_index, source_line, source_code, input_ops FROM first_anomaly "
        "WHERE run = 'nan_log' ORDER BY iteration"
    ).to_pylist()
    assert rows == [
        {
            "iteration": 0,
            "op_name": LOG_OP,
            "exec_index": None,
            "source_line": 16,
            "source_code": "x = self.log(x)",
            "input_ops": ["Default/network-WithLossCell/_backbone-Net/fc-Dense/BiasAdd-op0"],
        },
        {
            "iteration": 1,
            "op_name": MATMUL_OP,
            "exec_index": None,
            "source_line": 15,
            "source_code": "x = self.fc(x)",
            "input_ops": ["inputs0", "Default/network-WithLossCell/_backbone-Net/Load-op0"],
        },
    ]


def test_first_anomaly_with_neither_execution_order_nor_graphs(tmp_path):
    """A bare tree of npy files (as people copy them by hand) still names the first NaN of each
    step, by the name in its file and its timestamp."""
    cat = _catalog(tmp_path, _without(tmp_path, "nan_log", "execution_order", "graphs"), "bare")
    rows = cat.sql(
        "SELECT iteration, op_name, name_match, source_line FROM first_anomaly ORDER BY 1"
    ).to_pylist()
    assert rows == [
        {"iteration": 0, "op_name": sanitize_v23(LOG_OP), "name_match": "unresolved", "source_line": None},
        {"iteration": 1, "op_name": sanitize_v23(MATMUL_OP), "name_match": "unresolved", "source_line": None},
    ]


def test_inputs_answer_when_no_output_was_dumped(tmp_path):
    """With only inputs dumped (`input_output: 1`), the first anomalous input is the answer."""
    dump = tmp_path / "inputs_only"
    shutil.copytree(dump_of("nan_log"), dump)
    for f in dump.rglob("*.output.*.npy"):
        if not f.name.startswith("Parameter."):
            f.unlink()
    for f in dump.rglob("Parameter.*.npy"):
        f.unlink()
    cat = _catalog(tmp_path, dump, "inputs_only")
    rows = cat.sql("SELECT iteration, io, op_name FROM first_anomaly ORDER BY iteration").to_pylist()
    assert [r["io"] for r in rows] == ["input", "input"]
    # Iteration 0: the Log's output feeds BiasAdd of the head: its input is the first NaN seen.
    first = cat.sql(
        "SELECT op_name FROM stats WHERE iteration = 0 AND nan_count > 0 ORDER BY timestamp_us LIMIT 1"
    ).column(0)
    assert rows[0]["op_name"] == first[0].as_py()


def test_sql_sanitising_of_ir_names_matches_python(ir_catalogs):
    """ir_ops builds the file-name forms in SQL; on every real graph IR committed here they equal
    the forms ingest.formats.mindspore.npy_name gives the execution order."""
    _, cat, scenarios, _ = ir_catalogs
    assert cat.sql("SELECT count(DISTINCT run) FROM runs").column(0)[0].as_py() == len(scenarios)
    rows = cat.sql("SELECT full_name, sanitized_name, short_name, base_name FROM ir_ops").to_pylist()
    assert len({r["full_name"] for r in rows}) > 100
    for row in rows:
        assert row["sanitized_name"] == sanitize_v23(row["full_name"])
        assert row["short_name"] == short_name(row["full_name"])
        assert row["base_name"] == without_op_index(sanitize_v23(row["full_name"]))


# -- a real control-flow run --------------------------------------------------------------------

SQRT_OP = "Default/network-WithLossCell/_backbone-Net/Sqrt-op0"


def _first_nan_output_by_numpy(iteration_dir_glob: list[Path]) -> Path:
    """Independently of dumpcat: the output file holding NaN/Inf with the smallest timestamp."""
    bad = []
    for f in iteration_dir_glob:
        name = parse_tensor_name(f.name)
        if name.io != "output":
            continue
        a = np.load(f)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            bad.append((name.timestamp_us, f))
    return min(bad)[1]


@pytest.mark.parametrize("without", [(), ("execution_order",)])
def test_control_flow_step_answer_is_the_sqrt(tmp_path, ir_catalogs, without):
    """MindSpore 2.10 compiles the control-flow net into many kernel graphs; the NaN made by
    `ops.Sqrt` at iteration 0 spreads to outputs in many of them. One row per step, and it is the
    sqrt — with or without the execution order (the module's catalog of dumps without it)."""
    if without:
        _, cat, _, folder = ir_catalogs
        dump, run = folder / "control_flow", "control_flow"
    else:
        dump, run = dump_of("control_flow"), "cf"
        cat = _catalog(tmp_path, dump, run)
    rows = cat.sql(
        "SELECT * FROM first_anomaly WHERE run = $run ORDER BY iteration", {"run": run}
    ).to_pylist()
    assert [(r["rank"], r["iteration"]) for r in rows] == [(0, 0), (0, 1)]
    first = rows[0]
    assert (first["op_name"], first["io"], first["slot"]) == (SQRT_OP, "output", 0)
    assert first["source_file"].endswith("control_flow/train.py") and first["source_line"] == 34
    assert first["source_code"] == "x = self.sqrt(x)"
    expected = _first_nan_output_by_numpy(sorted(dump.glob("rank_0/Net/*/0/*.npy")))
    assert cat.locate(first["row_id"])[0] == expected.resolve()
    per_graph = cat.sql(
        "SELECT graph_id FROM first_anomaly_by_graph WHERE run = $run AND iteration = 0", {"run": run}
    ).column(0)
    assert len(per_graph) > 5 and first["anomalous_graphs"] == len(per_graph)
    assert first["graph_id"] in per_graph.to_pylist()
