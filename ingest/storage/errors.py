"""What the storage layer raises and warns, in a module of their own so that every part of it
(and both sides above it) can name them without importing the store."""


class CatalogError(Exception):
    """The catalog directory is missing, not a catalog, or unusable."""


class CatalogWarning(UserWarning):
    """Part of the catalog is unreadable (a damaged shard snapshot or registry): readers show the rest."""
