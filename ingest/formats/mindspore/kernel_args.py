"""Parse kernel-args files `{op_type}.{op_name}.json` (v2.4+, `save_kernel_args: true`).

The content is `{arg_name: value_string}` (`json.dump(4)` in `E2eDump::DumpArgsSingleNode`).
In the file name only `.` and `/` of the full name were replaced by `_`, so the op name is
everything after the first dot.
"""

from __future__ import annotations

from pathlib import Path

from ingest.formats.limits import MetadataCaps
from ingest.formats.mindspore.metadata import MetadataError, as_text, load_json


class KernelArgsError(ValueError):
    """Not a kernel-args file of the expected shape."""


def parse_kernel_args_name(name: str) -> tuple[str, str]:
    """(op_type, op_name) from `{op_type}.{op_name}.json`."""
    stem = name[: -len(".json")]
    op_type, sep, op_name = stem.partition(".")
    if not sep or not op_type or not op_name:
        raise KernelArgsError("kernel-args file name is not {op_type}.{op_name}.json")
    return op_type, op_name


def read_kernel_args(path: str | Path, caps: MetadataCaps | None = None) -> list[tuple[str, str]]:
    """(arg_name, value) pairs; non-string values are kept as their JSON text."""
    try:
        _, obj = load_json(path, caps)
    except MetadataError as exc:
        raise KernelArgsError(str(exc)) from exc
    if not isinstance(obj, dict):
        raise KernelArgsError("kernel-args JSON is not an object")
    return [(as_text(k), as_text(v)) for k, v in obj.items()]
