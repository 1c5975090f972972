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

import json
import re
from dataclasses import dataclass
from typing import Any

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


@dataclass(slots=True)
class DumpJson:
    task: str | None
    level: str | None
    framework: str | None
    entries: list[tuple[EntryKey, list[Leaf]]]
    problems: list[str]  # entries that could not be read, and why (the rest is read)


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
    if isinstance(value, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        return value
    return None


def _is_tensor(obj: Any) -> bool:
    return isinstance(obj, dict) and "dtype" in obj and "shape" in obj


_GROUPS = {
    # field -> (io, arg_path prefix)
    "input_args": ("input", "input"),
    "input_kwargs": ("input", "kwargs"),
    "input": ("input", "input"),
    "output": ("output", "output"),
    "parameters": ("parameter", "parameters"),
}


def _leaves(
    key: str, field: str, io: str, prefix: str, value: Any, slots: dict[str, int], out: list[Leaf]
) -> None:
    """Collect the tensors under one field, depth first, naming each by its path."""
    stack: list[tuple[str, Any, int]] = [(prefix, value, 0)]
    ordered: list[tuple[str, Any]] = []
    while stack:
        path, obj, depth = stack.pop()
        if depth > MAX_NESTING:
            raise MsprobeJsonError(f"{key}: {field} nests more than {MAX_NESTING} levels")
        if _is_tensor(obj):
            ordered.append((path, obj))
        elif isinstance(obj, list):
            stack.extend((f"{path}.{i}", item, depth + 1) for i, item in reversed(list(enumerate(obj))))
        elif isinstance(obj, dict) and "type" not in obj:
            stack.extend((f"{path}.{k}", item, depth + 1) for k, item in reversed(list(obj.items())))
    for path, obj in ordered:
        # the argument's position (`input.2`: 2, also for `input.2.0`); named ones (kwargs,
        # parameters) count in file order among the entry's tensors of the same io
        ordinal = slots.get(io, 0)
        slots[io] = ordinal + 1
        index = path.split(".", 2)[1] if path.count(".") else ""
        slot = int(index) if index.isdigit() else ordinal
        md5 = obj.get("md5")
        out.append(
            Leaf(
                key, io, slot, path, obj.get("dtype") if isinstance(obj.get("dtype"), str) else None,
                _shape(obj.get("shape")), _number(obj.get("Max")), _number(obj.get("Min")),
                _number(obj.get("Mean")), _number(obj.get("Norm")),
                obj.get("requires_grad") if isinstance(obj.get("requires_grad"), bool) else None,
                md5 if isinstance(md5, str) else None,
                obj.get("data_name") if isinstance(obj.get("data_name"), str) else None,
            )
        )  # fmt: skip


def entry_leaves(parsed: EntryKey, body: Any) -> list[Leaf]:
    """The tensors of one dump.json entry, in file order."""
    if not isinstance(body, dict):
        raise MsprobeJsonError(f"{parsed.key}: entry is {type(body).__name__}, not an object")
    out: list[Leaf] = []
    slots: dict[str, int] = {}
    if parsed.kind == "parameters_grad":
        for name, value in body.items():
            if isinstance(value, list) and len(value) == 1:
                value = value[0]  # {"weight": [tensor]}: one gradient per parameter
            _leaves(parsed.key, name, "parameter_grad", f"parameters_grad.{name}", value, slots, out)
        return out
    for field, value in body.items():
        group = _GROUPS.get(field)
        if group is not None:
            _leaves(parsed.key, field, group[0], group[1], value, slots, out)
    return out


def parse_dump_json(text: str | bytes) -> DumpJson:
    """Decode a dump.json (or debug.json). MsprobeJsonError when the file as a whole is unusable;
    a bad entry is a problem and the others are read."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise MsprobeJsonError("dump.json nests too deep to read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MsprobeJsonError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise MsprobeJsonError("not an msprobe dump.json: no top-level object with a 'data' object")
    entries: list[tuple[EntryKey, list[Leaf]]] = []
    problems: list[str] = []
    for key, body in doc["data"].items():
        parsed = parse_entry_key(key)
        try:
            entries.append((parsed, entry_leaves(parsed, body)))
        except MsprobeJsonError as exc:
            problems.append(str(exc))

    def text_of(name: str) -> str | None:
        value = doc.get(name)
        return value if isinstance(value, str) else None

    return DumpJson(text_of("task"), text_of("level"), text_of("framework"), entries, problems)


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
    try:
        doc = json.loads(text)
    except RecursionError:
        raise MsprobeJsonError("stack.json nests too deep to read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MsprobeJsonError(f"not JSON: {exc}") from None
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
            for name in names:
                if isinstance(name, str):
                    out[name] = [f for f in frames if isinstance(f, str)]
        elif isinstance(value, list):
            out[key] = [f for f in value if isinstance(f, str)]
    return out


def parse_construct_json(text: str | bytes) -> list[tuple[str, str | None, int | None]]:
    """(node, parent, micro_step) for each node of construct.json."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise MsprobeJsonError("construct.json nests too deep to read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MsprobeJsonError(f"not JSON: {exc}") from None
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
    leaves: dict[str, list[Leaf]] = {}
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
        summary = [_number(v) for v in item[5]] + [None] * 4
        md5 = item[2] if isinstance(item[2], str) else None
        arg_path = io + (m["index"] or ".0")
        leaves.setdefault(key, []).append(
            Leaf(key, io, slot, arg_path, item[3] if isinstance(item[3], str) else None, _shape(item[4]),
                 summary[0], summary[1], summary[2], summary[3], None, md5, None)
        )  # fmt: skip
    if lines == 0 and problems:
        raise MsprobeJsonError(f"no line of the file is a ptdbg line ({problems[0]})")
    entries = [(parse_entry_key(k), v) for k, v in leaves.items()]
    return DumpJson(None, None, "pytorch", entries, problems), stacks
