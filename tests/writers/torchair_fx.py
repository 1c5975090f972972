"""Make the FX side of the committed TorchAir test run (tests/data/ge/torchair/msprobe_fx_dump/) with
real PyTorch: a tiny MLP is traced into aten ops with `make_fx`, run node by node with
`torch.fx.Interpreter`, and every call_function node's tensor inputs and outputs are saved the way
msprobe's FX eager dump names them (msprobe-cann-formats.md §2.1):

    msprobe_fx_dump/worldsize1_global_rank0/{model_name}/{token}/
        {node}-{aten op}.{INPUT|OUTPUT}.{idx}.{timestamp}.npy

RUNS ONLY UNDER THE PRODUCER VENV (torch 2.13 CPU), never in the project venv or CI:

    <producer venv>/bin/python tests/writers/torchair_fx.py [tests/data/ge/torchair]

then `python -m tests.writers.ge_tree` (project venv) writes the GE side from these npy files. torch
is imported inside `main` only, so the project's tests can import FX_GRAPH and the constants below.

Decisions where the reference is silent: INPUT indices count the node's tensor arguments in
positional order (non-tensor arguments get no index); tokens are 0-based (the newer layout); the
timestamp is `YYYYMMDDHHMMSS` + 6 digits of microseconds, 20 digits like the reference's example,
fixed here (1 µs apart, in execution order) so the files are reproducible.
"""

from __future__ import annotations

import sys
from pathlib import Path

MODEL_NAME = "graph_1"  # TorchAir names the GE graph of the first compiled FX graph graph_1
RANK_DIR = "worldsize1_global_rank0"
TOKENS = (0, 1)  # two calls of the compiled model
SEED = 20250314
FX_TIME_BASE = 20250314101500_000000  # YYYYMMDDHHMMSS * 10**6 + µs
PLACEHOLDERS = ("x_1", "w1_1", "b1_1", "w2_1", "b2_1")
SHAPES = {"x_1": (2, 4), "w1_1": (8, 4), "b1_1": (8,), "w2_1": (3, 8), "b2_1": (3,)}
# the graph make_fx gives for `mlp` (checked in main): (node name, target, argument node names)
FX_GRAPH = (
    ("t", "aten.t.default", ("w1_1",)),
    ("addmm", "aten.addmm.default", ("b1_1", "x_1", "t")),
    ("relu", "aten.relu.default", ("addmm",)),
    ("t_1", "aten.t.default", ("w2_1",)),
    ("addmm_1", "aten.addmm.default", ("b2_1", "relu", "t_1")),
    ("log", "aten.log.default", ("addmm_1",)),
)


def fx_file_name(node: str, target: str, io: str, idx: int, timestamp: int) -> str:
    return f"{node}-{target}.{io}.{idx}.{timestamp}.npy"


def main(root: Path) -> None:
    import shutil

    import numpy as np
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    def mlp(x, w1, b1, w2, b2):
        h = torch.relu(torch.nn.functional.linear(x, w1, b1))
        return torch.log(torch.nn.functional.linear(h, w2, b2))  # log of a negative logit: NaN

    torch.manual_seed(SEED)
    weights = [torch.randn(SHAPES[n]) for n in PLACEHOLDERS[1:]]
    calls = [[torch.randn(SHAPES["x_1"]), *weights] for _ in TOKENS]
    gm = make_fx(mlp)(*calls[0])
    got = tuple(
        (n.name, str(n.target), tuple(str(a) for a in n.args))
        for n in gm.graph.nodes
        if n.op == "call_function"
    )
    if got != FX_GRAPH or [n.name for n in gm.graph.nodes if n.op == "placeholder"] != list(PLACEHOLDERS):
        raise SystemExit(f"make_fx gave another graph than FX_GRAPH: {got}")

    out_root = root / "msprobe_fx_dump" / RANK_DIR / MODEL_NAME
    shutil.rmtree(root / "msprobe_fx_dump", ignore_errors=True)
    clock = FX_TIME_BASE

    class Dumper(torch.fx.Interpreter):
        def __init__(self, module, out_dir: Path):
            super().__init__(module)
            self.out_dir = out_dir

        def run_node(self, n):
            nonlocal clock
            result = super().run_node(n)
            if n.op != "call_function":
                return result
            args = [self.env[a] for a in n.args if isinstance(a, torch.fx.Node)]
            ins = [a for a in args if isinstance(a, torch.Tensor)]
            outs = list(result) if isinstance(result, (tuple, list)) else [result]
            for io, tensors in (("INPUT", ins), ("OUTPUT", outs)):
                for i, t in enumerate(tensors):
                    clock += 1
                    name = fx_file_name(n.name, str(n.target), io, i, clock)
                    np.save(self.out_dir / name, t.detach().numpy())
            return result

    for token, args in zip(TOKENS, calls, strict=True):
        out_dir = out_root / str(token)
        out_dir.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            Dumper(gm, out_dir).run(*args)
    print(f"{out_root}: {sum(1 for _ in out_root.rglob('*.npy'))} npy files")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data" / "ge" / "torchair")
