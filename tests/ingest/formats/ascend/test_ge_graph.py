"""GE graph text dumps (ingest/formats/ascend/ge_graph.py): the committed TorchAir graph
(tests/data/ge/torchair/dynamo_original_*.txt) parses, and every `_fx_tensor_name` in it names an
FX npy file of the committed FX dump (made with torch 2.13 by tests/writers/torchair_fx.py);
leniency, ModelDef wrapping and malformed text."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.formats.ascend.ge_graph import GeGraphError, parse_ge_graph, read_ge_graph
from tests.conftest import DATA
from tests.writers import torchair_fx as fx

TORCHAIR = DATA / "ge" / "torchair"
FX_MODEL = TORCHAIR / "msprobe_fx_dump" / fx.RANK_DIR / fx.MODEL_NAME


def _graph_file() -> Path:
    (path,) = TORCHAIR.glob("dynamo_original_*_rank_0_pid_*_ts_*.txt")
    return path


def test_the_committed_graph_parses_and_links_every_fx_output():
    graph = read_ge_graph(_graph_file())
    assert graph.name == fx.MODEL_NAME and graph.model_name is None
    by_name = {op.name: op for op in graph.ops}
    assert by_name["Add"].type == "Add" and by_name["Add"].inputs == ("MatMulV2:0", "b1_1:0")
    assert by_name["NetOutput"].inputs == ("Log:0",)
    links = {name for op in graph.ops for _, name in op.fx_tensor_names}
    # every FX call_function node's output is linked once, from output 0 of one GE op
    assert links == {f"{node}-{target}.OUTPUT.0" for node, target, _ in fx.FX_GRAPH}
    assert all(idx == 0 for op in graph.ops for idx, _ in op.fx_tensor_names)
    assert by_name["MatMulV2"].fx_tensor_names == ()  # inside the addmm conversion
    for token in fx.TOKENS:
        files = [p.name for p in (FX_MODEL / str(token)).glob("*.npy")]
        for name in links:
            hits = [f for f in files if f.startswith(name + ".") and f[len(name) + 1 : -4].isdigit()]
            assert len(hits) == 1, (token, name)
    # every op input names an op of the graph
    for op in graph.ops:
        for edge in op.inputs:
            src, _, idx = edge.rpartition(":")
            assert src in by_name and idx.lstrip("-").isdigit()


def test_msprobe_style_text_unknown_fields_and_list_values():
    text = """
    op {
      name: "Add_2"
      type: "Add"
      some_newer_field: 7
      output_desc {
        name: "test"
        attr { key: "_fx_tensor_name" value { s: "mm-aten.mm.default.OUTPUT.0" } }
        attr { name: "tt2" }
      }
      output_desc { attr { key: "_fx_tensor_name" value { list { s: "a-aten.a.default.OUTPUT.1" s: "b" } } } }
      attr { key: "_fx_tensor_name" value { s: "op-level" } }
      input_desc { attr { key: "_fx_tensor_name" value { s: "not read" } } }
    }
    future_message { x: 1 }
    """
    (op,) = parse_ge_graph(text).ops
    assert op.name == "Add_2" and op.type == "Add"
    assert op.fx_tensor_names == (
        (None, "op-level"), (0, "mm-aten.mm.default.OUTPUT.0"), (1, "a-aten.a.default.OUTPUT.1"), (1, "b")
    )  # fmt: skip


def test_a_model_def_gives_its_first_graph():
    g = parse_ge_graph('name: "om" version: 1 graph { name: "main" op { name: "a" type: "Data" } } graph { }')
    assert (g.model_name, g.name, [op.name for op in g.ops]) == ("om", "main", ["a"])
    assert parse_ge_graph("").ops == ()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('op {\n  name: "a"\n  type: \n}\n', ":4:1"),
        ('op { name: "a" ', ":1:"),
        ("op { output_desc { dtype: DT_NOT_A_TYPE } }", ":1:"),
        ('name: "x" name: "y"', ":1:"),
        ("}", ":1:1"),
    ],
)
def test_malformed_text_is_a_ge_graph_error_with_line_and_column(tmp_path, text, where):
    p = tmp_path / "dynamo_original_graph_1_rank_0_pid_1_ts_1.txt"
    p.write_text(text)
    with pytest.raises(GeGraphError) as err:
        read_ge_graph(p)
    assert f"{p}{where}" in str(err.value)


def test_not_utf8_and_deep_nesting(tmp_path):
    p = tmp_path / "g.txt"
    p.write_bytes(b'op { name: "\xff" }')
    with pytest.raises(GeGraphError, match="UTF-8"):
        read_ge_graph(p)
    deep = 'op { attr { key: "k" value { func { ' * 400 + "}" * 1600
    with pytest.raises(GeGraphError):
        parse_ge_graph(deep)
