"""dumpcat's query side: `from catalog import Catalog`."""

from catalog.api import Catalog, CatalogError, TensorNotFoundError

__all__ = ["Catalog", "CatalogError", "TensorNotFoundError"]
