"""Benchmark: device_to_host throughput per Ascend device format, against np.copy of the same bytes.

For each case a host tensor is made, turned into its device layout with ``host_to_device`` (outside
the timing), then timed in the same process, interleaved, best of ``--repeat``:

- ``device_to_host``: the conversion ingest runs before statistics (one thread: numpy's copy loops);
- ``np.copy``: a plain copy of the device array, the ceiling for any layout change of those bytes;
- ``host_to_device``: the forward transform (test writers only; shown for completeness).

Throughput is GB (10^9 bytes) of device data per second. The target is >= 1 GB/s per core for
``device_to_host``; rows below it are marked ``<``.

    python bench/bench_device_format.py                  # every case
    python bench/bench_device_format.py --only FRACTAL   # cases whose format contains FRACTAL

Where the time goes: np.copy of a cache-resident array (under ~2 MB) runs at L2 speed, hence the
low ratios of the small weights; the big activations are bound by memory bandwidth and page walks
(FRACTAL_NZ reads 32-byte C0 runs 128 KiB apart). The 26 KB FRACTAL_Z_C04 weight is mostly the
~25 us per-call cost of its two stages. Moving C0 runs as one 32-byte element, and gathering them
before the small transposes, are what make FRACTAL_NZ and the 3x3 / 7x7 FRACTAL_Z weights fast.
The figures of the latest run are in docs/benchmarks.md (`python -m bench`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import emit
from ingest.formats.ascend.device_format import device_to_host, host_to_device

TARGET_GBS = 1.0

# (format, host shape, dtype, c0 for host_to_device): realistic activations and weights
CASES: list[tuple[str, tuple[int, ...], object, int | None]] = [
    ("NC1HWC0", (32, 64, 56, 56), np.float16, None),
    ("NC1HWC0", (32, 65, 56, 56), np.float16, None),  # C % C0 != 0: a cropped channel block
    ("NC1HWC0", (32, 64, 56, 56), ml_dtypes.bfloat16, None),
    ("NC1HWC0", (32, 64, 56, 56), np.int8, 32),
    ("NC1HWC0_C04", (32, 3, 224, 224), np.float16, None),
    ("C1HWNC0", (256, 256, 3, 3), np.float16, None),
    ("FRACTAL_Z", (256, 256, 3, 3), np.float16, None),
    ("FRACTAL_Z", (512, 512, 3, 3), np.float16, None),
    ("FRACTAL_Z", (2048, 512, 1, 1), np.float16, None),
    ("FRACTAL_Z", (64, 64, 7, 7), np.float16, None),
    ("FRACTAL_Z", (255, 250, 7, 7), np.float16, None),  # N and C padded
    ("FRACTAL_Z_C04", (64, 3, 7, 7), np.float16, None),
    ("FRACTAL_NZ", (4096, 4096), np.float16, None),
    ("FRACTAL_NZ", (4095, 4097), np.float16, None),
    ("FRACTAL_NZ", (8, 512, 1024), np.float32, None),
    ("FRACTAL_NZ", (4096, 4096), np.int8, 32),
    ("NDC1HWC0", (4, 64, 8, 56, 56), np.float16, None),
    ("FRACTAL_Z_3D", (128, 128, 3, 3, 3), np.float16, None),
    ("NHWC", (32, 64, 56, 56), np.float16, None),
    ("HWCN", (256, 256, 3, 3), np.float16, None),
]


def best_of(variants: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Time every variant ``repeat`` times, interleaved (the machine may be shared), keep the best."""
    best = dict.fromkeys(variants, math.inf)
    for fn in variants.values():
        fn()  # warm-up: allocator, caches
    for _ in range(repeat):
        for label, fn in variants.items():
            inner = 1
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            if dt < 1e-3:  # tiny tensors: time a batch so the clock's resolution does not matter
                inner = max(1, int(2e-3 / max(dt, 1e-7)))
                t = time.perf_counter()
                for _ in range(inner):
                    fn()
                dt = (time.perf_counter() - t) / inner
            best[label] = min(best[label], dt)
    return best


def run(cases: list[tuple[str, tuple[int, ...], object, int | None]], repeat: int) -> list[dict]:
    rng = np.random.default_rng(0)
    head = (
        f"{'format':14s} {'host shape':21s} {'dtype':8s} {'dev MB':>7s} {'to_host':>8s} "
        f"{'np.copy':>8s} {'ratio':>6s} {'to_device':>10s}"
    )
    print(head)
    print("-" * len(head))
    rows = []
    for fmt, shape, dtype, c0 in cases:
        host = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        dev = host_to_device(host, fmt, c0=c0)
        assert np.array_equal(device_to_host(dev, fmt, shape).view(np.uint8), host.view(np.uint8))
        best = best_of(
            {
                "to_host": lambda dev=dev, fmt=fmt, shape=shape: device_to_host(dev, fmt, shape),
                "copy": lambda dev=dev: np.copy(dev),
                "to_device": lambda host=host, fmt=fmt, c0=c0: host_to_device(host, fmt, c0=c0),
            },
            repeat,
        )
        gbs = {k: dev.nbytes / v / 1e9 for k, v in best.items()}
        mark = "<" if gbs["to_host"] < TARGET_GBS else " "
        print(
            f"{fmt:14s} {shape!s:21s} {np.dtype(dtype).name:8s} {dev.nbytes / 1e6:7.1f} "
            f"{gbs['to_host']:7.2f}{mark} {gbs['copy']:8.2f} {gbs['to_host'] / gbs['copy']:6.2f} "
            f"{gbs['to_device']:10.2f}"
        )
        rows.append({"format": fmt, "shape": shape, "dtype": np.dtype(dtype).name, **gbs})
    slow = [r for r in rows if r["to_host"] < TARGET_GBS]
    print(f"\n{len(rows) - len(slow)}/{len(rows)} cases at or above {TARGET_GBS} GB/s device_to_host")
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", help="run the cases whose format contains this text (case-insensitive)")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or args.only.upper() in c[0]]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"cpu_count={os.cpu_count()} numpy={np.__version__} loadavg={load} repeat={args.repeat}\n")
    rows = run(cases, args.repeat)
    low = min(rows, key=lambda r: r["to_host"])
    emit.summary(
        f"`device_to_host`, one thread, {len(rows)} cases",
        f">= {TARGET_GBS:g} GB/s",
        f"{low['to_host']:.2f}-{max(r['to_host'] for r in rows):.2f} GB/s (lowest: {low['format']} "
        f"{low['dtype']}; np.copy of it {low['copy']:.1f} GB/s)",
        low["to_host"] >= TARGET_GBS,
    )


if __name__ == "__main__":
    main()
