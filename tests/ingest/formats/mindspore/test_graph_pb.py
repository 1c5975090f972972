"""The `.pb` (debugger ModelProto) parser, and its agreement with the `.ir` parser on real dumps.

Every sample dump has both files for each graph; the catalog takes the `.pb` when it exists and
the `.ir` otherwise, so both must give the same operator-to-source-line mapping.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ingest.formats.graph_model import innermost_user_frame
from ingest.formats.mindspore import debug_graph_pb2 as pb
from ingest.formats.mindspore.graph_pb import (
    frames_from_source_address,
    parse_graph_pb,
    parse_graph_pb_file,
    value_text,
)
from ingest.formats.mindspore.ir_text import parse_ir_file
from tests.conftest import DATA, TESTS

REAL_PBS = sorted(DATA.glob("**/dump/rank_0/graphs/*.pb"))
# the training scripts of the committed real dumps: the samples' train.py, and the writers in
# tests/writers/ that ran as the training script (lowp, the 4-rank dist runs)
USER_SCRIPTS = ("train.py", "make_runs.py", "ms210_lowp_dumps.py", "ms210_dist_dumps.py")
NAN_LOG = DATA / "ms210/nan_log/dump/rank_0/graphs/ms_output_trace_code_graph_0.pb"
SCOPE = "Default/network-WithLossCell/_backbone-Net"


def _pair(pb_path: Path):
    return parse_graph_pb_file(pb_path), parse_ir_file(pb_path.with_suffix(".ir"))


def _ids(p: Path) -> str:
    return f"{p.parts[-5]}-{p.stem.rsplit('_', 1)[1]}"


# --- real files: the .pb and the .ir agree --------------------------------------------------------


# Where MindSpore itself wrote different traces into the two files: the scalar multiplications
# that the `Muls` expander made for the backward pass of control_flow have no trace of their own,
# only a "Corresponding forward node candidate", and the .pb and the .ir pick different
# candidates. Graphs 20, 26 and 27 differentiate `relu(h) * 2` (line 16) and
# `self.gate(x) * 0.5` (line 40): the .ir is right and the .pb says line 31. Graph 30 (run in
# iteration 0 only, with graph 29's `x * 0.5`) differentiates line 31: the .pb is right and the
# .ir says line 40. {(scenario, graph id): {full name: (.pb line, .ir line)}}
CANDIDATE_DISAGREEMENTS = {
    ("control_flow", 20): {"Expand/_Muls/Mul-op1": (31, 16)},
    ("control_flow", 26): {"Expand/_Muls/Mul-op4": (31, 40)},
    ("control_flow", 27): {"Expand/_Muls/Mul-op5": (31, 40)},
    ("control_flow", 30): {"Expand/_Muls/Mul-op7": (31, 40)},
}


def _disagreements(path: Path) -> dict[str, tuple[int, int]]:
    return CANDIDATE_DISAGREEMENTS.get((path.parts[-5], int(path.stem.rsplit("_", 1)[1])), {})


@pytest.mark.parametrize("path", REAL_PBS, ids=_ids)
def test_pb_and_ir_give_the_same_operator_to_line_mapping(path):
    g_pb, g_ir = _pair(path)
    assert g_pb.errors == [] and g_ir.errors == []
    assert g_pb.source == "pb" and g_pb.graph_id == g_ir.graph_id and g_pb.graph_name == g_ir.graph_name
    mapping = g_pb.user_line_map()
    ir_mapping = g_ir.user_line_map()
    known = _disagreements(path)
    assert {k: v[1] for k, v in mapping.items() if k in known} == {k: pb for k, (pb, _) in known.items()}
    assert {k: v[1] for k, v in ir_mapping.items() if k in known} == {k: ir for k, (_, ir) in known.items()}
    assert {k: v for k, v in mapping.items() if k not in known} == {
        k: v for k, v in ir_mapping.items() if k not in known
    }
    # a graph maps nothing only when no node has a frame in the user's script (kernel_graph6 of
    # the samples: two MakeTuples, no trace; loss or optimizer graphs of control_flow)
    assert mapping or not any(f.is_user_code for frames in g_ir.frames.values() for f in frames)
    for full_name, (file, line) in mapping.items():
        assert file.endswith(USER_SCRIPTS) and line > 0, full_name


@pytest.mark.parametrize("path", REAL_PBS, ids=_ids)
def test_pb_and_ir_give_the_same_nodes_and_edges(path):
    g_pb, g_ir = _pair(path)
    ir_nodes = {n.node_key: n for n in g_ir.nodes}
    pb_nodes = {n.node_key: n for n in g_pb.nodes}
    # the .pb has every node of the .ir except the Return node
    assert set(pb_nodes) == {k for k, n in ir_nodes.items() if n.op_type != "Return"}
    assert [n.node_key for n in g_pb.nodes] == [n.node_key for n in g_ir.nodes if n.op_type != "Return"]
    for key, a in pb_nodes.items():
        b = ir_nodes[key]
        assert (a.op_type, a.full_name, a.is_parameter, a.name) == (
            b.op_type,
            b.full_name,
            b.is_parameter,
            b.name,
        )
        assert a.output_dtypes == b.output_dtypes, key
        # the .pb drops the shapes of tuple elements: None there, never a different shape
        assert len(a.output_shapes) == len(b.output_shapes)
        for sa, sb in zip(a.output_shapes, b.output_shapes, strict=True):
            # (Broadcast returns a tuple of its one tensor: `Tuple[Tensor[Float32]]` in the .ir)
            tuple_output = len(a.output_shapes) > 1 or a.op_type in ("MakeTuple", "Broadcast")
            assert sa == sb or (sa is None and tuple_output), (key, sa, sb)
        # same edges; constants sit at the same operand positions (named differently)
        assert len(a.inputs) == len(b.inputs), key
        for (ta, ka), (tb, kb) in zip(a.inputs, b.inputs, strict=True):
            assert ka == kb
            if tb.startswith("const:"):
                assert ta.startswith("const:")
            else:
                assert ta == tb, key
        # the primitive attributes the .pb stores print the same, except type-valued ones
        for k, v in a.attributes.items():
            if k != "dst_type":
                assert b.attributes[k] == v, (key, k)


@pytest.mark.parametrize("path", REAL_PBS, ids=_ids)
def test_pb_frames_match_the_ir_frames(path):
    g_pb, g_ir = _pair(path)
    assert set(g_pb.frames) == set(g_ir.frames)
    names = {n.node_key: n.full_name for n in g_ir.nodes}
    known = _disagreements(path)
    for key, frames in g_pb.frames.items():
        ir_frames = g_ir.frames[key]
        if names[key] in known:
            continue  # different candidates (see CANDIDATE_DISAGREEMENTS)
        if names[key].startswith(("Gradients/", "Expand/")):
            # the .ir prints a gradient node's merged trace, which repeats call sites (other
            # columns) and adds `if` lines; the .pb keeps the forward node's stack: a subsequence
            # (`Expand/...`: nodes the backward pass's expanders made, e.g. lowp's ReduceSum)
            spots = [(f.file, f.line, f.col_start, f.col_end) for f in ir_frames]
            pos = 0
            for f in frames:
                pos = spots.index((f.file, f.line, f.col_start, f.col_end), pos) + 1
        else:
            assert frames == ir_frames, key


def test_pb_source_frames_are_outermost_first():
    g = parse_graph_pb_file(NAN_LOG)
    log = g.by_full_name()[f"{SCOPE}/Log-op0"]
    frames = g.frames[log.node_key]
    assert [f.depth for f in frames] == list(range(len(frames)))
    assert frames[0].code == "def construct(self, *inputs):" and not frames[0].is_user_code
    f = innermost_user_frame(frames)
    assert f is frames[-1]
    assert f.file.endswith("/nan_log/train.py")  # where the real training script ran
    assert (f.line, f.code) == (16, "x = self.log(x)")
    assert (f.line_end, f.col_start, f.col_end) == (None, 12, 23)
    grad = g.by_full_name()["Gradients/Default/network-WithLossCell/_backbone-Net/Grad_Log/Div-op0"]
    assert innermost_user_frame(g.frames[grad.node_key]).line == 16


def test_pb_values_types_and_params():
    g = parse_graph_pb_file(NAN_LOG)
    nodes = g.by_full_name()
    log = nodes[f"{SCOPE}/Log-op0"]
    assert log.op_type == "Log" and log.graph_name == "kernel_graph0"
    assert log.attributes == {
        "IsFeatureMapOutput": "Bool(1)",
        "IsFeatureMapInputList": "(0)",
        "shift": "F32(0)",
        "scale": "F32(1)",
        "cust_aicpu": '"Log"',
        "base": "F32(-1)",
    }
    assert (log.output_types, log.output_dtypes, log.output_shapes) == (
        ["<Tensor[Float32], (2, 3)>"],
        ["Float32"],
        [[2, 3]],
    )
    assert log.input_types == ["<Tensor[Float32], (2, 3)>"]
    assert log.device_formats == []  # the .pb has host types only
    mm = nodes[f"{SCOPE}/fc-Dense/MatMul-op0"]
    assert mm.inputs == [
        ("%para5", "data"),
        ("kernel_graph0:%0", "data"),
        ("const:cst2", "data"),
        ("const:cst3", "data"),
    ]
    assert mm.input_types[2:] == ["<Bool, NoShape>", "<Bool, NoShape>"]
    assert mm.attributes["dst_type"] == "Float"  # DT_BASE_FLOAT: the .pb does not say F32
    params = [n for n in g.nodes if n.is_parameter]
    assert [(p.node_key, p.name) for p in params[:2]] == [("%para1", "head.bias"), ("%para2", "head.weight")]
    assert params[8].name == "learning_rate" and params[8].output_shapes == [[]]
    update = nodes["Default/optimizer-Momentum/UpdateState-op3"]
    assert update.output_dtypes == ["UMonad"] and update.output_shapes == [None]


def test_batchnorm_outputs_are_flattened_into_slots():
    path = DATA / "samples/mindspore-2.10-cpu/multigraph/dump/rank_0/graphs/ms_output_trace_code_graph_0.pb"
    g_pb, g_ir = _pair(path)
    name = f"{SCOPE}/bn-BatchNorm2d/BatchNorm-op0"
    a, b = g_pb.by_full_name()[name], g_ir.by_full_name()[name]
    assert a.output_dtypes == b.output_dtypes == ["Float32"] * 5
    assert b.output_shapes == [[2, 4, 6, 6], [4], [4], [4], [4]]
    assert a.output_shapes == [None] * 5
    assert len(b.device_shapes) == 5


# --- execution order: forward operators have a user line -------------------------------------------


def _line_of(source_file: str, line: int) -> str:
    """The line of a sample's train.py (committed beside its dump), or of a writer in
    tests/writers/ that ran as the training script (lowp), that a node's trace names."""
    writer = TESTS / "writers" / source_file.rsplit("/", 1)[-1]
    sample = (
        writer
        if writer.exists()
        else next(p for p in DATA.glob("**/train.py") if p.parent.name in source_file.split("/"))
    )
    return sample.read_text().splitlines()[line - 1]


def _exec_orders():
    for csv in sorted(DATA.glob("**/dump/rank_0/execution_order/ms_execution_order_graph_*.csv")):
        gid = csv.stem.rsplit("_", 1)[1]
        yield csv, csv.parent.parent / "graphs" / f"ms_output_trace_code_graph_{gid}.pb"


@pytest.mark.parametrize(
    ("csv", "pb_path"), list(_exec_orders()), ids=lambda p: _ids(p) if "graphs" in p.parts else ""
)
def test_every_forward_network_kernel_has_a_user_line(csv, pb_path):
    names = [ln.strip() for ln in csv.read_text().splitlines()[1:] if ln.strip()]
    for g in (parse_graph_pb_file(pb_path), parse_ir_file(pb_path.with_suffix(".ir"))):
        mapping = g.user_line_map()
        known = g.by_full_name()
        for name in names:
            assert name in known, name  # every kernel of the execution order is a node of the graph
            if (
                name.startswith("Default/TensorMove-")
                or known[name].attributes.get("is_backend_cast") == "Bool(1)"
            ):
                # copies the control-flow backend inserts (control_flow's loop state), casts the
                # backend inserts around a kernel of another dtype (lowp's float16 MatMul run in
                # float32 on CPU): no trace
                assert known[name].node_key not in g.frames, name
            elif name.startswith("Default/"):
                if "/network-WithLossCell/_loss_fn-" in name or name.startswith("Default/optimizer-"):
                    # built-in loss and optimizer cells called by MindSpore's own TrainOneStepCell
                    # and WithLossCell, never from the user's script: framework frames only; an
                    # optimizer a train step of the user's own calls (the dist runs): that call
                    assert g.frames[known[name].node_key], name
                    if name.startswith("Default/optimizer-") and name in mapping:
                        assert "self.optimizer(" in _line_of(*mapping[name]), name
                    else:
                        assert name not in mapping, name
                elif "/_loss_fn-" in name:
                    # a loss cell the user's own wrapper calls (div_late's WithLoss): the line of
                    # that call in the user's script
                    assert mapping[name][0].endswith(USER_SCRIPTS), name
                    assert "self._loss_fn(" in _line_of(*mapping[name]), name
                else:
                    assert name in mapping, name


# --- bad input -----------------------------------------------------------------------------------


def test_truncated_pb_salvages_the_complete_nodes():
    g = parse_graph_pb_file(DATA / "ir/truncated_nan_log.pb")  # the first half of nan_log's .pb
    assert g.errors[0][0] == "file" and "decode failed" in g.errors[0][1]
    assert "salvaged 17 nodes" in g.errors[0][1]
    assert any(loc == "salvage" for loc, _ in g.errors)
    full = parse_graph_pb_file(NAN_LOG)
    full_cnodes = [n for n in full.nodes if not n.is_parameter]
    assert [(n.op_type, n.full_name) for n in g.nodes] == [(n.op_type, n.full_name) for n in full_cnodes[:17]]
    assert g.graph_name is None  # the name is stored after the nodes
    log = g.by_full_name()[f"{SCOPE}/Log-op0"]
    assert innermost_user_frame(g.frames[log.node_key]).line == 16
    assert any(t.startswith("unresolved:") for t, _ in g.nodes[1].inputs)


def test_cut_at_every_offset_never_raises():
    data = (
        DATA / "samples/mindspore-2.10-cpu/multigraph/dump/rank_0/graphs/ms_output_trace_code_graph_3.pb"
    ).read_bytes()
    full = parse_graph_pb(data)
    for cut in range(len(data)):
        g = parse_graph_pb(data[:cut], graph_id=3)
        assert g.graph_id == 3 and g.source == "pb"
        assert len(g.nodes) <= len(full.nodes)
        if cut < len(data) - 12:
            assert g.errors, cut


def test_corrupted_bytes_never_raise():
    """Random byte flips: every result is a graph or an error entry, never an exception."""
    data = bytearray(NAN_LOG.read_bytes())
    rng = random.Random(7)
    with_errors = 0
    for _ in range(150):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        g = parse_graph_pb(bytes(bad))
        assert g.source == "pb" and (g.nodes or g.errors)
        with_errors += bool(g.errors)
    assert with_errors > 0  # the flips did hit structure, so the error path was exercised


@pytest.mark.parametrize("data", [b"", b"\x00", b"not a protobuf at all", b"\x22\x05abc", b"\xff" * 40])
def test_garbage_gives_an_error_entry(data):
    g = parse_graph_pb(data)
    assert g.errors and g.nodes == []


def test_missing_file_gives_an_error_entry(tmp_path):
    g = parse_graph_pb_file(tmp_path / "ms_output_trace_code_graph_4.pb")
    assert g.graph_id == 4 and g.errors and g.errors[0][0] == "file"


# --- a bare GraphProto (MindSpore ~1.0 wrote the graph without a ModelProto) -----------------------


def _bare(path: Path) -> bytes:
    model = pb.ModelProto()
    model.ParseFromString(path.read_bytes())
    return model.graph.SerializeToString()


@pytest.mark.parametrize("path", REAL_PBS, ids=_ids)
def test_bare_graph_proto_parses_like_the_model_proto_around_it(path):
    wrapped = parse_graph_pb_file(path)
    bare = parse_graph_pb(_bare(path), graph_id=wrapped.graph_id)
    assert bare.errors == wrapped.errors == []
    assert bare.graph_name == wrapped.graph_name and bare.graph_id == wrapped.graph_id
    assert bare.nodes == wrapped.nodes
    assert bare.frames == wrapped.frames


def test_bare_graph_proto_is_told_by_its_wire_types_not_by_a_decode_error():
    # A GraphProto's `outputs` (field 4) decode as a ModelProto's graph without any error: the
    # outputs_only graph read as a ModelProto is a one-node graph of nonsense.
    path = DATA / "ms210/outputs_only/dump/rank_0/graphs/ms_output_trace_code_graph_0.pb"
    data = _bare(path)
    misread = pb.ModelProto()
    misread.ParseFromString(data)
    assert misread.HasField("graph") and len(misread.graph.node) == 1
    g = parse_graph_pb(data)
    assert g.errors == [] and g.graph_name == "kernel_graph0"
    assert g.nodes == parse_graph_pb_file(path).nodes and len(g.nodes) > 30


def test_truncated_bare_graph_proto_salvages_the_complete_nodes():
    data = _bare(NAN_LOG)
    g = parse_graph_pb(data[: len(data) // 2])
    assert g.errors[0][0] == "file" and "decode failed" in g.errors[0][1]
    full = parse_graph_pb_file(NAN_LOG)
    cnodes = [(n.op_type, n.full_name) for n in full.nodes if not n.is_parameter]
    got = [(n.op_type, n.full_name) for n in g.nodes]
    assert 10 < len(got) < len(cnodes) and got == cnodes[: len(got)]


def test_bytes_that_decode_as_an_unnamed_graph_proto_are_an_error():
    g = parse_graph_pb(b"\x0a\x00\x0a\x00")  # two empty NodeProtos, no name: not a graph file
    assert g.nodes == [] and g.errors and "not a MindSpore .pb" in g.errors[0][1]


# --- control flow: a .pb whose call nodes are empty NodeProtos -------------------------------------

SAVE_GRAPHS = DATA / "ms210/control_flow/save_graphs"


def test_frontend_pb_call_nodes_are_empty_node_protos_that_keep_their_index():
    """ms_output_optimize.pb (save_graphs) is the root graph of 13_optimize_0071.ir. MindSpore
    exports a node whose callee is not a primitive as an empty NodeProto: it becomes a `call`
    node at its apply index, and the nodes reading it (`'12'`) find it."""
    g_pb = parse_graph_pb_file(SAVE_GRAPHS / "ms_output_optimize.pb")
    g_ir = parse_ir_file(SAVE_GRAPHS / "13_optimize_0071.ir")
    assert g_pb.errors == [] and g_ir.errors == []
    root = g_pb.graph_name
    assert (
        root
        == g_ir.graph_name
        == "385_368_143_1_mindspore_nn_wrap_cell_wrapper_TrainOneStepCell_construct_930"
    )
    ir_root = [n for n in g_ir.nodes if (n.graph_name == root or n.is_parameter) and n.op_type != "Return"]
    ir_root = [n for n in ir_root if not n.is_parameter or n.node_key in {m.node_key for m in g_pb.nodes}]
    assert [n.node_key for n in g_pb.nodes] == [n.node_key for n in ir_root]
    calls = [n for n in g_pb.nodes if n.op_type == "call"]
    assert [n.node_key for n in calls] == [f"{root}:%{i}" for i in (11, 15, 24, 27)]
    ir_nodes = {n.node_key: n for n in ir_root}
    for a in g_pb.nodes:
        b = ir_nodes[a.node_key]
        assert a.op_type == b.op_type, a.node_key
        if a.op_type == "call":
            # all the .pb keeps of a call is its place; the .ir has callee, operands, full name
            assert a.inputs == [] and a.full_name is None and b.inputs and b.full_name
            continue
        assert (a.full_name, a.name) == (b.full_name, b.name)
        assert len(a.inputs) == len(b.inputs), a.node_key
        for (ta, _), (tb, _) in zip(a.inputs, b.inputs, strict=True):
            assert ta == tb or (ta.startswith("const:") and tb.startswith("const:")), (a.node_key, ta, tb)
    # the Switch that picks the branch of `if x.sum() > 0` feeds the call %11 (in the .ir)
    switch = next(n for n in g_pb.nodes if n.op_type == "Switch")
    assert ir_nodes[f"{root}:%11"].inputs[0] == (switch.node_key, "data")
    assert not g_pb.frames  # save_graphs' .pb carries no source_address at all


def test_parse_graph_takes_the_clean_ir_over_a_pb_with_call_nodes(tmp_path):
    from ingest.readers.graph_rows import parse_graph

    (tmp_path / "g.pb").write_bytes((SAVE_GRAPHS / "ms_output_optimize.pb").read_bytes())
    ir_text = (SAVE_GRAPHS / "13_optimize_0071.ir").read_text(encoding="utf-8")
    (tmp_path / "g.ir").write_text(ir_text, encoding="utf-8")
    parsed, problems = parse_graph({"pb": "g.pb", "ir": "g.ir"}, tmp_path)
    assert problems == [] and parsed.source == "ir"
    parsed, problems = parse_graph({"pb": "g.pb"}, tmp_path)
    assert problems == [] and parsed.source == "pb"
    # an .ir with a bad line does not win over the clean .pb; its problem is still reported
    lines = ir_text.split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("# In file"))
    lines[at] = "      ~~ garbled ~~"
    (tmp_path / "g.ir").write_text("\n".join(lines), encoding="utf-8")
    parsed, problems = parse_graph({"pb": "g.pb", "ir": "g.ir"}, tmp_path)
    assert parsed.source == "pb" and [p[0] for p in problems] == [f"g.ir:{at + 1}"]


# --- hand-built protos: edges, candidates, unknown trace lines, value rendering ----------------------


def _model() -> pb.ModelProto:
    m = pb.ModelProto(ir_version=1)
    g = m.graph
    g.name = "kernel_graph_2"
    g.parameters.add(name="x").type.data_type = pb.DT_TENSOR
    n1 = g.node.add(name="1", op_type="ReLU", full_name="Default/ReLU-op0")
    n1.input.add(name="x", type=pb.InputProto.DATA_EDGE)
    n1.output_type.data_type = pb.DT_TENSOR
    n1.output_type.tensor_type.elem_type = pb.DT_FLOAT16
    n1.output_type.tensor_type.shape.dim.add(size=8)
    n1.source_address = (
        "      # Corresponding code candidate:\n"
        "      #  - In file /p/train.py:9, 8~20/        x = self.relu(x)/\n"
        "      #    In file /p/train.py:5~10, 4~16/    def construct(self, x):/\n"
        "      #  - In file /p/model.py:3, 4~9/    y = relu(x)/\n"
        "      #    In file /p/model.py:1~4, 0~9/def block(x):/\n"
    )
    n2 = g.node.add(name="2", op_type="Depend", full_name="Default/Depend-op0")
    n2.input.add(name="1", type=pb.InputProto.DATA_EDGE)
    n2.input.add(name="cst1", type=pb.InputProto.CONTROL_EDGE)
    n2.source_address = (
        "      # In file /p/train.py:12, 8~20/        return x/\n      # Inferred layout: NCHW\n"
    )
    g.const_vals.add(key="cst1", full_name="Default_data-0").value.dtype = pb.DT_NONE
    g.outputs.add(name="2")
    return m


def test_hand_built_graph():
    g = parse_graph_pb(_model().SerializeToString())
    assert g.graph_id == 2 and g.graph_name == "kernel_graph_2"
    x, relu, dep = g.nodes
    assert (x.node_key, x.name, x.output_dtypes) == ("%para1", "x", ["Tensor"])
    assert relu.node_key == "kernel_graph_2:%0" and relu.inputs == [("%para1", "data")]
    assert (relu.output_dtypes, relu.output_shapes) == (["Float16"], [[8]])
    assert dep.inputs == [("kernel_graph_2:%0", "data"), ("const:cst1", "control")]
    # each candidate stack is reversed on its own: outermost first within each
    assert [(f.file, f.line) for f in g.frames[relu.node_key]] == [
        ("/p/train.py", 5),
        ("/p/train.py", 9),
        ("/p/model.py", 1),
        ("/p/model.py", 3),
    ]
    assert innermost_user_frame(g.frames[relu.node_key]).code == "y = relu(x)"
    # an unknown source_address line is an error entry; the frames around it are kept
    assert g.frames[dep.node_key][0].code == "return x"
    assert g.errors == [("node 2", "unknown source_address line: '# Inferred layout: NCHW'")]


def test_input_naming_nothing_is_an_error():
    m = _model()
    m.graph.node[1].input.add(name="ghost")
    g = parse_graph_pb(m.SerializeToString())
    assert ("node 2", "input 'ghost' names no node, parameter or constant") in g.errors
    assert g.nodes[2].inputs[-1] == ("unresolved:ghost", "data")


def test_frames_from_source_address_shares_the_ir_frame_parser():
    frames, bad = frames_from_source_address(
        "      # In file /a/site-packages/mindspore/ops/x.py:4, 1~2/y/\n      # In file /u/t.py(7)/z = 1/\n"
    )
    assert bad == []
    assert [(f.depth, f.file, f.line, f.is_user_code) for f in frames] == [
        (0, "/u/t.py", 7, True),
        (1, "/a/site-packages/mindspore/ops/x.py", 4, False),
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (pb.ValueProto(dtype=pb.DT_BOOL, bool_val=True), "Bool(1)"),
        (pb.ValueProto(dtype=pb.DT_INT64, int_val=-3), "I64(-3)"),
        (pb.ValueProto(dtype=pb.DT_INT32, int_val=1), "I32(1)"),
        (pb.ValueProto(dtype=pb.DT_FLOAT32, float_val=0.1), "F32(0.1)"),
        (pb.ValueProto(dtype=pb.DT_FLOAT32, float_val=1e-05), "F32(1e-05)"),
        (pb.ValueProto(dtype=pb.DT_STRING, str_val="valid"), '"valid"'),
        (
            pb.ValueProto(
                dtype=pb.DT_TUPLE,
                values=[
                    pb.ValueProto(dtype=pb.DT_UINT64, uint_val=0),
                    pb.ValueProto(dtype=pb.DT_UINT64, uint_val=2),
                ],
            ),
            "(0, 2)",
        ),
        (
            pb.ValueProto(
                dtype=pb.DT_LIST,
                values=[
                    pb.ValueProto(dtype=pb.DT_STRING, str_val="x"),
                    pb.ValueProto(dtype=pb.DT_STRING, str_val="w"),
                ],
            ),
            "[x, w]",
        ),
        (pb.ValueProto(dtype=pb.DT_NONE), "None"),
    ],
)
def test_value_text_prints_like_the_ir(value, text):
    assert value_text(value) == text
