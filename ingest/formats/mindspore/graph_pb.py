"""Parse `graphs/ms_output_trace_code_graph_{graph_id}.pb`, MindSpore's debugger `ModelProto`.

The `.pb` is the preferred graph source when it exists (the `.ir` parser is the fallback), so
it yields the same `ParsedGraph` shape, with the same node keys (see `ingest.formats.graph_model`):

- nodes: one per `NodeProto` (CNodes; the `.pb` has no Return node) plus one per
  `GraphProto.parameters` entry, keyed like the `.ir` (`"{graph}:%{N}"` for apply index N+1,
  `"%para{i}"` for the i-th parameter);
- inputs: data / control edges from `InputProto.type`; constants (`const_vals`) keep their
  operand position as `"const:cstN"`;
- op types, full names, output dtypes and shapes from `output_type` (tuples flattened into
  output slots, as in the `.ir` parser); input types are taken from each operand's producer;
- source frames from `source_address`, read with the same frame-line parser as the `.ir`. The
  `.pb` stores each stack innermost first (and a "Corresponding ... candidate" stack marks its
  first frame `#  - In file`); frames are reversed per stack so depth 0 is the outermost frame,
  as in the `.ir`.

- a call node (a CNode whose callee is not a primitive: a graph, a node's result, a parameter)
  is an empty `NodeProto` in the file, which still takes its apply index: it becomes op_type
  `call` with no inputs, full name or frames (`graph_rows.parse_graph` then prefers a clean
  `.ir`, which has all of that).

The file is a `ModelProto` (MindSpore >= 1.1) or a bare `GraphProto` (~1.0), told apart by the
wire types of the top-level fields. A truncated or corrupt file becomes an error entry
(protobuf's decode error), and the complete `NodeProto`s before the cut are salvaged by walking
the wire format by hand.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from google.protobuf.message import DecodeError

from ingest.formats.graph_model import (
    GRAPH_FILE,
    GraphNode,
    ParsedGraph,
    SourceFrame,
    is_frame_line,
    parse_frame_line,
)
from ingest.formats.limits import MetadataCaps, MetadataTooLarge, read_capped
from ingest.formats.mindspore import debug_graph_pb2 as pb
from ingest.formats.numbers import parse_uint

_KERNEL_GRAPH = re.compile(r"kernel_graph_?(\d+)$")
_CANDIDATE_START = re.compile(r"^\s*#\s*-\s+In file ")

# DataType -> the type name the .ir prints (`Tensor[Float32]`, `<Int64, NoShape>`, `UMonad`).
DTYPE_NAMES: dict[int, str] = {
    pb.DT_UNDEFINED: "Undefined",
    pb.DT_BOOL: "Bool",
    pb.DT_INT8: "Int8",
    pb.DT_INT16: "Int16",
    pb.DT_INT32: "Int32",
    pb.DT_INT64: "Int64",
    pb.DT_UINT8: "UInt8",
    pb.DT_UINT16: "UInt16",
    pb.DT_UINT32: "UInt32",
    pb.DT_UINT64: "UInt64",
    pb.DT_FLOAT16: "Float16",
    pb.DT_FLOAT32: "Float32",
    pb.DT_FLOAT64: "Float64",
    pb.DT_BFLOAT16: "BFloat16",
    pb.DT_INT4: "Int4",
    pb.DT_STRING: "String",
    pb.DT_TENSOR: "Tensor",
    pb.DT_GRAPH: "Func",
    pb.DT_TUPLE: "Tuple",
    pb.DT_LIST: "List",
    pb.DT_DICT: "Dictionary",
    pb.DT_NONE: "None",
    pb.DT_SYM_INST: "SymInst",
    pb.DT_BASE_INT: "Int",
    pb.DT_BASE_UINT: "UInt",
    pb.DT_BASE_FLOAT: "Float",
    pb.DT_TYPE: "TypeType",
    pb.DT_ANY: "Any",
    pb.DT_REFKEY: "RefKey",
    pb.DT_REF: "Ref",
    pb.DT_UMONAD: "UMonad",
    pb.DT_IOMONAD: "IOMonad",
}
# Prefix the .ir prints on a scalar attribute value: `I64(1)`, `U8(3)`.
_INT_PREFIX = {
    pb.DT_INT8: "I8",
    pb.DT_INT16: "I16",
    pb.DT_INT32: "I32",
    pb.DT_INT64: "I64",
    pb.DT_UINT8: "U8",
    pb.DT_UINT16: "U16",
    pb.DT_UINT32: "U32",
    pb.DT_UINT64: "U64",
}
_FLOAT_PREFIX = {pb.DT_FLOAT16: "F16", pb.DT_FLOAT32: "F32", pb.DT_FLOAT64: "F64"}


def parse_graph_pb_file(path: str | Path, caps: MetadataCaps | None = None) -> ParsedGraph:
    """Parse a `.pb` file; the graph id comes from the `..._graph_{id}.pb` file name. A file over
    the `graph` cap raises MetadataTooLarge (it is decoded whole, so it is not read)."""
    p = Path(path)
    m = GRAPH_FILE.match(p.name)
    graph_id = int(m.group(1)) if m else None
    try:
        data = read_capped(p, "graph", caps)
    except MetadataTooLarge:
        raise
    except OSError as exc:
        return ParsedGraph(graph_id=graph_id, source="pb", errors=[("file", f"cannot read {p.name}: {exc}")])
    return parse_graph_pb(data, graph_id)


def parse_graph_pb(data: bytes, graph_id: int | None = None) -> ParsedGraph:
    """Decode a serialized `debugger.ModelProto`, or a bare `GraphProto` (MindSpore ~1.0 wrote
    the graph without the ModelProto around it); a decode error becomes an error entry."""
    result = ParsedGraph(graph_id=graph_id, source="pb")
    bare = _is_bare_graph(data)
    if bare:
        graph = pb.GraphProto()
        parse = graph.ParseFromString
    else:
        model = pb.ModelProto()
        parse = model.ParseFromString
    try:
        parse(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        parts = _salvage(data, result, bare)
        result.errors.insert(0, ("file", f"protobuf decode failed ({exc}); salvaged {len(parts.node)} nodes"))
        _build(parts, result, salvaged=True)
        return result
    if not bare:
        if not model.HasField("graph"):
            result.errors.append(("file", "ModelProto has no graph (empty or not a MindSpore .pb?)"))
            return result
        graph = model.graph
    elif not (_t(graph.name) or any(n.op_type for n in graph.node)):
        # bytes that happen to decode as a GraphProto, with neither a name nor an operator
        result.errors.append(("file", "neither a ModelProto nor a named GraphProto: not a MindSpore .pb?"))
        return result
    if not _t(graph.name):
        result.errors.append(("graph", "GraphProto has no name: the file is probably cut short"))
    _build(graph, result)
    return result


# --- which message ---------------------------------------------------------------------------------

# GraphProto fields that are length-delimited where ModelProto's field of the same number is a
# varint (1: node / ir_version, 3: parameters / model_version) or does not exist (5, 6).
_GRAPH_ONLY_FIELDS = frozenset({1, 3, 5, 6})


def _is_bare_graph(data: bytes) -> bool:
    """True when the top-level fields are a GraphProto's rather than a ModelProto's.

    A ModelProto (every MindSpore from 1.1 on) starts with `ir_version`, a varint in field 1,
    and holds the graph in field 4. A bare GraphProto (~1.0) starts with its nodes, messages in
    field 1, and has fields 3, 5, 6 as messages or strings, which a ModelProto never has. The
    wire types alone decide: the protobuf decoder would not fail on the wrong message, it would
    read a GraphProto's `outputs` (field 4) as a ModelProto's graph.
    """
    graph_like = model_like = False
    for field_no, wire, _ in _fields(data):
        if wire == 2 and field_no in _GRAPH_ONLY_FIELDS:
            graph_like = True
        elif wire == 0 and field_no in (1, 3):
            model_like = True
        if graph_like or model_like:
            break
    return graph_like and not model_like


# --- salvage -------------------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[pos]  # IndexError at the end of the data: the caller stops there
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes):
    """(field number, wire type, value) of each complete field; stops at the first cut one."""
    pos = 0
    n = len(data)
    while pos < n:
        try:
            tag, pos = _varint(data, pos)
            field_no, wire = tag >> 3, tag & 7
            if wire == 0:
                value, pos = _varint(data, pos)
            elif wire == 2:
                length, pos = _varint(data, pos)
                if pos + length > n:
                    yield field_no, wire, None  # cut inside this field
                    return
                value = data[pos : pos + length]
                pos += length
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
                if pos + size > n:
                    return
                value = data[pos : pos + size]
                pos += size
            else:
                return
        except (IndexError, ValueError):
            return
        yield field_no, wire, value


def _salvage(data: bytes, result: ParsedGraph, bare: bool = False) -> pb.GraphProto:
    """The complete GraphProto fields found before a cut, parsed one by one."""
    graph = pb.GraphProto()
    graph_bytes = data if bare else None
    for field_no, wire, value in () if bare else _fields(data):
        if field_no == 4 and wire == 2:
            graph_bytes = value
            if value is None:  # the graph itself is cut: take what is there
                start = _graph_payload_start(data)
                graph_bytes = data[start:] if start is not None else b""
            break
    if graph_bytes is None:
        return graph
    containers = {
        1: graph.node,
        3: graph.parameters,
        4: graph.outputs,
        5: graph.const_vals,
    }
    for field_no, wire, value in _fields(graph_bytes):
        if wire != 2 or value is None:
            continue
        try:
            if field_no in containers:
                containers[field_no].add().ParseFromString(value)
            elif field_no == 2:
                graph.name = value.decode("utf-8", "replace")
            elif field_no == 6:
                graph.root_name = value.decode("utf-8", "replace")
        except (DecodeError, ValueError, RuntimeError) as exc:
            result.errors.append(("salvage", f"GraphProto field {field_no} unreadable: {exc}"))
            if field_no in containers:
                del containers[field_no][-1:]  # drop the half-filled entry
    return graph


def _graph_payload_start(data: bytes) -> int | None:
    pos = 0
    try:
        while pos < len(data):
            tag, pos = _varint(data, pos)
            field_no, wire = tag >> 3, tag & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 2:
                length, pos = _varint(data, pos)
                if field_no == 4:
                    return pos
                pos += length
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return None
    except (IndexError, ValueError):
        return None
    return None


# --- types and values ----------------------------------------------------------------------------


def _dtype_name(value: int) -> str:
    return DTYPE_NAMES.get(value, f"DT_{value}")


def type_leaves(t: pb.TypeProto, top: bool = True) -> list[tuple[str | None, list[int] | None]]:
    """(dtype, shape) per output slot; tuples flattened, as the .ir parser does.

    A tensor without a `shape` is 0-d at the top level (the schema's rule, and what the .ir
    says for every such node in the samples), but inside a tuple MindSpore's exporter never
    writes shapes at all, so there the shape is unknown (None), not [].
    """
    which = t.WhichOneof("value")
    if which == "tensor_type":
        tt = t.tensor_type
        if not top and not tt.HasField("shape"):
            return [(_dtype_name(tt.elem_type), None)]
        return [(_dtype_name(tt.elem_type), [d.size for d in tt.shape.dim])]
    if which == "sequence_type":
        out: list[tuple[str | None, list[int] | None]] = []
        for e in t.sequence_type.elem_types:
            out.extend(type_leaves(e, top=False))
        return out
    if t.data_type in (pb.DT_TUPLE, pb.DT_LIST):
        return []
    return [(_dtype_name(t.data_type), None)]


def _shape_text(shape: list[int] | None) -> str:
    return "NoShape" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def type_text(t: pb.TypeProto, top: bool = True) -> str:
    """An .ir-like rendering of a TypeProto (`<Tensor[Float32], (2, 3)>`); not byte-identical."""
    which = t.WhichOneof("value")
    if which == "tensor_type":
        tt = t.tensor_type
        shape = [d.size for d in tt.shape.dim] if top or tt.HasField("shape") else None
        return f"<Tensor[{_dtype_name(tt.elem_type)}], {_shape_text(shape)}>"
    if which == "sequence_type" or t.data_type in (pb.DT_TUPLE, pb.DT_LIST):
        kind = "List" if t.data_type == pb.DT_LIST else "Tuple"
        elems = [type_text(e, top=False)[1:-1].split(", ", 1) for e in t.sequence_type.elem_types]
        names = ",".join(e[0] for e in elems)
        shapes = ", ".join(e[1] if len(e) > 1 else "NoShape" for e in elems)
        return f"<{kind}[{names}], {kind}Shape({shapes})>"
    return f"<{_dtype_name(t.data_type)}, NoShape>"


def value_text(v: pb.ValueProto, top: bool = True) -> str:
    """An attribute value as the .ir prints it: `Bool(1)`, `I64(1)`, `(0, 2)`, `"valid"`, `[x, w]`."""
    dt = v.dtype
    if dt == pb.DT_BOOL:
        return f"Bool({int(v.bool_val)})" if top else str(v.bool_val)
    if dt in _INT_PREFIX:
        num = v.uint_val if v.HasField("uint_val") else v.int_val
        return f"{_INT_PREFIX[dt]}({num})" if top else str(num)
    if dt in _FLOAT_PREFIX:
        num = v.double_val if v.HasField("double_val") else v.float_val
        text = f"{_f32(num) if dt != pb.DT_FLOAT64 else num:g}"
        return f"{_FLOAT_PREFIX[dt]}({text})" if top else text
    if dt == pb.DT_STRING:
        text = _t(v.str_val)
        return f'"{text}"' if top else text
    if dt in (pb.DT_TUPLE, pb.DT_LIST) or v.values:
        inner = ", ".join(value_text(e, top=False) for e in v.values)
        return f"[{inner}]" if dt == pb.DT_LIST else f"({inner})"
    if dt == pb.DT_TYPE and v.HasField("type_val"):
        return _dtype_name(v.type_val.data_type)
    if dt == pb.DT_NONE:
        return "None"
    return _dtype_name(dt)


def _f32(x: float) -> float:
    """The float32 nearest to x, as MindSpore prints it; a double beyond float32 stays as it is."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return x


# --- source frames -------------------------------------------------------------------------------


def frames_from_source_address(text: str) -> tuple[list[SourceFrame], list[str]]:
    """Frames (depth 0 = outermost) from a `source_address`, and the lines that were not frames.

    The `.pb` writes each stack innermost first; a new stack starts after a
    `# Corresponding ... candidate:` line or at a `#  - In file` line. Each stack is reversed so
    the order matches the `.ir`.
    """
    stacks: list[list[str]] = [[]]
    bad: list[str] = []
    for raw in text.split("\n"):
        s = raw.strip()
        if not s:
            continue
        if s.startswith(("# Corresponding", "# Comment:")) or s.startswith("<~~"):
            if stacks[-1]:
                stacks.append([])
            continue
        if is_frame_line(s):
            if _CANDIDATE_START.match(s) and stacks[-1]:
                stacks.append([])
            stacks[-1].append(s)
        else:
            bad.append(s)
    frames: list[SourceFrame] = []
    for stack in stacks:
        for s in reversed(stack):
            frame = parse_frame_line(s, len(frames))
            if frame is None:
                bad.append(s)
            else:
                frames.append(frame)
    return frames, bad


# --- building the ParsedGraph ----------------------------------------------------------------------


def _is_empty_node(n: pb.NodeProto) -> bool:
    return not (n.name or n.op_type or n.input or n.full_name or n.attribute or n.HasField("output_type"))


def _node_names(graph: pb.GraphProto) -> list[str]:
    """Each node's name; a node without one (the empty NodeProto of a call, see `_build`) gets
    its apply index.

    Nodes are named by their 1-based apply index (`"1"`, `"2"`, ...), and the empty NodeProto
    of a call node still takes its number: in the control_flow sample `'11', '', '13'`, and
    node 13 reads node `'12'`. So an empty node is named by its position, when every named
    node's name is its position; otherwise (not the layout MindSpore writes) it is `"#<position>"`.
    """
    names = [_t(n.name) for n in graph.node]
    positional = all(name == str(i) for i, name in enumerate(names, start=1) if name)
    return [name or (str(i) if positional else f"#{i}") for i, name in enumerate(names, start=1)]


def _t(value: str | bytes) -> str:
    """A proto2 string field as text: protobuf hands back bytes when they are not valid UTF-8."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _build(graph: pb.GraphProto, result: ParsedGraph, salvaged: bool = False) -> None:
    """Fill result from a (complete or salvaged) GraphProto.

    In a salvaged graph the parameters and constants, which the file stores after the nodes, are
    usually lost: inputs naming them get the key `"unresolved:{name}"` and one error entry in all.
    """
    graph_name = _t(graph.name)
    gname = graph_name or "graph"
    result.graph_name = graph_name or None
    if result.graph_id is None and graph_name:
        m = _KERNEL_GRAPH.search(graph_name)
        if m:
            result.graph_id = int(m.group(1))
    ref_key: dict[str, str] = {}
    ref_type: dict[str, str] = {}
    nodes: list[GraphNode] = []

    for i, par in enumerate(graph.parameters, start=1):
        key = f"%para{i}"
        pname = _t(par.name)
        leaves = type_leaves(par.type) if par.HasField("type") else []
        text = type_text(par.type) if par.HasField("type") else ""
        node = GraphNode(
            node_key=key,
            graph_name=gname,
            op_type="Parameter",
            full_name=None,
            is_parameter=True,
            output_types=[text] if text else [],
            output_dtypes=[d for d, _ in leaves],
            output_shapes=[s for _, s in leaves],
            name=pname or None,
        )
        nodes.append(node)
        ref_key.setdefault(pname, key)
        ref_type.setdefault(pname, text)
    for c in graph.const_vals:
        ckey = _t(c.key)
        ref_key.setdefault(ckey, "const:" + ckey)
        if c.HasField("value"):
            dt = c.value.dtype
            ref_type.setdefault(ckey, f"<{_dtype_name(dt)}, NoShape>" if dt != pb.DT_TENSOR else "")
    names = _node_names(graph)
    for n, name in zip(graph.node, names, strict=True):
        index = parse_uint(name)
        key = f"{gname}:%{index - 1}" if index else f"{gname}:{name}"
        ref_key.setdefault(name, key)
        ref_type.setdefault(name, type_text(n.output_type) if n.HasField("output_type") else "")

    unresolved = 0
    for n, name in zip(graph.node, names, strict=True):
        key = ref_key.get(name, f"{gname}:{name}")
        if _is_empty_node(n):
            # a CNode whose callee is not a primitive (a call of a graph, a node's result or a
            # parameter): MindSpore's exporter writes an empty NodeProto for it, in its place
            nodes.append(GraphNode(node_key=key, graph_name=gname, op_type="call", full_name=None))
            continue
        leaves = type_leaves(n.output_type) if n.HasField("output_type") else []
        inputs: list[tuple[str, str]] = []
        in_types: list[str] = []
        for inp in n.input:
            iname = _t(inp.name)
            target = ref_key.get(iname)
            if target is None:
                unresolved += 1
                if not salvaged:
                    reason = f"input {iname!r} names no node, parameter or constant"
                    result.errors.append((f"node {name}", reason))
                target = "unresolved:" + iname
            inputs.append((target, "control" if inp.type == pb.InputProto.CONTROL_EDGE else "data"))
            in_types.append(ref_type.get(iname, ""))
        node = GraphNode(
            node_key=key,
            graph_name=gname,
            op_type=_t(n.op_type),
            full_name=_t(n.full_name) or None,
            attributes={_t(a.name): value_text(a.value) for a in n.attribute},
            input_types=in_types,
            output_types=[type_text(n.output_type)] if n.HasField("output_type") else [],
            output_dtypes=[d for d, _ in leaves],
            output_shapes=[s for _, s in leaves],
            inputs=inputs,
        )
        nodes.append(node)
        source = _t(n.source_address)
        if source:
            frames, bad = frames_from_source_address(source)
            if frames:
                result.frames[key] = frames
            for line in bad:
                result.errors.append((f"node {name}", f"unknown source_address line: {line[:160]!r}"))
    result.nodes.extend(nodes)
    if salvaged and unresolved:
        reason = f"{unresolved} inputs name parameters or constants lost with the end of the file"
        result.errors.append(("salvage", reason))
