"""Two REAL MindSpore 2.10.0 CPU runs for run-vs-run comparison: `base` (run A) and `cast` (run B).

Both runs train the same net on the same saved inputs with the same seeds; run B differs in ONE
place: the activation going into `fc2` is cast to float16 and back to float32 (`ops.Cast` twice).
Everything dumped before that point is bit-identical; from `fc2` on, values differ slightly.

Runs ONLY under the producer venv (it imports mindspore; the project never does):

    <producer venv>/bin/python tests/data/ms210/compare/make_runs.py          # make + verify
    <any python>/bin/python    tests/data/ms210/compare/make_runs.py verify   # verify only

What `make` does (no machine path ends up in a committed file, and no file MindSpore wrote is
edited apart from file modes):
  1. writes the fixed inputs `inputs/x.npy` (float32 [2 steps, 2, 4]) and `inputs/y.npy`
     (int32 [2, 2]) from np.random.seed(0), next to this script;
  2. copies this script and the inputs to the neutral folder DEMO=/home/user/compare_demo, and
     makes DEMO/venv a symlink to the producer venv (sys.prefix). The runs use DEMO/venv/bin/python,
     so Python itself names its install path /home/user/compare_demo/venv/lib/python3.11/...:
     the source frames MindSpore records (graphs/*.ir and the protobuf graphs/*.pb) then already
     hold neutral paths, and the .pb files need no rewriting (a text replace would break their
     length-prefixed strings);
  3. for each variant writes DEMO/<variant>/dump.json (path DEMO/<variant>) and runs
     `MINDSPORE_DUMP_CONFIG=DEMO/<variant>/dump.json DEMO/venv/bin/python DEMO/make_runs.py train <variant>`
     from DEMO/<variant>;
  4. copies DEMO/<variant>/rank_0 to <variant>/dump/rank_0 here, and dump.json to <variant>/dump.json,
     making files 0644 and directories 0755 (MindSpore writes 0400/0700);
  5. fails if any text file written here still holds a prefix of this machine (the real venv,
     the base Python, the repository, the home and temp folders);
  6. verify (below).
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

HERE = Path(__file__).resolve().parent
DEMO = Path("/home/user/compare_demo")
VARIANTS = ("base", "cast")
STEPS = 2

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
def train(variant: str) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(0)
    np.random.seed(0)
    cast_fc2_input = variant == "cast"

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(4, 8)
            self.relu = nn.ReLU()
            self.cast = ops.Cast()
            self.fc2 = nn.Dense(8, 3)

        def construct(self, x):
            x = self.relu(self.fc1(x))
            if cast_fc2_input:  # a Python constant: resolved at compile time, no control flow
                x = self.cast(x, ms.float16)  # run B only: round the activation to float16
                x = self.cast(x, ms.float32)  # and back
            x = self.fc2(x)
            return x

    net = Net()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    model = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    model.set_train()
    xs = np.load("../inputs/x.npy")
    ys = np.load("../inputs/y.npy")
    for step in range(STEPS):
        print(step, model(ms.Tensor(xs[step]), ms.Tensor(ys[step])))


# ----------------------------------------------------------------------------- make
def make() -> None:
    import numpy as np

    np.random.seed(0)
    inputs = HERE / "inputs"
    inputs.mkdir(exist_ok=True)
    np.save(inputs / "x.npy", np.random.randn(STEPS, 2, 4).astype(np.float32))
    np.save(inputs / "y.npy", np.random.randint(0, 3, (STEPS, 2)).astype(np.int32))

    if DEMO.exists():
        shutil.rmtree(DEMO)
    DEMO.mkdir(parents=True)
    shutil.copy2(__file__, DEMO / "make_runs.py")
    shutil.copytree(inputs, DEMO / "inputs")
    real_venv = Path(sys.prefix)
    (DEMO / "venv").symlink_to(real_venv, target_is_directory=True)
    py = DEMO / "venv" / "bin" / "python"

    for variant in VARIANTS:
        run_dir = DEMO / variant
        run_dir.mkdir()
        cfg = json.loads(json.dumps(DUMP_JSON))
        cfg["common_dump_settings"]["path"] = str(run_dir)
        (run_dir / "dump.json").write_text(json.dumps(cfg, indent=2) + "\n")
        env = dict(os.environ, MINDSPORE_DUMP_CONFIG=str(run_dir / "dump.json"), GLOG_v="2")
        subprocess.run(
            [str(py), str(DEMO / "make_runs.py"), "train", variant], cwd=run_dir, env=env, check=True
        )

        out = HERE / variant
        if out.exists():
            shutil.rmtree(out)
        (out / "dump").mkdir(parents=True)
        shutil.copy2(run_dir / "dump.json", out / "dump.json")
        shutil.copytree(run_dir / "rank_0", out / "dump" / "rank_0")
        for p in [out, *out.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)

    machine = {real_venv, real_venv.resolve(), Path(sys.base_prefix), HERE.parents[3], Path.home()}
    bad = [str(p).encode() for p in machine] + [tempfile.gettempdir().encode()]
    for p in sorted(q for v in VARIANTS for q in (HERE / v).rglob("*")):
        if p.is_file() and p.suffix != ".npy":
            data = p.read_bytes()
            for b in bad:
                if b in data:
                    raise SystemExit(f"machine path {b!r} left in {p}")


# ----------------------------------------------------------------------------- verify
_NAME = re.compile(r"^(?P<type>[^.]+)\.(?P<op>.+)\.0\.0\.(?P<ts>\d+)\.(?P<io>input|output)\.(?P<slot>\d+)\.")


def _files(variant: str, it: int) -> dict[tuple, Path]:
    """(op type, sanitised op name, io, slot) -> file, for one iteration of one run."""
    d = HERE / variant / "dump" / "rank_0" / "Net" / "0" / str(it)
    out = {}
    for p in d.glob("*.npy"):
        m = _NAME.match(p.name)
        if m:
            key = (m["type"], m["op"], m["io"], int(m["slot"]))
            assert key not in out, p
            out[key] = (int(m["ts"]), p)
    return out


def _order(variant: str) -> list[str]:
    csv = HERE / variant / "dump" / "rank_0" / "execution_order" / "ms_execution_order_graph_0.csv"
    return [line for line in csv.read_text().split("\n")[1:] if line]


def verify() -> int:
    import numpy as np

    order_a, order_b = _order("base"), _order("cast")
    only_a = [n for n in order_a if n not in order_b]
    only_b = [n for n in order_b if n not in order_a]
    print("kernels: base", len(order_a), "cast", len(order_b))
    print("only in base:", only_a)
    print("only in cast:", only_b)
    sanit = {n.replace("/", "_"): n for n in order_a + order_b}
    ok = True
    for it in range(STEPS):
        fa, fb = _files("base", it), _files("cast", it)
        common = sorted(set(fa) & set(fb), key=lambda k: fb[k][0])  # run B's timestamp order
        print(f"\niteration {it}: files base {len(fa)} cast {len(fb)} common {len(common)}")
        print("  files only in base:", sorted(k[1] + f".{k[2]}.{k[3]}" for k in set(fa) - set(fb)))
        print("  files only in cast:", sorted(k[1] + f".{k[2]}.{k[3]}" for k in set(fb) - set(fa)))
        # kernels in run B's execution order; "before the cast" = before the first kernel run A lacks
        first_new = next(i for i, n in enumerate(order_b) if n not in order_a)
        before = {n.replace("/", "_") for n in order_b[:first_new]}
        first_diff = None
        n_same = n_diff = 0
        for k in common:
            same = fa[k][1].read_bytes() == fb[k][1].read_bytes()
            n_same += same
            n_diff += not same
            if it == 0 and k[1] in before and not same:
                print("  NOT IDENTICAL before the cast:", k)
                ok = False
            if not same and first_diff is None and k[0] != "Parameter":
                first_diff = k
        print(f"  byte-identical {n_same}, different {n_diff}")
        if it == 0 and n_diff == 0:
            print("  nothing differs after the cast")
            ok = False
        print(
            "  kernels before the cast, all files identical:",
            all(fa[k][1].read_bytes() == fb[k][1].read_bytes() for k in common if k[1] in before),
            sorted(before),
        )
        if first_diff:
            a = np.load(fa[first_diff][1])
            b = np.load(fb[first_diff][1])
            print(
                "  first differing kernel file (B timestamp order):",
                first_diff,
                "->",
                sanit.get(first_diff[1]),
                f"max |a-b| = {np.abs(a - b).max():.3g}",
            )
        # first kernel (in execution order) with a differing OUTPUT
        for name in order_b:
            s = name.replace("/", "_")
            outs = [k for k in common if k[1] == s and k[2] == "output"]
            if any(fa[k][1].read_bytes() != fb[k][1].read_bytes() for k in outs):
                print("  first common kernel in execution order whose output differs:", name)
                break
    if not only_b or only_a:
        ok = False  # run B must have kernels run A lacks (the Casts), and not the other way round
    print("\nOK" if ok else "\nFAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"]:
        train(sys.argv[2])
    elif sys.argv[1:] == ["verify"]:
        sys.exit(verify())
    else:
        make()
        sys.exit(verify())
