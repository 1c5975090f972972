"""Write the `graphs/` and `execution_order/` folders of a MindSpore 1.0-1.2 dump from the ones a
real MindSpore 2.10 run wrote: the same operators and the same Python lines, in the 1.x forms.

No MindSpore 1.x runs here, so the 1.x forms are made strictly from the reference
(mindspore-dump-formats.md):

- `graphs/ms_output_trace_code_graph_{g}.pb` (§2.4): the real `debugger.ModelProto`, decoded and
  encoded again with protobuf, each node's `source_address` frame rewritten from the 2.x
  `# In file f.py:58, 12~25/code/` to the ≤1.6 `# In file f.py(58)/code/` (§4.4);
- `graphs/ms_output_trace_code_graph_{g}.ir` (§4.1-4.4): the same graph printed in the v1.x
  grammar — `#IR entry      : @kernel_graph_{g}` header, `%paraN_name : <Tensor[Float32]x[const
  vector][2, 3]>` parameters, one `%N = Op(operands)` line per node with its host types
  `: (<in>) -> (<out>)`, its full name `      : (Default/…/Op-opN)` and its frames outermost
  first in the ≤1.6 form;
- `execution_order/ms_execution_order_graph_{g}.csv` (§2.1): copied; its format has not changed
  since v1.2 (`ms_global_execution_order_graph_{g}.csv` came in v1.6, §2.2: not written).

`check_v1_graphs` decodes a written .pb back with the protobuf library and compares it with the
source, so the test data is checked by a parser that is not dumpcat's.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ingest.formats.mindspore import debug_graph_pb2 as pb

_FRAME_2X = re.compile(r"^(\s*# In file )(.+?):(\d+)(?:~\d+)?(?:, -?\d+~-?\d+)?/(.*)$")
_GRAPH_FILE = re.compile(r"^ms_output_trace_code_graph_(\d+)\.pb$")


def frame_v1(line: str) -> str:
    """A 2.x frame line in the ≤1.6 form: `# In file f.py:58, 12~25/x/` -> `# In file f.py(58)/x/`."""
    m = _FRAME_2X.match(line)
    return line if m is None else f"{m.group(1)}{m.group(2)}({m.group(3)})/{m.group(4)}"


def _source_v1(address: str) -> str:
    return "".join(frame_v1(line) + "\n" for line in address.splitlines() if line.strip())


def _elem(code: int) -> str:
    """`DT_FLOAT32` -> `Float32`, `DT_UINT8` -> `UInt8`, as the IR prints a TypeId."""
    name = pb.DataType.Name(code).removeprefix("DT_")
    return "UInt" + name[4:] if name.startswith("UINT") else name.capitalize()


def type_v1(t: pb.TypeProto) -> str:
    """A host type in the v1.0-1.6 syntax: `<Tensor[Float32]x[const vector][2, 3]>`."""
    if t.data_type == pb.DT_TENSOR:
        dims = ", ".join(str(d.size) for d in t.tensor_type.shape.dim)
        return f"<Tensor[{_elem(t.tensor_type.elem_type)}]x[const vector][{dims}]>"
    if t.data_type == pb.DT_TUPLE:
        inner = ", ".join(type_v1(e)[1:-1] for e in t.sequence_type.elem_types)
        return f"<Tuple[{inner}]>"
    return f"<{_elem(t.data_type)}>"


def _literal(value: pb.ValueProto) -> tuple[str, str]:
    """(operand text, type) of a constant operand."""
    if value.HasField("bool_val"):
        return f"Bool({int(value.bool_val)})", "<Bool>"
    if value.HasField("int_val"):
        return f"I64({value.int_val})", "<Int64>"
    if value.HasField("float_val"):
        return f"F32({value.float_val})", "<Float32>"
    return "U", "<UMonad>"


def ir_v1(model: pb.ModelProto, graph_id: int) -> str:
    """The graph of `model` as MindSpore ≤1.6 printed `ms_output_trace_code_graph_{g}.ir`."""
    g = model.graph
    name = f"kernel_graph_{graph_id}"
    params = {p.name: (f"%para{i}_{p.name}", type_v1(p.type)) for i, p in enumerate(g.parameters, 1)}
    consts = {c.key: _literal(c.value) for c in g.const_vals}
    nodes = {n.name: (f"%{i}", type_v1(n.output_type)) for i, n in enumerate(g.node)}
    out = [f"#IR entry      : @{name}", "#attrs         :", f"#Total params  : {len(params)}", ""]
    out += [f"{ref} : {t}" for ref, t in params.values()]
    out += ["", "#Total subgraph : 1", "", "subgraph attr:"]
    out.append(f"subgraph @{name}({', '.join(ref for ref, _ in params.values())}) {{")
    for n in g.node:
        known = (nodes, params, consts)
        operands = [next((m[i.name] for m in known if i.name in m), (i.name, "<None>")) for i in n.input]
        out.append(f"  {nodes[n.name][0]} = {n.op_type}({', '.join(ref for ref, _ in operands)})")
        out.append(f"      : ({', '.join(t for _, t in operands)}) -> ({nodes[n.name][1]})")
        out.append(f"      : ({n.full_name})")
        frames = [frame_v1(line) for line in n.source_address.splitlines() if line.strip()]
        out += frames[::-1]  # the .pb lists the innermost frame first, the v1 .ir the outermost
    for o in g.outputs:
        ref = nodes.get(o.name, (o.name, ""))[0]
        out += [f"  Return({ref})", f"      : ({type_v1(o.type)})"]
    out += ["}", ""]
    return "\n".join(out)


def write_v1_graphs(rank_dir: Path, dst: Path) -> int:
    """Write `graphs/` and `execution_order/` of the 1.x forms under `dst` from real `rank_dir`
    (a MindSpore ≥2.x rank_N/ folder). Returns the number of graphs written."""
    count = 0
    (dst / "graphs").mkdir(parents=True, exist_ok=True)
    for f in sorted((rank_dir / "graphs").glob("ms_output_trace_code_graph_*.pb")):
        graph_id = int(_GRAPH_FILE.match(f.name).group(1))
        model = pb.ModelProto()
        model.ParseFromString(f.read_bytes())
        ir = ir_v1(model, graph_id)
        for node in model.graph.node:
            node.source_address = _source_v1(node.source_address)
        (dst / "graphs" / f.name).write_bytes(model.SerializeToString())
        (dst / "graphs" / f.with_suffix(".ir").name).write_text(ir)
        count += 1
    for f in sorted((rank_dir / "execution_order").glob("ms_execution_order_graph_*.csv")):
        (dst / "execution_order").mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dst / "execution_order" / f.name)
    return count


def check_v1_graphs(rank_dir: Path, dst: Path) -> None:
    """Decode every written .pb with protobuf: the same nodes as the source, v1 frames only."""
    for f in sorted((rank_dir / "graphs").glob("ms_output_trace_code_graph_*.pb")):
        src, out = pb.ModelProto(), pb.ModelProto()
        src.ParseFromString(f.read_bytes())
        out.ParseFromString((dst / "graphs" / f.name).read_bytes())
        assert [n.full_name for n in out.graph.node] == [n.full_name for n in src.graph.node]
        for a, b in zip(src.graph.node, out.graph.node, strict=True):
            assert [frame_v1(x) for x in a.source_address.splitlines() if x.strip()] == (
                b.source_address.splitlines()
            )
            assert all(_FRAME_2X.match(x) is None for x in b.source_address.splitlines())
