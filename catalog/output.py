"""Render query results for the terminal: an aligned table, CSV or JSON lines."""

from __future__ import annotations

import csv
import json
import math
from typing import Any, TextIO

import pyarrow as pa
from tabulate import tabulate


def _cell(value: Any) -> Any:
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
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Infinity: "nan", "inf", "-inf"
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def write_table(table: pa.Table, out: TextIO, fmt: str = "table") -> None:
    """Write a result in the given format ('table', 'csv' or 'json')."""
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(table.column_names)
        for batch in table.to_batches(max_chunksize=10_000):
            for row in batch.to_pylist():
                writer.writerow([_csv_value(v) for v in row.values()])
    elif fmt == "json":
        for row in table.to_pylist():
            out.write(json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n")
    else:
        rows = [[_cell(v) for v in row.values()] for row in table.to_pylist()]
        out.write(tabulate(rows, headers=table.column_names, tablefmt="simple", disable_numparse=True) + "\n")
        out.write(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})\n")
