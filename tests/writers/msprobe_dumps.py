"""Make REAL msprobe dump trees under tests/data/msprobe/ (runs ONLY under the producer venv).

This script imports torch and msprobe (mindstudio-probe); the project itself never does.
It is run by hand, e.g.

    <producer venv>/bin/python tests/writers/msprobe_dumps.py pt_mix_tensor
    <producer venv>/bin/python tests/writers/msprobe_dumps.py all

Each tree is produced in a fresh Python process (msprobe's PrecisionDebugger is a per-process
singleton), written straight by msprobe into tests/data/msprobe/<tree>/; nothing msprobe wrote
is renamed or edited afterwards. Every process joins a torch.distributed gloo group (world size 1,
2 or 4, CPU, loopback only), so msprobe names the rank directories itself (rank0/, rank1/) instead
of proc{pid}/.

Model Net: enc=Sequential(Linear(4,8)) -> act=ReLU -> fc2=Linear(8,2), MSE loss, SGD(lr=0.1),
3 steps, fixed seeds. Net.forward(x, offset=...) also returns torch.sqrt(h + offset), h being the
first layer's pre-activation: the offset is 100.0 (no NaN) except at step 1 (offset 0.0, on the
"nan rank"), where the
pre-activation has negative entries so Torch.sqrt's output holds NaN at step 1. Its mean is
added to the loss, so the NaN reaches the loss, the gradients and (through SGD) the weights:
step 2 is NaN throughout on that rank. Net.forward also returns torch.log(relu(h).detach() + offset),
which is -inf where relu(h) == 0 at step 1 only (not used in the loss, so no backward for it).
In the 2-rank tree only rank 1 takes offset 0.0, and
the detached loss is all_reduce'd (SUM), so rank 0 sees NaN only in Distributed.all_reduce.

4-rank trees (issue 37), `<producer venv>/bin/python tests/writers/msprobe_dumps.py multirank`:
TREES4 below, world size 4, model Net4 (enc=Linear(4,8) -> ReLU -> fc2=Linear(8,2), MSE, SGD).
Every step: Distributed.broadcast.0 (rank 0 -> all, finite), the forward, then per scenario the
p2p/gather below, loss.backward(), then Distributed.all_reduce.0..3 of enc.weight, enc.bias,
fc2.weight, fc2.bias (one call per parameter) each followed by Tensor.div_, then SGD.
The NaN is planted in Net4.forward at `root = torch.sqrt(h + offset)`, msprobe op
Torch.sqrt.0.forward, this file (recorded as /home/user/msprobe_demo/msprobe_dumps.py) line 246,
at step 1 only, by offset 0.0 on the nan rank (h has negative entries there):
- "allreduce" trees (pt_4ranks_allreduce_l1_statistics, pt_4ranks_allreduce_mix_tensor): NaN rank 2.
  Also Distributed.all_gather.0 of the detached loss (the NaN lands inside every rank's output
  list) and Distributed.send.0 rank 0 -> Distributed.recv.0 rank 1 (y, finite at step 1). The
  enc gradients all_reduce (0 and 1) spread it to every rank; step 2 starts from NaN enc weights
  on every rank: no new origin.
- "recv" trees (pt_4ranks_recv_l1_statistics, pt_4ranks_recv_mix_tensor): NaN rank 3, which sends
  root (NaN) to rank 1 (Distributed.send.0 / Distributed.recv.0); rank 1 adds its mean into its
  loss, so rank 1 first gets the NaN through the recv; ranks 0 and 2 get it later from the enc
  gradient all_reduce (rank 1's own gradients stay finite). No all_gather.
The mix/tensor trees dump step 1 only (3 steps would be ~3 MB of .pt files each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "tests" / "data" / "msprobe"

# tree name -> (msprobe config.json body without dump_path, world size, all_reduce?)
TREES = {
    "pt_mix_tensor": (
        {
            "task": "tensor",
            "level": "mix",
            "rank": [],
            "step": [0, 1, 2],
            "risk_level": "ALL",
            "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
        },
        1,
        False,
    ),
    "pt_l1_statistics_2ranks": (
        {
            "task": "statistics",
            "level": "L1",
            "rank": [],
            "step": [0, 1, 2],
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
        },
        2,
        True,
    ),
    "pt_md5": (
        {
            "task": "statistics",
            "level": "mix",
            "rank": [],
            "step": [0, 1, 2],
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "md5"},
        },
        1,
        False,
    ),
    "pt_L0_statistics": (
        {
            "task": "statistics",
            "level": "L0",
            "rank": [],
            "step": [0, 1, 2],
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
        },
        1,
        False,
    ),
}

NAN_STEP = 1
STEPS = 3


def _worker(rank: int, world: int, tree: str, cfg_path: str, port: int, all_reduce: bool) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    from msprobe.pytorch import PrecisionDebugger

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Sequential(torch.nn.Linear(4, 8))  # nesting: Module.enc.0.Linear
            self.act = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(8, 2)

        def forward(self, x, offset=100.0):
            h = self.enc(x)
            y = self.fc2(self.act(h))
            root = torch.sqrt(h + offset)  # NaN where h + offset < 0
            logs = torch.log(self.act(h).detach() + offset)  # -inf where relu(h) + offset == 0; not in loss
            return y, root, logs

    torch.manual_seed(1234)  # same weights on every rank
    torch.use_deterministic_algorithms(True)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    nan_rank = world - 1

    debugger = PrecisionDebugger(config_path=cfg_path)
    for step in range(STEPS):
        x = torch.randn(3, 4, generator=gen)
        target = torch.randn(3, 2, generator=gen)
        debugger.start(model=model)
        opt.zero_grad()
        offset = 0.0 if (step == NAN_STEP and rank == nan_rank) else 100.0
        y, aux, _ = model(x, offset=offset)  # a module kwarg
        both = torch.cat([aux, aux * 0.5], dim=0)  # a list argument + an int kwarg
        loss = torch.nn.functional.mse_loss(y, target=target) + both.mean() * 0.01  # a tensor kwarg
        if all_reduce:
            red = loss.detach().clone()
            dist.all_reduce(red)
        loss.backward()
        opt.step()
        debugger.stop()
        debugger.step()
    dist.destroy_process_group()


def _run_tree(tree: str) -> None:
    import torch.multiprocessing as mp

    cfg, world, all_reduce = TREES[tree]
    out = ROOT / tree
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as td:
        cfg = dict(cfg, dump_path=str(out))
        cfg_path = os.path.join(td, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        port = 29500 + sorted(TREES).index(tree)
        mp.spawn(_worker, args=(world, tree, cfg_path, port, all_reduce), nprocs=world, join=True)


# ---- 4-rank trees (issue 37: which rank started a NaN, through which collective) -------------------
# tree name -> (msprobe config.json body without dump_path, scenario). Both scenarios run 4 ranks.
TREES4 = {
    "pt_4ranks_allreduce_l1_statistics": (
        {
            "task": "statistics",
            "level": "L1",
            "rank": [],
            "step": [0, 1, 2],
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
        },
        "allreduce",
    ),
    "pt_4ranks_allreduce_mix_tensor": (
        {
            "task": "tensor",
            "level": "mix",
            "rank": [],
            "step": [1],
            "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
        },
        "allreduce",
    ),
    "pt_4ranks_recv_l1_statistics": (
        {
            "task": "statistics",
            "level": "L1",
            "rank": [],
            "step": [0, 1, 2],
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
        },
        "recv",
    ),
    "pt_4ranks_recv_mix_tensor": (
        {
            "task": "tensor",
            "level": "mix",
            "rank": [],
            "step": [1],
            "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
        },
        "recv",
    ),
}
WORLD4 = 4
NAN_RANK4 = {"allreduce": 2, "recv": 3}  # the rank whose offset is 0.0 at step NAN_STEP


def _worker4(rank: int, world: int, scenario: str, cfg_path: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    from msprobe.pytorch import PrecisionDebugger

    class Net4(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(4, 8)
            self.act = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(8, 2)

        def forward(self, x, offset):
            h = self.enc(x)
            y = self.fc2(self.act(h))
            root = torch.sqrt(h + offset)  # the planted NaN: offset 0.0 and h < 0 (one rank, step 1)
            return y, root

    torch.manual_seed(1234)  # same weights on every rank
    torch.use_deterministic_algorithms(True)
    model = Net4()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    nan_rank = NAN_RANK4[scenario]

    debugger = PrecisionDebugger(config_path=cfg_path)
    for step in range(STEPS):
        x = torch.randn(3, 4, generator=gen)
        target = torch.randn(3, 2, generator=gen)
        debugger.start(model=model)
        opt.zero_grad()
        shift = torch.full((2,), 0.1 * step) if rank == 0 else torch.zeros(2)
        dist.broadcast(shift, src=0)  # directed, rank 0 -> all; always finite
        offset = 0.0 if (step == NAN_STEP and rank == nan_rank) else 100.0
        y, root = model(x, offset)
        loss = torch.nn.functional.mse_loss(y + shift, target) + root.mean() * 0.01
        if scenario == "allreduce":
            gathered = [torch.zeros(()) for _ in range(world)]
            dist.all_gather(gathered, loss.detach())  # undirected; the NaN sits inside the output list
            if rank == 0:
                dist.send(y.detach(), dst=1)  # directed 0 -> 1, finite at step 1
            elif rank == 1:
                got = torch.zeros(3, 2)
                dist.recv(got, src=0)
        elif rank == nan_rank:
            dist.send(root.detach(), dst=1)  # directed 3 -> 1: NaN at step 1
        elif rank == 1:
            got = torch.zeros(3, 8)
            dist.recv(got, src=nan_rank)
            loss = loss + got.mean() * 0.01  # rank 1 takes the NaN in through the recv only
        loss.backward()
        for p in model.parameters():  # gradient all_reduce, one call per parameter, after the p2p
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()
        debugger.stop()
        debugger.step()
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_tree4(tree: str) -> None:
    import torch.multiprocessing as mp

    cfg, scenario = TREES4[tree]
    out = ROOT / tree
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as td:
        cfg = dict(cfg, dump_path=str(out))
        cfg_path = os.path.join(td, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        mp.spawn(_worker4, args=(WORLD4, scenario, cfg_path, _free_port()), nprocs=WORLD4, join=True)


def _overflow_check(tree: str) -> None:
    """Run msprobe's own analysis on every step of a tree. Its json goes to
    overflow_check/<tree>/step{N}.json, outside the tree, so the dump layout stays as msprobe
    wrote it. No file for a step: msprobe found nothing there."""
    cli = str(Path(sys.executable).with_name("msprobe"))
    dest = ROOT / "overflow_check" / tree
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for step_dir in sorted((ROOT / tree).glob("step*")):
        with tempfile.TemporaryDirectory() as td:
            out = Path(td) / "out"
            subprocess.run([cli, "overflow_check", "-i", str(step_dir), "-o", str(out)], check=True)
            found = sorted(out.glob("anomaly_analyze_*.json")) if out.exists() else []
            if found:
                shutil.copyfile(found[-1], dest / f"{step_dir.name}.json")
    # its answer also depends on Python's string hashing (it walks sets of node ids): a fixed seed
    env = dict(os.environ, PYTHONHASHSEED="0")
    subprocess.run([sys.executable, __file__, "rank_orders", tree], check=True, env=env)


def _overflow_check_orders(tree: str, dest: Path) -> None:
    """msprobe's answer depends on the order os.listdir gives the rank dirs (its search takes the
    first rank's queue as the group seed): rerun its OverFlowCheck under all 24 orders and record
    {step: [{"names": {rank_R: [op_name]}, "orders": ["0123", ...]}]}."""
    import itertools

    from msprobe.overflow_check import analyzer
    from msprobe.overflow_check.utils import FileCache

    listdir = os.listdir
    result = {}
    try:
        for step_dir in sorted((ROOT / tree).glob("step*")):
            answers: dict[str, list[str]] = {}
            for perm in itertools.permutations(range(WORLD4)):
                names = [f"rank{r}" for r in perm]
                analyzer.os.listdir = lambda p, names=names, step=str(step_dir): (
                    names if str(p) == step else listdir(p)
                )
                FileCache._instance = None  # a fresh cache per run (it is a singleton)
                with tempfile.TemporaryDirectory() as td:
                    analyzer.OverFlowCheck(str(step_dir), os.path.join(td, "o")).analyze()
                    found = sorted(Path(td, "o").glob("anomaly_analyze_*.json"))
                    got = json.loads(found[0].read_text()) if found else {}
                key = json.dumps({r: [n["op_name"] for n in v] for r, v in got.items()}, sort_keys=True)
                answers.setdefault(key, []).append("".join(map(str, perm)))
            result[step_dir.name] = [{"names": json.loads(k), "orders": v} for k, v in answers.items()]
    finally:
        analyzer.os.listdir = listdir
    dest.write_text(json.dumps(result, indent=1) + "\n")


def _anonymise() -> None:
    import sysconfig

    forms = str(Path(__file__).with_name("msprobe_forms.py"))
    site = sysconfig.get_paths()["purelib"]
    stdlib = sysconfig.get_paths()["stdlib"]
    here = str(Path(__file__).resolve().parent)
    subprocess.run([sys.executable, forms, "anonymise", site, stdlib, here, str(ROOT)], check=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["rank_orders"]:  # run by _overflow_check, with PYTHONHASHSEED=0
        _overflow_check_orders(argv[1], ROOT / "overflow_check" / argv[1] / "rank_orders.json")
        return 0
    if argv[:1] == ["multirank"]:  # the 4-rank trees, msprobe's overflow_check on each step, then anonymise
        only = argv[1:]
        for name in [a for a in TREES4 if not only or a in only]:
            subprocess.run([sys.executable, __file__, name], check=True)
            _overflow_check(name)
        _anonymise()
        return 0
    names = list(TREES) if argv == ["all"] else argv
    for name in names:
        if name not in TREES and name not in TREES4:
            print(
                f"unknown tree {name}; choose from {sorted(TREES | TREES4)}, 'all' or 'multirank'",
                file=sys.stderr,
            )
            return 2
    if len(names) > 1:
        for name in names:  # a fresh interpreter per tree: PrecisionDebugger is a singleton
            subprocess.run([sys.executable, __file__, name], check=True)
        # then the derived forms, and no path of this machine in what is committed
        forms = str(Path(__file__).with_name("msprobe_forms.py"))
        for form in ("oldstack", "pkl"):
            subprocess.run([sys.executable, forms, form], check=True)
        _anonymise()
        return 0
    if names[0] in TREES4:
        _run_tree4(names[0])
    else:
        _run_tree(names[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
