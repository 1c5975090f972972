"""What opening a catalog costs before its first answer: the views of sql/*.sql.

A connection needs the views and macros of sql/*.sql. DuckDB binds each one when it is created,
expanding the views it reads; the 32 table macros of sql/95_watch.sql over the full `stats` view
were most of it. `define_sql_views` lets the files after 30_tensors.sql and 40_stats.sql bind
against empty stand-ins of those two views (ingest/storage/sql_views.py), and a snapshot's views
are defined once into the catalog's views/ folder, which later connections attach
(catalog/views.py `use_views`). Measured here, interleaved, in one process:

- the definition as `define_sql_views` does it, against the naive loop (each file executed as it
  is), CPU seconds on a fresh connection over empty relations;
- `use_views` on a fresh connection when the snapshot's views database exists, and the first
  query's CPU after it (DuckDB binds a view when a query reads it), against defining the views on
  that connection and the same first query;
- making a new snapshot's views database (what the first reader of every snapshot pays) from the
  cached template of definitions (ingest/storage/definitions_cache.py) against defining them all
  into a new file, CPU;
- the writer's DuckDB (ingest/storage/flat.py `open_writer_connection`, once per one-shot batch)
  with its resolution views attached from the cache against defining them, CPU;
- a fresh process running `dumpcat sql CAT "SELECT count(*) FROM stats"` on the committed nan_log
  dump against a bare `python -c "import duckdb, pyarrow; duckdb.sql('SELECT 1')"` (wall seconds);
- in a fresh process, after `from catalog import Catalog` (the package itself imports lazily;
  this imports DuckDB and pyarrow): `Catalog.open(CAT).tensor(row_id)`, the first tensor
  (milliseconds; the target is 20), against `np.load(its file, mmap_mode="r")` in that process.

    python bench/bench_open.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from bench import emit  # noqa: E402
from ingest.storage.schema import TABLES  # noqa: E402
from ingest.storage.sql_views import define_sql_views, view_sql_files  # noqa: E402


def _fresh() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table, schema in TABLES.items():
        con.register(f"raw_{table}", schema.empty_table())
    return con


def naive(con: duckdb.DuckDBPyConnection) -> None:
    for _name, text in view_sql_files():
        con.execute(text)


def cpu(define) -> float:
    con = _fresh()
    started = time.process_time()
    define(con)
    took = time.process_time() - started
    con.close()
    return took


def first_answer(cat: Path, attach: bool) -> float:
    """CPU seconds from a fresh connection to the first answer of a stats query."""
    from catalog.views import define_views, use_views
    from ingest.storage.store import CatalogStore

    store = CatalogStore(cat)
    snap = store.union_snapshot()
    files, flat, full = store.table_files(snap), store.flat_files(snap), store.full_schema_tables(snap)
    con = duckdb.connect()
    started = time.process_time()
    if attach:
        use_views(con, cat, files, flat, full)
    else:
        define_views(con, files, flat, full)
    con.execute("SELECT count(*) FROM stats").fetchall()
    took = time.process_time() - started
    con.close()
    return took


def new_views_database(cat: Path, template: bool) -> float:
    """CPU seconds to make a snapshot's views database (catalog/views.py `_write_views_database`),
    from the cached template or defining every view (as without a cache)."""
    import os

    from catalog import views
    from ingest.storage.store import CatalogStore

    store = CatalogStore(cat)
    snap = store.union_snapshot()
    files, flat, full = store.table_files(snap), store.flat_files(snap), store.full_schema_tables(snap)
    folder = Path(tempfile.mkdtemp(prefix="bench-views-"))
    saved = os.environ.get("DUMPCAT_CACHE_DIR")
    if not template:
        os.environ["DUMPCAT_CACHE_DIR"] = str(folder / "a-file" / "cache")  # unusable: no cache
        (folder / "a-file").write_text("")
    try:
        started = time.process_time()
        views._write_views_database(folder, folder / "v.duckdb", files, flat, full)
        return time.process_time() - started
    finally:
        if saved is None:
            os.environ.pop("DUMPCAT_CACHE_DIR", None)
        else:
            os.environ["DUMPCAT_CACHE_DIR"] = saved


def writer_connection(cached: bool) -> float:
    """CPU seconds to open the writer's DuckDB with its resolution views, attached from the cache
    or defined (`flat._writer_views_database` returning None, as without a cache)."""
    from ingest.storage import flat

    original = flat._writer_views_database
    if not cached:
        flat._writer_views_database = lambda rebuild=False: None
    try:
        started = time.process_time()
        con = flat.open_writer_connection()
        con.execute("SELECT count(*) FROM tensors_resolved").fetchall()
        took = time.process_time() - started
    finally:
        flat._writer_views_database = original
    con.close()
    return took


def wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - started


# After `from catalog import Catalog`: the first tensor of a fresh Catalog, then np.load of its file (ms).
FIRST_TENSOR = """
import sys, time
import numpy as np
from catalog import Catalog
started = time.perf_counter()
cat = Catalog.open(sys.argv[1])
cat.tensor(int(sys.argv[2]))
first = time.perf_counter() - started
path = str(cat.locate(int(sys.argv[2]))[0])
started = time.perf_counter()
np.load(path, mmap_mode="r")
print(first * 1000, (time.perf_counter() - started) * 1000)
"""


def first_tensor(cat: Path, row_id: int) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", FIRST_TENSOR, str(cat), str(row_id)], check=True,
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    first, load = out.stdout.split()
    return float(first), float(load)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from catalog import Catalog
    from tests.conftest import dump_of

    cat = Path(tempfile.mkdtemp(prefix="bench-open-")) / "cat"
    Catalog.open(cat, create=True).ingest(dump_of("nan_log"), run="nan_log")
    bare = [sys.executable, "-c", "import duckdb, pyarrow; duckdb.sql('SELECT 1').fetchall()"]
    query = [sys.executable, "-m", "catalog.cli", "sql", str(cat), "SELECT count(*) FROM stats"]
    times: dict[str, list[float]] = {
        "naive": [], "stand-ins": [], "define": [], "attach": [], "bare": [], "dumpcat sql": [],
        "views file, defined": [], "views file, template": [], "writer, defined": [], "writer, cached": [],
        "first tensor": [], "np.load": [],
    }  # fmt: skip
    row_id = Catalog.open(cat).sql("SELECT min(row_id) FROM tensors").column(0)[0].as_py()
    new_views_database(cat, template=True)  # (the cached files made once, outside the timing)
    writer_connection(cached=True)
    for _ in range(args.rounds):
        times["naive"].append(cpu(naive))
        times["stand-ins"].append(cpu(define_sql_views))
        times["define"].append(first_answer(cat, attach=False))
        times["attach"].append(first_answer(cat, attach=True))
        times["views file, defined"].append(new_views_database(cat, template=False))
        times["views file, template"].append(new_views_database(cat, template=True))
        times["writer, defined"].append(writer_connection(cached=False))
        times["writer, cached"].append(writer_connection(cached=True))
        times["bare"].append(wall(bare))
        times["dumpcat sql"].append(wall(query))
        first, load = first_tensor(cat, row_id)
        times["first tensor"].append(first)
        times["np.load"].append(load)
    med = {k: statistics.median(v) for k, v in times.items()}
    pairs = [
        (f"views of sql/*.sql, CPU s (median of {args.rounds}):",
         ("naive loop", "naive"), ("define_sql_views", "stand-ins"), "the naive loop"),
        ("fresh connection to the first answer of a stats query, CPU s:",
         ("define the views", "define"), ("attach views file", "attach"), "defining them"),
        ("a new snapshot's views database, CPU s:",
         ("define every view", "views file, defined"), ("from the template", "views file, template"),
         "defining them"),
        ("the writer's DuckDB with its resolution views, to a first query, CPU s:",
         ("define the views", "writer, defined"), ("attach cached views", "writer, cached"), "defining them"),
    ]  # fmt: skip
    for title, (base_label, base), (label, key), versus in pairs:
        print(title)
        print(f"  {base_label:<19} {med[base]:.3f}")
        print(f"  {label:<19} {med[key]:.3f}   {med[key] / med[base]:.2f}x {versus}")
    print("fresh process, wall s:")
    print(f"  bare duckdb+pyarrow {med['bare']:.3f}")
    print(f"  dumpcat sql         {med['dumpcat sql']:.3f}   {med['dumpcat sql'] / med['bare']:.2f}x bare")
    print("fresh process after `from catalog import Catalog`, ms:")
    print(f"  np.load(mmap_mode='r') of the file  {med['np.load']:.1f}")
    print(f"  open + first Catalog.tensor         {med['first tensor']:.1f}   (target: 20)")
    shutil.rmtree(cat.parent, ignore_errors=True)
    ratio = med["dumpcat sql"] / med["bare"]
    emit.summary(
        '`dumpcat sql CAT "SELECT count(*) FROM stats"` in a new process vs a bare duckdb+pyarrow process',
        "<= 1.5x",
        f"{ratio:.2f}x ({med['dumpcat sql']:.3f} s vs {med['bare']:.3f} s)",
        ratio <= 1.5,
    )
    emit.summary(
        "first `Catalog.tensor` in a fresh process after `from catalog import Catalog` (opening included)",
        "<= 20 ms",
        f"{med['first tensor']:.1f} ms (np.load: {med['np.load']:.1f} ms)",
        med["first tensor"] <= 20,
    )
    emit.summary(
        "a fresh connection's views to its first answer, CPU: attaching the views file vs defining them",
        "",
        f"{med['attach'] / med['define']:.2f}x ({med['attach']:.3f} s vs {med['define']:.3f} s)",
    )


if __name__ == "__main__":
    main()
