"""dumpcat's ingest side: readers of every producer's dumps, and the catalog store they write."""

from ingest.storage.memory import configure_allocators

# Before any module of the package imports pyarrow or DuckDB (see ingest/storage/memory.py).
configure_allocators()
