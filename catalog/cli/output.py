"""Render query results for the terminal: an aligned table, CSV or JSON lines.

Text comes from dumps, and a dump is input from anyone: an operator name can hold terminal
escape sequences (retitle the window, clear the screen, fake a prompt). What reaches a terminal
shows control characters as visible escapes (`printable`); JSON escapes them by itself, and CSV
written to a file or a pipe keeps the exact text.
"""

from __future__ import annotations

import csv
import json
import math
import re
from decimal import Decimal
from typing import Any, TextIO

import pyarrow as pa
from tabulate import tabulate

# C0 controls but tab and newline, DEL, and the C1 controls (8-bit CSI, OSC, ...)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(match: re.Match) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str) -> str:
    """`text` with control characters shown as `\\xNN`, so that printing it cannot drive the terminal."""
    return _CONTROL.sub(_escape, text)


def _cell(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value).replace("\n", "\\n")
    if value is None:
        return "NULL"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return format(value, ".6g")
    if isinstance(value, list):
        return "[" + ", ".join(str(_cell(v)) for v in value) + "]"
    return value


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # full precision; nan, inf, -inf
    if isinstance(value, list):
        return "[" + ", ".join(str(_csv_value(v)) for v in value) + "]"
    return value


def _json_value(value: Any) -> Any:
    """A value JSON can hold: non-finite floats as "nan"/"inf"/"-inf" (JSON has none), HUGEINT and
    DECIMAL sums as numbers, BLOBs as hex, dates and times as ISO text, nested lists and structs."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _rows(table: pa.Table) -> list[dict]:
    """Rows as Python values. Dates and times Python cannot hold ('infinity'::TIMESTAMP, year
    290000) make the whole conversion fail, so then temporal columns are rendered as text."""
    try:
        return table.to_pylist()
    except (OverflowError, ValueError, pa.ArrowInvalid):
        columns = [col.cast(pa.string()) if pa.types.is_temporal(col.type) else col for col in table.columns]
        return pa.Table.from_arrays(columns, names=table.column_names).to_pylist()


def _is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def write_table(table: pa.Table, out: TextIO, fmt: str = "table") -> None:
    """Write a result in the given format ('table', 'csv' or 'json')."""
    if fmt == "csv":
        shown = printable if _is_terminal(out) else str
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([shown(c) for c in table.column_names])
        for batch in table.to_batches(max_chunksize=10_000):
            for row in _rows(pa.Table.from_batches([batch], schema=table.schema)):
                values = (_csv_value(v) for v in row.values())
                writer.writerow([shown(v) if isinstance(v, str) else v for v in values])
    elif fmt == "json":
        for row in _rows(table):
            out.write(json.dumps(_json_value(row), allow_nan=False, default=str) + "\n")
    else:
        rows = [[_cell(v) for v in row.values()] for row in _rows(table)]
        headers = [printable(c) for c in table.column_names]
        out.write(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True) + "\n")
        out.write(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})\n")
