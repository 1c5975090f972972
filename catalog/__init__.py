"""dumpcat's query side: `from catalog import Catalog`."""

from catalog.api import Catalog, CatalogError, QueryRefused, TensorNotFoundError

__all__ = ["Catalog", "CatalogError", "QueryRefused", "TensorNotFoundError"]
