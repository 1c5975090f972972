"""Write the TorchAir / GE / CANN test trees of tests/data/ge/ from real tensors, strictly from the
reference (msprobe-cann-formats.md §2.1 layout, §2.3 stats CSV, §2.4 naming, §3 raw dump binary).
No Ascend machine is reachable here, so this is how those dumps are made:

- `ge_tensor/` (write_ge_tensor): a GE graph-mode tensor dump of the real MindSpore 2.10 run
  tests/data/ms210/nan_log (its `log` of a negative value gives NaN at `Log-op0` in iteration 0):
  `worldsize2_global_rank{r}/{YYYYMMDDHHMMSS}/{device}/{model_name}/{model_id}/{step}/`, one raw
  dump file per operator launch (inputs then outputs, built with tests/writers/ascend_raw.py), big
  dump layout, every third name with `.bin`, 2-D MatMul operands in FRACTAL_NZ; iteration N is step
  N; rank 1 is a copy of rank 0 with its own clock (folder time and file timestamps);
- `ge_stats/` (write_ge_stats): the same run with `dump_data: stats`: one
  `{op_type}.{op_name}.{task}.{stream}.{timestamp}.csv` per launch, statistics computed from the
  same tensors with CANN semantics (`cann_stats`); most files have the default header, every
  fourth the `dump_stats` one (`...,Shape,Count,Max Value,Min Value,l2norm`), one file repeats its
  header row before its outputs;
- `om/` (write_om): the ATC offline-model layout `{timestamp}/{device_id}/{om_model_name}/{model_id}
  /{data_index}/` with four-field names `{op_type}.{op_name}.{task_id}.{timestamp}` like the
  reference's `Add.8.5.1682067845380164`, from the forward (backbone) ops of the same run, one
  data_index per iteration;
- `torchair/` (write_torchair_ge): the GE side of a TorchAir run whose FX side
  (`msprobe_fx_dump/`) tests/writers/torchair_fx.py made with real PyTorch: raw dumps of GE ops
  (`TransposeD`, `MatMulV2`, `Add`, `Relu`, `Log`, ...) made from the FX tensors under
  `msprobe_ge_dump/worldsize1_global_rank0/{time}/{device}/{model_name}/{model_id}/{token}/`, and
  the GE graph `dynamo_original_{graph}_rank_0_pid_{pid}_ts_{t}.txt` (protobuf text format of a
  GraphDef, ingest/formats/ascend/ge_ir.proto) whose output descs carry `_fx_tensor_name`.

Decisions where the reference is silent (also in the report of the change that added this file):
statistics are of the host (ND) tensor, so the stats tree writes Format ND and the host shape
(whether a device-format tensor's statistics count its padding is not said); bool is an
unsupported dtype (empty statistics: the six fixed fields then the literal `,,,,,,`); Max/Min of an
all-NaN tensor are NaN; numbers are written as Python's shortest round-trip `repr` (`inf`, `nan`).

Run it as a script (project venv) to regenerate ge_tensor/, ge_stats/, om/ and the GE side of
torchair/ (its FX side only changes when torchair_fx.py is run under the producer venv).
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import shutil
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf import text_format

from ingest.formats.ascend import ge_ir_pb2
from ingest.formats.ascend.device_format import host_to_device
from ingest.formats.mindspore.npy_name import parse_tensor_name, sanitize_v23
from tests.writers import torchair_fx as fx
from tests.writers.ascend_raw import SlotSpec, build_raw_dump, raw_file_name
from tests.writers.ascend_tree import DATA_TYPES, device_format_for

DATA = Path(__file__).parents[1] / "data"
SOURCE = "ms210/nan_log/dump"
GE_MODEL_NAME = "ge_default_20261121231350_1"  # a GE subgraph name, as in the reference's example
MODEL_ID = 1
STREAM_ID = 1
RANKS = 2
RANK_CLOCK_SHIFT_US = 1_000_003  # rank r's clock runs r * this behind rank 0's
STATS_RUN_SHIFT_US = 3_600_000_000  # the stats run is the same training an hour later
OM_MODEL_NAME = "nan_log_backbone"
OM_SCOPE = "Default/network-WithLossCell/_backbone-Net/"  # the om model is the exported backbone
OM_SHIFT_US = 7_200_000_000

DEFAULT_HEADER = (
    "Input/Output", "Index", "Data Size", "Data Type", "Format", "Shape", "Max Value", "Min Value",
    "Avg Value", "Count", "Nan Count", "Negative Inf Count", "Positive Inf Count",
)  # fmt: skip
DUMP_STATS_HEADER = (
    "Input/Output", "Index", "Data Size", "Data Type", "Format", "Shape", "Count", "Max Value",
    "Min Value", "l2norm",
)  # fmt: skip
EMPTY_STATS = ",,,,,,"  # what the runtime writes for an empty statistics row (reference §2.3)


@dataclass
class Launch:
    """One operator launch of the source run: its tensors, in execution order."""

    op_type: str
    op_name: str  # sanitised, as in the MindSpore file name
    full_name: str
    order: int  # position in the execution order
    timestamp_us: int
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def load_launches(src: Path) -> dict[int, list[Launch]]:
    """iteration -> launches of rank_0 of the npy dump `src`, in execution order (Parameters, which
    are not launched, are left out)."""
    rank_dir = src / "rank_0"
    with open(rank_dir / "execution_order" / "ms_execution_order_graph_0.csv", newline="") as fh:
        order = [row[0].strip() for row in csv.reader(fh) if row and row[0].strip()][1:]  # skip header
    position = {sanitize_v23(name): (i, name) for i, name in enumerate(order)}
    out: dict[int, list[Launch]] = {}
    for leaf in sorted(p for p in (rank_dir / "Net" / "0").iterdir() if p.name.isdigit()):
        slots: dict[tuple[str, str], dict[str, dict[int, np.ndarray]]] = defaultdict(
            lambda: {"input": {}, "output": {}}
        )
        first: dict[tuple[str, str], int] = {}
        for f in sorted(leaf.glob("*.npy")):
            tn = parse_tensor_name(f.name)
            if tn.op_name not in position:
                continue
            key = (tn.op_type, tn.op_name)
            slots[key][tn.io][tn.slot] = np.load(f)
            first[key] = min(first.get(key, tn.timestamp_us), tn.timestamp_us)
        launches = []
        for (op_type, op_name), s in slots.items():
            for io in ("input", "output"):
                assert sorted(s[io]) == list(range(len(s[io]))), (op_name, io)
            i, full = position[op_name]
            launches.append(
                Launch(op_type, op_name, full, i, first[(op_type, op_name)],
                       [s["input"][k] for k in sorted(s["input"])],
                       [s["output"][k] for k in sorted(s["output"])])
            )  # fmt: skip
        out[int(leaf.name)] = sorted(launches, key=lambda la: la.order)
    return out


def folder_time(timestamp_us: int) -> str:
    """`YYYYMMDDHHMMSS` (UTC) two seconds before `timestamp_us`: the dump folder of a run."""
    moment = dt.datetime.fromtimestamp(timestamp_us // 1_000_000 - 2, tz=dt.UTC)
    return moment.strftime("%Y%m%d%H%M%S")


def _spec(arr: np.ndarray, fmt: str) -> SlotSpec:
    data = host_to_device(arr, fmt) if fmt != "ND" else arr
    original = tuple(arr.shape) if fmt != "ND" else None
    return SlotSpec(data.tobytes(), DATA_TYPES[arr.dtype.name], tuple(data.shape), fmt, original)


def _raw(launch: Launch, dump_time_us: int, *, scope: str = "") -> bytes:
    op_type = launch.op_type
    specs = {
        io: [_spec(a, device_format_for(op_type, io, i, a)) for i, a in enumerate(arrs)]
        for io, arrs in (("input", launch.inputs), ("output", launch.outputs))
    }
    return build_raw_dump(
        op_name=launch.full_name.removeprefix(scope), inputs=specs["input"], outputs=specs["output"],
        dump_time=dump_time_us // 1000,
    )  # fmt: skip


def _run_root(dst: Path, launches: dict[int, list[Launch]], rank: int, shift: int) -> Path:
    first = min(la.timestamp_us for step in launches.values() for la in step)
    time = folder_time(first + shift)
    return dst / f"worldsize{RANKS}_global_rank{rank}" / time / str(rank) / GE_MODEL_NAME / str(MODEL_ID)


def write_ge_tensor(src: Path, dst: Path) -> dict[str, int]:
    """The GE tensor dump tree (see the module doc). Returns counts."""
    launches = load_launches(src)
    counts = {"files": 0, "tensors": 0}
    for rank in range(RANKS):
        shift = rank * RANK_CLOCK_SHIFT_US
        root = _run_root(dst, launches, rank, shift)
        for step, step_launches in launches.items():
            leaf = root / str(step)
            leaf.mkdir(parents=True, exist_ok=True)
            for i, la in enumerate(step_launches):
                ts = la.timestamp_us + shift
                name = raw_file_name(
                    la.op_type, la.full_name, la.order + 1, STREAM_ID, ts, ".bin" if i % 3 == 0 else ""
                )
                (leaf / name).write_bytes(_raw(la, ts))
                counts["files"] += 1
                counts["tensors"] += len(la.inputs) + len(la.outputs)
    return counts


def _num(value: float) -> str:
    return repr(float(value))


def cann_stats(arr: np.ndarray) -> dict[str, str] | None:
    """The statistics CANN writes for `arr`, by header name; None for an unsupported dtype.

    CANN-rt FloatingStatistics (reference §2.3): Count counts every element; Max/Min ignore NaN and
    include ±inf; Avg is the mean of the finite values, NaN if any NaN or both infinities are
    present, else ±inf if one is; integer types write 0 NaN/inf counts. l2norm is the square root
    of the sum of squares of every element (NaN/inf propagate).
    """
    kind = arr.dtype.kind
    if kind not in "iuf":
        return None
    a = arr.astype(np.float64).ravel()
    out = {"Count": str(a.size)}
    if a.size == 0:
        return out | dict.fromkeys(("Max Value", "Min Value", "Avg Value", "l2norm"), "NA") | {
            "Nan Count": "0", "Negative Inf Count": "0", "Positive Inf Count": "0"
        }  # fmt: skip
    if kind in "iu":
        ints = arr.ravel()
        out |= {"Max Value": str(int(ints.max())), "Min Value": str(int(ints.min())),
                "Avg Value": _num(a.mean()),
                "Nan Count": "0", "Negative Inf Count": "0", "Positive Inf Count": "0"}  # fmt: skip
    else:
        nan, pos, neg = np.isnan(a), a == np.inf, a == -np.inf
        kept = a[~nan]
        finite = a[np.isfinite(a)]
        if nan.any() or (pos.any() and neg.any()):
            avg = math.nan
        elif pos.any() or neg.any():
            avg = math.inf if pos.any() else -math.inf
        else:
            avg = finite.mean()
        out |= {
            "Max Value": _num(kept.max()) if kept.size else "nan",
            "Min Value": _num(kept.min()) if kept.size else "nan",
            "Avg Value": _num(avg),
            "Nan Count": str(int(nan.sum())),
            "Negative Inf Count": str(int(neg.sum())),
            "Positive Inf Count": str(int(pos.sum())),
        }
    out["l2norm"] = _num(np.sqrt(np.sum(a * a)))
    return out


def stats_rows(launch: Launch, header: tuple[str, ...], *, repeat_header: bool = False) -> list[str]:
    """The lines of one launch's stats CSV (header first)."""
    lines = [",".join(header)]
    for io, arrs in (("Input", launch.inputs), ("Output", launch.outputs)):
        if io == "Output" and repeat_header:
            lines.append(",".join(header))
        for i, a in enumerate(arrs):
            fixed = [io, str(i), str(a.nbytes), DATA_TYPES[a.dtype.name], "ND", "x".join(map(str, a.shape))]
            stats = cann_stats(a)
            if stats is None:
                lines.append(",".join(fixed) + EMPTY_STATS)
            else:
                lines.append(",".join(fixed + [stats[h] for h in header[len(fixed) :]]))
    return lines


def write_ge_stats(src: Path, dst: Path) -> dict[str, int]:
    """The `dump_data: stats` tree of the same run (see the module doc). Returns counts."""
    launches = load_launches(src)
    counts = {"files": 0, "rows": 0}
    for rank in range(RANKS):
        shift = STATS_RUN_SHIFT_US + rank * RANK_CLOCK_SHIFT_US
        root = _run_root(dst, launches, rank, shift)
        for step, step_launches in launches.items():
            leaf = root / str(step)
            leaf.mkdir(parents=True, exist_ok=True)
            for i, la in enumerate(step_launches):
                header = DUMP_STATS_HEADER if i % 4 == 3 else DEFAULT_HEADER
                repeat = rank == 0 and step == 0 and i == 1
                lines = stats_rows(la, header, repeat_header=repeat)
                name = raw_file_name(
                    la.op_type, la.full_name, la.order + 1, STREAM_ID, la.timestamp_us + shift
                )
                (leaf / f"{name}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
                counts["files"] += 1
                counts["rows"] += len(la.inputs) + len(la.outputs)
    return counts


def write_om(src: Path, dst: Path) -> dict[str, int]:
    """The ATC offline-model dump tree (see the module doc). Returns counts."""
    launches = load_launches(src)
    counts = {"files": 0, "tensors": 0}
    first = min(la.timestamp_us for step in launches.values() for la in step)
    root = dst / folder_time(first + OM_SHIFT_US) / "0" / OM_MODEL_NAME / str(MODEL_ID)
    for data_index, step_launches in launches.items():
        leaf = root / str(data_index)
        leaf.mkdir(parents=True, exist_ok=True)
        for task, la in enumerate(x for x in step_launches if x.full_name.startswith(OM_SCOPE)):
            ts = la.timestamp_us + OM_SHIFT_US
            op_name = la.full_name.removeprefix(OM_SCOPE)
            name = f"{la.op_type}.{sanitize_v23(op_name)}.{task + 1}.{ts}"
            (leaf / name).write_bytes(_raw(la, ts, scope=OM_SCOPE))
            counts["files"] += 1
            counts["tensors"] += len(la.inputs) + len(la.outputs)
    return counts


# ---------------------------------------------------------------------------------------------
# TorchAir: the GE side of the run torchair_fx.py traced

GE_TIME_BASE_US = 1_741_947_300_000_000  # 2025-03-14 10:15:00 UTC, the FX dump's clock
GE_DEVICE = 0
GE_STREAM = 2
GE_PID = 4242
GRAPH_FILE = f"dynamo_original_{fx.MODEL_NAME}_rank_0_pid_{GE_PID}_ts_{fx.FX_TIME_BASE}.txt"

# GE ops the fx2ge conversion of FX_GRAPH gives, in execution order: (name, type, inputs, FX node
# whose converter output this op's output 0 is, or None for an op inside a conversion). An input
# is "{ge op or Data}:{index}"; a Data op is named after its FX placeholder, as TorchAir does.
GE_OPS = (
    ("TransposeD", "TransposeD", ("w1_1:0",), "t"),
    ("MatMulV2", "MatMulV2", ("x_1:0", "TransposeD:0"), None),
    ("Add", "Add", ("MatMulV2:0", "b1_1:0"), "addmm"),
    ("Relu", "Relu", ("Add:0",), "relu"),
    ("TransposeD_1", "TransposeD", ("w2_1:0",), "t_1"),
    ("MatMulV2_1", "MatMulV2", ("Relu:0", "TransposeD_1:0"), None),
    ("Add_1", "Add", ("MatMulV2_1:0", "b2_1:0"), "addmm_1"),
    ("Log", "Log", ("Add_1:0",), "log"),
)
GE_OUTPUT = "Log:0"
# placeholder -> (FX node, INPUT index) where its value was dumped
_PLACEHOLDER_SEEN = {"w1_1": ("t", 0), "x_1": ("addmm", 1), "b1_1": ("addmm", 0), "w2_1": ("t_1", 0),
                     "b2_1": ("addmm_1", 0)}  # fmt: skip


def fx_tensor_name(node: str) -> str:
    """`_fx_tensor_name` of FX node `node`'s output 0: `{node name}-{target}.OUTPUT.0` (TorchAir)."""
    target = {name: target for name, target, _ in fx.FX_GRAPH}[node]
    return f"{node}-{target}.OUTPUT.0"


def load_fx_token(token_dir: Path) -> dict[tuple[str, str, int], np.ndarray]:
    """(node, 'INPUT'|'OUTPUT', idx) -> tensor of one FX token folder."""
    out = {}
    for f in sorted(token_dir.glob("*.npy")):
        stem = f.name[: -len(".npy")]
        head, io, idx, _ts = stem.rsplit(".", 3)
        node = head.split("-", 1)[0]
        out[(node, io, int(idx))] = np.load(f)
    return out


def ge_tensors(fx_token: dict[tuple[str, str, int], np.ndarray]) -> dict[str, np.ndarray]:
    """'{op}:{idx}' -> value of every GE tensor of one token, made from the FX tensors: a converted
    node's output is the FX output; a MatMulV2 inside an addmm is computed (float32 matmul)."""
    values = {f"{p}:0": fx_token[(node, "INPUT", i)] for p, (node, i) in _PLACEHOLDER_SEEN.items()}
    for name, op_type, inputs, node in GE_OPS:
        if node is not None:
            values[f"{name}:0"] = fx_token[(node, "OUTPUT", 0)]
        elif op_type == "MatMulV2":
            a, b = (values[i] for i in inputs)
            values[f"{name}:0"] = np.matmul(a.astype(np.float32), b.astype(np.float32))
        else:
            raise AssertionError(name)
    return values


def _desc(desc: ge_ir_pb2.TensorDescriptor, arr: np.ndarray, fx_name: str | None = None) -> None:
    desc.dtype = ge_ir_pb2.DataType.Value(DATA_TYPES[arr.dtype.name])
    desc.shape.dim.extend(arr.shape)
    desc.layout = "ND"
    if fx_name is not None:
        desc.attr["_fx_tensor_name"].s = fx_name.encode()


def ge_graph(values: dict[str, np.ndarray]) -> ge_ir_pb2.GraphDef:
    """The GE GraphDef TorchAir dumps as dynamo_original_*.txt."""
    graph = ge_ir_pb2.GraphDef(name=fx.MODEL_NAME)
    for index, placeholder in enumerate(fx.PLACEHOLDERS):
        op = graph.op.add(name=placeholder, type="Data")
        op.attr["index"].i = index
        _desc(op.input_desc.add(), values[f"{placeholder}:0"])
        _desc(op.output_desc.add(), values[f"{placeholder}:0"])
    for name, op_type, inputs, node in GE_OPS:
        op = graph.op.add(name=name, type=op_type, input=inputs)
        if op_type == "TransposeD":
            op.attr["perm"].list.i.extend([1, 0])
            op.attr["perm"].list.val_type = ge_ir_pb2.AttrDef.ListValue.VT_LIST_INT
        if op_type == "MatMulV2":
            op.attr["transpose_x1"].b = False
            op.attr["transpose_x2"].b = False
        for i in inputs:
            _desc(op.input_desc.add(), values[i])
        _desc(op.output_desc.add(), values[f"{name}:0"], fx_tensor_name(node) if node else None)
    out = graph.op.add(name="NetOutput", type="NetOutput", input=[GE_OUTPUT])
    _desc(out.input_desc.add(), values[GE_OUTPUT])
    graph.output.append(GE_OUTPUT)
    return graph


def write_torchair_ge(fx_root: Path, dst: Path) -> dict[str, int]:
    """The GE side (msprobe_ge_dump/ and the graph txt) of the FX dump under `fx_root`, into `dst`."""
    fx_model = fx_root / "msprobe_fx_dump" / fx.RANK_DIR / fx.MODEL_NAME
    time = folder_time(GE_TIME_BASE_US + 2_000_000)
    root = dst / "msprobe_ge_dump" / fx.RANK_DIR / time / str(GE_DEVICE) / fx.MODEL_NAME / str(MODEL_ID)
    counts = {"files": 0, "tensors": 0}
    graph = None
    for token in fx.TOKENS:
        values = ge_tensors(load_fx_token(fx_model / str(token)))
        graph = graph or ge_graph(values)
        leaf = root / str(token)
        leaf.mkdir(parents=True, exist_ok=True)
        for task, (name, op_type, inputs, _node) in enumerate(GE_OPS):
            ts = GE_TIME_BASE_US + token * 1_000_000 + 37 * (task + 1)
            specs = {}
            for io, keys in (("input", inputs), ("output", (f"{name}:0",))):
                specs[io] = [
                    _spec(values[k], "FRACTAL_NZ" if op_type == "MatMulV2" and io == "input" else "ND")
                    for k in keys
                ]
            data = build_raw_dump(
                op_name=name, inputs=specs["input"], outputs=specs["output"], dump_time=ts // 1000
            )
            ext = ".bin" if task % 3 == 2 else ""
            (leaf / raw_file_name(op_type, name, task + 1, GE_STREAM, ts, ext)).write_bytes(data)
            counts["files"] += 1
            counts["tensors"] += len(inputs) + 1
    dst.mkdir(parents=True, exist_ok=True)
    (dst / GRAPH_FILE).write_text(text_format.MessageToString(graph), encoding="utf-8")
    counts["files"] += 1
    return counts


def write_all(data_dir: Path, out: Path) -> dict[str, dict[str, int]]:
    """Write ge_tensor/, ge_stats/, om/ and the GE side of torchair/ (from data_dir's FX dump) under
    `out`; the FX side is read from `data_dir/ge/torchair`, never written."""
    src = data_dir / SOURCE
    return {
        "ge_tensor": write_ge_tensor(src, out / "ge_tensor"),
        "ge_stats": write_ge_stats(src, out / "ge_stats"),
        "om": write_om(src, out / "om"),
        "torchair": write_torchair_ge(data_dir / "ge" / "torchair", out / "torchair"),
    }


def main(data_dir: Path) -> None:
    ge = data_dir / "ge"
    for name in ("ge_tensor", "ge_stats", "om"):
        shutil.rmtree(ge / name, ignore_errors=True)
    shutil.rmtree(ge / "torchair" / "msprobe_ge_dump", ignore_errors=True)
    for stale in (ge / "torchair").glob("dynamo_*.txt"):
        stale.unlink()
    for name, counts in write_all(data_dir, ge).items():
        print(f"ge/{name}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
