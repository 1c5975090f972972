"""dumpcat's ingest side, in layers that import downward only (docs/structure.md):

- `storage/`: the catalog on disk (snapshots, batches, flat files, schema, the raw-view SQL), which
  the query side reads too;
- `formats/`: bytes to values, by producer family (`mindspore/`, `ascend/`, `msprobe/`);
- `statistics/`, `compare_metrics`, `helper_pool`, `ids`: the kernels and the processes they use;
- `readers/`: one reader per producer, which sees the pipeline only through `readers/sink.py`;
- `pipeline`, `watch`: the producer-agnostic ingest, one-shot or live.
"""

from ingest.storage.memory import configure_allocators

# Before any module of the package imports pyarrow or DuckDB (see ingest/storage/memory.py).
configure_allocators()
