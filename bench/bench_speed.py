"""Issue 14's figures, each as a ratio against its baseline measured in the same run.

1. Queries on the flat `stats`/`tensors` views vs the same query on ONE flat parquet file holding
   the same rows (built here: `COPY (SELECT * FROM stats ORDER BY row_id)` with DuckDB's defaults,
   queried through a view over it, like the catalog's), through the same DuckDB connection: the NaN
   query, `count(*)`, a row-id lookup. Also the query-time views (`stats_resolved`,
   `tensors_resolved`: what `stats`/`tensors` were before), and `Catalog.sql` end to end (it adds
   the query guard). Target: <= 1.2x the flat file.
2. Statistics computed from data vs reading the same files from the page cache (bench_stats).
   Target: >= 50% of the read rate.
3. `Catalog.tensor(row_id)` vs `np.load(mmap_mode='r')` of the same files: median per-call time over
   random ids; and the first call on a freshly opened Catalog. Targets: within 20 us; < 20 ms.
4. Start-up: wall time of `dumpcat ingest` of a 200-file dump (a new process each time) vs the
   interpreter's own start. Target: < 0.5 s.
5. Memory: peak RSS summed over the ingest's process tree (psutil, every 50 ms) vs a process that
   only imports what ingest imports. Target: < 300 MiB.
6. A real MindSpore tree (bench/ms_resnet_tree.py writes one): metadata-only ingest vs a bare walk,
   ingest with statistics vs reading every byte (bench/real_tree.py).

Scales: 10^5 tensors by default; `--scale 1000000 --scale 10000000` on request. A 10^7-row catalog
is ten runs of the 10^6 tree (the dump files exist once; the rows are real ingests), which is also
what a platform catalog of many jobs looks like. `--catalog PATH` runs part 1 on an existing
catalog too, e.g. one of 10^7 rows written by bench/bench_scale.py in a few minutes:

    python bench/bench_scale.py --rows 1e7 --engines duckdb --workdir SCALE_DIR --keep
    python bench/bench_speed.py --only queries --catalog SCALE_DIR/CATALOG --workdir DIR

    python bench/bench_speed.py                                   # 10^5, every part but 6
    python bench/bench_speed.py --scale 1000000 --workdir BIG_DIR --only queries,tensor,memory
    python bench/bench_speed.py --real-tree TREE --only real      # TREE from bench/ms_resnet_tree.py

The report (markdown) is printed; `python -m bench` puts it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import bench_core  # noqa: E402
import emit  # noqa: E402
import synth  # noqa: E402


class Rows:
    """Result rows: part, figure, value, unit, baseline, ratio, target, met."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, part, figure, value, unit, baseline=None, ratio=None, target="", ok=None, note=""):
        row = dict(part=part, figure=figure, value=value, unit=unit, baseline=baseline, ratio=ratio,
                   target=target, ok=ok, note=note)  # fmt: skip
        self.rows.append(row)
        print(self.line(row), flush=True)

    @staticmethod
    def _num(v) -> str:
        if v is None:
            return ""
        if isinstance(v, str):
            return v
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"

    def line(self, r: dict) -> str:
        met = {True: "yes", False: "**no**", None: ""}[r["ok"]]
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        return (
            f"| {r['part']} | {r['figure']} | {self._num(r['value'])} {r['unit']} "
            f"| {self._num(r['baseline'])} | {ratio} | {r['target']} | {met} | {r['note']} |"
        )

    def markdown(self, params: dict) -> str:
        info = bench_core.machine()
        head = [
            f"Measured {time.strftime('%Y-%m-%d')} with `python bench/bench_speed.py {params['argv']}` "
            f"on {info['nproc']} cores ({info['cpu']}), {info['memory_gib']} GiB, Python {info['python']}, "
            f"DuckDB {info['duckdb']}, pyarrow {info['pyarrow']}, numpy {info['numpy']}; "
            f"load average at start {params['load']}.",
            "",
            "| part | figure | dumpcat | baseline | ratio | target | met | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        return "\n".join(head + [self.line(r) for r in self.rows]) + "\n"


def median_ms(fn, runs: int) -> float:
    samples = []
    for i in range(runs + 2):
        t = time.perf_counter()
        fn(i)
        if i >= 2:
            samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e3


# --------------------------------------------------------------------------------------------------
# Trees and catalogs


def tree_of(work: Path, n: int) -> Path:
    tree = work / f"tree_{n}"
    if not (tree / "rank_0").exists():
        s = synth.generate(tree, n, ranks=2, iterations=20)
        print(f"# generated {n:,} tensors in {s.seconds:.1f} s", flush=True)
    return tree


def catalog_of(work: Path, scale: int) -> Path:
    """A catalog of `scale` tensors (and as many statistic rows): one run of a synth tree, or for
    10^7 ten runs of the 10^6 tree."""
    from ingest.pipeline import ingest_dump

    cat = work / f"cat_{scale}"
    if (cat / "snapshot.json").exists():
        return cat
    runs = 10 if scale >= 10_000_000 else 1
    tree = tree_of(work, scale // runs)
    for i in range(runs):
        t = time.perf_counter()
        s = ingest_dump(cat, tree, run=f"run{i}")
        print(f"# ingested run{i}: {s.tensors:,} tensors in {time.perf_counter() - t:.1f} s", flush=True)
    return cat


# --------------------------------------------------------------------------------------------------
# 1. queries


def bench_queries(rows: Rows, cat_path: Path, work: Path, runs: int) -> None:
    from catalog.api import Catalog

    cat = Catalog.open(cat_path)
    cur = cat.cursor()
    n = cur.execute("SELECT count(*) FROM stats").fetchone()[0]
    label = f"{n:,} rows"
    flat = {}
    # inside the catalog's folder: a Catalog's connection may open no file elsewhere (catalog/api.py
    # wall_in), and both sides run on that one connection
    (cat_path / "bench-baseline").mkdir(exist_ok=True)
    for view in ("stats", "tensors"):
        path = cat_path / "bench-baseline" / f"{view}_{n}.parquet"
        if not path.exists():
            cur.execute(f"COPY (SELECT * FROM {view} ORDER BY row_id) TO '{path}' (FORMAT parquet)")
        # queried by name like the catalog's views: a view over the one file
        cur.execute(f"CREATE OR REPLACE TEMP VIEW baseline_{view} AS SELECT * FROM read_parquet('{path}')")
        flat[view] = f"baseline_{view}"
    ids = [r[0] for r in cur.execute("SELECT row_id FROM tensors USING SAMPLE 200 ROWS").fetchall()]
    queries = [
        ("stats", "SELECT op_name FROM {} WHERE nan_count > 0", None),
        ("stats", "SELECT count(*) FROM {}", None),
        ("stats", "SELECT * FROM {} WHERE row_id = ?", True),
        ("tensors", "SELECT * FROM {} WHERE row_id = ?", True),
        ("tensors", "SELECT count(*) FROM {}", None),
    ]
    for view, text, point in queries:
        shown = text.format(view)

        def run(source: str, via_sql: bool = False, text=text, point=point):
            q = text.format(source)

            def go(i: int) -> None:
                params = [ids[i % len(ids)]] if point else None
                if via_sql:
                    cat.sql(q, params)
                else:
                    cur.execute(q, params).fetchall()

            return go

        # interleave the two sides so that machine noise hits both
        ours, base = [], []
        for _ in range(3):
            ours.append(median_ms(run(view), runs))
            base.append(median_ms(run(flat[view]), runs))
        ms, base_ms = statistics.median(ours), statistics.median(base)
        ratio = ms / base_ms
        rows.add("1", f"`{shown}`", ms, "ms", base_ms, ratio, "<= 1.2x one flat file", ratio <= 1.2, label)
        before = median_ms(run(f"{view}_resolved"), runs)
        rows.add("1", "  same on the query-time view (before)", before, "ms", base_ms, before / base_ms,
                 note=label)  # fmt: skip
        end_to_end = median_ms(run(view, via_sql=True), runs)
        rows.add("1", "  same through Catalog.sql (adds the guard)", end_to_end, "ms", base_ms,
                 end_to_end / base_ms, note=label)  # fmt: skip
    _first_anomaly_vs_flat(rows, cur, cat_path / "bench-baseline" / f"stats_{n}.parquet", runs, label)
    cur.close()
    cat.close()


def _view_body(cur, view: str) -> str:
    query = "SELECT sql FROM duckdb_views() WHERE view_name = ? AND NOT internal"
    sql = cur.execute(query, [view]).fetchall()
    return sql[0][0].split(" AS ", 1)[1].rstrip().rstrip(";")


def _sql_view_body(view: str) -> str:
    """The query of `view` as sql/*.sql defines it (a connection's may read other files)."""
    import re

    from ingest.storage.sql_views import view_sql_files

    text = "\n".join(t for _, t in view_sql_files())
    return re.search(rf"CREATE OR REPLACE VIEW {view} AS\s(.*?);", text, re.S).group(1).strip()


def _first_anomaly_vs_flat(rows: Rows, cur, stats_file: Path, runs: int, label: str) -> None:
    """`first_anomaly` against the same SQL (sql/60_first_anomaly.sql, with its `anomalous_tensors`
    inlined) over one flat parquet file of `stats` and `op_feeders` materialized: what the view
    costs beyond its logic. The two must give the same rows."""
    import re

    feeders = stats_file.with_name("op_feeders.parquet")
    cur.execute(f"COPY (SELECT * FROM op_feeders) TO '{feeders}' (FORMAT parquet)")
    # (anomalous_tensors as sql/ defines it: the catalog's reads the stats files' sidecars of NaN/Inf rows)
    anomalous = re.sub(r"\bstats\b", f"read_parquet('{stats_file}')", _sql_view_body("anomalous_tensors"))
    flat = re.sub(r"\banomalous_tensors\b", f"({anomalous})", _view_body(cur, "first_anomaly"))
    flat = re.sub(r"\bop_feeders\b", f"read_parquet('{feeders}')", flat)
    ours_rows = sorted(map(repr, cur.execute("SELECT * FROM first_anomaly").fetchall()))
    assert ours_rows == sorted(map(repr, cur.execute(flat).fetchall())), "the baseline gives other rows"
    ours, base = [], []
    for _ in range(3):  # interleaved
        ours.append(median_ms(lambda i: cur.execute("SELECT * FROM first_anomaly").fetchall(), runs))
        base.append(median_ms(lambda i: cur.execute(flat).fetchall(), runs))
    ms, base_ms = statistics.median(ours), statistics.median(base)
    rows.add("1", "`SELECT * FROM first_anomaly` vs its SQL on one flat stats file + op_feeders materialized",
             ms, "ms", base_ms, ms / base_ms, "<= 1.0x", ms / base_ms <= 1.0, label)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# 3. tensor fetch


def bench_tensor(rows: Rows, cat_path: Path, lookups: int) -> None:
    from catalog.api import Catalog

    cat = Catalog.open(cat_path)
    n = cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()
    sample = cat.sql(f"SELECT row_id, path FROM tensors USING SAMPLE {lookups} ROWS").to_pylist()
    random.Random(0).shuffle(sample)
    cat.close()
    # first call on a fresh Catalog (no views defined, nothing loaded)
    firsts = []
    for r in sample[:5]:
        t = time.perf_counter()
        fresh = Catalog.open(cat_path)
        fresh.tensor(r["row_id"])
        firsts.append((time.perf_counter() - t) * 1e3)
        fresh.close()
    first = statistics.median(firsts)
    rows.add("3", "first `Catalog.tensor` on a freshly opened Catalog (open included)", first, "ms",
             target="< 20 ms", ok=first < 20, note=f"{n:,} tensors, median of 5")  # fmt: skip
    cat = Catalog.open(cat_path)
    for r in sample:  # warm both paths
        cat.tensor(r["row_id"])
        np.load(r["path"], mmap_mode="r")
    per_cat, per_np = [], []
    clock = time.perf_counter_ns
    for r in sample:
        rid, path = r["row_id"], r["path"]
        t = clock()
        cat.tensor(rid)
        t2 = clock()
        np.load(path, mmap_mode="r")
        t3 = clock()
        per_cat.append((t2 - t) / 1e3)
        per_np.append((t3 - t2) / 1e3)
    c, b = statistics.median(per_cat), statistics.median(per_np)
    rows.add("3", f"`Catalog.tensor(row_id)`, median over {len(sample):,} random ids", c, "µs", b, c / b,
             target="<= np.load + 20 µs", ok=c - b <= 20, note=f"+{c - b:.1f} µs; {n:,} tensors")  # fmt: skip
    cat.close()


# --------------------------------------------------------------------------------------------------
# 4. start-up


def bench_startup(rows: Rows, work: Path, repeat: int) -> None:
    tree = work / "tree_200"
    if not (tree / "rank_0").exists():
        synth.generate(tree, 200, ranks=1, iterations=2, statistic_csv=False, workers=1)
    exe = shutil.which("dumpcat", path=str(Path(sys.executable).parent)) or "dumpcat"
    cat = work / "cat_200"

    # As on any installed copy, Python's bytecode cache is used: a shell with PYTHONDONTWRITEBYTECODE
    # would recompile dumpcat's modules on every start (~0.14 s here), which no user pays twice.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def one(cmd: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        return time.perf_counter() - t

    shutil.rmtree(cat, ignore_errors=True)
    one([exe, "ingest", str(tree), "--catalog", str(cat)])  # warm-up: writes the bytecode cache
    walls, bases = [], []
    for _ in range(repeat):
        shutil.rmtree(cat, ignore_errors=True)
        walls.append(one([exe, "ingest", str(tree), "--catalog", str(cat)]))
        bases.append(one([sys.executable, "-c", "pass"]))
    wall, base = statistics.median(walls), statistics.median(bases)
    rows.add("4", "`dumpcat ingest` of a 200-file dump, computed statistics (wall, new process)", wall,
             "s", base, wall / base, "< 0.5 s", wall < 0.5,
             f"baseline: `python -c pass`; median of {repeat}")  # fmt: skip


# --------------------------------------------------------------------------------------------------
# 5. memory


def bench_memory(rows: Rows, work: Path, scale: int) -> None:
    """Peak RSS of an ingest's process tree (bench_core.ingest_in_child samples it with psutil)."""
    tree = tree_of(work, scale)
    nocsv = work / f"nocsv_{scale}"
    cat = work / f"cat_mem_{scale}"
    # The imports' own high-water mark: VmHWM, not ru_maxrss, which Linux carries over exec from
    # the forked copy of this (by now large) process.
    imports = "import catalog.api, ingest.pipeline, ingest.storage.flat, re; "
    hwm = "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"
    base_kib = subprocess.run(
        [sys.executable, "-c", imports + hwm], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    base_mib = int(base_kib) / 1024
    for label, root, computed in (("statistic.csv", tree, False), ("computed statistics", nocsv, True)):
        if computed and not (root / "rank_0").exists():
            synth.generate(root, scale, ranks=2, iterations=20, statistic_csv=False)
        r = bench_core.ingest_in_child(root, cat)
        mib = r["peak_tree_rss_bytes"] / 2**20
        rows.add("5", f"ingest peak RSS, whole process tree, {label}", mib, "MiB", base_mib, mib / base_mib,
                 "< 300 MiB", mib < 300,
                 f"{r['tensors']:,} tensors; baseline: the imports alone")  # fmt: skip
        if r["peak_tree_pss_bytes"]:
            pss = r["peak_tree_pss_bytes"] / 2**20
            rows.add("5", f"  same as PSS (shared pages counted once), {label}", pss, "MiB", base_mib,
                     pss / base_mib, "", None, "the RSS sum counts libraries once per process")  # fmt: skip
    shutil.rmtree(cat, ignore_errors=True)


# --------------------------------------------------------------------------------------------------


def emit_summary(rows: Rows) -> None:
    """The headline figures: every row with a target; part 2's dtypes and sizes as one row, the lowest."""
    stats = [r for r in rows.rows if r["part"] == "2" and r["ratio"] is not None]
    for r in rows.rows:
        if r["target"] and r["part"] != "2":
            ratio = f" ({r['ratio']:.2f}x the baseline's {Rows._num(r['baseline'])})" if r["ratio"] else ""
            note = f", {r['note']}" if r["note"] else ""
            emit.summary(
                f"{r['figure'].strip()}{note}",
                r["target"],
                f"{Rows._num(r['value'])} {r['unit']}{ratio}",
                r["ok"],
            )
    if stats:
        low = min(stats, key=lambda r: r["ratio"])
        emit.summary(
            f"statistics from data vs a page-cache read, {len(stats)} dtypes and sizes",
            ">= 0.5x",
            f"lowest {low['ratio']:.2f}x ({low['figure'].removeprefix('statistics from data, ')})",
            all(r["ok"] for r in stats),
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=int, action="append", help="catalog sizes for parts 1, 3 (default 10^5)")
    p.add_argument("--only", default="queries,stats,tensor,startup,memory", help="parts, comma-separated")
    p.add_argument("--workdir", help="trees and catalogs (default: a temp dir, deleted)")
    p.add_argument("--real-tree", help="a real MindSpore tree for part 6 (bench/ms_resnet_tree.py)")
    p.add_argument("--memory-scale", type=int, help="tensors for part 5 (default: the largest scale)")
    p.add_argument("--query-runs", type=int, default=15)
    p.add_argument("--lookups", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument(
        "--catalog",
        action="append",
        default=[],
        help="also run part 1 on this existing catalog (e.g. bench/bench_scale.py's 10^7 rows, whose "
        "synth tree would need ~42 GB of dump files)",
    )
    a = p.parse_args(argv)
    parts = set(a.only.split(","))
    scales = a.scale or [100_000]
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dumpcat-speed-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    load = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
    rows = Rows()
    try:
        for scale in scales:
            if parts & {"queries", "tensor"}:
                cat = catalog_of(work, scale)
                if "queries" in parts:
                    bench_queries(rows, cat, work, a.query_runs)
                if "tensor" in parts:
                    bench_tensor(rows, cat, a.lookups)
        if "queries" in parts:
            for given in a.catalog:
                bench_queries(rows, Path(given), work, a.query_runs)
        if "stats" in parts:
            import bench_stats

            for r in bench_stats.measure_stats_vs_read(work / "stats"):
                rows.add("2", f"statistics from data, {r['case']}", r["stats_MBps"], "MB/s", r["read_MBps"],
                         r["ratio"], ">= 0.5x page-cache read", r["ratio"] >= 0.5,
                         f"pure-numpy fallback: {r['fallback_MBps']:,.0f} MB/s "
                         f"({r['fallback_ratio']:.2f}x)")  # fmt: skip
        if "startup" in parts:
            bench_startup(rows, work, a.repeat)
        if "memory" in parts:
            bench_memory(rows, work, a.memory_scale or max(scales))
        if "real" in parts and a.real_tree:
            import real_tree

            for r in real_tree.measure_real_tree(Path(a.real_tree), work / "real"):
                rows.add("6", r["figure"], r["value"], r["unit"], r.get("baseline"), r.get("ratio"),
                         note=r.get("note", ""))  # fmt: skip
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    shown_argv = " ".join(x for x in (argv if argv is not None else sys.argv[1:]) if not x.startswith("/"))
    md = rows.markdown({"argv": shown_argv, "load": load})
    emit_summary(rows)
    emit.report_follows()
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
