"""The committed GE / TorchAir / om trees of tests/data/ge: every raw dump file decodes with the
protobuf package's own parser (dump_data_pb2) and with ingest.formats.ascend.raw_dump, and its tensors are
the real tensors it was made from (MindSpore 2.10 npy files, or the FX npy files torch 2.13 wrote);
the trees are what tests/writers/ge_tree.py writes, byte for byte (the FX side of torchair/ needs
torch, so only its agreement with the GE side is checked)."""

from __future__ import annotations

import filecmp
import struct
from pathlib import Path

import numpy as np
import pytest

from ingest.formats.ascend import dump_data_pb2
from ingest.formats.ascend.ge_graph import read_ge_graph
from ingest.formats.ascend.raw_dump import parse_raw_name, read_raw_dump
from ingest.formats.mindspore.npy_name import parse_tensor_name, sanitize_v23
from tests.conftest import DATA
from tests.writers import ge_tree
from tests.writers import torchair_fx as fx

GE = DATA / "ge"
SOURCE = DATA / "ms210" / "nan_log" / "dump" / "rank_0" / "Net" / "0"
NUMPY = {"DT_FLOAT": "<f4", "DT_INT32": "<i4", "DT_INT64": "<i8", "DT_BOOL": "?"}


def _nz_to_nd(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """FRACTAL_NZ -> ND, the reference's formula (§3.3), for 2-D targets."""
    c1, no, ni, c0 = a.shape[-4:]
    n, c = shape
    return a.reshape(1, c1, no, ni, c0).transpose(0, 2, 3, 1, 4).reshape(1, no * ni, c1 * c0)[0, :n, :c]


def _decode(path: Path) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """(op_name, inputs, outputs) of a big-dump raw file, by the standard protobuf parser; the
    slots ingest.formats.ascend.raw_dump reads must agree."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    msg = dump_data_pb2.DumpData.FromString(data[8 : 8 + n])
    ours = read_raw_dump(path)
    assert ours.layout == "big_dump" and ours.op_name == msg.op_name and ours.file_size == len(data)
    pos, out = 8 + n, {"input": [], "output": []}
    for io, slots in (("input", msg.input), ("output", msg.output)):
        for s in slots:
            name = dump_data_pb2.OutputDataType.Name(s.data_type)
            fmt = dump_data_pb2.OutputFormat.Name(s.format).removeprefix("FORMAT_")
            arr = np.frombuffer(data[pos : pos + s.size], dtype=NUMPY[name]).reshape(tuple(s.shape.dim))
            if fmt == "FRACTAL_NZ":
                arr = _nz_to_nd(arr, tuple(s.original_shape.dim))
            else:
                assert fmt == "ND"
            out[io].append(arr)
            pos += s.size
    assert pos == len(data)
    got = [(s.io, s.offset, s.size, s.shape) for s in ours.slots]
    offsets, at = [], 8 + n
    for io, slots in (("input", msg.input), ("output", msg.output)):
        for s in slots:
            offsets.append((io, at, s.size, tuple(s.shape.dim)))
            at += s.size
    assert got == offsets
    return msg.op_name, out["input"], out["output"]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def _source(step: str, op_name: str) -> dict[str, list[np.ndarray]]:
    slots: dict[str, dict[int, np.ndarray]] = {"input": {}, "output": {}}
    for f in (SOURCE / step).glob("*.npy"):
        tn = parse_tensor_name(f.name)
        if tn.op_name == op_name:
            slots[tn.io][tn.slot] = np.load(f)
    return {io: [s[k] for k in sorted(s)] for io, s in slots.items()}


def test_ge_tensor_files_decode_to_the_mindspore_tensors():
    files = sorted(p for p in (GE / "ge_tensor").rglob("*") if p.is_file())
    assert len(files) == 72 and sum(f.suffix == ".bin" for f in files) == 24
    formats = set()
    for f in files:
        rel = f.relative_to(GE / "ge_tensor").parts  # worldsize2_global_rankR/time/device/model/id/step/file
        assert rel[0] in ("worldsize2_global_rank0", "worldsize2_global_rank1") and len(rel[1]) == 14
        assert rel[2] == rel[0][-1] and rel[3:5] == (ge_tree.GE_MODEL_NAME, "1")
        name = parse_raw_name(f.name)
        op_name, ins, outs = _decode(f)
        assert name.op_name == sanitize_v23(op_name) and len(str(name.timestamp_us)) == 16
        want = _source(rel[5], name.op_name)
        assert len(ins) == len(want["input"]) and len(outs) == len(want["output"])
        assert all(map(_same, ins + outs, want["input"] + want["output"])), f
        formats |= {s.format for s in read_raw_dump(f).slots}
    assert formats == {"ND", "FRACTAL_NZ"}


def test_ranks_are_copies_with_their_own_clock():
    r0, r1 = (sorted((GE / "ge_tensor" / f"worldsize2_global_rank{r}").rglob("*.*.*.*.*")) for r in (0, 1))
    assert len(r0) == len(r1) == 36
    for a, b in zip(r0, r1, strict=True):
        na, nb = parse_raw_name(a.name), parse_raw_name(b.name)
        assert (na.op_name, na.task_id) == (nb.op_name, nb.task_id)
        assert nb.timestamp_us - na.timestamp_us == ge_tree.RANK_CLOCK_SHIFT_US
        assert all(map(_same, *(_decode(x)[1] + _decode(x)[2] for x in (a, b))))


def test_the_first_nan_of_step_0_is_at_log():
    steps = list((GE / "ge_tensor").glob("*/*/*/*/1/0"))
    assert len(steps) == 2
    for step0 in steps:
        by_task = sorted(step0.iterdir(), key=lambda p: parse_raw_name(p.name).task_id)
        first = next(
            f for f in by_task if any(np.isnan(o).any() for o in _decode(f)[2] if o.dtype.kind == "f")
        )
        assert _decode(first)[0] == "Default/network-WithLossCell/_backbone-Net/Log-op0"


def test_om_files_use_the_four_field_names_and_hold_the_backbone_tensors():
    files = sorted(p for p in (GE / "om").rglob("*") if p.is_file())
    assert len(files) == 10
    for f in files:
        rel = f.relative_to(GE / "om").parts  # timestamp/device/om_model/model_id/data_index/file
        assert len(rel) == 6 and rel[1:4] == ("0", ge_tree.OM_MODEL_NAME, "1")
        name = parse_raw_name(f.name)
        assert name.stream_id is None and len(f.name.split(".")) == 4
        op_name, ins, outs = _decode(f)
        assert sanitize_v23(op_name) == name.op_name
        want = _source(rel[4], sanitize_v23(ge_tree.OM_SCOPE + op_name))
        assert all(map(_same, ins + outs, want["input"] + want["output"])), f


def _fx_tensors(token: int) -> dict[tuple[str, str, int], np.ndarray]:
    return ge_tree.load_fx_token(
        GE / "torchair" / "msprobe_fx_dump" / fx.RANK_DIR / fx.MODEL_NAME / str(token)
    )


def test_the_fx_dump_is_consistent_with_its_graph():
    """What flows along each FX edge is the same tensor on both ends (torch wrote both)."""
    for token in fx.TOKENS:
        t = _fx_tensors(token)
        assert len(t) == 16
        for node, _target, args in fx.FX_GRAPH:
            for i, arg in enumerate(args):
                if arg in fx.PLACEHOLDERS:
                    continue
                assert _same(t[(node, "INPUT", i)], t[(arg, "OUTPUT", 0)])
        assert np.isnan(t[("log", "OUTPUT", 0)]).any()


def test_ge_raw_dumps_agree_with_the_fx_dump_through_fx_tensor_name():
    graph = read_ge_graph(next((GE / "torchair").glob("dynamo_original_*.txt")))
    link = {op.name: name for op in graph.ops for _, name in op.fx_tensor_names}
    ge_root = GE / "torchair" / "msprobe_ge_dump" / fx.RANK_DIR
    for token in fx.TOKENS:
        t = _fx_tensors(token)
        leaf = next(ge_root.glob(f"*/0/{fx.MODEL_NAME}/1/{token}"))
        decoded = {}
        for f in leaf.iterdir():
            name = parse_raw_name(f.name)
            op_name, ins, outs = _decode(f)
            assert op_name == name.op_name  # msprobe: op_name = ".".join(name.split(".")[1:-3])
            decoded[op_name] = (ins, outs)
        assert set(decoded) == {name for name, *_ in ge_tree.GE_OPS}
        for op in graph.ops:
            if op.name not in decoded:
                continue
            ins, outs = decoded[op.name]
            if op.name in link:  # the linked FX output is the GE output
                node = link[op.name].split("-", 1)[0]
                assert _same(outs[0], t[(node, "OUTPUT", 0)])
            for i, edge in enumerate(op.inputs):  # an edge from a dumped op carries its output
                src = edge.split(":")[0]
                if src in decoded:
                    assert _same(ins[i], decoded[src][1][0])


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ge")
    ge_tree.write_all(DATA, out)
    return out


@pytest.mark.parametrize("tree", ["ge_tensor", "ge_stats", "om", "torchair"])
def test_committed_trees_are_what_the_writer_writes(regenerated, tree):
    committed = sorted(
        p.relative_to(GE / tree) for p in (GE / tree).rglob("*")
        if p.is_file() and "msprobe_fx_dump" not in p.parts
    )  # fmt: skip
    written = sorted(
        p.relative_to(regenerated / tree) for p in (regenerated / tree).rglob("*") if p.is_file()
    )
    assert committed == written
    for rel in committed:
        assert filecmp.cmp(GE / tree / rel, regenerated / tree / rel, shallow=False), rel


def test_the_trees_stay_small():
    assert sum(p.stat().st_size for p in GE.rglob("*") if p.is_file()) < 2_000_000
