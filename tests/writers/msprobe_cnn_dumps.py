"""REAL msprobe dumps of a tiny CNN for issue 32 (runs ONLY under the producer venv): tests/data/msprobe/cnn/.

    <producer venv>/bin/python tests/writers/msprobe_cnn_dumps.py make OUT_DIR
    <any python>               tests/writers/msprobe_cnn_dumps.py facts OUT_DIR   # what the README records

OUT_DIR is the folder to fill (tests/data/msprobe/cnn). It receives one tree per entry of TREES,
`OUT_DIR/<tree>/step{N}/rank0/{dump.json, stack.json, construct.json, dump_tensor_data/}`, and
msprobe's own comparisons under `OUT_DIR/compare/`. This script imports torch and msprobe
(mindstudio-probe); the project never does.

How (as tests/writers/msprobe_compare_dumps.py):
  1. the script copies itself to DEMO=/home/user/msprobe_cnn_demo/ and runs each tree there in a
     fresh interpreter (PrecisionDebugger is a per-process singleton), as
     `<producer python> DEMO/msprobe_cnn_dumps.py run <tree>`, with dump_path DEMO/dump/<tree>.
     Each process joins a one-rank gloo group on 127.0.0.1, so msprobe names the rank dir rank0/.
     The stack frames of the script therefore read /home/user/msprobe_cnn_demo/msprobe_cnn_dumps.py;
  2. `msprobe_forms.anonymise` (imported, unchanged) rewrites the two remaining machine prefixes in
     every .json of the trees, in DEMO: site-packages -> /opt/venv/lib/python3.11/site-packages and
     the standard library -> /usr/lib/python3.11, as in the other msprobe trees;
  3. `msprobe compare -tp <target dump.json> -gp <golden dump.json> -o <out>` runs on the anonymised
     DEMO trees (tensor-task compares read the .pt files through `dump_data_dir`, which names DEMO);
     each result CSV is copied to OUT_DIR/compare/<pair>_step<N>.csv;
  4. the trees are copied to OUT_DIR, and the run fails if a copied text file still holds a prefix
     of this machine.

Model `CNN` (fixed seeds, deterministic algorithms, SGD(lr=0.1), cross-entropy on int64 labels):
  conv = Conv2d(1, 2, 3) -> bn = BatchNorm2d(2) -> act = ReLU ->
  h = h + 0.1 * torch.log(h + 1.0 - shift)   (the NaN plant: see NAN_LINE below) ->
  flatten -> fc = Linear(32, 3).
shift is 0.0 (log(h + 1) >= 0, finite) except in the `nan` tree at step NAN_STEP, where it is 2.0:
log(h - 1) is NaN wherever the ReLU output h < 1 (every ReLU zero among them).
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
DEMO = Path("/home/user/msprobe_cnn_demo")
NAN_STEP = 1

# tree -> (autocast to bfloat16?, msprobe task, plant the NaN?, steps)
TREES = {
    "cnn_bf16_tensor": (True, "tensor", False, 2),
    "cnn_fp32_tensor": (False, "tensor", False, 2),
    "cnn_bf16_statistics": (True, "statistics", False, 2),
    "cnn_fp32_statistics": (False, "statistics", False, 2),
    "cnn_nan_tensor": (False, "tensor", True, 3),
    "cnn_clean_tensor": (False, "tensor", False, 3),
}

# msprobe compare pairs: name -> (target tree, golden tree, steps)
COMPARES = {
    "bf16_vs_fp32_tensor": ("cnn_bf16_tensor", "cnn_fp32_tensor", (0, 1)),
    "bf16_vs_fp32_statistics": ("cnn_bf16_statistics", "cnn_fp32_statistics", (0, 1)),
    "nan_vs_clean_tensor": ("cnn_nan_tensor", "cnn_clean_tensor", (0, 1, 2)),
}


def _config(task: str, steps: int) -> dict:
    body = {"scope": [], "list": [], "data_mode": ["all"]}
    if task == "statistics":
        body["summary_mode"] = "statistics"
    return {
        "task": task,
        "level": "mix",
        "rank": [],
        "step": list(range(steps)),
        "risk_level": "ALL",
        task: body,
    }


def run(tree: str) -> None:
    import torch
    import torch.distributed as dist

    bf16, task, plant_nan, steps = TREES[tree]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(29650 + list(TREES).index(tree))
    dist.init_process_group("gloo", rank=0, world_size=1)

    from msprobe.pytorch import PrecisionDebugger

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 2, 3)
            self.bn = torch.nn.BatchNorm2d(2)
            self.act = torch.nn.ReLU()
            self.fc = torch.nn.Linear(32, 3)

        def forward(self, x, shift=0.0):
            h = self.act(self.bn(self.conv(x)))
            h = h + 0.1 * torch.log(h + 1.0 - shift)  # NAN_LINE: NaN where h + 1 - shift < 0
            return self.fc(torch.flatten(h, 1))

    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    model = CNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100)

    cfg_dir = tempfile.mkdtemp()
    cfg_path = os.path.join(cfg_dir, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(_config(task, steps), dump_path=str(DEMO / "dump" / tree)), f, indent=2)
    debugger = PrecisionDebugger(config_path=cfg_path)
    for step in range(steps):
        x = torch.randn(4, 1, 6, 6, generator=gen)
        labels = torch.randint(0, 3, (4,), generator=gen)
        shift = 2.0 if (plant_nan and step == NAN_STEP) else 0.0
        debugger.start(model=model)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x, shift=shift)
            loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
        opt.step()
        debugger.stop()
        debugger.step()
        print(tree, step, float(loss))
    dist.destroy_process_group()
    shutil.rmtree(cfg_dir)


def make(out: Path) -> None:
    sys.path.insert(0, str(HERE))
    from msprobe_forms import anonymise  # the same rewrite as the other msprobe trees

    out = out.resolve()
    if DEMO.exists():
        shutil.rmtree(DEMO)
    DEMO.mkdir(parents=True)
    script = DEMO / "msprobe_cnn_dumps.py"
    shutil.copy2(__file__, script)
    for tree in TREES:
        subprocess.run([sys.executable, str(script), "run", tree], cwd=DEMO, check=True)
    prefixes = {"site-packages": sysconfig.get_paths()["purelib"], "stdlib": sysconfig.get_paths()["stdlib"]}
    for tree in TREES:
        anonymise(DEMO / "dump" / tree, prefixes)

    # msprobe's own comparison, on the anonymised trees (their dump_data_dir names DEMO)
    cmp_dir = out / "compare"
    if cmp_dir.exists():
        shutil.rmtree(cmp_dir)
    cmp_dir.mkdir(parents=True)
    for name, (target, golden, steps) in COMPARES.items():
        for step in steps:
            res = DEMO / "compare" / f"{name}_step{step}"
            cmd = [
                str(Path(sys.executable).parent / "msprobe"),
                "compare",
                "-tp",
                str(DEMO / "dump" / target / f"step{step}" / "rank0" / "dump.json"),
                "-gp",
                str(DEMO / "dump" / golden / f"step{step}" / "rank0" / "dump.json"),
                "-o",
                str(res),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=DEMO)
            print(name, step, "exit", proc.returncode, proc.stdout[-600:], proc.stderr[-600:])
            csvs = sorted(res.glob("*.csv")) if res.exists() else []
            if proc.returncode != 0 or len(csvs) != 1:
                raise SystemExit(
                    f"msprobe compare {name} step{step}: exit {proc.returncode}, csv files {csvs}"
                )
            shutil.copy2(csvs[0], cmp_dir / f"{name}_step{step}.csv")

    for tree in TREES:
        if (out / tree).exists():
            shutil.rmtree(out / tree)
        shutil.copytree(DEMO / "dump" / tree, out / tree)

    real_venv = Path(sys.prefix)
    machine = {real_venv, real_venv.resolve(), Path(sys.base_prefix), HERE.parents[1], Path.home(), out}
    bad = [str(p).encode() for p in machine] + [tempfile.gettempdir().encode()]
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.suffix in (".json", ".csv"):
            data = p.read_bytes()
            for b in bad:
                if b in data:
                    raise SystemExit(f"machine path {b!r} left in {p}")


def _tensors(obj, path=""):
    """(path, tensor dict) for every tensor object in a dump.json value, depth first."""
    if isinstance(obj, dict):
        if "dtype" in obj and "shape" in obj:
            yield path, obj
            return
        for k, v in obj.items():
            yield from _tensors(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{path}.{i}" if path else str(i))


def facts(out: Path) -> int:
    """Print what tests/data/msprobe/cnn/README.md records (json only; NaN counts need torch)."""
    import math

    dtypes: dict[str, int] = {}
    for tree in TREES:
        for dump in sorted(out.glob(f"{tree}/step*/rank0/dump.json")):
            data = json.loads(dump.read_text())["data"]
            show_ints = tree == "cnn_fp32_statistics" and dump.parent.parent.name == "step0"
            order = {k: list(v) for k, v in data.items() if ".parameters_grad." in k}
            print(f"{dump.relative_to(out)}: {len(data)} entries; parameters_grad key order {order}")
            for key, body in data.items():
                for path, t in _tensors(body):
                    dtypes[t["dtype"]] = dtypes.get(t["dtype"], 0) + 1
                    if show_ints and "int" in t["dtype"]:
                        stats = {s: t.get(s) for s in ("Max", "Min", "Mean", "Norm")}
                        print(f"  integer tensor {key}.{path}: {t['dtype']} shape {t['shape']} {stats}")
            if tree == "cnn_nan_tensor":
                first = next(
                    (
                        k
                        for k, v in data.items()
                        for _, t in _tensors(v)
                        if isinstance(t.get("Max"), float) and math.isnan(t["Max"])
                    ),
                    None,
                )
                print(f"  first entry holding a NaN Max: {first}")
    print(f"dtype spellings: {dtypes}")
    try:
        import torch
    except ImportError:
        return 0
    rank = out / "cnn_nan_tensor" / f"step{NAN_STEP}" / "rank0"
    for name in ("Torch.log.0.forward.input.0.pt", "Torch.log.0.forward.output.0.pt"):
        t = torch.load(rank / "dump_tensor_data" / name)
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
        print(f"{name}: {t.dtype} {tuple(t.shape)} NaN {nan} Inf {inf} of {t.numel()}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) == 3:
        run(sys.argv[2])
    elif sys.argv[1:2] == ["make"] and len(sys.argv) == 3:
        make(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["facts"] and len(sys.argv) == 3:
        sys.exit(facts(Path(sys.argv[2])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
