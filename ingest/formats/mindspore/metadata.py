"""Parse `.dump_metadata/` (per rank): config.json, data_dump.json, hccl.json.

`config.json` is written by MindSpore itself (`{"device_target", "ms_version"}`); data_dump.json
is a verbatim copy of the user's dump configuration, kept as text so it can be queried with
DuckDB's json functions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ingest.formats.limits import MetadataCaps, read_capped

_SURROGATE = re.compile("[\ud800-\udfff]")


class MetadataError(ValueError):
    """A metadata file that is not valid JSON of the expected shape."""


def load_json(path: str | Path, caps: MetadataCaps | None = None) -> tuple[str, object]:
    """(text, parsed value) of a JSON file; MetadataError (a ValueError) when it is not JSON,
    however it fails: bad UTF-8, bad syntax, or nesting too deep to parse. A file over the `json`
    cap is never read (`ingest.formats.limits.MetadataTooLarge`, an OSError)."""
    data = read_capped(path, "json", caps)
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text did
        return text, json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MetadataError(f"{Path(path).name} is not valid JSON: {exc}") from exc


def as_text(value: object) -> str:
    """A JSON value as catalog text: strings as they are (a lone surrogate escape, which no
    UTF-8 column holds, becomes U+FFFD), other values as their JSON text."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def read_config_json(path: str | Path, caps: MetadataCaps | None = None) -> dict[str, str | None]:
    """device_target and ms_version from config.json."""
    _, obj = load_json(path, caps)
    if not isinstance(obj, dict):
        raise MetadataError("config.json is not a JSON object")
    keys = ("device_target", "ms_version")
    return {key: None if obj.get(key) is None else as_text(obj[key]) for key in keys}


def read_json_text(path: str | Path, caps: MetadataCaps | None = None) -> str:
    """The file's text, after checking it is JSON (data_dump.json, hccl.json)."""
    return load_json(path, caps)[0]
