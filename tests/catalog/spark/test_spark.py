"""Spark SQL over the catalog (catalog/spark/spark_sql.py): every view DuckDB defines gives the same rows in
Spark local mode, over one catalog holding a committed dump of every producer and layout
(tests/ingest/storage/test_flat.py SPARK_ROOTS). test_spark_jobs.py runs Spark work on a standalone master +
worker started on 127.0.0.1 from the pyspark package's own scripts.

Rows are compared as multisets (order-insensitive), column names in order, values exactly after
this normalisation: NaN equals NaN (Python's NaN does not), timestamps are compared as UTC instants
(Spark hands back naive local times), DECIMALs as floats, lists as tuples and structs as sorted
(name, value) pairs. Nothing else is rounded or relaxed: floats must be bit-equal (-0.0 = 0.0).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import random
import shutil
import time
from collections import Counter
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
from ingest.pipeline import ingest_dump  # noqa: E402
from ingest.storage.store import CatalogStore, CatalogWarning, shard_path  # noqa: E402
from tests.conftest import DATA, as_written_before_flat_files, dump_of  # noqa: E402
from tests.ingest.storage.test_flat import SPARK_ROOTS, _run_name  # noqa: E402
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
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One catalog: every committed dump tree (as tests/ingest/storage/test_flat.py ingests them), the trees
    above (the last run by two writers: shards), and `dumpcat compare` of the cast/base pair."""
    tmp = tmp_path_factory.mktemp("spark_catalog")
    path = tmp / "cat"
    CatalogStore(path, create=True)
    roots = [(root, _run_name(root)) for root in SPARK_ROOTS]
    roots.append((_with_kernel_args(tmp / "kernel_args"), "kernel_args"))
    roots.append((_with_overflow(tmp / "overflow"), "overflow"))
    for root, run in roots:
        ingest_dump(path, root, run=run, workers=1)
    for k, root in enumerate(_hosts(tmp)):
        ingest_dump(path, root, run="sharded", workers=1, writer=f"host{k}")
    with Catalog.open(path) as cat:
        assert cat.compare(CAST, BASE, workers=1).pairs > 0
    return path


# The `spark` fixture (local[2], then a standalone master + worker on 127.0.0.1) is in conftest.py,
# shared with tests/catalog/spark/test_spark_jobs.py.


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
# themselves) is exercised by test_spark_jobs.py, whose statistics and comparisons run there;
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
        empty = []
        for view in wanted:
            duck = _duckdb_rows(cat, f"SELECT * FROM {view}")
            _assert_same(view, duck, _spark_rows(spark.table(view)))
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
