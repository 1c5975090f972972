"""Multi-rank GE raw dumps with HCCL kernels (tests/data/ge_dist/, tests/writers/ge_dist_tree.py):
`allreduce/` and `broadcast/` carry the tensors of the real 4-rank MindSpore runs, `p2p/` a
2-rank HcomSend/HcomReceive pipeline.

Every file is decoded here with the generated protobuf class and `struct` (uint64 header length,
`DumpData`, then the slot bytes), never with dumpcat's raw-dump parser, and every answer dumpcat
gives is checked against that decoding."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.ascend import dump_data_pb2 as pb
from tests.conftest import DATA

GE_DIST = DATA / "ge_dist"
TREES = ("allreduce", "broadcast", "p2p")
RAW_NAME = re.compile(r"^(?P<type>[^.]+)\.(?P<op>[^.]+)\.(?P<task>\d+)\.(?P<stream>\d+)\.(?P<ts>\d+)$")
NUMPY = {pb.DT_FLOAT: "<f4", pb.DT_INT32: "<i4", pb.DT_INT64: "<i8", pb.DT_BOOL: "?"}
LOG = "Default/network-WithLoss/_backbone-LogNet/Log-op0"
SQRT = "Default/network-WithLoss/_backbone-ScaleNet/Sqrt-op0"
BROADCAST = "Default/network-WithLoss/_backbone-ScaleNet/Broadcast-op1"


def decode(path: Path) -> tuple[pb.DumpData, list[np.ndarray], list[np.ndarray]]:
    """(header, inputs, outputs) of one big-dump raw file."""
    blob = path.read_bytes()
    (length,) = struct.unpack_from("<Q", blob, 0)
    msg = pb.DumpData.FromString(blob[8 : 8 + length])
    offset, slots = 8 + length, {"input": [], "output": []}
    for io in ("input", "output"):
        for t in getattr(msg, io):
            assert t.format == pb.FORMAT_ND
            a = np.frombuffer(blob, NUMPY[t.data_type], count=int(np.prod(t.shape.dim)), offset=offset)
            slots[io].append(a.reshape(tuple(t.shape.dim)))
            offset += t.size
    assert offset == len(blob)
    return msg, slots["input"], slots["output"]


def steps(tree: str) -> dict[tuple[int, int], Path]:
    """(rank, step) -> step folder."""
    out = {}
    for p in (GE_DIST / tree).glob("worldsize*_global_rank*/*/*/*/*/*"):
        rank = int(p.parts[-6].rsplit("rank", 1)[1])
        out[(rank, int(p.name))] = p
    return out


def scan_first(step_dir: Path) -> tuple[str, str, int] | None:
    """(file name, io, slot) of the step's first non-finite tensor: outputs before inputs, then
    by the file's timestamp (one per launch)."""
    found = []
    for f in step_dir.iterdir():
        m = RAW_NAME.match(f.name)
        _, inputs, outputs = decode(f)
        for io, arrays in (("output", outputs), ("input", inputs)):
            for slot, a in enumerate(arrays):
                if a.dtype.kind == "f" and not np.isfinite(a).all():
                    found.append((io != "output", int(m["ts"]), slot, f.name, io))
    if not found:
        return None
    _, _, slot, name, io = min(found)
    return name, io, slot


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("ge_dist") / "cat", create=True)
    for tree in TREES:
        summary = c.ingest(GE_DIST / tree, run=tree)
        assert summary.errors == 0, (tree, summary)
    yield c
    c.close()


@pytest.mark.parametrize("tree", TREES)
def test_every_slot_is_cataloged_with_the_decoded_values(cat, tree):
    assert cat.sql("SELECT count(*) FROM ingest_errors").column(0)[0].as_py() == 0
    rows = cat.sql(
        "SELECT row_id, rank, iteration, op_type, op_name, io, slot, file_name FROM tensors WHERE run = $r",
        {"r": tree},
    ).to_pylist()
    by_key = {(r["rank"], r["iteration"], r["file_name"], r["io"], r["slot"]): r for r in rows}
    want = 0
    for (rank, step), folder in steps(tree).items():
        for f in folder.iterdir():
            msg, inputs, outputs = decode(f)
            m = RAW_NAME.match(f.name)
            for io, arrays in (("input", inputs), ("output", outputs)):
                for slot, a in enumerate(arrays):
                    row = by_key[(rank, step, f.name, io, slot)]
                    assert (row["op_type"], row["op_name"]) == (m["type"], msg.op_name)
                    got = cat.tensor(row["row_id"])
                    assert got.shape == a.shape and got.tobytes() == a.tobytes()
                    want += 1
    assert len(rows) == want


def test_allreduce_and_broadcast_trees_hold_the_real_mindspore_tensors():
    """Each HCCL raw file of the GE trees holds the bytes MindSpore dumped for that kernel."""
    for tree, ms in (("allreduce", "dist_allreduce"), ("broadcast", "dist_broadcast")):
        checked = 0
        for (rank, step), folder in steps(tree).items():
            src = DATA / "ms210" / ms / "dump" / f"rank_{rank}" / "Net" / "0" / str(step)
            for f in folder.glob("Hcom*"):
                msg, inputs, outputs = decode(f)
                kind = f.name.split(".")[0].removeprefix("Hcom")
                index = msg.op_name.rsplit("-op", 1)[1]
                if kind == "Broadcast":
                    index = "0"  # MindSpore's Broadcast files say op0 (its kernel is op1)
                for io, arrays in (("input", inputs), ("output", outputs)):
                    (npy,) = src.glob(f"{kind}.*-op{index}.0.0.*.{io}.0.*.npy")
                    np.testing.assert_array_equal(arrays[0], np.load(npy))
                    checked += 1
        assert checked == {"allreduce": 4 * 3 * 5 * 2, "broadcast": 4 * 3 * 6 * 2}[tree]


@pytest.mark.parametrize("tree", TREES)
def test_first_anomaly_per_rank_is_the_first_nonfinite_slot(cat, tree):
    got = {
        (r["rank"], r["iteration"]): (r["file_name"], r["io"], r["slot"])
        for r in cat.sql(
            "SELECT f.rank, f.iteration, t.file_name, f.io, f.slot FROM first_anomaly f "
            "JOIN tensors t USING (row_id) WHERE f.run = $r",
            {"r": tree},
        ).to_pylist()
    }
    want = {key: first for key, folder in steps(tree).items() if (first := scan_first(folder))}
    assert got == want and want


def test_planted_origins_and_the_hccl_kernel_that_carried_them(cat):
    rows = {
        (r["run"], r["rank"], r["iteration"]): (
            r["op_type"],
            r["op_name"],
            r["nan_count"],
            r["pos_inf_count"],
        )
        for r in cat.sql("SELECT * FROM first_anomaly").to_pylist()
    }
    assert rows[("allreduce", 2, 1)] == ("Log", LOG, 1, 0)
    assert rows[("broadcast", 1, 1)] == ("Sqrt", SQRT, 1, 0)
    for rank in (0, 1, 3):
        assert rows[("allreduce", rank, 1)] == ("HcomAllReduce", "Default/AllReduce-op2", 6, 0)
    for rank in (0, 2, 3):
        assert rows[("broadcast", rank, 1)] == ("HcomBroadcast", BROADCAST, 1, 0)
    assert rows[("p2p", 0, 1)] == rows[("p2p", 0, 2)] == ("Log", "stage0/Log", 3, 0)
    assert rows[("p2p", 1, 1)] == ("HcomReceive", "stage1/HcomReceive", 3, 0)
    assert rows[("p2p", 1, 2)] == ("Mul", "stage1/Mul", 0, 1)  # the second origin, born on rank 1
    assert ("p2p", 0, 0) not in rows and ("p2p", 1, 0) not in rows


def test_p2p_receive_holds_what_was_sent_and_wall_clocks_disagree():
    """Rank 1's HcomReceive output is rank 0's HcomSend input, step by step (a send has no output,
    a receive no input); and on the skewed clocks rank 1 stamps its Receive before rank 0 stamps
    the Log that made the NaN, so timestamps across ranks cannot order them."""
    folders = steps("p2p")
    for step in (0, 1, 2):
        ((send,),) = [list(folders[(0, step)].glob("HcomSend.*"))]
        ((recv,),) = [list(folders[(1, step)].glob("HcomReceive.*"))]
        _, send_in, send_out = decode(send)
        _, recv_in, recv_out = decode(recv)
        assert (len(send_in), len(send_out), len(recv_in), len(recv_out)) == (1, 0, 0, 1)
        np.testing.assert_array_equal(recv_out[0], send_in[0])
        assert np.isfinite(send_in[0]).all() == (step == 0)
        (log,) = folders[(0, step)].glob("Log.*")
        assert int(RAW_NAME.match(recv.name)["ts"]) < int(RAW_NAME.match(log.name)["ts"])
    allreduce = steps("allreduce")
    (born,) = allreduce[(2, 1)].glob("Log.*")
    for rank in (0, 1, 3):
        (received,) = allreduce[(rank, 1)].glob("HcomAllReduce.Default_AllReduce-op2.*")
        assert int(RAW_NAME.match(received.name)["ts"]) < int(RAW_NAME.match(born.name)["ts"])
