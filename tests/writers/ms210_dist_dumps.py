"""REAL 4-rank MindSpore 2.10.0 CPU dumps with communication kernels (issue 37): `tests/data/ms210/dist_*`.

    <producer venv>/bin/python tests/writers/ms210_dist_dumps.py make SCENARIO OUT_DIR   # run + copy
    <any python with numpy>   tests/writers/ms210_dist_dumps.py facts OUT_DIR           # what the README says

SCENARIO is `dist_allreduce` or `dist_broadcast`. `make` runs ONLY under the producer venv (it
imports mindspore; the project never does). It starts 4 worker processes on this machine with
MindSpore's own launcher, `msrun --worker_num=4 --local_worker_num=4` (dynamic cluster over TCP on
loopback; on CPU `init()` picks MindSpore's own collective library, "mccl"), graph mode, with the
synchronous E2E dump on. Like tests/writers/ms210_lowp_dumps.py it runs from the neutral folder
DEMO=/home/user/dumps/SCENARIO through a DEMO/venv symlink to the producer venv, so the source frames
MindSpore records (graphs/*.ir and the protobuf graphs/*.pb) hold no path of this machine; then it
copies DEMO/rank_{0..3} to OUT_DIR/dump/ (files 0644, dirs 0755; nothing else edited) and
DEMO/dump.json to OUT_DIR/dump.json.

What MindSpore 2.10's CPU backend runs in graph mode (tried here): `ops.AllReduce`, `ops.AllGather`,
`ops.Broadcast`. It refuses `ops.Send`, `ops.Receive`, `ops.ReduceScatter`, `ops.AlltoAll` and the
`DistCommIsend`/`DistCommIrecv` primitives with "Kernel select failed: Unsupported op [Send] on CPU".
So the directed case is a Broadcast, not a send/recv pair.

Both scenarios (see `train`): data parallel on 4 ranks, the same initial weights on every rank
(`ms.set_seed(0)`), different data per rank, 3 training steps, batch 2; a hand-written train step
with an explicit `ops.AllReduce` (sum) of every gradient, scaled by 1/4, then `Momentum`; after the
update, an `ops.AllGather` of every rank's loss (so the step returns all 4 losses).

  - `dist_allreduce`: `Log` -> `Dense(4,3)` -> `Dense(3,2)`. PLANTED: rank 2, step 1, the input
    x[1, 2] = -1, so `Log-op0` (line 95, `x = self.log(x)  # PLANTED allreduce`) makes 1 NaN on
    rank 2 only; rank 2's gradients are NaN, and the gradient AllReduce (`Default/AllReduce-op2`,
    line 138, first) hands NaN to ranks 0, 1 and 3 (undirected). Step 2 starts from NaN weights.
  - `dist_broadcast`: `Dense(4,3)` times a scale `s = Sqrt(v)` that `ops.Broadcast(1)` takes from
    rank 1 to every rank, then `Dense(3,2)`. PLANTED: rank 1 (the root), step 1, v[0] = -4, so
    `Sqrt-op0` (line 108, `s = self.sqrt(v)  # PLANTED broadcast`) makes 1 NaN on rank 1; the
    Broadcast (line 109, directed, root 1) hands it to ranks 0, 2 and 3 in the forward pass, before
    any AllReduce. The other ranks' own Sqrt stays finite. (Keep these line numbers: the dumps' IR.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIOS = ("dist_allreduce", "dist_broadcast")
RANKS = 4
STEPS = 3
PLANT_STEP = 1
PLANT_RANK = {"dist_allreduce": 2, "dist_broadcast": 1}
BROADCAST_ROOT = 1
PORT = 18931

DUMP_JSON = {
    "common_dump_settings": {
        "op_debug_mode": 0,
        "dump_mode": 0,
        "path": "",
        "net_name": "Net",
        "iteration": "all",
        "saved_data": "tensor",
        "input_output": 0,
        "kernels": [],
        "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
        "statistic_category": ["max", "min", "l2norm"],
    },
    "e2e_dump_settings": {"enable": True, "trans_flag": True},
}


# ----------------------------------------------------------------------------- the training run
def train(scenario: str) -> None:
    """One worker of the 4-rank job (msrun starts 4 of these)."""
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn, ops
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    rank, size = get_rank(), get_group_size()
    ms.set_seed(0)  # the same initial weights on every rank
    rng = np.random.default_rng(100 + rank)  # different data on every rank

    class LogNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.log = ops.Log()
            self.fc1 = nn.Dense(4, 3)
            self.fc2 = nn.Dense(3, 2)

        def construct(self, x, v):
            x = self.log(x)  # PLANTED allreduce
            x = self.fc1(x)
            return self.fc2(x)

    class ScaleNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.sqrt = ops.Sqrt()
            self.bcast = ops.Broadcast(BROADCAST_ROOT)
            self.fc1 = nn.Dense(4, 3)
            self.fc2 = nn.Dense(3, 2)

        def construct(self, x, v):
            s = self.sqrt(v)  # PLANTED broadcast
            s = self.bcast((s,))[0]
            x = self.fc1(x) * s
            return self.fc2(x)

    class WithLoss(nn.Cell):
        def __init__(self, net, loss_fn):
            super().__init__(auto_prefix=False)
            self._backbone = net
            self._loss_fn = loss_fn

        def construct(self, x, v, label):
            return self._loss_fn(self._backbone(x, v), label)

    class TrainStep(nn.Cell):
        def __init__(self, network, optimizer):
            super().__init__(auto_prefix=False)
            self.network = network
            self.optimizer = optimizer
            self.weights = optimizer.parameters
            self.grad = ops.GradOperation(get_by_list=True)
            self.allreduce = ops.AllReduce()
            self.allgather = ops.AllGather()
            self.inv = 1.0 / size

        def construct(self, x, v, label):
            loss = self.network(x, v, label)
            grads = self.grad(self.network, self.weights)(x, v, label)
            reduced = ()
            for g in grads:
                reduced = reduced + (self.allreduce(g) * self.inv,)  # noqa: RUF005
            loss = ops.depend(loss, self.optimizer(reduced))
            return self.allgather(ops.reshape(loss, (1,)))

    net = LogNet() if scenario == "dist_allreduce" else ScaleNet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    step_cell = TrainStep(WithLoss(net, loss_fn), opt)
    step_cell.set_train()
    for step in range(STEPS):
        x = (np.abs(rng.standard_normal((2, 4))) + 0.1).astype(np.float32)
        v = (np.abs(rng.standard_normal((3,))) + 0.5).astype(np.float32)
        y = rng.integers(0, 2, (2,)).astype(np.int32)
        if step == PLANT_STEP and rank == PLANT_RANK[scenario]:
            if scenario == "dist_allreduce":
                x[1, 2] = -1.0
            else:
                v[0] = -4.0
        losses = step_cell(Tensor(x), Tensor(v), Tensor(y))
        print(f"rank {rank} step {step} losses {losses}", flush=True)


# ----------------------------------------------------------------------------- make
def make(scenario: str, out: Path) -> None:
    """Run the 4-rank job in DEMO and copy what MindSpore wrote to OUT_DIR."""
    out = out.resolve()
    demo = Path("/home/user/dumps") / scenario
    if demo.exists():
        shutil.rmtree(demo)
    demo.mkdir(parents=True)
    shutil.copy2(__file__, demo / "ms210_dist_dumps.py")
    real_venv = Path(sys.prefix)
    (demo / "venv").symlink_to(real_venv, target_is_directory=True)

    cfg = json.loads(json.dumps(DUMP_JSON))
    cfg["common_dump_settings"]["path"] = str(demo)
    (demo / "dump.json").write_text(json.dumps(cfg, indent=2) + "\n")
    # msrun starts each worker as `python SCRIPT ARGS` from PATH: DEMO/venv/bin comes first
    env = dict(
        os.environ,
        MINDSPORE_DUMP_CONFIG=str(demo / "dump.json"),
        PATH=f"{demo / 'venv' / 'bin'}:{os.environ.get('PATH', '')}",
        GLOG_v="2",
    )
    cmd = [
        str(demo / "venv" / "bin" / "python"), "-m", "mindspore.parallel.cluster.run",
        f"--worker_num={RANKS}", f"--local_worker_num={RANKS}", f"--master_port={PORT}",
        f"--log_dir={demo / 'msrun_log'}", "--join=True",
        "ms210_dist_dumps.py", "train", scenario,
    ]  # fmt: skip
    subprocess.run(cmd, cwd=demo, env=env, check=True)

    if (out / "dump").exists():
        shutil.rmtree(out / "dump")
    (out / "dump").mkdir(parents=True)
    shutil.copy2(demo / "dump.json", out / "dump.json")
    for r in range(RANKS):
        shutil.copytree(demo / f"rank_{r}", out / "dump" / f"rank_{r}")
    for p in [out / "dump", out / "dump.json", *(out / "dump").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)

    here = Path(__file__).resolve()
    machine = {real_venv, real_venv.resolve(), Path(sys.base_prefix), here.parents[2], Path.home(), out}
    bad = [str(p).encode() for p in machine] + [tempfile.gettempdir().encode()]
    for p in sorted([out / "dump.json", *(out / "dump").rglob("*")]):
        if p.is_file() and p.suffix != ".npy":
            data = p.read_bytes()
            for b in bad:
                if b in data:
                    raise SystemExit(f"machine path {b!r} left in {p}")


# ----------------------------------------------------------------------------- facts (numpy only)
NAME = re.compile(
    r"^(?P<type>[^.]+)\.(?P<op>.+)\.0\.0\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)"
    r"\.(?P<fmt>[^.]+)\.(?P<dt>[^.]+)\.npy$"
)


def first_nonfinite(iter_dir: Path) -> tuple[str, str, str, int, int] | None:
    """(op type, op name in the file, io, slot, NaN+Inf count) of the first non-finite tensor of one
    iteration directory: outputs before inputs, then by the file's timestamp, then slot (the order
    dumpcat's first_anomaly documents), read with np.load only."""
    import numpy as np

    rows = []
    for p in iter_dir.glob("*.npy"):
        m = NAME.match(p.name)
        rows.append((m["io"] != "output", int(m["ts"]), int(m["slot"]), m, p))
    for _, _, _, m, p in sorted(rows, key=lambda r: r[:3]):
        a = np.load(p)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            return m["type"], m["op"], m["io"], int(m["slot"]), int((~np.isfinite(a)).sum())
    return None


def facts(out: Path) -> int:
    """Print per rank and step the first non-finite tensor, the communication kernels in execution
    order and the IR's source line of each planted kernel."""
    import numpy as np

    dump = out / "dump"
    for rank_dir in sorted(dump.glob("rank_*"), key=lambda p: int(p.name[5:])):
        order = (rank_dir / "execution_order" / "ms_execution_order_graph_0.csv").read_text().split("\n")[1:]
        comm = [n for n in order if re.search(r"/(AllReduce|AllGather|Broadcast)-op\d+$", n)]
        print(f"== {rank_dir.name}: {len(order) - order.count('')} kernels, communication: {comm}")
        extra = sorted(p.name for p in rank_dir.iterdir())
        print(f"   entries: {extra}")
        for it in sorted((rank_dir / "Net" / "0").iterdir(), key=lambda p: int(p.name)):
            files = list(it.glob("*.npy"))
            bad = sum(1 for p in files if np.load(p).dtype.kind == "f" and not np.isfinite(np.load(p)).all())
            print(
                f"   iteration {it.name}: {len(files)} files, {bad} non-finite, first {first_nonfinite(it)}"
            )
        ir = (rank_dir / "graphs" / "ms_output_trace_code_graph_0.ir").read_text()
        for op in ("Log-op0", "Sqrt-op0"):
            at = ir.find(f"Net/{op})")
            if at >= 0:  # the frames follow the full name, innermost last
                frames = ir[at:].split("\n  %", 1)[0]
                lines = re.findall(r"ms210_dist_dumps\.py:(\d+),", frames)
                print(f"   {op}: source line {lines[-1] if lines else None}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"] and len(sys.argv) == 3 and sys.argv[2] in SCENARIOS:
        train(sys.argv[2])
    elif sys.argv[1:2] == ["make"] and len(sys.argv) == 4 and sys.argv[2] in SCENARIOS:
        make(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1:2] == ["facts"] and len(sys.argv) == 3:
        sys.exit(facts(Path(sys.argv[2])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
