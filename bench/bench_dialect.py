"""The `dumpcat://` SQLAlchemy dialect's query latency against `Catalog.sql`, on the same queries.

Both run in this process on one synthetic catalog: `Catalog.sql(query, params)` (the guard, a
cursor over the current views, an Arrow table) against an engine connection's
`conn.execute(text(query), params).fetchall()` (SQLAlchemy's compile cache and result rows, the
same guard, catalog.dbapi's DuckDB cursor). Interleaved, best of `--rounds` samples of `--reps`
executions each, for:

- a point lookup by row_id (one row, all 41 columns of `stats`);
- a NaN query (the rows of `stats` with NaN, three columns);
- an aggregate over the `stats` view (count, sum and max per op_type);
- the `first_anomaly` view (a join over steps).

Also measured, for the choice of building the dialect on SQLAlchemy's interfaces rather than on
duckdb-engine: what duckdb-engine 0.17 adds to plain DuckDB on the same queries over an
`export-duckdb` file of the catalog (no guard, a fixed snapshot: what the dialect replaces; that
file's views are slower than a Catalog's, so only the ratio compares), and whether duckdb-engine's
column reflection works on the installed SQLAlchemy.

    python bench/bench_dialect.py [--tensors 20000] [--rounds 7] [--reps 20] [--workdir DIR]
    python bench/bench_dialect.py --tree DUMP   # a catalog of a real dump instead (bench/ms_resnet_tree.py)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from bench import emit, synth  # noqa: E402

TARGET = 1.2  # the dialect's latency at most 1.2x Catalog.sql's

QUERIES = {
    "point lookup by row_id": ("SELECT * FROM stats WHERE row_id = :row_id", True),
    "NaN rows": (
        "SELECT op_name, iteration, nan_count FROM stats WHERE nan_count > 0 ORDER BY row_id",
        False,
    ),
    "aggregate per op_type": (
        "SELECT op_type, count(*) AS n, sum(nan_count) AS nans, max(max) AS top FROM stats GROUP BY op_type",
        False,
    ),
    "first_anomaly view": ("SELECT * FROM first_anomaly ORDER BY run, rank, iteration", False),
}


def qmark(query: str) -> str:
    """The query as Catalog.sql takes it (DuckDB's $name for SQLAlchemy's :name)."""
    return query.replace(":row_id", "$row_id")


def arrow(result: object) -> pa.Table:
    """Catalog.sql's answer as a pyarrow Table (a Table, or a result object with `.arrow()`)."""
    return result.arrow() if hasattr(result, "arrow") else result


def best(fn: Callable[[], object], reps: int) -> float:
    """Seconds per execution over one sample of `reps` executions."""
    started = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - started) / reps


def make_catalog(workdir: Path, tensors: int, dump: Path | None = None) -> Path:
    """A catalog of `dump`, or of a synthetic tree of `tensors` tensors."""
    from catalog.api import Catalog

    tree, cat = workdir / "tree", workdir / "cat"
    shutil.rmtree(workdir, ignore_errors=True)
    if dump is None:
        synth.generate(tree, tensors, iterations=10, nan_fraction=0.02, workers=1)
    Catalog.open(cat, create=True).ingest(dump or tree, run="synth" if dump is None else "real", workers=1)
    return cat


def duckdb_engine_reflection(path: Path) -> str:
    """What duckdb-engine's column reflection does on this SQLAlchemy: 'works' or the error."""
    engine = sa.create_engine(f"duckdb:///{path}", connect_args={"read_only": True})
    try:
        sa.inspect(engine).get_columns("stats")
        return "works"
    except Exception as exc:
        return f"fails: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    finally:
        engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensors", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--tree", type=Path, default=None, help="a real dump to catalog, not a synthetic one")
    args = ap.parse_args()
    what = f"real dump {args.tree.name}" if args.tree else f"synthetic catalog: {args.tensors} tensors"

    from catalog.api import Catalog
    from catalog.export import export_duckdb

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-dialect-"))
    cat_path = make_catalog(workdir / "data", args.tensors, args.tree)
    cat = Catalog.open(cat_path)
    stat_rows = arrow(cat.sql("SELECT count(*) AS n FROM stats")).to_pylist()[0]["n"]
    row_id = arrow(cat.sql("SELECT row_id FROM stats ORDER BY row_id LIMIT 1 OFFSET 100")).to_pylist()[0][
        "row_id"
    ]

    if "dumpcat" not in {e.name for e in importlib.metadata.entry_points(group="sqlalchemy.dialects")}:
        # an install that predates the entry point (pip install -e . again adds it)
        from sqlalchemy.dialects import registry

        registry.register("dumpcat", "catalog.sqlalchemy_dialect", "DumpcatDialect")
    engine = sa.create_engine(f"dumpcat:///{cat_path.absolute()}")
    conn = engine.connect()

    try:
        import duckdb_engine  # noqa: F401

        exported = workdir / "data" / "export.duckdb"
        export_duckdb(cat_path, exported)
        other = sa.create_engine(f"duckdb:///{exported}", connect_args={"read_only": True})
        other_conn = other.connect()
        copy = shutil.copyfile(exported, exported.with_name("copy.duckdb"))  # one configuration per file
        raw = duckdb.connect(str(copy), read_only=True)
        reflection = duckdb_engine_reflection(exported)
    except ImportError:
        other_conn = raw = None
        reflection = "duckdb-engine is not installed"

    times: dict[str, dict[str, list[float]]] = {}
    for name, (query, with_param) in QUERIES.items():
        params = {"row_id": row_id} if with_param else {}
        statement, duck_query = sa.text(query), qmark(query)
        paths: dict[str, Callable[[], object]] = {
            "Catalog.sql": lambda q=duck_query, p=params or None: cat.sql(q, p),
            "dumpcat://": lambda s=statement, p=params: conn.execute(s, p).fetchall(),
        }
        if other_conn is not None:
            paths["duckdb-engine"] = lambda s=statement, p=params: other_conn.execute(s, p).fetchall()
            paths["DuckDB"] = lambda q=duck_query, p=params or None: raw.execute(q, p).fetchall()
        for fn in paths.values():  # warm: compile caches, views bound, parquet footers cached
            fn()
        samples: dict[str, list[float]] = {path: [] for path in paths}
        for _ in range(args.rounds):
            for path, fn in paths.items():
                samples[path].append(best(fn, args.reps))
        times[name] = samples

    def fresh_catalog() -> None:
        Catalog.open(cat_path).sql("SELECT 1 AS one")

    def fresh_engine() -> None:
        e = sa.create_engine(f"dumpcat:///{cat_path.absolute()}")
        with e.connect() as c:
            c.execute(sa.text("SELECT 1 AS one")).fetchall()
        e.dispose()

    first = {"Catalog.open + sql": [], "create_engine + connect + execute": []}
    for _ in range(args.rounds):
        first["Catalog.open + sql"].append(best(fresh_catalog, 1))
        first["create_engine + connect + execute"].append(best(fresh_engine, 1))

    conn.close()
    engine.dispose()
    if raw is not None:
        raw.close()
        other_conn.close()
    shutil.rmtree(workdir / "data", ignore_errors=True)

    print(f"{what}, {stat_rows} stats rows; best of {args.rounds} x {args.reps}")
    emit.report_follows()
    print("```text")
    print(f"{what}, {stat_rows} stats rows; ms per query, best of "
          f"{args.rounds} samples of {args.reps}")  # fmt: skip
    print(f"{'':<24} {'the catalog':^30} {'an export-duckdb file':^30}".rstrip())
    print(f"{'query':<24} {'Catalog.sql':>11} {'dumpcat://':>11} {'ratio':>6} "
          f"{'DuckDB':>9} {'duckdb-engine':>13} {'ratio':>6}")  # fmt: skip
    ratios = {}
    for name, samples in times.items():
        ours, base = min(samples["dumpcat://"]), min(samples["Catalog.sql"])
        ratios[name] = ours / base
        other = "-"
        if "duckdb-engine" in samples:
            engine_s, raw_s = min(samples["duckdb-engine"]), min(samples["DuckDB"])
            other = f"{raw_s * 1e3:9.2f} {engine_s * 1e3:13.2f} {engine_s / raw_s:5.2f}x"
        print(f"{name:<24} {base * 1e3:11.2f} {ours * 1e3:11.2f} {ratios[name]:5.2f}x {other}")
    open_ms = {k: min(v) * 1e3 for k, v in first.items()}
    print("new connection to a first answer, ms:")
    for label, ms in open_ms.items():
        print(f"  {label:<36} {ms:7.1f}")
    print(f"duckdb-engine column reflection (SQLAlchemy {sa.__version__}): {reflection}")
    print("```")
    worst = max(ratios, key=ratios.get)
    emit.summary(
        "`dumpcat://` dialect query latency vs `Catalog.sql`, same queries in one process (worst of "
        f"{len(ratios)}: {worst})",
        f"<= {TARGET}x",
        ", ".join(f"{name} {r:.2f}x" for name, r in ratios.items()),
        max(ratios.values()) <= TARGET,
    )


if __name__ == "__main__":
    main()
