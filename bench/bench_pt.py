"""What fetching a `.pt` tensor costs with dumpcat's torch-free reader vs torch itself.

    <producer venv>/bin/python bench/bench_pt.py [--rounds 300]

Runs under a venv that has torch (dumpcat never depends on it), with the repo on sys.path; if that
venv lacks ml_dtypes, the repo's own .venv site-packages is appended to sys.path for it. Without
torch it says so and exits 0.

For files written here with torch.save (small and ~4 MB tensors, float32 and bfloat16, contiguous
and transposed) and the msprobe `.pt` files committed under tests/data/msprobe/, it times, interleaved
call by call, `load_pt(path)` (memory-mapped), `load_pt(path, mapped=False)` and
`torch.load(path, weights_only=True).numpy()` (bfloat16 through a zero-copy `.view(torch.uint16)`),
each alone ("fetch") and followed by copying the values into a preallocated array ("fetch+touch":
a mapped read pays its page faults there). Prints the median per call and the ratio to torch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

try:
    import torch
except ImportError:
    print("bench_pt: torch is not installed in this Python; run it with the producer venv:")
    print("    <producer venv>/bin/python bench/bench_pt.py")
    sys.exit(0)

try:
    import ml_dtypes  # noqa: F401
except ImportError:
    sys.path.extend(str(p) for p in sorted((REPO / ".venv" / "lib").glob("python3*/site-packages")))

import numpy as np  # noqa: E402

from bench import emit  # noqa: E402
from ingest.formats.msprobe.torch_pt import load_pt  # noqa: E402


def torch_fetch(path: Path) -> np.ndarray:
    t = torch.load(path, weights_only=True)
    if t.dtype == torch.bfloat16:
        t = t.view(torch.uint16)
    return t.numpy()


def as_bits(arr: np.ndarray) -> np.ndarray:
    return arr.view(np.uint16) if arr.dtype.name == "bfloat16" else arr


def make_files(tmp: Path) -> list[tuple[str, list[Path]]]:
    torch.manual_seed(0)
    made = {
        "small f32 (8x8)": torch.randn(8, 8),
        "small bf16 (8x8)": torch.randn(8, 8).to(torch.bfloat16),
        "4 MB f32 (1024x1024)": torch.randn(1024, 1024),
        "4 MB bf16 (2048x1024)": torch.randn(2048, 1024).to(torch.bfloat16),
        "4 MB f32 transposed": torch.randn(1024, 1024).t(),
    }
    out = []
    for i, (label, t) in enumerate(made.items()):
        path = tmp / f"t{i}.pt"
        torch.save(t, path)
        out.append((label, [path]))
    msprobe = sorted((REPO / "tests" / "data" / "msprobe").rglob("*.pt"))
    if msprobe:
        out.append((f"msprobe files ({len(msprobe)}, per file)", msprobe))
    return out


def bench(paths: list[Path], rounds: int) -> dict[str, tuple[float, float]]:
    """Median microseconds per call (fetch, fetch+touch) of each reader, interleaved."""
    readers: dict[str, Callable[[Path], np.ndarray]] = {
        "load_pt mapped": lambda p: as_bits(load_pt(p)),
        "load_pt read": lambda p: as_bits(load_pt(p, mapped=False)),
        "torch.load": torch_fetch,
    }
    outs = {p: np.empty_like(torch_fetch(p), order="C") for p in paths}
    for p in paths:  # same values first
        ref = torch_fetch(p)
        for fn in readers.values():
            same = np.ascontiguousarray(fn(p)).view(np.uint8) == np.ascontiguousarray(ref).view(np.uint8)
            assert same.all(), p
    times: dict[str, list[float]] = {f"{k} {m}": [] for k in readers for m in ("fetch", "touch")}
    for _ in range(rounds):
        for name, fn in readers.items():
            for mode in ("fetch", "touch"):
                start = time.perf_counter()
                for p in paths:
                    arr = fn(p)
                    if mode == "touch":
                        np.copyto(outs[p], arr)
                times[f"{name} {mode}"].append((time.perf_counter() - start) / len(paths))
    med = {key: statistics.median(values) * 1e6 for key, values in times.items()}
    return {name: (med[f"{name} fetch"], med[f"{name} touch"]) for name in readers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300, help="rounds for small files (4 MB files: a tenth)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, numpy {np.__version__}; median per call, interleaved")
    print(f"{'case':32} {'reader':15} {'fetch us':>10} {'ratio':>6} {'fetch+touch us':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, paths in make_files(Path(tmp)):
            big = paths[0].stat().st_size > 1 << 20
            rounds = max(10, args.rounds // 10) if big or len(paths) > 20 else args.rounds
            res = bench(paths, rounds)
            ref_fetch, ref_touch = res["torch.load"]
            for name, (fetch, touch) in res.items():
                print(
                    f"{label:32} {name:15} {fetch:10.1f} {fetch / ref_fetch:6.2f} {touch:15.1f} "
                    f"{touch / ref_touch:6.2f}"
                )
            fetch, _ = res["load_pt mapped"]
            emit.summary(
                f"`.pt` fetch without torch (memory-mapped) vs `torch.load(weights_only=True)`, {label}",
                "<= 2x",
                f"{fetch / ref_fetch:.2f}x ({fetch:,.1f} vs {ref_fetch:,.1f} us)",
                fetch / ref_fetch <= 2,
            )


if __name__ == "__main__":
    main()
