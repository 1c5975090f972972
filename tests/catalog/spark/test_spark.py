"""Spark over the catalog, in one module so that one local session (PySpark allows one per process; its
driver JVM outlives stop()), one standalone master + worker and one set of ingested catalogs serve every test:
every local-mode test runs first (pytest orders the tests by the `spark` fixture's parameter), then those
that also run on a standalone master + worker started on 127.0.0.1 from the pyspark package's own scripts.

Spark SQL (catalog/spark/spark_sql.py): every view DuckDB defines gives the same rows in Spark local mode,
over one catalog holding a committed dump of every producer and layout (tests/ingest/storage/test_flat.py
SPARK_ROOTS).

Rows are compared as multisets (order-insensitive), column names in order, values exactly after
this normalisation: NaN equals NaN (Python's NaN does not), timestamps are compared as UTC instants
(Spark hands back naive local times), DECIMALs as floats, lists as tuples and structs as sorted
(name, value) pairs. Nothing else is rounded or relaxed: floats must be bit-equal (-0.0 = 0.0).

Heavy work as Spark jobs (catalog/spark/jobs.py, catalog/missing_stats.py): `dumpcat stats` and `dumpcat
compare` give the same rows computed locally, as Spark tasks in local mode and on the standalone cluster,
over real committed dumps. `dumpcat stats` on a catalog ingested with --no-stats must end with exactly the
`stats`, `tensor_stats` and `ingest_errors` rows an ingest with statistics writes; a compare with --spark
must add exactly the `comparisons` rows the local compare adds (the time of the comparison aside).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java (openjdk-17-jre-headless)", allow_module_level=True)

import duckdb  # noqa: E402

from catalog.api import Catalog  # noqa: E402
from catalog.spark import spark_sql as dspark  # noqa: E402
from catalog.spark.jobs import check_master_url, pack_tasks, task_bounds  # noqa: E402
from ingest.pipeline import ingest_dump  # noqa: E402
from ingest.storage.store import CatalogStore, CatalogWarning, shard_path  # noqa: E402
from tests.catalog.cli.in_process import dumpcat_in_process  # noqa: E402
from tests.compare import catalog_content  # noqa: E402
from tests.conftest import DATA, REPO, _free_port, as_written_before_flat_files, dump_of  # noqa: E402
from tests.ingest.storage.test_flat import SPARK_ROOTS, _run_name  # noqa: E402
from tests.replay import make_stat_csv_tree  # noqa: E402
from tests.writers.ascend_tree import write_tree  # noqa: E402

# DuckDB views Spark does not get, and why.
EXCLUDED = {
    "dumpcat_views_defined": "bookkeeping of catalog/views.py (marks a DuckDB connection whose views "
    "are defined), not a view of the catalog",
}

CAST, BASE = "ms210-compare-cast-dump", "ms210-compare-base-dump"
FP16, FP32 = "msprobe-compare_fp16", "msprobe-compare_fp32"

# Calls of the table macros with parameters: every macro DuckDB cannot run with its defaults, and
# some parameters of those it can (those run with their defaults as views, in both modes).
CALLS: dict[str, list[tuple[tuple, dict]]] = {
    "first_divergence": [((), {"cosine_min": 0.999, "inputs": True, "unmatched": True, "max_rel": 0.01})],
    "compare_stats": [((FP16, FP32), {}), ((CAST, BASE), {})],
    "first_stat_divergence": [((FP16, FP32), {}), ((CAST, BASE), {"max_rel": 0.001})],
    "watch_nonfinite": [((), {"target_type": "weight", "nan": False, "l2norm_gt": 1})],
    "watch_values": [((), {"target_type": "activation", "max_gt": 0.5, "abs_mean_lt": 0.01})],
    "watch_tensor_too_large": [((), {"max_gt": 1.0, "abs_mean_gt": 0.5, "l2norm_gt": 10, "mean_gt": 0.1})],
    "watch_weight_too_large": [((), {"abs_mean_gt": 0.01})],
    "watch_gradient_too_large": [((), {"max_gt": 0.01})],
    "watch_tensor_too_small": [((), {"abs_mean_lt": 0.01, "min_lt": -1})],
    "watch_weight_too_small": [((), {"l2norm_lt": 1})],
    "watch_gradient_vanishing": [((), {"abs_mean_lt": 0.001, "mean_lt": 0})],
    "watch_zero": [((), {"target_type": "gradient", "zero_percentage_ge": 1, "first_iteration_only": True})],
    "watch_range": [
        ((), {"target_type": "weight", "range_start_inclusive": 0, "range_end_inclusive": 0.5,
              "range_percentage_gt": 10, "max_min_lt": 0.1}),
    ],
    "watch_tensor_range": [
        ((), {"range_start_inclusive": -1, "range_end_inclusive": 1, "range_percentage_lt": 50}),
    ],
    "watch_activation_range": [((), {"max_min_gt": 1})],
    "watch_unchanged": [((), {"target_type": "gradient", "rtol": 0.1, "equal_nan": True})],
    "watch_change_ratio": [((), {"target_type": "activation", "abs_mean_update_ratio_gt": 0.5})],
}  # fmt: skip


# -- the catalog -------------------------------------------------------------------------------------


def _with_kernel_args(dest: Path) -> Path:
    """The `simple` sample with a kernel-args file and one that is not an object (as in
    tests/ingest/test_bad_input.py): kernel_args rows and an ingest_errors row."""
    shutil.copytree(dump_of("simple"), dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    it = dest / "rank_0" / "Net" / "0" / "0"
    name = "MatMul.Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0.json"
    (it / name).write_text('{\n    "transpose_a": "False",\n    "transpose_b": "True"\n}')
    (it / "Add.Default_Add-op0.json").write_text("[1, 2]")
    return dest


def _with_overflow(dest: Path) -> Path:
    """A raw Ascend tree with an overflow record naming its Conv2D launch and a garbled one
    (test_ascend_raw.py): overflows rows joined to an operator, and an ingest_errors row."""
    write_tree(DATA / "ms210" / "kernels_filter" / "dump", dest)
    leaf = next(p for p in dest.glob("rank_0/Net/*/*") if p.is_dir())
    conv = next(p for p in leaf.iterdir() if p.name.startswith("Conv2D"))
    op_type, op_name, _, _, ts = conv.name.removesuffix(".bin").split(".")
    conv.rename(leaf / f"{op_type}.{op_name}.42.3.{ts}")
    zero = dict.fromkeys(("model_id", "stream_id", "task_id", "task_type", "status"), 0)
    zero |= {"pc_start": "0x0", "para_base": "0x0"}
    record = {
        "DHA Atomic Add": zero,
        "L2 Atomic Add": zero,
        "AI Core": {"model_id": 1, "stream_id": 3, "task_id": 42, "task_type": 2, "status": 16,
                    "pc_start": "0x12c000001000", "para_base": "0x12c008000000"},
    }  # fmt: skip
    (leaf / "Opdebug.Node_OpDebug.99.1.1795302834999000.output.0.json").write_text(json.dumps(record))
    (leaf / "Opdebug.Node_OpDebug.98.1.1795302834998000.output.0.json").write_text("{not json")
    return dest


def _hosts(base: Path) -> list[Path]:
    """Two host roots of one run, each with one rank of the nan_log sample (tests/ingest/test_shards.py):
    written by two named writers, so the catalog holds shards and a run with two dump roots."""
    roots = []
    for rank in (0, 1):
        root = base / f"host{rank}" / "dump"
        shutil.copytree(dump_of("nan_log") / "rank_0", root / f"rank_{rank}")
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        roots.append(root)
    return roots


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str | None, Path]]:
    """(dump root, run, writer) of every catalog of this module but the small ones: every committed dump
    tree (as tests/ingest/storage/test_flat.py ingests them: each producer and layout); the nan_log dump
    with a statistic.csv in each iteration folder whose rows of one folder stop half way (tensors with a
    producer's row and tensors without, side by side); the trees above (the last run by two writers:
    shards)."""
    tmp = tmp_path_factory.mktemp("trees")
    tree = make_stat_csv_tree(dump_of("nan_log"), tmp / "statcsv" / "dump")
    csv = sorted(tree.rglob("statistic.csv"))[0]
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[: len(lines) // 2]))
    roots = [(root, _run_name(root), None) for root in SPARK_ROOTS]
    roots.append((tree, "statcsv", None))
    roots.append((_with_kernel_args(tmp / "kernel_args"), "kernel_args", None))
    roots.append((_with_overflow(tmp / "overflow"), "overflow", None))
    roots += [(root, "sharded", f"host{k}") for k, root in enumerate(_hosts(tmp))]
    return roots


def _ingest_all(path: Path, trees: list, *, compute_stats: bool) -> Path:
    CatalogStore(path, create=True)
    for root, run, writer in trees:
        ingest_dump(path, root, run=run, compute_stats=compute_stats, workers=1, writer=writer)
    return path


@pytest.fixture(scope="module")
def catalog(trees, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One catalog: the trees ingested with statistics (what `dumpcat stats` must end with: `expected`),
    and `dumpcat compare` of the cast/base pair (which the statistics' queries do not read)."""
    path = _ingest_all(tmp_path_factory.mktemp("spark_catalog") / "cat", trees, compute_stats=True)
    with Catalog.open(path) as cat:
        assert cat.compare(CAST, BASE, workers=1).pairs > 0
    return path


# The `spark` fixture (local[2], then a standalone master + worker on 127.0.0.1) is in tests/conftest.py.


@pytest.fixture(scope="module")
def registered(spark, catalog: Path) -> list[str]:
    start = time.monotonic()
    names = dspark.register_views(spark, catalog)
    print(f"register_views: {len(names)} views in {time.monotonic() - start:.1f} s")
    return names


# -- comparison --------------------------------------------------------------------------------------


def _normal(value):
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normal(v)) for k, v in value.items()))
    return value


def _duckdb_rows(cat: Catalog, query: str) -> tuple[list[str], Counter]:
    table = cat.sql(query)
    return table.column_names, Counter(tuple(_normal(v) for v in row.values()) for row in table.to_pylist())


def _spark_rows(df) -> tuple[list[str], Counter]:
    rows = (tuple(_normal(v) for v in row.asDict(recursive=True).values()) for row in df.collect())
    return df.columns, Counter(rows)


def _assert_same(what: str, duck: tuple[list[str], Counter], spark: tuple[list[str], Counter]) -> None:
    (dcols, drows), (scols, srows) = duck, spark
    assert scols == dcols, f"{what}: columns differ"
    if drows != srows:
        only_duck = list((drows - srows).elements())[:3]
        only_spark = list((srows - drows).elements())[:3]
        pytest.fail(f"{what}: {sum(drows.values())} rows in DuckDB, {sum(srows.values())} in Spark; "
                    f"DuckDB only: {only_duck}; Spark only: {only_spark}")  # fmt: skip


def _duckdb_views(cat: Catalog) -> list[str]:
    with cat.cursor() as cur:
        rows = cur.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = current_database() "
            "ORDER BY view_name"
        ).fetchall()
    return [r[0] for r in rows]


def _duckdb_table_macros(cat: Catalog) -> set[str]:
    with cat.cursor() as cur:
        rows = cur.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_type = 'table_macro' AND NOT internal"
        ).fetchall()
    return {r[0] for r in rows}


def _duckdb_call(name: str, args: tuple, kwargs: dict) -> str:
    """The DuckDB call of a macro with the literals catalog.spark.spark_sql gives Spark."""
    parts = [dspark._literal(a).sql("duckdb") for a in args]
    parts += [f"{k} := {dspark._literal(v).sql('duckdb')}" for k, v in kwargs.items()]
    return f"SELECT * FROM {name}({', '.join(parts)})"


# -- tests -------------------------------------------------------------------------------------------


# Local mode only: the standalone cluster (executors without dumpcat, reading the catalog's files
# themselves) is exercised by the jobs' tests below, whose statistics and comparisons run there;
# every view again on the cluster cost two minutes of CI and no other code path.
@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_every_view_gives_the_rows_duckdb_gives(spark, registered, catalog):
    """Every view of the DuckDB catalog (enumerated from DuckDB, so a new view cannot be missed),
    and the raw tables, hold the same rows in Spark; most hold rows."""
    with Catalog.open(catalog) as cat:
        views = _duckdb_views(cat)
        assert set(EXCLUDED) <= set(views), "an excluded view no longer exists: drop it from EXCLUDED"
        wanted = [v for v in views if v not in EXCLUDED]
        assert set(wanted) <= set(registered), f"not registered in Spark: {set(wanted) - set(registered)}"
        # Spark runs two views' jobs at once (its driver waits on its scheduler between a job's
        # stages: one at a time left a core idle); DuckDB's rows are read here meanwhile.
        with ThreadPoolExecutor(2, thread_name_prefix="spark-collect") as pool:
            collected = {view: pool.submit(_spark_rows, spark.table(view)) for view in wanted}
            empty = []
            for view in wanted:
                duck = _duckdb_rows(cat, f"SELECT * FROM {view}")
                _assert_same(view, duck, collected[view].result())
                if not duck[1]:
                    empty.append(view)
    # only views of features the samples do not have are empty
    assert set(empty) <= {"first_divergence"}, empty
    assert {"stats", "tensors", "first_anomaly", "overflows", "kernel_args", "ingest_errors"}.isdisjoint(
        empty
    )


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_macros_with_defaults_are_views_with_the_macros_rows(spark, registered, catalog):
    """A table macro DuckDB runs with no arguments is a Spark view of the same name and rows; the
    others (they need a threshold or two run names) are not registered. Local mode: the expansion
    does not depend on where Spark runs (the views of sql/*.sql run in both modes)."""
    with Catalog.open(catalog) as cat:
        macros = _duckdb_table_macros(cat)
        as_views = [name for name in registered if name in macros]
        assert "first_divergence" in as_views and "watch_nan_inf" in as_views
        for name in macros - set(as_views):
            with pytest.raises(duckdb.Error):
                cat.sql(f"SELECT * FROM {name}()")
        for name in as_views:
            duck = _duckdb_rows(cat, f"SELECT * FROM {name}()")
            _assert_same(f"{name}()", duck, _spark_rows(spark.table(name)))


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_every_table_macro_is_checked(spark, registered, catalog):
    """Each table macro runs in Spark as a view (its defaults) or in CALLS (a new macro that needs
    parameters fails here until it is listed)."""
    with Catalog.open(catalog) as cat:
        macros = _duckdb_table_macros(cat)
    assert macros == set(dspark.macro_names())
    assert macros - set(registered) <= set(CALLS), macros - set(registered) - set(CALLS)
    assert set(CALLS) <= macros


@pytest.mark.parametrize("spark", ["local"], indirect=True)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_table_macro_calls_give_the_rows_duckdb_gives(spark, registered, catalog, name):
    """Each table macro, called with parameters, through `table_macro` (in local mode, as the other
    tests marked so: the expansion does not depend on where Spark runs; the views run in both)."""
    with Catalog.open(catalog) as cat:
        for args, kwargs in CALLS[name]:
            query = _duckdb_call(name, args, kwargs)
            got = _spark_rows(dspark.table_macro(spark, name, *args, **kwargs))
            _assert_same(query, _duckdb_rows(cat, query), got)


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_bad_macro_parameters_raise_the_macros_message(spark, registered, catalog):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    bad = [
        ("watch_tensor_too_large", {}, "tensor_too_large: give at least one threshold parameter"),
        ("watch_values", {"target_type": "bogus", "max_gt": 1}, "target_type must be tensor, weight, gradie"),
        ("watch_unchanged", {"rtol": -1}, "rtol must be a finite number >= 0, got -1"),
    ]
    with Catalog.open(catalog) as cat:
        for name, kwargs, message in bad:
            with pytest.raises(duckdb.Error, match=message):
                cat.sql(_duckdb_call(name, (), kwargs))
            with pytest.raises((PySparkException, Py4JJavaError), match=message):  # (3.5: the latter)
                dspark.table_macro(spark, name, **kwargs).collect()
    with pytest.raises(TypeError, match="needs baseline_name"):
        dspark.macro_sql("compare_stats", "a")
    with pytest.raises(TypeError, match="no parameter 'max_gtt'"):
        dspark.macro_sql("watch_tensor_too_large", max_gtt=1)


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_printf_g_is_written_as_c_writes_it(spark, registered):
    """%g in the watch macros' `detail` (a Python UDF: C's rounding of the binary value, which
    Java's Formatter does not give) against DuckDB's printf, on float16/float32/float64 values,
    binary ties, decimal ties that are not exact in binary, carries and the exponent bounds."""
    rng = random.Random(15)
    values = [0.0, -0.0, 1.390625, 0.1328125, 9.999995, 999999.5, 9999995.0, 123456.5, 0.0001, 1e-5, 99999.95,
              123456789.0, 1e100, -1e-300, 5e-324, 1.7976931348623157e308, 0.5, 1e5, 1e6, 1 / 3, -2.5, 12.5,
              math.inf, -math.inf, math.nan, None]  # fmt: skip
    values += [100 * (n - 1) / n for n in (160, 3125, 6400, 16000, 32000, 80000, 2**20)]
    values += [float(np.float16(rng.uniform(-100, 100))) for _ in range(200)]
    values += [float(np.float32(rng.uniform(-1, 1)) * 10 ** rng.randint(-8, 8)) for _ in range(200)]
    values += [rng.uniform(-1e7, 1e7) for _ in range(200)]
    con = duckdb.connect()
    want = [row[0] for row in con.execute("SELECT printf('%g', unnest(?::DOUBLE[]))", [values]).fetchall()]
    con.close()
    df = spark.createDataFrame(list(enumerate(values)), "i INT, v DOUBLE")
    got = [row.g for row in df.selectExpr("i", f"{dspark.FORMAT_G}(v) AS g").orderBy("i").collect()]
    assert [(v, w, g) for v, w, g in zip(values, want, got, strict=True) if w != g] == []


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_catalog_written_before_flat_files_reads_at_query_time(spark, registered, tmp_path):
    """A catalog with no flat files and no schema ids, one of whose batches lacks newer columns: the
    raw tables read those columns as NULL and `tensors`/`stats` resolve at query time, as in DuckDB."""
    path = tmp_path / "old"
    ingest_dump(path, DATA / "ms210" / "nan_log" / "dump", run="old", workers=1)
    as_written_before_flat_files(path)
    store = CatalogStore(path)
    for table, column in (("tensors", "source_row_id"), ("rank_meta", "ingested_at")):
        file = store.table_files()[table][0]
        pq.write_table(pq.read_table(file).drop_columns([column]), file)
    session = spark.newSession()  # its own temporary views
    read = ("raw_tensors", "raw_rank_meta", "rank_metadata", "tensors", "stats", "first_anomaly")
    names = dspark.register_views(session, path, views=list(read))  # and what they read
    assert set(read) < set(names) < set(registered)
    with pytest.raises(KeyError, match="no dumpcat view nope"):
        dspark.register_views(session, path, views=["stats", "nope"])
    with Catalog.open(path) as cat:
        assert cat.store.flat_files() is None
        for view in read:
            assert view in names
            duck = _duckdb_rows(cat, f"SELECT * FROM {view}")
            spark_rows = _spark_rows(session.table(view))
            if view.startswith("raw_"):  # DuckDB puts the columns older files lack last
                cols, rows = duck[0], Counter()
                for row, n in spark_rows[1].items():
                    by_name = dict(zip(spark_rows[0], row, strict=True))
                    rows[tuple(by_name[c] for c in cols)] = n
                spark_rows = (cols, rows)
            _assert_same(view, duck, spark_rows)
    assert "flat" not in json.loads((path / "snapshot.json").read_text())


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_spark_sql_of_a_view_is_spark_sql(spark, registered):
    """The translation is inspectable (and what docs/scale-out.md describes): DuckDB-only syntax is gone."""
    text = dspark.spark_sql("first_anomaly")
    assert "DISTINCT ON" not in text and "ROW_NUMBER()" in text
    assert "TRANSFORM(ARRAY_SORT(COLLECT_LIST(NAMED_STRUCT(" in dspark.spark_sql("op_feeders")
    assert "printf" not in dspark.macro_sql("watch_tensor_too_large", max_gt=1).lower()


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_a_damaged_shard_is_left_out_with_a_warning(spark, tmp_path):
    """A writer's shard whose snapshot is damaged: `register_views` warns, naming it, and the views
    hold the other shards' rows, as DuckDB's do (it used to fail for the whole catalog)."""
    path = tmp_path / "cat"
    for k, root in enumerate(_hosts(tmp_path)):
        ingest_dump(path, root, run="sharded", workers=1, writer=f"host{k}")
    snap = path / shard_path("sharded", "host1") / "snapshot.json"
    snap.write_text(snap.read_text()[:200])
    session = spark.newSession()
    read = ("tensors", "stats", "first_anomaly", "runs", "raw_tensors")
    with pytest.warns(CatalogWarning, match="shard writer=host1 of run 'sharded' is left out"):
        dspark.register_views(session, path, views=list(read))  # and what they read
    with pytest.warns(CatalogWarning), Catalog.open(path) as cat:
        for view in read:
            duck = _duckdb_rows(cat, f"SELECT * FROM {view}")
            assert duck[1], view
            _assert_same(view, duck, _spark_rows(session.table(view)))
        assert cat.sql("SELECT DISTINCT rank FROM tensors").column(0).to_pylist() == [0]


# == Spark jobs: `dumpcat stats` and `dumpcat compare` ==============================================

ROOT = REPO
COMPARE = DATA / "ms210" / "compare"

# What must be equal: every statistic users see, dumpcat's rows behind them, and the errors.
STATS_QUERIES = (
    "SELECT * FROM stats ORDER BY ALL",
    "SELECT * FROM raw_tensor_stats ORDER BY ALL",
    "SELECT run, path, stage, reason, file_size FROM ingest_errors ORDER BY ALL",
    "SELECT count(*) AS n FROM tensors",
)
COMPARE_QUERIES = (
    "SELECT * EXCLUDE (compared_at) FROM comparisons ORDER BY ALL",
    "SELECT * EXCLUDE (compared_at) FROM raw_comparisons ORDER BY ALL",
)


def _cli(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """`dumpcat ARGS` in a new process, importing this checkout's dumpcat."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", *args], capture_output=True, text=True, env=env, **kwargs
    )
    if check:
        assert proc.returncode == 0, (args, proc.stderr)
    return proc


def _batches(path: Path, table: str) -> int:
    snap = json.loads((path / "snapshot.json").read_text())
    return sum(1 for b in snap["batches"] if table in b["tables"])


# -- catalogs --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_stats_master(trees, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trees of `catalog` ingested with --no-stats (tests work on copies: `no_stats`)."""
    return _ingest_all(tmp_path_factory.mktemp("no_stats") / "cat", trees, compute_stats=False)


@pytest.fixture
def no_stats(no_stats_master: Path, tmp_path: Path) -> Path:
    """A copy of the --no-stats catalog (paths in a snapshot are relative to the catalog)."""
    return Path(shutil.copytree(no_stats_master, tmp_path / "cat"))


@pytest.fixture(scope="module")
def expected(catalog: Path) -> list:
    """What `dumpcat stats` must end with: the statistics of the catalog ingested with statistics."""
    with Catalog.open(catalog) as cat:
        return catalog_content(cat, STATS_QUERIES)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real MindSpore 2.10 runs of one net, `cast` rounding fc2's input through float16."""
    path = tmp_path_factory.mktemp("two_runs") / "cat"
    CatalogStore(path, create=True)
    for run in ("base", "cast"):
        ingest_dump(path, COMPARE / run / "dump", run=run, workers=1)
    return path


@pytest.fixture(scope="module")
def compared_locally(two_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> list:
    path = Path(shutil.copytree(two_runs, tmp_path_factory.mktemp("compared") / "cat"))
    with Catalog.open(path) as cat:
        summary = cat.compare("cast", "base", workers=2)
        assert summary.pairs > 100 and summary.statuses["ok"] > 100
        return catalog_content(cat, COMPARE_QUERIES)


# -- statistics ------------------------------------------------------------------------------------------


def test_stats_locally_are_what_ingest_writes(no_stats, expected):
    with Catalog.open(no_stats) as cat:
        before = catalog_content(cat, STATS_QUERIES)
        assert before != expected
        summary = cat.compute_stats(workers=2)
        assert summary.computed == len(expected[1]) > 2500 and summary.errors == 0
        assert summary.runs["statcsv"].todo == summary.runs["statcsv"].computed > 0
        assert summary.runs["msprobe-pt_mix_tensor"].computed > 0  # dump.json rows have no counts
        assert summary.runs["ge-ge_stats"].todo == 0
        assert catalog_content(cat, STATS_QUERIES) == expected
        # statistic.csv rows are not computed again: the statcsv run has both kinds
        sources = cat.sql(
            "SELECT DISTINCT stat_source FROM stats WHERE run = 'statcsv' ORDER BY 1"
        ).to_pylist()
        assert [r["stat_source"] for r in sources] == ["computed", "statistic.csv"]


def test_stats_on_spark_are_what_ingest_writes(spark, no_stats, expected):
    """Local mode and standalone: the same rows; a re-run computes nothing and commits nothing."""
    with Catalog.open(no_stats) as cat:
        summary = cat.compute_stats(spark=spark)
        assert summary.computed == len(expected[1]) and summary.errors == 0
        assert summary.tasks > len(summary.runs) // 2  # several tasks per big run
        assert summary.where.startswith(f"Spark {spark.sparkContext.master}")
        assert catalog_content(cat, STATS_QUERIES) == expected
        snapshot = (no_stats / "snapshot.json").read_text()
        again = cat.compute_stats(spark=spark)
        assert again.computed == 0 and again.batches == 0 and again.tasks == 0
        assert all(r.todo == 0 for r in again.runs.values())
        assert (no_stats / "snapshot.json").read_text() == snapshot


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_one_run_only_and_its_shards(spark, tmp_path):
    """`run` limits the work; a run written by two named writers gets each shard's statistics in
    that shard (where the rank's operators resolve them), as an ingest with statistics does."""
    hosts = []
    for rank in (0, 1):
        root = tmp_path / f"host{rank}" / "dump"
        shutil.copytree(dump_of("nan_log") / "rank_0", root / f"rank_{rank}")
        hosts.append(root)
    paths = {}
    for name, stats in (("want", True), ("got", False)):
        paths[name] = tmp_path / name
        CatalogStore(paths[name], create=True)
        ingest_dump(paths[name], dump_of("simple"), run="simple", compute_stats=stats, workers=1)
        for k, root in enumerate(hosts):
            ingest_dump(paths[name], root, run="sharded", compute_stats=stats, workers=1, writer=f"host{k}")
    with Catalog.open(paths["got"]) as cat:
        summary = cat.compute_stats("sharded", spark=spark)
        assert list(summary.runs) == ["sharded"] and summary.computed == 360
        assert cat.sql("SELECT count(*) FROM stats WHERE run = 'simple'").column(0)[0].as_py() == 0
        assert cat.compute_stats("simple").computed > 0
        got = catalog_content(cat, STATS_QUERIES)
    for k in (0, 1):
        assert _batches(paths["got"] / "data" / "run=sharded" / f"writer=host{k}", "tensor_stats") == 1
    with Catalog.open(paths["want"]) as cat:
        assert got == catalog_content(cat, STATS_QUERIES)
        with pytest.raises(ValueError, match="run 'nope' is not in the catalog"):
            cat.compute_stats("nope")


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_md5_as_ingest_md5(spark, tmp_path):
    """`md5=True` (`--md5`) on Spark gives the md5 column `ingest --md5` gives."""
    contents = []
    for name, stats in (("want", True), ("got", False)):
        ingest_dump(
            tmp_path / name, dump_of("nan_log"), run="nan_log", compute_stats=stats, md5=stats, workers=1
        )
        with Catalog.open(tmp_path / name) as cat:
            if not stats:
                assert cat.compute_stats(spark=spark, md5=True).computed == 180
            contents.append(catalog_content(cat, STATS_QUERIES))
    assert contents[0] == contents[1]
    assert all(row["md5"] for row in contents[1][0])


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_a_missing_file_is_an_error_row_as_at_ingest(spark, copy_dump, tmp_path):
    """A tensor file gone since ingest: the `ingest_errors` row ingest writes when it cannot read a
    tensor's data, the same locally and on Spark, and not written again by a re-run."""
    dump = copy_dump("nan_log")
    path = tmp_path / "cat"
    ingest_dump(path, dump, run="nan_log", compute_stats=False, workers=1)
    gone = sorted((dump / "rank_0" / "Net" / "0" / "1").glob("*.npy"))[3]
    gone.unlink()
    results = []
    for how in ("local", "spark"):
        copy = Path(shutil.copytree(path, tmp_path / how))
        with Catalog.open(copy) as cat:
            summary = cat.compute_stats(spark=spark if how == "spark" else None)
            assert (summary.computed, summary.errors) == (179, 1)
            assert cat.compute_stats().runs["nan_log"].todo == 0  # not retried
            errors = cat.sql("SELECT path, stage, reason FROM ingest_errors").to_pylist()
            assert errors == [
                {"path": f"rank_0/Net/0/1/{gone.name}", "stage": "tensor_stats",
                 "reason": f"FileNotFoundError: [Errno 2] No such file or directory: '{gone}'"},
            ]  # fmt: skip
            results.append(catalog_content(cat, STATS_QUERIES))
    assert results[0] == results[1]


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_cli_killed_then_resumed(spark, tmp_path):
    """`dumpcat stats --spark local[2]` killed (SIGKILL, with its JVM) after its first commit keeps
    that batch; `dumpcat stats` then computes the rest, and the catalog ends as an ingest with
    statistics. Over the nan_log dump (180 tensors; resuming does not depend on the statistics'
    kinds, which the tests above cover over every tree), with tasks of 8 tensors each committed
    alone: about 23 commits, so the kill, as soon as the first batch is on disk, lands early."""
    paths = {}
    for name, stats in (("want", True), ("got", False)):
        paths[name] = tmp_path / name
        ingest_dump(paths[name], dump_of("nan_log"), run="nan_log", compute_stats=stats, workers=1)
    with Catalog.open(paths["want"]) as cat:
        expected = catalog_content(cat, STATS_QUERIES)
    no_stats = paths["got"]
    code = (
        "import sys; import catalog.missing_stats as s; s._COMMIT_ROWS = 8; s._TASK_MAX_TENSORS = 8; "
        "s._TASK_MIN_TENSORS = 8; from catalog.cli.commands import main; main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "stats", str(no_stats), "--spark", "local[2]"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _batches(no_stats, "tensor_stats") == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    with Catalog.open(no_stats) as cat:
        kept = cat.sql("SELECT count(*) FROM raw_tensor_stats").column(0)[0].as_py()
    assert len(expected[1]) == 180 and 0 < kept < len(expected[1]) - 40
    rerun = _cli("stats", str(no_stats), "--workers", "2")
    todo = sum(
        int(m.replace(",", ""))
        for m in re.findall(r"^run '.*': ([\d,]+) tensors without", rerun.stdout, re.M)
    )
    assert todo == len(expected[1]) - kept, rerun.stdout
    assert re.fullmatch(r"committed \d+ batch(es)? in [\d.]+ s \(local, 2 workers\)\n", rerun.stderr)
    with Catalog.open(no_stats) as cat:
        assert catalog_content(cat, STATS_QUERIES) == expected
    assert "nothing to compute" in _cli("stats", str(no_stats)).stdout


# -- compare ---------------------------------------------------------------------------------------------


def test_compare_on_spark_is_the_local_compare(spark, two_runs, compared_locally, tmp_path):
    path = Path(shutil.copytree(two_runs, tmp_path / "cat"))
    with Catalog.open(path) as cat:
        summary = cat.compare("cast", "base", spark=spark)
        assert summary.pairs == len(compared_locally[0])
        assert catalog_content(cat, COMPARE_QUERIES) == compared_locally
        assert cat.compare("cast", "base", spark=spark).pairs == 0


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_compare_with_a_missing_file(spark, tmp_path):
    """A run tensor gone since ingest: status `unreadable_run`, on Spark as locally."""
    for run in ("base", "cast"):
        shutil.copytree(COMPARE / run / "dump", tmp_path / run)
    path = tmp_path / "cat"
    for run in ("base", "cast"):
        ingest_dump(path, tmp_path / run, run=run, workers=1)
    gone = sorted((tmp_path / "cast").rglob("MatMul.*output.0*.npy"))[0]
    gone.unlink()
    results = []
    for how in ("local", "spark"):
        copy = Path(shutil.copytree(path, tmp_path / how))
        with Catalog.open(copy) as cat:
            summary = cat.compare("cast", "base", spark=spark if how == "spark" else None, workers=2)
            assert summary.statuses["unreadable_run"] == 1
            results.append(catalog_content(cat, COMPARE_QUERIES))
    assert results[0] == results[1]


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_cli_compare_on_spark(spark, two_runs, compared_locally, tmp_path):
    path = Path(shutil.copytree(two_runs, tmp_path / "cat"))
    proc = _cli("compare", str(path), "cast", "base", "--spark", "local[2]", "--format", "csv")
    assert re.fullmatch(r"compared 'cast' with 'base': [\d,]+ new pairs \(.*\) in [\d.]+ s\n", proc.stderr)
    assert proc.stdout.startswith("rank,iteration,op_name,")
    with Catalog.open(path) as cat:
        assert catalog_content(cat, COMPARE_QUERIES) == compared_locally


# -- bench/bench_scale.py ------------------------------------------------------------------------------


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_bench_scale_queries_give_the_generators_answers_with_sparks_defaults(spark, tmp_path):
    """Every query bench/bench_scale.py times in Spark gives the answers its generator planted
    (`time_spark` checks each), on a catalog with tensor files, with Spark's own code generation
    and adaptive execution, as the benchmark runs: this module's session turns both off, a new
    session of the same driver (no second JVM) turns them back on."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_scale

    path = tmp_path / "cat"
    summary = bench_scale.generate(path, 10_000, step_rows=250, iterations=10, tensor_files=True,
                                   anomaly_share=0.2, collect=True)  # fmt: skip
    session = spark.newSession()
    for key in (
        "spark.sql.adaptive.enabled",
        "spark.sql.codegen.wholeStage",
        "spark.sql.codegen.factoryMode",
    ):
        session.conf.unset(key)
    assert session.conf.get("spark.sql.adaptive.enabled") == "true"
    assert session.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert session.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    timings = bench_scale.time_spark(session, path, summary, runs=0)
    assert [t["query"] for t in timings] == ["register_views", "nan", "nan_count", "first_anomaly", "lookup"]


# -- errors ----------------------------------------------------------------------------------------------


def _one_line_error(proc: subprocess.CompletedProcess, *, status: int = 1) -> str:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_bad_master_and_missing_pyspark_are_one_line_errors(spark, no_stats, two_runs, tmp_path):
    two_runs = Path(shutil.copytree(two_runs, tmp_path / "two_runs"))
    port = _free_port()  # nothing listens there
    line = _one_line_error(_cli("stats", str(no_stats), "--spark", f"spark://127.0.0.1:{port}", check=False))
    url = f"spark://127.0.0.1:{port}"
    assert (
        line == f"dumpcat: error: cannot reach the Spark master {url}: 127.0.0.1:{port}: Connection refused"
    )
    line = _one_line_error(_cli("stats", str(no_stats), "--spark", "local[0]", check=False))
    why = "Asked to run locally with 0 threads"  # a URL of the right form that Spark refuses
    assert line.startswith(f"dumpcat: error: cannot start Spark on 'local[0]': {why} (Spark's log: "), line
    compare = _cli(
        "compare", str(two_runs), "cast", "base", "--spark", f"spark://127.0.0.1:{port}", check=False
    )
    assert "cannot reach the Spark master" in _one_line_error(compare)
    with Catalog.open(two_runs) as cat:  # nothing was committed by the failed compare
        assert cat.sql("SELECT count(*) FROM raw_comparisons").column(0)[0].as_py() == 0
    without = (
        "import sys; sys.modules['pyspark'] = None; from catalog.cli.commands import main; main(sys.argv[1:])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", without, "stats", str(no_stats), "--spark", "local[2]"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "pip install -e '.[spark]'" in _one_line_error(proc)
    usage = _cli("stats", str(no_stats), "--spark", "local[2]", "--workers", "2", check=False)
    assert usage.returncode == 2 and "--workers" in usage.stderr
    with Catalog.open(no_stats) as cat:  # nothing was committed by any of them
        assert cat.sql("SELECT count(*) FROM raw_tensor_stats").column(0)[0].as_py() == 0


# -- tasks -----------------------------------------------------------------------------------------------


def test_a_mistyped_master_url_is_an_error_even_with_nothing_to_do(two_runs, tmp_path):
    """A master URL that is no Spark master URL (a typo, a quote too many) is one error line before
    any work, also when there is nothing to compute and no session would start (it used to end
    in success then, the URL never looked at); `dumpcat stats` and `compare`, CLI and Python."""
    from catalog.spark.jobs import SparkJobError

    path = Path(shutil.copytree(two_runs, tmp_path / "cat"))  # ingested with statistics
    with Catalog.open(path) as cat:
        cat.compare("cast", "base", workers=1)
    for k, url in enumerate(("bogus://x", "local[x]", "spark://head", "spark://head:7077/", "local[2]'", "")):
        for args in (("stats", str(path)), ("compare", str(path), "cast", "base")):
            # (a real process for the first URL; the same command code in this process for the others)
            argv = (*args, "--spark", url)
            proc = _cli(*argv, check=False) if k == 0 else dumpcat_in_process(*argv)
            line = _one_line_error(proc)
            assert line.startswith(f"dumpcat: error: bad Spark master URL {url!r}: expected local"), line
        with pytest.raises(SparkJobError, match="bad Spark master URL"), Catalog.open(path) as cat:
            cat.compute_stats(spark=url)
    for url in (
        "local",
        "local[2]",
        "local[*]",
        "local[2, 3]",
        "spark://a:7077,b:7077",
        "yarn",
        "k8s://h:6443",
    ):
        assert check_master_url(url) == url


def test_tasks_are_whole_directories_within_the_bounds():
    groups = [
        ("a", list(range(3)), [10] * 3),
        ("a", list(range(3, 5)), [10] * 2),
        ("a", list(range(5, 17)), [10] * 12),  # bigger than a task: cut
        ("a", list(range(17, 18)), [10]),
        ("b", list(range(18, 20)), [10] * 2),  # another run: another task
        ("b", list(range(20, 21)), [1000]),  # over the byte bound alone
    ]
    tasks = [(key, [list(p) for p in pieces]) for key, pieces in pack_tasks(groups, 5, 100)]
    assert tasks == [
        ("a", [[0, 1, 2], [3, 4]]),
        ("a", [[5, 6, 7, 8, 9]]), ("a", [[10, 11, 12, 13, 14]]), ("a", [[15, 16]]),
        ("a", [[17]]),
        ("b", [[18, 19]]),
        ("b", [[20]]),
    ]  # fmt: skip
    assert task_bounds(100, 0, 2, max_items=2000, max_bytes=1 << 30, min_items=32) == (32, 64 << 20)
    assert task_bounds(10**6, 10**12, 8, max_items=2000, max_bytes=1 << 28, min_items=32) == (2000, 1 << 28)
    assert task_bounds(1000, 0, 2, max_items=2000, max_bytes=1 << 30, min_items=32)[0] == 125


def test_docs_show_what_dumpcat_stats_prints(tmp_path):
    """docs/cli.md's `dumpcat stats` session: an ingest without statistics, `dumpcat stats`, and
    `dumpcat stats` again; each stats command prints the lines shown (stdout, then stderr), but for
    the time it took."""
    text = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"^    \$ (dumpcat ingest \S+ --catalog (\S*nostats\.cat) --no-stats)\n"
                      r"((?:    (?!\$ ).*\n)+)((?:    \$ dumpcat stats \2\n(?:    (?!\$ ).*\n)+)+)",
                      text, re.M)  # fmt: skip
    assert block, "docs/cli.md: no `dumpcat stats ...nostats.cat` session"
    ingest = block.group(1).split()[1:]
    ingest[1] = str(ROOT / ingest[1])
    _cli(*ingest, cwd=tmp_path)
    runs = re.findall(r"^    \$ (dumpcat stats \S+)\n((?:    (?!\$ ).*\n)+)", block.group(4), re.M)
    assert len(runs) == 2, runs  # a run that computes, and one that finds nothing left
    timing = re.compile(r" in [\d.]+ s ")
    for command, output in runs:
        proc = _cli(*command.split()[1:], "--workers", "2", cwd=tmp_path)
        shown = [line[4:] for line in output.splitlines()]
        printed = (proc.stdout + proc.stderr).splitlines()
        assert [timing.sub(" in - s ", x) for x in printed] == [timing.sub(" in - s ", x) for x in shown]
