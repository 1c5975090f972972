"""Operators to source lines: graph IR ingested from real dumps, joined to tensors and stats,
and the first anomaly of a real NaN run located in the training script."""

from __future__ import annotations

import subprocess
import sys

import pytest

from catalog import Catalog
from tests.conftest import dump_of

MAPPING = (
    "SELECT run, rank, graph_id, full_name, source_file, source_line, source_code FROM op_source ORDER BY ALL"
)


@pytest.fixture(scope="module")
def scenario_cat(tmp_path_factory):
    """`scenario_cat(scenario)`: an open catalog of the committed dump as it is (run "r"), made
    once per scenario for the module (the tests below only read it)."""
    made: dict[str, Catalog] = {}

    def of(scenario: str) -> Catalog:
        if scenario not in made:
            made[scenario] = Catalog.open(tmp_path_factory.mktemp(scenario) / "cat", create=True)
            made[scenario].ingest(dump_of(scenario), run="r")
        return made[scenario]

    yield of
    for cat in made.values():
        cat.close()


@pytest.fixture
def nan_cat(scenario_cat):
    return scenario_cat("nan_log")


def test_first_anomaly_is_the_log_line(nan_cat):
    rows = nan_cat.sql("SELECT * FROM first_anomaly WHERE iteration = 0").to_pylist()
    assert len(rows) == 1
    a = rows[0]
    assert a["op_name"] == "Default/network-WithLossCell/_backbone-Net/Log-op0"
    assert a["source_file"].endswith("nan_log/train.py") and a["source_line"] == 16
    assert a["source_code"] == "x = self.log(x)"
    assert a["nan_count"] == 1 and a["neg_inf_count"] == 0
    assert a["input_ops"] == ["Default/network-WithLossCell/_backbone-Net/fc-Dense/BiasAdd-op0"]
    # The row id fetches the NaN tensor itself.
    assert int((nan_cat.tensor(a["row_id"]) != nan_cat.tensor(a["row_id"])).sum()) == 1


def test_source_columns_on_stats_tensors_and_ops(nan_cat):
    s = nan_cat.sql("SELECT DISTINCT source_line, source_code FROM stats WHERE op_type = 'Log'").to_pylist()
    assert s == [{"source_line": 16, "source_code": "x = self.log(x)"}]
    t = nan_cat.sql(
        "SELECT DISTINCT source_line FROM tensors WHERE op_type = 'MatMul' AND op_name LIKE 'Default/%'"
    )
    assert sorted(t.column(0).to_pylist()) == [15, 17]
    o = nan_cat.sql("SELECT source_line FROM ops WHERE op_name LIKE '%/Log-op0'").column(0).to_pylist()
    assert o == [16]


def test_edges_and_frames(nan_cat):
    feeds = nan_cat.sql(
        "SELECT producer, producer_type, input_index FROM edges "
        "WHERE consumer LIKE '%/Log-op0' AND kind = 'data'"
    ).to_pylist()
    assert feeds == [
        {
            "producer": "Default/network-WithLossCell/_backbone-Net/fc-Dense/BiasAdd-op0",
            "producer_type": "BiasAdd",
            "input_index": 0,
        }
    ]
    frames = nan_cat.sql(
        "SELECT depth, is_user_code, file FROM source_lines WHERE full_name LIKE '%/Log-op0' ORDER BY depth"
    ).to_pylist()
    assert frames[-1]["is_user_code"] and frames[-1]["file"].endswith("train.py")
    assert any(not f["is_user_code"] and "site-packages/mindspore" in f["file"] for f in frames)
    node = nan_cat.sql("SELECT * FROM ir_nodes WHERE full_name LIKE '%/Log-op0'").to_pylist()[0]
    assert (
        node["op_type"] == "Log"
        and node["output_dtypes"] == ["Float32"]
        and node["output_shapes"] == [[2, 3]]
    )
    assert node["source"] == "pb"


@pytest.mark.parametrize("scenario", ["simple", "multigraph", "nan_log", "long_names", "iter_filter"])
def test_every_forward_operator_has_a_user_line(scenario_cat, scenario):
    """Forward kernels of the user's network (`Default/network-...` outside the built-in loss)
    all map to the user's script; built-in loss and optimizer kernels are created inside
    MindSpore and have framework frames only."""
    cat = scenario_cat(scenario)
    missing = cat.sql(
        "SELECT op_name FROM ops WHERE op_name LIKE 'Default/network-%' AND op_name NOT LIKE '%/_loss_fn-%' "
        "AND source_line IS NULL"
    ).column(0)
    assert missing.to_pylist() == []
    with_line = cat.sql("SELECT count(*) FROM ops WHERE source_line IS NOT NULL").column(0)[0].as_py()
    assert with_line > 0
    files = (
        cat.sql("SELECT DISTINCT source_file FROM ops WHERE source_file IS NOT NULL").column(0).to_pylist()
    )
    assert all(f.endswith("/train.py") for f in files)


@pytest.mark.parametrize("scenario", ["simple", "multigraph", "nan_log"])
def test_pb_and_ir_give_the_same_mapping(tmp_path, copy_dump, scenario, scenario_cat):
    ir_only = copy_dump(scenario, "ir_only")
    for pb in (ir_only / "rank_0/graphs").glob("*.pb"):
        pb.unlink()
    a = scenario_cat(scenario)  # the dump as committed, with its .pb files
    b = Catalog.open(tmp_path / "b", create=True)
    b.ingest(ir_only, run="r")
    assert set(a.sql("SELECT DISTINCT source FROM ir_nodes").column(0).to_pylist()) == {"pb"}
    assert set(b.sql("SELECT DISTINCT source FROM ir_nodes").column(0).to_pylist()) == {"ir"}
    mapping = a.sql(MAPPING).to_pylist()
    assert mapping and mapping == b.sql(MAPPING).to_pylist()
    anomalies = "SELECT iteration, op_name, source_line FROM first_anomaly ORDER BY ALL"
    assert a.sql(anomalies).to_pylist() == b.sql(anomalies).to_pylist()


def test_truncated_pb_falls_back_to_ir(tmp_path, copy_dump):
    dump = copy_dump("nan_log")
    pb = dump / "rank_0/graphs/ms_output_trace_code_graph_0.pb"
    pb.write_bytes(pb.read_bytes()[: pb.stat().st_size // 2])
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    errors = cat.sql("SELECT path, stage FROM ingest_errors").to_pylist()
    assert errors and all(e["stage"] == "graph" and ".pb" in e["path"] for e in errors)
    assert s.errors == len(errors)
    assert cat.sql("SELECT DISTINCT source FROM ir_nodes").column(0).to_pylist() == ["ir"]
    assert cat.sql("SELECT source_line FROM first_anomaly WHERE iteration = 0").column(0).to_pylist() == [16]
    # Unchanged files are not parsed (nor reported) again.
    assert cat.ingest(dump).errors == 0
    assert cat.sql("SELECT count(*) FROM ingest_errors").column(0)[0].as_py() == len(errors)


def test_truncated_ir_without_pb_keeps_what_parsed(tmp_path, copy_dump):
    dump = copy_dump("nan_log")
    graphs = dump / "rank_0/graphs"
    (graphs / "ms_output_trace_code_graph_0.pb").unlink()
    ir = graphs / "ms_output_trace_code_graph_0.ir"
    text = ir.read_text()
    after_log = text.index(
        "x = self.log(x)",
        text.index("Fullname with scope: (Default/network-WithLossCell/_backbone-Net/Log-op0"),
    )
    cut = text.index("\n", after_log) + 40  # in the middle of the next node
    ir.write_text(text[:cut])
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.errors >= 1
    assert cat.sql("SELECT stage FROM ingest_errors").column(0).to_pylist()[0] == "graph"
    # Nodes before the cut are there, with their lines; tensors are all cataloged regardless.
    assert cat.sql("SELECT source_line FROM ops WHERE op_name LIKE '%/Log-op0'").column(0).to_pylist() == [16]
    assert s.tensors == 180


def test_unknown_line_form_is_an_error_row(tmp_path, copy_dump):
    dump = copy_dump("nan_log")
    graphs = dump / "rank_0/graphs"
    (graphs / "ms_output_trace_code_graph_0.pb").unlink()
    ir = graphs / "ms_output_trace_code_graph_0.ir"
    lines = ir.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "Fullname with scope" in line and "Log-op0" in line)
    lines.insert(at, "      ?? a line form no MindSpore version writes\n")
    ir.write_text("".join(lines))
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    errors = cat.sql("SELECT path, stage FROM ingest_errors").to_pylist()
    assert [e["stage"] for e in errors] == ["graph"] and errors[0]["path"].endswith(f".ir:{at + 1}")
    assert cat.sql("SELECT source_line FROM ops WHERE op_name LIKE '%/Log-op0'").column(0).to_pylist() == [16]


def _dumpcat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catalog.cli", *map(str, args)], capture_output=True, text=True
    )


def _dumpcat_here(*args: str) -> subprocess.CompletedProcess:
    """The same command run in this process by click's runner (its output and exit code as a
    subprocess gives them): the start-up of `python -m catalog.cli` is `_dumpcat`'s."""
    from click.testing import CliRunner

    from catalog.cli.commands import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_cli_where_and_anomalies(tmp_path):
    """`dumpcat ingest` as a command, then `where` and `anomalies` on its catalog (in this process:
    each command's start-up was a second of the test, and proved nothing about them)."""
    cat = tmp_path / "cat"
    assert _dumpcat("ingest", dump_of("nan_log"), "--catalog", cat, "--run", "nan").returncode == 0
    by_line = _dumpcat_here("where", cat, "--line", "train.py:16", "--format", "json")
    assert by_line.returncode == 0
    import json

    rows = [json.loads(x) for x in by_line.stdout.splitlines()]
    ops = {r["op_name"] for r in rows}
    assert "Default/network-WithLossCell/_backbone-Net/Log-op0" in ops
    log0 = next(r for r in rows if r["op_name"].endswith("/Log-op0") and r["iteration"] == 0)
    assert log0["tensors"] == ["output.0", "input.0"] and len(log0["row_ids"]) == 2
    by_code = _dumpcat_here("where", cat, "--code", "x = self.log(x)", "--format", "json")
    assert [json.loads(x) for x in by_code.stdout.splitlines()] == rows
    table = _dumpcat_here("anomalies", cat).stdout
    assert "Log-op0" in table and "train.py:16" in table and "x = self.log(x)" in table
    bad = _dumpcat_here("where", cat, "--line", "train.py")
    assert bad.returncode == 1 and "FILE:LINE" in bad.stderr
    none = _dumpcat_here("where", cat, "--line", "train.py:999")
    assert none.returncode == 0 and "no operator was created by that line" in none.stderr


def _graph_only_dump(root, ir_fixture):
    graphs = root / "rank_0" / "graphs"
    graphs.mkdir(parents=True)
    (graphs / "ms_output_trace_code_graph_0.ir").write_bytes(ir_fixture.read_bytes())
    return root


TABLE_QUERIES = (
    "SELECT node_key, op_type, full_name, is_parameter, param_name, output_dtypes, output_shapes "
    "FROM ir_nodes "
    "ORDER BY node_key",
    "SELECT producer, consumer, input_index, kind FROM edges ORDER BY ALL",
    "SELECT full_name, depth, file, line, code, is_user_code FROM source_lines ORDER BY ALL",
    "SELECT full_name, source_file, source_line, source_code FROM op_source ORDER BY ALL",
)


@pytest.mark.parametrize("old_form", ["small_v1_6.ir", "small_v1_7_to_1_10.ir", "small_docs_fullname.ir"])
def test_old_ir_generations_give_the_same_tables(tmp_path, old_form):
    """The same small graph written in each generation's exact text gives the same catalog
    tables (v1.6 frames carry no column range or line end, so those columns are not compared)."""
    from tests.conftest import DATA

    tables = []
    for i, fixture in enumerate(("small_v2.ir", old_form)):
        dump = _graph_only_dump(tmp_path / f"d{i}" / "dump", DATA / "ir" / fixture)
        cat = Catalog.open(tmp_path / f"c{i}", create=True)
        s = cat.ingest(dump, run="r")
        assert s.errors == 0, cat.sql("SELECT * FROM ingest_errors").to_pylist()
        tables.append([cat.sql(q).to_pylist() for q in TABLE_QUERIES])
    assert tables[0][0], "the fixture has nodes"
    assert tables[0] == tables[1]


def test_hostile_numbers_in_graph_files_are_errors_not_crashes(tmp_path, copy_dump):
    """An .ir whose type repeats an element 3 billion times, whose header count is a Unicode digit
    and one of whose frames has a line number of 5,000 digits: no memory bomb, no traceback; the
    graph's problems are error rows and every tensor is still cataloged."""
    dump = copy_dump("nan_log")
    graphs = dump / "rank_0/graphs"
    (graphs / "ms_output_trace_code_graph_0.pb").unlink()
    ir = graphs / "ms_output_trace_code_graph_0.ir"
    text = ir.read_text()
    text = text.replace("# Total subgraphs: 1", "# Total subgraphs: \u00b2", 1)
    text = text.replace("Tuple[Tensor[Float32]*4]", "Tuple[Tensor[Float32]*3000000000]", 1)
    text = text.replace("cell_wrapper.py:423~438", "cell_wrapper.py:" + "9" * 5000 + "~438", 1)
    ir.write_text(text)
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.tensors == 180
    errors = cat.sql("SELECT path, stage, reason FROM ingest_errors").to_pylist()
    kinds = [(e["stage"], e["reason"].split(":")[0]) for e in errors]
    assert kinds == [("graph", "unparsable source-trace line")]
    assert errors[0]["path"].startswith("rank_0/graphs/ms_output_trace_code_graph_0.ir:")
    # The rest of the graph is there: the bad frame is one line, not the file.
    assert cat.sql("SELECT source_line FROM ops WHERE op_name LIKE '%/Log-op0'").column(0).to_pylist() == [16]
