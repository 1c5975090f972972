"""Multi-rank GE (TorchAir / CANN graph-mode) raw dumps with HCCL kernels (issue 37): tests/data/ge_dist/.

No Ascend machine is reachable here, so these trees are written strictly from the reference
(msprobe-cann-formats.md §2.1 layout, §2.4 naming, §3 raw dump binary; built with
tests/writers/ascend_raw.py): `worldsize{W}_global_rank{r}/{YYYYMMDDHHMMSS}/{device}/{model_name}/
{model_id}/{step}/`, one big-dump raw file `{op_type}.{op_name}.{task}.{stream}.{timestamp}` per
kernel launch, inputs then outputs, every tensor in ND format. The reference names no HCCL op type;
the ones used are GE's IR types of CANN's collective ops (`hcom_ops.h`): `HcomAllReduce`,
`HcomAllGather`, `HcomBroadcast`, `HcomSend` (one input, no output) and `HcomReceive` (no input,
one output).

- `allreduce/` and `broadcast/`: the 4 ranks of the REAL MindSpore 2.10 runs
  tests/data/ms210/dist_allreduce and dist_broadcast, launch by launch, with their own tensors
  (every `.npy` file of a kernel becomes a slot of its raw file; `Parameter.*` files, which are no
  launch, are left out). `AllReduce`/`AllGather`/`Broadcast` become `HcomAllReduce`/
  `HcomAllGather`/`HcomBroadcast`; the header's `op_name` is the full scope name of the execution
  order (so the Broadcast whose files say `op0` is `.../Broadcast-op1`, as its execution order and
  IR say). Task id = position in the execution order + 1, stream 1. Planted (from those runs):
  allreduce rank 2 step 1 `Log-op0`; broadcast rank 1 step 1 `Sqrt-op0` (see their READMEs).
- `p2p/`: 2 ranks, a two-stage pipeline computed here with numpy (`p2p_launches`), 3 steps.
  Rank 0: `MatMul` (x @ w0) -> `Log` -> `HcomSend` to rank 1. Rank 1: `Mul` (its own b * scale),
  `HcomReceive` from rank 0, `MatMul` (received @ w1), `Add` (+ the Mul). PLANTED: step 1, rank 0's
  x[1] = -50, so rank 0's `Log` makes NaN (3 of 6) and rank 1 first sees it in `HcomReceive`'s
  output (a directed collective; it has no input). Step 2: rank 0's `Log` makes NaN again AND rank 1's
  own `Mul` overflows float32 to +Inf (scale 1e38 * 10) before its Receive: a second origin, born
  locally. Step 0 is clean.

Clocks: each rank has its own (ranks are hosts). `CLOCK_SHIFT_US` moves rank r's timestamps (and
its folder time): in allreduce the origin rank 2 runs 7 s ahead, so its Log is stamped after the
AllReduce outputs of the others; in p2p rank 1 runs 2 s behind, so its Receive is stamped before
rank 0's Log. Wall clocks across ranks cannot order these events; the collective's n-th instance in
the step can.

Run it as a script (project venv) to regenerate tests/data/ge_dist/.
"""

from __future__ import annotations

import csv
import datetime as dt
import shutil
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.writers.ascend_raw import SlotSpec, build_raw_dump, raw_file_name

DATA = Path(__file__).parents[1] / "data"
OUT = DATA / "ge_dist"
MODEL_NAME = "ge_default_20261129170000_1"
MODEL_ID = 1
STREAM_ID = 1
HCCL = {"AllReduce": "HcomAllReduce", "AllGather": "HcomAllGather", "Broadcast": "HcomBroadcast"}
DATA_TYPES = {"float32": "DT_FLOAT", "int32": "DT_INT32", "int64": "DT_INT64", "bool": "DT_BOOL"}
SOURCES = {"allreduce": "ms210/dist_allreduce/dump", "broadcast": "ms210/dist_broadcast/dump"}
CLOCK_SHIFT_US = {
    "allreduce": {0: 0, 1: -1_000_003, 2: 7_000_001, 3: -2_000_007},
    "broadcast": {0: 0, 1: 3_000_017, 2: -1_000_003, 3: 1_500_001},
    "p2p": {0: 0, 1: -2_000_003},
}
P2P_T0_US = 1_795_980_000_000_000  # rank 0's clock at step 0 of the p2p run
P2P_STEP_US = 40_000


@dataclass
class Launch:
    """One kernel launch: GE op type, full op name, task id, timestamp, tensors."""

    op_type: str
    op_name: str
    task_id: int
    timestamp_us: int
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def _base(sanitised: str) -> str:
    """A sanitised MindSpore name without its `-opN` index."""
    head, sep, tail = sanitised.rpartition("-op")
    return head if sep and tail.isdigit() else sanitised


def ms_launches(rank_dir: Path) -> dict[int, list[Launch]]:
    """iteration -> launches (execution order) of one rank of a MindSpore npy dump. A file whose
    name is not in the execution order is matched on its name without the `-opN` index when that
    base name is unique there (MindSpore 2.10 names the Broadcast's files `op0`, its kernel `op1`)."""
    with open(rank_dir / "execution_order" / "ms_execution_order_graph_0.csv", newline="") as fh:
        order = [row[0] for row in csv.reader(fh) if row][1:]
    position = {name.replace("/", "_"): i for i, name in enumerate(order)}
    bases = defaultdict(list)
    for sanitised, i in position.items():
        bases[_base(sanitised)].append(i)
    out: dict[int, list[Launch]] = {}
    for leaf in sorted((rank_dir / "Net" / "0").iterdir(), key=lambda p: int(p.name)):
        slots: dict[int, dict] = defaultdict(lambda: {"type": None, "ts": None, "input": {}, "output": {}})
        for f in leaf.glob("*.npy"):
            parts = f.name.split(".")
            op_type, op, ts, io, slot = parts[0], parts[1], int(parts[4]), parts[5], int(parts[6])
            if op_type == "Parameter":
                continue
            i = position.get(op)
            if i is None:
                (i,) = bases[_base(op)]
            s = slots[i]
            s["type"], s["ts"] = op_type, min(ts, s["ts"] or ts)
            s[io][slot] = np.load(f)
        out[int(leaf.name)] = [
            Launch(HCCL.get(s["type"], s["type"]), order[i], i + 1, s["ts"],
                   [s["input"][k] for k in sorted(s["input"])], [s["output"][k] for k in sorted(s["output"])])
            for i, s in sorted(slots.items())
        ]  # fmt: skip
    return out


def p2p_launches() -> dict[int, dict[int, list[Launch]]]:
    """rank -> iteration -> launches of the 2-rank pipeline (see the module doc), on rank 0's clock."""
    rng = np.random.default_rng(37)
    w0 = (np.abs(rng.standard_normal((4, 3))) + 0.1).astype(np.float32)
    w1 = rng.standard_normal((3, 2)).astype(np.float32)
    b = rng.standard_normal((2, 2)).astype(np.float32)
    out: dict[int, dict[int, list[Launch]]] = {0: {}, 1: {}}
    for step in range(3):
        t = P2P_T0_US + step * P2P_STEP_US
        x = (np.abs(rng.standard_normal((2, 4))) + 0.1).astype(np.float32)
        scale = np.ones((2, 2), np.float32)
        if step in (1, 2):
            x[1] = -50.0  # rank 0: x @ w0 < 0 in row 1, so Log gives NaN there
        if step == 2:
            scale[0, 0] = np.float32(1e38)
            b = b.copy()
            b[0, 0] = np.float32(10.0)  # rank 1: 10 * 1e38 overflows float32: +Inf
        h = x @ w0
        with np.errstate(invalid="ignore", over="ignore"):
            a = np.log(h)
            m = b * scale
        y = a @ w1
        with np.errstate(invalid="ignore"):
            z = y + m
        out[0][step] = [
            Launch("MatMul", "stage0/MatMul", 1, t + 10, [x, w0], [h]),
            Launch("Log", "stage0/Log", 2, t + 25, [h], [a]),
            Launch("HcomSend", "stage0/HcomSend", 3, t + 40, [a], []),
        ]
        out[1][step] = [
            Launch("Mul", "stage1/Mul", 1, t + 12, [b, scale], [m]),
            Launch("HcomReceive", "stage1/HcomReceive", 2, t + 60, [], [a.copy()]),
            Launch("MatMul", "stage1/MatMul", 3, t + 75, [a.copy(), w1], [y]),
            Launch("Add", "stage1/Add", 4, t + 90, [y, m], [z]),
        ]
    return out


def _spec(arr: np.ndarray) -> SlotSpec:
    arr = np.asarray(arr)
    return SlotSpec(arr.tobytes(), DATA_TYPES[arr.dtype.name], tuple(arr.shape), "ND")


def folder_time(timestamp_us: int) -> str:
    """`YYYYMMDDHHMMSS` (UTC) two seconds before `timestamp_us`: the dump folder of a run."""
    return dt.datetime.fromtimestamp(timestamp_us // 1_000_000 - 2, tz=dt.UTC).strftime("%Y%m%d%H%M%S")


def write_rank(dst: Path, world: int, rank: int, launches: dict[int, list[Launch]], shift: int) -> int:
    """One rank root of a GE tensor dump; returns the number of files written."""
    first = min(la.timestamp_us for step in launches.values() for la in step)
    root = dst / f"worldsize{world}_global_rank{rank}" / folder_time(first + shift) / str(rank)
    root = root / MODEL_NAME / str(MODEL_ID)
    files = 0
    for step, step_launches in launches.items():
        leaf = root / str(step)
        leaf.mkdir(parents=True, exist_ok=True)
        for la in step_launches:
            ts = la.timestamp_us + shift
            raw = build_raw_dump(
                op_name=la.op_name, inputs=[_spec(a) for a in la.inputs],
                outputs=[_spec(a) for a in la.outputs], dump_time=ts // 1000,
            )  # fmt: skip
            (leaf / raw_file_name(la.op_type, la.op_name, la.task_id, STREAM_ID, ts)).write_bytes(raw)
            files += 1
    return files


def write_all(data_dir: Path, out: Path) -> dict[str, int]:
    """Write allreduce/, broadcast/ and p2p/ under `out`; files per tree."""
    counts = {}
    for tree, src in SOURCES.items():
        ranks = {int(p.name[5:]): p for p in (data_dir / src).glob("rank_*")}
        shifts = CLOCK_SHIFT_US[tree]
        counts[tree] = sum(
            write_rank(out / tree, len(ranks), r, ms_launches(ranks[r]), shifts[r]) for r in sorted(ranks)
        )
    p2p = p2p_launches()
    counts["p2p"] = sum(write_rank(out / "p2p", 2, r, p2p[r], CLOCK_SHIFT_US["p2p"][r]) for r in (0, 1))
    return counts


def main(data_dir: Path) -> None:
    out = data_dir / "ge_dist"
    for tree in (*SOURCES, "p2p"):
        shutil.rmtree(out / tree, ignore_errors=True)
    for tree, n in write_all(data_dir, out).items():
        print(f"ge_dist/{tree}: {n} raw files")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
