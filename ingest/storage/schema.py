"""Arrow schemas of every catalog table: the one place that says what a row holds.

The ingest side builds records as plain dicts keyed by these field names; the writer turns
batches of them into parquet with exactly these types, so every batch file of a table
has the same schema and DuckDB can read them all with one `read_parquet` list.
"""

from __future__ import annotations

import pyarrow as pa

SHAPE = pa.list_(pa.int64())

# One row per tensor file (npy) found in the dump.
TENSORS = pa.schema(
    [
        ("row_id", pa.int64()),
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("net", pa.string()),
        ("graph_id", pa.int32()),
        ("iteration", pa.int64()),  # NULL for constants/
        ("dir_kind", pa.string()),  # 'iteration' | 'constants'
        ("rel_path", pa.string()),  # relative to the run's dump root, '/'-separated
        ("file_name", pa.string()),
        ("original_name", pa.string()),  # from mapping.csv when the file was renamed to digits
        ("op_type", pa.string()),
        ("file_op_name", pa.string()),  # op name exactly as written in the file name
        ("file_op_base", pa.string()),  # file_op_name without its '-opN' suffix (see sql/00_op_keys.sql)
        ("task_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("timestamp_us", pa.int64()),
        ("io", pa.string()),  # 'input' | 'output'
        ("slot", pa.int32()),
        ("format", pa.string()),
        ("dtype", pa.string()),  # original dtype: the name's token, else the stored dtype
        ("stored_dtype", pa.string()),  # numpy dtype of the data in the file
        ("shape", SHAPE),
        ("data_offset", pa.int64()),
        ("nbytes", pa.int64()),
        ("file_size", pa.int64()),
        ("name_era", pa.string()),  # 'v1.3-2.2' | 'v2.3' | 'v2.4+'
        # Added with the reader-per-producer pipeline (older catalogs read these as NULL):
        ("producer", pa.string()),  # the reader that cataloged the file ('mindspore-npy', 'ascend-raw', ...)
        ("host_shape", SHAPE),  # shape in the host layout when `shape`/`format` are a device layout
        ("op_full_name", pa.string()),  # full scope name recorded inside the file (raw dump header)
        ("source_row_id", pa.int64()),  # a converted file (msaccucmp): the raw slot it was made from
    ]
)

STAT_VALUE_FIELDS = [
    ("max", pa.float64()),
    ("min", pa.float64()),
    ("avg", pa.float64()),
    ("count", pa.int64()),
    ("neg_count", pa.int64()),  # elements < 0 (MindSpore's 'Negative Zero Count')
    ("pos_count", pa.int64()),  # elements > 0 (MindSpore's 'Positive Zero Count')
    ("nan_count", pa.int64()),
    ("neg_inf_count", pa.int64()),
    ("pos_inf_count", pa.int64()),
    ("zero_count", pa.int64()),
    ("l2norm", pa.float64()),
    ("md5", pa.string()),
]

# One row per data line of a statistic.csv.
STAT_ROWS = pa.schema(
    [
        ("stat_id", pa.int64()),
        ("row_id", pa.int64()),  # the tensor file this row describes, matched at ingest; NULL if none
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("net", pa.string()),
        ("graph_id", pa.int32()),
        ("iteration", pa.int64()),
        ("csv_path", pa.string()),
        ("line_no", pa.int64()),  # 1-based physical line in the csv
        ("op_type", pa.string()),
        ("file_op_name", pa.string()),
        ("file_op_base", pa.string()),
        ("task_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("timestamp_us", pa.int64()),
        ("io", pa.string()),
        ("slot", pa.int32()),
        ("data_size", pa.int64()),
        ("data_type", pa.string()),
        ("format", pa.string()),
        ("shape", SHAPE),
        *STAT_VALUE_FIELDS,
        # What the matched tensor file contradicts: NULL when it agrees (or there is none),
        # else 'shape', 'nbytes' or 'shape,nbytes' (csv Shape / Data Size vs the npy header).
        ("mismatch", pa.string()),
        # Added with the msprobe and GE readers (older catalogs read these as NULL, meaning a
        # MindSpore statistic.csv): where the row comes from and whose definitions its values follow.
        ("stat_source", pa.string()),  # 'statistic.csv' | 'cann_stats_csv' | 'dump.json'
        ("stat_semantics", pa.string()),  # 'mindspore' | 'cann' | 'msprobe' (see sql/40_stats.sql)
        ("op_full_name", pa.string()),  # the op's full name as the file gives it (msprobe entry key)
        ("exec_index", pa.int64()),  # order of execution within the file (msprobe: entry order)
        ("arg_path", pa.string()),  # msprobe: the argument, e.g. 'input.0', 'input.1.0', 'parameters.weight'
        ("requires_grad", pa.bool_()),
    ]
)

STAT_ROWS_ADDED = ("stat_source", "stat_semantics", "op_full_name", "exec_index", "arg_path", "requires_grad")

# Statistics dumpcat computed from tensor data (tensors without a statistic.csv row). The tensor's
# keys are repeated here so that the `stats` view needs no join against the big tensors table.
TENSOR_STATS = pa.schema(
    [
        ("row_id", pa.int64()),
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("net", pa.string()),
        ("graph_id", pa.int32()),
        ("iteration", pa.int64()),
        ("op_type", pa.string()),
        ("file_op_name", pa.string()),
        ("file_op_base", pa.string()),
        ("timestamp_us", pa.int64()),
        ("io", pa.string()),
        ("slot", pa.int32()),
        ("dtype", pa.string()),
        ("shape", SHAPE),
        ("nbytes", pa.int64()),
        ("op_full_name", pa.string()),  # as in tensors (raw dump headers name the op in full)
        *STAT_VALUE_FIELDS,
    ]
)

# Kernel execution order per graph (execution_order/ms_execution_order_graph_{g}.csv).
OPS = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("graph_id", pa.int32()),
        ("exec_index", pa.int32()),
        ("full_name", pa.string()),
        ("sanitized_name", pa.string()),  # v2.3+ file-name form of full_name
        ("short_name", pa.string()),  # last scope component (v1.3-2.2 file-name form)
        ("op_type", pa.string()),  # from the short name, 'Conv2D-op12' -> 'Conv2D'
        ("base_name", pa.string()),  # sanitized_name without its '-opN' suffix
    ]
)

# Global execution history (execution_order/ms_global_execution_order_graph_{g}.csv).
GRAPH_RUNS = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("graph_id", pa.int32()),
        ("seq", pa.int32()),
        ("iteration", pa.int64()),
    ]
)

# One row per rank of a run (.dump_metadata/).
RANK_META = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("dump_root", pa.string()),
        ("device_target", pa.string()),
        ("ms_version", pa.string()),
        ("dump_config", pa.string()),  # data_dump.json text
        ("hccl_config", pa.string()),
        # a rank's metadata is read again when a file of it changes: the latest copy is the one
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)

# Kernel args json files, one row per argument.
KERNEL_ARGS = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("net", pa.string()),
        ("graph_id", pa.int32()),
        ("iteration", pa.int64()),
        ("rel_path", pa.string()),
        ("op_type", pa.string()),
        ("file_op_name", pa.string()),
        ("arg_name", pa.string()),
        ("arg_value", pa.string()),
    ]
)

# Graph IR (graphs/ms_output_trace_code_graph_{g}.pb, or .ir when there is no .pb): one row per node.
IR_NODES = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("graph_id", pa.int32()),
        ("source", pa.string()),  # 'pb' | 'ir'
        ("node_key", pa.string()),  # '{subgraph}:%N', '%paraN', '{subgraph}:Return'
        ("graph_name", pa.string()),
        ("op_type", pa.string()),
        ("full_name", pa.string()),
        ("is_parameter", pa.bool_()),
        ("param_name", pa.string()),
        ("attributes", pa.string()),  # JSON object of attribute texts
        ("input_types", pa.list_(pa.string())),
        ("output_types", pa.list_(pa.string())),
        ("output_dtypes", pa.list_(pa.string())),
        ("output_shapes", pa.list_(SHAPE)),
        ("device_formats", pa.list_(pa.string())),
        ("device_dtypes", pa.list_(pa.string())),
        ("device_shapes", pa.list_(SHAPE)),
        ("ir_line", pa.int64()),
    ]
)

# Graph edges: operand `input_index` of `consumer_key` is produced by `producer_key`.
EDGES = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("graph_id", pa.int32()),
        ("producer_key", pa.string()),
        ("consumer_key", pa.string()),
        ("input_index", pa.int32()),
        ("kind", pa.string()),  # 'data' | 'control'
    ]
)

# Every stack frame of every node's source trace, outermost first.
SOURCE_LINES = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("graph_id", pa.int32()),
        ("node_key", pa.string()),
        ("full_name", pa.string()),
        ("depth", pa.int32()),
        ("file", pa.string()),
        ("line", pa.int64()),
        ("line_end", pa.int64()),
        ("col_start", pa.int64()),
        ("col_end", pa.int64()),
        ("code", pa.string()),
        ("is_user_code", pa.bool_()),
    ]
)

INGEST_ERRORS = pa.schema(
    [
        ("run", pa.string()),
        ("rel_path", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
        ("file_size", pa.int64()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)

# What has been ingested: lets re-ingest skip known files and resume a grown statistic.csv.
MANIFEST = pa.schema(
    [
        ("run", pa.string()),
        ("rel_path", pa.string()),
        ("kind", pa.string()),
        ("file_size", pa.int64()),
        ("consumed_bytes", pa.int64()),  # for append-only files: bytes already ingested
        ("consumed_lines", pa.int64()),
        ("status", pa.string()),  # 'ok' | 'error'
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)

# Runs: one row per ingest of a dump root under a run name.
RUNS = pa.schema(
    [
        ("run", pa.string()),
        ("dump_root", pa.string()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
        ("dumpcat_version", pa.string()),
    ]
)

# Overflow-debug records (Ascend op_debug_mode 3): one row per info block of an
# `Opdebug.Node_OpDebug.*` raw file or its npy-format `.json`; see ingest/formats/ascend/overflow.py.
OVERFLOWS = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("net", pa.string()),
        ("graph_id", pa.int32()),
        ("iteration", pa.int64()),
        ("rel_path", pa.string()),
        ("file_task_id", pa.int64()),  # the Opdebug file's own task and stream (from its name)
        ("file_stream_id", pa.int64()),
        ("timestamp_us", pa.int64()),
        ("block", pa.string()),  # 'DHA Atomic Add' | 'L2 Atomic Add' | 'AI Core'
        ("model_id", pa.int64()),
        ("stream_id", pa.int64()),  # the overflowing task's stream and task
        ("task_id", pa.int64()),
        ("task_type", pa.int64()),
        ("pc_start", pa.int64()),
        ("para_base", pa.int64()),
        ("status", pa.int64()),
        ("kernel_code", pa.int64()),
        ("block_idx", pa.int64()),
    ]
)

# msprobe construct.json: the module tree of one step of one rank, a row per node (module or API
# call) with its parent; depth 0 is a root.
MODULES = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("iteration", pa.int64()),  # the step
        ("rel_path", pa.string()),  # the construct.json
        ("node", pa.string()),
        ("parent", pa.string()),
        ("depth", pa.int32()),
        ("micro_step", pa.int64()),  # Megatron variant only
    ]
)

# TorchAir GE graphs (dynamo_*.txt): each GE op output that carries `_fx_tensor_name`, the FX
# tensor it computes (`{node}-{aten op}.OUTPUT.{i}`, an FX dump file's name without its timestamp).
FX_LINKS = pa.schema(
    [
        ("run", pa.string()),
        ("rank", pa.int32()),
        ("graph_path", pa.string()),
        ("graph_name", pa.string()),
        ("ge_op", pa.string()),
        ("ge_op_type", pa.string()),
        ("output_index", pa.int32()),  # NULL when the attribute sits on the op rather than an output
        ("fx_tensor_name", pa.string()),
    ]
)

# Run-vs-run tensor comparisons (`dumpcat compare`): one row per matched pair of tensors, or per
# tensor present in one run only; metrics in ingest/compare_metrics.py.
COMPARISONS = pa.schema(
    [
        ("run", pa.string()),
        ("baseline_run", pa.string()),
        ("rank", pa.int32()),
        ("graph_id", pa.int32()),  # the run's (the baseline's when only in the baseline)
        ("iteration", pa.int64()),
        ("exec_index", pa.int64()),
        ("timestamp_us", pa.int64()),
        ("occurrence", pa.int32()),  # n-th execution of the same op/io/slot within the iteration
        ("op_type", pa.string()),
        ("op_name", pa.string()),
        ("io", pa.string()),
        ("slot", pa.int32()),
        ("row_id", pa.int64()),
        ("baseline_row_id", pa.int64()),
        ("dtype", pa.string()),
        ("baseline_dtype", pa.string()),
        ("shape", SHAPE),
        ("baseline_shape", SHAPE),
        ("numel", pa.int64()),
        ("cosine", pa.float64()),
        ("max_abs_err", pa.float64()),
        ("max_rel_err", pa.float64()),
        ("mean_abs_err", pa.float64()),
        ("rmse", pa.float64()),
        ("rel_euclidean", pa.float64()),
        ("kl_div", pa.float64()),
        ("acc_rel_err", pa.float64()),
        ("err_ratio_1e3", pa.float64()),
        ("err_ratio_5e3", pa.float64()),
        ("status", pa.string()),
        ("compared_at", pa.timestamp("us", tz="UTC")),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "tensors": TENSORS,
    "stat_rows": STAT_ROWS,
    "tensor_stats": TENSOR_STATS,
    "ops": OPS,
    "graph_runs": GRAPH_RUNS,
    "rank_meta": RANK_META,
    "kernel_args": KERNEL_ARGS,
    "ir_nodes": IR_NODES,
    "edges": EDGES,
    "source_lines": SOURCE_LINES,
    "ingest_errors": INGEST_ERRORS,
    "manifest": MANIFEST,
    "runs": RUNS,
    "overflows": OVERFLOWS,
    "modules": MODULES,
    "fx_links": FX_LINKS,
    "comparisons": COMPARISONS,
}


# Rows built in Python become an Arrow table this many at a time (as Arrow columns a row takes a
# fraction of a tuple's memory): the pipeline's pending rows, computed statistics.
ARROW_CHUNK_ROWS = 16_384


def rows_to_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """Rows (tuples in the schema's column order) as an Arrow table of that schema."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
    )


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns in order: columns it lacks are NULL, types are cast."""
    n = table.num_rows
    names = set(table.column_names)
    arrays = [table.column(f.name).cast(f.type) if f.name in names else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
