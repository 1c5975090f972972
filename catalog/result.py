"""What `Catalog.sql` (and `where`, `anomalies`, `runs`) return: the Arrow table of the answer, with
the conversions a notebook wants (`.df()`, `.pl()`, `.fetchall()`) and an HTML view for Jupyter.

A `Result` is not a copy: it holds the `pyarrow.Table` DuckDB returned and hands everything it does
not define itself to that table (`.num_rows`, `.schema`, `.column()`, `.to_pylist()`,
`.to_pandas()` ...), so code written when `Catalog.sql` returned the bare table keeps working. It
speaks the Arrow PyCapsule stream interface, so `pyarrow.table(r)`, `polars.DataFrame(r)` and
DuckDB read it without a copy. pandas and polars are optional (`pip install -e '.[pandas]'`,
`'.[polars]'`): only `.df()` and `.pl()` need them.
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    import pandas
    import polars

__all__ = ["Result"]

HTML_ROWS = 20  # rows `_repr_html_` shows; a notebook cell of a million-row answer stays small
TEXT_ROWS = 10  # rows `__repr__` shows
MAX_CELL = 120  # characters of one cell shown (long lists and strings end with "…")


def _optional(module: str, extra: str, why: str) -> Any:
    """Import an optional library, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{why} needs {module}, which is not installed: pip install -e '.[{extra}]' "
            f"(or pip install {module})"
        ) from exc


def _cell(value: object) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _display_rows(table: pa.Table) -> list[tuple]:
    """Rows to show. Dates Python cannot hold ('infinity'::TIMESTAMP) fail a conversion: then the
    temporal columns are shown as DuckDB's text (as `dumpcat sql` does)."""
    try:
        columns = [col.to_pylist() for col in table.columns]
    except (OverflowError, ValueError, pa.ArrowInvalid):
        columns = [
            (col.cast(pa.string()) if pa.types.is_temporal(col.type) else col).to_pylist()
            for col in table.columns
        ]
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(table.num_rows)]


class Result:
    """The answer of a catalog query: a `pyarrow.Table` (every table attribute works on it) plus
    `.arrow()`, `.df()`, `.pl()`, `.fetchall()`, and a bounded HTML view in Jupyter."""

    __slots__ = ("_table",)
    __hash__ = None  # type: ignore[assignment]  # equality is by value, as a table's

    def __init__(self, table: pa.Table) -> None:
        if isinstance(table, Result):
            table = table._table
        if not isinstance(table, pa.Table):
            raise TypeError(f"Result wraps a pyarrow.Table, not {type(table).__name__}")
        self._table = table

    # -- conversions -----------------------------------------------------------------------

    def arrow(self) -> pa.Table:
        """The answer as the `pyarrow.Table` itself (no copy)."""
        return self._table

    def df(self) -> pandas.DataFrame:
        """The answer as a pandas DataFrame (needs the `pandas` extra)."""
        _optional("pandas", "pandas", "Result.df()")
        return self._table.to_pandas()

    def pl(self) -> polars.DataFrame:
        """The answer as a polars DataFrame, sharing the Arrow buffers (needs the `polars` extra)."""
        polars = _optional("polars", "polars", "Result.pl()")
        return polars.from_arrow(self._table)

    def fetchall(self) -> list[tuple]:
        """Every row as a tuple, in column order (as a DB-API cursor's `fetchall`)."""
        return list(self)

    # -- the table's protocols -------------------------------------------------------------

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream: `pa.table(r)`, `pl.DataFrame(r)` and DuckDB read it as is."""
        return self._table.__arrow_c_stream__(requested_schema)

    def __reduce__(self) -> tuple:
        return (Result, (self._table,))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_table":
            raise AttributeError(name)
        return getattr(self._table, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._table)))

    def __len__(self) -> int:
        return self._table.num_rows

    def __getitem__(self, key: int | str) -> pa.ChunkedArray:
        """A column, by name or position (as on the table)."""
        return self._table[key]

    def __iter__(self) -> Iterator[tuple]:
        """The rows, as tuples (`for run, n in cat.sql(...)`)."""
        columns = [col.to_pylist() for col in self._table.columns]
        if not columns:
            return iter([() for _ in range(self._table.num_rows)])
        return zip(*columns, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Result):
            other = other._table
        if isinstance(other, pa.Table):
            return self._table.equals(other)
        return NotImplemented

    # -- display ---------------------------------------------------------------------------

    def _shape(self) -> str:
        rows, cols = self._table.num_rows, self._table.num_columns
        return f"{rows:,} row{'s' * (rows != 1)} × {cols} column{'s' * (cols != 1)}"

    def __repr__(self) -> str:
        from tabulate import tabulate

        head = self._table.slice(0, TEXT_ROWS)
        rows = [[_cell(v) for v in row] for row in _display_rows(head)]
        text = tabulate(rows, headers=self._table.column_names, disable_numparse=True)
        more = self._table.num_rows - head.num_rows
        tail = f"\n… {more:,} more row{'s' * (more != 1)}" if more > 0 else ""
        return f"Result: {self._shape()}\n{text}{tail}"

    def _repr_html_(self) -> str:
        """Jupyter's view: the first HTML_ROWS rows, every value escaped, and the answer's size."""
        head = self._table.slice(0, HTML_ROWS)
        esc = html.escape
        header = "".join(
            f"<th>{esc(f.name)}<br><small>{esc(str(f.type))}</small></th>" for f in self._table.schema
        )
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(_cell(v))}</td>" for v in row) + "</tr>"
            for row in _display_rows(head)
        )
        shown = f", first {head.num_rows:,} shown" if head.num_rows < self._table.num_rows else ""
        return (
            '<div class="dumpcat-result"><table>'
            f"<thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>{esc(self._shape())}{shown}</p></div>"
        )
