"""The `.ir` text parser: every generation's line forms, bad input, and the real 2.10 samples.

Fixtures under tests/data/ir/ are written to the reference's text for each generation
(mindspore-dump-formats.md §4): `small_v2.ir` is the 2.x form of a three-op graph and
`small_v1_6.ir`, `small_v1_7_to_1_10.ir`, `small_docs_fullname.ir` are the same graph in the
<=1.6, 1.7-1.10 and docs-only forms; all four must parse to the same tables.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.formats.graph_model import (
    SourceFrame,
    innermost_user_frame,
    is_framework_path,
    parse_frame_line,
)
from ingest.formats.mindspore.ir_text import parse_host_type, parse_ir_file, parse_ir_text
from tests.conftest import DATA

IR = DATA / "ir"
REAL_IRS = sorted(DATA.glob("**/dump/rank_0/graphs/*.ir"))
SCOPE = "Default/network-WithLossCell/_backbone-Net"
USER = "/src/proj/train.py"


def _cnode_table(graph):
    """Everything a generation must agree on, per CNode / Return node."""
    return [
        (
            n.node_key,
            n.graph_name,
            n.op_type,
            n.full_name,
            n.inputs,
            n.output_dtypes,
            n.output_shapes,
            n.device_dtypes,
            n.device_formats,
            n.device_shapes,
            {k: v for k, v in n.attributes.items() if "." not in k},  # v1 has no cnode_attrs blocks
        )
        for n in graph.nodes
        if not n.is_parameter
    ]


def _param_table(graph):
    return [(n.node_key, n.name, n.output_dtypes, n.output_shapes) for n in graph.nodes if n.is_parameter]


def _frame_table(graph):
    """Frames without columns and line ranges, which only 2.3+ prints."""
    return {
        k: [(f.depth, f.file, f.line, f.code, f.is_user_code) for f in v] for k, v in graph.frames.items()
    }


# --- the small graph in every generation ---------------------------------------------------------


def test_v2_small_graph_parses_fully():
    g = parse_ir_file(IR / "small_v2.ir")
    assert g.errors == []
    assert g.source == "ir" and g.graph_id == 0 and g.graph_name == "kernel_graph_0"
    keys = [n.node_key for n in g.nodes]
    assert keys == [
        "%para1",
        "%para2",
        "%para3",
        "kernel_graph_0:%0",
        "kernel_graph_0:%1",
        "kernel_graph_0:%2",
        "kernel_graph_0:Return",
    ]
    x, w, _, mm, ba, log, ret = g.nodes
    assert (x.name, x.op_type, x.is_parameter, x.full_name) == ("x", "Parameter", True, None)
    assert x.attributes == {"IsWeight": "false"}
    assert w.attributes == {"has_default": "true", "IsWeight": "true"}
    assert (w.output_dtypes, w.output_shapes) == (["Float32"], [[3, 4]])
    assert (w.device_dtypes, w.device_formats, w.device_shapes) == (
        ["Float16"],
        ["FRACTAL_NZ"],
        [[1, 1, 16, 16]],
    )

    assert mm.op_type == "MatMul"  # PrimFunc_ prefix dropped, as in the .pb and the dump file names
    assert mm.full_name == f"{SCOPE}/fc-Dense/MatMul-op0"
    assert mm.inputs == [("%para1", "data"), ("%para2", "data")]
    assert mm.attributes == {
        "instance_name": "matmul",
        "transpose_a": "Bool(0)",
        "transpose_b": "Bool(1)",
        "cnode_attrs.checkpoint": "Bool(1)",
        "cnode_attrs.is_dynamic_len": "Bool(0)",
    }
    assert mm.input_types == [
        "<Tensor[Float32], (2, 4)>",
        "<Ref[Tensor[Float32]], (3, 4), ref_key=fc.weight, is_parameter>",
    ]
    assert (mm.output_types, mm.output_dtypes, mm.output_shapes) == (
        ["<Tensor[Float32], (2, 3)>"],
        ["Float32"],
        [[2, 3]],
    )
    assert (mm.device_dtypes, mm.device_formats, mm.device_shapes) == (
        ["Float16"],
        ["FRACTAL_NZ"],
        [[1, 1, 16, 16]],
    )
    assert ba.inputs == [("kernel_graph_0:%0", "data"), ("%para3", "data")]
    assert ba.attributes["format"] == '"NCHW"'
    assert log.attributes["base"] == "F32(-1)"
    assert (ret.op_type, ret.full_name, ret.inputs) == (
        "Return",
        "Default/Return-op0",
        [("kernel_graph_0:%2", "data")],
    )
    assert (ret.output_dtypes, ret.output_shapes) == (["Float32"], [[2, 3]])
    assert [n.line for n in g.nodes[3:]] == [22, 31, 40, 48]

    frames = g.frames[log.node_key]
    assert [f.depth for f in frames] == [0, 1, 2]
    assert frames[0].is_user_code is False and frames[0].file.endswith("mindspore/nn/wrap/cell_wrapper.py")
    assert frames[1] == SourceFrame(1, USER, 14, 18, 4, 16, "def construct(self, x):", True)
    assert innermost_user_frame(frames) == SourceFrame(2, USER, 16, None, 12, 23, "x = self.log(x)", True)
    assert innermost_user_frame(g.frames[mm.node_key]).line == 15  # basic.py below it is framework
    assert ret.node_key not in g.frames
    assert g.user_line_map() == {
        f"{SCOPE}/fc-Dense/MatMul-op0": (USER, 15),
        f"{SCOPE}/fc-Dense/BiasAdd-op0": (USER, 15),
        f"{SCOPE}/Log-op0": (USER, 16),
    }


@pytest.mark.parametrize("name", ["small_v1_6.ir", "small_v1_7_to_1_10.ir", "small_docs_fullname.ir"])
def test_every_generation_parses_to_the_same_tables(name):
    ref = parse_ir_file(IR / "small_v2.ir")
    g = parse_ir_file(IR / name)
    assert g.errors == []
    assert g.graph_name == ref.graph_name and g.graph_id == ref.graph_id
    assert _cnode_table(g) == _cnode_table(ref)
    assert _param_table(g) == _param_table(ref)
    assert _frame_table(g) == _frame_table(ref)
    assert g.user_line_map() == ref.user_line_map()


def test_old_generations_keep_what_their_trace_lines_say():
    v16 = parse_ir_file(IR / "small_v1_6.ir")
    v17 = parse_ir_file(IR / "small_v1_7_to_1_10.ir")
    v2 = parse_ir_file(IR / "small_v2.ir")
    key = "kernel_graph_0:%2"
    f16, f17, f2 = v16.frames[key][1], v17.frames[key][1], v2.frames[key][1]
    assert (f16.line, f16.line_end, f16.col_start, f16.col_end) == (14, None, None, None)  # train.py(14)
    assert (f17.line, f17.line_end, f17.col_start, f17.col_end) == (14, None, None, None)  # train.py:14
    assert (f2.line, f2.line_end, f2.col_start, f2.col_end) == (14, 18, 4, 16)  # train.py:14~18, 4~16
    # v1 parameters: `%para1_x : <Tensor[Float32]x[const vector][2, 4]>`, names from the
    # subgraph signature and the declarations
    assert next((n.name, n.output_types) for n in v16.nodes if n.is_parameter) == (
        "x",
        ["<Tensor[Float32]x[const vector][2, 4]>"],
    )


# --- several subgraphs, wrapped blocks ----------------------------------------------------------


def test_several_subgraphs_free_variables_and_graph_calls():
    g = parse_ir_file(IR / "multi_subgraph_v2.ir")
    assert g.errors == []
    assert g.graph_name == "19_1___main___Net_construct_304" and g.graph_id is None
    main, true_g, false_g = (
        "19_1___main___Net_construct_304",
        "20_2_✓__main___Net_construct_305",
        "21_3_✗__main___Net_construct_306",
    )
    nodes = {n.node_key: n for n in g.nodes}
    assert {n.graph_name for n in g.nodes if not n.is_parameter} == {main, true_g, false_g}
    assert sum(n.op_type == "Return" for n in g.nodes) == 3
    add = nodes[f"{true_g}:%0"]
    # `$(@main:%0)` is an edge to %0 of the main graph; `%para2_y` is the file-wide parameter
    assert add.inputs == [(f"{main}:%0", "data"), ("%para2", "data")]
    assert nodes[f"{main}:%0"].inputs == [
        ("%para1", "data"),
        ("const:Tensor(shape=[], dtype=Float32, value=2)", "data"),
    ]
    switch = nodes[f"{main}:%2"]
    assert switch.inputs[1:] == [(f"const:@{true_g}", "data"), (f"const:@{false_g}", "data")]
    assert switch.output_dtypes == ["Func"] and switch.output_shapes == [None]
    assert nodes[f"{main}:%1"].output_dtypes == ["Bool"] and nodes[f"{main}:%1"].output_shapes == [[]]
    call = nodes[f"{main}:%3"]
    # `%3(CNode_6) = %2()` calls what the Switch picked: a `call` node, the callee its operand 0
    assert call.op_type == "call" and call.input_types == []
    assert call.inputs == [(f"{main}:%2", "data")] and call.attributes == {"callee": "%2"}
    # a subgraph's own `# In file` line (before `subgraph @...`) belongs to no node
    assert all(k in nodes for k in g.frames)
    assert innermost_user_frame(g.frames[f"{true_g}:%0"]).code == "return x + y"
    assert g.frames[f"{true_g}:Return"][0].col_start == 12


def test_wrapped_operand_and_attribute_blocks():
    g = parse_ir_file(IR / "wrapped_attrs_v2.ir")
    assert g.errors == []
    mul, relu = (n for n in g.nodes if n.op_type in ("Mul", "ReLU"))
    assert mul.line == 20 and relu.line == 31
    assert mul.inputs[0] == ("%para1", "data")
    const_key, kind = mul.inputs[1]
    assert kind == "data" and const_key.startswith("const:Tensor(shape=[2, 2], dtype=Float32, value=")
    assert "[ 3.00000000e+00  4.00000000e+00]]" in const_key
    assert mul.attributes["IsFeatureMapInputList"] == "(0,\n1)"
    assert mul.attributes["format"] == '"NCHW"'
    assert mul.attributes["cnode_attrs.is_dynamic_len"] == "Bool(0)"
    assert mul.attributes["cnode_primal_attrs.unique_id"] == '"3607"'
    assert mul.output_shapes == [[2, 2]] and mul.device_shapes == [[2, 2]]
    assert mul.full_name == f"{SCOPE}/Mul-op0"
    assert innermost_user_frame(g.frames[mul.node_key]).code == "x = x * self.scale"
    assert relu.inputs == [(mul.node_key, "data")]


# --- bad input ---------------------------------------------------------------------------------


def test_unknown_line_forms_are_errors_and_parsing_goes_on():
    g = parse_ir_file(IR / "unknown_line_v2.ir")
    assert [e[0] for e in g.errors] == [33, 42]
    assert "@@ a line form no version of MindSpore writes @@" in g.errors[0][1]
    assert "# Inferred layout: (NCHW)" in g.errors[1][1]
    ref = parse_ir_file(IR / "small_v2.ir")
    assert _cnode_table(g) == _cnode_table(ref)
    assert _frame_table(g) == _frame_table(ref)


def test_truncated_ir_returns_what_was_parsed_plus_an_error():
    g = parse_ir_file(IR / "truncated_nan_log.ir")  # the real nan_log .ir cut inside node %13
    assert any("truncated" in reason for _, reason in g.errors)
    assert any("without ' -> '" in reason for _, reason in g.errors)
    cnodes = [n for n in g.nodes if not n.is_parameter]
    assert [n.node_key for n in cnodes][-1] == "kernel_graph0:%13"
    full = parse_ir_file(DATA / "ms210/nan_log/dump/rank_0/graphs/ms_output_trace_code_graph_0.ir")
    full_nodes = {n.node_key: n for n in full.nodes}
    for n in cnodes[:-1]:
        assert n.full_name == full_nodes[n.node_key].full_name
        assert g.frames.get(n.node_key) == full.frames.get(n.node_key)
    assert g.user_line_map()[f"{SCOPE}/Log-op0"][1] == 16


def test_cut_anywhere_never_raises():
    text = (IR / "small_v2.ir").read_text()
    full = parse_ir_text(text)
    closing = text.index("\n}\n")  # after it only the `# Order:` trailer is left
    for cut in range(0, len(text), 7):
        g = parse_ir_text(text[:cut])
        assert len(g.nodes) <= len(full.nodes)
        if 0 < cut <= closing:
            assert g.errors, cut


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "not an ir file at all\n",
        "subgraph @g() {\n  %0 = \n}\n",
        "\x00\xff garbage {{{ ((( \n" * 3,
    ],
)
def test_garbage_gives_errors_not_exceptions(text):
    g = parse_ir_text(text)
    assert g.source == "ir"
    if text.strip():
        assert g.errors


def test_broken_node_line_is_reported_once_and_the_next_node_still_parses():
    text = (
        (IR / "small_v2.ir").read_text().replace("  %1(x) = PrimFunc_BiasAdd(", "  %1(x) = PrimFunc_BiasAdd[")
    )
    g = parse_ir_text(text)
    assert len(g.errors) == 1 and g.errors[0][0] == 31
    assert [n.node_key for n in g.nodes if not n.is_parameter] == [
        "kernel_graph_0:%0",
        "kernel_graph_0:%2",
        "kernel_graph_0:Return",
    ]
    assert g.user_line_map()[f"{SCOPE}/Log-op0"] == (USER, 16)


# --- building blocks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # <= 1.6
        (
            "      # In file /abs/alexnet.py(58)/        x = self.conv3(x)/",
            ("/abs/alexnet.py", 58, None, None, None, "x = self.conv3(x)"),
        ),
        # 1.10 - 2.2
        (
            "      # In file /abs/alexnet.py:58/        x = self.conv3(x)/",
            ("/abs/alexnet.py", 58, None, None, None, "x = self.conv3(x)"),
        ),
        # >= 2.3, both shapes
        (
            "      # In file /abs/alexnet.py:58, 12~25/        x = self.conv3(x)/",
            ("/abs/alexnet.py", 58, None, 12, 25, "x = self.conv3(x)"),
        ),
        (
            "# In file t6.py:15~20, 4~16/    def construct(self, x, y):/",
            ("t6.py", 15, 20, 4, 16, "def construct(self, x, y):"),
        ),
        # a line range without columns (seen in 2.10: gen_ops_def.py:8462~8466/def muls(...):/)
        (
            "# In file g.py:8462~8466/def muls(input, other):/",
            ("g.py", 8462, 8466, None, None, "def muls(input, other):"),
        ),
        # the shared-line tail, a slash inside the code, the .pb's candidate spellings
        (
            "# In file a.py:7, 8~20/        y = x / 2/<~~This line of code can be shared by multiple nodes./",
            ("a.py", 7, None, 8, 20, "y = x / 2"),
        ),
        ("      #  - In file a.py:3, 1~5/x = 1/", ("a.py", 3, None, 1, 5, "x = 1")),
        ("      #    In file a.py:3, -1~-1/x = 1/", ("a.py", 3, None, -1, -1, "x = 1")),
        (r"# In file C:\work\net.py:12/    return x/", (r"C:\work\net.py", 12, None, None, None, "return x")),
    ],
)
def test_frame_line_forms(line, expected):
    f = parse_frame_line(line, 3)
    assert f is not None
    assert (f.file, f.line, f.line_end, f.col_start, f.col_end, f.code) == expected
    assert f.depth == 3


@pytest.mark.parametrize(
    "line",
    ["# In file a.py/x/", "# In file /a.py:xx/y/", "# Fullname with scope: (a)", "x In file a.py:1/a/"],
)
def test_malformed_frame_lines(line):
    assert parse_frame_line(line, 0) is None


@pytest.mark.parametrize(
    ("path", "framework"),
    [
        ("/opt/env/lib/python3.11/site-packages/mindspore/nn/layer/basic.py", True),
        ("/usr/lib/python3/dist-packages/numpy/core.py", True),
        ("/src/mindspore/python/mindspore/nn/cell.py", True),
        ("<frozen importlib._bootstrap>", True),
        (r"C:\Python39\Lib\site-packages\mindspore\nn\cell.py", True),
        ("/srv/jobs/nan_log/train.py", False),
        ("/opt/mindspore-env/train.py", False),
        ("t6.py", False),
    ],
)
def test_is_framework_path(path, framework):
    assert is_framework_path(path) is framework


def test_innermost_user_frame_picks_the_deepest_user_frame():
    assert innermost_user_frame(None) is None
    assert innermost_user_frame([]) is None
    fw = parse_frame_line("# In file /x/site-packages/mindspore/a.py:1/a/", 0)
    u1 = parse_frame_line("# In file /p/train.py:5/b/", 1)
    u2 = parse_frame_line("# In file /p/model.py:9/c/", 2)
    fw2 = parse_frame_line("# In file /x/site-packages/mindspore/b.py:2/d/", 3)
    assert innermost_user_frame([fw, u1, u2, fw2]) is u2
    assert innermost_user_frame([fw, fw2]) is None


@pytest.mark.parametrize(
    ("text", "leaves"),
    [
        ("<Tensor[Float32], (32, 256, 13, 13)>", (("Float32", (32, 256, 13, 13)),)),
        ("<Tensor[Float32], (3)>", (("Float32", (3,)),)),
        ("<Tensor[Float32], ()>", (("Float32", ()),)),
        ("<Tensor[Float32], (), value=...>", (("Float32", ()),)),
        ("<Tensor[Float32], (-1, 3)>", (("Float32", (-1, 3)),)),
        ("<Int64, NoShape>", (("Int64", None),)),
        ("<UMonad, NoShape>", (("UMonad", None),)),
        ("<Ref[Tensor[Float16]], (512, 4096), ref_key=w, is_parameter>", (("Float16", (512, 4096)),)),
        (
            "<Tuple[Tensor[Float32]*2,Tensor[Bool],UMonad], TupleShape((2, 4), (4), (), NoShape)>",
            (("Float32", (2, 4)), ("Float32", (4,)), ("Bool", ()), ("UMonad", None)),
        ),
        (
            "<Tuple[Tuple[Int64,Tensor[Float32]]], TupleShape(TupleShape(NoShape, (2, 144)))>",
            (("Int64", None), ("Float32", (2, 144))),
        ),
        ("<Tuple[], TupleShape()>", ()),
        ("<Tensor[Float32]x[const vector][32, 128, 13, 13]>", (("Float32", (32, 128, 13, 13)),)),
        ("<Ref[Tensor(F32)][6, 1, 5, 5]>", (("Float32", (6, 1, 5, 5)),)),
        ("<Ref[Tensor(F32)]x[const vector][6, 1, 5, 5]>", (("Float32", (6, 1, 5, 5)),)),
    ],
)
def test_host_types(text, leaves):
    assert parse_host_type(text) == leaves


def test_device_type_forms():
    text = (IR / "small_v2.ir").read_text()
    new_form = "<Float16xNC1HWC0[const vector]{2, 1, 1, 1, 16}>"  # >= 2.2
    old_form = "<Float16xNC1HWC0[const vector][2, 1, 1, 1, 16]>"  # <= 2.0
    line = f"      : ({new_form}) -> ({new_form})"
    assert line in text
    old = text.replace(line, f"      : ({old_form}) -> ({old_form})")
    assert old != text
    a = {n.node_key: n for n in parse_ir_text(text).nodes}["kernel_graph_0:%2"]
    b = {n.node_key: n for n in parse_ir_text(old).nodes}["kernel_graph_0:%2"]
    assert (a.device_dtypes, a.device_formats, a.device_shapes) == (
        ["Float16"],
        ["NC1HWC0"],
        [[2, 1, 1, 1, 16]],
    )
    assert (b.device_dtypes, b.device_formats, b.device_shapes) == (
        a.device_dtypes,
        a.device_formats,
        a.device_shapes,
    )


# --- the real 2.10 dumps -----------------------------------------------------------------------


@pytest.mark.parametrize("path", REAL_IRS, ids=lambda p: f"{p.parts[-5]}-{p.name}")
def test_real_ir_files_parse_without_errors(path):
    g = parse_ir_file(path)
    assert g.errors == []
    assert g.graph_id == int(path.stem.rsplit("_", 1)[1])
    assert g.graph_name == f"kernel_graph{g.graph_id}"
    cnodes = [n for n in g.nodes if not n.is_parameter]
    assert cnodes[-1].op_type == "Return"
    assert all(n.full_name for n in cnodes)
    keys = {n.node_key for n in g.nodes}
    for n in cnodes:  # every edge ends on a node of the graph (or is a constant)
        for target, kind in n.inputs:
            assert kind == "data"
            assert target in keys or target.startswith("const:"), (n.node_key, target)


def test_real_param_names_follow_the_operand_spelling():
    # `%para1__18655: ...` is declared with a debug name; operands (and the .pb) call it Parameter_63
    g = parse_ir_file(
        DATA / "samples/mindspore-2.10-cpu/multigraph/dump/rank_0/graphs/ms_output_trace_code_graph_1.ir"
    )
    params = [n.name for n in g.nodes if n.is_parameter]
    assert params[:4] == ["Parameter_63", "Parameter_64", "fc.weight", "fc.bias"]


def test_nan_log_log_op_maps_to_train_py_line_16():
    g = parse_ir_file(DATA / "ms210/nan_log/dump/rank_0/graphs/ms_output_trace_code_graph_0.ir")
    log = g.by_full_name()[f"{SCOPE}/Log-op0"]
    assert log.op_type == "Log"
    f = innermost_user_frame(g.frames[log.node_key])
    assert f.file.endswith("/nan_log/train.py")  # where the real training script ran
    assert (f.line, f.code) == (16, "x = self.log(x)")
    assert (f.col_start, f.col_end) == (12, 23)
    grad = g.by_full_name()["Gradients/Default/network-WithLossCell/_backbone-Net/Grad_Log/Div-op0"]
    assert innermost_user_frame(g.frames[grad.node_key]).line == 16


# --- control flow: call nodes of the 2.10 frontend IR ------------------------------------------

CONTROL_FLOW = DATA / "ms210/control_flow"
SAVE_GRAPHS = CONTROL_FLOW / "save_graphs"
SAVE_GRAPHS_IRS = sorted(SAVE_GRAPHS.glob("*.ir"))
GATE_GRAPH = "390_373_187_▸25___main___Gate_construct_800"


def _line(graph, line_no):
    return next(n for n in graph.nodes if n.line == line_no)


@pytest.mark.parametrize("path", SAVE_GRAPHS_IRS, ids=lambda p: p.name[:30])
def test_control_flow_frontend_ir_parses_every_node_form(path):
    """Every line of the real save_graphs IR of control_flow parses: calls of graphs, of node
    results and of parameters, with or without the callee's abstract in brackets."""
    g = parse_ir_file(path)
    assert g.errors == []
    text = path.read_text(encoding="utf-8")
    node_lines = [ln for ln in text.splitlines() if ln.startswith("  %") or ln.startswith("  Return(")]
    assert len([n for n in g.nodes if not n.is_parameter]) == len(node_lines)
    calls = [n for n in g.nodes if n.op_type == "call"]
    assert calls and text.count(" = call @") == sum(n.attributes["callee"].startswith("@") for n in calls)
    keys = {n.node_key for n in g.nodes}
    for n in calls:
        callee_key = n.inputs[0][0]
        # the callee is operand 0: a node or parameter of the file (an edge), or a graph constant
        assert callee_key in keys or callee_key.startswith("const:"), (n.line, callee_key)
        if n.attributes["callee"].startswith(("%", "Parameter_")):
            assert callee_key in keys, n.line


def test_control_flow_call_forms():
    g = parse_ir_file(SAVE_GRAPHS / "13_optimize_0071.ir")
    nodes = {n.node_key: n for n in g.nodes}
    while_body = "386_369_156_▸19_↵↓__main___Net_construct_817"
    # `%4(▲CNode_872) = %3[@FuncUnion(@..., @...)]()`: calls what the Switch %3 picked
    pick = _line(g, 85)
    assert pick.node_key == f"{while_body}:%4" and pick.op_type == "call"
    assert pick.inputs == [(f"{while_body}:%3", "data")]
    assert nodes[f"{while_body}:%3"].op_type == "Switch"
    assert pick.attributes["callee"] == "%3"
    assert pick.attributes["callee_abstract"] == (
        "@FuncUnion(@388_371_172_▸20_↻↓__main___Net_construct_823, "
        "@396_379_272_▸52_2↓__main___Net_construct_851)"
    )
    assert pick.full_name == "37"  # as printed: MindSpore numbers such nodes, no scope
    assert innermost_user_frame(g.frames[pick.node_key]).code == "while i < 2:"
    # `call @g(%para25_▸gate.fc.weight, ...)`: a graph call, the graph a constant operand
    gate = _line(g, 136)
    assert gate.op_type == "call" and gate.attributes == {"callee": f"@{GATE_GRAPH}"}
    assert gate.inputs[0] == (f"const:@{GATE_GRAPH}", "data")
    assert gate.inputs[1:] == [(f"%para{i}", "data") for i in (25, 26, 27, 31)]
    assert gate.full_name.endswith(f"/_backbone-Net/{GATE_GRAPH}-op0")
    f = innermost_user_frame(g.frames[gate.node_key])
    assert (f.line, f.code) == (37, "x = x + self.gate(x)") and f.file.endswith("/control_flow/train.py")
    # `Parameter_934[@@g](%para49_Parameter_824)`: the callee is the graph's parameter %para47
    param_call = _line(g, 717)
    assert param_call.inputs == [("%para47", "data"), ("%para49", "data")]
    assert nodes["%para47"].name == "Parameter_934"
    assert param_call.attributes["callee_abstract"] == "@@387_370_157_◂19_↵↓__main___Net_construct_822"


def test_control_flow_calls_of_free_variables_and_plain_nodes():
    g = parse_ir_file(SAVE_GRAPHS / "01_type_inference_0001.ir")
    # `%0(CNode_344) = $(@g:CNode_343)(...)`: the free variable is node %0 of g (named CNode_343)
    fv = _line(g, 5203)
    grad = "130_grad_mindspore_nn_wrap_cell_wrapper_WithLossCell_construct_345"
    assert fv.op_type == "call" and fv.inputs[0] == (f"{grad}:%0", "data")
    assert fv.attributes["callee"] == f"$(@{grad}:CNode_343)"
    # `%1(success) = %0(%para126_Parameter_254, ...)`: a plain call of a node's result
    plain = next(n for n in g.nodes if n.op_type == "call" and n.attributes == {"callee": "%0"})
    assert plain.inputs[0] == (f"{plain.graph_name}:%0", "data") and len(plain.inputs) > 1
    # `$(@g:para27_фi)` is the file's %para27
    add = _line(g, 397)
    assert add.op_type == "call" and add.inputs[1] == ("%para27", "data")


def test_control_flow_partial_abstract_and_side_effect_lines():
    g = parse_ir_file(next(SAVE_GRAPHS.glob("after_lift_13_*.ir")))
    assert g.errors == []
    partial = next(n for n in g.nodes if n.attributes.get("callee_abstract", "").startswith("@Partial("))
    assert partial.op_type == "call"
    assert partial.attributes["callee_abstract"] == "@Partial(@25___main___Gate_construct_115)"
    # `# SideEffect: { load }` under a node is kept as an attribute, not an error
    assert {n.attributes["side_effect"] for n in g.nodes if "side_effect" in n.attributes} == {"load"}


SUBGRAPH_WITH_PARENT = """# IR entry: @1_main
# Total subgraphs: 2

jit config {
debug_level: RELEASE
jit_level:
}

# Total params: 1
# Params:
%para1_x: <Tensor[Float32], (2)> : []

subgraph attr:
subgraph instance: 2_inner : 0x1
subgraph @2_inner parent: [subgraph @1_main](%para2_y) {
  %0(CNode_5) = PrimFunc_Add($(@1_main:para1_x), %para2_y)
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
  Return(%0)
      : (<Tensor[Float32], (2)>)
}

subgraph attr:
subgraph instance: 1_main : 0x2
subgraph @1_main() {
  %0(CNode_6) = call @2_inner(%para1_x)
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
  %1(CNode_7) = @2_inner(%0)
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
  Return(%1)
      : (<Tensor[Float32], (2)>)
}
"""


def test_subgraph_header_with_parent_jit_config_block_and_bare_graph_call():
    g = parse_ir_text(SUBGRAPH_WITH_PARENT)
    assert g.errors == []
    nodes = {n.node_key: n for n in g.nodes}
    assert nodes["2_inner:%0"].inputs == [("%para1", "data"), ("%para2", "data")]
    assert nodes["%para2"].name == "y" and nodes["%para2"].graph_name == "2_inner"
    # `call @g(...)` (2.x) and `@g(...)` both call a graph
    for key, arg in (("1_main:%0", "%para1"), ("1_main:%1", "1_main:%0")):
        assert nodes[key].op_type == "call" and nodes[key].attributes == {"callee": "@2_inner"}
        assert nodes[key].inputs == [("const:@2_inner", "data"), (arg, "data")]


# --- through `dumpcat ingest`: call nodes, and unreadable graph files ------------------------------


def _ingest(dump: Path, cat: Path):
    from catalog import Catalog

    done = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(dump), "--catalog", str(cat), "--run", "r"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return Catalog.open(cat)


def _graph_errors(cat) -> list[dict]:
    """The graph stage's error rows, in file order (a file's line rows, then its own rows)."""
    rows = cat.sql("SELECT path, reason FROM ingest_errors WHERE stage = 'graph'").to_pylist()

    def order(row):
        file, _, line = row["path"].partition(".ir:")
        return (file, int(line) if line else 10**9)

    return sorted(rows, key=order)


@pytest.mark.parametrize("with_pb", [True, False], ids=["pb", "ir-only"])
def test_control_flow_dump_with_call_nodes_ingests_without_graph_errors(tmp_path, copy_dump, with_pb):
    """The control_flow dump, plus its frontend IR (Switch, Partial, calls) as one more graph:
    no graph error, and the call nodes are ir_nodes rows whose callee is an edge. The .pb has
    the root graph only, with each call an empty NodeProto, so the clean .ir is taken."""
    dump = copy_dump("control_flow")
    extra = dump / "rank_0/graphs/ms_output_trace_code_graph_33"
    extra.with_suffix(".ir").write_bytes((SAVE_GRAPHS / "13_optimize_0071.ir").read_bytes())
    if with_pb:
        extra.with_suffix(".pb").write_bytes((SAVE_GRAPHS / "ms_output_optimize.pb").read_bytes())
    cat = _ingest(dump, tmp_path / "cat")
    assert _graph_errors(cat) == []
    counts = cat.sql(
        "SELECT count(DISTINCT graph_id) AS graphs, count(*) FILTER (op_type = 'call') AS calls, "
        "count(*) FILTER (op_type = 'Switch') AS switches, "
        "count(*) FILTER (op_type = 'Partial') AS partials, "
        "list(DISTINCT source) FILTER (graph_id = 33) AS source "
        "FROM ir_nodes"
    ).to_pylist()[0]
    assert counts == {"graphs": 34, "calls": 16, "switches": 3, "partials": 11, "source": ["ir"]}
    # the root graph calls what its Switch picked: an edge Switch -> call, operand 0
    picked = cat.sql(
        "SELECT consumer_key, consumer FROM edges WHERE graph_id = 33 AND producer_type = 'Switch' "
        "AND consumer_type = 'call' AND input_index = 0"
    ).to_pylist()
    root = "385_368_143_1_mindspore_nn_wrap_cell_wrapper_TrainOneStepCell_construct_930"
    assert {"consumer_key": f"{root}:%11", "consumer": "28"} in picked and len(picked) == 3
    # calls have their full name and source frames: the call of Gate is train.py line 37
    gate = cat.sql(
        "SELECT source_line, source_code FROM op_source WHERE graph_id = 33 AND full_name = "
        f"'Default/network-WithLossCell/_backbone-Net/{GATE_GRAPH}-op0'"
    ).to_pylist()
    assert gate == [{"source_line": 37, "source_code": "x = x + self.gate(x)"}]
    # the kernel graphs keep their operator -> line mapping: the Sqrt is train.py line 34
    sqrt = cat.sql(
        "SELECT graph_id, source_line, source_code FROM op_source WHERE full_name LIKE '%/Sqrt-op0'"
    ).to_pylist()
    assert sqrt == [{"graph_id": 1, "source_line": 34, "source_code": "x = self.sqrt(x)"}]


def test_random_bytes_graph_files_are_one_error_row_each(tmp_path, copy_dump):
    import random

    dump = copy_dump("nan_log")
    graphs = dump / "rank_0/graphs"
    rng = random.Random(20)
    ir_bytes = bytes(rng.getrandbits(8) for _ in range(200_000))
    (graphs / "ms_output_trace_code_graph_0.ir").write_bytes(ir_bytes)
    (graphs / "ms_output_trace_code_graph_0.pb").write_bytes(bytes(rng.getrandbits(8) for _ in range(20_000)))
    cat = _ingest(dump, tmp_path / "cat")
    errors = _graph_errors(cat)
    assert [e["path"] for e in errors] == [
        "rank_0/graphs/ms_output_trace_code_graph_0.ir",
        "rank_0/graphs/ms_output_trace_code_graph_0.pb",
    ]
    ir_reason, pb_reason = errors[0]["reason"], errors[1]["reason"]
    assert ir_reason.startswith("not a MindSpore IR: ")
    counts = ir_reason.split(": ")[1].split(" non-blank")[0]
    bad, total = (int(x.replace(",", "")) for x in counts.split(" of "))
    # the parser reads lines as Python does with newline="": \n, \r and \r\n end a line
    text = ir_bytes.decode("utf-8", "replace")
    non_blank = sum(1 for ln in re.split(r"\r\n|\r|\n", text) if ln.strip())
    assert total == non_blank > 1000 and 0.9 * total < bad <= total
    assert "; first at line " in ir_reason
    assert pb_reason.startswith("not a MindSpore graph .pb, no operator could be read: ")
    assert "protobuf decode failed" in pb_reason
    assert cat.sql("SELECT count(*) FROM ir_nodes").column(0)[0].as_py() == 0
    assert cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py() == 180  # the rest is cataloged


@pytest.mark.parametrize("garbled", [3, 25])
def test_garbled_lines_of_a_real_ir_are_capped_at_ten_rows(tmp_path, copy_dump, garbled):
    dump = copy_dump("nan_log")
    graphs = dump / "rank_0/graphs"
    (graphs / "ms_output_trace_code_graph_0.pb").unlink()
    ir = graphs / "ms_output_trace_code_graph_0.ir"
    lines = ir.read_text().split("\n")
    # garble `# In file` lines of nodes other than Log-op0's (whose trace the test reads back)
    log_at = next(i for i, ln in enumerate(lines) if "/Log-op0)" in ln)
    frames = [
        i
        for i, ln in enumerate(lines)
        if ln.lstrip().startswith("# In file") and not log_at < i < log_at + 12
    ]
    victims = frames[:: max(1, len(frames) // garbled)][:garbled]
    assert len(victims) == garbled
    for i in victims:
        lines[i] = "      ~~ garbled \x07 line ~~"
    ir.write_text("\n".join(lines))
    cat = _ingest(dump, tmp_path / "cat")
    errors = _graph_errors(cat)
    name = "rank_0/graphs/ms_output_trace_code_graph_0.ir"
    shown = victims[:10]
    assert [e["path"] for e in errors[: len(shown)]] == [f"{name}:{i + 1}" for i in shown]
    assert all("~~ garbled" in e["reason"] for e in errors[: len(shown)])
    if garbled <= 10:
        assert len(errors) == garbled
    else:
        assert len(errors) == 11
        assert errors[10]["path"] == name
        more = f"… and {garbled - 10} more unreadable lines (first at line {victims[10] + 1}:"
        assert errors[10]["reason"].startswith(more)
    # the graph is still there, with its source lines
    assert cat.sql("SELECT DISTINCT source FROM ir_nodes").column(0).to_pylist() == ["ir"]
    assert cat.sql("SELECT source_line FROM ops WHERE op_name LIKE '%/Log-op0'").column(0).to_pylist() == [16]
