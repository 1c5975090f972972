"""What the contained engine costs per query: DuckDB scanning pyarrow datasets (how `dumpcat serve`
reads the catalog, with no file access of its own) vs. DuckDB's own parquet reader (how
`Catalog.sql` reads it), on one synthetic table of N rows in 4 parquet files.

    python bench/bench_contained_scan.py [--rows 100000 1000000]

Prints the median of 30 runs per query on each side and the ratio dataset/parquet, per table size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import emit

QUERIES = [
    "SELECT op_name FROM {} WHERE nan_count > 0",
    "SELECT count(*) FROM {}",
    "SELECT * FROM {} WHERE row_id = {rid}",
]


def median_ms(con: duckdb.DuckDBPyConnection, sql: str, runs: int = 30) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        con.sql(sql).fetchall()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def measure(n: int) -> list[tuple[str, float, float]]:
    """(query, DuckDB parquet ms, Arrow dataset ms) of each query on a table of `n` rows."""
    rng = np.random.default_rng(0)
    table = pa.table({
        "row_id": rng.integers(0, 2**62, n),
        "nan_count": (np.arange(n) % 1000 == 0).astype(np.int64),
        "op_name": pa.array([f"Default/network/op{i % 5000}" for i in range(n)]),
        "max": rng.random(n),
    }).sort_by("row_id")  # fmt: skip
    rid = table.column("row_id")[n // 3].as_py()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(4):
            path = str(Path(tmp) / f"part{i}.parquet")
            pq.write_table(table.slice(i * n // 4, n // 4), path, row_group_size=65536)
            files.append(path)
        con = duckdb.connect()
        listing = ", ".join(f"'{f}'" for f in files)
        con.execute(f"CREATE VIEW native AS SELECT * FROM read_parquet([{listing}])")
        con.register("arrow_dataset", ds.dataset(files, format="parquet"))
        for q in QUERIES:  # the two sides must give the same rows
            native, dataset = (
                sorted(con.sql(q.format(v, rid=rid)).fetchall()) for v in ("native", "arrow_dataset")
            )
            if native != dataset or not native:
                raise SystemExit(f"the two sides disagree on {q}")
        for q in QUERIES:
            a = median_ms(con, q.format("native", rid=rid))
            b = median_ms(con, q.format("arrow_dataset", rid=rid))
            out.append((q.format("t", rid="?"), a, b))
        con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    sizes = ap.parse_args().rows
    results = {n: measure(n) for n in sizes}
    for n, rows in results.items():
        ratios = ", ".join(f"`{q}` {b / a:.2f}x" for q, a, b in rows)
        emit.summary(
            f"DuckDB scanning Arrow datasets vs its own parquet reader, {n:,} rows (time ratio)", "-", ratios
        )
    emit.report_follows()
    print(
        f"`python bench/bench_contained_scan.py --rows {' '.join(map(str, sizes))}`, the median of 30 runs "
        f"per query on each side; load average {os.getloadavg()[0]:.2f} at the end.\n"
    )
    head = " | ".join(f"{n:,} rows: parquet / dataset ms | ratio" for n in sizes)
    print(f"| query | {head} |")
    print("|---|" + "---|---|" * len(sizes))
    for i, (q, _, _) in enumerate(results[sizes[0]]):
        cells = " | ".join(
            f"{results[n][i][1]:.2f} / {results[n][i][2]:.2f} | {results[n][i][2] / results[n][i][1]:.2f}"
            for n in sizes
        )
        print(f"| `{q}` | {cells} |")


if __name__ == "__main__":
    main()
