"""Parse MindSpore's text IR, `graphs/ms_output_trace_code_graph_{graph_id}.ir`, every generation.

The `.pb` beside it is preferred when it exists (`ingest.formats.mindspore.graph_pb`); this parser
is the fallback
for dumps without one, and the two must agree on the operator-to-source-line mapping. Forms
accepted (reference §4):

- headers: v2 (`# IR entry: @g`, `# Total subgraphs: N`, `# Attrs:`, `# Total params: N`,
  `# Params:`, `Node counting information:`, `subgraph attr:`, `subgraph instance: ...`,
  `# Order:`) and v1 (`#IR entry      : @g`, `#attrs         :`, `#Total params  : N`,
  `#Total subgraph : N`);
- parameters: `%para1_x: <Tensor[Float32], (2, 3)> : [2, 3]  :  <Float32xDefaultFormat...>  :
  IsWeight: false` (v2) and `%para1_x : <Tensor[Float32]x[const vector][2, 3]>` (v1);
- nodes: `%N(debug) = Op(operands) {instance name: n} primitive_attrs: {...} cnode_attrs: {...}`,
  `Return(%N)`, attribute blocks or tensor literals that wrap over several lines;
- call nodes, whose callee is not a primitive (control flow; the 2.x frontend IR of save_graphs):
  `call @g(...)`, `@g(...)`, `%5(...)`, `%5[@FuncUnion(@a, @b)](...)`, `%5[@@g](...)`,
  `%5[@Partial(@g)](...)`, `Parameter_934[@@g](...)` (a parameter of the file, printed bare),
  `$(@g:CNode_343)(...)`. They get op_type `call`, the callee as operand 0 (an edge when it is
  a node or parameter, `const:@g` for a graph) and attributes `callee` / `callee_abstract`;
- free variables `$(@g:%N)`, `$(@g:paraN_x)` (the file's `%paraN`) and `$(@g:name)` (the node
  of g with that debug name, when exactly one has it);
- frontend-IR extras: `subgraph @g parent: [subgraph @p](...) {`, a `jit config { ... }` header
  block, and `# SideEffect: { load }` under a node (kept as attribute `side_effect`);
- type lines: host `<Tensor[Float32], (32, 256, 13, 13)>` / v1 `<Tensor[Float32]x[const
  vector][32, 128]>`, device `<Float16xNC1HWC0[const vector]{...}>` / `[...]`, and the kernel
  object-type line `: (Tensor, Scalar) -> (Tensor)` (recognised, not kept);
- full names: `: (name)` (<=1.6), `# fullname_with_scope: (name)` (1.7-1.10),
  `# Fullname with scope: (name)` (2.x), `: full_name_with_scope: (name)` (docs only), and
  `# Scope: (scope)` when full names are switched off;
- source traces `# In file ...` in all three spellings (shared parser in `graph_model`).

The parser streams line by line: an unknown line inside a subgraph, an unparsable node line or a
truncated file becomes an entry in `ParsedGraph.errors` (with its line number) and everything else
is still returned. Numbers beyond any real graph (a 5,000-digit index) may raise ValueError, which
`graph_rows.parse_graph` records as the file's error.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable
from pathlib import Path

from ingest.formats.graph_model import (
    GRAPH_FILE,
    SHORT_DTYPES,
    GraphNode,
    ParsedGraph,
    SourceFrame,
    clear_frame_cache,
    frame_cache_dict,
    is_frame_line,
    parse_frame_line,
)
from ingest.formats.limits import MetadataCaps, MetadataTooLarge, open_text_capped
from ingest.formats.numbers import parse_uint

_KERNEL_GRAPH = re.compile(r"kernel_graph_?(\d+)$")
_NODE_HEAD = re.compile(r"%(\d+)(?:\(([^)]*)\))? = ")
_OP_CALL = re.compile(r"([^\s(){}\[\],=]+)\(")
_PARAM_DECL = re.compile(r"%para(\d+)_([^\s:]*)\s*:\s*(.*)$")
_PARAM_REF = re.compile(r"%para(\d+)_(\S*)$")
_FREE_VAR = re.compile(r"\$\(@([^:()]+):%(\d+)\)$")
# A free variable named by its debug name (`$(@g:CNode_343)`, `$(@g:x)`) or by its parameter
# (`$(@g:para27_x)`, which is `%para27_x` of the file), as 2.x prints them in call positions.
_FREE_VAR_NAME = re.compile(r"\$\(@([^:()]+):([^()]+)\)$")
_FREE_VAR_PARAM = re.compile(r"para(\d+)_")
# The callee of a node line: a primitive or parameter name, `%N`, `%paraN_x` or `@graph`.
_CALLEE = re.compile(r"[^\s(){}\[\],=]+")
_TYPE_GROUP = re.compile(r"<[^<>]*>")
_DEVICE_TYPE = re.compile(r"<([A-Za-z][A-Za-z0-9_]*?)x([A-Za-z0-9_]*)\[const vector\](.*)>$")
_INT = re.compile(r"-?\d+")
_BRACKETS = re.compile(r'[()\[\]{}",]')
_ATTR_LABEL = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_ ]*?):\s*)?\{")
_KEY_VALUE_LINE = re.compile(r"[A-Za-z_][\w .\-]*:")

FULLNAME_PREFIXES = (
    "# Fullname with scope: (",  # 2.x
    "# fullname_with_scope: (",  # 1.7 - 1.10
)
DOCS_FULLNAME_PREFIX = ": full_name_with_scope: ("  # docs only (r1.10 - r2.6 dump.md)
_MAX_CONTINUATION_LINES = 1000

NO_SUBGRAPH = "no subgraph found: not a MindSpore .ir file?"


def is_file_level_error(reason: str) -> bool:
    """True for an error about the whole file (truncated, no subgraph, nodes missing against the
    header's count), which the parser reports at the file's last line; False for one bad line."""
    return (
        reason.startswith("truncated: ")
        or reason == NO_SUBGRAPH
        or " nodes parsed but the header declares " in reason
    )


def parse_ir_file(path: str | Path, caps: MetadataCaps | None = None) -> ParsedGraph:
    """Parse a `.ir` file, streamed line by line; the graph id comes from the `..._graph_{id}.ir`
    file name. A file over the `graph` cap raises MetadataTooLarge (its nodes would all be held)."""
    p = Path(path)
    m = GRAPH_FILE.match(p.name)
    graph_id = int(m.group(1)) if m else None
    try:
        with open_text_capped(p, "graph", caps, encoding="utf-8", errors="replace", newline="") as fh:
            return _parse_lines(fh, graph_id)
    except MetadataTooLarge:
        raise
    except OSError as exc:
        return ParsedGraph(graph_id=graph_id, source="ir", errors=[(0, f"cannot read {p.name}: {exc}")])


def parse_ir_text(text: str, graph_id: int | None = None) -> ParsedGraph:
    """Parse `.ir` text; without graph_id, the id is taken from a `kernel_graph{N}` entry name."""
    return _parse_lines(text.split("\n"), graph_id)


def clear_caches() -> None:
    """Empty the parse caches (type text, attribute blocks, frames); for benchmarks and tests."""
    _host_cache.clear()
    _host_line_cache.clear()
    _block_cache.clear()
    _head_cache.clear()
    _device_cache.clear()
    clear_frame_cache()


# --- type text ---------------------------------------------------------------------------------


def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split at top-level separators (outside (), [], {} and quotes); parts are stripped."""
    parts: list[str] = []
    depth = 0
    start = 0
    in_str = False
    for i, ch in enumerate(s):
        if in_str:
            if ch == '"' and s[i - 1] != "\\":
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    last = s[start:].strip()
    if last or parts:
        parts.append(last)
    return parts


# `Tuple[Int64*N]` repeats an element N times; a bigger N is not expanded (a memory bomb).
_MAX_REPEAT = 100_000


def _dims(text: str) -> list[int]:
    """Integers of a shape text: `(2, 3)`, `[2, 3]`, `{2, 3}`, or the >10-dim `[i]:{v}` form."""
    if "]:{" in text:
        return [int(v) for v in re.findall(r"\]:\{(-?\d+)\}", text)]
    return [int(v) for v in _INT.findall(text)]


def _type_leaves(t: str) -> list[str]:
    """Leaf element types of a host type expression, tuples and lists flattened."""
    t = t.strip()
    for head in ("Tuple[", "List["):
        if t.startswith(head) and t.endswith("]"):
            out: list[str] = []
            for elem in _split_top(t[len(head) : -1]):
                if not elem:
                    continue
                count = 1
                star = elem.rfind("*")
                repeat = parse_uint(elem[star + 1 :], _MAX_REPEAT) if star > 0 else None
                if repeat is not None and elem.count("[", star) == 0:
                    count, elem = repeat, elem[:star]
                out.extend(_type_leaves(elem) * count)
            return out
    return [t]


def _shape_leaves(s: str) -> list[list[int] | None]:
    """Leaf shapes of a host shape expression (`(2, 3)`, `NoShape`, `TupleShape(...)`)."""
    s = s.strip()
    for head in ("TupleShape(", "ListShape("):
        if s.startswith(head) and s.endswith(")"):
            out: list[list[int] | None] = []
            for elem in _split_top(s[len(head) : -1]):
                if elem:
                    out.extend(_shape_leaves(elem))
            return out
    if s.startswith("(") and s.endswith(")"):
        return [_dims(s)]
    return [None]


def _leaf_dtype(t: str) -> str:
    """Element dtype of a leaf type: `Tensor[Float32]`, `Ref[Tensor[F32]]` -> Float32, `Int64` -> Int64."""
    while True:
        if t.startswith("Ref[") and t.endswith("]"):
            t = t[4:-1]
        elif (t.startswith("Tensor[") and t.endswith("]")) or (t.startswith("Tensor(") and t.endswith(")")):
            t = t[7:-1]
        else:
            break
    return SHORT_DTYPES.get(t, t)


_host_cache: dict[str, tuple[tuple[str | None, tuple[int, ...] | None], ...]] = {}


def parse_host_type(text: str) -> tuple[tuple[str | None, tuple[int, ...] | None], ...]:
    """(dtype, shape) per output slot of one host type `<...>` (cached: types repeat a lot)."""
    hit = _host_cache.get(text)
    if hit is not None:
        return hit
    inner = text[1:-1] if text.startswith("<") and text.endswith(">") else text
    result: tuple[tuple[str | None, tuple[int, ...] | None], ...]
    xcv = inner.find("x[const vector]")
    if xcv > 0:  # v1: Tensor[Float32]x[const vector][32, 128, 13, 13]
        dtype = _leaf_dtype(inner[:xcv])
        result = ((dtype, tuple(_dims(inner[xcv + 15 :]))),)
    else:
        parts = _split_top(inner)
        texpr = parts[0] if parts else ""
        sexpr = parts[1] if len(parts) > 1 else None
        v1_shape = None
        if sexpr is None and texpr.endswith("]"):  # v1: Ref[Tensor(F32)][6, 1, 5, 5]
            cut = texpr.rfind("][")
            if cut > 0 and texpr.startswith("Ref["):
                texpr, v1_shape = texpr[: cut + 1], tuple(_dims(texpr[cut + 1 :]))
        leaves = _type_leaves(texpr) if texpr else []
        if sexpr is not None and not sexpr.startswith(("(", "NoShape", "TupleShape", "ListShape")):
            sexpr = None  # not a shape (e.g. an extra like ref_key=...)
        shapes = _shape_leaves(sexpr) if sexpr is not None else [v1_shape]
        if len(shapes) != len(leaves):
            shapes = [None] * len(leaves)
        result = tuple(
            (_leaf_dtype(t), tuple(s) if s is not None else None) for t, s in zip(leaves, shapes, strict=True)
        )
    if len(_host_cache) > 100_000:
        _host_cache.clear()
    _host_cache[text] = result
    return result


_device_cache: dict[str, tuple[str, str, tuple[int, ...]] | None] = {}


def _device_type(text: str) -> tuple[str, str, tuple[int, ...]] | None:
    """(dtype, format, shape) of a device type `<Float16xNC1HWC0[const vector]{...}>`, or None."""
    if text in _device_cache:
        return _device_cache[text]
    m = _DEVICE_TYPE.match(text)
    result = None
    if m is not None:
        label, fmt, shape = m.groups()
        result = (label, fmt, tuple(_dims(shape)))
    if len(_device_cache) > 100_000:
        _device_cache.clear()
    _device_cache[text] = result
    return result


def _sides(s: str) -> tuple[str, str | None]:
    """Split `: (A) -> (B)` into ("A", "B"); `: (A)` (a Return node) gives ("A", None)."""
    arrow = s.find(") -> (")
    if arrow >= 0:
        return s[3:arrow], s[arrow + 6 : -1] if s.endswith(")") else s[arrow + 6 :]
    return (s[3:-1] if s.endswith(")") else s[3:]), None


_TypeLine = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str | None, tuple[int, ...] | None], ...]]
_host_line_cache: dict[str, _TypeLine] = {}


def _host_line(s: str) -> _TypeLine:
    hit = _host_line_cache.get(s)
    if hit is not None:
        return hit
    ins, outs = _sides(s)
    in_types = tuple(_TYPE_GROUP.findall(ins))
    out_types = tuple(_TYPE_GROUP.findall(outs)) if outs is not None else ()
    leaves = tuple(leaf for t in out_types for leaf in parse_host_type(t))
    result = (in_types, out_types, leaves)
    if len(_host_line_cache) > 100_000:
        _host_line_cache.clear()
    _host_line_cache[s] = result
    return result


# --- operands and attributes ---------------------------------------------------------------------


def _scan_group(s: str, start: int, close: str) -> tuple[list[str], int] | None:
    """Split s[start:] at top-level commas up to the bracket `close` that ends the group.

    Returns (parts, index after the closing bracket), or None if the group does not close on
    this text (a block that wraps onto the next line).
    """
    depth = 0
    in_str = False
    parts: list[str] = []
    seg = start
    for m in _BRACKETS.finditer(s, start):
        ch = m.group()
        i = m.start()
        if in_str:
            if ch == '"' and s[i - 1] != "\\":
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "([{":
            depth += 1
        elif ch == ",":
            if depth == 0:
                parts.append(s[seg:i].strip())
                seg = i + 1
        elif depth == 0:
            if ch != close:
                return None
            last = s[seg:i].strip()
            if last or parts:
                parts.append(last)
            return parts, i + 1
        else:
            depth -= 1
    return None


def _operands(s: str, start: int) -> tuple[list[str], int] | None:
    """Operands of `Op(a, b, ...)` from just after the `(`; fast path when nothing nests."""
    close = s.find(")", start)
    if close < 0:
        return None
    seg = s[start:close]
    if "(" not in seg and "[" not in seg and "{" not in seg and '"' not in seg:
        return ([p.strip() for p in seg.split(",")] if seg.strip() else []), close + 1
    return _scan_group(s, start, ")")


_block_cache: dict[tuple[str | None, str], tuple[tuple[str, str], ...]] = {}


_PRIMAL = " cnode_primal_attrs: {"
_head_cache: dict[str, tuple[tuple[str, str], ...] | None] = {}


def _attributes(tail: str) -> dict[str, str] | None:
    """Attribute blocks after the operands; None if a block is not closed (wraps onto next line).

    `{instance name: n}` gives key `instance_name`; `primitive_attrs` and unnamed blocks give
    their keys as they are; other labelled blocks (`cnode_attrs`, `cnode_primal_attrs`) give
    `label.key`. Values are kept as MindSpore printed them.

    Everything before `cnode_primal_attrs` (which holds the node's unique id) repeats from node
    to node of the same kind, so that part is parsed once and cached whole.
    """
    cut = tail.rfind(_PRIMAL)
    if cut <= 0:
        return _attribute_blocks(tail)
    head = tail[:cut]
    if head in _head_cache:
        pairs = _head_cache[head]
    else:
        parsed = _attribute_blocks(head)
        pairs = tuple(parsed.items()) if parsed is not None else None
        if len(_head_cache) > 100_000:
            _head_cache.clear()
        _head_cache[head] = pairs
    last = _attribute_blocks(tail[cut:])
    if pairs is None or last is None:
        return _attribute_blocks(tail)  # a block opened before the cut closes after it
    attrs = dict(pairs)
    attrs.update(last)
    return attrs


def _attribute_blocks(tail: str) -> dict[str, str] | None:
    attrs: dict[str, str] = {}
    pos = 0
    n = len(tail)
    while pos < n:
        m = _ATTR_LABEL.match(tail, pos)
        if m is None:
            rest = tail[pos:].strip()
            if rest:
                attrs.setdefault("_unparsed", rest)
            break
        label = m.group(1)
        start = m.end()
        close = tail.find("}", start)
        seg = tail[start:close] if close >= 0 else ""
        if close >= 0 and "{" not in seg and seg.count('"') % 2 == 0:
            # fast path: nothing nests, so the first "}" closes the block
            end = close + 1
            key = (label, seg)
            pairs = _block_cache.get(key)
            parts = None
        else:
            got = _scan_group(tail, start, "}")
            if got is None:
                return None
            parts, end = got
            key = (label, tail[start : end - 1])
            pairs = _block_cache.get(key)
        if pairs is None:
            if parts is None:
                parts = _split_top(seg) if "," in seg else ([seg.strip()] if seg.strip() else [])
            items = []
            for part in parts:
                k, sep, v = part.partition(":")
                if not sep:
                    k, v = part, ""
                k = k.strip()
                if k == "instance name":
                    k = "instance_name"
                elif label and label != "primitive_attrs":
                    k = f"{label}.{k}"
                items.append((k, v.strip()))
            pairs = tuple(items)
            if len(_block_cache) > 100_000:
                _block_cache.clear()
            _block_cache[key] = pairs
        attrs.update(pairs)
        pos = end
    return attrs


# --- the line machine ----------------------------------------------------------------------------


class _State:
    """Mutable parse state; a class so the per-line handlers stay small."""

    __slots__ = (
        "broken",
        "cnode_count",
        "debug_keys",
        "declared_cnodes",
        "declared_subgraphs",
        "free_vars",
        "host_seen",
        "node",
        "node_frames",
        "para_by_name",
        "para_keys",
        "para_names",
        "pending",
        "pending_count",
        "pending_line",
        "result",
        "subgraph",
        "subgraphs_seen",
    )

    def __init__(self, graph_id: int | None) -> None:
        self.result = ParsedGraph(graph_id=graph_id, source="ir")
        self.para_keys: dict[int, GraphNode] = {}
        self.para_names: dict[int, str] = {}
        self.para_by_name: dict[str, str] = {}  # parameter name -> `%paraN`, for callees printed bare
        self.debug_keys: list[tuple[str, str, str]] = []  # (subgraph, debug name, key) per node
        self.free_vars = False  # some operand is a free variable named by debug name
        self.pending: str | None = None  # a node line whose brackets have not closed yet
        self.pending_line = 0
        self.pending_count = 0
        self.subgraph: str | None = None
        self.subgraphs_seen = 0
        self.node: GraphNode | None = None
        self.node_frames: list[SourceFrame] | None = None
        self.host_seen = False
        self.declared_subgraphs: int | None = None
        self.declared_cnodes: int | None = None
        self.cnode_count = 0
        self.broken = False  # the last node line could not be parsed: skip its lines quietly


def _operand_key(st: _State, text: str) -> str:
    if text.startswith("%"):
        if text.startswith("%para"):
            m = _PARAM_REF.match(text)
            if m is not None:
                idx = int(m.group(1))
                if m.group(2) and idx not in st.para_names:
                    st.para_names[idx] = m.group(2)
                    st.para_by_name.setdefault(m.group(2), f"%para{idx}")
                return f"%para{idx}"
        elif text[1:].isdigit():
            return f"{st.subgraph}:{text}"
    elif text.startswith("$(@"):
        m = _FREE_VAR.match(text)
        if m is not None:
            return f"{m.group(1)}:%{m.group(2)}"
        m = _FREE_VAR_NAME.match(text)
        if m is not None:
            p = _FREE_VAR_PARAM.match(m.group(2))
            if p is not None:
                return f"%para{int(p.group(1))}"
            st.free_vars = True
            return f"fv:{m.group(1)}:{m.group(2)}"  # resolved by debug name when the file is read
    return "const:" + text


def _callee(st: _State, s: str, pos: int) -> tuple[str, str | None, bool, int] | None:
    """The callee of a node line from `pos` (just after ` = `), or None if it is not one.

    Returns (callee text, abstract annotation or None, is a call, index of the operands' `(`).
    The callee is a primitive (`Conv2D`, `PrimFunc_Add`) or, for a call, a graph (`@g`,
    `call @g`), a node (`%5`), a parameter (`%para3_f`, or bare `Parameter_934` when it is a
    parameter of the file), or a free variable (`$(@g:CNode_343)`). 2.x prints the abstract of a
    called value in brackets between callee and operands: `%5[@FuncUnion(@a, @b)](...)`,
    `%5[@@g](...)`, `%5[@Partial(@g)](...)`. An annotation that does not close on this text
    gives index -1 (a line that wraps onto the next).
    """
    is_call = s.startswith("call ", pos)
    if is_call:
        pos += 5
    if s.startswith("$(", pos):
        got = _scan_group(s, pos + 2, ")")
        if got is None:
            return None
        end = got[1]
        is_call = True
    else:
        m = _CALLEE.match(s, pos)
        if m is None:
            return None
        end = m.end()
    callee = s[pos:end]
    abstract = None
    if s.startswith("[@", end):
        got = _scan_group(s, end + 1, "]")
        if got is None:
            return callee, None, True, -1
        abstract = s[end + 1 : got[1] - 1]
        end = got[1]
        is_call = True
    if not s.startswith("(", end):
        return None
    is_call = is_call or callee[0] in "%@" or callee in st.para_by_name
    return callee, abstract, is_call, end


def _broken_node(st: _State, line_no: int, reason: str) -> bool:
    """Record a node line that cannot be read; it still counts, so the header's cnode total checks
    for lost nodes, and the lines that belong to it are skipped."""
    st.result.errors.append((line_no, reason))
    st.node = None
    st.broken = True
    st.cnode_count += 1
    return True


def _start_node(st: _State, s: str, line_no: int) -> bool:
    """Parse a (complete) node or Return line; False if its brackets are still open."""
    if s.startswith("%"):
        m = _NODE_HEAD.match(s)
        if m is None:
            return _broken_node(st, line_no, f"unparsable node line: {s[:120]!r}")
        key = f"{st.subgraph}:%{m.group(1)}"
        debug = m.group(2)
        callee = None
        o = _OP_CALL.match(s, m.end())
        if o is not None and o.group(1)[0] not in "%@$" and o.group(1) not in st.para_by_name:
            op = o.group(1)  # the common case, a primitive: `Op(`
            p = o.end() - 1
        else:
            got_callee = _callee(st, s, m.end())
            if got_callee is None:
                return _broken_node(st, line_no, f"node line without `Op(operands)`: {s[:120]!r}")
            text, abstract, is_call, p = got_callee
            if p < 0:
                return False  # the annotation wraps onto the next line
            if is_call:
                op = "call"
                callee = (text, abstract)
            else:
                op = text
    else:  # Return(...) / return(...)
        key = f"{st.subgraph}:Return"
        debug = callee = None
        p = s.find("(")
        op = "Return"
    got = _operands(s, p + 1)
    if got is None:
        return False
    operands, end = got
    attrs = _attributes(s[end:]) if end < len(s) else {}
    if attrs is None:
        return False
    if "_unparsed" in attrs:
        rest = attrs.pop("_unparsed")
        st.result.errors.append((line_no, f"unknown text after the operands: {rest[:120]!r}"))
    if op.startswith("PrimFunc_"):
        op = op[9:]
    inputs = [(_operand_key(st, o), "data") for o in operands if o]
    if callee is not None:
        text, abstract = callee
        if text.startswith("@"):
            callee_key = "const:" + text
        elif text in st.para_by_name:
            callee_key = st.para_by_name[text]
        else:
            callee_key = _operand_key(st, text)
        inputs.insert(0, (callee_key, "data"))
        attrs["callee"] = text
        if abstract is not None:
            attrs["callee_abstract"] = abstract
    if debug:
        st.debug_keys.append((st.subgraph or "", debug, key))
    node = GraphNode(
        node_key=key,
        graph_name=st.subgraph or "",
        op_type=op,
        full_name=None,
        attributes=attrs,
        inputs=inputs,
        line=line_no,
    )
    st.result.nodes.append(node)
    st.node = node
    st.node_frames = None
    st.host_seen = False
    st.broken = False
    st.cnode_count += 1
    return True


def _param_decl(st: _State, s: str, line_no: int) -> None:
    m = _PARAM_DECL.match(s)
    if m is None:
        st.result.errors.append((line_no, f"unparsable parameter line: {s[:120]!r}"))
        return
    idx = int(m.group(1))
    name = m.group(2)
    rest = m.group(3)
    node = GraphNode(
        node_key=f"%para{idx}",
        graph_name=st.subgraph or st.result.graph_name or "",
        op_type="Parameter",
        full_name=None,
        is_parameter=True,
        name=name or None,
        line=line_no,
    )
    for group in _TYPE_GROUP.findall(rest):
        dev = _device_type(group) if "[const vector]" in group else None
        if dev is not None and node.output_types:
            node.device_dtypes.append(dev[0])
            node.device_formats.append(dev[1])
            node.device_shapes.append(list(dev[2]))
        elif not node.output_types:
            node.output_types.append(group)
            for dtype, shape in parse_host_type(group):
                node.output_dtypes.append(dtype)
                node.output_shapes.append(list(shape) if shape is not None else None)
    if "has_default" in rest:
        node.attributes["has_default"] = "true"
    w = re.search(r"IsWeight: (\w+)", rest)
    if w:
        node.attributes["IsWeight"] = w.group(1)
    st.para_keys[idx] = node
    if name:
        st.para_by_name.setdefault(name, node.node_key)
    st.result.nodes.append(node)


def _subgraph_start(st: _State, s: str, line_no: int) -> None:
    head = s[len("subgraph @") :]
    p = head.find("(")
    # 2.x frontend IR names the enclosing graph: `subgraph @g parent: [subgraph @p](%para1_x) {`
    st.subgraph = (head[:p] if p >= 0 else head.rstrip(" {")).split(" parent: [", 1)[0]
    st.subgraphs_seen += 1
    st.node = None
    if st.result.graph_name is None:
        st.result.graph_name = st.subgraph
    if p >= 0:  # v1 signature: subgraph @g(%para1_x, ...) {
        got = _operands(head, p + 1)
        for text in got[0] if got else []:
            m = _PARAM_REF.match(text)
            if m is None:
                continue
            idx = int(m.group(1))
            if idx not in st.para_keys:
                node = GraphNode(
                    node_key=f"%para{idx}",
                    graph_name=st.subgraph,
                    op_type="Parameter",
                    full_name=None,
                    is_parameter=True,
                    name=m.group(2) or None,
                    line=line_no,
                )
                st.para_keys[idx] = node
                st.result.nodes.append(node)
            elif m.group(2):
                st.para_names.setdefault(idx, m.group(2))
            if m.group(2):
                st.para_by_name.setdefault(m.group(2), f"%para{idx}")


def _type_line(st: _State, node: GraphNode, s: str, line_no: int) -> None:
    """A `      : (...)` line of the current node: host, device or object types, or a v1 full name."""
    if "<" not in s:
        if s.startswith(DOCS_FULLNAME_PREFIX):
            node.full_name = s[len(DOCS_FULLNAME_PREFIX) : -1] if s.endswith(")") else None
        elif ") -> (" not in s and ("/" in s or "-op" in s):  # <= 1.6 full name: (Default/.../Conv2D-op107)
            node.full_name = s[3:-1] if s.endswith(")") else s[3:]
        # else: kernel object types, `: (Tensor, Scalar) -> (Tensor)`: recognised, not kept
        return
    if s.startswith(DOCS_FULLNAME_PREFIX):
        node.full_name = s[len(DOCS_FULLNAME_PREFIX) : -1] if s.endswith(")") else None
        return
    if "[const vector]" in s:
        first = _TYPE_GROUP.search(s)
        if first is not None and _device_type(first.group()) is not None:
            _, outs = _sides(s)
            for group in _TYPE_GROUP.findall(outs if outs is not None else ""):
                d = _device_type(group)
                if d is None:
                    st.result.errors.append((line_no, f"unparsable device type {group[:80]!r}"))
                    continue
                node.device_dtypes.append(d[0])
                node.device_formats.append(d[1])
                node.device_shapes.append(list(d[2]))
            return
    if st.host_seen:
        st.result.errors.append((line_no, f"second host type line: {s[:120]!r}"))
        return
    st.host_seen = True
    in_types, out_types, leaves = _host_line(s)
    if ") -> (" not in s and node.op_type != "Return":
        st.result.errors.append((line_no, f"type line without ' -> ' (cut short?): {s[:120]!r}"))
    node.input_types = list(in_types)
    if not out_types and node.op_type == "Return":
        out_types = in_types  # `: (<in>)`: a Return's output is its input
        leaves = tuple(leaf for t in in_types for leaf in parse_host_type(t))
    node.output_types = list(out_types)
    node.output_dtypes = [d for d, _ in leaves]
    node.output_shapes = [list(sh) if sh is not None else None for _, sh in leaves]


_IGNORED_COMMENTS = (
    "# Corresponding forward node candidate",
    "# Corresponding code candidate",
    "# Comment:",
    "#------------------------>",
)


def _comment_in_node(st: _State, s: str, line_no: int) -> None:
    """A `#` line inside a subgraph body that is not a 2.x frame or full-name line (the hot ones)."""
    node = st.node
    if s.startswith("# In file"):
        if node is not None:
            _add_frame(st, node, s, line_no)
        return  # a frame with no node (a subgraph's own trace, or a broken node's) belongs to none
    for prefix in FULLNAME_PREFIXES:
        if s.startswith(prefix):
            if node is not None:
                node.full_name = s[len(prefix) : -1] if s.endswith(")") else s[len(prefix) :]
            elif not st.broken:
                st.result.errors.append((line_no, "full-name line outside a node"))
            return
    if s.startswith("# Scope: ("):
        if node is not None:
            node.attributes["scope"] = s[10:-1] if s.endswith(")") else s[10:]
        return
    if s.startswith("# SideEffect:"):  # frontend IR (save_graphs): `# SideEffect: { load }`
        if node is not None:
            node.attributes["side_effect"] = s[13:].strip().strip("{}").strip()
        return
    if s.startswith(_IGNORED_COMMENTS):
        return
    if is_frame_line(s):  # the .pb's spelling (`#  - In file`), should it ever appear in an .ir
        if node is not None:
            _add_frame(st, node, s, line_no)
        return
    if node is None and st.broken:
        return  # already reported with the node line it belongs to
    st.result.errors.append((line_no, f"unknown line form: {s[:160]!r}"))


def _add_frame(st: _State, node: GraphNode, s: str, line_no: int) -> None:
    frames = st.node_frames
    if frames is None:
        frames = st.node_frames = st.result.frames.setdefault(node.node_key, [])
    frame = parse_frame_line(s, len(frames))
    if frame is None:
        st.result.errors.append((line_no, f"unparsable source-trace line: {s[:160]!r}"))
    else:
        frames.append(frame)


def _header_line(st: _State, s: str, line_no: int) -> None:
    """A line outside any subgraph body: headers, graph attrs, parameter declarations."""
    if s.startswith("%para"):
        _param_decl(st, s, line_no)
        return
    if s.startswith("#"):
        body = s[1:].strip()
        key, _, value = body.partition(":")
        key = " ".join(key.split()).lower()
        value = value.strip()
        if key == "ir entry" and value.startswith("@"):
            st.result.graph_name = value[1:]
        elif key in ("total subgraphs", "total subgraph") and parse_uint(value) is not None:
            st.declared_subgraphs = int(value)
        return  # other comments: # Attrs:, # Params:, # Order:, #   1: @g:CNode..., frames of a graph
    if s.startswith("Total number of cnodes:"):
        v = s.rpartition(":")[2].strip()
        if parse_uint(v) is not None:
            st.declared_cnodes = int(v)
        return
    if s.startswith(("subgraph attr:", "subgraph instance:", "Node counting information", "Total number of")):
        return
    if _KEY_VALUE_LINE.match(s):
        return  # a graph attribute (`has_shard: 0`)
    if s == "}" or (s.endswith(" {") and _KEY_VALUE_LINE.match(s[:-2] + ":")):
        return  # a header block (`jit config {` ... `}`, 2.x frontend IR) around key: value lines
    if s.startswith("<~~"):
        return
    st.result.errors.append((line_no, f"unknown line form outside a subgraph: {s[:160]!r}"))


def _flush_pending(st: _State) -> None:
    if st.pending is not None:
        reason = f"node line never closed its brackets: {st.pending[:120]!r}"
        st.pending = None
        _broken_node(st, st.pending_line, reason)


def _looks_like_new_line_form(s: str) -> bool:
    return (
        s == "}"
        or s.startswith(("Return(", "# Fullname", "# fullname", "# In file", ": (<", "subgraph @"))
        or (s.startswith("%") and _NODE_HEAD.match(s) is not None)
    )


def _resolve_free_vars(st: _State) -> None:
    """Free variables named by debug name (`fv:g:CNode_343`) become the key of that node of
    subgraph g, or a constant operand when no node (or more than one) has that name."""
    by_name: dict[tuple[str, str], str | None] = {}
    for graph, debug, key in st.debug_keys:
        by_name[graph, debug] = key if (graph, debug) not in by_name else None  # None: ambiguous
    for node in st.result.nodes:
        if not any(k.startswith("fv:") for k, _ in node.inputs):
            continue
        resolved = []
        for k, kind in node.inputs:
            if k.startswith("fv:"):
                graph, _, name = k[3:].partition(":")
                k = by_name.get((graph, name)) or f"const:$(@{graph}:{name})"
            resolved.append((k, kind))
        node.inputs = resolved


def _parse_lines(lines: Iterable[str], graph_id: int | None) -> ParsedGraph:
    # The parse allocates millions of small objects and no reference cycles; the cyclic GC would
    # rescan the growing heap over and over (half the run time on a 100,000-node graph).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_lines_inner(lines, graph_id)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_lines_inner(lines: Iterable[str], graph_id: int | None) -> ParsedGraph:
    st = _State(graph_id)
    frame_cache = frame_cache_dict()
    fullname_2x = FULLNAME_PREFIXES[0]
    n_fullname = len(fullname_2x)
    line_no = 0
    last_nonblank = ""
    node: GraphNode | None = None  # mirrors st.node; the hot paths below read it locally
    for raw in lines:
        line_no += 1
        s = raw.strip()
        if not s:
            continue
        st.result.lines += 1
        last_nonblank = s
        if st.pending is not None:
            if _looks_like_new_line_form(s) or st.pending_count >= _MAX_CONTINUATION_LINES:
                _flush_pending(st)
                node = None
            else:
                st.pending = st.pending + "\n" + s
                st.pending_count += 1
                if _start_node(st, st.pending, st.pending_line):
                    st.pending = None
                node = st.node
                continue
        if st.subgraph is None:
            if s.startswith("subgraph @"):
                _subgraph_start(st, s, line_no)
                node = None
            else:
                _header_line(st, s, line_no)
            continue
        c = s[0]
        if c == "#":
            if node is not None:
                if s.startswith("# In file "):  # hot path 1: a frame, usually already cached
                    frames = st.node_frames
                    if frames is not None:
                        frame = frame_cache.get((s, len(frames)))
                        if frame is not None:
                            frames.append(frame)
                            continue
                    _add_frame(st, node, s, line_no)
                    continue
                if s.startswith(fullname_2x):  # hot path 2: the 2.x full-name line
                    node.full_name = s[n_fullname:-1] if s[-1] == ")" else s[n_fullname:]
                    continue
            _comment_in_node(st, s, line_no)
        elif c == ":":
            if node is not None:
                _type_line(st, node, s, line_no)
            elif not st.broken:
                st.result.errors.append((line_no, f"type line outside a node: {s[:120]!r}"))
        elif c == "%" or s.startswith(("Return(", "return(")):
            if not _start_node(st, s, line_no):
                st.pending = s
                st.pending_line = line_no
                st.pending_count = 0
                st.node = None
            node = st.node
        elif s == "}":
            st.subgraph = None
            st.node = node = None
            st.broken = False
        elif s.startswith("<~~"):
            continue  # "<~~This line of code can be shared by multiple nodes ..." on a line of its own
        elif node is None and st.broken:
            continue
        else:
            st.result.errors.append((line_no, f"unknown line form: {s[:160]!r}"))
    _flush_pending(st)
    res = st.result
    for idx, name in st.para_names.items():
        node = st.para_keys.get(idx)
        if node is not None:
            # the operand spelling is the parameter's name (the .pb's); a declaration may print
            # a debug name instead (`%para1__18655:` declares what operands call `%para1_Parameter_63`)
            node.name = name
    if st.free_vars:
        _resolve_free_vars(st)
    if st.subgraph is not None:
        res.errors.append((line_no, f"truncated: subgraph @{st.subgraph} is not closed at end of input"))
    elif st.declared_subgraphs is not None and st.subgraphs_seen < st.declared_subgraphs:
        res.errors.append(
            (line_no, f"truncated: {st.subgraphs_seen} of {st.declared_subgraphs} declared subgraphs present")
        )
    elif st.declared_cnodes is not None and st.cnode_count < st.declared_cnodes and st.subgraphs_seen:
        res.errors.append(
            (line_no, f"{st.cnode_count} nodes parsed but the header declares {st.declared_cnodes} cnodes")
        )
    if st.subgraphs_seen == 0 and not res.nodes and last_nonblank:
        res.errors.append((line_no, NO_SUBGRAPH))
    if res.graph_id is None and res.graph_name:
        m = _KERNEL_GRAPH.search(res.graph_name)
        if m:
            res.graph_id = int(m.group(1))
    return res
