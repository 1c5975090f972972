"""Data model shared by the graph parsers (`.ir` text and `.pb` ModelProto).

Both `ingest.formats.mindspore.ir_text` and `ingest.formats.mindspore.graph_pb` return a
`ParsedGraph`, so the catalog can take the
`.pb` when it exists and the `.ir` otherwise without caring which one it got. The source-trace
line parser lives here too: the `.ir` prints one `# In file ...` line per stack frame and the
`.pb` stores the same lines in `NodeProto.source_address`, so both parsers call
`parse_frame_line` and a frame is read the same way whichever file it came from.

Node keys (identical in both parsers, so edges and frames can be compared):

- a CNode: `"{subgraph}:%{N}"`, where `%N` is the node's index in the `.ir` subgraph
  (the `.pb` names CNodes by their 1-based apply index, `"N+1"`);
- a Return node (`.ir` only; the `.pb` has no Return node): `"{subgraph}:Return"`;
- a parameter: `"%para{N}"` (`%paraN` numbering is per file in the `.ir`; the `.pb` lists the
  parameters in the same order);
- an operand that is not a node (a literal in the `.ir`, a `const_vals` entry in the `.pb`, a
  graph): `"const:{text}"`. These appear in `GraphNode.inputs` to keep operand positions (input
  slot *i* of a kernel is operand *i*) but are not nodes, and their text differs between the two
  sources (`const:Bool(0)` against `const:cst3`).

A call node (a CNode whose callee is a graph, another node's result or a parameter, not a
primitive: control flow) has op_type `"call"` and its callee as operand 0, before the call's
arguments; the `.ir` also gives attributes `callee` (as printed) and `callee_abstract` (the
bracketed `@FuncUnion(@a, @b)` / `@@g` / `@Partial(@g)`). The `.pb` keeps nothing of a call but
its place: MindSpore writes it as an empty NodeProto.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ingest.formats.numbers import INT32_MAX, parse_int

# The graph files of a dump: `graphs/ms_output_trace_code_graph_{graph_id}.ir` and `.pb`.
GRAPH_FILE = re.compile(r"^ms_output_trace_code_graph_(\d+)\.(pb|ir)$")


# --- source frames -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceFrame:
    """One stack frame of a node's source trace; frozen because the parsers share instances."""

    depth: int  # 0 = outermost frame (the cell's construct); the last frame is the innermost
    file: str
    line: int
    line_end: int | None
    col_start: int | None
    col_end: int | None
    code: str  # the source line as MindSpore printed it, stripped
    is_user_code: bool


_FRAMEWORK_MARKERS = (
    "site-packages/mindspore", "/mindspore/", "dist-packages", "<frozen",
    # PyTorch stacks (msprobe): the framework, its NPU plugin, TorchAir and msprobe's own hooks
    "site-packages/torch/", "site-packages/torch_npu/", "site-packages/torchair/", "site-packages/msprobe/",
)  # fmt: skip


def is_framework_path(path: str) -> bool:
    """True for a frame inside the framework or the Python runtime, not the user's script.

    The single place where "user code" is decided: a path under an installed MindSpore
    (`site-packages/mindspore`, a `/mindspore/` package directory), PyTorch, torch_npu, TorchAir or
    msprobe, any `dist-packages` install, or a frozen stdlib module (`<frozen importlib._bootstrap>`).
    Backslashes are normalised so Windows paths follow the same rule.
    """
    p = path.replace("\\", "/")
    return any(marker in p for marker in _FRAMEWORK_MARKERS)


# `Location::ToString` by version (reference §4.4), after the "In file " that starts it:
#   <= 1.6   f.py(58)/code/
#   1.10-2.2 f.py:58/code/
#   >= 2.3   f.py:58, 12~25/code/   f.py:15~20, 4~16/code/   f.py:8462~8466/code/
# An optional "<~~This line of code can be shared ..." tail follows the closing slash.
_FRAME_BODY = re.compile(
    r"In file (?P<file>.+?)"
    r"(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?:~(?P<lend>\d+))?(?:, (?P<c0>-?\d+)~(?P<c1>-?\d+))?)"
    r"(?:/(?P<code>.*?)/?)?(?:<~~.*)?$"
)
# What may stand before "In file": the .ir's "# ", the .pb's "#  - " (first frame of a
# candidate) and "#    " (its other frames).
_FRAME_PREFIX = re.compile(r"^\s*#\s*(?:-\s+)?$")

_frame_cache: dict[tuple[str, int], SourceFrame] = {}
_FRAME_CACHE_MAX = 200_000


def is_frame_line(line: str) -> bool:
    """True if the line is a source-trace line (`# In file ...`) in either file's spelling."""
    i = line.find("In file ")
    return i >= 0 and _FRAME_PREFIX.match(line, 0, i) is not None


def parse_frame_line(line: str, depth: int) -> SourceFrame | None:
    """Parse one `# In file ...` line (any version, `.ir` or `.pb` spelling); None if malformed.

    Results are cached by (text, depth): real traces repeat the same outer frames on every node,
    and the cache is what keeps the `.ir` parser fast on big graphs.
    """
    key = (line, depth)
    hit = _frame_cache.get(key)
    if hit is not None:
        return hit
    i = line.find("In file ")
    if i < 0:
        return None
    body = line[i:].rstrip("\r\n")
    m = _FRAME_BODY.match(body)
    if m is None or _FRAME_PREFIX.match(line, 0, i) is None:
        return None
    file, l1, l2, lend, c0, c1, code = m.group("file", "l1", "l2", "lend", "c0", "c1", "code")
    texts = (l1 if l1 is not None else l2, lend, c0, c1)
    numbers = [None if t is None else parse_int(t, INT32_MAX) for t in texts]
    if any(n is None and t is not None for n, t in zip(numbers, texts, strict=True)):
        return None  # a line or column no source file has: malformed
    line_no, line_end, col_start, col_end = numbers
    frame = SourceFrame(
        depth=depth,
        file=file,
        line=line_no,
        line_end=line_end,
        col_start=col_start,
        col_end=col_end,
        code=(code or "").strip(),
        is_user_code=not is_framework_path(file),
    )
    if len(_frame_cache) >= _FRAME_CACHE_MAX:
        _frame_cache.clear()
    _frame_cache[key] = frame
    return frame


def frame_cache_dict() -> dict[tuple[str, int], SourceFrame]:
    """The frame cache itself, keyed by (line as passed, depth): the .ir parser's hot loop reads it."""
    return _frame_cache


def clear_frame_cache() -> None:
    """Forget cached frames (for benchmarks that must not carry work across runs)."""
    _frame_cache.clear()


def innermost_user_frame(frames: list[SourceFrame] | None) -> SourceFrame | None:
    """The deepest frame in user code (the line of the user's script that made the op), or None."""
    if not frames:
        return None
    for frame in reversed(frames):
        if frame.is_user_code:
            return frame
    return None


# --- graph -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class GraphNode:
    """One node (CNode, Return or parameter) of a graph, as either parser sees it.

    Output fields are per output *slot*: a tuple-typed output (BatchNorm's five tensors) is
    flattened to its leaves, matching the `output.{slot}` numbering of dump files. `output_types`
    keeps the host type text as printed, one entry per top-level output. A non-tensor leaf
    (`<Int64, NoShape>`, `UMonad`) has its type name as dtype and shape None; a 0-d tensor has
    shape []. Device fields come from the `.ir` device line (after kernel select) only.
    """

    node_key: str
    graph_name: str
    op_type: str
    full_name: str | None
    is_parameter: bool = False
    attributes: dict[str, str] = field(default_factory=dict)
    input_types: list[str] = field(default_factory=list)
    output_types: list[str] = field(default_factory=list)
    output_shapes: list[list[int] | None] = field(default_factory=list)
    output_dtypes: list[str | None] = field(default_factory=list)
    device_formats: list[str] = field(default_factory=list)
    device_dtypes: list[str | None] = field(default_factory=list)
    device_shapes: list[list[int] | None] = field(default_factory=list)
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (operand key, 'data'|'control')
    name: str | None = None  # parameter name (`conv.weight`); None for CNodes
    line: int | None = None  # 1-based line of the node in the .ir; None from the .pb


@dataclass(slots=True)
class ParsedGraph:
    """A parsed graph file: nodes in file order, source frames per node key, and what went wrong.

    `errors` never stops parsing: each entry is (line number or location, reason), and the nodes
    parsed before and after a bad spot are still returned.
    """

    graph_id: int | None
    source: str  # 'pb' | 'ir'
    nodes: list[GraphNode] = field(default_factory=list)
    frames: dict[str, list[SourceFrame]] = field(default_factory=dict)
    errors: list[tuple[int | str, str]] = field(default_factory=list)
    graph_name: str | None = None  # the entry graph (`kernel_graph0`)
    lines: int = 0  # non-blank lines read (the .ir parser; 0 from the .pb)

    def by_full_name(self) -> dict[str, GraphNode]:
        """Nodes that have a full name, keyed by it."""
        return {n.full_name: n for n in self.nodes if n.full_name}

    def user_line_map(self) -> dict[str, tuple[str, int]]:
        """full_name -> (file, line) of the innermost user frame, for nodes that have one."""
        out: dict[str, tuple[str, int]] = {}
        for n in self.nodes:
            if not n.full_name:
                continue
            f = innermost_user_frame(self.frames.get(n.node_key))
            if f is not None:
                out[n.full_name] = (f.file, f.line)
        return out


# --- type text helpers (shared: the .pb parser renders its TypeProto leaves with the same names) ---

# v1 shorthand names that appear in old type text (`Ref[Tensor(F32)]`), mapped to the full names.
SHORT_DTYPES = {
    "F16": "Float16",
    "F32": "Float32",
    "F64": "Float64",
    "BF16": "BFloat16",
    "I8": "Int8",
    "I16": "Int16",
    "I32": "Int32",
    "I64": "Int64",
    "U8": "UInt8",
    "U16": "UInt16",
    "U32": "UInt32",
    "U64": "UInt64",
    "C64": "Complex64",
    "C128": "Complex128",
}
