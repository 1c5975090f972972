"""Make two REAL msprobe statistics dumps for run-vs-run comparison (runs ONLY under the producer venv).

    <producer venv>/bin/python tests/writers/msprobe_compare_dumps.py

writes tests/data/msprobe/compare_fp32/ (run A) and tests/data/msprobe/compare_fp16/ (run B), and,
if the msprobe CLI runs, tests/data/msprobe/compare_msprobe_result.csv. See
tests/data/msprobe/COMPARE.md for what they hold.

Both runs: the same tiny MLP (fc1 = Linear(4,8) -> ReLU -> fc2 = Linear(8,3) -> Linear head(3,2)),
MSE loss, SGD(lr=0.1), 2 steps, torch.manual_seed(1234), inputs from a generator seeded 100, msprobe
task "statistics", level "mix", risk_level "ALL". Run B differs in ONE place: fc2 runs in float16.
Its weights are the fp32 run's initial weights converted with `.half()`, its input is cast with
`.half()` and its output cast back with `.float()`.

How (as tests/writers/msprobe_dumps.py, plus a neutral folder for the script):
  1. this script copies itself to DEMO=/home/user/compare_demo/ and runs each variant there in a
     fresh interpreter (PrecisionDebugger is a per-process singleton), as
     `<producer python> DEMO/msprobe_compare_dumps.py run <variant>`, with dump_path
     DEMO/msprobe/compare_<variant>. Each process joins a one-rank gloo group, so msprobe names the
     rank dir rank0/. The stack frames of the script therefore read
     /home/user/compare_demo/msprobe_compare_dumps.py already;
  2. the trees are copied here, and `msprobe_forms.anonymise` (imported, unchanged) rewrites the
     two remaining machine prefixes in every .json: site-packages -> /opt/venv/lib/python3.11/site-packages
     and the standard library -> /usr/lib/python3.11, as in the other msprobe trees;
  3. `msprobe compare -tp <fp16 dump.json> -gp <fp32 dump.json> -o <out>` (26.2 has no `-f`) runs on the
     two step0 dump.json files of the committed (anonymised) trees; its one CSV is copied to
     compare_msprobe_result.csv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO = Path("/home/user/compare_demo")
VARIANTS = ("fp32", "fp16")
STEPS = 2
CONFIG = {
    "task": "statistics",
    "level": "mix",
    "rank": [],
    "step": [0, 1],
    "risk_level": "ALL",
    "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
}


def run(variant: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(29610 + VARIANTS.index(variant))
    dist.init_process_group("gloo", rank=0, world_size=1)

    from msprobe.pytorch import PrecisionDebugger

    fp16 = variant == "fp16"

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 8)
            self.act = torch.nn.ReLU()
            self.fc2 = torch.nn.Linear(8, 3)
            self.head = torch.nn.Linear(3, 2)

        def forward(self, x):
            h = self.act(self.fc1(x))
            if fp16:  # noqa: SIM108  (two source lines, one per run)
                h = self.fc2(h.half()).float()  # run B only: fc2 in float16, cast in and out
            else:
                h = self.fc2(h)
            return self.head(h)

    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    model = Net()
    if fp16:
        model.fc2.half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100)

    cfg_dir = tempfile.mkdtemp()
    cfg_path = os.path.join(cfg_dir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(CONFIG, dump_path=str(DEMO / "msprobe" / f"compare_{variant}")), f, indent=2)
    debugger = PrecisionDebugger(config_path=cfg_path)
    for step in range(STEPS):
        x = torch.randn(3, 4, generator=gen)
        target = torch.randn(3, 2, generator=gen)
        debugger.start(model=model)
        opt.zero_grad()
        y = model(x)
        loss = torch.nn.functional.mse_loss(y, target)
        loss.backward()
        opt.step()
        debugger.stop()
        debugger.step()
        print(variant, step, float(loss))
    dist.destroy_process_group()
    shutil.rmtree(cfg_dir)


def make() -> None:
    sys.path.insert(0, str(HERE))
    from msprobe_forms import anonymise  # the same rewrite as the other msprobe trees

    data = HERE.parent / "data" / "msprobe"
    DEMO.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(DEMO / "msprobe", ignore_errors=True)
    script = DEMO / "msprobe_compare_dumps.py"
    shutil.copy2(__file__, script)
    for variant in VARIANTS:
        subprocess.run([sys.executable, str(script), "run", variant], cwd=DEMO, check=True)
    prefixes = {"site-packages": sysconfig.get_paths()["purelib"], "stdlib": sysconfig.get_paths()["stdlib"]}
    for variant in VARIANTS:
        out = data / f"compare_{variant}"
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(DEMO / "msprobe" / f"compare_{variant}", out)
        anonymise(out, prefixes)

    # msprobe's own comparison: target (-tp) = the fp16 run, golden (-gp) = the fp32 run
    cmp_out = DEMO / "msprobe_compare_out"
    shutil.rmtree(cmp_out, ignore_errors=True)
    cmd = [
        str(Path(sys.executable).parent / "msprobe"),
        "compare",
        "-tp",
        str(data / "compare_fp16" / "step0" / "rank0" / "dump.json"),
        "-gp",
        str(data / "compare_fp32" / "step0" / "rank0" / "dump.json"),
        "-o",
        str(cmp_out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    csvs = sorted(cmp_out.glob("*.csv")) if cmp_out.exists() else []
    if proc.returncode != 0 or len(csvs) != 1:
        raise SystemExit(f"msprobe compare: exit {proc.returncode}, csv files {csvs}")
    shutil.copy2(csvs[0], data / "compare_msprobe_result.csv")
    print("msprobe compare wrote", csvs[0].name)


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run(sys.argv[2])
    else:
        make()
