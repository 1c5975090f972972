"""Which rank started it (issue 37): `communication_ops` and `nan_origin` on real msprobe dumps,
checked against an independent scan of the dump.json files, and reached from `dumpcat sql`, the
Python API, `dumpcat anomalies` and the PostgreSQL protocol."""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
from pathlib import Path

import psycopg
import pytest

from catalog import Catalog
from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import DATA, REPO
from tests.pg_clients import serve

MSPROBE = DATA / "msprobe"
TWO = "pt_l1_statistics_2ranks"
SQRT_CODE = "root = torch.sqrt(h + offset)  # NaN where h + offset < 0"
COLLECTIVE_PREFIXES = ("Distributed.", "Communication.")


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("origin") / "cat"
    cat = Catalog.open(path, create=True)
    for tree in (TWO, "pt_mix_tensor"):
        summary = cat.ingest(MSPROBE / tree, run=tree)
        assert summary.errors == 0, summary
    cat.close()
    return path


@pytest.fixture(scope="module")
def cat(cat_path) -> Catalog:
    c = Catalog.open(cat_path)
    yield c
    c.close()


def _nonfinite(node: object) -> bool:
    """Does a dump.json argument (a tensor object, or lists/dicts of them) hold NaN or ±Inf?"""
    if isinstance(node, dict):
        if "dtype" in node and "shape" in node:
            return any(
                isinstance(node.get(k), float) and not math.isfinite(node[k])
                for k in ("Max", "Min", "Mean", "Norm")
            )
        return any(_nonfinite(v) for v in node.values())
    if isinstance(node, list):
        return any(_nonfinite(v) for v in node)
    return False


def _scan_collectives(tree: str) -> list[tuple]:
    """(rank, step, api, instance, input non-finite, output non-finite) of every Distributed entry,
    read from the files with Python's json (which takes msprobe's bare NaN/Infinity)."""
    out = []
    for path in sorted((MSPROBE / tree).glob("step*/rank*/dump.json")):
        step, rank = int(path.parts[-3][4:]), int(path.parts[-2][4:])
        seen: dict[str, int] = {}
        for key, body in json.loads(path.read_text())["data"].items():
            if not key.startswith(COLLECTIVE_PREFIXES) or not key.endswith(".forward"):
                continue
            api = key.split(".")[1]
            instance = seen[api] = seen.get(api, -1) + 1
            inputs = [body.get("input_args"), body.get("input_kwargs")]
            out.append((rank, step, api, instance, _nonfinite(inputs), _nonfinite(body.get("output"))))
    return sorted(out)


def _stack_line(tree: str, step: int, rank: int, key: str) -> tuple[str, int, str]:
    """The innermost frame of the demo script in stack.json for `key` (file, line, code)."""
    groups = json.loads((MSPROBE / tree / f"step{step}/rank{rank}/stack.json").read_text())
    for names, frames in groups.values():
        if key in names:
            for frame in frames:
                m = re.match(r"^File (.*), line (\d+), in (.*?), \n (.*)$", frame)
                if m and m.group(1).endswith("msprobe_dumps.py"):
                    return m.group(1), int(m.group(2)), m.group(4).strip()
    raise AssertionError(f"{key} not in stack.json")


def _collectives(cat: Catalog, run: str) -> tuple[list[tuple], list[dict]]:
    """communication_ops of `run` in _scan_collectives' form (sorted), and its rows."""
    rows = cat.sql("SELECT * FROM communication_ops WHERE run = $run", {"run": run}).to_pylist()
    keys = ("rank", "iteration", "collective", "instance", "input_nonfinite", "output_nonfinite")
    return sorted(tuple(r[k] for k in keys) for r in rows), rows


def test_communication_ops_are_the_collectives_of_the_files(cat):
    got, rows = _collectives(cat, TWO)
    assert got == _scan_collectives(TWO)
    assert len(got) == 6  # 2 ranks x 3 steps, one all_reduce each
    assert {(r["kind"], r["op_name"], r["inputs"], r["outputs"]) for r in rows} == {
        ("undirected", "Distributed.all_reduce.0.forward", 1, 1)
    }
    assert {r["input_nan_count"] for r in rows} == {None}  # statistics only: no counts
    # rank 1 made the NaN, rank 0 only sees it in the output (steps 1 and 2)
    nonfinite = {(r, s): (i, o) for r, s, _, _, i, o in got}
    assert nonfinite[(1, 1)] == (True, True) and nonfinite[(0, 1)] == (False, True)
    assert nonfinite[(0, 0)] == nonfinite[(1, 0)] == (False, False)


def test_origin_is_rank1_sqrt_and_rank0_received_it_through_all_reduce(cat):
    rows = {
        r["iteration"]: r
        for r in cat.sql("SELECT * FROM nan_origin WHERE run = $run", {"run": TWO}).to_pylist()
    }
    assert sorted(rows) == [1, 2]
    first = rows[1]
    file, line, code = _stack_line(TWO, 1, 1, "Torch.sqrt.0.forward")
    assert (first["origin_rank"], first["op_name"], first["io"]) == (1, "Torch.sqrt.0.forward", "output")
    assert (first["source_file"], first["source_line"], first["source_code"]) == (file, line, code)
    assert code == SQRT_CODE
    assert first["new_origin"] is True and first["origin_iteration"] == 1
    assert first["reason"] == "inputs finite, output non-finite"
    assert first["reached"] == [
        {"rank": 0, "collective": "all_reduce", "instance": 0, "op_name": "Distributed.all_reduce.0.forward",
         "from_ranks": [1]}
    ]  # fmt: skip
    assert first["second_origins"] is None and first["inherited_ranks"] is None
    assert first["anomalous_ranks"] == 2
    # step 2 starts from rank 1's NaN parameters: no new origin, it points back to step 1
    second = rows[2]
    assert second["new_origin"] is False and second["origin_iteration"] == 1
    assert (second["origin_rank"], second["op_name"], second["source_line"]) == (
        1,
        "Torch.sqrt.0.forward",
        line,
    )
    assert second["reason"] == "state already non-finite at the step's start: origin at step 1"
    assert second["inherited_ranks"] == [1]
    assert [(r["rank"], r["from_ranks"]) for r in second["reached"]] == [(0, [1])]


def test_inherited_step_starts_from_non_finite_inputs_in_the_files(cat):
    """The rule behind step 2: rank 1's first anomalous entry there already has a non-finite input
    (the SGD-updated weight), where at step 1 Torch.sqrt's input was finite."""
    first = cat.sql(
        "SELECT iteration, op_name FROM first_anomaly WHERE run = $run AND rank = 1 ORDER BY iteration",
        {"run": TWO},
    ).to_pylist()
    for row in first:
        step = row["iteration"]
        data = json.loads((MSPROBE / TWO / f"step{step}/rank1/dump.json").read_text())["data"]
        body = data[row["op_name"]]
        assert _nonfinite(body["output"])
        assert _nonfinite(body["input_args"]) is (step == 2)


def test_one_rank_run_reflects_first_anomaly(cat):
    rows = cat.sql(
        "SELECT iteration, origin_rank, op_name, nan_count, new_origin, origin_iteration, reached "
        "FROM nan_origin WHERE run = 'pt_mix_tensor' ORDER BY iteration"
    ).to_pylist()
    sqrt = {"origin_rank": 0, "op_name": "Torch.sqrt.0.forward", "nan_count": 11, "origin_iteration": 1}
    assert rows == [
        {"iteration": 1, **sqrt, "new_origin": True, "reached": None},
        {"iteration": 2, **sqrt, "new_origin": False, "reached": None},
    ]
    assert cat.sql("SELECT count(*) AS n FROM communication_ops WHERE run = 'pt_mix_tensor'").to_pylist() == [
        {"n": 0}
    ]


def test_views_are_listed(cat):
    assert {"communication_ops", "nan_origin"} <= set(cat.views())


def test_dumpcat_sql_and_anomalies(cat_path):
    out = dumpcat_in_process(
        "sql", cat_path, f"SELECT iteration, origin_rank, op_name FROM nan_origin WHERE run = '{TWO}' "
        "ORDER BY iteration", "--format", "csv",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "iteration,origin_rank,op_name",
        "1,1,Torch.sqrt.0.forward",
        "2,1,Torch.sqrt.0.forward",
    ]
    both = dumpcat_in_process("anomalies", cat_path, "--run", TWO)
    by_rank = dumpcat_in_process("anomalies", cat_path, "--run", TWO, "--by-rank")
    assert both.returncode == by_rank.returncode == 0
    head, sep, tail = both.stdout.partition("\nFirst anomaly of each rank (first_anomaly):\n")
    assert sep and tail == by_rank.stdout  # --by-rank: today's per-rank rows, exactly
    assert head.startswith("Which rank started it (nan_origin):\n")
    origin_lines = [ln for ln in head.splitlines() if ln.startswith(TWO)]
    assert len(origin_lines) == 2
    assert "Torch.sqrt.0.forward" in origin_lines[0] and "born here" in origin_lines[0]
    assert "0 <- all_reduce#0 from 1" in origin_lines[0]
    assert "from step 1" in origin_lines[1]
    # a one-rank run prints the per-rank rows only, as before
    one = dumpcat_in_process("anomalies", cat_path, "--run", "pt_mix_tensor")
    assert (
        one.stdout == dumpcat_in_process("anomalies", cat_path, "--run", "pt_mix_tensor", "--by-rank").stdout
    )
    assert "nan_origin" not in one.stdout


def test_over_the_postgresql_protocol(cat_path):
    with (
        serve(cat_path) as ep,
        psycopg.connect(
            host=ep.host, port=ep.port, user=ep.user, password=ep.password, dbname=ep.dbname, autocommit=True
        ) as con,
    ):
        rows = con.execute(
            "SELECT iteration, origin_rank, op_name, source_line, new_origin FROM nan_origin "
            "WHERE run = %s ORDER BY iteration",
            (TWO,),
        ).fetchall()
        comm = con.execute(
            "SELECT rank, iteration, collective, instance FROM communication_ops WHERE run = %s "
            "AND output_nonfinite ORDER BY rank, iteration",
            (TWO,),
        ).fetchall()
        described = con.execute(
            "SELECT a.attname, col_description(a.attrelid, a.attnum) FROM pg_attribute a "
            "WHERE a.attrelid = 'nan_origin'::regclass AND a.attname IN ('origin_rank', 'new_origin')"
        ).fetchall()
    line = _stack_line(TWO, 1, 1, "Torch.sqrt.0.forward")[1]
    assert dict(described)["origin_rank"] == "the rank where it was born"
    assert dict(described)["new_origin"].startswith("true when the anomaly was born in this step")
    assert rows == [(1, 1, "Torch.sqrt.0.forward", line, True), (2, 1, "Torch.sqrt.0.forward", line, False)]
    assert comm == [
        (0, 1, "all_reduce", 0),
        (0, 2, "all_reduce", 0),
        (1, 1, "all_reduce", 0),
        (1, 2, "all_reduce", 0),
    ]


def test_report_marks_the_origin_rank_in_the_heat_map(cat, tmp_path):
    from catalog.report.data import gather
    from catalog.report.figures import heatmap_figure

    data = gather(cat, TWO)
    assert data.origins.to_pylist() == [{"rank": 1, "iterations": [1]}]
    fig = heatmap_figure(data)
    assert [t.name for t in fig.data] == ["rank 0", "rank 1 · origin"]
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["rank 0", "rank 1 · origin"]
    assert "rank 1 (origin at iteration 1)" in fig.data[1].hovertemplate
    assert "origin" not in fig.data[0].hovertemplate
    out = tmp_path / "two.html"
    cat.report(out, TWO)
    html = out.read_text(encoding="utf-8")
    assert "<b>· origin</b>: a rank where the NaN/Inf was born" in html
    # a one-rank run has no menu and no mark
    one = heatmap_figure(gather(cat, "pt_mix_tensor"))
    assert [t.name for t in one.data] == ["rank 0 · origin"] and not one.layout.updatemenus


# The 4-rank trees (tests/data/msprobe/README.md): the planted NaN, and how each rank received it.
PLANTED_LINE = 246
PLANTED_CODE = "root = torch.sqrt(h + offset)  # the planted NaN: offset 0.0 and h < 0 (one rank, step 1)"
GATHERED = {r: ("all_gather", 0, [2]) for r in (0, 1, 3)}  # rank 2's NaN loss in every rank's list
SENT = {0: ("all_reduce", 0, [3]), 1: ("recv", 0, [3]), 2: ("all_reduce", 0, [3])}  # rank 3 -> 1, then grads
FOUR = {
    # tree: (origin rank, {received rank: (collective, instance, from ranks)}, steps)
    "pt_4ranks_allreduce_l1_statistics": (2, GATHERED, [1, 2]),
    "pt_4ranks_allreduce_mix_tensor": (2, GATHERED, [1]),
    "pt_4ranks_recv_l1_statistics": (3, SENT, [1, 2]),
    "pt_4ranks_recv_mix_tensor": (3, SENT, [1]),
}


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("four") / "cat", create=True)
    for tree in FOUR:
        summary = c.ingest(MSPROBE / tree, run=tree)
        assert summary.errors == 0, summary
    yield c
    c.close()


@pytest.mark.parametrize("tree", list(FOUR))
def test_four_ranks_name_the_planted_rank_op_and_line(four, tree):
    origin, reached, steps = FOUR[tree]
    rows = {
        r["iteration"]: r
        for r in four.sql("SELECT * FROM nan_origin WHERE run = $run", {"run": tree}).to_pylist()
    }
    assert sorted(rows) == steps
    first = rows[1]
    assert (first["origin_rank"], first["op_name"], first["io"]) == (origin, "Torch.sqrt.0.forward", "output")
    assert (first["source_line"], first["source_code"]) == (PLANTED_LINE, PLANTED_CODE)
    assert _stack_line(tree, 1, origin, "Torch.sqrt.0.forward")[1:] == (PLANTED_LINE, PLANTED_CODE)
    assert first["new_origin"] and first["reason"] == "inputs finite, output non-finite"
    assert {r["rank"]: (r["collective"], r["instance"], r["from_ranks"]) for r in first["reached"]} == reached
    assert first["second_origins"] is None and first["inherited_ranks"] is None
    assert first["anomalous_ranks"] == 4
    if 2 in rows:  # every rank starts step 2 with NaN weights: no new origin, back to step 1
        second = rows[2]
        assert (second["new_origin"], second["origin_iteration"], second["origin_rank"]) == (False, 1, origin)
        assert second["inherited_ranks"] == [0, 1, 2, 3] and second["reached"] is None
        assert second["source_line"] == PLANTED_LINE


@pytest.mark.parametrize("tree", list(FOUR))
def test_four_ranks_collectives_are_those_of_the_files(four, tree):
    """Instance numbers and non-finite flags against a plain-json scan, nested outputs included
    (all_gather's list); directed ones are directed."""
    got, rows = _collectives(four, tree)
    assert got == _scan_collectives(tree)
    kinds = {r["collective"]: r["kind"] for r in rows}
    assert kinds["broadcast"] == kinds["send"] == kinds["recv"] == "directed"
    assert kinds["all_reduce"] == "undirected" and kinds.get("all_gather", "undirected") == "undirected"
    assert max(r["instance"] for r in rows if r["collective"] == "all_reduce") == 3  # one per parameter


@pytest.mark.parametrize("tree", list(FOUR))
def test_four_ranks_against_msprobe_overflow_check(four, tree):
    """msprobe's own answer (its json, committed) names the same rank at step 1; at step 2 it names
    an origin where there is none (README: the step starts from NaN weights)."""
    origin = FOUR[tree][0]
    for step_file in sorted((MSPROBE / "overflow_check" / tree).glob("step*.json")):
        step = int(step_file.stem[4:])
        msprobe = json.loads(step_file.read_text())
        row = four.sql(
            "SELECT origin_rank, new_origin FROM nan_origin WHERE run = $run AND iteration = $it",
            {"run": tree, "it": step},
        ).to_pylist()[0]
        if step == 1:
            assert list(msprobe) == [f"rank_{origin}"] and row == {"origin_rank": origin, "new_origin": True}
            assert msprobe[f"rank_{origin}"][0]["op_name"].startswith("Torch.sqrt.0.")
        else:
            assert len(msprobe) == 1 and row["new_origin"] is False


@pytest.mark.parametrize("tree", ["pt_4ranks_allreduce_l1_statistics", "pt_4ranks_recv_l1_statistics"])
def test_four_ranks_peers_are_the_kwargs_msprobe_recorded(four, tree):
    expected = set()
    for path in sorted((MSPROBE / tree).glob("step*/rank*/dump.json")):
        step, rank = int(path.parts[-3][4:]), int(path.parts[-2][4:])
        for key, body in json.loads(path.read_text())["data"].items():
            if key.startswith("Distributed.") and body.get("input_kwargs"):
                kw = body["input_kwargs"]
                expected.add(
                    (rank, step, key, *(kw[n]["value"] if n in kw else None for n in ("src", "dst")))
                )
    got = four.sql(
        "SELECT rank, iteration, op_name, src, dst FROM communication_ops "
        "WHERE run = $run AND (src IS NOT NULL OR dst IS NOT NULL)",
        {"run": tree},
    ).to_pylist()
    assert {(r["rank"], r["iteration"], r["op_name"], r["src"], r["dst"]) for r in got} == expected
    assert any(e[2].startswith("Distributed.recv.") for e in expected)


def test_graph_kernel_collectives_and_second_origins(tmp_path):
    """MindSpore graph kernels (bench/bench_scale.py's Ascend-style catalog with an `AllReduce` after
    each layer's gradients, 4 ranks): AllReduce kernels are `all_reduce` numbered in execution order;
    NaN born independently on several ranks of a step is one origin (the lowest rank) and second
    origins, none received."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_scale

    summary = bench_scale.generate(
        tmp_path / "cat", 4 * 3 * 500, step_rows=500, iterations=3, collectives=True, anomaly_share=0.5
    )
    tpl = bench_scale.Plan(4 * 3 * 500, step_rows=500, iterations=3, collectives=True).template
    kernels = sorted({int(k) for k in tpl.t_op if tpl.op_types[k] == "AllReduce"})
    assert kernels  # the template's cut keeps some of them
    cat = Catalog.open(tmp_path / "cat")
    try:
        comm = cat.sql(
            "SELECT rank, iteration, instance, collective, kind, op_type, op_name, exec_index "
            "FROM communication_ops ORDER BY rank, iteration, instance"
        ).to_pylist()
        assert len(comm) == 4 * 3 * len(kernels)
        assert {(r["collective"], r["kind"], r["op_type"]) for r in comm} == {
            ("all_reduce", "undirected", "AllReduce")
        }
        for r in comm:
            assert r["exec_index"] == kernels[r["instance"]]
            assert r["op_name"] == tpl.full_names[kernels[r["instance"]]]
        origins = {r["iteration"]: r for r in cat.sql("SELECT * FROM nan_origin").to_pylist()}
    finally:
        cat.close()
    bad: dict[int, dict[int, int]] = {}
    for (rank, iteration), (kernel, _) in summary.first_anomaly.items():  # the bad kernel of the step
        bad.setdefault(iteration, {})[rank] = kernel
    assert sorted(origins) == sorted(bad) and any(len(by_rank) > 1 for by_rank in bad.values())
    for iteration, by_rank in bad.items():
        row, first = origins[iteration], min(by_rank)
        assert (row["origin_rank"], row["new_origin"], row["reached"]) == (first, True, None)
        assert row["op_name"] == tpl.full_names[by_rank[first]]
        assert row["source_line"] == tpl.code_lines[by_rank[first]][0]
        seconds = [(s["rank"], s["op_name"]) for s in row["second_origins"] or []]
        assert seconds == [(r, tpl.full_names[k]) for r, k in sorted(by_rank.items()) if r != first]


def test_collective_spellings_of_every_producer(cat):
    """msprobe's API names, MindSpore's kernels and HCCL's (GE/raw dumps) map to one name.
    (communication_ops then keeps `gather`/`scatter`/`reduce` only under msprobe's Distributed
    prefix or as Hcom kernels: MindSpore's Gather is a compute operator.)"""
    spellings = {
        "all_reduce": "all_reduce", "AllReduce": "all_reduce", "HcomAllReduce": "all_reduce",
        "all_gather": "all_gather", "AllGather": "all_gather", "HcomAllGather": "all_gather",
        "all_gather_into_tensor": "all_gather_into_tensor", "_all_gather_base": "all_gather_into_tensor",
        "reduce_scatter": "reduce_scatter", "ReduceScatter": "reduce_scatter",
        "HcomReduceScatter": "reduce_scatter",
        "AlltoAll": "all_to_all", "AllToAllV": "all_to_all", "HcomAllToAllV": "all_to_all",
        "all_to_all_single": "all_to_all", "Broadcast": "broadcast", "HcomBroadcast": "broadcast",
        "Send": "send", "HcomSend": "send", "Receive": "recv", "HcomReceive": "recv", "irecv": "irecv",
        "CollectiveGather": "gather", "HcomReduce": "reduce", "Gather": "gather",
    }  # fmt: skip
    rows = cat.sql(
        "SELECT s.spelling AS op_type, n.collective FROM (SELECT unnest($names) AS spelling) s "
        "LEFT JOIN collective_names n ON n.spelling = collective_spelling(s.spelling)",
        {"names": list(spellings)},
    ).to_pylist()
    assert {r["op_type"]: r["collective"] for r in rows} == spellings
    assert cat.sql(
        "SELECT collective_spelling('MatMul') IN (SELECT spelling FROM collective_names) AS c"
    ).to_pylist() == [{"c": False}]


def test_garbled_collective_arguments_and_a_truncated_rank(tmp_path):
    """Bad input: a recv whose `src` is not a rank, a group that is no list of ranks and positional
    arguments that are no list lose only their peers (src NULL: the sender is then the rank whose
    send had non-finite inputs); a truncated dump.json of another rank is one ingest_errors row,
    and every other rank's collectives and the origin are still there."""
    tree = Path(shutil.copytree(MSPROBE / "pt_4ranks_recv_l1_statistics", tmp_path / "dump"))
    path = tree / "step1/rank1/dump.json"
    data = json.loads(path.read_text())
    recv = data["data"]["Distributed.recv.0.forward"]
    recv["input_kwargs"] = {"src": {"type": "int", "value": "three"}, "group": {"group_ranks": ["a", 1]}}
    recv["input_args"] = "not a list"
    path.write_text(json.dumps(data))
    truncated = tree / "step1/rank0/dump.json"
    truncated.write_bytes(truncated.read_bytes()[:5000])
    cat = Catalog.open(tmp_path / "cat", create=True)
    summary = cat.ingest(tree, run="bad")
    errors = cat.sql("SELECT path, reason FROM ingest_errors").to_pylist()
    assert summary.errors == len(errors) == 1 and errors[0]["path"].endswith("step1/rank0/dump.json")
    got, rows = _collectives(cat, "bad")
    assert got == [c for c in _scan_collectives("pt_4ranks_recv_l1_statistics") if c[:2] != (0, 1)]
    recv_row = next(r for r in rows if r["rank"] == 1 and r["iteration"] == 1 and r["collective"] == "recv")
    assert (recv_row["src"], recv_row["group_name"]) == (None, None)
    step = cat.sql("SELECT * FROM nan_origin WHERE iteration = 1").to_pylist()[0]
    assert (step["origin_rank"], step["op_name"]) == (3, "Torch.sqrt.0.forward")
    assert {r["rank"]: (r["collective"], r["from_ranks"]) for r in step["reached"]}[1] == ("recv", [3])
    cat.close()
