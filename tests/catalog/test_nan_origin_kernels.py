"""`nan_origin` on dumps whose collectives are graph kernels (issue 37): the real 4-rank MindSpore
2.10 CPU runs (AllReduce, Broadcast), their statistics-only form, and the GE trees with HCCL kernels
(`HcomAllReduce`, `HcomBroadcast`, `HcomSend`/`HcomReceive`; per-rank clocks that disagree). What
each tree plants is in its README (tests/data/ms210/dist_*/, tests/data/ge_dist/); the origin and
the collectives that carried it are also checked against the npy files read with numpy.

MindSpore writes each input and output file of a kernel with a timestamp of its own: whether the
first anomalous kernel's inputs were already non-finite (step 2: weights the step-1 AllReduce
filled with NaN) is decided per call by its place in the execution order, not by timestamp."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from tests.conftest import DATA, MS210

LOG = "Default/network-WithLoss/_backbone-LogNet/Log-op0"
SQRT = "Default/network-WithLoss/_backbone-ScaleNet/Sqrt-op0"
BROADCAST = "Default/network-WithLoss/_backbone-ScaleNet/Broadcast-op1"

# tree -> (step-1 origin rank, its operator, its source line or None, {rank: (collective, op_name)})
PLANTED = {
    "ms_allreduce": (MS210 / "dist_allreduce" / "dump", 2, LOG, 95,
                     {r: ("all_reduce", "Default/AllReduce-op2") for r in (0, 1, 3)}),
    "ms_broadcast": (MS210 / "dist_broadcast" / "dump", 1, SQRT, 108,
                     {r: ("broadcast", BROADCAST) for r in (0, 2, 3)}),
    "ms_statistic": (DATA / "ms_dist_statistic" / "dist_allreduce", 2, LOG, 95,
                     {r: ("all_reduce", "Default/AllReduce-op2") for r in (0, 1, 3)}),
    "ge_allreduce": (DATA / "ge_dist" / "allreduce", 2, LOG, None,
                     {r: ("all_reduce", "Default/AllReduce-op2") for r in (0, 1, 3)}),
    "ge_broadcast": (DATA / "ge_dist" / "broadcast", 1, SQRT, None,
                     {r: ("broadcast", BROADCAST) for r in (0, 2, 3)}),
    "ge_p2p": (DATA / "ge_dist" / "p2p", 0, "stage0/Log", None, {1: ("recv", "stage1/HcomReceive")}),
}  # fmt: skip


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("kernels") / "cat", create=True)
    for run, (tree, *_) in PLANTED.items():
        assert c.ingest(tree, run=run).errors == 0
    yield c
    c.close()


def _origins(cat: Catalog, run: str) -> dict[int, dict]:
    rows = cat.sql("SELECT * FROM nan_origin WHERE run = ? ORDER BY iteration", [run]).to_pylist()
    return {r["iteration"]: r for r in rows}


@pytest.mark.parametrize("run", sorted(PLANTED))
def test_step_1_names_the_planted_rank_operator_and_line(cat, run):
    _, rank, op_name, line, reached = PLANTED[run]
    step = _origins(cat, run)[1]
    assert (step["origin_rank"], step["op_name"], step["source_line"]) == (rank, op_name, line)
    assert step["new_origin"] and step["origin_iteration"] == 1
    assert step["reason"] == "inputs finite, output non-finite"
    got = {r["rank"]: (r["collective"], r["op_name"], r["from_ranks"]) for r in step["reached"]}
    assert got == {r: (coll, name, [rank]) for r, (coll, name) in reached.items()}
    assert step["second_origins"] is None


@pytest.mark.parametrize(
    "run", ["ms_allreduce", "ms_broadcast", "ms_statistic", "ge_allreduce", "ge_broadcast"]
)
def test_step_2_starts_from_nan_weights_and_points_back(cat, run):
    _, rank, op_name, line, _ = PLANTED[run]
    step = _origins(cat, run)[2]
    assert not step["new_origin"] and step["origin_iteration"] == 1
    assert (step["origin_rank"], step["op_name"], step["source_line"]) == (rank, op_name, line)
    assert step["inherited_ranks"] == [0, 1, 2, 3]
    assert step["reason"].startswith("state already non-finite at the step's start")


def test_p2p_step_2_has_a_second_origin_born_locally(cat):
    step = _origins(cat, "ge_p2p")[2]
    assert step["new_origin"] and (step["origin_rank"], step["op_name"]) == (0, "stage0/Log")
    assert [(s["rank"], s["op_name"]) for s in step["second_origins"]] == [(1, "stage1/Mul")]


# MindSpore 2.10 named the Broadcast's files `Broadcast-op0` while its execution order and IR say
# `Broadcast-op1` (tests/data/ms210/dist_broadcast/README.md; the catalog matches it by op index)
FILE_NAME = {BROADCAST: BROADCAST.replace("-op1", "-op0")}


def _step_files(tree: Path, rank: int, step: int, op_name: str) -> dict[str, np.ndarray]:
    """{'input.N' / 'output.N': array} of one kernel's npy files in a MindSpore E2E dump."""
    folder = next((tree / f"rank_{rank}").glob(f"*/0/{step}"))
    stem = FILE_NAME.get(op_name, op_name).replace("/", "_")
    out = {}
    for f in folder.glob(f"*.{stem}.*.npy"):
        parts = f.name.split(".")
        if parts[1] == stem:
            out[f"{parts[5]}.{parts[6]}"] = np.load(f)
    assert out, (folder, stem)
    return out


def _nonfinite(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" and not np.isfinite(a).all()


@pytest.mark.parametrize("run", ["ms_allreduce", "ms_broadcast"])
def test_the_files_agree(run):
    """An independent reading of the npy files: the origin's inputs are finite and its output is
    not; each reached rank's collective output is non-finite, its input finite; at step 2 the
    first layer's weight input is already NaN on every rank."""
    tree, rank, op_name, _, reached = PLANTED[run]
    files = _step_files(tree, rank, 1, op_name)
    assert not any(_nonfinite(a) for k, a in files.items() if k.startswith("input"))
    assert _nonfinite(files["output.0"])
    for r, (_, coll_name) in reached.items():
        coll = _step_files(tree, r, 1, coll_name)
        assert _nonfinite(coll["output.0"])
        assert not any(_nonfinite(a) for k, a in coll.items() if k.startswith("input"))
    fc1 = op_name.rsplit("/", 1)[0] + "/fc1-Dense/MatMul-op0"
    for r in range(4):
        assert _nonfinite(_step_files(tree, r, 2, fc1)["input.1"])
