"""msprobe's dump.json, stack.json and construct.json, and the names of its tensor files.

Reference: msprobe-cann-formats.md §1.1–1.3; what msprobe 8.x really writes is described in
tests/data/msprobe/README.md. This module only decodes: `readers.msprobe` turns the results into
catalog rows.

- dump.json `data` maps an entry key (`Torch.log.0.forward`, `Module.fc1.Linear.forward.0`,
  `Module.fc1.Linear.parameters_grad.0`) to its arguments: `input_args` (list), `input_kwargs`
  (object), `output`, `parameters` (modules), or `input`/`output` (backward entries), or the
  parameter names (parameters_grad entries). Each leaf that is a tensor object (it has `dtype` and
  `shape`) becomes a `Leaf`. Lists nest: `input_args[1][0]` is argument `input.1.0`.
- msprobe writes bare `NaN`, `Infinity`, `-Infinity` (not strict JSON): Python's json reads them as
  IEEE values, which is what they are.
- stack.json: the old flat form `{key: [frame, ...]}` or the new grouped form
  `{"0": [[key, ...], [frame, ...]], ...}`; frames are `File {path}, line {n}, in {func}, \\n {code}`,
  innermost first.
- construct.json: `{node: parent | null}`, or with `megatron_micro_step_number` `{node: [parent, step]}`.
"""

from __future__ import annotations

import gc
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.formats.limits import DEFAULT_CAPS

MAX_NESTING = 32  # argument lists nested deeper than this are refused (msprobe nests a few levels)


class MsprobeJsonError(ValueError):
    """The file is not a usable msprobe json; the message says why."""


@dataclass(frozen=True, slots=True)
class EntryKey:
    """An entry key split by the grammar of reference §1.1."""

    key: str
    kind: str  # 'api' | 'module' | 'parameters_grad'
    api_type: str  # 'Torch', 'Functional', 'Tensor', 'Module', 'Cell', ...
    name: str  # API name ('log') or module path ('fc1', 'layer1.0.conv1')
    op_type: str  # API name, or the module's class
    direction: str | None  # 'forward' | 'backward' | None (parameters_grad)
    call_count: int | None
    # a collective's peers and group as msprobe records them (`Distributed.*` / `Communication.*`):
    # (('src', '0'),), (('dst', '1'),), (('group', '[0, 1]'),); None for other entries (`peers_of`)
    peers: tuple[tuple[str, str], ...] | None = None


_MODULE_PREFIXES = ("Module", "Cell")


def parse_entry_key(key: str) -> EntryKey:
    """Split `Torch.log.0.forward`, `Module.fc1.Linear.forward.0`, `Module.fc1.Linear.parameters_grad.0`.
    A key that fits no form is kept whole (kind 'api', op_type the key)."""
    parts = key.split(".")
    if parts[0] in _MODULE_PREFIXES and len(parts) >= 5 and parts[-1].isdigit():
        direction = parts[-2]
        if direction in ("forward", "backward", "parameters_grad"):
            kind = "parameters_grad" if direction == "parameters_grad" else "module"
            return EntryKey(
                key, kind, parts[0], ".".join(parts[1:-3]), parts[-3],
                None if kind == "parameters_grad" else direction, int(parts[-1]),
            )  # fmt: skip
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        return EntryKey(
            key, "api", parts[0], ".".join(parts[1:-2]), ".".join(parts[1:-2]), parts[-1], int(parts[-2])
        )
    return EntryKey(key, "api", parts[0], key, key, None, None)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One tensor of an entry, as dump.json describes it."""

    key: str  # the entry key
    io: str  # 'input' | 'output' | 'parameter' | 'parameter_grad'
    slot: int  # the argument's index (`input.2` -> 2), or the tensor's position among the entry's named ones
    arg_path: str  # 'input.0', 'input.1.0', 'kwargs.target', 'output.0', 'parameters.weight', ...
    dtype: str | None
    shape: list[int] | None
    max: float | None
    min: float | None
    mean: float | None
    norm: float | None
    requires_grad: bool | None
    md5: str | None
    data_name: str | None


class LeafColumns:
    """The tensors of a dump.json, column by column (one item per tensor, in file order): a dump.json
    of 10^5 entries holds about half a million, and building an object per tensor would cost more
    than parsing the file."""

    __slots__ = (
        "arg_path", "data_name", "dtype", "entry", "io", "max", "md5", "mean", "min", "norm", "requires_grad",
        "shape", "slot",
    )  # fmt: skip

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.entry)


LEAF_SCHEMA = pa.schema(
    [
        ("entry", pa.int64()), ("io", pa.string()), ("slot", pa.int32()), ("arg_path", pa.string()),
        ("dtype", pa.string()), ("shape", pa.list_(pa.int64())), ("max", pa.float64()), ("min", pa.float64()),
        ("mean", pa.float64()), ("norm", pa.float64()), ("requires_grad", pa.bool_()), ("md5", pa.string()),
        ("data_name", pa.string()),
    ]
)  # fmt: skip


def leaf_table(c: LeafColumns, entry_offset: int = 0) -> pa.Table:
    """The columns as Arrow (what crosses a pipe from a helper, and what the reader turns into rows)."""
    entries = np.asarray(c.entry, dtype=np.int64) + entry_offset
    arrays = []
    for field in LEAF_SCHEMA:
        values = entries if field.name == "entry" else getattr(c, field.name)
        try:
            arrays.append(pa.array(values, field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a shape that is not a list of ints
            arrays.append(pa.array(shape_column(values), field.type))
    return pa.Table.from_arrays(arrays, schema=LEAF_SCHEMA)


@dataclass(slots=True)
class DumpJson:
    task: str | None
    level: str | None
    framework: str | None
    keys: list[EntryKey]  # the entries, in file order (a tensor's `entry` indexes this)
    table: pa.Table  # the tensors, LEAF_SCHEMA, in file order
    problems: list[str]  # entries that could not be read, and why (the rest is read)

    @property
    def entries(self) -> list[tuple[EntryKey, list[Leaf]]]:
        """Each entry with its tensors as objects (for tests and small files)."""
        out: list[tuple[EntryKey, list[Leaf]]] = [(k, []) for k in self.keys]
        for row in self.table.to_pylist():
            key = self.keys[row["entry"]]
            out[row["entry"]][1].append(
                Leaf(key.key, row["io"], row["slot"], row["arg_path"], row["dtype"], row["shape"], row["max"],
                     row["min"], row["mean"], row["norm"], row["requires_grad"], row["md5"], row["data_name"])
            )  # fmt: skip
        return out


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):  # 'inf', 'nan', ' inf' as some writers spell them
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _shape(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(d) is int for d in value):
        return value
    return None


_GROUPS = {
    # field -> (io, arg_path prefix)
    "input_args": ("input", "input"),
    "input_kwargs": ("input", "kwargs"),
    "input": ("input", "input"),
    "output": ("output", "output"),
    "parameters": ("parameter", "parameters"),
}


def _add(c: LeafColumns, entry: int, io: str, path: str, slot: int, obj: dict) -> None:
    """Append one tensor object. Values are checked for type only where that is cheap; a shape
    that is not a list of ints is caught when the column becomes Arrow (`shape_column`)."""
    g = obj.get
    c.entry.append(entry)
    c.io.append(io)
    c.slot.append(slot)
    c.arg_path.append(path)
    v = g("dtype")
    c.dtype.append(v if type(v) is str else None)
    v = g("shape")
    c.shape.append(v if type(v) is list else None)
    v = g("Max")
    c.max.append(v if type(v) is float else _number(v))
    v = g("Min")
    c.min.append(v if type(v) is float else _number(v))
    v = g("Mean")
    c.mean.append(v if type(v) is float else _number(v))
    v = g("Norm")
    c.norm.append(v if type(v) is float else _number(v))
    v = g("requires_grad")
    c.requires_grad.append(v if type(v) is bool else None)
    v = g("md5")
    c.md5.append(v if type(v) is str else None)
    v = g("data_name")
    c.data_name.append(v if type(v) is str else None)


def shape_column(shapes: list) -> list:
    """The shapes as Arrow can take them: a shape that is not a list of ints becomes NULL."""
    return [v if v is None or all(type(d) is int for d in v) else None for v in shapes]


def _walk(c: LeafColumns, entry: int, io: str, path: str, obj: Any, slot: int | None, counter: list[int],
          depth: int) -> None:  # fmt: skip
    """The tensors under `obj`, depth first. `slot`: the top-level argument's index (None: count
    in file order, for named arguments); `counter`: the entry's tensors of this io so far."""
    if depth > MAX_NESTING:
        raise MsprobeJsonError(f"{path.split('.', 1)[0]} nests more than {MAX_NESTING} levels")
    t = type(obj)
    if t is dict:
        if "dtype" in obj and "shape" in obj:
            _add(c, entry, io, path, counter[0] if slot is None else slot, obj)
            counter[0] += 1
        elif "type" not in obj:
            for k, v in obj.items():
                _walk(c, entry, io, f"{path}.{k}", v, slot, counter, depth + 1)
    elif t is list:
        top = depth == 0
        for i, v in enumerate(obj):
            _walk(c, entry, io, f"{path}.{i}", v, i if top else slot, counter, depth + 1)


def _entry(c: LeafColumns, index: int, parsed: EntryKey, body: Any) -> None:
    """Append the tensors of one dump.json entry; on a problem, none of them."""
    if type(body) is not dict:
        raise MsprobeJsonError(f"{parsed.key}: entry is {type(body).__name__}, not an object")
    mark = len(c)
    counters: dict[str, list[int]] = {}
    try:
        if parsed.kind == "parameters_grad":
            counter = counters.setdefault("parameter_grad", [0])
            for name, value in body.items():
                if type(value) is list and len(value) == 1:
                    value = value[0]  # {"weight": [tensor]}: one gradient per parameter
                _walk(c, index, "parameter_grad", f"parameters_grad.{name}", value, None, counter, 1)
            return
        for field, value in body.items():
            group = _GROUPS.get(field)
            if group is None:
                continue
            io, prefix = group
            counter = counters.setdefault(io, [0])
            if type(value) is list:
                for i, item in enumerate(value):  # the common case first: a tensor per argument
                    if type(item) is dict and "dtype" in item and "shape" in item:
                        _add(c, index, io, f"{prefix}.{i}", i, item)
                        counter[0] += 1
                    elif item is not None:
                        _walk(c, index, io, f"{prefix}.{i}", item, i, counter, 1)
            else:
                _walk(c, index, io, prefix, value, None, counter, 1)
    except MsprobeJsonError as exc:
        for name in c.__slots__:
            del getattr(c, name)[mark:]
        raise MsprobeJsonError(f"{parsed.key}: {exc}") from None


# msprobe writes bare NaN / Infinity / -Infinity (`"Max": NaN`). orjson, several times faster than
# json on the big files of level L1, reads only strict JSON, so those values are quoted first; a file
# where that is not enough (a bare token elsewhere) is read by json, which accepts them as they are.
_NON_FINITE = ((b": NaN", b': "NaN"'), (b": Infinity", b': "Infinity"'), (b": -Infinity", b': "-Infinity"'))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of small objects are built (they hold no
    cycles): with it running, parsing a big dump.json takes 2-3x as long."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_json(data: str | bytes) -> Any:
    """Parse a JSON text that may hold msprobe's bare NaN/Infinity; they come back as floats (or,
    through the fast path, as the strings 'NaN', 'Infinity', '-Infinity', which `_number` reads)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    try:
        import orjson
    except ImportError:
        return json.loads(data)
    quoted = data
    if b"NaN" in data or b"Infinity" in data:
        for token, text in _NON_FINITE:
            quoted = quoted.replace(token, text)
    try:
        return orjson.loads(quoted)
    except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        return json.loads(data)  # reads what orjson cannot, or says what is wrong


def _load(text: str | bytes, what: str) -> Any:
    try:
        return load_json(text)
    except RecursionError:
        raise MsprobeJsonError(f"{what} nests too deep to read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MsprobeJsonError(f"not JSON: {exc}") from None


_COLLECTIVE_PREFIXES = ("Distributed", "Communication")
# positional arguments that name a peer, per collective (torch.distributed's signatures)
_PEER_POSITIONS = {
    "broadcast": {1: "src"}, "send": {1: "dst"}, "isend": {1: "dst"}, "recv": {1: "src"}, "irecv": {1: "src"},
    "reduce": {1: "dst"}, "gather": {2: "dst"}, "scatter": {2: "src"},
}  # fmt: skip


def peers_of(parsed: EntryKey, body: Any) -> tuple[tuple[str, str], ...] | None:
    """The `src`, `dst` and `group` msprobe recorded for a collective call (non-tensor arguments,
    which the tensor columns leave out): `{"type": "int", "value": 1}` for a rank, a process group's
    `group_ranks` for a group. None for other entries, or when it recorded none."""
    if parsed.api_type not in _COLLECTIVE_PREFIXES or type(body) is not dict:
        return None
    kwargs = body.get("input_kwargs")
    named = dict(kwargs) if type(kwargs) is dict else {}
    args = body.get("input_args")
    if type(args) is list:
        for index, name in _PEER_POSITIONS.get(parsed.name, {}).items():
            if index < len(args):
                named.setdefault(name, args[index])
    out = []
    for name in ("src", "dst"):
        value = named.get(name)
        if type(value) is dict and type(value.get("value")) is int:
            out.append((name, str(value["value"])))
    group = named.get("group")
    if type(group) is dict:
        ranks = group.get("group_ranks", group.get("ranks"))
        if type(ranks) is list and all(type(r) is int for r in ranks):
            out.append(("group", str(ranks)))
    return tuple(out) or None


def _entries(data: dict) -> tuple[list[EntryKey], LeafColumns, list[str]]:
    keys: list[EntryKey] = []
    leaves = LeafColumns()
    problems: list[str] = []
    for key, body in data.items():
        parsed = parse_entry_key(key)
        try:
            _entry(leaves, len(keys), parsed, body)
        except MsprobeJsonError as exc:
            problems.append(str(exc))
        peers = peers_of(parsed, body)
        keys.append(parsed if peers is None else replace(parsed, peers=peers))
    return keys, leaves, problems


def _header(doc: dict) -> tuple[str | None, str | None, str | None]:
    return tuple(doc.get(n) if isinstance(doc.get(n), str) else None for n in ("task", "level", "framework"))


def parse_dump_json(text: str | bytes) -> DumpJson:
    """Decode a dump.json (or debug.json). MsprobeJsonError when the file as a whole is unusable;
    a bad entry is a problem and the others are read."""
    with gc_paused():
        doc = _load(text, "dump.json")
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
            raise MsprobeJsonError("not an msprobe dump.json: no top-level object with a 'data' object")
        keys, leaves, problems = _entries(doc["data"])
        return DumpJson(*_header(doc), keys, leaf_table(leaves), problems)


# -- one big dump.json on two cores -----------------------------------------------------------------
#
# msprobe writes dump.json with `indent=1` and `data` last, so every entry of `data` starts on a line
# of its own indented by exactly two spaces. `split_dump_json` finds byte ranges of whole entries
# there; a helper process reads and parses its range from the file itself (`parse_dump_range`: only
# three numbers cross the pipe), while the ingesting process parses another, and `join_parts` puts
# the results in file order. A text of any other shape is not split (None): it is parsed whole, and
# so is a range that does not parse as the entries of an object (the split guessed wrong).

_DATA_OPEN = b'\n "data": {\n'
_DATA_CLOSE = b"\n }\n}"
_ENTRY_START = b',\n  "'

DumpPart = tuple[list[tuple], pa.Table, list[str]]  # entry keys (EntryKey fields), tensors, problems


def split_dump_json(data: bytes, parts: int) -> tuple[bytes, list[tuple[int, int]]] | None:
    """(the text before `data` as a JSON object, `parts` byte ranges of whole entries), or None."""
    opened = data.find(_DATA_OPEN)
    closed = data.rfind(_DATA_CLOSE)
    if opened < 0 or closed < opened or data[closed + len(_DATA_CLOSE) :].strip():
        return None
    body_start, body_end = opened + len(_DATA_OPEN), closed
    if data.find(_DATA_OPEN, body_start, body_end) >= 0:
        return None
    cuts = [body_start]
    for k in range(1, parts):
        at = data.find(
            _ENTRY_START, max(body_start + (body_end - body_start) * k // parts, cuts[-1]), body_end
        )
        if at < 0:
            break
        cuts.append(at)
    ranges = [
        (a if i == 0 else a + 2, b) for i, (a, b) in enumerate(zip(cuts, [*cuts[1:], body_end], strict=True))
    ]
    return data[:opened] + b'\n "data": {}}', ranges


def parse_dump_part(piece: bytes) -> DumpPart | None:
    """The entries of a range of `data` (`"key": {...}, ...`); None if it is not that."""
    with gc_paused():
        try:
            doc = load_json(b"{" + piece + b"}")
        except (ValueError, RecursionError):
            return None
        if not isinstance(doc, dict):
            return None
        keys, leaves, problems = _entries(doc)
        return [tuple(getattr(k, f) for f in EntryKey.__slots__) for k in keys], leaf_table(leaves), problems


def parse_dump_range(span: tuple[str, int, int] | tuple[str, int, int, int]) -> DumpPart | None:
    """The entries in bytes [start, end) of the file at `path` (a helper reads them itself), streamed
    `_STREAM_BYTES` at a time (`stream_dump_range`); `entry_cap` bounds one entry (default: the
    `json` cap). None when the range is not whole entries (the split guessed wrong)."""
    path, start, end, *rest = span
    with open(path, "rb") as f:
        return stream_dump_range(f.fileno(), start, end, rest[0] if rest else DEFAULT_CAPS.json)


# -- a dump.json streamed: never held whole ---------------------------------------------------------
#
# A large model's dump.json is hundreds of MB: read whole and parsed into one dict, a 255 MB file took
# 2.4 GB. Laid out as msprobe writes it (see above), it is read `_STREAM_BYTES` at a time, each piece
# cut at the last entry boundary in it and parsed alone (orjson, as before), and only the tensors'
# columns (Arrow) and the entry keys are kept: memory follows the catalog rows, not the file. One
# entry bigger than the `json` cap (no real call has megabytes of argument metadata) is skipped, a
# problem of its own, without being buffered; the others are read.

_STREAM_BYTES = 8 << 20
_HEAD_BYTES = 1 << 16  # task, level, framework, dump_data_dir: the text before `data`
_TAIL_BYTES = 64
_KEY_BYTES = 4096  # a skipped entry's key is kept when it is this short (for its position)


def dump_json_layout(fd: int, size: int) -> tuple[bytes, int, int] | None:
    """(the text before `data` as a JSON object, start and end of the entries) of a file laid out
    as msprobe writes it, found from its head and tail alone; None for any other layout."""
    head = os.pread(fd, min(size, _HEAD_BYTES), 0)
    opened = head.find(_DATA_OPEN)
    tail_at = max(0, size - _TAIL_BYTES)
    tail = os.pread(fd, size - tail_at, tail_at)
    closed = tail.rfind(_DATA_CLOSE)
    if opened < 0 or closed < 0 or tail[closed + len(_DATA_CLOSE) :].strip():
        return None
    start, end = opened + len(_DATA_OPEN), tail_at + closed
    if end < start:
        return None
    return head[:opened] + b'\n "data": {}}', start, end


def entry_cut(fd: int, near: int, end: int) -> int | None:
    """The start of the first entry at or after byte `near` (its `,\n  "` separator), or None."""
    window = 1 << 20
    while near < end:
        block = os.pread(fd, min(window, end - near) + len(_ENTRY_START), near)
        at = block.find(_ENTRY_START)
        if at >= 0:
            return near + at
        near += window
    return None


def stream_dump_range(fd: int, start: int, end: int, entry_cap: int) -> DumpPart | None:
    """The entries in bytes [start, end) of a dump.json (whole entries, as `dump_json_layout` and
    `entry_cut` give), read `_STREAM_BYTES` at a time; None when a piece does not parse as entries."""
    keys: list[tuple] = []
    tables: list[pa.Table] = []
    problems: list[str] = []
    pos, carry, skipping = start, b"", False

    def add(part: DumpPart | None) -> bool:
        if part is None:
            return False
        part_keys, table, part_problems = part
        if keys and table.num_rows:
            table = table.set_column(0, "entry", pa.array(np.asarray(table.column("entry")) + len(keys)))
        keys.extend(part_keys)
        tables.append(table)
        problems.extend(part_problems)
        return True

    keep = len(_ENTRY_START) - 1  # bytes of a separator a block boundary may have cut
    while pos < end:
        block = os.pread(fd, min(_STREAM_BYTES, end - pos), pos)
        if not block:
            raise MsprobeJsonError(f"the file shrank while it was read (at byte {pos:,})")
        pos += len(block)
        if skipping:  # inside an entry over the cap: drop bytes up to the next entry
            block = carry + block
            at = block.find(_ENTRY_START)
            if at < 0:
                carry = block[-keep:]
                continue
            block, carry, skipping = block[at + 2 :], b"", False
        data = carry + block if carry else block
        cut = data.rfind(_ENTRY_START, max(0, len(carry) - keep)) if pos < end else len(data)
        if cut < 0:
            if len(data) > entry_cap:  # one entry over the cap: skipped, never buffered whole
                skipped = _skipped_key(data)
                what = f"entry {skipped[0]!r}" if skipped else f"an entry at byte {pos - len(data):,}"
                problems.append(
                    f"{what} is more than {entry_cap:,} bytes, over the json cap (skipped; "
                    "raise it with --max-metadata-size json=SIZE)"
                )
                if skipped:
                    keys.append(skipped)
                carry, skipping = data[-keep:], True
            else:
                carry = data
            continue
        if not add(parse_dump_part(data[:cut])):
            return None
        carry = data[cut + 2 :]
    if skipping:  # the file ends inside the skipped entry
        carry = b""
    if carry.strip() and not add(parse_dump_part(carry)):
        return None
    table = pa.concat_tables(tables) if tables else LEAF_SCHEMA.empty_table()
    return keys, table, problems


def _skipped_key(data: bytes) -> tuple | None:
    """The EntryKey fields of an entry that starts `data` (`  "key": {`), when its key is short."""
    head = data[: _KEY_BYTES + 8].lstrip(b", \n")
    end = head.find(b'": ')
    if not head.startswith(b'"') or end < 0:
        return None
    try:
        key = json.loads(head[: end + 1])
    except ValueError:
        return None
    k = parse_entry_key(key)
    return tuple(getattr(k, f) for f in EntryKey.__slots__)


def join_parts(header: bytes, parts: list[DumpPart]) -> DumpJson:
    """The DumpJson of a split file from its parts' results, in file order."""
    doc = load_json(header)
    keys: list[EntryKey] = []
    tables: list[pa.Table] = []
    problems: list[str] = []
    for part_keys, table, part_problems in parts:
        if keys:
            entry = pa.array(np.asarray(table.column("entry")) + len(keys), pa.int64())
            table = table.set_column(0, "entry", entry)
        keys.extend(EntryKey(*k) for k in part_keys)
        tables.append(table)
        problems.extend(part_problems)
    head = _header(doc) if isinstance(doc, dict) else (None, None, None)
    return DumpJson(*head, keys, pa.concat_tables(tables) if tables else LEAF_SCHEMA.empty_table(), problems)


_FRAME = re.compile(r"^File (.*), line (\d+), in (.*?), \n (.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    function: str
    code: str


def parse_frame(text: str) -> Frame | None:
    m = _FRAME.match(text)
    if m is None:
        return None
    return Frame(m.group(1), int(m.group(2)), m.group(3), m.group(4).strip())


def parse_stack_json(text: str | bytes) -> dict[str, list[str]]:
    """{entry key: frames, innermost first} from either form of stack.json."""
    with gc_paused():
        doc = _load(text, "stack.json")
    if not isinstance(doc, dict):
        raise MsprobeJsonError("stack.json is not an object")
    out: dict[str, list[str]] = {}
    grouped = (
        "0" in doc and isinstance(doc["0"], list) and len(doc["0"]) == 2 and isinstance(doc["0"][0], list)
    )
    for key, value in doc.items():
        if grouped:
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, list) for v in value)):
                raise MsprobeJsonError(f"stack group {key!r} is not [[names...], [frames...]]")
            names, frames = value
            shared = [f for f in frames if isinstance(f, str)]  # one list for the group (readers group by it)
            for name in names:
                if isinstance(name, str):
                    out[name] = shared
        elif isinstance(value, list):
            out[key] = [f for f in value if isinstance(f, str)]
    return out


def parse_construct_json(text: str | bytes) -> list[tuple[str, str | None, int | None]]:
    """(node, parent, micro_step) for each node of construct.json."""
    doc = _load(text, "construct.json")
    if not isinstance(doc, dict):
        raise MsprobeJsonError("construct.json is not an object")
    megatron = "megatron_micro_step_number" in doc
    out: list[tuple[str, str | None, int | None]] = []
    for node, value in doc.items():
        if node == "megatron_micro_step_number":
            continue
        micro: int | None = None
        if megatron and isinstance(value, list) and len(value) == 2:
            value, micro = value[0], value[1] if isinstance(value[1], int) else None
        out.append((node, value if isinstance(value, str) else None, micro))
    return out


def tree_depths(nodes: list[tuple[str, str | None, int | None]]) -> dict[str, int]:
    """Depth of each node (0 for a root); a parent loop or a missing parent ends the walk there."""
    parent = {n: p for n, p, _ in nodes}
    depths: dict[str, int] = {}
    for node in parent:
        chain = [node]
        seen = {node}
        while (p := parent.get(chain[-1])) is not None and p in parent and p not in seen and p not in depths:
            chain.append(p)
            seen.add(p)
        base = depths.get(parent.get(chain[-1]) or "", -1) + 1 if parent.get(chain[-1]) in depths else 0
        for i, n in enumerate(reversed(chain)):
            depths[n] = base + i
    return depths


_DATA_SUFFIX = re.compile(
    r"^(?P<key>.+?\.(?:forward|backward)(?:\.\d+)?|.+?\.parameters_grad\.\d+)"
    r"\.(?P<arg>(?:input|output|kwargs|parameters)(?:\.[^.]+)*|[^.]+)\.(?:pt|npy)$"
)


def split_data_name(name: str) -> tuple[str, str] | None:
    """(entry key, argument path) of a tensor file name such as `Torch.log.0.forward.output.0.pt`,
    for files dump.json does not list (a run that stopped before msprobe wrote its json)."""
    m = _DATA_SUFFIX.match(name)
    if m is None:
        return None
    key, arg = m.group("key"), m.group("arg")
    parts = key.split(".")
    if parts[0] not in _MODULE_PREFIXES and parts[-1].isdigit() and parts[-2] in ("forward", "backward"):
        return None  # an API key has its count before the direction
    if key.split(".")[-2:-1] == ["parameters_grad"]:
        arg = f"parameters_grad.{arg}"
    return key, arg


def io_of_arg(arg_path: str) -> str:
    head = arg_path.split(".", 1)[0]
    return {"input": "input", "kwargs": "input", "output": "output", "parameters": "parameter"}.get(
        head, "parameter_grad"
    )


# ptdbg_ascend / early msprobe: `api_stack_dump.pkl` (or `dump.pkl`), one JSON array per line.
PKL_NAMES = ("api_stack_dump.pkl", "dump.pkl")
_PKL_NAME = re.compile(
    r"^(?P<prefix>[A-Za-z0-9]+)[_.](?P<api>.+)[_.](?P<count>\d+)[_.](?P<direction>forward|backward)"
    r"_(?P<io>input|output|stack_info)(?P<index>(?:\.\d+)*)$"
)


def _pkl_key(match: re.Match) -> str:
    return f"{match['prefix']}.{match['api']}.{match['count']}.{match['direction']}"


def parse_pkl_lines(text: str | bytes) -> tuple[DumpJson, dict[str, list[str]]]:
    """Decode ptdbg_ascend's JSON-lines `.pkl`: the tensors as a DumpJson (entries in first-seen
    order) and the stacks as stack.json's flat form.

    A tensor line is `[name, dump_step, md5, dtype, shape, [max, min, mean(, norm)]]` and a stack line
    `[name_stack_info, [[path, "line", func, code], ...]]`, innermost first; names are
    `{Prefix}_{api}_{n}_{forward|backward}_{input|output}[.i...]` (later releases: dots in the API part).
    A line that is not one of these is a problem; the others are read."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MsprobeJsonError(f"not UTF-8: {exc}") from None
    index: dict[str, int] = {}
    keys: list[EntryKey] = []
    leaves = LeafColumns()
    slots: dict[tuple[str, str], int] = {}
    stacks: dict[str, list[str]] = {}
    problems: list[str] = []
    lines = 0
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            problems.append(f"line {line_no}: not a JSON array: {exc}")
            continue
        lines += 1
        m = _PKL_NAME.match(item[0]) if isinstance(item, list) and item and isinstance(item[0], str) else None
        if m is None:
            problems.append(f"line {line_no}: not a ptdbg tensor or stack line")
            continue
        key = _pkl_key(m)
        if m["io"] == "stack_info":
            frames = item[1] if len(item) > 1 and isinstance(item[1], list) else []
            stacks[key] = [
                f"File {f[0]}, line {f[1]}, in {f[2]}, \n {f[3]}"
                for f in frames
                if isinstance(f, list) and len(f) == 4 and str(f[1]).isdigit()
            ]
            continue
        if len(item) < 6 or not isinstance(item[5], list):
            problems.append(
                f"line {line_no}: a tensor line has 6 fields: name, step, md5, dtype, shape, summary"
            )
            continue
        io = m["io"]
        slot = slots.get((key, io), 0)
        slots[(key, io)] = slot + 1
        summary = [*item[5][:4], *([None] * 4)]
        entry = index.get(key)
        if entry is None:
            entry = index[key] = len(keys)
            keys.append(parse_entry_key(key))
        tensor = {
            "dtype": item[3], "shape": item[4], "Max": summary[0], "Min": summary[1], "Mean": summary[2],
            "Norm": summary[3], "md5": item[2],
        }  # fmt: skip
        _add(leaves, entry, io, io + (m["index"] or ".0"), slot, tensor)
    if lines == 0 and problems:
        raise MsprobeJsonError(f"no line of the file is a ptdbg line ({problems[0]})")
    return DumpJson(None, None, "pytorch", keys, leaf_table(leaves), problems), stacks
