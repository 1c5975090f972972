"""Parse `.dump_metadata/` (per rank): config.json, data_dump.json, hccl.json.

`config.json` is written by MindSpore itself (`{"device_target", "ms_version"}`); data_dump.json
is a verbatim copy of the user's dump configuration, kept as text so it can be queried with
DuckDB's json functions.
"""

from __future__ import annotations

import json
from pathlib import Path


class MetadataError(ValueError):
    """A metadata file that is not valid JSON of the expected shape."""


def read_config_json(path: str | Path) -> dict[str, str | None]:
    """device_target and ms_version from config.json."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise MetadataError(f"config.json is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise MetadataError("config.json is not a JSON object")
    return {"device_target": obj.get("device_target"), "ms_version": obj.get("ms_version")}


def read_json_text(path: str | Path) -> str:
    """The file's text, after checking it is JSON (data_dump.json, hccl.json)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        json.loads(text)
    except ValueError as exc:
        raise MetadataError(f"{Path(path).name} is not valid JSON: {exc}") from exc
    return text
