"""Parse `execution_order/` files (v1.2+; the global history from v1.6).

- `ms_execution_order_graph_{g}.csv`: a header `NodeExecutionOrder-FullNameWithScope`, then one
  unsanitised full scope name per line in kernel execution order.
- `ms_global_execution_order_graph_{g}.csv`: no header, one iteration number per line, one line
  per execution of the (root) graph; opened in append mode, so it grows during training.

Both are consumed incrementally: the caller passes how many lines it already has and gets back
only complete new lines, so a file still being appended to is never half-read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ingest.formats.limits import MetadataCaps, open_capped
from ingest.formats.numbers import parse_uint

EXEC_ORDER_HEADER = "NodeExecutionOrder-FullNameWithScope"
EXEC_ORDER_FILE = re.compile(r"^ms_execution_order_graph_(\d+)\.csv$")
GLOBAL_ORDER_FILE = re.compile(r"^ms_global_execution_order_graph_(\d+)\.csv$")


@dataclass
class LinesResult:
    values: list[tuple[int, str]] = field(default_factory=list)  # (0-based data index, text)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (1-based line number, reason)
    end_offset: int = 0
    end_line: int = 0


def read_complete_lines(
    path: str, start_offset: int, start_line: int, caps: MetadataCaps | None = None
) -> tuple[list[str], int, int]:
    """Complete lines from start_offset on; returns (lines, end_offset, end_line). A file over the
    `csv` cap is not read (`ingest.formats.limits.MetadataTooLarge`, an OSError): its lines are all held."""
    with open_capped(path, "csv", caps) as fh:
        fh.seek(start_offset)
        data = fh.read()
    cut = data.rfind(b"\n") + 1
    text = data[:cut].decode("utf-8", errors="replace")
    lines = text.split("\n")[:-1] if cut else []
    return [ln.rstrip("\r") for ln in lines], start_offset + cut, start_line + len(lines)


def parse_exec_order(
    path: str, start_offset: int = 0, start_line: int = 0, caps: MetadataCaps | None = None
) -> LinesResult:
    """Full names in execution order; value index = position in the graph's execution order."""
    lines, end_offset, end_line = read_complete_lines(path, start_offset, start_line, caps)
    result = LinesResult(end_offset=end_offset, end_line=end_line)
    for i, line in enumerate(lines):
        line_no = start_line + i + 1
        if line_no == 1:
            if line.strip() != EXEC_ORDER_HEADER:
                result.errors.append((1, f"expected header {EXEC_ORDER_HEADER!r}, found {line[:80]!r}"))
            continue
        if not line.strip():
            continue
        problem = full_name_problem(line.strip())
        if problem:
            result.errors.append((line_no, f"{problem}: {line.strip()[:80]!r}"))
            continue
        result.values.append((line_no - 2, line.strip()))
    return result


MAX_FULL_NAME = 4096
_KERNEL_SUFFIX = re.compile(r"-op\d+$")


def full_name_problem(text: str) -> str | None:
    """Why a line cannot be a kernel's full scope name (None if it can).

    MindSpore writes `fullname_with_scope()`: printable text, scopes joined by `/`, ending in
    `-op{N}` (e.g. `Default/network-WithLossCell/_backbone-Net/Conv2D-op12`). A line of bytes that
    are not UTF-8, control characters, or neither a scope nor an `-op` suffix is junk, not a
    kernel; it must not become an `ops` row.
    """
    if "\ufffd" in text:
        return "not UTF-8 text"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "control characters in a kernel name"
    if len(text) > MAX_FULL_NAME:
        return f"longer than {MAX_FULL_NAME} characters"
    if "/" not in text and not _KERNEL_SUFFIX.search(text):
        return "not a kernel's full scope name (no scope and no -opN suffix)"
    return None


def parse_global_order(
    path: str, start_offset: int = 0, start_line: int = 0, caps: MetadataCaps | None = None
) -> LinesResult:
    """Iteration numbers, one per graph execution, in order."""
    lines, end_offset, end_line = read_complete_lines(path, start_offset, start_line, caps)
    result = LinesResult(end_offset=end_offset, end_line=end_line)
    for i, line in enumerate(lines):
        line_no = start_line + i + 1
        text = line.strip()
        if not text:
            continue
        if parse_uint(text) is not None:
            result.values.append((line_no - 1, text))
        else:
            result.errors.append((line_no, f"not an iteration number: {text[:80]!r}"))
    return result
