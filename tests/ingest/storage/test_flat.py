"""Flat files (ingest/storage/flat.py): `tensors` and `stats` stored resolved give exactly what resolving at
query time gives, on every committed dump, with batches split small, after late operator files,
late statistic.csv rows, compaction, and on a catalog written before flat files existed."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog.api import Catalog, TensorNotFoundError
from ingest import pipeline
from ingest.pipeline import ingest_dump
from ingest.storage import flat
from ingest.storage.store import CatalogStore
from tests.conftest import DATA, REPO

sys.path.insert(0, str(REPO / "bench"))


def _dump_roots() -> list[Path]:
    """Every committed dump tree a reader detects (one per producer layout)."""
    roots = [p.parent for p in sorted((DATA / "ms210").glob("*/dump/rank_0"))]
    roots += [p.parent for p in sorted((DATA / "ms210").glob("compare/*/dump/rank_0"))]
    roots += [p.parent for p in sorted((DATA / "samples").glob("*/*/dump/rank_0"))]
    roots += sorted((DATA / "ascend_raw").iterdir())
    roots += sorted((DATA / "mindspore_bin").iterdir())
    roots += [DATA / "ge" / name for name in ("ge_tensor", "ge_stats", "om", "torchair")]
    not_dumps = ("cnn", "overflow_check")  # cnn: trees one level down; overflow_check: msprobe's json
    roots += [p for p in sorted((DATA / "msprobe").iterdir()) if p.is_dir() and p.name not in not_dumps]
    roots += [p for p in sorted((DATA / "msprobe" / "cnn").iterdir()) if p.is_dir() and p.name != "compare"]
    return roots


ROOTS = _dump_roots()
# The Spark tests (tests/catalog/spark/test_spark.py) run the same SQL over every view whatever the
# data: one tree per reader and feature is enough there, and each Spark query costs ~1 s, each tree
# an ingest per catalog. Every tree of ROOTS is still checked against DuckDB above.
SPARK_ROOTS = [
    r for r in ROOTS
    if not any(r.is_relative_to(DATA / skip) for skip in (
        "ms210/div_late", "ms210/iter_filter", "ms210/outputs_only", "samples/mindspore-2.10-cpu/simple",
        "ms210/kernels_filter", "ms210/long_names", "samples/mindspore-2.10-cpu/multigraph",
        "ascend_raw/nan_log_v12", "msprobe/pt_pkl_legacy", "ascend_raw/kernels_filter_rank",
        "mindspore_bin/kernels_filter_cpu", "msprobe/compare_fp16", "msprobe/compare_fp32",
        "msprobe/pt_mix_tensor_oldstack", "msprobe/cnn/cnn_bf16_statistics", "msprobe/cnn/cnn_clean_tensor",
        "msprobe/cnn/cnn_fp32_statistics", "msprobe/cnn/cnn_fp32_tensor", "msprobe/cnn/cnn_nan_tensor",
    ))
]  # fmt: skip


def _run_name(root: Path) -> str:
    return "-".join(root.relative_to(DATA).parts)


def _assert_flat_exact(cat: Catalog) -> dict[str, int]:
    """Both flat views equal their query-time views row for row (as multisets), and the
    snapshot's bookkeeping holds: every source batch exists, every batch with rows is covered once.
    (Each view is evaluated once, into a temporary table of this cursor's: the query-time views
    resolve every name, the cost of most of these tests.)"""
    counts = {}
    cur = cat.cursor()
    try:
        for view in flat.FLAT_SOURCES:
            for name in (view, f"{view}_resolved"):
                cur.execute(f"CREATE OR REPLACE TEMP TABLE check_{name} AS SELECT * FROM {name}")
            for a, b in ((view, f"{view}_resolved"), (f"{view}_resolved", view)):
                extra = cur.execute(
                    f"SELECT count(*) FROM (SELECT * FROM check_{a} EXCEPT ALL SELECT * FROM check_{b})"
                ).fetchone()[0]
                assert extra == 0, f"{a} has rows {b} lacks"
            counts[view] = cur.execute(f"SELECT count(*) FROM check_{view}").fetchone()[0]
        # a filter on NaN finds the same rows in the files (parquet min/max leave NaN out: no row
        # group may be skipped for holding only NaN and numbers) as in the query-time view
        for cond in ("isnan(max)", "max > 0", "nan_count > 0"):
            a = cat.sql(f"SELECT count(*) FROM stats WHERE {cond}").column(0)[0].as_py()
            b = cur.execute(f"SELECT count(*) FROM check_stats_resolved WHERE {cond}").fetchone()[0]
            assert a == b, cond
    finally:
        cur.close()
    snap = cat.store.snapshot()
    batch_ids = {b["id"] for b in snap["batches"]}
    for view, sources in flat.FLAT_SOURCES.items():
        covered: list[str] = []
        for entry in snap["flat"][view]:
            assert set(entry["sources"]) <= batch_ids
            covered += entry["sources"]
            table = pq.read_table(cat.store.root / entry["path"] / flat.DATA_FILE, columns=["row_id"])
            assert table.num_rows == entry["rows"]
            ids = table.column(0).to_numpy(zero_copy_only=False)
            ids = ids[~np.isnan(ids)] if ids.dtype.kind == "f" else ids
            if entry.get("interim"):
                # written as resolved, sorted by the ingest's last merge; its sidecar is sorted
                ids = np.sort(ids)
                if view == "tensors":
                    index = pa.ipc.open_file(str(cat.store.root / entry["path"] / flat.INDEX_FILE)).read_all()
                    assert index.column("row_id").to_numpy().tolist() == ids.tolist()
            assert np.all(np.diff(ids) >= 0), "a flat file is not sorted by row id"
        assert len(covered) == len(set(covered)), "a batch's rows are in two flat files"
        # (a batch may have no flat rows: its computed statistics all replaced by later csv rows)
        with_rows = {b["id"] for b in snap["batches"] if any(t in b["tables"] for t in sources)}
        assert set(covered) <= with_rows
    return counts


def _complete_and_compare(path: Path, dump: Path, held: Path, run: str, tmp_path: Path) -> None:
    """Put the held-back execution order and graphs in place, ingest again, and check the catalog
    equals a fresh one-shot ingest of the complete dump (and its flat files the query-time views)."""
    for name in ("execution_order", "graphs"):
        shutil.move(held / name, dump / "rank_0" / name)
    ingest_dump(path, dump, run=run, workers=1)
    fresh = tmp_path / "fresh"
    ingest_dump(fresh, dump, run=run, workers=1)
    with Catalog.open(path) as cat, Catalog.open(fresh) as whole:
        _assert_flat_exact(cat)
        for view in flat.FLAT_SOURCES:
            got = cat.sql(f"SELECT * FROM {view} ORDER BY ALL").to_pylist()
            want = whole.sql(f"SELECT * FROM {view} ORDER BY ALL").to_pylist()
            assert repr(got) == repr(want)  # (repr: NaN statistics compare equal)


@pytest.fixture(scope="module")
def nan_log_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-shot ingest of the committed nan_log dump (run "n"), made once for the tests that
    start from it (each ingest is ~2-3 s of start-up); a test that changes it copies it first."""
    path = tmp_path_factory.mktemp("nan_log") / "cat"
    ingest_dump(path, DATA / "ms210" / "nan_log" / "dump", run="n", workers=1)
    return path


def test_resolution_sql_inputs_are_listed():
    """The raw tables the resolution SQL reads are the flat tables' sources or RESOLUTION_INPUTS,
    so that a batch changing any of them re-resolves the flat files it affects."""
    from ingest.storage.sql_views import view_sql_files

    read = set()
    for name, text in view_sql_files():
        if name in flat.RESOLUTION_SQL:
            read |= set(re.findall(r"\braw_(\w+)", text))
    sources = {t for ts in flat.FLAT_SOURCES.values() for t in ts}
    # edges feed the `edges` view of 05_graph.sql, not tensors or stats
    assert read - {"edges"} == sources | set(flat.RESOLUTION_INPUTS)


# Small batches on a few trees of each kind: many commits, so flat files are merged by tier and
# operator rows arriving in a later batch than their tensors re-resolve the earlier files.
SMALL_BATCH_ROOTS = [
    DATA / "ms210" / "control_flow" / "dump",
    DATA / "ascend_raw" / "nan_log_rank",
    DATA / "msprobe" / "pt_l1_statistics_2ranks",
    DATA / "ge" / "ge_stats",
]


# One-row batches of ge_stats are a commit per csv file: its 72 files were 72 commits (~50 s, most of
# the `small` case). One step of one rank (18 files, 18 commits; 9 commits of 3 rows with
# dictionaries) still merges and re-resolves many times; the whole tree is in `all` (one shot).
# (A MindSpore npy or Ascend raw tree is one batch whatever `batch_rows`, a batch per leaf group:
# control_flow in one-row batches was the very ingest of `all`; it stays in `small-dictionaries`,
# where its pending rows are dictionary-encoded. nan_log_rank, as cheap, gives `small` its tensors.)
GE_STATS_ONE_STEP = DATA / "ge" / "ge_stats" / "worldsize2_global_rank0"


def _one_step_of_ge_stats(folder: Path) -> Path:
    """A ge_stats tree of its first rank's first step only (copied under `folder`)."""
    (step,) = (p for p in GE_STATS_ONE_STEP.glob("*/*/*/*/0") if p.is_dir())
    tree = folder / "ge_stats_one_step"
    shutil.copytree(step, tree / step.relative_to(GE_STATS_ONE_STEP.parent))
    return tree


@pytest.mark.parametrize(
    "batch_rows, roots, dictionaries",
    # (dictionaries: batches of a few rows still merge many files; one-row batches are the small case)
    [
        (200_000, ROOTS, False),
        (1, [*SMALL_BATCH_ROOTS[1:3], GE_STATS_ONE_STEP], False),
        (3, [*SMALL_BATCH_ROOTS[:-1], GE_STATS_ONE_STEP], True),
    ],
    ids=["all", "small", "small-dictionaries"],
)
def test_every_committed_dump_flat_equals_query_time(tmp_path, monkeypatch, batch_rows, roots, dictionaries):
    """Committed trees in one catalog, each a run: the flat views equal the query-time ones. With
    `dictionaries`, every run's final resolution holds its text columns as ENUMs, and every pending
    chunk its repetitive text dictionary-encoded (at their defaults only big dumps do)."""
    if dictionaries:
        monkeypatch.setattr(flat, "_DICTIONARY_MIN_ROWS", 0)
        monkeypatch.setattr(flat, "_DICTIONARY_MEMORY_SHARE", 0)
        monkeypatch.setattr(flat, "_MERGE_MEMORY_START", 1 << 20)
        monkeypatch.setattr(pipeline, "_DICTIONARY_MIN_ROWS", 1)
    held: list[str] = []
    original = flat.FlatWriter._dictionary_types

    def dictionary_types(self, con, table, source, rows, **kw):
        types = original(self, con, table, source, rows, **kw)
        held.extend(types)
        return types

    monkeypatch.setattr(flat.FlatWriter, "_dictionary_types", dictionary_types)
    path = tmp_path / "cat"
    CatalogStore(path, create=True)
    for root in roots:
        run = _run_name(root)
        if root == GE_STATS_ONE_STEP:
            root = _one_step_of_ge_stats(tmp_path)
        s = ingest_dump(path, root, run=run, batch_rows=batch_rows, workers=1)
        assert s.tensors + s.stat_rows > 0, root
    with Catalog.open(path) as cat:
        counts = _assert_flat_exact(cat)
        assert counts["tensors"] > 100 and counts["stats"] > 100
        snap = cat.store.snapshot()
        # a one-shot ingest leaves one flat file per run and table
        for view in flat.FLAT_SOURCES:
            runs = [e["run"] for e in snap["flat"][view]]
            assert len(runs) == len(set(runs))
        # resolution really happens: most tensors of the MindSpore trees resolve exactly
        exact = cat.sql(
            "SELECT count(*) FILTER (name_match = 'exact') AS e, count(*) AS n FROM tensors "
            "WHERE run LIKE 'ms210-%'"
        ).to_pylist()[0]
        ms210 = any(r.is_relative_to(DATA / "ms210") for r in roots)
        assert (exact["n"] > 0) == ms210 and (exact["e"] > 0.5 * exact["n"] or not ms210)
        if batch_rows < 1000:  # many batches, each run's flat files written once from all of them
            assert len(snap["batches"]) > 12
            assert not [r for r in snap.get("retired", []) if "/flat/" in r["path"]]
        assert ("op_name" in held) == dictionaries


def test_late_execution_order_and_graphs_re_resolve(copy_dump, tmp_path):
    """Tensors cataloged before their rank's execution order and graphs (copied late, the watcher
    case) are re-resolved when those arrive: the catalog then equals one of the complete dump."""
    dump = copy_dump("nan_log")
    held = tmp_path / "held"
    held.mkdir()
    for name in ("execution_order", "graphs"):
        shutil.move(dump / "rank_0" / name, held / name)
    path = tmp_path / "cat"
    ingest_dump(path, dump, run="late", workers=1)
    with Catalog.open(path) as cat:
        before = (
            cat.sql("SELECT count(*) FILTER (name_match = 'exact') AS e FROM tensors").column(0)[0].as_py()
        )
        assert before == 0
        _assert_flat_exact(cat)
        old_paths = {e["path"] for e in cat.store.snapshot()["flat"]["tensors"]}
    _complete_and_compare(path, dump, held, "late", tmp_path)
    with Catalog.open(path) as cat:
        row = cat.sql(
            "SELECT count(*) FILTER (name_match = 'exact') AS e, "
            "count(*) FILTER (source_line IS NOT NULL) AS s FROM tensors"
        ).to_pylist()[0]
        assert row["e"] > 0 and row["s"] > 0
        snap = cat.store.snapshot()
        assert not old_paths & {e["path"] for e in snap["flat"]["tensors"]}
        assert old_paths <= {r["path"] for r in snap["retired"]}


def test_late_statistic_csv_replaces_computed_rows(tmp_path):
    """A tree ingested without its statistic.csv gets computed rows; once the csv files arrive,
    their rows replace the computed ones in the flat stats (a tensor never shows both)."""
    import synth

    tree = tmp_path / "tree"
    synth.generate(tree, 300, ranks=1, iterations=2, statistic_csv=True, workers=1)
    held = tmp_path / "held"
    csvs = sorted(tree.rglob("statistic.csv"))
    for i, csv in enumerate(csvs):
        (held / str(i)).mkdir(parents=True)
        shutil.move(csv, held / str(i) / "statistic.csv")
    path = tmp_path / "cat"
    ingest_dump(path, tree, run="r", workers=1)
    with Catalog.open(path) as cat:
        src = cat.sql("SELECT stat_source, count(*) AS n FROM stats GROUP BY ALL").to_pylist()
        assert src == [{"stat_source": "computed", "n": 300}]
    for i, csv in enumerate(csvs):
        shutil.move(held / str(i) / "statistic.csv", csv)
    ingest_dump(path, tree, run="r", workers=1)
    with Catalog.open(path) as cat:
        _assert_flat_exact(cat)
        src = cat.sql("SELECT stat_source, count(*) AS n FROM stats GROUP BY ALL").to_pylist()
        assert src == [{"stat_source": "statistic.csv", "n": 300}]
        dup = cat.sql("SELECT row_id FROM stats GROUP BY row_id HAVING count(*) > 1")
        assert dup.num_rows == 0


def test_catalog_without_flat_files_resolves_at_query_time_then_upgrades(tmp_path, nan_log_catalog):
    """A catalog written before flat files existed (no "flat" in its snapshot) answers the same
    through the query-time views; its next writer gives it flat files."""
    path = tmp_path / "cat"
    shutil.copytree(nan_log_catalog, path)
    with Catalog.open(path) as cat:
        want = {v: cat.sql(f"SELECT * FROM {v} ORDER BY ALL").to_pylist() for v in flat.FLAT_SOURCES}
        loc = cat.locate(cat.sql("SELECT row_id FROM tensors LIMIT 1").column(0)[0].as_py())
    snap_file = path / "snapshot.json"
    snap = json.loads(snap_file.read_text())
    shutil.rmtree(path / "data" / "flat")
    del snap["flat"]
    snap_file.write_text(json.dumps(snap))
    with Catalog.open(path) as cat:
        assert cat.store.flat_files() is None
        for view, rows in want.items():
            assert repr(cat.sql(f"SELECT * FROM {view} ORDER BY ALL").to_pylist()) == repr(rows)
        assert cat.locate(loc[1].row_id) == loc
    assert CatalogStore(path).upgrade()
    with Catalog.open(path) as cat:
        assert cat.store.flat_files() is not None
        _assert_flat_exact(cat)
        for view, rows in want.items():
            assert repr(cat.sql(f"SELECT * FROM {view} ORDER BY ALL").to_pylist()) == repr(rows)
        assert cat.locate(loc[1].row_id) == loc


def test_tensor_lookup_through_the_sidecar_matches_np_load(tmp_path):
    """Every tensor of a real dump read through the memory-mapped sidecar index equals np.load of
    its file; an unknown id is an error; a re-opened catalog finds ids without loading an index."""
    path = tmp_path / "cat"
    dump = DATA / "ms210" / "control_flow" / "dump"
    ingest_dump(path, dump, run="cf", workers=1, batch_rows=40)
    with Catalog.open(path) as cat:
        rows = cat.sql("SELECT row_id, path FROM tensors").to_pylist()
        assert len(rows) > 40
        for r in rows:
            got = cat.tensor(r["row_id"])
            want = np.load(r["path"])
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")
        with pytest.raises(TensorNotFoundError):
            cat.tensor(12345)
        index_files = cat.store.flat_index_files()
        assert index_files and all(Path(f).exists() for f in index_files)


def test_flat_files_prune_point_lookups_by_row_group(tmp_path):
    """Row-group statistics of row_id in a flat file do not overlap, so a point lookup reads one."""
    import synth

    tree = tmp_path / "tree"
    synth.generate(tree, 3000, ranks=1, iterations=3, statistic_csv=True, workers=1)
    path = tmp_path / "cat"
    ingest_dump(path, tree, run="r", workers=1, batch_rows=700)
    store = CatalogStore(path)
    for view, files in store.flat_files().items():
        assert len(files) == 1, view
        meta = pq.ParquetFile(files[0]).metadata
        col = meta.schema.names.index("row_id")
        bounds = [
            (meta.row_group(i).column(col).statistics.min, meta.row_group(i).column(col).statistics.max)
            for i in range(meta.num_row_groups)
        ]
        assert all(hi < lo2 for (_, hi), (lo2, _) in itertools.pairwise(bounds)) or len(bounds) == 1
    with Catalog.open(path) as cat:
        _assert_flat_exact(cat)


def test_compaction_then_re_resolution_keeps_each_row_once(copy_dump, tmp_path):
    """A watcher commits a batch (and a flat file) per iteration and compacts its batches into one:
    the flat files holding their rows become one too (a file holds all rows of its sources), so a
    later re-resolution of that file does not duplicate the other files' rows."""
    from ingest.watch import Watcher

    dump = copy_dump("nan_log")
    held = tmp_path / "held"
    held.mkdir()
    for name in ("execution_order", "graphs"):
        shutil.move(dump / "rank_0" / name, held / name)
    iterations = sorted((dump / "rank_0" / "Net" / "0").iterdir())
    for it in iterations[1:]:
        shutil.move(it, held / it.name)
    path = tmp_path / "cat"
    w = Watcher(path, dump, run="c", poll=True, interval=0.1, grace=0.5, compact_min_batches=2, workers=1)
    w.start()
    try:
        assert w.wait_idle(timeout=30)
        for it in iterations[1:]:  # one batch (and flat file) per iteration
            shutil.move(held / it.name, it)
            assert w.wait_idle(timeout=30)
    finally:
        w.stop()
    snap = CatalogStore(path).snapshot()
    assert any(b["id"].endswith("-c") for b in snap["batches"]), "the watcher compacted nothing"
    with Catalog.open(path) as cat:
        _assert_flat_exact(cat)
    _complete_and_compare(path, dump, held, "c", tmp_path)


@pytest.mark.parametrize("native", [False, True], ids=["arrow", "duckdb-reads"])
@pytest.mark.parametrize("views_flat", [True, False], ids=["flat-views", "query-time-views"])
def test_contained_engine_reads_flat_and_old_catalogs(tmp_path, views_flat, native, nan_log_catalog):
    """The server's contained engine answers the same as a Catalog on a catalog with flat files and
    on one from before them, whichever views database the server built (`flat` is decided when it
    starts; a catalog may gain flat files while it serves)."""
    from catalog.server.sandbox import ContainedEngine, build_views_database
    from tests.conftest import as_written_before_flat_files

    path = tmp_path / "cat"
    shutil.copytree(nan_log_catalog, path)
    query = "SELECT count(*), count(*) FILTER (nan_count > 0), sum(exec_index) FROM stats"
    with Catalog.open(path) as cat:
        want = cat.sql(query).to_pylist()
        want_tensors = cat.sql("SELECT * FROM tensors ORDER BY row_id").to_pylist()
    views_dir = tmp_path / "views"
    views_dir.mkdir()
    views = build_views_database(views_dir, flat=views_flat)
    for old in (False, True):
        if old:
            as_written_before_flat_files(path)
        engine = ContainedEngine(path, views, native=native)
        try:
            cur = engine.cursor(1)
            got = cur.sql(query).to_arrow_table().to_pylist()
            got_tensors = cur.sql("SELECT * FROM tensors ORDER BY row_id").to_arrow_table().to_pylist()
        finally:
            engine.close()
        assert [list(r.values()) for r in got] == [list(r.values()) for r in want]
        assert repr(got_tensors) == repr(want_tensors)  # every column of every row


@contextlib.contextmanager
def _walked_one_shot(root: Path, path: Path, batch_rows: int) -> Iterator[CatalogStore]:
    """A one-shot ingest of `root` into `path`, stopped after its walk: yields its store, writer
    lock held, before `finish_run` (which the caller calls)."""
    from ingest.pipeline import Ingester, detect_dump

    store = CatalogStore(path, create=True).shard("r", None)
    ing = Ingester(store, "r", root, detect_dump(root), workers=1, batch_rows=batch_rows)
    with store.writer_lock():
        ing.begin()
        store.start_run()
        ing.scan_all()
        ing.flush()
        yield store


def _row_groups(path: Path, entry: dict) -> list[int]:
    meta = pq.ParquetFile(path / entry["path"] / flat.DATA_FILE).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def test_a_one_shot_ingest_commits_its_batches_pending_then_writes_one_file_per_table(tmp_path, monkeypatch):
    """While a one-shot ingest walks, its batches commit without flat files and without opening
    the writer's DuckDB: its run is pending, and a reader meanwhile resolves names at query time,
    the rows committed so far. Its last batch writes each flat table of the run once, from all
    its batches, in DuckDB's row groups: no file was written before it, none is retired."""
    import synth

    from ingest.pipeline import Ingester, detect_dump
    from ingest.readers import mindspore_npy
    from ingest.storage.store import PENDING

    root = tmp_path / "tree"
    synth.generate(root, 800, ranks=1, iterations=8, statistic_csv=False, workers=1)
    monkeypatch.setattr(mindspore_npy, "_SCAN_GROUP_FILES", 100)  # a batch per 100-file iteration
    opened = []
    original_connect = flat.FlatWriter._connect

    def connect(self, snap, run=None):
        opened.append(self._con is None)
        return original_connect(self, snap, run)

    monkeypatch.setattr(flat.FlatWriter, "_connect", connect)
    path = tmp_path / "cat"
    store = CatalogStore(path, create=True).shard("r", None)
    ing = Ingester(store, "r", root, detect_dump(root), workers=1, batch_rows=80)
    seen: list[tuple[int, int]] = []
    with store.writer_lock():
        ing.begin()
        store.start_run()
        original = store.commit_batch

        def commit_batch(run, tables, **kwargs):
            batch = original(run, tables, **kwargs)
            snap = store.snapshot()
            if not kwargs.get("last"):
                assert snap["flat"] == {"tensors": [], "stats": []}
                assert snap[PENDING] == {"r": ["stats", "tensors"]}
                assert not opened, "the writer's DuckDB was opened while walking"
                committed = sum(b["tables"].get("tensors", 0) for b in snap["batches"])
                with Catalog.open(path) as cat:  # a reader meanwhile
                    assert cat.store.flat_files() is None
                    seen.append((cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py(), committed))
            return batch

        monkeypatch.setattr(store, "commit_batch", commit_batch)
        ing.scan_all()
        ing.flush(last=True)  # (as run_ingest: a last batch, if it has rows, writes them; else:)
        store.finish_run("r")
    assert len(seen) >= 7 and all(rows == committed for rows, committed in seen), seen
    assert seen[0][0] < 800  # (the rows so far)
    assert sum(opened) == 1  # the last batch's
    snap = store.snapshot()
    assert PENDING not in snap
    assert not [r for r in snap.get("retired", []) if "/flat/" in r["path"]]
    with Catalog.open(path) as cat:
        assert cat.store.flat_files() is not None
        _assert_flat_exact(cat)
    for view in flat.FLAT_SOURCES:
        (entry,) = snap["flat"][view]
        assert _row_groups(path, entry) == [800]  # one (< 122,880)


def _ingest_then_sigkill(root: Path, path: Path, run: str) -> None:
    """A one-shot ingest of `root` in a process of its own, SIGKILLed once it has committed its
    batches and before its end (the process says when, then waits to be killed)."""
    script = f"""
import sys, time
from pathlib import Path
from ingest.pipeline import Ingester, detect_dump
from ingest.storage.store import CatalogStore
root, path = Path({str(root)!r}), Path({str(path)!r})
store = CatalogStore(path, create=True).shard({run!r}, None)
ing = Ingester(store, {run!r}, root, detect_dump(root), workers=1)
with store.writer_lock():
    ing.begin()
    store.start_run()
    ing.scan_all()
    ing.flush()
    print("committed", flush=True)
    time.sleep(600)
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True, env=_child_env()
    )
    try:
        assert proc.stdout.readline().strip() == "committed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_an_ingest_killed_before_its_end_leaves_its_run_pending_the_next_writer_writes_it(tmp_path, caplog):
    """A one-shot ingest SIGKILLed after committing its batches leaves its run pending: readers
    get every committed row through the query-time views, and the next process that can take the
    writer lock (a reader's upgrade, as the server's; a re-run ingest) writes the run's flat files
    before anything else. The catalog then equals a one-shot ingest's."""
    from ingest.storage.store import PENDING

    root = DATA / "ms210" / "nan_log" / "dump"
    reference = tmp_path / "ref"
    ingest_dump(reference, root, run="nan_log", workers=1)
    with Catalog.open(reference) as cat:
        want = {v: cat.sql(f"SELECT * FROM {v} ORDER BY ALL").to_pylist() for v in flat.FLAT_SOURCES}
    for finisher in ("upgrade", "ingest"):
        path = tmp_path / finisher
        _ingest_then_sigkill(root, path, "nan_log")
        snap = json.loads((path / "snapshot.json").read_text())
        assert snap[PENDING] == {"nan_log": ["stats", "tensors"]} and not any(snap["flat"].values())
        with Catalog.open(path) as cat:
            assert cat.store.flat_files() is None
            got = {v: cat.sql(f"SELECT * FROM {v} ORDER BY ALL").to_pylist() for v in flat.FLAT_SOURCES}
        assert repr(got) == repr(want)
        if finisher == "upgrade":
            assert CatalogStore(path).upgrade()
        else:
            caplog.clear()
            summary = ingest_dump(path, root, run="nan_log", workers=1)  # nothing new to read
            assert summary.tensors == 0
            said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert said == [
                "dumpcat: writing the flat files of run 'nan_log', which an ingest that stopped before its "
                "end left pending (queries resolved its names themselves meanwhile)"
            ]
        snap = json.loads((path / "snapshot.json").read_text())
        assert PENDING not in snap and [len(snap["flat"][v]) for v in flat.FLAT_SOURCES] == [1, 1]
        with Catalog.open(path) as cat:
            assert cat.store.flat_files() is not None
            _assert_flat_exact(cat)
            got = {v: cat.sql(f"SELECT * FROM {v} ORDER BY ALL").to_pylist() for v in flat.FLAT_SOURCES}
        assert repr(got) == repr(want)


def test_a_pending_run_is_left_to_the_writer_that_holds_the_lock(tmp_path):
    """While another process holds the writer lock (an ingest under way), a reader's upgrade does
    not wait for it nor write anything: it reads the pending run at query time. Once the lock is
    free, the upgrade writes the files."""
    from ingest.storage.store import PENDING

    path = tmp_path / "cat"
    _ingest_then_sigkill(DATA / "ms210" / "nan_log" / "dump", path, "nan_log")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK.format(path=str(path))],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env=_child_env(),
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert not CatalogStore(path).upgrade()
        assert PENDING in json.loads((path / "snapshot.json").read_text())
    finally:
        holder.kill()
        holder.wait()
    assert CatalogStore(path).upgrade()
    assert PENDING not in json.loads((path / "snapshot.json").read_text())


# Holds a catalog's writer lock without taking it through CatalogStore (which would write the
# pending flat files as it takes it), then waits to be killed.
_HOLD_LOCK = """
import fcntl, os, time
fd = os.open(os.path.join({path!r}, "writer.lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_a_small_dumps_flat_files_are_written_once(nan_log_catalog):
    """A one-shot ingest writes each flat file of its run once: the end of the ingest rewrites
    nothing (a small ingest's start-up)."""
    snap = json.loads((nan_log_catalog / "snapshot.json").read_text())
    assert all("interim" not in e for es in snap["flat"].values() for e in es)
    assert not [r for r in snap.get("retired", []) if "/flat/" in r["path"]]


@contextlib.contextmanager
def _server_views() -> Iterator[Path]:
    """A views database as the server builds it (in a private folder, removed after)."""
    from catalog.server.sandbox import build_views_database, private_folder

    folder = private_folder()
    try:
        yield build_views_database(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _served_tensors(path: Path, views: Path) -> list[dict]:
    """`tensors` as the server's engine (its own views database) gives it, by row id: the same
    whether DuckDB reads the files through Arrow datasets or itself."""
    from catalog.server.sandbox import ContainedEngine

    served = []
    for native in (False, True):
        engine = ContainedEngine(path, views, native=native)
        try:
            cur = engine.cursor(1)
            served.append(cur.sql("SELECT * FROM tensors ORDER BY row_id").to_arrow_table().to_pylist())
        finally:
            engine.close()
    assert served[0] == served[1]
    return served[0]


def test_flat_tensors_store_file_name_and_path_only_where_rel_path_does_not_give_them(
    tmp_path, nan_log_catalog
):
    """`file_name` is stored NULL where it is the last part of `rel_path`, and `path` where it is
    the dump root (stored once per row in `dump_root`, which the views do not show), '/' and
    `rel_path` (a narrower row for the writer's DuckDB to hold); DuckDB's views and the server's
    engine give them back, and a flat file that stores every name and path (written before)
    reads the same."""
    from catalog.spark.spark_sql import SPARK_FILE_NAME_OF_REL_PATH
    from ingest.storage.flat_columns import FILE_NAME_OF_REL_PATH, FLAT_STORED_COLUMNS, flat_select_list

    path = tmp_path / "cat"
    dump = DATA / "ms210" / "nan_log" / "dump"  # (the module's one-shot ingest of it, copied: changed below)
    shutil.copytree(nan_log_catalog, path)
    with _server_views() as views:
        with Catalog.open(path) as cat:
            entry = cat.store.snapshot()["flat"]["tensors"][0]
            data = cat.store.root / entry["path"] / flat.DATA_FILE
            stored = pq.read_table(data, columns=["file_name", "path", "dump_root"])
            assert stored.column("file_name").null_count == stored.num_rows == entry["rows"] == 180
            assert stored.column("path").null_count == 180
            assert set(stored.column("dump_root").to_pylist()) == {str(dump.resolve())}
            names = cat.sql("SELECT file_name, rel_path, path FROM tensors ORDER BY row_id").to_pylist()
            assert all(r["file_name"] and r["rel_path"].endswith("/" + r["file_name"]) for r in names)
            assert all(r["path"] == f"{dump.resolve()}/{r['rel_path']}" for r in names)
            assert "dump_root" not in cat.sql("SELECT * FROM tensors LIMIT 0").column_names
            _assert_flat_exact(cat)
            expected = cat.sql("SELECT * FROM tensors_resolved ORDER BY row_id").to_pylist()
            # the server's engine reads the flat files through its own view
            assert _served_tensors(path, views) == expected
            # a flat file as written before: every name and path stored, no dump_root
            cur = cat.cursor()  # (Catalog.sql refuses COPY)
            cur.execute(f"COPY (SELECT * FROM tensors ORDER BY row_id) TO '{data}.full' (FORMAT parquet)")
            cur.close()
            Path(f"{data}.full").replace(data)
            old = pq.read_table(data)
            assert old.column("file_name").null_count == old.column("path").null_count == 0
            assert "dump_root" not in old.column_names
        with Catalog.open(path) as cat:
            assert cat.sql("SELECT * FROM tensors ORDER BY row_id").to_pylist() == expected
        assert _served_tensors(path, views) == expected
    # names and paths that the rules do not give are stored as they are
    import duckdb

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES "
        "(1, '/d/rank_0/a/x.npy', 'rank_0/a/x.npy', 'x.npy'), "
        "(2, '/d/rank_0/a/x.npy', 'rank_0/a/x.npy', 'renamed.npy'), "
        "(3, '/x.npy', 'x.npy', 'x.npy'), "  # a dump at the file system's root: dump_root ''
        "(4, '/r/dir/', 'dir/', 'other'), "
        "(5, NULL, NULL, NULL), "
        "(6, 'a/b', 'a/b', ''), "  # no root
        "(7, '/rootx.npy', 'x.npy', 'x.npy'), "  # ends with rel_path, not after a '/'
        "(8, '/other/y.npy', 'x.npy', 'x.npy'), "
        "(9, NULL, 'x.npy', 'x.npy'), "  # a query-time resolution that knew no root
        "(10, '/dümp/éⓡ/ü.npy', 'ü.npy', 'ü.npy')"  # combining and wide characters
        ") AS v(row_id, path, rel_path, file_name)"
    )
    kept = con.sql(f"SELECT {FLAT_STORED_COLUMNS['tensors']} FROM t ORDER BY row_id").fetchall()
    assert [r[3] for r in kept] == [None, "renamed.npy", None, "other", None, "", None, None, None, None]
    stored_paths = [r[1] for r in kept]
    assert stored_paths == [None, None, None, None, None, "a/b", "/rootx.npy", "/other/y.npy", None, None]
    assert [r[4] for r in kept] == ["/d", "/d", "", "/r", None, None, None, None, None, "/dümp/éⓡ"]
    con.execute(f"CREATE TABLE s AS SELECT {FLAT_STORED_COLUMNS['tensors']} FROM t")
    read = flat_select_list("tensors", ["row_id", "path", "rel_path", "file_name", "dump_root"])
    back = con.sql(f"SELECT {read} FROM s ORDER BY row_id").fetchall()
    assert back == con.sql("SELECT * FROM t ORDER BY row_id").fetchall()
    # Spark's expression (a regular expression) gives the text DuckDB's parse_filename gives
    both = con.sql(
        f"SELECT {SPARK_FILE_NAME_OF_REL_PATH} AS a, {FILE_NAME_OF_REL_PATH} AS b "
        "FROM t WHERE rel_path IS NOT NULL"
    ).fetchall()
    assert all(a == b for a, b in both) and len(both) == 9


def test_a_runs_final_file_resolved_with_dictionaries_is_the_plain_one(tmp_path, monkeypatch):
    """The last batch of a one-shot ingest makes its run's flat files final in its own commit,
    resolved from the raw rows in one statement (no interim file of it, nothing left to merge);
    with its few-valued text columns held as ENUMs (many rows) the files are the plain ones."""
    import synth

    root = tmp_path / "tree"
    synth.generate(root, 3_000, ranks=2, iterations=3, workers=1)
    listed: list[bool] = []
    original = flat.FlatWriter._dictionary_types

    def dictionary_types(self, con, table, source, rows, **kw):
        types = original(self, con, table, source, rows, **kw)
        listed.append(bool(types))
        return types

    monkeypatch.setattr(flat.FlatWriter, "_dictionary_types", dictionary_types)
    files = {}
    for name, share in (("plain", 10**12), ("held", 0)):
        monkeypatch.setattr(flat, "_DICTIONARY_MEMORY_SHARE", share)
        monkeypatch.setattr(flat, "_DICTIONARY_MIN_ROWS", 0)
        path = tmp_path / name
        summary = ingest_dump(path, root, run="r", workers=1)
        assert summary.batches == 1
        snap = json.loads((path / "snapshot.json").read_text())
        assert all(
            len(snap["flat"][t]) == 1 and "interim" not in snap["flat"][t][0] for t in flat.FLAT_SOURCES
        )
        assert not [r for r in snap.get("retired", []) if "/flat/" in r["path"]], (
            "an interim file was written"
        )
        files[name] = {t: path / snap["flat"][t][0]["path"] / flat.DATA_FILE for t in flat.FLAT_SOURCES}
        with Catalog.open(path) as cat:
            _assert_flat_exact(cat)
    assert listed == [True, True], "the final resolution held no ENUMs"
    for table in flat.FLAT_SOURCES:
        assert pq.read_schema(files["held"][table]).equals(pq.read_schema(files["plain"][table]))
        assert repr(pq.read_table(files["held"][table]).to_pylist()) == repr(
            pq.read_table(files["plain"][table]).to_pylist()
        )


def test_merges_hold_text_columns_as_dictionaries_and_write_the_same_files(tmp_path, monkeypatch, caplog):
    """A merge holds its low-cardinality text columns as ENUMs (a byte or two a value in the rows
    it sorts and the row group it writes) and starts under a low cap of its own, raised quietly
    until its write fits: the files written are the ones plain text gives, byte for byte in every
    value, type and row order, and the views stay exact. The merges are a watcher's (a flat file
    per batch, merged by size tiers) and the end of a run (`finish_run` merges its files)."""
    import logging

    import synth

    from ingest.pipeline import Ingester, detect_dump
    from ingest.readers import mindspore_npy

    root = tmp_path / "tree"
    synth.generate(root, 3_000, ranks=2, iterations=3, workers=1)
    monkeypatch.setattr(mindspore_npy, "_SCAN_GROUP_FILES", 500)  # in batches of a few hundred tensors

    def ingest(name: str) -> tuple[Path, dict]:
        path = tmp_path / name
        store = CatalogStore(path, create=True).shard("r", None)
        ing = Ingester(store, "r", root, detect_dump(root), workers=1, batch_rows=1000)
        with store.writer_lock():  # as a watcher commits: a flat file per batch (no start_run)
            ing.begin()
            ing.scan_all()
            ing.flush()
            assert len(store.snapshot()["flat"]["tensors"]) > 1
            store.finish_run("r")
        with Catalog.open(path) as cat:
            _assert_flat_exact(cat)
            snap = cat.store.snapshot()
        assert [len(snap["flat"][t]) for t in flat.FLAT_SOURCES] == [1, 1]
        return path, {t: path / snap["flat"][t][0]["path"] / flat.DATA_FILE for t in flat.FLAT_SOURCES}

    monkeypatch.setattr(flat, "_DICTIONARY_MIN_ROWS", 10**12)
    _, plain = ingest("plain")
    chosen: dict[str, list[str]] = {}
    original = flat.FlatWriter._dictionary_types

    merged_or_resolved: set[bool] = set()

    def dictionary_types(self, con, table, source, rows, **kw):
        types = original(self, con, table, source, rows, **kw)
        chosen.setdefault(table, []).extend(types)
        merged_or_resolved.add(
            source.startswith("read_parquet")
        )  # (a merge reads files; a resolution resolves)
        return types

    monkeypatch.setattr(flat.FlatWriter, "_dictionary_types", dictionary_types)
    monkeypatch.setattr(flat, "_DICTIONARY_MIN_ROWS", 0)
    monkeypatch.setattr(flat, "_DICTIONARY_MEMORY_SHARE", 0)
    monkeypatch.setattr(flat, "_MERGE_MEMORY_START", 1 << 20)
    caplog.set_level(logging.DEBUG, logger="dumpcat.ingest")
    path, held = ingest("dictionaries")
    assert {"op_name", "file_op_name", "op_type", "dtype", "run", "dump_root"} <= set(chosen["tensors"])
    assert {"op_name", "stat_source"} & set(chosen["stats"]) == {"op_name"}  # (a sort key never)
    assert not {"rel_path", "path", "file_name"} & set(chosen["tensors"])
    for table in flat.FLAT_SOURCES:
        assert pq.read_schema(held[table]).equals(pq.read_schema(plain[table]))
        # (as text: NaN statistics are equal there, and every float prints at full precision)
        assert repr(pq.read_table(held[table]).to_pylist()) == repr(pq.read_table(plain[table]).to_pylist())
    assert True in merged_or_resolved, "no merge held ENUMs"
    # the merges started at 1 MiB; any raise of their cap was quiet
    raised = [r for r in caplog.records if "ran out of memory" in r.getMessage()]
    assert all(r.levelno == logging.DEBUG for r in raised)
    with Catalog.open(path) as cat:
        assert cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py() == 3_000
        assert cat.sql("SELECT count(DISTINCT path) FROM tensors").column(0)[0].as_py() == 3_000


def test_a_damaged_pending_map_is_a_clear_error(nan_log_catalog, tmp_path):
    """A snapshot whose pending map is not runs to flat tables (damaged by hand) is refused with a
    message naming it, by readers and the writer alike (as a snapshot naming files outside its
    catalog is), not a traceback from deep in the writer."""
    from ingest.storage.store import CatalogError

    for bad in (["nan_log"], {"nan_log": "tensors"}, {"nan_log": ["tensors", "ops"]}, {"7": [7]}):
        path = tmp_path / f"cat{len(list(tmp_path.iterdir()))}"
        shutil.copytree(nan_log_catalog, path)
        snap = json.loads((path / "snapshot.json").read_text())
        (path / "snapshot.json").write_text(json.dumps({**snap, "flat_pending": bad}))
        refused = pytest.raises(CatalogError, match="'flat_pending' is not a map of runs to flat tables")
        with refused, Catalog.open(path) as cat:
            cat.sql("SELECT count(*) FROM tensors")
        with refused, CatalogStore(path).writer_lock():
            pass


def test_a_snapshot_naming_files_outside_its_catalog_is_refused_by_readers(nan_log_catalog, tmp_path):
    """A one-shard catalog's readers check its snapshot as the writer does: a batch or flat file
    path outside the catalog's data folder is an error naming the file, and nothing is read there."""
    from ingest.storage.store import CatalogError

    for where in ("batches", "flat"):
        path = tmp_path / where
        shutil.copytree(nan_log_catalog, path)
        snap = json.loads((path / "snapshot.json").read_text())
        entry = snap["batches"][0] if where == "batches" else snap["flat"]["tensors"][0]
        entry["path"] = "../elsewhere"
        (path / "snapshot.json").write_text(json.dumps(snap))
        refused = pytest.raises(CatalogError, match="names a file outside its shard's directory")
        with refused, Catalog.open(path) as cat:
            cat.sql("SELECT count(*) FROM tensors")
