"""Write a REAL, larger MindSpore 2.10 graph-mode dump tree (CPU) for benchmarks on real dumps.

A small ResNet-like net (a stem conv + ``--blocks`` residual blocks of conv-BN-ReLU-conv-BN-add-ReLU,
then pooling and a dense head) is trained for ``--iterations`` steps with Momentum, with the
synchronous (E2E) dump switched on for the inputs and outputs of every kernel. With the defaults
(12 blocks, 20 iterations, batch 4, 16 channels at 32x32) the tree holds about 35,800 files, about
2.5 GB: the ``.npy`` tensors (``Parameter.*`` files included), ``execution_order/``, ``graphs/`` (IR
text and ``.pb``) and ``.dump_metadata/``.

Runs ONLY under the producer venv (it imports mindspore; dumpcat never does), and the tree it writes
is not committed; put it outside the repository:

    <producer venv>/bin/python bench/ms_resnet_tree.py OUT_DIR                 # defaults above
    <producer venv>/bin/python bench/ms_resnet_tree.py OUT_DIR --blocks 4 --iterations 5 --batch 2

OUT_DIR is the dump ``path`` (MindSpore writes ``OUT_DIR/rank_0/...``); it must not exist or be empty
(``--overwrite`` deletes it first). The dump configuration (a ``dump.json`` pointed at by
``MINDSPORE_DUMP_CONFIG``) is written to a temporary folder, not into the tree, and printed. The
script re-runs itself as ``... ms_resnet_tree.py --_train`` in a child process, because MindSpore
reads the dump configuration once, when it is imported. At the end it prints what it wrote: file
count, bytes, seconds.

A CPU dump has no ``statistic.csv``, so every statistic an ingest records is computed from the data:
MindSpore 2.10 on CPU rejects ``saved_data: "statistic"`` and ``"full"`` when it parses the dump
configuration ("storing statistic dump is only supported on GPU and Ascend"), so this script offers
no ``--statistic`` variant.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DUMP_JSON = {
    "common_dump_settings": {
        "op_debug_mode": 0,
        "dump_mode": 0,  # every kernel
        "path": "",
        "net_name": "ResNet",
        "iteration": "all",
        "saved_data": "tensor",  # "statistic" / "full" raise on CPU
        "input_output": 0,  # inputs and outputs
        "kernels": [],
        "support_device": [0, 1, 2, 3, 4, 5, 6, 7],
        "statistic_category": ["max", "min", "l2norm"],
    },
    "e2e_dump_settings": {"enable": True, "trans_flag": True},
}


# ----------------------------------------------------------------------------- the training run
def train(blocks: int, iterations: int, batch: int, channels: int, size: int) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(0)
    rng = np.random.default_rng(0)

    class Block(nn.Cell):
        def __init__(self, c: int):
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, pad_mode="same")
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 3, pad_mode="same")
            self.bn2 = nn.BatchNorm2d(c)
            self.relu = nn.ReLU()

        def construct(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(x + y)

    class ResNet(nn.Cell):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, channels, 3, pad_mode="same")
            self.bn = nn.BatchNorm2d(channels)
            self.relu = nn.ReLU()
            self.blocks = nn.SequentialCell([Block(channels) for _ in range(blocks)])
            self.pool = nn.AvgPool2d(size, size)
            self.flatten = nn.Flatten()
            self.fc = nn.Dense(channels, 10)

        def construct(self, x):
            x = self.relu(self.bn(self.stem(x)))
            x = self.blocks(x)
            return self.fc(self.flatten(self.pool(x)))

    net = ResNet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    model = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
    model.set_train()
    for step in range(iterations):
        x = ms.Tensor(rng.standard_normal((batch, 3, size, size), dtype=np.float32))
        y = ms.Tensor(rng.integers(0, 10, (batch,), dtype=np.int32))
        print("step", step, "loss", model(x, y), flush=True)


# ----------------------------------------------------------------------------- make
def tree_size(root: Path) -> tuple[int, int]:
    files = nbytes = 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            files += 1
            nbytes += os.lstat(os.path.join(dirpath, n)).st_size
    return files, nbytes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="dump path (MindSpore writes OUT/rank_0/...)")
    p.add_argument("--blocks", type=int, default=12, help="residual blocks (default 12)")
    p.add_argument("--iterations", type=int, default=20, help="training steps dumped (default 20)")
    p.add_argument("--batch", type=int, default=4, help="batch size (default 4)")
    p.add_argument("--channels", type=int, default=16, help="channels of every block (default 16)")
    p.add_argument("--size", type=int, default=32, help="input height and width (default 32)")
    p.add_argument("--overwrite", action="store_true", help="delete OUT first if it holds anything")
    p.add_argument("--_train", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._train:
        train(a.blocks, a.iterations, a.batch, a.channels, a.size)
        return 0

    out = a.out.absolute()
    if out.exists() and any(out.iterdir()):
        if not a.overwrite:
            p.error(f"{out} is not empty (use --overwrite to replace it)")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads(json.dumps(DUMP_JSON))
    cfg["common_dump_settings"]["path"] = str(out)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ms-resnet-dump-") as tmp:
        cfg_path = Path(tmp) / "dump.json"
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
        print(f"dump.json ({cfg_path}):\n{cfg_path.read_text()}", flush=True)
        env = dict(os.environ, MINDSPORE_DUMP_CONFIG=str(cfg_path), GLOG_v="2")
        cmd = [sys.executable, str(Path(__file__).resolve()), str(out), "--_train"]
        cmd += ["--blocks", str(a.blocks), "--iterations", str(a.iterations), "--batch", str(a.batch)]
        cmd += ["--channels", str(a.channels), "--size", str(a.size)]
        subprocess.run(cmd, cwd=tmp, env=env, check=True)
    seconds = time.perf_counter() - started
    files, nbytes = tree_size(out)
    npy = sum(1 for _ in out.rglob("*.npy"))
    print(
        f"wrote {out}: {files:,} files ({npy:,} .npy), {nbytes:,} bytes ({nbytes / 1e9:.2f} GB), "
        f"{seconds:.1f} s; {a.blocks} blocks, {a.iterations} iterations, batch {a.batch}, "
        f"{a.channels} channels, {a.size}x{a.size}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
