"""Parse one CANN per-operator statistics CSV, `{op_type}.{op_name}.{task}.{stream}.{timestamp}.csv`.

These are what `dump_data: stats` (acl.json, TorchAir `dump_data="stats"`, GE `ge.exec.dumpData`)
writes instead of raw tensors, one file per operator execution, in the same
`{time}/{device}/{model_name}/{model_id}/{data_index}/` tree (msprobe-cann-formats.md §2.3):

    Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,Count,Nan Count,
        Negative Inf Count,Positive Inf Count                          (one line in the file)
    Input,0,268435456,DT_INT64,ND,100x20x40,100,200,10.1,80000,400,500,600

The header is dynamic (the `dump_stats` list chooses and orders the statistics: `...,Shape,Count,Max
Value,Min Value,l2norm`), so every column is mapped by its header name, compared without case and
surrounding blanks. Known names: the six fixed columns (all required), `Max Value`, `Min Value`,
`Avg Value`, `Count`, `Nan Count`, `Negative Inf Count`, `Positive Inf Count`, `l2norm` /
`L2Norm Value`, `MD5 Value`. An unknown or repeated column makes the whole file unreadable
(CannStatsError names it). A header row repeated inside the file is skipped (one with another
column set re-maps the rows after it).

Values: `NA` and empty fields are NULL; numbers may be spelt `inf`, `-inf`, `nan` (any case) and
are IEEE values then; `Data Type` stays the GE name (`DT_FLOAT`, ...); `Shape` is dims joined by
`x`. Decisions where the reference is silent:

- a scalar's Shape: the join of zero dims is the empty string, so an empty Shape is the shape `()`
  (a `1` is the 1-d shape `(1,)`); `NA` is an unknown shape (None);
- the runtime writes `,,,,,,` for an empty statistics row. Whether those commas fill every
  statistics column or one fewer, a row whose fields after `Shape` are all empty is read as NULL
  statistics, even when it has fewer fields than the header; a short row with any statistic
  present, or a row missing a fixed column, is a bad line; extra trailing fields are accepted only
  when empty.

Bad lines (short rows, bad numbers, an `Input/Output` value other than Input/Output) are reported as
(line number, reason) and the other rows still come back. A UTF-8 BOM and CRLF line ends are fine.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from typing import TextIO

from ingest.formats.ascend.raw_dump import RawName, parse_raw_name
from ingest.formats.limits import MetadataCaps, open_text_capped

#: `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.csv` (the op name may hold dots); split the
#: name without `.csv` with `ingest.formats.ascend.raw_dump.parse_raw_name`, or use `parse_stats_csv_name`.
STATS_CSV_NAME = re.compile(r"^[A-Za-z0-9_-]+\..+\.[0-9]+\.[0-9]+\.[0-9]+\.csv$")


class CannStatsError(ValueError):
    """The file as a whole cannot be read: no header, or a header that cannot be mapped."""


@dataclass(frozen=True, slots=True)
class CannStatRow:
    line_no: int  # 1-based line of the file where the row starts
    io: str  # 'input' | 'output'
    index: int
    data_size: int | None  # bytes
    data_type: str | None  # GE name: 'DT_FLOAT', 'DT_BF16', ...
    format: str | None  # 'ND', 'FRACTAL_NZ', 'UNKNOW', ...
    shape: tuple[int, ...] | None
    max: float | None
    min: float | None
    avg: float | None
    count: int | None
    nan_count: int | None
    neg_inf_count: int | None
    pos_inf_count: int | None
    l2norm: float | None
    md5: str | None


# header name (lower case) -> CannStatRow field
_FIXED = {
    "input/output": "io",
    "index": "index",
    "data size": "data_size",
    "data type": "data_type",
    "format": "format",
    "shape": "shape",
}
_STATS = {
    "max value": "max",
    "min value": "min",
    "avg value": "avg",
    "count": "count",
    "nan count": "nan_count",
    "negative inf count": "neg_inf_count",
    "positive inf count": "pos_inf_count",
    "l2norm": "l2norm",
    "l2norm value": "l2norm",
    "md5 value": "md5",
}
_COLUMNS = {**_FIXED, **_STATS}
_INT_FIELDS = frozenset({"index", "data_size", "count", "nan_count", "neg_inf_count", "pos_inf_count"})
_FLOAT_FIELDS = frozenset({"max", "min", "avg", "l2norm"})
_TEXT_FIELDS = frozenset({"data_type", "format", "md5"})
_ALL_FIELDS = tuple(CannStatRow.__slots__)

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE
)
_IO = {"input": "input", "output": "output"}


def parse_stats_csv_name(file_name: str) -> RawName | None:
    """The parts of a stats CSV name (extension '.csv'), or None if it is not one."""
    if not STATS_CSV_NAME.match(file_name):
        return None
    raw = parse_raw_name(file_name[: -len(".csv")])
    if raw is None or raw.stream_id is None or raw.extension:
        return None
    return RawName(raw.op_type, raw.op_name, raw.task_id, raw.stream_id, raw.timestamp_us, ".csv")


def _norm(cell: str) -> str:
    return " ".join(cell.split()).lower()


def _is_header(cells: list[str]) -> bool:
    return bool(cells) and _norm(cells[0]) == "input/output"


def _map_header(cells: list[str]) -> tuple[str, ...]:
    """Field name of each column; CannStatsError naming unknown, repeated or missing columns."""
    names = [_norm(c) for c in cells]
    while names and names[-1] == "":  # a trailing comma
        names.pop()
    unknown = [cells[i].strip() for i, n in enumerate(names) if n not in _COLUMNS]
    if unknown:
        raise CannStatsError(
            "unknown column(s) in the stats CSV header: " + ", ".join(repr(u) for u in unknown)
        )
    fields = [_COLUMNS[n] for n in names]
    repeated = sorted({cells[i].strip() for i, f in enumerate(fields) if fields.count(f) > 1})
    if repeated:
        raise CannStatsError("repeated column(s) in the stats CSV header: " + ", ".join(map(repr, repeated)))
    missing = [name for name, f in _FIXED.items() if f not in fields]
    if missing:
        pretty = {"input/output": "Input/Output", "data size": "Data Size", "data type": "Data Type"}
        raise CannStatsError(
            "the stats CSV header lacks column(s): "
            + ", ".join(repr(pretty.get(m, m.title())) for m in missing)
        )
    return tuple(fields)


class _BadLine(Exception):
    pass


def _value(field: str, text: str):
    text = text.strip()
    if text == "" or text.upper() == "NA":
        if field == "shape" and text == "":
            return ()
        return None
    if field == "io":
        io = _IO.get(text.lower())
        if io is None:
            raise _BadLine(f"Input/Output is {text!r}, not Input or Output")
        return io
    if field in _INT_FIELDS:
        if not _INT.fullmatch(text):
            raise _BadLine(f"{field} is {text!r}, not an integer")
        return int(text)
    if field in _FLOAT_FIELDS:
        if not _FLOAT.fullmatch(text):
            raise _BadLine(f"{field} is {text!r}, not a number")
        return float(text)
    if field == "shape":
        dims = text.split("x")
        if not all(_INT.fullmatch(d.strip()) for d in dims):
            raise _BadLine(f"shape is {text!r}, not dims joined by 'x'")
        return tuple(int(d) for d in dims)
    return text  # data_type, format, md5


def _row(line_no: int, fields: tuple[str, ...], cells: list[str]) -> CannStatRow:
    short = f"{len(cells)} fields, the header has {len(fields)}"
    if len(cells) > len(fields):
        if any(c.strip() for c in cells[len(fields) :]):
            raise _BadLine(short)
        cells = cells[: len(fields)]
    elif len(cells) < len(fields):
        # only the empty statistics row `,,,,,,` may be short: every fixed column there, the rest empty
        present = dict(zip(fields, cells, strict=False))
        if any(f not in present for f in _FIXED.values()) or any(
            v.strip() for f, v in present.items() if f not in _FIXED.values()
        ):
            raise _BadLine(short)
        cells = cells + [""] * (len(fields) - len(cells))
    values = dict.fromkeys(_ALL_FIELDS)
    for field, cell in zip(fields, cells, strict=True):
        values[field] = _value(field, cell)
    if values["io"] is None:
        raise _BadLine("Input/Output is empty")
    if values["index"] is None:
        raise _BadLine("Index is empty")
    values["line_no"] = line_no
    return CannStatRow(**values)


def _parse(fh: TextIO) -> tuple[list[CannStatRow], list[tuple[int, str]]]:
    reader = csv.reader(fh)
    rows: list[CannStatRow] = []
    problems: list[tuple[int, str]] = []
    fields: tuple[str, ...] | None = None
    header_cells: list[str] | None = None
    line_end = 0
    while True:
        start = line_end + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            problems.append((reader.line_num, f"unreadable CSV, the rest of the file is skipped: {e}"))
            break
        line_end = reader.line_num
        if not any(c.strip() for c in cells):
            continue  # blank line
        if fields is None:
            if not _is_header(cells):
                raise CannStatsError(
                    f"line {start}: no stats CSV header (it starts with 'Input/Output,Index,...'), "
                    f"got {','.join(cells)[:80]!r}"
                )
            fields, header_cells = _map_header(cells), cells
            continue
        if _is_header(cells):
            if [_norm(c) for c in cells] != [_norm(c) for c in header_cells]:
                try:
                    fields, header_cells = _map_header(cells), cells
                except CannStatsError as e:
                    problems.append((start, f"unusable header row, the previous one still applies: {e}"))
            continue
        try:
            rows.append(_row(start, fields, cells))
        except _BadLine as e:
            problems.append((start, str(e)))
    if fields is None:
        raise CannStatsError("empty stats CSV: no header")
    return rows, problems


def read_cann_stats_csv(
    path: str | os.PathLike[str], caps: MetadataCaps | None = None
) -> tuple[list[CannStatRow], list[tuple[int, str]]]:
    """The rows of a CANN stats CSV, and (line number, reason) for each line that could not be read.

    Raises CannStatsError when the file has no usable header, OSError when it cannot be read or is
    over the `csv` cap (ingest.formats.limits: its rows are all held), and UnicodeDecodeError when it is not
    UTF-8.
    """
    with open_text_capped(path, "csv", caps, encoding="utf-8-sig", newline="") as fh:
        return _parse(fh)
