"""`tensor_stats` rows of `tensors` rows: the statistics of each tensor computed from its data,
where its row says the data is (file, offset, stored dtype, device shape and format), with its
keys copied from the row.

One pure function for every caller: the ingest pipeline (new tensors without statistic.csv rows),
`dumpcat stats` (tensors a `--no-stats` ingest left), and its Spark tasks. A tensor whose data
cannot be read gets an `ingest_errors` row instead, the same at each of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa

from ingest.statistics.kernel import StatJob, compute_stats_many
from ingest.storage.schema import ARROW_CHUNK_ROWS, STAT_VALUE_FIELDS, TABLES, rows_to_table

__all__ = ["STATS_INPUT_COLUMNS", "STAT_VALUES", "computed_stats_rows", "stats_error_rows", "stats_rows_of"]

# `tensor_stats` = a tensor's keys (from its `tensors` row) + the statistics computed from its data.
_KEY_COLUMNS = TABLES["tensor_stats"].names[: -len(STAT_VALUE_FIELDS)]
STAT_VALUES = pa.schema(STAT_VALUE_FIELDS)  # the values computed from a tensor's data
_KEYS = pa.schema([TABLES["tensor_stats"].field(name) for name in _KEY_COLUMNS])
_PROGRESS_STEP = 1024  # tensors between progress reports: a bar moves, its calls cost nothing
_WHERE = ("row_id", "rel_path", "data_offset", "stored_dtype", "shape", "format", "host_shape")
# The columns of a `tensors` row that statistics need: the keys `tensor_stats` repeats, and where
# the data is.
STATS_INPUT_COLUMNS: tuple[str, ...] = tuple(dict.fromkeys([*_KEY_COLUMNS, *_WHERE]))


def computed_stats_rows(
    tensors: pa.Table,
    run: str,
    dump_root: str | os.PathLike,
    *,
    md5: bool = False,
    workers: int | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[pa.Table, pa.Table | None]:
    """The `tensor_stats` rows of `tensors` (their `tensors` rows, or at least STATS_INPUT_COLUMNS;
    text columns may be dictionary-encoded), and the `ingest_errors` rows (None when there are
    none) of the tensors whose data could not be read, which get no statistics row. `on_progress`
    hears every _PROGRESS_STEP tensors done (and the rest at the end), so that a bar moves."""
    cols = [tensors.column(c).to_pylist() for c in _WHERE]
    root = os.fspath(dump_root) + os.sep
    jobs = (
        StatJob(row_id, root + rel, offset, stored, tuple(shape), fmt, host)
        for row_id, rel, offset, stored, shape, fmt, host in zip(*cols, strict=True)
    )
    computed: list[bool] = []
    errors: list[tuple] = []
    chunks: list[pa.Table] = []
    rows: list[tuple] = []
    step = _PROGRESS_STEP if on_progress is not None else -1  # the next count reported at
    for i, (_, stats, error) in enumerate(compute_stats_many(jobs, md5=md5, workers=workers)):
        if i == step:  # `i` tensors done
            on_progress(_PROGRESS_STEP)  # type: ignore[misc]
            step += _PROGRESS_STEP
        computed.append(error is None)
        if error is not None:
            errors.append((cols[1][i], error))
            continue
        rows.append(tuple(stats.get(k) for k in STAT_VALUES.names))
        if len(rows) >= ARROW_CHUNK_ROWS:  # as Arrow columns, a row takes a fraction of a tuple
            chunks.append(rows_to_table(rows, STAT_VALUES))
            rows = []
    chunks.append(rows_to_table(rows, STAT_VALUES))
    if on_progress is not None and computed:
        on_progress(len(computed) - (step - _PROGRESS_STEP))  # the rest
    if not all(computed):
        tensors = tensors.filter(pa.array(computed, pa.bool_()))
    stats_table = stats_rows_of(tensors, pa.concat_tables(chunks))
    return stats_table, stats_error_rows(run, errors) if errors else None


def stats_rows_of(tensors: pa.Table, values: pa.Table) -> pa.Table:
    """`tensor_stats` rows: the keys of each of `tensors` (their `tensors` rows) with the values
    computed from its data (`values`, a row per tensor, in STAT_VALUES)."""
    keys = tensors.select(list(_KEY_COLUMNS))
    if not keys.schema.equals(_KEYS):  # dictionary-encoded while pending
        keys = keys.cast(_KEYS)
    return pa.Table.from_arrays([*keys.columns, *values.columns], schema=TABLES["tensor_stats"])


def stats_error_rows(run: str, failed: list[tuple[str, str]]) -> pa.Table:
    """`ingest_errors` rows of tensors whose statistics could not be computed: (rel_path, reason)."""
    now = datetime.now(UTC)
    return rows_to_table(
        [(run, rel, "tensor_stats", reason, None, now) for rel, reason in failed], TABLES["ingest_errors"]
    )
