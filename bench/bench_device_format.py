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

Figures (2 vCPU AMD EPYC VM shared with other jobs, loadavg ~1.5, numpy 2.4.6, best of 7; GB/s):

    format         host shape            dtype     dev MB  to_host  np.copy  ratio  to_device
    NC1HWC0        (32, 64, 56, 56)      float16     12.8    4.41     16.43   0.27       3.83
    NC1HWC0        (32, 65, 56, 56)      float16     16.1    4.21     13.88   0.30       3.27
    NC1HWC0        (32, 64, 56, 56)      bfloat16    12.8    3.86     18.74   0.21       3.68
    NC1HWC0        (32, 64, 56, 56)      int8         6.4    2.92     36.38   0.08       2.42
    NC1HWC0_C04    (32, 3, 224, 224)     float16     12.8    7.21     16.51   0.44       1.97
    C1HWNC0        (256, 256, 3, 3)      float16      1.2    3.24     44.02   0.07       3.95
    FRACTAL_Z      (256, 256, 3, 3)      float16      1.2    3.20     45.74   0.07       3.88
    FRACTAL_Z      (512, 512, 3, 3)      float16      4.7    3.16     43.85   0.07       2.57
    FRACTAL_Z      (2048, 512, 1, 1)     float16      2.1    5.27     43.66   0.12       1.90
    FRACTAL_Z      (64, 64, 7, 7)        float16      0.4    3.29     40.71   0.08       2.93
    FRACTAL_Z      (255, 250, 7, 7)      float16      6.4    2.36     24.96   0.09       1.42
    FRACTAL_Z_C04  (64, 3, 7, 7)         float16      0.0    1.18     23.58   0.05       0.60
    FRACTAL_NZ     (4096, 4096)          float16     33.6    1.73      8.20   0.21       1.60
    FRACTAL_NZ     (4095, 4097)          float16     33.7    1.33      6.88   0.19       1.24
    FRACTAL_NZ     (8, 512, 1024)        float32     16.8    4.29     14.71   0.29       3.82
    FRACTAL_NZ     (4096, 4096)          int8        16.8    3.21     11.36   0.28       1.82
    NDC1HWC0       (4, 64, 8, 56, 56)    float16     12.8    3.63     11.93   0.30       3.85
    FRACTAL_Z_3D   (128, 128, 3, 3, 3)   float16      0.9    3.54     39.41   0.09       3.37
    NHWC           (32, 64, 56, 56)      float16     12.8    2.46     11.27   0.22       2.60
    HWCN           (256, 256, 3, 3)      float16      1.2    2.36     45.08   0.05       2.96

Every row meets the target; another run the same hour gave 0.6x-1.0x of these (NZ 4095x4097: 1.25,
FRACTAL_Z 3x3: 2.0). np.copy of a cache-resident array (under ~2 MB) runs at L2 speed, hence the
low ratios of the small weights; the big activations are bound by memory bandwidth and page walks
(FRACTAL_NZ reads 32-byte C0 runs 128 KiB apart). The 26 KB FRACTAL_Z_C04 weight is mostly the
~25 us per-call cost of its two stages. What the layout choices bought, same machine: moving C0 runs
as one 32-byte element, FRACTAL_NZ 4096x4096 1.5 -> 2.4 GB/s; gathering C0 runs before the small
transposes, FRACTAL_Z_3D 128x128x3x3x3 1.0 -> 3.1 and FRACTAL_Z 64x64x7x7 1.1 -> 3.1 GB/s.
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
    run(cases, args.repeat)


if __name__ == "__main__":
    main()
