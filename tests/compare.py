"""Catalog contents as plain Python values, for tests that compare two catalogs with ==."""

from __future__ import annotations

import math

from catalog import Catalog


def catalog_content(cat: Catalog, queries: tuple[str, ...]) -> list[list[dict]]:
    """The rows of each query, NaN (which equals nothing) spelled "nan"."""

    def norm(v):
        return "nan" if isinstance(v, float) and math.isnan(v) else v

    return [[{k: norm(v) for k, v in row.items()} for row in cat.sql(q).to_pylist()] for q in queries]
