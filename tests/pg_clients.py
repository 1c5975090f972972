"""The client conformance suite's shared pieces (tests/test_clients_*.py): a real `dumpcat serve`
on the committed nan_log dump's catalog, with a password so that every client logs in through
SCRAM, the addresses clients connect to, and the comparison of a client's answer with what
`Catalog.sql` answers to the same query in process.

Values compare exactly: the server sends floats losslessly, so the only allowance is NaN == NaN.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from catalog.server.server import Limits, Server

USER, PASSWORD, DBNAME = "analyst", "conformance-pw", "dumpcat"

# Statistics rows holding NaN: NaN floats, NULL integers (exec_index), empty and non-empty arrays
# (shape), text, booleans, int4 and int8 (row ids above 2**53).
NAN_ROWS = (
    "SELECT row_id, rank, op_name, nan_count, max, min, shape, exec_index, has_nan "
    "FROM stats WHERE nan_count > 0 ORDER BY row_id"
)
# A timestamptz and a text[] column (the catalog's other value types).
RUN_ROWS = "SELECT run, ingested_at, ranks, dump_roots FROM runs ORDER BY run"
# The same rows' columns and their types as psycopg's COPY set_types and asyncpg name them.
NAN_ROWS_TYPED = (
    "SELECT row_id, op_name, nan_count, max, shape, exec_index FROM stats WHERE nan_count > 0 ORDER BY row_id"
)
NAN_ROWS_TYPES = ["int8", "text", "int8", "float8", "int8[]", "int8"]

# Views the catalog's users query, which a BI tool must list as views of `public`, and internal
# helpers the user views are built from, which it must not list (issue 31, point 4).
USER_VIEWS = ("stats", "tensors", "ops", "first_anomaly", "source_lines", "ingest_errors", "runs")
INTERNAL_VIEWS = ("stats_resolved", "src_stat_rows", "op_keys_base", "dumpcat_views_defined")


@dataclass(frozen=True)
class Endpoint:
    """Where a client connects: host, port, and the one user's name and password."""

    host: str
    port: int
    user: str = USER
    password: str = PASSWORD
    dbname: str = DBNAME

    def uri(self, scheme: str = "postgresql") -> str:
        return f"{scheme}://{self.user}:{self.password}@{self.host}:{self.port}/{self.dbname}"

    def sqlalchemy_url(self, driver: str):
        from sqlalchemy import URL

        return URL.create(
            f"postgresql+{driver}",
            username=self.user,
            password=self.password,
            host=self.host,
            port=self.port,
            database=self.dbname,
        )


@contextlib.contextmanager
def serve(cat_path: Path) -> Iterator[Endpoint]:
    """`dumpcat serve` of `cat_path` on 127.0.0.1 (an unused port), SCRAM for one user."""
    limits = Limits(query_timeout=60)
    with Server(cat_path, host="127.0.0.1", port=0, users={USER: PASSWORD}, limits=limits) as srv:
        yield Endpoint("127.0.0.1", srv.port)


# -- comparison ---------------------------------------------------------------------------------


class _NaN:
    """NaN as a value equal to itself."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NaN)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "NaN"


NAN = _NaN()


def value(v: object) -> object:
    """A value as compared: NaN equal to NaN, numpy scalars as Python's, arrays as tuples."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return NAN
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(value(x) for x in v)
    return v


def rows_of(rows: Iterable[Sequence[object]]) -> list[tuple]:
    return [tuple(value(v) for v in row) for row in rows]


def arrow_answer(table: pa.Table) -> tuple[list[str], list[tuple]]:
    """Column names and rows of an Arrow table."""
    return table.column_names, rows_of(tuple(r.values()) for r in table.to_pylist())


def expected(catalog, query: str, params: Sequence[object] | None = None) -> tuple[list[str], list[tuple]]:
    """What `Catalog.sql` answers to `query` ('%s' placeholders become DuckDB's '?')."""
    return arrow_answer(catalog.sql(query.replace("%s", "?"), list(params) if params else None))


def assert_same(
    names: Sequence[str],
    rows: Iterable[Sequence[object]],
    want: tuple[list[str], list[tuple]],
    *,
    ordered: bool = True,
) -> None:
    """A client's column names and rows are `want`'s (from `expected`); `want` must have rows, or
    the comparison would prove little."""
    want_names, want_rows = want
    assert want_rows, "the reference answer is empty: pick a query that returns rows"
    got = rows_of(rows)
    if not ordered:
        got, want_rows = sorted(got, key=repr), sorted(want_rows, key=repr)
    assert list(names) == list(want_names)
    assert len(got) == len(want_rows)
    for i, (g, w) in enumerate(zip(got, want_rows, strict=True)):
        assert g == w, f"row {i}: {g!r} != {w!r}"


def pandas_answer(df) -> tuple[list[str], list[tuple]]:
    """Column names and rows of a pandas DataFrame. pandas itself holds a NULL of a float column
    (or of an integer column with NULLs) as NaN, so its missing values of every kind compare as
    NaN; compare with `pandas_answer(table.to_pandas())` of the reference."""
    import pandas as pd

    def cell(v: object) -> object:
        if not isinstance(v, (list, tuple, np.ndarray)) and pd.isna(v):
            return NAN
        return value(v)

    return [str(c) for c in df.columns], [tuple(cell(v) for v in row) for row in df.itertuples(index=False)]


def polars_answer(df) -> tuple[list[str], list[tuple]]:
    return list(df.columns), rows_of(df.rows())


def same_type(got: pa.DataType, want: pa.DataType) -> bool:
    """Arrow types equal, list child field names aside (DuckDB names it 'l', drivers 'item')."""
    if pa.types.is_list(got) or pa.types.is_large_list(got):
        return pa.types.is_list(want) and same_type(got.value_type, want.value_type)
    return got == want
