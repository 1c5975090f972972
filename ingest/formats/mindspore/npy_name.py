"""Parse MindSpore tensor file names (v1.3 onwards) into their fields.

Names are parsed from the right, as MindSpore's own `ProcessNPYFilePool` does, because op names
may contain dots (v1.3-2.2 parameter names such as `conv1.weight`, GE names):

    {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{slot}.{format}[.{dtype}].npy

The dtype token appeared in v2.4 and is lowercase on Ascend/GPU (`float32`) and capitalised on
CPU (`Float32`). The name is never "un-sanitised" here: resolving the full scope name is a join
against the execution order (see sql/).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ingest.formats.npy_header import npy_scan_extension
from ingest.formats.numbers import INT32_MAX, INT64_MAX, parse_uint

# dtype tokens MindSpore writes into file names (compared case-insensitively).
DTYPE_TOKENS = frozenset(
    {
        "bool",
        "int2",
        "int4",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint1",
        "uint2",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float8_e4m3fn",
        "float8_e5m2",
        "hifloat8",
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "complex64",
        "complex128",
        "string",
    }
)

# Root scopes that start a v2.3+ sanitised full name (`Default/...` -> `Default_...`).
_V23_SCOPE = re.compile(r"^(?:Default|Gradients|Expand|recompute_Default|Inference|Parallel)_")
_DIGITS = re.compile(r"[0-9]+")


class TensorNameError(ValueError):
    """A file name that fits no tensor-name pattern."""


class TensorName(NamedTuple):
    op_type: str
    op_name: str
    task_id: int
    stream_id: int
    timestamp_us: int
    io: str
    slot: int
    format: str
    dtype: str | None  # lowercased dtype token, None when the name has none (<= v2.3)
    era: str  # 'v2.4+' | 'v2.3' | 'v1.3-2.2'


# dtype token as written in a name -> its lowercase form (filled lazily; only valid tokens).
_DTYPE_OF_TOKEN: dict[str, str] = {}


def _dtype_token(token: str) -> str | None:
    low = _DTYPE_OF_TOKEN.get(token)
    if low is None and token.lower() in DTYPE_TOKENS:
        low = _DTYPE_OF_TOKEN[token] = token.lower()
    return low


def parse_tensor_name(name: str) -> TensorName:
    """Parse one `.npy` tensor file name; raise TensorNameError with the reason when it does not fit.

    Called once per file of a million-file dump, so the common case is a handful of C-level
    string calls; the field-by-field checks below run only to explain a name that fails."""
    if not name.endswith(".npy"):
        raise TensorNameError("not a .npy file")
    parts = name[:-4].split(".")
    dtype: str | None = None
    if len(parts) >= 9:
        dtype = _dtype_token(parts[-1])
        if dtype is not None:
            parts.pop()
    if len(parts) < 8:
        raise TensorNameError(f"expected at least 8 dot-separated fields before .npy, found {len(parts)}")
    fmt, slot, io, ts, stream, task = parts[-1], parts[-2], parts[-3], parts[-4], parts[-5], parts[-6]
    numbers = slot + ts + stream + task
    if not (
        (io == "output" or io == "input")
        and slot and ts and stream and task
        and numbers.isdigit() and numbers.isascii()
        and fmt
    ):  # fmt: skip
        _explain_bad_fields(fmt, slot, io, ts, stream, task)
    if len(slot) > 9 or len(ts) > 18 or len(stream) > 18 or len(task) > 18:  # may overflow a column
        _check_ranges(slot, ts, stream, task)
    op_type = parts[0]
    op_name = parts[1] if len(parts) == 8 else ".".join(parts[1:-6])
    if not op_type or not op_name:
        raise TensorNameError("empty op type or op name")
    if dtype is not None:
        era = "v2.4+"
    elif _V23_SCOPE.match(op_name):
        era = "v2.3"
    else:
        era = "v1.3-2.2"
    return TensorName(op_type, op_name, int(task), int(stream), int(ts), io, int(slot), fmt, dtype, era)


def _c_names():  # -> the extension module, or None
    """ingest/formats/_npy_scan.c's `names` (optional, like its header reader; the same switch)."""
    _npy_scan = npy_scan_extension()
    if _npy_scan is None:
        return None
    if not hasattr(_npy_scan, "names"):
        return None  # built from an older version: reinstall to rebuild it
    _npy_scan.tokens(sorted(DTYPE_TOKENS))
    return _npy_scan


_c_module = _c_names()


def parse_tensor_names(names: list[str]) -> list[tuple | None]:
    """`parse_tensor_name`'s fields of many names in one C call (a metadata ingest parses a million):
    per name a plain tuple in TensorName's order, or None where `parse_tensor_name` must decide (a
    name that fails, a non-ASCII name, a number past the quick range check; every name when the
    extension is not built)."""
    if _c_module is None:
        return [None] * len(names)
    return _c_module.names(names)


def _check_ranges(slot: str, ts: str, stream: str, task: str) -> None:
    limits = (("slot", slot, INT32_MAX), ("timestamp", ts, INT64_MAX), ("stream id", stream, INT64_MAX),
              ("task id", task, INT64_MAX))  # fmt: skip
    for label, value, limit in limits:
        if parse_uint(value, limit) is None:
            raise TensorNameError(f"{label} {value[:30]!r} is out of range")


def _explain_bad_fields(fmt: str, slot: str, io: str, ts: str, stream: str, task: str) -> None:
    if io not in ("input", "output"):
        raise TensorNameError(f"field {io!r} where 'input' or 'output' was expected")
    for label, value in (("slot", slot), ("timestamp", ts), ("stream id", stream), ("task id", task)):
        if not _DIGITS.fullmatch(value):
            raise TensorNameError(f"{label} {value!r} is not a decimal number")
    if not fmt:
        raise TensorNameError("empty format field")
    raise TensorNameError("malformed tensor file name")  # not reached: one of the checks fails


def sanitize_v23(full_name: str) -> str:
    """The v2.3+ file-name form of a full scope name (`GetFileKernelName`): `/ \\ . space` -> `_`."""
    return full_name.replace("/", "_").replace("\\", "_").replace(".", "_").replace(" ", "_")


def short_name(full_name: str) -> str:
    """The v1.3-2.2 file-name form of a full scope name: its last scope component."""
    return full_name.rsplit("/", 1)[-1]


OP_INDEX_PATTERN = r"-op[0-9]+$"  # also used as an Arrow regex (pipeline: statistic.csv rows)
_OP_INDEX = re.compile(OP_INDEX_PATTERN)


def without_op_index(name: str) -> str:
    """`..._Conv2D-op12` -> `..._Conv2D`: the key for names whose `-opN` differs between the
    dump files and the execution order (seen in real MindSpore 2.10 dumps of recompiled graphs)."""
    return _OP_INDEX.sub("", name)


def op_type_of(full_name: str) -> str:
    """Kernel type from a full scope name: `.../Conv2D-op12` -> `Conv2D`."""
    return _OP_INDEX.sub("", short_name(full_name))
