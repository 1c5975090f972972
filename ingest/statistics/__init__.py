"""Statistics computed from tensor data: one package that ingest, `dumpcat stats` and the Spark
jobs all call.

- `kernel.py`: the statistics of a tensor (an array, or its bytes in a file), their exact
  semantics and summation order, and `compute_stats_many` over many files on every core;
- `_fused_stats.c`: the one-pass C kernel of a block of elements (bit-identical to the numpy
  fallback in kernel.py);
- `rows.py`: `computed_stats_rows`, the `tensor_stats` and `ingest_errors` rows of a table of
  `tensors` rows, the one function every caller goes through.

Imports nothing here: a helper process that computes statistics imports kernel.py alone.
"""
