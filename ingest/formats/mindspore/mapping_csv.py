"""Parse `mapping.csv`: over-long tensor file names renamed to `<digits>.npy` (v1.8+).

Each line is `mapped_name,original_name`, both with `.npy`, no header, appended as files are
renamed. The original name may itself contain commas only in theory (op names do not), so the
line is split at the first comma.
"""

from __future__ import annotations

from pathlib import Path

from ingest.formats.limits import MetadataCaps
from ingest.formats.mindspore.execution_order import read_complete_lines


def read_mapping_csv(
    path: str | Path, caps: MetadataCaps | None = None
) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """({mapped: original}, errors as (line number, reason)). Only complete lines are read; a file
    over the `csv` cap is not read at all (`ingest.formats.limits.MetadataTooLarge`, an OSError)."""
    lines, _, _ = read_complete_lines(str(path), 0, 0, caps)
    mapping: dict[str, str] = {}
    errors: list[tuple[int, str]] = []
    for i, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        mapped, sep, original = line.partition(",")
        if not sep or not mapped.strip() or not original.strip():
            errors.append((i, f"expected 'mapped,original', found {line[:80]!r}"))
            continue
        mapping[mapped.strip()] = original.strip()
    return mapping, errors
