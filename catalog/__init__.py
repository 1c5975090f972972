"""dumpcat's query side: `from catalog import Catalog`.

In layers (docs/structure.md): the query core (`views`, `guard`, `session_commands`,
`tensor_index`), the operations a Catalog offers (`compare`, `missing_stats`, `export`, `report/`,
`spark/`), the `Catalog` API (`api`) over them, and the front ends (`cli/`, `server/`).

The names are loaded on first use (PEP 562), so that `dumpcat` commands, which live in this
package, start without importing DuckDB, numpy and pyarrow before they need them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ingest  # noqa: F401  (sets up the allocators before pyarrow and DuckDB load: ingest/storage/memory.py)

if TYPE_CHECKING:
    from catalog.api import Catalog, CatalogError, QueryRefused, Result, TensorNotFoundError

__all__ = ["Catalog", "CatalogError", "QueryRefused", "Result", "TensorNotFoundError"]


def __getattr__(name: str):
    if name in __all__:
        import catalog.api

        return getattr(catalog.api, name)
    raise AttributeError(f"module 'catalog' has no attribute {name!r}")
