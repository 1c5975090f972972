"""Benchmark: result encoding for the PostgreSQL wire, old per-value text path vs `catalog.server.pgcodec`.

    python bench/bench_pgcodec.py                       # 10^6 rows, one batch
    python bench/bench_pgcodec.py --rows 200000 --batch-rows 2048 --repeat 3

Builds one Arrow batch shaped like the catalog's `stats` view (sql/40_stats.sql: its 40 columns in
order, with their types: int64/int32 ids and counts with NULLs, float64 statistics with NaN and
NULLs over a wide range of magnitudes, strings such as op names of ~90 characters, a bigint[]
`shape`, booleans), then times, in the same process:

- ``old text``: `encode_rows` as `catalog/server/pgwire.py` had it before pgcodec (kept below, verbatim,
  as the baseline: `to_pylist` per column, `text_value` per value, `struct.pack` per field);
- ``text`` and ``binary``: `pgcodec.encode_datarows` with every column in that format;
- ``copy text``, ``copy csv``, ``copy binary``: `pgcodec.encode_copy` (the tuples of a COPY TO
  STDOUT; the binary header/trailer are constants).

``--batch-rows N`` encodes the batch in slices of N rows, as the server's statement worker does
(it reads DuckDB results in batches of 2048 rows): the fixed cost per call then counts. Figures
are rows/s and MB/s of output (10^6 bytes), best of ``--repeat`` runs (the old path runs once: it
takes about a minute for 10^6 rows); ratios are against the old text path.

Figures (2 vCPU AMD EPYC VM shared with another job's test suite (load ~2.3), numpy 2.4.6,
pyarrow 26, Python 3.11; 10^6 rows, best of 3; output ~660 MB text / ~670 MB binary):

    path          seconds    rows/s     MB/s   vs old text     2048-row calls (2*10^5 rows)
    old text        42.62    23,461     15.5        1.0x           1.0x
    text             9.44   105,926     69.9        4.5x           3.1x
    binary           4.51   221,883    148.6        9.5x           6.9x
    copy text        9.49   105,390     57.3        4.5x           3.7x
    copy csv         9.14   109,450     58.5        4.7x           3.5x
    copy binary      4.79   208,968    138.9        8.9x           8.4x

Quieter moments of the same machine gave up to 5.4x (text), 11.9x (binary), 6.1x (copy text) and
11.0x (copy binary) at 10^6 rows. With 2048-row calls the fixed cost per column counts; batches
of at most 64 rows go value by value (about the old path's cost, binary faster).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # emit, also when a test imports this module

import emit

from catalog.server import pgcodec

# -- the old text encoder (catalog/server/pgwire.py before pgcodec), the baseline ---------------------


def _old_float_text(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def _old_array_elem(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, list):
        return "{" + ",".join(_old_array_elem(x) for x in v) + "}"
    s = old_text_value(v)
    if isinstance(v, bool | int | float) and not isinstance(v, str):
        return s
    if s == "" or s.upper() == "NULL" or any(c in s for c in ',{}"\\ \t\n'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return s


def old_text_value(v: object) -> str:
    """pgwire.text_value before pgcodec."""
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, float):
        return _old_float_text(v)
    if isinstance(v, int | str):
        return str(v)
    if isinstance(v, list):
        return "{" + ",".join(_old_array_elem(x) for x in v) + "}"
    if isinstance(v, dt.datetime):
        s = v.isoformat(sep=" ")
        if v.tzinfo is not None and s.endswith("+00:00"):
            s = s[:-6] + "+00"
        return s
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return f"{v.days} days {v.seconds} seconds {v.microseconds} microseconds" if v.days else str(v)
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dict):
        return json.dumps(v, default=str)
    return str(v)


def _old_encode_rows_text(rows) -> list[bytes]:
    out = []
    for row in rows:
        body = bytearray(struct.pack("!h", len(row)))
        for v in row:
            if v is None:
                body += b"\xff\xff\xff\xff"
            else:
                b = old_text_value(v).encode()
                body += struct.pack("!i", len(b)) + b
        out.append(b"D" + struct.pack("!i", len(body) + 4) + bytes(body))
    return out


def old_encode_rows(batch: pa.RecordBatch) -> list[bytes]:
    """pgwire.encode_rows before pgcodec: one DataRow (text format) per row."""
    cols = [c.to_pylist() for c in batch.columns]
    return (
        _old_encode_rows_text(zip(*cols, strict=True))
        if cols
        else [b"D\x00\x00\x00\x06\x00\x00"] * batch.num_rows
    )


# -- a batch shaped like the stats view --------------------------------------------------------


def stats_batch(n: int, seed: int = 0) -> pa.RecordBatch:
    """n rows with the columns and types of `SELECT * FROM stats` (sql/40_stats.sql)."""
    rng = np.random.default_rng(seed)

    def ints(lo: int, hi: int, nulls: float = 0.0, dtype=np.int64) -> pa.Array:
        mask = rng.random(n) < nulls if nulls else None
        return pa.array(rng.integers(lo, hi, n).astype(dtype), mask=mask)

    def floats(nulls: float = 0.05) -> pa.Array:
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 4, n)
        a[rng.random(n) < 0.01] = np.nan
        a[rng.random(n) < 0.005] = np.inf
        whole = rng.random(n) < 0.2  # integral statistics (max/min of integer tensors)
        a[whole] = rng.integers(-100, 1000, int(whole.sum()))
        return pa.array(a, mask=rng.random(n) < nulls)

    def strs(vocab: list[str], nulls: float = 0.0) -> pa.Array:
        arr = pa.array(vocab, pa.string()).take(pa.array(rng.integers(0, len(vocab), n)))
        if nulls:
            arr = pa.array(arr.to_numpy(zero_copy_only=False), mask=rng.random(n) < nulls, type=pa.string())
        return arr

    ops = [
        f"Default/network-WithLossCell/_backbone-ResNet/layer{i % 4}/{i}-Bottleneck/"
        f"conv{i % 3}-Conv2d/Conv2D-op{i}"
        for i in range(5000)
    ]
    lens = rng.integers(0, 5, n)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    shape = pa.ListArray.from_arrays(offsets, pa.array(rng.integers(1, 2048, int(lens.sum()))))
    counts = ["count", "neg_count", "pos_count", "nan_count", "neg_inf_count", "pos_inf_count", "zero_count"]
    cols = {
        "row_id": ints(0, 2**53),
        "stat_id": ints(0, 10**6, 0.5),
        "run": strs(["nan_log", "resnet_run"]),
        "rank": ints(0, 8, dtype=np.int32),
        "net": strs(["Net", "kernel_graph_0"]),
        "graph_id": ints(0, 4, dtype=np.int32),
        "iteration": ints(0, 1000),
        "op_type": strs(["Conv2D", "MatMul", "Add", "BatchNorm", "ReLU"]),
        "op_name": strs(ops),
        "file_op_name": strs(ops),
        "io": strs(["input", "output"]),
        "slot": ints(0, 3, dtype=np.int32),
        "dtype": strs(["float32", "float16", "int32"]),
        "shape": shape,
        "nbytes": ints(0, 10**8),
        "max": floats(),
        "min": floats(),
        "avg": floats(),
        **{c: ints(0, 10**7, 0.1) for c in counts},
        "l2norm": floats(),
        "md5": strs([f"{i:032x}" for i in range(1000)], 0.5),
        "stat_source": strs(["computed", "statistic.csv", "dump.json"]),
        "exec_index": ints(0, 10**5, 0.3),
        "source_file": strs([f"/home/user/models/resnet/src/block_{i}.py" for i in range(50)], 0.3),
        "source_line": ints(1, 2000, 0.3),
        "source_code": strs([f"out = self.conv{i}(x) + self.bn{i}(x)" for i in range(300)], 0.3),
        "name_match": strs(["exact", "op_index", "rank", "header", "unresolved"]),
        "timestamp_us": ints(1_700_000_000_000_000, 1_800_000_000_000_000),
        "mismatch": strs(["dtype differs"], 0.99),
        "stat_semantics": strs(["dumpcat", "mindspore", "cann", "msprobe"]),
        "arg_path": strs(["args.0", "kwargs.x"], 0.8),
        "requires_grad": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.5),
        "has_nan": pa.array(rng.random(n) < 0.1),
        "has_inf": pa.array(rng.random(n) < 0.1),
    }
    return pa.RecordBatch.from_pydict(cols)


# -- measurement -------------------------------------------------------------------------------


def slices(batch: pa.RecordBatch, rows: int) -> list[pa.RecordBatch]:
    if rows <= 0:
        return [batch]
    return [batch.slice(i, rows) for i in range(0, batch.num_rows, rows)]


def measure(name: str, fn, parts: list[pa.RecordBatch], repeat: int) -> tuple[str, float, int]:
    best, size = math.inf, 0
    for _ in range(repeat):
        t = time.perf_counter()
        size = sum(len(fn(b)) for b in parts)
        best = min(best, time.perf_counter() - t)
    return name, best, size


def paths(ncols: int, skip_old: bool) -> list[tuple[str, object, int]]:
    """(name, encode function of one batch, repeats: the old path runs once) of every path."""
    old = [] if skip_old else [("old text", lambda b: b"".join(old_encode_rows(b)), 1)]
    return [
        *old,
        ("text", lambda b: pgcodec.encode_datarows(b, [0] * ncols), 0),
        ("binary", lambda b: pgcodec.encode_datarows(b, [1] * ncols), 0),
        ("copy text", lambda b: pgcodec.encode_copy(b, "text"), 0),
        ("copy csv", lambda b: pgcodec.encode_copy(b, "csv"), 0),
        ("copy binary", lambda b: pgcodec.encode_copy(b, "binary"), 0),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch-rows", type=int, default=0, help="encode in slices of this many rows (0: one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-old", action="store_true", help="do not run the (slow) old text path")
    ap.add_argument(
        "--calls",
        type=int,
        default=200_000,
        help="also encode the first N rows in 2048-row calls, as the server does (0: not)",
    )
    args = ap.parse_args()

    batch = stats_batch(args.rows)
    parts = slices(batch, args.batch_rows)
    ncols = batch.num_columns
    per_call = args.batch_rows or args.rows
    print(f"{args.rows:,} rows x {ncols} columns (stats view shape), {per_call:,} rows per call")
    runs = [
        measure(name, fn, parts, repeat or args.repeat) for name, fn, repeat in paths(ncols, args.skip_old)
    ]
    calls: dict[str, float] = {}
    if args.calls and not args.skip_old:
        small = slices(batch.slice(0, min(args.calls, args.rows)), 2048)
        timed = {
            name: measure(name, fn, small, repeat or args.repeat)[1]
            for name, fn, repeat in paths(ncols, False)
        }
        calls = {name: timed["old text"] / secs for name, secs in timed.items()}
    base = runs[0][1] if not args.skip_old else None
    print(f"{'path':<12} {'seconds':>8} {'rows/s':>12} {'MB/s':>8} {'MB':>8} {'vs old text':>12}")
    for name, secs, size in runs:
        ratio = f"{base / secs:11.1f}x" if base else ""
        rate = f"{args.rows / secs:12,.0f} {size / secs / 1e6:8.1f}"
        print(f"{name:<12} {secs:8.2f} {rate} {size / 1e6:8.1f} {ratio}")
    if base is None:
        return
    ratios = {name: base / secs for name, secs, _ in runs}
    emit.summary(
        f"encoding a stats-shaped result for the wire ({args.rows:,} rows, one batch) vs the old "
        "per-value text path",
        "-",
        ", ".join(f"{n} {r:.1f}x" for n, r in ratios.items() if n != "old text"),
    )
    if calls:
        emit.summary(
            f"the same in 2048-row calls, as the server encodes ({min(args.calls, args.rows):,} rows)",
            "-",
            ", ".join(f"{n} {r:.1f}x" for n, r in calls.items() if n != "old text"),
        )
    emit.report_follows()
    print(
        f"`python bench/bench_pgcodec.py --rows {args.rows} --repeat {args.repeat}`, best of {args.repeat} "
        f"(the old path once); load average {os.getloadavg()[0]:.2f} at the end.\n"
    )
    tail = " | 2048-row calls" if calls else ""
    print(f"| path | seconds | rows/s | MB/s | vs old text{tail} |")
    print("|---|---|---|---|---|" + ("---|" if calls else ""))
    for name, secs, size in runs:
        extra = f" | {calls[name]:.1f}x" if calls else ""
        rate = f"{args.rows / secs:,.0f} | {size / secs / 1e6:.1f}"
        print(f"| {name} | {secs:.2f} | {rate} | {base / secs:.1f}x{extra} |")


if __name__ == "__main__":
    main()
