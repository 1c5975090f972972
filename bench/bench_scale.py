"""Issue 15, part 4: dumpcat catalogs of 10^6-10^8 statistic rows, written directly (no dump files),
and the NaN query, `first_anomaly` and a row-id lookup timed on them in DuckDB and Spark local mode.

The generator (`generate`) writes a catalog as a one-shot `dumpcat ingest` of a MindSpore 2.4+
Ascend dump would leave it: one run, ranks x iterations x the kernels of one graph in execution
order, each kernel's inputs and outputs as tensor files (`tensors`) with a `statistic.csv` row each
(`stat_rows`), the execution order (`ops`), the graph IR (`ir_nodes`, `edges`, `source_lines`), the
global execution history, rank metadata and the manifest; a small share of steps goes bad at one
kernel (NaN, or +Inf) and the NaN spreads to the kernels after it, so `first_anomaly` has answers.
Row ids and statistic ids are `ingest.ids`' hashes of the paths the files would have.

How it is written, and why this way:

- Raw batches are written by the catalog's own batch writer (`CatalogStore._write_batch`: same
  files, schema, compression, row groups and snapshot entries as an ingest), 50,000 rows a batch
  (an ingest's flush size), a rank's operator and graph tables in its first batch.
- The flat `stats`/`tensors` files are NOT built by `ingest/storage/flat.py` here: it resolves each batch
  with one DuckDB thread and, on each commit, scans every earlier stats file for the batch's row ids
  and merges files by size tier. At 10^6 rows with tensor files that took it 62 s against 12 s
  here, and only with its DuckDB memory limit raised (with the default 256 MB it ran out of memory
  merging at 750,000 rows of these long kernel names); its per-commit scan grows with the catalog.
  `--flat-writer catalog` runs it (docs/benchmarks.md has the figures). Instead the generator writes
  them in the layout `ingest/storage/flat.py` gives at the end of a one-shot ingest: one file per table per
  shard, rows sorted by row id, written by DuckDB's parquet writer from a DuckDB table (one thread,
  its 122,880-row groups; flat.py's boundaries differ by a few hundred rows), the `index.arrow`
  sidecar of the tensors file by `flat.seal_flat_dir`, and the snapshot entries (`sources`,
  `keys`) flat.py writes. The column values are what `stats_resolved` / `tensors_resolved` give for
  these rows (every name resolves `exact`), computed here from the same per-row function that wrote
  the raw rows; the column list and types are read from those views in DuckDB, so a changed view
  fails loudly. tests/test_bench_scale.py checks, at 10^4 rows, that the files equal, row for row
  and type for type, what `ingest/storage/flat.py` builds from the same raw batches.
- Memory is bounded whatever N is: rows are produced one batch at a time, and the sort by row id
  is a bucket sort through the working directory ((row id, statistic id, row number) triples,
  24 bytes a row, bucketed by the row id's top bits, ~2 M rows a bucket), each bucket sorted in
  memory and its rows generated again from their row numbers.

Every value of a row is a function of its row number (a hash of it), which is what lets the flat
pass regenerate rows in row-id order. The tensor files themselves are not written: the catalog's
dump root is a path that does not exist, and `Catalog.tensor` says the file is gone.

    python bench/bench_scale.py                                   # 10^6 rows, DuckDB and Spark
    python bench/bench_scale.py --rows 1e6,1e7 --workdir DIR --keep
    python bench/bench_scale.py --rows 1e8 --workdir DIR --keep    # ~20 GB of disk, see --help
    python bench/bench_scale.py --rows 1e6 --flat-writer catalog   # flat files by ingest/storage/flat.py

Results accumulate in DIR/results.json (one entry per row count), and the table of all of them is
printed (`python -m bench` puts it into docs/benchmarks.md, from a fresh DIR: that run's figures only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import emit  # noqa: E402

from ingest.formats.mindspore.npy_name import op_type_of, sanitize_v23, short_name, without_op_index  # noqa: E402
from ingest.ids import TensorIdHasher, stat_row_ids  # noqa: E402
from ingest.storage import flat as flat_mod  # noqa: E402
from ingest.storage.schema import TABLES  # noqa: E402
from ingest.storage.store import SNAPSHOT, CatalogStore, write_json_atomic  # noqa: E402

NET = "Net"
GRAPH = 0
BASE_TS_US = 1_795_300_000_000_000  # 2026-11, µs since the epoch
STEP_US = 10_000_000  # a step every 10 s
TENSOR_US = 20  # one tensor file every 20 µs within a step
RANK_US = 37  # ranks finish their kernels a little apart
DATA_OFFSET = 128  # npy v1.0 header of these shapes
BATCH_ROWS = 50_000  # an ingest commits its pending rows every 50,000 (ingest/pipeline.py)
FLAT_CHUNK = 122_880  # rows handed to DuckDB's writer at a time (= its row group)
BUCKET_ROWS = 1 << 21  # rows per bucket of the sort by row id
# Disk the generator needs per statistic row at its peak (the catalog, the sort's 24-byte triples and
# the flat writer's scratch table, which is about as big as the flat file it becomes), from the
# catalogs measured: with tensor files 634 bytes a row are written, statistics only 155 (the 10^8
# stats-only run peaked at ~250); --force skips the check.
DISK_BYTES_PER_ROW = {True: 850, False: 260}
DISK_HEADROOM = 5 * 10**9  # left free for everyone else

# One decoder layer of a Llama-like model, as the kernels one training step runs: (kernel type,
# inputs, outputs, the cell that makes it, the line of the model's code that creates it).
_LAYER = (
    ("RmsNorm", 2, 2, "input_norm-RMSNorm", "h = self.input_norm(x)"),
    ("MatMul", 2, 1, "attention-Attention/wq-Linear", "q = self.wq(h)"),
    ("MatMul", 2, 1, "attention-Attention/wk-Linear", "k = self.wk(h)"),
    ("MatMul", 2, 1, "attention-Attention/wv-Linear", "v = self.wv(h)"),
    ("FlashAttentionScore", 4, 4, "attention-Attention/fa-FlashAttention", "o = self.fa(q, k, v, mask)"),
    ("MatMul", 2, 1, "attention-Attention/wo-Linear", "o = self.wo(o)"),
    ("Add", 2, 1, "", "x = x + o"),
    ("RmsNorm", 2, 2, "post_norm-RMSNorm", "h = self.post_norm(x)"),
    ("MatMul", 2, 1, "feed_forward-FeedForward/w1-Linear", "g = self.w1(h)"),
    ("SiLU", 1, 1, "feed_forward-FeedForward/act-SiLU", "g = self.act(g)"),
    ("MatMul", 2, 1, "feed_forward-FeedForward/w3-Linear", "u = self.w3(h)"),
    ("Mul", 2, 1, "feed_forward-FeedForward", "h = g * u"),
    ("MatMul", 2, 1, "feed_forward-FeedForward/w2-Linear", "h = self.w2(h)"),
    ("Add", 2, 1, "", "x = x + h"),
)
_SCOPE = "Default/network-WithLossCell/_backbone-LlamaModel/layers-CellList"
_GRAD = "Gradients/Default/network-WithLossCell/_backbone-LlamaModel/layers-CellList"
MODEL_FILE = "/job/llm/model.py"  # the training job's own files, as a source trace names them
TRAIN_FILE = "/job/llm/train.py"
CELL_FILE = "/usr/local/lib/python3.11/site-packages/mindspore/nn/cell.py"
# statistic.csv's value columns these rows have (every category but md5)
STAT_VALUES = ("max", "min", "avg", "count", "neg_count", "pos_count", "nan_count", "neg_inf_count",
               "pos_inf_count", "zero_count", "l2norm")  # fmt: skip


# --------------------------------------------------------------------------------------------------
# What one step of one rank dumps


@dataclass
class Template:
    """The kernels of the graph in execution order and the tensors one step dumps (in dump order,
    which is statistic.csv's line order): the same for every rank and iteration."""

    full_names: list[str]
    op_types: list[str]
    code_lines: list[tuple[int, str]]  # (line, code) of each kernel in MODEL_FILE
    t_op: np.ndarray  # per tensor: the kernel (= its exec_index)
    t_out: np.ndarray  # per tensor: an output
    t_slot: np.ndarray
    t_count: np.ndarray  # elements
    t_shape: pa.Array  # list<int64>
    t_op_type: pa.Array  # string, per tensor
    t_file_op: pa.Array  # sanitised full name (the file-name form)
    t_file_base: pa.Array  # without -opN
    t_full: pa.Array
    t_io: pa.Array
    t_name_head: pa.Array  # "{type}.{name}.0.0."
    t_name_tail: pa.Array  # ".{io}.{slot}.DefaultFormat.float16.npy"
    t_source_line: pa.Array
    t_source_code: pa.Array
    first_out: np.ndarray  # per kernel: its first output tensor (-1: none in the step)
    outputs_from: np.ndarray  # per kernel k: outputs of kernels >= k in the step (suffix sums)

    @property
    def rows(self) -> int:
        return len(self.t_op)


def build_template(step_rows: int, collectives: bool = False) -> Template:
    """Forward layers then their gradients, as many as make `step_rows` tensors (cut there).
    `collectives`: each layer's gradients end with an `AllReduce` kernel (data parallelism), so the
    catalog has collectives for `communication_ops` / `nan_origin` (bench/bench_nan_origin.py)."""
    kernels: list[tuple[str, str, int, int, tuple[int, ...], int, str]] = []
    counters: dict[str, int] = {}
    per_layer = sum(n_in + n_out for _, n_in, n_out, _, _ in _LAYER)
    layers = max(1, math.ceil(step_rows / (2 * per_layer)))

    def add(scope: str, op_type: str, n_in: int, n_out: int, hidden: int, line: int, code: str) -> None:
        n = counters.get(op_type, 0)
        counters[op_type] = n + 1
        kernels.append((f"{scope}/{op_type}-op{n}", op_type, n_in, n_out, (1, 4096, hidden), line, code))

    for layer in range(layers):
        for i, (op_type, n_in, n_out, cell, code) in enumerate(_LAYER):
            scope = f"{_SCOPE}/{layer}-LlamaDecodeLayer" + (f"/{cell}" if cell else "")
            add(scope, op_type, n_in, n_out, 11008 if "feed" in cell else 4096, 40 + 2 * i, code)
    for layer in reversed(range(layers)):
        for i, (op_type, n_in, n_out, cell, code) in reversed(list(enumerate(_LAYER))):
            scope = f"{_GRAD}/{layer}-LlamaDecodeLayer" + (f"/{cell}" if cell else "") + f"/Grad{op_type}"
            grad = op_type if op_type in ("MatMul", "Add", "Mul") else f"{op_type}Grad"
            add(scope, grad, n_out + 1, n_in, 11008 if "feed" in cell else 4096, 40 + 2 * i, code)
        if collectives:
            add(
                f"{_GRAD}/{layer}-LlamaDecodeLayer",
                "AllReduce",
                1,
                1,
                4096,
                70,
                "grads = self.grad_reducer(grads)",
            )
    t_op, t_out, t_slot = [], [], []
    for k, (_, _, n_in, n_out, _, _, _) in enumerate(kernels):
        for io_out, n in ((False, n_in), (True, n_out)):
            for slot in range(n):
                t_op.append(k)
                t_out.append(io_out)
                t_slot.append(slot)
    t_op, t_out, t_slot = (np.array(a[:step_rows]) for a in (t_op, t_out, t_slot))
    kernels = kernels[: int(t_op[-1]) + 1]
    full = [k[0] for k in kernels]
    types = [k[1] for k in kernels]
    shapes = [list(k[4]) for k in kernels]
    names = [sanitize_v23(f) for f in full]
    take = pa.array(t_op)
    io = np.where(t_out, "output", "input")
    first_out = np.full(len(kernels), -1, np.int64)
    outs = np.zeros(len(kernels), np.int64)
    for t in range(len(t_op) - 1, -1, -1):
        if t_out[t]:
            first_out[t_op[t]] = t
            outs[t_op[t]] += 1
    return Template(
        full_names=full,
        op_types=types,
        code_lines=[(k[5], k[6]) for k in kernels],
        t_op=t_op.astype(np.int64),
        t_out=t_out.astype(bool),
        t_slot=t_slot.astype(np.int32),
        t_count=np.array([math.prod(shapes[k]) for k in t_op], np.int64),
        t_shape=pa.array(shapes, pa.list_(pa.int64())).take(take),
        t_op_type=pa.array(types).take(take),
        t_file_op=pa.array(names).take(take),
        t_file_base=pa.array([without_op_index(n) for n in names]).take(take),
        t_full=pa.array(full).take(take),
        t_io=pa.array(io),
        t_name_head=pa.array([f"{types[k]}.{names[k]}.0.0." for k in t_op]),
        t_name_tail=pa.array(
            [f".{i}.{s}.DefaultFormat.float16.npy" for i, s in zip(io, t_slot, strict=True)]
        ),
        t_source_line=pa.array([kernels[k][5] for k in t_op], pa.int64()),
        t_source_code=pa.array([kernels[k][6] for k in t_op]),
        first_out=first_out,
        outputs_from=np.cumsum(outs[::-1])[::-1].copy(),
    )


@dataclass
class Plan:
    """The catalog to write: `rows` statistic rows = steps x template rows; step s is iteration
    s % iterations of rank s // iterations (the last rank may have fewer iterations)."""

    rows: int
    run: str = "job"
    step_rows: int = 10_000
    iterations: int = 100
    hosts: int = 1  # writers: one shard per host (docs/scale-out.md, many writers); 1 = default shard
    tensor_files: bool = True  # saved_data "full"; False: "statistic" (no tensor files, row_id NULL)
    anomaly_share: float = 0.05  # share of steps that go bad
    spread: int = 30  # kernels after the bad one whose tensors hold NaN too
    seed: int = 0
    collectives: bool = False  # an AllReduce kernel after each layer's gradients (build_template)
    template: Template = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.rows % self.step_rows:
            raise ValueError(f"rows ({self.rows}) must be a multiple of step_rows ({self.step_rows})")
        self.template = build_template(self.step_rows, self.collectives)

    @property
    def steps(self) -> int:
        return self.rows // self.step_rows

    @property
    def ranks(self) -> int:
        return -(-self.steps // self.iterations)

    @property
    def dump_root(self) -> str:
        """Where the dump would be (it is not written)."""
        return f"/dumps/{self.run}"

    def shards(self) -> list[tuple[str | None, range]]:
        """(writer name or None for the default shard, its ranks), ranks split evenly."""
        if self.hosts <= 1:
            return [(None, range(self.ranks))]
        bounds = np.linspace(0, self.ranks, self.hosts + 1).round().astype(int)
        return [(f"host{h:02d}", range(bounds[h], bounds[h + 1])) for h in range(self.hosts)]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64 -> uint64): per-row pseudo-random values from row numbers."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _unit(n: np.ndarray, salt: int, seed: int) -> np.ndarray:
    """Uniform [0, 1) floats, a fixed function of (n, salt, seed)."""
    with np.errstate(over="ignore"):
        offset = np.uint64(salt * 1_000_003 + seed * 7919 + 1)
        key = n.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + offset
    return (_mix(key) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def step_anomalies(plan: Plan, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: does it go bad, at which kernel (one with an output in the step), NaN or +Inf."""
    tpl = plan.template
    bad = _unit(steps, 1, plan.seed) < plan.anomaly_share
    with_output = np.flatnonzero(tpl.first_out >= 0)
    kernel = with_output[(_unit(steps, 2, plan.seed) * len(with_output)).astype(np.int64)]
    inf = _unit(steps, 3, plan.seed) < 0.25
    return bad, kernel, inf


def row_values(plan: Plan, g: np.ndarray) -> dict[str, np.ndarray]:
    """Everything about rows `g` (global row numbers) but their strings and ids."""
    tpl = plan.template
    step = g // plan.step_rows
    t = g % plan.step_rows
    rank = (step // plan.iterations).astype(np.int32)
    it = step % plan.iterations
    op = tpl.t_op[t]
    out = tpl.t_out[t]
    bad, kernel, inf = step_anomalies(plan, step)
    first = bad & (op == kernel) & out
    spread = bad & (op > kernel) & (op <= kernel + plan.spread)
    is_inf = first & inf
    is_nan = (first & ~inf) | spread
    count = tpl.t_count[t]
    u = [_unit(g, 10 + i, plan.seed) for i in range(5)]
    avg = (u[0] - 0.5) * 0.02
    scale = 0.05 + u[1]
    zero = (count * 0.001 * u[2]).astype(np.int64)
    nan_count = np.where(is_nan, 1 + (count * 0.01 * u[3]).astype(np.int64), 0)
    inf_count = np.where(is_inf, 1 + (count * 1e-6 * u[3]).astype(np.int64), 0)
    finite = count - zero - nan_count - inf_count
    neg = (finite * (0.45 + 0.1 * u[4])).astype(np.int64)
    mx = avg + scale * (2 + u[2])
    mn = avg - scale * (2 + u[4])
    l2 = np.sqrt(count.astype(np.float64)) * scale
    nan = np.float64("nan")
    return {
        "step": step,
        "t": t,
        "rank": rank,
        "iteration": it,
        "exec_index": op,
        "timestamp_us": BASE_TS_US + it * STEP_US + rank.astype(np.int64) * RANK_US + t * TENSOR_US,
        "count": count,
        "nbytes": count * 2,
        "max": np.where(is_nan, nan, np.where(is_inf, np.inf, mx)),
        "min": np.where(is_nan, nan, mn),
        "avg": np.where(is_nan, nan, np.where(is_inf, np.inf, avg)),
        "l2norm": np.where(is_nan, nan, np.where(is_inf, np.inf, l2)),
        "neg_count": neg,
        "pos_count": finite - neg + inf_count,  # +Inf elements are > 0
        "zero_count": zero,
        "nan_count": nan_count,
        "neg_inf_count": np.zeros(len(g), np.int64),
        "pos_inf_count": inf_count,
        "is_nan": is_nan,
        "is_inf": is_inf,
        "first": first,
    }


def _const(value, n: int, type_: pa.DataType) -> pa.Array:
    if value is None:
        return pa.nulls(n, type_)
    return pa.array([value], type_).take(pa.array(np.zeros(n, np.int32)))


def _paths(rank, it, t, ts, tpl: Template) -> tuple[pa.Array, pa.Array, pa.Array]:
    take = pa.array(t)
    directory = pc.binary_join_element_wise(
        "rank_", pa.array(rank).cast(pa.string()), f"/{NET}/{GRAPH}/", pa.array(it).cast(pa.string()), "/", ""
    )
    name = pc.binary_join_element_wise(
        tpl.t_name_head.take(take), pa.array(ts).cast(pa.string()), tpl.t_name_tail.take(take), ""
    )
    return directory, name, pc.binary_join_element_wise(directory, name, "")


# --------------------------------------------------------------------------------------------------
# The raw tables


def raw_tables(plan: Plan, g: np.ndarray, hasher: TensorIdHasher) -> tuple[dict[str, pa.Table], dict]:
    """The `tensors` and `stat_rows` rows of row numbers `g` (one rank's consecutive rows), the
    statistic.csv manifest rows of the steps they complete, and facts for the summary."""
    tpl = plan.template
    n = len(g)
    v = row_values(plan, g)
    row_id = name = rel = None
    if plan.tensor_files:
        _, name, rel = _paths(v["rank"], v["iteration"], v["t"], v["timestamp_us"], tpl)
        row_id = np.fromiter((hasher(p) for p in rel.to_pylist()), np.int64, n)
    stat_id = np.empty(n, np.int64)
    steps, starts = np.unique(v["step"], return_index=True)
    bounds = [*starts[1:], n]
    csv_paths = []
    for s, a, b in zip(steps, starts, bounds, strict=True):
        csv = f"rank_{s // plan.iterations}/{NET}/{GRAPH}/{s % plan.iterations}/statistic.csv"
        csv_paths.append(csv)
        stat_id[a:b] = stat_row_ids(plan.run, csv, v["t"][a:b] + 2)
    take = pa.array(v["t"])
    csv_col = pa.array(csv_paths).take(pa.array(np.repeat(np.arange(len(steps)), np.diff([*starts, n]))))
    string, i64, i32 = pa.string(), pa.int64(), pa.int32()
    common = {
        "run": _const(plan.run, n, string),
        "rank": pa.array(v["rank"], i32),
        "net": _const(NET, n, string),
        "graph_id": _const(GRAPH, n, i32),
        "iteration": pa.array(v["iteration"], i64),
        "op_type": tpl.t_op_type.take(take),
        "file_op_name": tpl.t_file_op.take(take),
        "file_op_base": tpl.t_file_base.take(take),
        "task_id": _const(0, n, i64),
        "stream_id": _const(0, n, i64),
        "timestamp_us": pa.array(v["timestamp_us"], i64),
        "io": tpl.t_io.take(take),
        "slot": pa.array(tpl.t_slot[v["t"]], i32),
        "shape": tpl.t_shape.take(take),
    }
    tables = {}
    if plan.tensor_files:
        tables["tensors"] = _table("tensors", {
            **common,
            "row_id": pa.array(row_id),
            "dir_kind": _const("iteration", n, string),
            "rel_path": rel,
            "file_name": name,
            "format": _const("DefaultFormat", n, string),
            "dtype": _const("float16", n, string),
            "stored_dtype": _const("float16", n, string),
            "data_offset": _const(DATA_OFFSET, n, i64),
            "nbytes": pa.array(v["nbytes"]),
            "file_size": pa.array(v["nbytes"] + DATA_OFFSET),
            "name_era": _const("v2.4+", n, string),
            "producer": _const("mindspore-npy", n, string),

        }, n)  # fmt: skip
    stats = {
        **common,
        "stat_id": pa.array(stat_id),
        "row_id": pa.array(row_id) if plan.tensor_files else pa.nulls(n, i64),
        "csv_path": csv_col,
        "line_no": pa.array(v["t"] + 2),
        "data_size": pa.array(v["nbytes"]),
        "data_type": _const("float16", n, string),
        **{k: pa.array(v[k]) for k in STAT_VALUES},
    }
    key = row_id if plan.tensor_files else stat_id  # what identifies a row (flat files sort by it)
    facts = {
        "key": key,
        "stat_id": stat_id,
        "nan_rows": int(v["is_nan"].sum()),
        "inf_rows": int(v["is_inf"].sum()),
        "firsts": [
            (int(v["step"][i]), int(v["exec_index"][i]), int(key[i]))
            for i in np.flatnonzero(v["first"] & (v["t"] == _first_t(plan, v)))
        ],
        "csv": list(zip(steps.tolist(), csv_paths, strict=True)),
        "nan_ids": key[v["is_nan"]],
    }
    tables["stat_rows"] = _table("stat_rows", stats, n)
    return tables, facts


def _first_t(plan: Plan, v: dict[str, np.ndarray]) -> np.ndarray:
    """The tensor that is its step's first anomaly: the first output of the bad kernel."""
    _, kernel, _ = step_anomalies(plan, v["step"])
    return plan.template.first_out[kernel]


def _table(name: str, columns: dict[str, pa.Array], n: int) -> pa.Table:
    """A table of `name`'s schema: the columns given, the others NULL."""
    schema = TABLES[name]
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema],
        schema=schema,
    )


def rank_tables(plan: Plan, rank: int) -> dict[str, pa.Table]:
    """What a rank's execution order, graph IR, global history and metadata give: ops, ir_nodes,
    edges, source_lines, graph_runs, rank_meta, and their manifest rows."""
    tpl = plan.template
    k = len(tpl.full_names)
    run = [plan.run] * k
    ranks = [rank] * k
    graph = [GRAPH] * k
    sanitized = [sanitize_v23(f) for f in tpl.full_names]
    ops = {
        "run": run, "rank": ranks, "graph_id": graph, "exec_index": list(range(k)),
        "full_name": tpl.full_names, "sanitized_name": sanitized,
        "short_name": [short_name(f) for f in tpl.full_names],
        "op_type": [op_type_of(f) for f in tpl.full_names],
        "base_name": [without_op_index(s) for s in sanitized],
    }  # fmt: skip
    params = 4
    keys = [f"kernel_graph{GRAPH}:%{i}" for i in range(k)]
    n_in = np.bincount(tpl.t_op[~tpl.t_out], minlength=k)
    nodes = {
        "run": [plan.run] * (k + params), "rank": [rank] * (k + params), "graph_id": [GRAPH] * (k + params),
        "source": ["pb"] * (k + params),
        "node_key": [f"%para{i + 1}" for i in range(params)] + keys,
        "graph_name": [f"kernel_graph{GRAPH}"] * (k + params),
        "op_type": ["Parameter"] * params + tpl.op_types,
        "full_name": [None] * params + tpl.full_names,
        "is_parameter": [True] * params + [False] * k,
        "param_name": [f"model.embedding.weight{i}" for i in range(params)] + [None] * k,
        "attributes": [None] * params + ["{}"] * k,
        "output_dtypes": [["Float16"]] * (k + params),
    }  # fmt: skip
    producers, consumers, index = [], [], []
    for i in range(k):
        for j in range(int(n_in[i])):
            p = i - 1 - j
            producers.append(keys[p] if p >= 0 else f"%para{j % params + 1}")
            consumers.append(keys[i])
            index.append(j)
    e = len(producers)
    edges = {
        "run": [plan.run] * e, "rank": [rank] * e, "graph_id": [GRAPH] * e, "producer_key": producers,
        "consumer_key": consumers, "input_index": index, "kind": ["data"] * e,
    }  # fmt: skip
    frames = [
        (TRAIN_FILE, 88, "loss = train_step(batch)", True),
        (CELL_FILE, 760, "out = self.construct(*args)", False),
    ]
    src: dict[str, list] = {
        c: [] for c in ("node_key", "full_name", "depth", "file", "line", "code", "is_user_code")
    }
    for i in range(k):
        line, code = tpl.code_lines[i]
        for depth, (f, ln, c, user) in enumerate([*frames, (MODEL_FILE, line, code, True)]):
            for col, value in zip(src, (keys[i], tpl.full_names[i], depth, f, ln, c, user), strict=True):
                src[col].append(value)
    s = len(src["node_key"])
    src.update(run=[plan.run] * s, rank=[rank] * s, graph_id=[GRAPH] * s)
    iterations = range(min(plan.iterations, plan.steps - rank * plan.iterations))
    history = {
        "run": [plan.run] * len(iterations), "rank": [rank] * len(iterations),
        "graph_id": [GRAPH] * len(iterations), "seq": list(iterations), "iteration": list(iterations),
    }  # fmt: skip
    now = pa.scalar(time.time_ns() // 1000, pa.timestamp("us", tz="UTC"))
    config = json.dumps({"common_dump_settings": {"path": plan.dump_root, "net_name": NET,
                         "saved_data": "full" if plan.tensor_files else "statistic",
                         "iteration": "all", "statistic_category": ["max", "min", "avg", "count",
                         "negative zero count", "positive zero count", "nan count", "negative inf count",
                         "positive inf count", "zero count", "l2norm"]}})  # fmt: skip
    meta = {
        "run": [plan.run], "rank": [rank], "dump_root": [plan.dump_root], "device_target": ["Ascend"],
        "ms_version": ["2.10.0"], "dump_config": [config], "ingested_at": [now],
    }  # fmt: skip
    base = f"rank_{rank}/execution_order/ms_"
    manifest = {
        "run": [plan.run] * 2, "rel_path": [f"{base}execution_order_graph_{GRAPH}.csv",
                                            f"{base}global_execution_order_graph_{GRAPH}.csv"],
        "kind": ["exec_order", "global_order"], "status": ["ok", "ok"], "at": [now, now],
    }  # fmt: skip
    out = {}
    for name, cols in (("ops", ops), ("ir_nodes", nodes), ("edges", edges), ("source_lines", src),
                       ("graph_runs", history), ("rank_meta", meta), ("manifest", manifest)):  # fmt: skip
        schema = TABLES[name]
        n = len(next(iter(cols.values())))
        out[name] = pa.Table.from_arrays(
            [pa.array(cols[f.name], f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema],
            schema=schema,
        )
    return out


def _manifest_csv(plan: Plan, csv: list[tuple[int, str]]) -> pa.Table:
    """Manifest rows of the statistic.csv files read whole."""
    n = len(csv)
    now = pa.scalar(time.time_ns() // 1000, pa.timestamp("us", tz="UTC"))
    size = plan.step_rows * 190  # bytes of a statistic.csv line of these kernels, about
    cols = {
        "run": pa.array([plan.run] * n), "rel_path": pa.array([c for _, c in csv]),
        "kind": pa.array(["statistic_csv"] * n), "file_size": pa.array([size] * n, pa.int64()),
        "consumed_bytes": pa.array([size] * n, pa.int64()),
        "consumed_lines": pa.array([plan.step_rows + 1] * n, pa.int64()),
        "status": pa.array(["ok"] * n), "at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
    }  # fmt: skip
    return _table("manifest", cols, n)


# --------------------------------------------------------------------------------------------------
# The flat files


def flat_schemas() -> dict[str, pa.Schema]:
    """Columns and types of `stats_resolved` and `tensors_resolved` as flat files store them."""
    import duckdb

    from catalog.views import define_views
    from ingest.storage.flat_columns import FLAT_STORED_COLUMNS

    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": "false"})
    try:
        define_views(con, {}, None)
        return {
            name: con.sql(f"SELECT {FLAT_STORED_COLUMNS[name]} FROM {name}_resolved LIMIT 0")
            .to_arrow_table()
            .schema
            for name in flat_mod.FLAT_SOURCES
        }
    finally:
        con.close()


def flat_batch(
    plan: Plan, table: str, schema: pa.Schema, rid: np.ndarray, sid: np.ndarray, g: np.ndarray
) -> pa.RecordBatch:
    """Rows `g` as `stats`/`tensors` give them: what the query-time views resolve for these rows
    (every file name is an operator of the execution order: `exact`, its exec_index, and the
    innermost user frame of its source trace)."""
    tpl = plan.template
    n = len(g)
    v = row_values(plan, g)
    take = pa.array(v["t"])
    string, i64, i32 = pa.string(), pa.int64(), pa.int32()
    cols = {
        "row_id": pa.array(rid) if plan.tensor_files else pa.nulls(n, i64),
        "run": _const(plan.run, n, string),
        "rank": pa.array(v["rank"], i32),
        "net": _const(NET, n, string),
        "graph_id": _const(GRAPH, n, i32),
        "iteration": pa.array(v["iteration"], i64),
        "op_type": tpl.t_op_type.take(take),
        "op_name": tpl.t_full.take(take),
        "file_op_name": tpl.t_file_op.take(take),
        "io": tpl.t_io.take(take),
        "slot": pa.array(tpl.t_slot[v["t"]], i32),
        "dtype": _const("float16", n, string),
        "producer_dtype": _const("float16", n, string),
        "shape": tpl.t_shape.take(take),
        "nbytes": pa.array(v["nbytes"]),
        "exec_index": pa.array(v["exec_index"]),
        "source_file": _const(MODEL_FILE, n, string),
        "source_line": tpl.t_source_line.take(take),
        "source_code": tpl.t_source_code.take(take),
        "name_match": _const("exact", n, string),
        "timestamp_us": pa.array(v["timestamp_us"], i64),
    }
    if table == "stats":
        cols.update(
            {k: pa.array(v[k]) for k in STAT_VALUES},
            stat_id=pa.array(sid),
            stat_source=_const("statistic.csv", n, string),
            stat_semantics=_const("mindspore", n, string),
            has_nan=pa.array(v["nan_count"] > 0),
            has_inf=pa.array(v["neg_inf_count"] + v["pos_inf_count"] > 0),
        )
    else:
        _, _name, rel = _paths(v["rank"], v["iteration"], v["t"], v["timestamp_us"], tpl)
        cols.update(
            dir_kind=_const("iteration", n, string),
            stored_dtype=_const("float16", n, string),
            format=_const("DefaultFormat", n, string),
            task_id=_const(0, n, i64),
            stream_id=_const(0, n, i64),
            # as flat.py stores them: NULL where the views put them back (catalog/views.py) from
            # rel_path (its last part, here always the file name) and the dump root
            path=pa.nulls(n, string),
            dump_root=_const(plan.dump_root, n, string),
            rel_path=rel,
            file_name=pa.nulls(n, string),
            data_offset=_const(DATA_OFFSET, n, i64),
            file_size=pa.array(v["nbytes"] + DATA_OFFSET),
            name_era=_const("v2.4+", n, string),
            producer=_const("mindspore-npy", n, string),
        )
    return pa.RecordBatch.from_arrays(
        [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema], schema=schema
    )


class _Buckets:
    """The sort by row id, through files: (row id, stat id, row number) triples appended to the
    bucket of the row id's top bits, each bucket later sorted in memory."""

    def __init__(self, folder: Path, rows: int) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.bits = max(0, math.ceil(math.log2(max(1, rows) / BUCKET_ROWS)))
        self.files = [open(folder / f"b{i:04d}.bin", "wb") for i in range(1 << self.bits)]  # noqa: SIM115

    def add(self, rid: np.ndarray, sid: np.ndarray, g: np.ndarray) -> None:
        triples = np.stack([rid, sid, g.astype(np.int64)], axis=1)
        bucket = (rid >> (63 - self.bits)) if self.bits else np.zeros(len(rid), np.int64)
        order = np.argsort(bucket, kind="stable")
        cuts = np.searchsorted(bucket[order], np.arange(1, len(self.files)))
        for fh, part in zip(self.files, np.split(triples[order], cuts), strict=True):
            if len(part):
                fh.write(part.tobytes())

    def close(self) -> None:
        for fh in self.files:
            fh.close()

    def sorted_chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(row ids, stat ids, row numbers) in row-id order, FLAT_CHUNK rows at a time."""
        for fh in self.files:
            triples = np.fromfile(fh.name, np.int64).reshape(-1, 3)
            triples = triples[np.argsort(triples[:, 0], kind="stable")]
            for i in range(0, len(triples), FLAT_CHUNK):
                part = triples[i : i + FLAT_CHUNK]
                yield part[:, 0], part[:, 1], part[:, 2]


def write_flat(
    store: CatalogStore,
    plan: Plan,
    table: str,
    schema: pa.Schema,
    buckets: _Buckets,
    run_keys: list,
    sources: list,
) -> dict:
    """One flat file of `table` (data.parquet, and index.arrow for tensors), as flat.py writes it:
    DuckDB's parquet writer, one thread, rows in row-id order; returns its snapshot entry."""
    import duckdb

    fid, rel, fdir = flat_mod.new_flat_dir(store, table)
    data = fdir / flat_mod.DATA_FILE
    rows = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for rid, sid, g in buckets.sorted_chunks():
            rows += len(g)
            yield flat_batch(plan, table, schema, rid, sid, g)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    # Through a table, as flat.py does: DuckDB's parquet writer marks a column REQUIRED only when
    # the table's statistics show it holds no NULL (an Arrow stream it writes as OPTIONAL). The
    # table is in a database file beside the catalog (compressed; removed after).
    scratch = store.root / f".flat-{fid}.duckdb"
    con = duckdb.connect(str(scratch), config={"threads": "1", "autoinstall_known_extensions": "false",
                                               "preserve_insertion_order": "true", "memory_limit": "1GB",
                                               "temp_directory": str(store.tmp_dir)})  # fmt: skip
    try:
        con.register("flat_rows", reader)
        con.execute("CREATE TABLE flat_sorted AS SELECT * FROM flat_rows").fetchall()
        con.unregister("flat_rows")
        quoted = str(data).replace("'", "''")  # a catalog path may hold a quote
        con.execute(f"COPY flat_sorted TO '{quoted}' (FORMAT parquet)").fetchall()
    finally:
        con.close()
        for leftover in (scratch, scratch.with_name(scratch.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return flat_mod.seal_flat_dir(
        fdir, table, fid=fid, rel=rel, run=plan.run, rows=rows, sources=sources, keys=run_keys
    )


# --------------------------------------------------------------------------------------------------
# The generator


@dataclass
class Summary:
    """What the generator wrote: the answers a query over the catalog must give."""

    path: str
    rows: int
    ranks: int
    iterations: int
    step_rows: int
    kernels: int
    hosts: int
    nan_rows: int = 0  # stats rows with nan_count > 0
    inf_rows: int = 0
    tensor_files: bool = True  # False: a statistics-only dump; rows are identified by stat_id
    # (rank, iteration) -> (exec_index, id) of the step's first anomaly (the bad kernel's first
    # output); the id is the row id, or the statistic id in a statistics-only catalog
    first_anomaly: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    nan_row_ids: np.ndarray | None = None  # ids of the NaN rows, with collect=True
    sample_ids: list[int] = field(default_factory=list)  # random ids, for lookups
    seconds: float = 0.0
    flat_seconds: float = 0.0
    flat_writer: str = "direct"

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("first_anomaly", "nan_row_ids")}
        d["anomalous_steps"] = len(self.first_anomaly)
        return d


def generate(
    path: str | os.PathLike,
    rows: int,
    *,
    step_rows: int = 10_000,
    iterations: int = 100,
    hosts: int = 1,
    tensor_files: bool = True,
    anomaly_share: float = 0.05,
    spread: int = 30,
    seed: int = 0,
    run: str = "job",
    batch_rows: int = BATCH_ROWS,
    collect: bool = False,
    flat_writer: str = "direct",
    progress: bool = False,
    collectives: bool = False,
) -> Summary:
    """Write a catalog of `rows` statistic rows (and as many tensors) at `path` (must not exist).

    `flat_writer="catalog"` builds the flat files with ingest/storage/flat.py instead (each batch through
    `CatalogStore.commit_batch`, then `finish_run`, as an ingest does): exact by construction, and
    the baseline for how long the catalog's own writer takes."""
    plan = Plan(rows, run=run, step_rows=step_rows, iterations=iterations, hosts=hosts,
                tensor_files=tensor_files, anomaly_share=anomaly_share, spread=spread, seed=seed,
                collectives=collectives)  # fmt: skip
    path = Path(path).absolute()
    if path.exists():
        raise FileExistsError(f"{path} exists; the generator writes a new catalog")
    t0 = time.perf_counter()
    kernels = len(plan.template.full_names)
    summary = Summary(str(path), rows, plan.ranks, iterations, step_rows, kernels, hosts,
                      tensor_files=tensor_files, flat_writer=flat_writer)  # fmt: skip
    root = CatalogStore(path, create=True)
    schemas = flat_schemas()
    hasher = TensorIdHasher(run)
    nan_ids: list[np.ndarray] = []
    rng = random.Random(seed)
    flat_time = 0.0
    for writer, ranks in plan.shards():
        store = root.shard(run, writer)
        with store.writer_lock():
            snap = store.snapshot()
            buckets = _Buckets(path / f".sort-{writer or 'default'}", len(ranks) * iterations * step_rows)
            entries: list[dict] = []
            first_batch = True
            for rank in ranks:
                lo = rank * iterations * step_rows
                hi = min(rows, (rank + 1) * iterations * step_rows)
                rank_first = True
                for a in range(lo, hi, batch_rows):
                    g = np.arange(a, min(hi, a + batch_rows), dtype=np.int64)
                    tables, facts = raw_tables(plan, g, hasher)
                    if rank_first:
                        tables.update(rank_tables(plan, rank))
                        rank_first = False
                    csv_rows = _manifest_csv(plan, [c for c in facts["csv"]
                                                    if (c[0] + 1) * step_rows <= g[-1] + 1])  # fmt: skip
                    if csv_rows.num_rows:
                        tables["manifest"] = pa.concat_tables(
                            [tables.get("manifest", csv_rows.slice(0, 0)), csv_rows]
                        )
                    if first_batch:
                        tables["runs"] = _table("runs", {
                            "run": pa.array([run]), "dump_root": pa.array([plan.dump_root]),
                            "ingested_at": pa.array([time.time_ns() // 1000], pa.timestamp("us", tz="UTC")),
                            "dumpcat_version": pa.array(["0.1.0"]),
                        }, 1)  # fmt: skip
                        first_batch = False
                    if flat_writer == "catalog":
                        t = time.perf_counter()
                        store.commit_batch(run, tables)
                        flat_time += time.perf_counter() - t
                    else:
                        entries.append(store._write_batch(run, tables))
                        buckets.add(facts["key"], facts["stat_id"], g)
                    summary.nan_rows += facts["nan_rows"]
                    summary.inf_rows += facts["inf_rows"]
                    for s, op, rid in facts["firsts"]:
                        summary.first_anomaly[(s // iterations, s % iterations)] = (op, rid)
                    if collect:
                        nan_ids.append(facts["nan_ids"])
                    if len(summary.sample_ids) < 1000 or rng.random() < 0.01:
                        summary.sample_ids.append(int(facts["key"][rng.randrange(len(g))]))
                    if progress:
                        print(f"\r# rank {rank}: rows {g[-1] + 1:,} of {rows:,}", end="", flush=True)
            buckets.close()
            if flat_writer == "catalog":
                t = time.perf_counter()
                store.finish_run(run)
                flat_time += time.perf_counter() - t
                store.purge_retired(older_than=0)  # the merged-away files (no reader can be using them)
            else:
                t = time.perf_counter()
                snap["batches"] += entries
                snap.setdefault("ranks", {})[run] = sorted({*snap.get("ranks", {}).get(run, []), *ranks})
                keys = [[run, r] for r in ranks]
                snap["flat"] = {table: [] for table in flat_mod.FLAT_SOURCES}
                for table, sources in flat_mod.FLAT_SOURCES.items():
                    if table == "tensors" and not tensor_files:
                        continue  # no rows: flat.py writes no file
                    ids = [e["id"] for e in entries if any(s in e["tables"] for s in sources)]
                    snap["flat"][table] = [write_flat(store, plan, table, schemas[table], buckets, keys, ids)]
                snap["version"] = snap.get("version", 0) + 1
                write_json_atomic(store.shard_dir / SNAPSHOT, snap)
                flat_time += time.perf_counter() - t
            shutil.rmtree(buckets.folder, ignore_errors=True)
    if progress:
        print(flush=True)
    rng.shuffle(summary.sample_ids)
    summary.sample_ids = summary.sample_ids[:200]
    if collect:
        summary.nan_row_ids = np.concatenate(nan_ids) if nan_ids else np.zeros(0, np.int64)
    summary.seconds = time.perf_counter() - t0
    summary.flat_seconds = flat_time
    return summary


def disk_usage(path: Path) -> dict[str, int]:
    """Bytes of the catalog by part: each raw table, the flat files, the rest."""
    sizes: dict[str, int] = {}
    for p in path.rglob("*"):
        if not p.is_file():
            continue
        size = p.stat().st_size
        parts = p.relative_to(path).parts
        if "flat" in parts:
            i = parts.index("flat")
            key = f"flat {parts[i + 1]}" + (" index" if p.name == flat_mod.INDEX_FILE else "")
        elif p.suffix == ".parquet":
            key = f"raw {p.stem}"
        else:
            key = "other"
        sizes[key] = sizes.get(key, 0) + size
    return dict(sorted(sizes.items()))


# --------------------------------------------------------------------------------------------------
# Timings

QUERIES = (
    ("nan", "SELECT op_name FROM stats WHERE nan_count > 0"),
    ("nan_count", "SELECT count(*) FROM stats WHERE nan_count > 0"),
    ("first_anomaly", "SELECT * FROM first_anomaly"),
    ("lookup", "SELECT * FROM stats WHERE row_id = ?"),
)


def queries(summary: Summary) -> list[tuple[str, str]]:
    """QUERIES; a statistics-only catalog's rows have no row id: its lookup is by statistic id."""
    if summary.tensor_files:
        return list(QUERIES)
    return [(n, q.replace("row_id = ?", "stat_id = ?")) for n, q in QUERIES]


def _expected(summary: Summary, name: str) -> int:
    """Rows (or the count) each query must give on the generated catalog."""
    firsts = len(summary.first_anomaly)
    return {"nan": summary.nan_rows, "nan_count": summary.nan_rows, "first_anomaly": firsts, "lookup": 1}[
        name
    ]


def time_duckdb(path: Path, summary: Summary, runs: int) -> list[dict]:
    """Each query through `Catalog.sql`: cold (a freshly opened Catalog: views defined, parquet
    footers read, inside the timing) and warm (median of `runs` on an open one)."""
    from catalog.api import Catalog

    ids = summary.sample_ids
    out = []
    for name, text in queries(summary):
        point = "?" in text

        def answer(table: pa.Table, name=name) -> int:
            return table.column(0)[0].as_py() if name == "nan_count" else table.num_rows

        t = time.perf_counter()
        cat = Catalog.open(path)
        got = answer(cat.sql(text, [ids[0]] if point else None))
        cold = time.perf_counter() - t
        samples = []
        for i in range(runs):
            t = time.perf_counter()
            table = cat.sql(text, [ids[(i + 1) % len(ids)]] if point else None)
            samples.append(time.perf_counter() - t)
            if answer(table) != _expected(summary, name):
                raise AssertionError(
                    f"DuckDB {name}: {answer(table)} rows, expected {_expected(summary, name)}"
                )
        cat.close()
        if got != _expected(summary, name):
            raise AssertionError(f"DuckDB {name}: {got} rows, expected {_expected(summary, name)}")
        warm = statistics.median(samples) if samples else None
        out.append({"engine": "DuckDB", "query": name, "cold": cold, "warm": warm, "result": got})
    return out


def spark_session(tmp: Path, memory: str = "4g", shuffle_partitions: int | None = None):
    """Spark local mode on both cores, as docs/scale-out.md's example starts it (UI off, loopback only)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("dumpcat-bench-scale")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(tmp))
    )
    if shuffle_partitions:  # the tests' small catalogs; the benchmark keeps Spark's default (200)
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def time_spark(spark, path: Path, summary: Summary, runs: int) -> list[dict]:
    """`register_views`, then each query as `spark.sql(...).collect()`: cold (its first run after
    registering) and warm (median of `runs`). Spark's defaults otherwise (200 shuffle partitions,
    adaptive execution coalescing them)."""
    from catalog.spark.spark_sql import register_views

    t = time.perf_counter()
    register_views(spark, path)
    out = [{"engine": "Spark", "query": "register_views", "cold": time.perf_counter() - t, "warm": None,
            "result": None}]  # fmt: skip
    ids = summary.sample_ids
    for name, text in queries(summary):

        def run(i: int, text=text, name=name) -> int:
            q = text.replace("?", str(ids[i % len(ids)]))
            got = spark.sql(q).collect()
            return got[0][0] if name == "nan_count" else len(got)

        t = time.perf_counter()
        got = run(0)
        cold = time.perf_counter() - t
        samples = []
        for i in range(runs):
            t = time.perf_counter()
            n = run(i + 1)
            samples.append(time.perf_counter() - t)
            if n != _expected(summary, name):
                raise AssertionError(f"Spark {name}: {n} rows, expected {_expected(summary, name)}")
        if got != _expected(summary, name):
            raise AssertionError(f"Spark {name}: {got} rows, expected {_expected(summary, name)}")
        warm = statistics.median(samples) if samples else None
        out.append({"engine": "Spark", "query": name, "cold": cold, "warm": warm, "result": got})
    return out


# --------------------------------------------------------------------------------------------------
# Report

_LABEL = {
    "nan": "`SELECT op_name FROM stats WHERE nan_count > 0`",
    "nan_count": "`SELECT count(*) FROM stats WHERE nan_count > 0`",
    "first_anomaly": "`SELECT * FROM first_anomaly`",
    "lookup": "`SELECT * FROM stats WHERE row_id = ?`",
    "register_views": "`register_views` (72 views)",
}


def _sci(n: int) -> str:
    e = round(math.log10(n))
    return f"10^{e}" if 10**e == n else f"{n:,}"


def _ms(s: float | None) -> str:
    if s is None:
        return ""
    ms = s * 1e3
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _kind(e: dict) -> str:
    """The catalog's kind, as the tables name it."""
    g = e["generate"]
    kind = "tensors + stats" if g.get("tensor_files", True) else "stats only"
    kind += f", {g['hosts']} shards" if g.get("hosts", 1) > 1 else ""
    return kind + (", flat files by ingest/storage/flat.py" if g.get("flat_writer") == "catalog" else "")


def markdown(results: dict[str, dict]) -> str:
    """The tables of every catalog measured (results.json), smallest first."""
    entries = sorted(results.values(), key=lambda e: (_kind(e), e["rows"]))
    lines = []
    for e in entries:
        m = e["machine"]
        lines.append(
            f"- {_sci(e['rows'])} rows, {_kind(e)}: {e['date']}, {m['nproc']} cores ({m['cpu']}), "
            f"{m['memory_gib']} GiB, Python {m['python']}, DuckDB {m['duckdb']}, pyarrow {m['pyarrow']}, "
            f"Spark {m.get('spark', '-')}; load average {e['load_before']} before the timings, "
            f"{e['load_after']} after; `python bench/bench_scale.py {e['argv']}`. "
            f"{e.get('note', '')}".rstrip()
        )
    lines += [
        "",
        "**Catalogs written.** Bytes per statistic row: each part's files divided by the catalog's "
        "statistic rows.",
        "",
        "| rows | catalog | ranks × steps × tensors | written in | flat files | size | bytes / row "
        "| raw `stat_rows` | raw `tensors` | flat `stats` | flat `tensors` | its `index.arrow` | rest |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        g, d, n = e["generate"], e["disk"], e["rows"]
        total = sum(d.values())
        parts = ("raw stat_rows", "raw tensors", "flat stats", "flat tensors", "flat tensors index")
        per = [f"{d.get(k, 0) / n:.1f}" for k in parts]
        rest = sum(v for k, v in d.items() if k not in parts) / n
        lines.append(
            f"| {_sci(n)} | {_kind(e)} | {g['ranks']} × {g['iterations']} × {g['step_rows']:,} "
            f"| {g['seconds']:,.0f} s | {g['flat_seconds']:,.0f} s ({g['flat_writer']}) "
            f"| {total / 1e9:.2f} GB | {total / n:.0f} | {' | '.join(per)} | {rest:.1f} |"
        )
    lines += [
        "",
        "**Queries.** Cold: the first query on a freshly opened `Catalog` (DuckDB: views defined and "
        "footers read inside the timing) or right after `register_views` (Spark); the files are in "
        "the OS page cache either way. Warm: median of repeated runs. The lookup is a different random "
        "id each run (`stat_id` in a stats-only catalog, whose rows have no row id).",
        "",
        "| rows | catalog | engine | query | result rows | cold | warm | warm per 10^6 rows "
        "| warm vs 10x fewer rows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(e["rows"], _kind(e), t["engine"], t["query"]): t for e in entries for t in e["timings"]}
    for engine in ("DuckDB", "Spark"):
        for e in entries:
            for t in e["timings"]:
                if t["engine"] != engine:
                    continue
                n, kind = e["rows"], _kind(e)
                prev = by_key.get((n // 10, kind, engine, t["query"]))
                growth = f"{t['warm'] / prev['warm']:.2f}x" if prev and t["warm"] and prev["warm"] else ""
                per_m = _ms(t["warm"] / (n / 1e6)) if t["warm"] and t["query"] != "lookup" else ""
                result = "" if t["result"] is None else f"{t['result']:,}"
                label = _LABEL[t["query"]]
                if t["query"] == "lookup" and not e["generate"].get("tensor_files", True):
                    label = label.replace("row_id", "stat_id")
                lines.append(
                    f"| {_sci(n)} | {kind} | {engine} | {label} | {result} | {_ms(t['cold'])} "
                    f"| {_ms(t['warm'])} | {per_m} | {growth} |"
                )
    return "\n".join(lines) + "\n"


def emit_summary(results: dict[str, dict]) -> None:
    """The headline figures: each query's warm time per engine and catalog (no target: a scale curve)."""
    for e in sorted(results.values(), key=lambda e: (_kind(e), e["rows"])):
        for t in e["timings"]:
            if t["warm"] is not None and t["query"] in ("nan", "first_anomaly", "lookup"):
                emit.summary(
                    f"{_LABEL[t['query']]}, {t['engine']}, {_sci(e['rows'])} rows ({_kind(e)}), warm",
                    "",
                    _ms(t["warm"]),
                )


def machine() -> dict:
    import duckdb

    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    info = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "pyarrow": pa.__version__,
    }
    try:
        import pyspark

        info["spark"] = pyspark.__version__
    except ImportError:
        pass
    return info


def _load() -> str:
    return "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())


def _rows_arg(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=_rows_arg, default=[1_000_000], help="statistic rows, e.g. 1e6,1e7,1e8")
    p.add_argument("--workdir", help="where catalogs and results.json go (default: a new temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the catalogs (reused by a later run)")
    p.add_argument("--step-rows", type=int, default=10_000, help="tensors one step of one rank dumps")
    p.add_argument("--iterations", type=int, default=100, help="steps per rank")
    p.add_argument("--hosts", type=int, default=1, help="writers (shards), ranks split evenly")
    p.add_argument(
        "--statistics-only",
        action="store_true",
        help='a saved_data "statistic" dump: no tensor files, no row ids (about 1/4 of the disk)',
    )
    p.add_argument("--flat-writer", choices=("direct", "catalog"), default="direct",
                   help="catalog: let ingest/storage/flat.py build the flat files (slow)")  # fmt: skip
    p.add_argument("--engines", default="duckdb,spark")
    p.add_argument("--runs", type=int, default=5, help="warm runs per query")
    p.add_argument("--spark-memory", default="4g")
    p.add_argument("--force", action="store_true", help="skip the free-disk check")
    p.add_argument("--note", default="", help="a sentence for the report (e.g. what else ran)")
    p.add_argument("--report-only", action="store_true", help="only write the table of DIR/results.json")
    a = p.parse_args(argv)
    if a.report_only:
        a.rows = []
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dumpcat-scale-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    engines = set(a.engines.split(","))
    results_file = work / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    spark = None
    shown = _shown_argv(argv if argv is not None else sys.argv[1:])
    try:
        for n in a.rows:
            suffix = (
                ("_stats" if a.statistics_only else "")
                + ("" if a.hosts == 1 else f"_h{a.hosts}")
                + ("" if a.flat_writer == "direct" else "_catalog")
            )
            cat = work / f"cat_{n}{suffix}"
            summary_file = cat.with_suffix(".summary.json")
            if cat.exists() and summary_file.exists():
                summary = _load_summary(summary_file)
                print(f"# reusing {cat.name}: {n:,} rows", flush=True)
            else:
                shutil.rmtree(cat, ignore_errors=True)
                need = n * DISK_BYTES_PER_ROW[not a.statistics_only]
                free = shutil.disk_usage(work).free
                if need + DISK_HEADROOM > free and not a.force:
                    raise SystemExit(
                        f"{n:,} rows need about {need / 1e9:.0f} GB of disk; {free / 1e9:.0f} GB free"
                    )
                print(f"# generating {n:,} rows (about {need / 1e9:.1f} GB)", flush=True)
                summary = generate(cat, n, step_rows=a.step_rows, iterations=a.iterations, hosts=a.hosts,
                                   tensor_files=not a.statistics_only, flat_writer=a.flat_writer,
                                   progress=True)  # fmt: skip
                _save_summary(summary, summary_file)
                print(
                    f"# written in {summary.seconds:.0f} s (flat files {summary.flat_seconds:.0f} s)",
                    flush=True,
                )
            entry = {"rows": n, "date": time.strftime("%Y-%m-%d"), "machine": machine(), "argv": shown,
                     "generate": summary.as_dict(), "disk": disk_usage(cat), "load_before": _load(),
                     "timings": [], "note": a.note}  # fmt: skip
            entry["generate"].pop("sample_ids")
            entry["generate"].pop("path")
            if "duckdb" in engines:
                entry["timings"] += time_duckdb(cat, summary, a.runs)
                for t in entry["timings"]:
                    print(f"{n:>11,} {t['engine']:7} {t['query']:14} cold {_ms(t['cold']):>10} "
                          f"warm {_ms(t['warm']):>10}", flush=True)  # fmt: skip
            if "spark" in engines:
                if spark is None:
                    spark = spark_session(work / "spark-tmp", a.spark_memory)
                    entry["machine"]["spark"] = spark.version
                timings = time_spark(spark, cat, summary, a.runs)
                entry["timings"] += timings
                for t in timings:
                    print(f"{n:>11,} {t['engine']:7} {t['query']:14} cold {_ms(t['cold']):>10} "
                          f"warm {_ms(t['warm']):>10}", flush=True)  # fmt: skip
            entry["load_after"] = _load()
            results[f"{n}{suffix}"] = entry
            results_file.write_text(json.dumps(results, indent=1))
            if not a.keep:
                shutil.rmtree(cat, ignore_errors=True)
                summary_file.unlink(missing_ok=True)
    finally:
        if spark is not None:
            spark.stop()
        if a.workdir is None and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    emit_summary(results)
    emit.report_follows()
    print(markdown(results))
    return 0


def _shown_argv(argv: list[str]) -> str:
    """The command line as the report shows it: no machine paths, no note."""
    out, skip = [], False
    for i, x in enumerate(argv):
        if skip:
            skip = False
        elif x in ("--workdir", "--note"):
            out += ["--workdir", "DIR"] if x == "--workdir" else []
            skip = i + 1 < len(argv)
        elif x.startswith("--workdir="):
            out += ["--workdir", "DIR"]
        elif not x.startswith(("--note=", "/")):
            out.append(x)
    return " ".join(out)


def _save_summary(summary: Summary, path: Path) -> None:
    d = summary.as_dict()
    d["first_anomaly"] = [[r, i, op, rid] for (r, i), (op, rid) in summary.first_anomaly.items()]
    path.write_text(json.dumps(d))


def _load_summary(path: Path) -> Summary:
    d = json.loads(path.read_text())
    firsts = {(r, i): (op, rid) for r, i, op, rid in d.pop("first_anomaly")}
    d.pop("anomalous_steps")
    summary = Summary(**d)
    summary.first_anomaly = firsts
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
