"""Read the GE graph dumps TorchAir / msprobe write beside a GE dump (msprobe-cann-formats.md §2.1):
`dynamo_original_{graph}_rank_{r}_pid_{pid}_ts_{t}.txt` and `dynamo_optimized_...txt`.

Each is the protobuf TEXT format of one GE `GraphDef` (TorchAir's `dump_graph` writes `str(graph)`
for a `.txt` path); a `ModelDef` holding graphs is accepted too (its `graph[0]` is the main graph).
The messages are ingest/formats/ascend/ge_ir.proto (GE's `ge.proto` package, same field numbers), parsed
by the protobuf package's own `text_format` parser.

What is kept per op: name, type, the `input` edges as written (`"{op}:{output index}"`, a control
edge `"{op}:-1"`), and the `_fx_tensor_name` links to the FX side. TorchAir sets that attr on each
GE output tensor of a converted FX node, `op.output_desc[i].attr["_fx_tensor_name"].s =
"{fx node name}-{fx node target}.OUTPUT.{i}"` (Ascend/torchair fx2ge_converter.py `parse_node`):
a single string per output tensor, which is the file-name prefix of the FX eager dump npy
`{node}-{aten op}.OUTPUT.{idx}.{timestamp}.npy`. The reader also takes the attr from the op's own
`attr` map (output index None) and a list value (`list { s: ... }`), in case other writers put it
there; input descs are not read (they describe the producer's tensor).

Leniency: the text is parsed with `allow_unknown_field=True` and `allow_unknown_extension=True`, so
fields newer GE versions add are skipped (the protobuf library may log a warning for each) instead
of failing the file. Unknown enum value NAMES (e.g. a `dtype` newer than DT_COMPLEX32) cannot be
skipped by the standard parser and make the file a GeGraphError, like any text that does not parse;
the message names the line and column.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.formats.limits import MetadataCaps, read_capped

if TYPE_CHECKING:
    from ingest.formats.ascend import ge_ir_pb2

FX_TENSOR_NAME_ATTR = "_fx_tensor_name"


class GeGraphError(ValueError):
    """The file is not a GE graph in protobuf text format; the message says where it fails."""


@dataclass(frozen=True, slots=True)
class GeOp:
    name: str
    type: str
    inputs: tuple[str, ...]  # OpDef.input as written: "{op}:{output index}" ("{op}:-1": control edge)
    # (output index, FX tensor name) for every `_fx_tensor_name` value; index None: from op.attr
    fx_tensor_names: tuple[tuple[int | None, str], ...]


@dataclass(frozen=True, slots=True)
class GeGraph:
    name: str
    ops: tuple[GeOp, ...]
    model_name: str | None = None  # set when the file held a ModelDef


def _strings(attr: ge_ir_pb2.AttrDef) -> list[str]:
    kind = attr.WhichOneof("value")
    if kind == "s":
        return [attr.s.decode("utf-8", "replace")]
    if kind == "list":
        return [s.decode("utf-8", "replace") for s in attr.list.s]
    return []


def _op(op: ge_ir_pb2.OpDef) -> GeOp:
    links: list[tuple[int | None, str]] = []
    if FX_TENSOR_NAME_ATTR in op.attr:
        links += [(None, s) for s in _strings(op.attr[FX_TENSOR_NAME_ATTR])]
    for i, desc in enumerate(op.output_desc):
        if FX_TENSOR_NAME_ATTR in desc.attr:
            links += [(i, s) for s in _strings(desc.attr[FX_TENSOR_NAME_ATTR])]
    return GeOp(op.name, op.type, tuple(op.input), tuple(links))


def _parse(text: str, message, where: str) -> None:
    from google.protobuf import text_format

    try:
        text_format.Parse(text, message, allow_unknown_extension=True, allow_unknown_field=True)
    except text_format.ParseError as e:
        line, column = e.GetLine(), e.GetColumn()
        at = f"{where}:{line}:{column}" if line is not None else where
        raise GeGraphError(f"{at}: not a GE graph in protobuf text format: {e}") from None
    except RecursionError:
        raise GeGraphError(f"{where}: not a GE graph: nested too deeply") from None


def parse_ge_graph(text: str, where: str = "<text>") -> GeGraph:
    """The graph of GE graph text `text` (`where` names it in error messages)."""
    from ingest.formats.ascend import ge_ir_pb2  # protobuf: imported by GE dumps only (start-up cost)

    graph = ge_ir_pb2.GraphDef()
    _parse(text, graph, where)
    model_name = None
    if not graph.op:
        model = ge_ir_pb2.ModelDef()
        _parse(text, model, where)
        if model.graph:
            graph, model_name = model.graph[0], model.name
    return GeGraph(graph.name, tuple(_op(op) for op in graph.op), model_name)


def read_ge_graph(path: str | os.PathLike[str], caps: MetadataCaps | None = None) -> GeGraph:
    """Read a `dynamo_{original|optimized}_*.txt` GE graph dump. GeGraphError if it does not parse;
    OSError if unreadable or over the `graph` cap (ingest.formats.limits: it is parsed whole)."""
    data = read_capped(path, "graph", caps)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GeGraphError(f"{os.fspath(path)}: not UTF-8 text (byte {e.start})") from None
    return parse_ge_graph(text, os.fspath(path))
