"""Synthetic MindSpore (v2.4+ style, graph mode, sync E2E) dump trees for benchmarks and tests.

Writes what MindSpore 2.4+ writes for a Dense/ReLU network trained with ``Momentum``:

    OUT/rank_{r}/.dump_metadata/{config.json,data_dump.json}
    OUT/rank_{r}/execution_order/ms_execution_order_graph_{g}.csv         (unsanitised full names)
    OUT/rank_{r}/execution_order/ms_global_execution_order_graph_{g}.csv  (one iteration per line)
    OUT/rank_{r}/{net}/{g}/{iteration}/{OpType}.{sanitised full name}.0.0.{ts_us}.{input|output}.{slot}
                                       .DefaultFormat.{Dtype}.npy
    OUT/rank_{r}/{net}/{g}/{iteration}/statistic.csv                       (optional)

- Tensor files are real NPY v1.0 files, byte-identical to ``np.save`` (header padded so the data starts
  at a multiple of 64). Names follow the real 2.10 CPU samples: full scope names with ``/`` -> ``_``
  (``Default_network-WithLossCell__backbone-Net_layer3-Dense_MatMul-op3``), ``Gradients_...`` for the
  backward kernels, ``Parameter.{name with . -> _}`` files written at the end of the step, capitalised
  dtype tokens on CPU (``Float32``, ``Int32``, ``Int64``, ``Bool``; lowercase with ``device="GPU"``).
- ``statistic.csv`` is the v2.3+ configurable format with every statistic category, a trailing comma on
  every data row, numbers ``%g`` (6 significant digits, ``nan``/``inf``/``-inf``), shapes ``"(2,3)"``,
  one row per npy file with the same op name, io, slot and timestamp, and the REAL statistics of the data
  written (MindSpore host semantics: any NaN makes max/min/avg/l2norm ``nan``; "Negative/Positive Zero
  Count" are the counts of elements < 0 / > 0).
- A configurable fraction of float tensors holds 1-3 NaN elements (and a smaller share ±inf), so
  ``nan_count > 0`` queries have answers; ``generate`` returns exactly which files hold NaN.

Data is small by default (float tensors of 8-256 float32 elements, so a file is 160-1152 bytes and
10^6 files take about 4 GB of 4 KiB blocks); ``size_bytes`` makes every non-scalar float tensor that
big instead. Each iteration directory is one task (its data is drawn in one RNG call, its statistics
are computed with segment reductions, its files written with ``os.open``/``os.writev``); tasks run
in a process pool over all cores.

    python bench/synth.py OUT --tensors 100000 --ranks 2 --iterations 10
    python bench/synth.py OUT --tensors 2000 --no-statistic-csv --nan-fraction 0.05 --size-bytes 65536
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["STAT_CATEGORIES", "SynthSummary", "TensorSpec", "build_template", "generate", "main"]

# statistic_category items in MindSpore's header_map order, and the header names they produce.
STAT_CATEGORIES = [
    ("max", "Max Value"),
    ("min", "Min Value"),
    ("avg", "Avg Value"),
    ("count", "Count"),
    ("negative zero count", "Negative Zero Count"),
    ("positive zero count", "Positive Zero Count"),
    ("nan count", "NaN Count"),
    ("negative inf count", "Negative Inf Count"),
    ("positive inf count", "Positive Inf Count"),
    ("zero count", "Zero Count"),
    ("l2norm", "L2Norm Value"),
    ("md5", "MD5"),
]
CSV_HEADER_COMMON = "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape"

BATCH = 4  # batch dimension of activations
WIDTHS = (8, 12, 16)  # layer widths: activations 32-64, weights 64-256, biases 8-16 elements
BASE_TS_US = 1_795_300_000_000_000  # 2026-11 in µs since the epoch, like the samples
ITER_SPAN_US = 10_000_000  # one iteration every 10 s
NET = "Net"
_CAP = {"float32": "Float32", "int32": "Int32", "int64": "Int64", "bool": "Bool"}
_NP = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "bool": np.bool_}
_PREFIX = "Default/network-WithLossCell/_backbone-Net"
_LOSS = "Default/network-WithLossCell/_loss_fn-SoftmaxCrossEntropyWithLogits"


def sanitize(full_name: str) -> str:
    """MindSpore ≥2.3 file-name form of a full scope name (``GetFileKernelName``)."""
    for ch in ("/", "\\", ".", " "):
        full_name = full_name.replace(ch, "_")
    return full_name


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor file of an iteration directory (the same list for every iteration)."""

    op_type: str
    op_name: str  # as in the file name (sanitised)
    io: str
    slot: int
    dtype: str  # numpy name: float32 | int32 | int64 | bool
    shape: tuple[int, ...]
    kind: str = "normal"  # normal | relu | const | step (how the data is drawn)

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclass
class SynthSummary:
    out_dir: str
    tensors: int = 0
    ranks: int = 0
    iterations: int = 0
    graph_id: int = 0
    net: str = NET
    kernels: int = 0
    statistic_csv: bool = True
    data_bytes: int = 0  # tensor data, headers excluded
    file_bytes: int = 0  # npy files including headers
    nan_tensors: int = 0
    nan_elements: int = 0
    inf_tensors: int = 0
    seconds: float = 0.0
    # rel path (from OUT) -> NaN element count, for every file holding NaN
    nan_files: dict[str, int] = field(default_factory=dict)

    def as_dict(self, with_files: bool = False) -> dict:
        d = dict(self.__dict__)
        if not with_files:
            d.pop("nan_files")
        return d


# --------------------------------------------------------------------------------------------------
# The network: which kernels run, in which order, and what they dump.


class _Graph:
    def __init__(self, size_elems: int | None) -> None:
        self.kernels: list[str] = []  # unsanitised full names, execution order
        self.files: list[TensorSpec] = []  # kernel files in dump order
        self.params: list[TensorSpec] = []  # Parameter files (written at the end of the step)
        self._index: dict[str, int] = {}
        self._size = size_elems

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self._size is None or shape == ():
            return shape
        n = self._size
        return (n // 64, 64) if n >= 64 and n % 64 == 0 else (n,)

    def kernel(self, scope: str, op_type: str, ios: list[tuple[str, str, tuple, str]]) -> None:
        key = f"{scope.split('/', 1)[0]}:{op_type}"
        idx = self._index.get(key, 0)
        self._index[key] = idx + 1
        full = f"{scope}/{op_type}-op{idx}"
        self.kernels.append(full)
        name = sanitize(full)
        slots = {"input": 0, "output": 0}
        for io_, dtype, shape, kind in ios:
            self.files.append(TensorSpec(op_type, name, io_, slots[io_], dtype, self.shape(shape), kind))
            slots[io_] += 1

    def param(self, name: str, dtype: str, shape: tuple, kind: str = "normal") -> None:
        self.params.append(
            TensorSpec("Parameter", sanitize(name), "output", 0, dtype, self.shape(shape), kind)
        )


def _f(shape: tuple, kind: str = "normal") -> tuple[str, str, tuple, str]:
    return ("input", "float32", shape, kind)


def _o(shape: tuple, kind: str = "normal", dtype: str = "float32") -> tuple[str, str, tuple, str]:
    return ("output", dtype, shape, kind)


_TRUE = ("input", "bool", (), "const")
_FMT = ("input", "int64", (), "const")
_LR = ("input", "float32", (), "const")


def build_template(
    n_files: int, seed: int = 0, size_bytes: int | None = None
) -> tuple[list[str], list[TensorSpec]]:
    """(kernel full names in execution order, the first ``n_files`` tensor files of an iteration).

    Enough Dense layers (43 files each, plus the loss, the step counter and the inputs) are stacked
    to hold ``n_files`` files; the list is cut at ``n_files``.
    """
    rng = np.random.default_rng([seed, 7])
    g = _Graph(None if size_bytes is None else max(1, size_bytes // 4))
    per_layer = 43
    layers = max(1, math.ceil(max(0, n_files - 14) / per_layer))
    widths = [int(w) for w in rng.choice(WIDTHS, size=layers + 1)]
    b = BATCH
    g.kernel(
        "Default/optimizer-Momentum",
        "AssignAdd",
        [("input", "int32", (), "step"), ("input", "int32", (), "const"), _o((), "step", "int32")],
    )
    for k in range(layers):
        wi, wo = widths[k], widths[k + 1]
        scope = f"{_PREFIX}/layer{k}-Dense"
        g.kernel(scope, "MatMul", [_f((b, wi)), _f((wo, wi)), _TRUE, _TRUE, _o((b, wo))])
        g.kernel(scope, "BiasAdd", [_f((b, wo)), _f((wo,)), _FMT, _o((b, wo))])
        g.kernel(f"{_PREFIX}/layer{k}-ReLU", "ReLU", [_f((b, wo)), _o((b, wo), "relu")])
    wl = widths[layers]
    g.kernel(
        _LOSS, "SparseSoftmaxCrossEntropyWithLogits", [_f((b, wl)), ("input", "int32", (b,), "const"), _o(())]
    )
    g.kernel(
        f"Gradients/{_LOSS}/Grad_SparseSoftmaxCrossEntropyWithLogits",
        "SparseSoftmaxCrossEntropyWithLogits",
        [_f((b, wl)), ("input", "int32", (b,), "const"), _o((b, wl))],
    )
    for k in reversed(range(layers)):
        wi, wo = widths[k], widths[k + 1]
        gs = f"Gradients/{_PREFIX}/layer{k}"
        g.kernel(f"{gs}-ReLU/Grad_ReLU", "ReluGrad", [_f((b, wo)), _f((b, wo), "relu"), _o((b, wo))])
        g.kernel(f"{gs}-Dense/Grad_BiasAdd", "BiasAddGrad", [_f((b, wo)), _FMT, _o((wo,))])
        g.kernel(f"{gs}-Dense/Grad_MatMul", "MatMul", [_f((b, wo)), _f((wo, wi)), _TRUE, _TRUE, _o((b, wi))])
        g.kernel(f"{gs}-Dense/Grad_MatMul", "MatMul", [_f((b, wo)), _f((b, wi)), _TRUE, _TRUE, _o((wo, wi))])
    for k in range(layers):
        wi, wo = widths[k], widths[k + 1]
        for shape in ((wo, wi), (wo,)):
            g.kernel(
                "Default/optimizer-Momentum",
                "ApplyMomentum",
                [_f(shape), _f(shape), _LR, _f(shape), _LR, _o(shape)],
            )
        g.param(f"layer{k}.weight", "float32", (wo, wi))
        g.param(f"layer{k}.bias", "float32", (wo,))
        g.param(f"moments.layer{k}.weight", "float32", (wo, wi))
        g.param(f"moments.layer{k}.bias", "float32", (wo,))
    g.param("inputs0", "float32", (b, widths[0]))
    g.param("inputs1", "int32", (b,), "const")
    g.param("global_step", "int32", (), "step")
    g.param("learning_rate", "float32", (), "const")
    g.param("momentum", "float32", (), "const")
    files = g.files + g.params
    if len(files) < n_files:  # only when n_files is tiny and the fixed part dominates
        raise AssertionError("template too small")
    return g.kernels, files[:n_files]


# --------------------------------------------------------------------------------------------------
# One iteration directory.

_HEADERS: dict[tuple[str, tuple], bytes] = {}


def npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """The exact NPY v1.0 header ``np.save`` writes (64-byte aligned), cached per (dtype, shape)."""
    key = (dtype, shape)
    h = _HEADERS.get(key)
    if h is None:
        buf = io.BytesIO()
        d = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(buf, d)
        h = _HEADERS[key] = buf.getvalue()
    return h


def _shape_text(shape: tuple[int, ...]) -> str:
    return '"(' + ",".join(str(d) for d in shape) + ')"'


def _segment_stats(vals: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    """MindSpore host statistics of consecutive segments of ``vals`` (float64, no empty segment)."""
    counts = np.diff(np.append(starts, len(vals)))
    add = np.add.reduceat

    def cnt(mask: np.ndarray) -> np.ndarray:
        return add(mask.astype(np.int64), starts)

    with np.errstate(invalid="ignore", over="ignore"):
        return {
            "max": np.maximum.reduceat(vals, starts),  # NaN propagates, as in MindSpore's loop
            "min": np.minimum.reduceat(vals, starts),
            "avg": add(vals, starts) / counts,
            "count": counts,
            "neg": cnt(vals < 0),
            "pos": cnt(vals > 0),
            "nan": cnt(np.isnan(vals)),
            "ninf": cnt(np.isneginf(vals)),
            "pinf": cnt(np.isposinf(vals)),
            "zero": cnt(vals == 0),
            "l2": np.sqrt(add(vals * vals, starts)),
        }


@dataclass
class _DirTask:
    out: str
    rank: int
    graph_id: int
    iteration: int
    count: int
    seed: int
    nan_fraction: float
    statistic_csv: bool
    device: str


_TEMPLATE: list[TensorSpec] = []


def _init_worker(template: list[TensorSpec]) -> None:
    global _TEMPLATE
    _TEMPLATE = template


def _write_dir(task: _DirTask) -> tuple[int, int, int, int, int, dict[str, int]]:
    """Write one iteration directory.

    Returns (files, data bytes, file bytes, NaN elements, inf tensors, {rel path: NaN count}).
    """
    specs = _TEMPLATE[: task.count]
    n = len(specs)
    rng = np.random.default_rng([task.seed, task.rank, task.graph_id, task.iteration])
    rel_dir = f"rank_{task.rank}/{NET}/{task.graph_id}/{task.iteration}"
    path = os.path.join(task.out, rel_dir)
    os.makedirs(path, exist_ok=True)

    # Data: per dtype, one flat buffer of every tensor of that dtype, in file order.
    counts = np.fromiter((s.count for s in specs), np.int64, n)
    dtypes = [s.dtype for s in specs]
    bufs: dict[str, np.ndarray] = {}
    offs = np.zeros(n, np.int64)  # element offset of each tensor in its dtype buffer
    groups: dict[str, list[int]] = {}
    for i, dt in enumerate(dtypes):
        groups.setdefault(dt, []).append(i)
    for dt, idx in groups.items():
        c = counts[idx]
        o = np.zeros(len(idx), np.int64)
        np.cumsum(c[:-1], out=o[1:])
        offs[idx] = o
        total = int(c.sum())
        if dt == "float32":
            bufs[dt] = rng.standard_normal(total, dtype=np.float32)
        elif dt == "bool":
            bufs[dt] = rng.random(total) < 0.5
        else:
            bufs[dt] = rng.integers(0, 10, total).astype(_NP[dt])

    nan_files: dict[str, int] = {}
    inf_tensors = 0
    fbuf = bufs.get("float32")
    for i, s in enumerate(specs):
        if s.kind == "normal":
            continue
        seg = bufs[s.dtype][offs[i] : offs[i] + counts[i]]
        if s.kind == "relu":
            np.maximum(seg, 0, out=seg)
        elif s.kind == "step":
            seg[...] = task.iteration + 1
        elif s.kind == "const" and s.dtype == "float32":
            seg[...] = 0.01 if s.slot == 2 else 0.9

    # NaN (and some ±inf) in a fraction of the non-scalar float tensors.
    if fbuf is not None and task.nan_fraction > 0:
        cand = [i for i in groups["float32"] if specs[i].kind in ("normal", "relu") and counts[i] > 1]
        draw = rng.random(len(cand))
        for j, i in enumerate(cand):
            if draw[j] < task.nan_fraction:
                k = int(rng.integers(1, 4))
                pos = rng.choice(int(counts[i]), size=min(k, int(counts[i])), replace=False)
                fbuf[offs[i] + pos] = np.nan
            elif draw[j] < task.nan_fraction * 1.25:
                fbuf[offs[i] + int(rng.integers(counts[i]))] = (
                    np.inf if draw[j] < task.nan_fraction * 1.125 else -np.inf
                )
                inf_tensors += 1

    # Statistics per dtype group, scattered back to file order.
    stats = {k: np.empty(n, np.float64) for k in ("max", "min", "avg", "l2")}
    for k in ("count", "neg", "pos", "nan", "ninf", "pinf", "zero"):
        stats[k] = np.empty(n, np.int64)
    if task.statistic_csv or task.nan_fraction > 0:
        for dt, idx in groups.items():
            vals = bufs[dt].astype(np.float64)
            seg = _segment_stats(vals, offs[idx])
            for k, v in seg.items():
                stats[k][idx] = v

    # Files.
    ts0 = BASE_TS_US + task.iteration * ITER_SPAN_US + task.rank * 1_000 + task.graph_id * 100_000
    ts = ts0 + np.cumsum(rng.integers(20, 60, n))
    tok = (lambda d: _CAP[d]) if task.device == "CPU" else (lambda d: d)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    mvs = {dt: memoryview(b.view(np.uint8)) for dt, b in bufs.items()}
    itemsize = {dt: np.dtype(_NP[dt]).itemsize for dt in bufs}
    rows: list[str] = []
    data_bytes = file_bytes = nan_elems = 0
    tsl = ts.tolist()
    offl = offs.tolist()
    cntl = counts.tolist()
    nanl = stats["nan"].tolist() if task.nan_fraction > 0 else [0] * n
    if task.statistic_csv:
        cols = [
            stats[k].tolist()
            for k in ("max", "min", "avg", "count", "neg", "pos", "nan", "ninf", "pinf", "zero", "l2")
        ]
        statl = list(zip(*cols, strict=True))
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, s in enumerate(specs):
            dt = s.dtype
            isz = itemsize[dt]
            b0 = offl[i] * isz
            nb = cntl[i] * isz
            data = mvs[dt][b0 : b0 + nb]
            header = npy_header(dt, s.shape)
            fname = f"{s.op_type}.{s.op_name}.0.0.{tsl[i]}.{s.io}.{s.slot}.DefaultFormat.{tok(dt)}.npy"
            fd = os.open(fname, flags, 0o644, dir_fd=dfd)
            try:
                os.writev(fd, (header, data))
            finally:
                os.close(fd)
            data_bytes += nb
            file_bytes += nb + len(header)
            nn = nanl[i]
            if nn:
                nan_files[f"{rel_dir}/{fname}"] = nn
                nan_elems += nn
            if task.statistic_csv:
                rows.append(
                    "%s,%s,0,0,%d,%s,%d,%d,%s,%s,%g,%g,%g,%d,%d,%d,%d,%d,%d,%d,%g,%s,\n"  # noqa: UP031 (C-style %g)
                    % (s.op_type, s.op_name, tsl[i], s.io, s.slot, nb, dt, _shape_text(s.shape), *statl[i],
                       hashlib.md5(data).hexdigest())
                )  # fmt: skip
    finally:
        os.close(dfd)
    if task.statistic_csv:
        header = CSV_HEADER_COMMON + "," + ",".join(h for _, h in STAT_CATEGORIES) + "\n"
        with open(os.path.join(path, "statistic.csv"), "w", encoding="utf-8", newline="") as fh:
            fh.write(header)
            fh.writelines(rows)
    return n, data_bytes, file_bytes, nan_elems, inf_tensors, nan_files


# --------------------------------------------------------------------------------------------------
# The whole tree.


def _write_rank_files(out: Path, rank: int, graph_id: int, kernels: list[str], iterations: int,
                      statistic_csv: bool, device: str) -> None:  # fmt: skip
    rank_dir = out / f"rank_{rank}"
    meta = rank_dir / ".dump_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "config.json").write_text(
        json.dumps({"device_target": device, "ms_version": "2.10.0"}, separators=(",", ":"))
    )
    dump_cfg = {
        "common_dump_settings": {
            "op_debug_mode": 0,
            "dump_mode": 0,
            "path": str(out),
            "net_name": NET,
            "iteration": "all",
            "saved_data": "full" if statistic_csv else "tensor",
            "input_output": 0,
            "kernels": [],
            "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
            "statistic_category": [c for c, _ in STAT_CATEGORIES],
        },
        "e2e_dump_settings": {"enable": True, "trans_flag": True},
    }
    (meta / "data_dump.json").write_text(json.dumps(dump_cfg, indent=2) + "\n")
    eo = rank_dir / "execution_order"
    eo.mkdir(exist_ok=True)
    (eo / f"ms_execution_order_graph_{graph_id}.csv").write_text(
        "NodeExecutionOrder-FullNameWithScope\n" + "".join(k + "\n" for k in kernels)
    )
    (eo / f"ms_global_execution_order_graph_{graph_id}.csv").write_text(
        "".join(f"{i}\n" for i in range(iterations))
    )


def generate(
    out_dir: str | os.PathLike,
    tensors: int,
    *,
    ranks: int = 1,
    iterations: int = 10,
    statistic_csv: bool = True,
    nan_fraction: float = 0.01,
    size_bytes: int | None = None,
    seed: int = 0,
    device: str = "CPU",
    graph_id: int = 0,
    workers: int | None = None,
) -> SynthSummary:
    """Write a synthetic dump tree of exactly ``tensors`` npy files under ``out_dir``.

    The files are spread evenly over ``ranks * iterations`` iteration directories (each holds the
    same kernels; the first directories get one file more when it does not divide). Deterministic
    for a given seed. ``workers`` processes write directories in parallel (default: all cores; 1
    writes in the calling process).
    """
    if tensors < 1 or ranks < 1 or iterations < 1:
        raise ValueError("tensors, ranks and iterations must be >= 1")
    if not 0 <= nan_fraction <= 0.8:
        raise ValueError("nan_fraction must be within [0, 0.8]")
    if device not in ("CPU", "GPU"):
        raise ValueError("device must be CPU or GPU")
    started = time.perf_counter()
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    n_dirs = ranks * iterations
    per_dir = [tensors // n_dirs + (1 if k < tensors % n_dirs else 0) for k in range(n_dirs)]
    biggest = max(per_dir)
    kernels, template = build_template(max(biggest, 1), seed, size_bytes)
    summary = SynthSummary(str(out), ranks=ranks, iterations=iterations, graph_id=graph_id,
                           kernels=len(kernels), statistic_csv=statistic_csv)  # fmt: skip
    for r in range(ranks):
        _write_rank_files(out, r, graph_id, kernels, iterations, statistic_csv, device)
    tasks = [
        _DirTask(
            str(out), r, graph_id, it, per_dir[r * iterations + it], seed, nan_fraction, statistic_csv, device
        )
        for r in range(ranks)
        for it in range(iterations)
        if per_dir[r * iterations + it] > 0
    ]
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    if workers == 1:
        _init_worker(template)
        results = map(_write_dir, tasks)
        pool = None
    else:
        ctx = multiprocessing.get_context(
            "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        )
        pool = ctx.Pool(workers, initializer=_init_worker, initargs=(template,))
        results = pool.imap_unordered(_write_dir, tasks)
    try:
        for n, db, fb, ne, it, nf in results:
            summary.tensors += n
            summary.data_bytes += db
            summary.file_bytes += fb
            summary.nan_elements += ne
            summary.inf_tensors += it
            summary.nan_tensors += len(nf)
            summary.nan_files.update(nf)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    summary.seconds = time.perf_counter() - started
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--tensors", type=int, required=True, help="number of npy files to write")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--statistic-csv", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--nan-fraction", type=float, default=0.01, help="share of float tensors holding NaN")
    p.add_argument("--size-bytes", type=int, default=None, help="data bytes of every non-scalar float tensor")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["CPU", "GPU"], default="CPU", help="CPU: capitalised dtype tokens")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--manifest", help="also write the summary, with every NaN file, to this JSON file")
    a = p.parse_args(argv)
    s = generate(
        a.out_dir, a.tensors, ranks=a.ranks, iterations=a.iterations, statistic_csv=a.statistic_csv,
        nan_fraction=a.nan_fraction, size_bytes=a.size_bytes, seed=a.seed, device=a.device, workers=a.workers,
    )  # fmt: skip
    if a.manifest:
        Path(a.manifest).write_text(json.dumps(s.as_dict(with_files=True), indent=1))
    json.dump(s.as_dict(), sys.stdout, indent=1)
    print(f"\n{s.tensors / s.seconds:,.0f} files/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
