"""Real 4-rank MindSpore 2.10 CPU dumps with communication kernels (tests/data/ms210/dist_allreduce
and dist_broadcast, written by MindSpore itself through tests/writers/ms210_dist_dumps.py; their
READMEs say what was planted where).

Each tree is cataloged by the real `dumpcat ingest` process; every answer is checked against the
files read here with `np.load`, a regular expression over the file names and `csv`, never with
dumpcat's own parsers."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from tests.conftest import MS210, REPO

WRITER = REPO / "tests" / "writers" / "ms210_dist_dumps.py"
SCENARIOS = ("dist_allreduce", "dist_broadcast")
RANKS = (0, 1, 2, 3)
NAME = re.compile(
    r"^(?P<type>[^.]+)\.(?P<op>.+)\.0\.0\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)"
    r"\.DefaultFormat\.(?P<dt>\w+)\.npy$"
)
BACKBONE = {
    "dist_allreduce": "Default/network-WithLoss/_backbone-LogNet",
    "dist_broadcast": "Default/network-WithLoss/_backbone-ScaleNet",
}
COLLECTIVES = "op_type IN ('AllReduce', 'AllGather', 'Broadcast')"

# What was planted (the writer's docstring and the READMEs): the origin rank, its kernel and line,
# and the kernel through which every other rank first sees the NaN at iteration 1.
PLANTED = {
    "dist_allreduce": {
        "rank": 2, "op": "Log-op0", "line": 95, "marker": "# PLANTED allreduce",
        "received": ("AllReduce", "Default/AllReduce-op2", "exact", 138),
    },
    "dist_broadcast": {
        "rank": 1, "op": "Sqrt-op0", "line": 108, "marker": "# PLANTED broadcast",
        "received": ("Broadcast", BACKBONE["dist_broadcast"] + "/Broadcast-op1", "op_index", 109),
    },
}  # fmt: skip


def _files(iter_dir: Path) -> list[tuple[re.Match, Path]]:
    found = [(NAME.match(p.name), p) for p in iter_dir.glob("*.npy")]
    assert all(m for m, _ in found), [p.name for m, p in found if not m]
    return found


def _nonfinite(path: Path) -> int:
    a = np.load(path)
    return int((~np.isfinite(a)).sum()) if a.dtype.kind == "f" else 0


def _scan_first(iter_dir: Path) -> tuple[str, str, int, int] | None:
    """(file name, io, slot, NaN+Inf count) of the step's first non-finite tensor: outputs before
    inputs, then in the order the kernels finished (the file timestamp)."""
    files = _files(iter_dir)
    outputs = [int(m["ts"]) for m, _ in files if m["io"] == "output"]
    assert len(set(outputs)) == len(outputs)  # the timestamp alone orders the outputs
    for m, p in sorted(files, key=lambda f: (f[0]["io"] != "output", int(f[0]["ts"]), int(f[0]["slot"]))):
        bad = _nonfinite(p)
        if bad:
            return p.name, m["io"], int(m["slot"]), bad
    return None


def _tensor(iter_dir: Path, op_type: str, op_suffix: str, io: str, slot: int = 0) -> np.ndarray:
    (hit,) = [
        p
        for m, p in _files(iter_dir)
        if m["type"] == op_type and m["op"].endswith(op_suffix) and m["io"] == io and int(m["slot"]) == slot
    ]
    return np.load(hit)


def _step(scenario: str, rank: int, iteration: int) -> Path:
    return MS210 / scenario / "dump" / f"rank_{rank}" / "Net" / "0" / str(iteration)


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory) -> dict[str, tuple[Catalog, str]]:
    """Each scenario ingested by a real `dumpcat ingest` process: {scenario: (catalog, its output)}."""
    out = {}
    for scenario in SCENARIOS:
        path = tmp_path_factory.mktemp(scenario) / "cat"
        proc = subprocess.run(
            [sys.executable, "-m", "catalog.cli", "ingest", str(MS210 / scenario / "dump"), "-c", str(path)],
            capture_output=True, text=True, cwd=REPO, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        out[scenario] = (Catalog.open(path), proc.stdout)
    yield out
    for cat, _ in out.values():
        cat.close()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_file_of_every_rank_is_cataloged_without_error(catalogs, scenario):
    cat, printed = catalogs[scenario]
    on_disk = sorted((MS210 / scenario / "dump").glob("rank_*/Net/0/*/*.npy"))
    assert f"{len(on_disk)} new tensors" in printed and ", 0 errors" in printed
    assert cat.sql("SELECT count(*) FROM ingest_errors").column(0)[0].as_py() == 0
    rows = cat.sql("SELECT rank, iteration, count(*) AS n FROM tensors GROUP BY ALL ORDER BY ALL").to_pylist()
    per = {(r, i): len(list(_step(scenario, r, i).glob("*.npy"))) for r in RANKS for i in (0, 1, 2)}
    assert {(r["rank"], r["iteration"]): r["n"] for r in rows} == per
    assert sum(per.values()) == len(on_disk)
    # every rank's own execution order became its ops rows, in file order
    for rank in RANKS:
        with open(
            MS210 / scenario / "dump" / f"rank_{rank}" / "execution_order" / "ms_execution_order_graph_0.csv"
        ) as f:
            names = [row[0] for row in csv.reader(f)][1:]
        got = (
            cat.sql(f"SELECT op_name FROM ops WHERE rank = {rank} ORDER BY exec_index").column(0).to_pylist()
        )
        assert got == names


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_first_anomaly_per_rank_is_the_first_nonfinite_file(catalogs, scenario):
    """first_anomaly, rank by rank and step by step, names the file an independent scan finds."""
    cat, _ = catalogs[scenario]
    got = {
        (r["rank"], r["iteration"]): (r["rel_path"].rsplit("/", 1)[-1], r["io"], r["slot"], r["bad"])
        for r in cat.sql(
            "SELECT f.rank, f.iteration, t.rel_path, f.io, f.slot, "
            "f.nan_count + f.neg_inf_count + f.pos_inf_count AS bad "
            "FROM first_anomaly f JOIN tensors t USING (row_id)"
        ).to_pylist()
    }
    want = {}
    for rank in RANKS:
        for iteration in (0, 1, 2):
            first = _scan_first(_step(scenario, rank, iteration))
            if first is not None:
                want[(rank, iteration)] = first
    assert got == want
    assert set(want) == {(r, i) for r in RANKS for i in (1, 2)}  # step 0 is clean on every rank


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_planted_origin_and_the_collective_that_brought_it_to_the_other_ranks(catalogs, scenario):
    cat, _ = catalogs[scenario]
    plant = PLANTED[scenario]
    assert plant["marker"] in WRITER.read_text().split("\n")[plant["line"] - 1]  # the README's line
    rows = {
        (r["rank"], r["iteration"]): r
        for r in cat.sql(
            "SELECT rank, iteration, op_type, op_name, name_match, source_line, source_code, nan_count "
            "FROM first_anomaly"
        ).to_pylist()
    }
    origin = rows[(plant["rank"], 1)]
    assert origin["op_name"] == f"{BACKBONE[scenario]}/{plant['op']}"
    assert (origin["source_line"], origin["nan_count"]) == (plant["line"], 1)
    assert origin["source_code"].endswith(plant["marker"])
    # the origin's input is finite, its output is not (read from the files)
    step = _step(scenario, plant["rank"], 1)
    op_type = plant["op"].split("-")[0]
    assert np.isfinite(_tensor(step, op_type, plant["op"], "input")).all()
    assert int(np.isnan(_tensor(step, op_type, plant["op"], "output")).sum()) == 1
    op_type, op_name, match, line = plant["received"]
    for rank in set(RANKS) - {plant["rank"]}:
        row = rows[(rank, 1)]
        assert (row["op_type"], row["op_name"], row["name_match"], row["source_line"]) == (
            op_type,
            op_name,
            match,
            line,
        )
        suffix = op_name.rsplit("/", 1)[-1].replace("op1", "op0")  # the Broadcast's file says op0
        received = _step(scenario, rank, 1)
        assert np.isfinite(_tensor(received, op_type, suffix, "input")).all()
        assert not np.isfinite(_tensor(received, op_type, suffix, "output")).all()
    # step 2 starts from NaN weights on every rank: the first layer, no new origin
    assert {(rows[(r, 2)]["op_name"], rows[(r, 2)]["source_code"]) for r in RANKS} == {
        (
            f"{BACKBONE[scenario]}/fc1-Dense/MatMul-op0",
            "x = self.fc1(x)" + (" * s" if scenario == "dist_broadcast" else ""),
        )
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_dumped_collectives_combine_the_ranks_tensors(scenario):
    """At the clean step 0, read with np.load only: each AllReduce's output is the sum of its input
    on the 4 ranks, the AllGather's is their concatenation in rank order, and the Broadcast's is
    the root's input: the dumps hold what the collectives exchanged."""
    steps = [_step(scenario, r, 0) for r in RANKS]
    for k in range(4):
        inputs = [_tensor(s, "AllReduce", f"AllReduce-op{k}", "input") for s in steps]
        for s in steps:
            np.testing.assert_allclose(
                _tensor(s, "AllReduce", f"AllReduce-op{k}", "output"), sum(inputs), rtol=1e-6
            )
    # the AllGather's input is the loss reshaped to (1,), but the file holds shape () (as does the
    # Reshape's output: on CPU a Reshape shares its input's buffer, and the dump keeps that shape)
    gathered = np.stack([_tensor(s, "AllGather", "AllGather-op0", "input") for s in steps])
    assert gathered.shape == (4,)
    for s in steps:
        np.testing.assert_array_equal(_tensor(s, "AllGather", "AllGather-op0", "output"), gathered)
    if scenario == "dist_broadcast":
        root = _tensor(steps[1], "Broadcast", "Broadcast-op0", "input")
        assert not all(np.array_equal(root, _tensor(s, "Broadcast", "Broadcast-op0", "input")) for s in steps)
        for s in steps:
            np.testing.assert_array_equal(_tensor(s, "Broadcast", "Broadcast-op0", "output"), root)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_communication_kernels_and_their_group_in_the_catalog(catalogs, scenario):
    cat, _ = catalogs[scenario]
    kinds = {"AllReduce": 4, "AllGather": 1} | ({"Broadcast": 1} if scenario == "dist_broadcast" else {})
    rows = cat.sql(
        f"SELECT rank, op_type, count(*) AS n FROM ops WHERE {COLLECTIVES} GROUP BY ALL"
    ).to_pylist()
    assert {(r["rank"], r["op_type"]): r["n"] for r in rows} == {
        (r, k): n for r in RANKS for k, n in kinds.items()
    }
    attrs = cat.sql(f"SELECT DISTINCT op_type, attributes FROM ir_nodes WHERE {COLLECTIVES}").to_pylist()
    assert all('"group": "\\"mccl_world_group\\""' in r["attributes"] for r in attrs)
    if scenario == "dist_broadcast":
        assert any('"root_rank": "I64(1)"' in r["attributes"] for r in attrs if r["op_type"] == "Broadcast")


def test_only_rank_0_has_the_global_execution_order_and_it_repeats_each_step():
    """What MindSpore 2.10 wrote (the READMEs say so): ranks 1-3 get no global execution order
    and no .dump_metadata; rank 0's global order lists each iteration once per rank."""
    for scenario in SCENARIOS:
        dump = MS210 / scenario / "dump"
        for rank in (1, 2, 3):
            assert not (dump / f"rank_{rank}" / ".dump_metadata").exists()
            assert not list((dump / f"rank_{rank}" / "execution_order").glob("ms_global_*"))
        lines = (
            (dump / "rank_0" / "execution_order" / "ms_global_execution_order_graph_0.csv")
            .read_text()
            .split()
        )
        assert lines == [str(i) for i in (0, 1, 2) for _ in RANKS]
