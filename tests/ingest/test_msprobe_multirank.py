"""The 4-rank msprobe trees of issue 37 (tests/data/msprobe/pt_4ranks_*, written by msprobe 26.2 from
a gloo run of tests/writers/msprobe_dumps.py): the catalog's `first_anomaly` per rank and step must
match an independent scan of the dump.json files (plain json, no dumpcat code), the planted NaN must
be where the writer says it is, and the committed `msprobe overflow_check` json must name what
tests/data/msprobe/README.md says it names (including where msprobe is wrong)."""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest

from catalog import Catalog
from tests.conftest import DATA as TEST_DATA
from tests.conftest import REPO

DATA = TEST_DATA / "msprobe"
CHECKS = DATA / "overflow_check"
WRITER = REPO / "tests" / "writers" / "msprobe_dumps.py"

# tree -> (scenario, planted rank, steps dumped)
TREES = {
    "pt_4ranks_allreduce_l1_statistics": ("allreduce", 2, (0, 1, 2)),
    "pt_4ranks_allreduce_mix_tensor": ("allreduce", 2, (1,)),
    "pt_4ranks_recv_l1_statistics": ("recv", 3, (0, 1, 2)),
    "pt_4ranks_recv_mix_tensor": ("recv", 3, (1,)),
}
PLANTED_OP = "Torch.sqrt.0.forward"
PLANTED_FILE = "/home/user/msprobe_demo/msprobe_dumps.py"  # the writer, as anonymised
PLANTED_LINE = 246
PLANTED_CODE = "root = torch.sqrt(h + offset)  # the planted NaN: offset 0.0 and h < 0 (one rank, step 1)"


# ---- the independent scan: plain json (Python's json takes msprobe's bare NaN/Infinity) ----------
def _non_finite(node: object) -> bool:
    """Whether any tensor object anywhere under `node` (lists nested in lists included) has a
    non-finite statistic."""
    if isinstance(node, list):
        return any(_non_finite(x) for x in node)
    if not isinstance(node, dict):
        return False
    if "dtype" in node:
        return any(
            isinstance(node.get(k), float) and not math.isfinite(node[k])
            for k in ("Max", "Min", "Mean", "Norm")
        )
    return any(_non_finite(v) for v in node.values())


def _inputs(entry: dict) -> list:
    return [entry.get(k) for k in ("input_args", "input_kwargs", "input", "parameters")]


def _scan(tree: str) -> dict[tuple[int, int], tuple[str, bool]]:
    """(rank, step) -> (the first entry in dump order with a non-finite output, or failing that the
    first with any non-finite tensor; whether that entry's inputs were already non-finite)."""
    found = {}
    for path in sorted((DATA / tree).glob("step*/rank*/dump.json")):
        step, rank = int(path.parts[-3][4:]), int(path.parts[-2][4:])
        data = json.loads(path.read_text())["data"]
        firsts = [k for k, e in data.items() if _non_finite(e.get("output"))]
        firsts = firsts or [k for k, e in data.items() if _non_finite(e)]
        if firsts:
            found[(rank, step)] = (firsts[0], _non_finite(_inputs(data[firsts[0]])))
    return found


def _expected(scenario: str, planted: int, steps: tuple[int, ...]) -> dict[tuple[int, int], tuple[str, bool]]:
    """What the writer's design says, rank by rank (tests/data/msprobe/README.md)."""
    out = {}
    for rank in range(4):
        if 1 in steps:
            if rank == planted:
                out[(rank, 1)] = (PLANTED_OP, False)  # finite input, NaN output
            elif scenario == "allreduce":
                out[(rank, 1)] = ("Distributed.all_gather.0.forward", False)  # inside the output list
            elif rank == 1:
                out[(rank, 1)] = ("Distributed.recv.0.forward", False)  # from rank 3, directed
            else:
                out[(rank, 1)] = ("Distributed.all_reduce.0.forward", False)  # enc.weight's gradient
        if 2 in steps:  # no new origin: enc's weights are NaN on entry to the step on every rank
            out[(rank, 2)] = ("Functional.linear.0.forward", True)
    return out


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("cat"), create=True)
    for tree in TREES:
        s = c.ingest(DATA / tree, run=tree)
        assert s.producer == "msprobe" and s.errors == 0, (tree, s)
    return c


@pytest.mark.parametrize("tree", list(TREES))
def test_the_trees_are_what_the_writer_says(tree):
    scenario, planted, steps = TREES[tree]
    ranks = {p.name for p in (DATA / tree).glob("step*/rank*")}
    assert ranks == {f"rank{r}" for r in range(4)}
    assert sorted({p.name for p in (DATA / tree).glob("step*")}) == [f"step{s}" for s in steps]
    assert _scan(tree) == _expected(scenario, planted, steps)


@pytest.mark.parametrize("tree", list(TREES))
def test_first_anomaly_matches_the_independent_scan(cat, tree):
    rows = cat.sql(
        "SELECT rank, iteration, op_name, io, source_file, source_line, source_code FROM first_anomaly "
        "WHERE run = $run",
        {"run": tree},
    ).to_pylist()
    got = {(r["rank"], r["iteration"]): r for r in rows}
    scan = _scan(tree)
    assert {k: r["op_name"] for k, r in got.items()} == {k: op for k, (op, _) in scan.items()}
    assert all(r["io"] == "output" for r in rows)
    origin = got[(TREES[tree][1], 1)]
    assert (origin["source_file"], origin["source_line"], origin["source_code"]) == (
        PLANTED_FILE,
        PLANTED_LINE,
        PLANTED_CODE,
    )


def test_the_planted_line_is_the_writers_line():
    """stack.json of the planted rank names the line of the committed writer that made the NaN."""
    assert WRITER.read_text().splitlines()[PLANTED_LINE - 1].strip() == PLANTED_CODE
    for tree, (_, planted, _) in TREES.items():
        stack = json.loads((DATA / tree / "step1" / f"rank{planted}" / "stack.json").read_text())
        frames = [lines for keys, lines in stack.values() if PLANTED_OP in keys]
        assert frames and frames[0][0].startswith(f"File {PLANTED_FILE}, line {PLANTED_LINE}, in forward,")


def test_all_gather_hides_the_nan_in_a_nested_output_list():
    """msprobe records all_gather's tensor list as a list inside `output` (input_args[0] is null);
    rank 2's NaN loss is element 2 of it on every rank."""
    for rank in range(4):
        path = DATA / "pt_4ranks_allreduce_l1_statistics" / "step1" / f"rank{rank}" / "dump.json"
        entry = json.loads(path.read_text())["data"]["Distributed.all_gather.0.forward"]
        assert entry["input_args"][0] is None and isinstance(entry["output"][0], list)
        assert [_non_finite(t) for t in entry["output"][0]] == [False, False, True, False]


def test_the_catalog_finds_the_nan_inside_all_gathers_list(cat):
    """dumpcat reads the nested list msprobe's own analysis skips: element 2 (rank 2's loss)."""
    rows = cat.sql(
        "SELECT rank, arg_path, io FROM stats WHERE run = 'pt_4ranks_allreduce_l1_statistics' "
        "AND iteration = 1 AND op_name = 'Distributed.all_gather.0.forward' AND has_nan ORDER BY ALL"
    ).to_pylist()
    assert [(r["rank"], r["arg_path"], r["io"]) for r in rows] == [
        (0, "output.0.2", "output"),
        (1, "output.0.2", "output"),
        (2, "input.1", "input"),  # rank 2 sends its own NaN loss
        (2, "output.0.2", "output"),
        (2, "output.1", "output"),
        (3, "output.0.2", "output"),
    ]


# ---- what msprobe's own analysis said (README: "msprobe overflow_check on the 4-rank trees") -------
LABELS = {  # the first column of the README's overflow_check table
    "allreduce L1": "pt_4ranks_allreduce_l1_statistics",
    "allreduce mix": "pt_4ranks_allreduce_mix_tensor",
    "recv L1": "pt_4ranks_recv_l1_statistics",
    "recv mix": "pt_4ranks_recv_mix_tensor",
}


def _readme_overflow_table() -> dict[str, dict[int, dict[str, list[str]]]]:
    """tree -> step -> {"rank_R": [op_name]}, read from the table in tests/data/msprobe/README.md;
    a cell "—" is a step with no file."""
    text = (DATA / "README.md").read_text()
    section = text.split("### msprobe overflow_check on the 4-rank trees", 1)[1]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in LABELS:
            table[LABELS[cells[0]]] = {
                step: {r: [op]}
                for step, cell in ((1, cells[1]), (2, cells[2]))
                for r, op in re.findall(r"`(rank_\d+)`: `([^`]+)`", cell)
            }
    return table


def test_the_readme_table_is_complete():
    table = _readme_overflow_table()
    assert set(table) == set(TREES)
    assert table["pt_4ranks_allreduce_l1_statistics"] == {
        1: {"rank_2": ["Torch.sqrt.0.backward"]},  # right rank, wrong op: the forward origin is missed
        2: {"rank_1": ["Distributed.recv.0.forward"]},  # a false origin: no NaN is born at step 2
    }


@pytest.mark.parametrize("tree", list(TREES))
def test_overflow_check_json_names_what_the_readme_says(tree):
    files = {int(p.stem[4:]): json.loads(p.read_text()) for p in (CHECKS / tree).glob("step*.json")}
    assert {s: {r: [n["op_name"] for n in v] for r, v in d.items()} for s, d in files.items()} == (
        _readme_overflow_table()[tree]
    )
    for d in files.values():
        for nodes in d.values():
            for node in nodes:
                if node["op_name"] == PLANTED_OP:
                    assert node["stack_info"][0].startswith(f"File {PLANTED_FILE}, line {PLANTED_LINE},")
                if node["op_name"].endswith(".backward"):
                    assert node["stack_info"] == {}  # msprobe keeps no stack for backward entries


CLI_ORDER = "1203"  # the order os.listdir gave the rank dirs when the committed json was made


@pytest.mark.parametrize("tree", list(TREES))
def test_overflow_check_depends_on_the_order_of_the_rank_dirs(tree):
    """rank_orders.json: msprobe's OverFlowCheck rerun under each of the 24 orders os.listdir could give
    the rank dirs. The committed CLI answer is the one for CLI_ORDER; the planted rank is always
    named at step 1, but its forward op only under some orders; step 2 names a false origin."""
    orders = json.loads((CHECKS / tree / "rank_orders.json").read_text())
    _, planted, steps = TREES[tree]
    assert sorted(orders) == [f"step{s}" for s in steps]
    for step, answers in orders.items():
        assert sorted(o for a in answers for o in a["orders"]) == sorted(
            "".join(map(str, p)) for p in itertools.permutations(range(4))
        )
        cli = [a["names"] for a in answers if CLI_ORDER in a["orders"]]
        committed = CHECKS / tree / f"{step}.json"
        expected = (
            {r: [n["op_name"] for n in v] for r, v in json.loads(committed.read_text()).items()}
            if (committed.exists())
            else {}
        )
        assert cli == [expected]
        named = {(r, op) for a in answers for r, ops in a["names"].items() for op in ops}
        if step == "step0":
            assert named == set()
        elif step == "step1":
            assert named == {(f"rank_{planted}", PLANTED_OP), (f"rank_{planted}", "Torch.sqrt.0.backward")}
        else:  # no NaN is born at step 2; msprobe names one anyway
            assert ("rank_1", "Distributed.recv.0.forward") in named
            assert {op for _, op in named} == {"Distributed.recv.0.forward", "Functional.mse_loss.0.backward"}


def test_no_path_of_the_producing_machine_is_committed():
    for path in [*CHECKS.rglob("*.json"), *(p for t in TREES for p in (DATA / t).rglob("*.json"))]:
        text = path.read_text()
        for frame in ("File /", '"dump_data_dir": "/'):
            for line in text.splitlines():
                if frame in line:
                    rest = line.split(frame, 1)[1]
                    assert rest.startswith(("opt/venv/", "usr/lib/python3.11/", "home/user/msprobe_demo/")), (
                        path,
                        line,
                    )


def test_readme_states_the_planted_line():
    readme = (DATA / "README.md").read_text()
    assert f"line {PLANTED_LINE}" in readme and all(t in readme for t in TREES)
