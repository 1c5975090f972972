"""dumpcat's ingest side: readers of every producer's dumps, and the catalog store they write."""

from ingest.memory import configure_allocators

# Before any module of the package imports pyarrow or DuckDB (see ingest/memory.py).
configure_allocators()
