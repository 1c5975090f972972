"""The `.ir` text parser: every generation's line forms, bad input, and the real 2.10 samples.

Fixtures under tests/data/ir/ are written to the reference's text for each generation
(mindspore-dump-formats.md §4): `small_v2.ir` is the 2.x form of a three-op graph and
`small_v1_6.ir`, `small_v1_7_to_1_10.ir`, `small_docs_fullname.ir` are the same graph in the
<=1.6, 1.7-1.10 and docs-only forms; all four must parse to the same tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.graph_model import (
    SourceFrame,
    innermost_user_frame,
    is_framework_path,
    parse_frame_line,
)
from ingest.ir_text import parse_host_type, parse_ir_file, parse_ir_text

DATA = Path(__file__).parent / "data"
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
    assert call.op_type == "%2" and call.inputs == [] and call.input_types == []
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
