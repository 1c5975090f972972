"""A REAL MindSpore 2.10.0 CPU dump with float16 and bfloat16 tensors (issue 32): `tests/data/ms210/lowp/`.

    <producer venv>/bin/python tests/writers/ms210_lowp_dumps.py make OUT_DIR   # run + copy + check
    <any python with numpy>   tests/writers/ms210_lowp_dumps.py facts OUT_DIR  # what the README records

`make` runs ONLY under the producer venv (it imports mindspore; the project never does). OUT_DIR is
the folder to fill (tests/data/ms210/lowp); it receives `dump.json` (the configuration the run used)
and `dump/rank_0/` (the tree MindSpore wrote). No path of the machine that ran it ends up in a
committed file, and no file MindSpore wrote is edited apart from file modes, in the way of
tests/data/ms210/compare/make_runs.py:
  1. copies this script to the neutral folder DEMO=/home/user/dumps/lowp and makes DEMO/venv a
     symlink to the producer venv (sys.prefix); the run uses DEMO/venv/bin/python, so Python names
     its install path /home/user/dumps/lowp/venv/lib/python3.11/... and the source frames MindSpore
     records (graphs/*.ir and the protobuf graphs/*.pb) already hold neutral paths (a text replace
     would break the .pb's length-prefixed strings);
  2. writes DEMO/dump.json ("path": DEMO) and runs
     `MINDSPORE_DUMP_CONFIG=DEMO/dump.json DEMO/venv/bin/python DEMO/ms210_lowp_dumps.py train` in DEMO;
  3. copies DEMO/rank_0 to OUT_DIR/dump/rank_0 and DEMO/dump.json to OUT_DIR/dump.json, files 0644
     and directories 0755 (MindSpore writes 0400/0700);
  4. fails if any non-.npy file copied still holds a prefix of this machine.

The net (GRAPH mode, CPU, `TrainOneStepCell` + `Momentum`, 3 steps, seeds 0), see `train` below:
  - a float16 layer: `MatMul(cast(x, f16), cast(w16, f16))` + `cast(b16, f16)`;
  - a bfloat16 layer: the float16 activation cast to bfloat16, times `cast(wbf, bf16)` plus
    `cast(bbf, bf16)` (element-wise: MatMul, BiasAdd and ReLU have no bfloat16 CPU kernel in 2.10);
  - then `* s * s` with `s = cast(scale, bf16)`: scale is all ones except at STEP 2, where row 0 is
    1e30, so row 0 of the product overflows bfloat16 (max 3.39e38) to +-Inf;
  - then `* cast(gate, bf16)`, where gate is 1 except gate[0, 0] = gate[1, 0] = 0: Inf * 0 = NaN;
  - a float32 head `nn.Dense(8, 3)` on the activation cast back to float32, softmax cross-entropy.
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

DEMO = Path("/home/user/dumps/lowp")
STEPS = 3
OVERFLOW_STEP = 2

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
def train() -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import Parameter, Tensor, nn, ops

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(0)
    np.random.seed(0)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w16 = Parameter(Tensor(np.random.randn(8, 4).astype(np.float32) * 0.5), name="w16")
            self.b16 = Parameter(Tensor(np.full((8,), 0.1, np.float32)), name="b16")
            self.wbf = Parameter(Tensor(np.linspace(0.5, 1.5, 8).astype(np.float32)), name="wbf")
            self.bbf = Parameter(Tensor(np.full((8,), -0.05, np.float32)), name="bbf")
            self.cast = ops.Cast()
            self.matmul = ops.MatMul(transpose_b=True)
            # broadcast in float32: the gradient's ReduceSum has no float16/bfloat16 CPU kernel
            self.bcast = ops.BroadcastTo((2, 8))
            self.head = nn.Dense(8, 3)

        def construct(self, x, scale, gate):
            x16 = self.cast(x, ms.float16)
            w16 = self.cast(self.w16, ms.float16)
            h = self.matmul(x16, w16)  # the float16 layer: MatMul ...
            h = h + self.cast(self.bcast(self.b16), ms.float16)  # ... and Add
            hb = self.cast(h, ms.bfloat16)
            hb = hb * self.cast(self.bcast(self.wbf), ms.bfloat16)  # the bfloat16 layer: Mul ...
            hb = hb + self.cast(self.bcast(self.bbf), ms.bfloat16)  # ... and Add
            s = self.cast(scale, ms.bfloat16)
            hb = hb * s
            hb = hb * s  # step 2: row 0 of scale is 1e30, |hb| * 1e60 overflows bfloat16 -> +-Inf
            hb = hb * self.cast(gate, ms.bfloat16)  # gate[:, 0] == 0: Inf * 0 = NaN
            return self.head(self.cast(hb, ms.float32))

    class WithLoss(nn.Cell):
        def __init__(self, net, loss_fn):
            super().__init__(auto_prefix=False)
            self._backbone = net
            self._loss_fn = loss_fn

        def construct(self, x, scale, gate, label):
            return self._loss_fn(self._backbone(x, scale, gate), label)

    net = Net()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    model = nn.TrainOneStepCell(WithLoss(net, loss_fn), opt)
    model.set_train()
    gate = np.ones((2, 8), np.float32)
    gate[:, 0] = 0.0
    for step in range(STEPS):
        x = np.random.randn(2, 4).astype(np.float32)
        scale = np.ones((2, 8), np.float32)
        if step == OVERFLOW_STEP:
            scale[0] = 1e30
        y = np.random.randint(0, 3, (2,)).astype(np.int32)
        print(step, model(Tensor(x), Tensor(scale), Tensor(gate), Tensor(y)))


# ----------------------------------------------------------------------------- make
def make(out: Path) -> None:
    out = out.resolve()
    if DEMO.exists():
        shutil.rmtree(DEMO)
    DEMO.mkdir(parents=True)
    shutil.copy2(__file__, DEMO / "ms210_lowp_dumps.py")
    real_venv = Path(sys.prefix)
    (DEMO / "venv").symlink_to(real_venv, target_is_directory=True)
    py = DEMO / "venv" / "bin" / "python"

    cfg = json.loads(json.dumps(DUMP_JSON))
    cfg["common_dump_settings"]["path"] = str(DEMO)
    (DEMO / "dump.json").write_text(json.dumps(cfg, indent=2) + "\n")
    env = dict(os.environ, MINDSPORE_DUMP_CONFIG=str(DEMO / "dump.json"), GLOG_v="2")
    subprocess.run([str(py), str(DEMO / "ms210_lowp_dumps.py"), "train"], cwd=DEMO, env=env, check=True)

    if (out / "dump").exists():
        shutil.rmtree(out / "dump")
    (out / "dump").mkdir(parents=True)
    shutil.copy2(DEMO / "dump.json", out / "dump.json")
    shutil.copytree(DEMO / "rank_0", out / "dump" / "rank_0")
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
_NAME = re.compile(
    r"^(?P<type>[^.]+)\.(?P<op>.+)\.0\.0\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)\.(?P<fmt>[^.]+)\.(?P<dt>[^.]+)\.npy$"
)


def npy_header(path: Path) -> tuple[dict, int]:
    """The raw npy header dict (parsed with ast, not numpy's dtype check) and the data offset."""
    import ast

    raw = path.read_bytes()
    assert raw[:6] == b"\x93NUMPY", path
    major = raw[6]
    if major == 1:
        hlen, start = int.from_bytes(raw[8:10], "little"), 10
    else:
        hlen, start = int.from_bytes(raw[8:12], "little"), 12
    header = ast.literal_eval(raw[start : start + hlen].decode("latin1"))
    return header, start + hlen


def bf16_to_f32(raw: bytes):
    import numpy as np

    u16 = np.frombuffer(raw, dtype="<u2")
    return (u16.astype(np.uint32) << 16).view(np.float32)


def _ir_nodes(ir_text: str, script: str) -> dict[str, dict]:
    """Full name -> {op, abstract/device output dtypes, innermost script line} from a kernel-graph .ir."""
    nodes: dict[str, dict] = {}
    cur: dict | None = None
    for line in ir_text.split("\n"):
        m = re.match(r"^  %\d+\([^)]*\) = (?:PrimFunc_)?(\w+)\(", line)
        if m:
            cur = {"op": m[1], "types": [], "line": None}
            continue
        if cur is None:
            continue
        if line.startswith("      : (") and "->" in line:
            cur["types"].append(line.split("->", 1)[1].strip())
        elif line.startswith("      # Fullname with scope: ("):
            nodes[line.split("(", 1)[1].rstrip(")")] = cur
        elif line.startswith("      # In file ") and script in line:
            cur["line"] = int(re.search(r":(\d+)[,~]", line.split(script, 1)[1])[1])
    for node in nodes.values():
        t = node["types"]
        node["abstract"] = re.findall(r"Tensor\[(\w+)\]", t[0]) if t else []
        node["device"] = re.findall(r"<(\w+)xDefaultFormat", t[1]) if len(t) > 1 else []
    return nodes


def facts(out: Path) -> int:
    """Print what the README records: npy headers, bfloat16 NaN/Inf counts (computed from the raw
    2-byte values), float16-named files whose bytes are not float16, the IR's device dtypes, and
    the op names of the files against the execution order."""
    import numpy as np

    rank = out / "dump" / "rank_0"
    ir = (rank / "graphs" / "ms_output_trace_code_graph_0.ir").read_text()
    nodes = _ir_nodes(ir, "ms210_lowp_dumps.py")
    csv = (rank / "execution_order" / "ms_execution_order_graph_0.csv").read_text()
    order = [n for n in csv.split("\n")[1:] if n]
    print("== kernels in execution order: output dtype (abstract / device), source line of the script")
    for name in order:
        node = nodes[name]
        odd = "  <-- differ" if node["abstract"] != node["device"] else ""
        print(f"  {name}: {node['abstract']} / {node['device']}, line {node['line']}{odd}")
    sanitised = {n.replace("/", "_") for n in order}
    for it_dir in sorted((rank / "Net" / "0").iterdir(), key=lambda p: int(p.name)):
        files = sorted(it_dir.glob("*.npy"), key=lambda q: (int(_NAME.match(q.name)["ts"]), q.name))
        print(f"== iteration {it_dir.name}: {len(files)} files")
        ops = {_NAME.match(p.name)["op"] for p in files if _NAME.match(p.name)["type"] != "Parameter"}
        print(f"  file op names not in the execution order: {sorted(ops - sanitised)}")
        print(f"  execution-order names without a file: {sorted(sanitised - ops)}")
        descrs: dict[str, set] = {}
        for p in files:
            m = _NAME.match(p.name)
            header, off = npy_header(p)
            descrs.setdefault(m["dt"], set()).add(header["descr"])
            data = p.read_bytes()[off:]
            n = int(np.prod(header["shape"])) if header["shape"] else 1
            tag = f"{m['type']}.{m['op']}.{m['io']}.{m['slot']} {tuple(header['shape'])}"
            if m["dt"] == "BFloat16":
                v = bf16_to_f32(data)
                nan, pinf, ninf = int(np.isnan(v).sum()), int(np.isposinf(v).sum()), int(np.isneginf(v).sum())
                if nan or pinf or ninf or m["io"] == "output":
                    print(f"  bf16 {tag}: {len(data)} bytes, NaN {nan}, +Inf {pinf}, -Inf {ninf}")
            elif len(data) != n * np.dtype(header["descr"]).itemsize:
                declared = np.frombuffer(data, dtype=header["descr"], count=n)  # what np.load returns
                descr = header["descr"]
                print(f"  SIZE MISMATCH {m['dt']} {tag}: descr {descr!r}, {len(data)} bytes for {n} elements")
                print(
                    f"    read as declared (np.load): NaN {int(np.isnan(declared).sum())},"
                    f" Inf {int(np.isinf(declared).sum())}, max|x| {np.nanmax(np.abs(declared)):.4g}"
                )
                if len(data) == 4 * n:
                    f32 = np.frombuffer(data, dtype="<f4", count=n)
                    nan32, max32 = int(np.isnan(f32).sum()), np.nanmax(np.abs(f32))
                    print(f"    read as float32: NaN {nan32}, max|x| {max32:.4g}")
        print(f"  npy descr per file-name dtype token: { {k: sorted(v) for k, v in sorted(descrs.items())} }")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"]:
        train()
    elif sys.argv[1:2] == ["make"] and len(sys.argv) == 3:
        make(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["facts"] and len(sys.argv) == 3:
        sys.exit(facts(Path(sys.argv[2])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
