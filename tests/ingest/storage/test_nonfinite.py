"""NaN/Inf sidecars of flat stats files (ingest/storage/nonfinite.py): each holds exactly its file's
non-finite rows, and the views built on them (`anomalous_tensors`, `first_anomaly`,
`first_anomaly_by_graph`, `nan_origin`) answer on real dumps what the same views answer reading the
flat files themselves: after one-shot ingests, small batches (merges by tier, operator rows in later
batches: re-resolution), a late execution order, a watched run that compacts, and on a catalog
whose flat files predate sidecars."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from catalog.api import Catalog
from ingest.pipeline import ingest_dump
from ingest.storage import flat, nonfinite
from ingest.storage.sql_views import quote_literal
from ingest.storage.store import CatalogStore
from tests.conftest import DATA
from tests.ingest.storage.test_flat import ROOTS, SMALL_BATCH_ROOTS, _run_name

# The views that read `anomalous_tensors`, and it.
VIEWS = ("anomalous_tensors", "first_anomaly", "first_anomaly_by_graph", "nan_origin")


def _answers(cat: Catalog) -> dict[str, list[str]]:
    """Each view's rows (repr: NaN statistics compare equal), as a sorted list."""
    cur = cat.cursor()
    try:
        return {v: sorted(map(repr, cur.execute(f"SELECT * FROM {v}").fetchall())) for v in VIEWS}
    finally:
        cur.close()


def _without_sidecars(path: Path, dest: Path) -> Path:
    """A copy of the catalog at `path` whose flat stats files have no sidecar (as written before
    them): its views read the flat files themselves."""
    shutil.copytree(path, dest)
    for side in [*dest.rglob(nonfinite.NONFINITE_FILE), *dest.rglob(nonfinite.NONE_FILE)]:
        side.unlink()
    shutil.rmtree(dest / "views", ignore_errors=True)
    return dest


def _assert_sidecars_exact(store: CatalogStore) -> dict[str, int]:
    """Every live stats flat file's sidecar state is what its rows say: the sidecar holds exactly
    its non-finite rows, the marker stands for none, no sidecar for more than MAX_SHARE of them.
    Returns how many files are in each state."""
    states = {"sidecar": 0, "none": 0, "whole": 0}
    con = duckdb.connect()
    try:
        for data in store.flat_files()["stats"]:
            read = f"read_parquet({quote_literal(data)})"
            total, bad = con.execute(
                f"SELECT count(*), count(*) FILTER (has_nan OR has_inf) FROM {read}"
            ).fetchone()
            state = nonfinite.sidecar_state(data)
            if state:
                want = con.execute(f"SELECT * FROM {read} WHERE has_nan OR has_inf").fetchall()
                got = con.execute(f"SELECT * FROM read_parquet({quote_literal(state)})").fetchall()
                assert sorted(map(repr, got)) == sorted(map(repr, want)), data
                assert 0 < bad <= total * nonfinite.MAX_SHARE
                states["sidecar"] += 1
            elif state == "":
                assert bad == 0, data
                states["none"] += 1
            else:
                assert bad > total * nonfinite.MAX_SHARE, data
                states["whole"] += 1
    finally:
        con.close()
    return states


def _assert_same_without_sidecars(path: Path, tmp_path: Path) -> dict[str, list[str]]:
    """The views over the sidecars answer what they answer over the flat files alone, and the
    catalog's `anomalous_tensors` reads the sidecars, not the data files they stand for."""
    with Catalog.open(path) as cat:
        got = _answers(cat)
        files = cat.store.flat_files()["stats"]
        sql = cat.cursor().execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [nonfinite.VIEW])
        sql = sql.fetchone()[0]
    for data in files:
        state = nonfinite.sidecar_state(data)
        assert (data in sql) == (state is None) and (not state or state in sql)
    plain = _without_sidecars(path, tmp_path / f"plain-{len(list(tmp_path.iterdir()))}")
    with Catalog.open(plain) as cat:
        assert not any(map(nonfinite.sidecar_state, cat.store.flat_files()["stats"]))
        want = _answers(cat)
    assert got == want
    return got


def test_the_sidecar_holds_the_rows_anomalous_tensors_filters():
    """The writer's filter is the view's (sql/60_first_anomaly.sql)."""
    from ingest.storage.sql_views import view_sql_files

    text = dict(view_sql_files())["60_first_anomaly.sql"]
    view = text.split(f"CREATE OR REPLACE VIEW {nonfinite.VIEW} AS", 1)[1].split(";", 1)[0]
    assert " ".join(view.split()) == f"SELECT * FROM stats WHERE {nonfinite.NONFINITE_WHERE}"
    # (a catalog whose flat files differ in columns keeps the view as sql/ defines it)
    assert (
        nonfinite.nonfinite_view_sql([])
        == f"CREATE OR REPLACE VIEW {nonfinite.VIEW} AS {' '.join(view.split())}"
    )


# Trees with NaN/Inf: 45-57 % of their statistic rows, torchair's 6 %.
NAN_TREES = [
    DATA / "ms210" / "nan_log" / "dump",
    DATA / "ascend_raw" / "nan_log_rank",
    DATA / "ge" / "ge_tensor",
    DATA / "msprobe" / "cnn" / "cnn_nan_tensor",
    DATA / "ge" / "torchair",
]


@pytest.mark.parametrize(
    "share, roots", [(nonfinite.MAX_SHARE, ROOTS), (0.3, NAN_TREES)], ids=["default", "low-share"]
)
def test_every_committed_dump_answers_the_same_with_and_without_sidecars(tmp_path, monkeypatch, share, roots):
    """Every committed dump a run of one catalog: sidecars where their share allows, markers for the
    files without any NaN/Inf (`low-share`: the trees with NaN, most of them past the share, their
    files read whole beside torchair's sidecar)."""
    monkeypatch.setattr(nonfinite, "MAX_SHARE", share)
    path = tmp_path / "cat"
    CatalogStore(path, create=True)
    for root in roots:
        ingest_dump(path, root, run=_run_name(root), workers=1)
    states = _assert_sidecars_exact(CatalogStore(path))
    if roots is ROOTS:
        assert states["sidecar"] > 10 and states["none"] > 10
    else:
        assert states == {"sidecar": 1, "none": 0, "whole": len(roots) - 1}
    got = _assert_same_without_sidecars(path, tmp_path)
    assert len(got["first_anomaly"]) > 5 and len(got["nan_origin"]) > 1


def test_small_batches_merges_and_re_resolution_keep_the_sidecars_exact(tmp_path):
    """One-row batches committed as a watcher commits them (a flat file each, merged by tier),
    then the run's end merges them: each new file gets its own sidecar, and a retired file's goes
    with it."""
    from ingest.pipeline import Ingester, detect_dump

    path = tmp_path / "cat"
    CatalogStore(path, create=True)
    # (a MindSpore npy tree is one batch per leaf group whatever the size)
    for root in SMALL_BATCH_ROOTS[1:3]:
        run = _run_name(root)
        store = CatalogStore(path).shard(run, None)
        ing = Ingester(store, run, root, detect_dump(root), workers=1, batch_rows=1)
        with store.writer_lock():  # (no start_run: every batch writes its flat files)
            ing.begin()
            ing.scan_all()
            ing.flush()
            store.finish_run(run)
    store = CatalogStore(path)
    snap = store.snapshot()
    live = {e["path"] for e in snap["flat"]["stats"]}
    retired = [
        r["path"] for r in snap.get("retired", []) if "/flat/stats/" in r["path"] and r["path"] not in live
    ]
    assert len(retired) >= 4, "no merge happened"
    assert any(nonfinite.sidecar_state(path / r / flat.DATA_FILE) for r in retired)
    assert _assert_sidecars_exact(store)["sidecar"] > 0
    _assert_same_without_sidecars(path, tmp_path)
    # a retired file goes with its sidecar
    store.purge_retired(older_than=-1)
    assert not any((path / r).exists() for r in retired)


def test_a_late_execution_order_re_resolves_the_sidecars(copy_dump, tmp_path):
    """Tensors cataloged before their rank's execution order and graphs: first_anomaly first
    answers with the names the files give; when those arrive, the stats file is re-resolved and
    its sidecar with it, so the answer is a fresh ingest's of the complete dump."""
    dump = copy_dump("nan_log")
    held = tmp_path / "held"
    held.mkdir()
    for name in ("execution_order", "graphs"):
        shutil.move(dump / "rank_0" / name, held / name)
    path = tmp_path / "cat"
    ingest_dump(path, dump, run="late", workers=1)
    before = _assert_same_without_sidecars(path, tmp_path)
    old = {e["path"] for e in CatalogStore(path).snapshot()["flat"]["stats"]}
    for name in ("execution_order", "graphs"):
        shutil.move(held / name, dump / "rank_0" / name)
    ingest_dump(path, dump, run="late", workers=1)
    store = CatalogStore(path)
    assert not old & {e["path"] for e in store.snapshot()["flat"]["stats"]}, "not re-resolved"
    assert _assert_sidecars_exact(store)["sidecar"] == 1
    after = _assert_same_without_sidecars(path, tmp_path)
    assert after != before  # operator names and exec_index resolved
    fresh = tmp_path / "fresh"
    ingest_dump(fresh, dump, run="late", workers=1)
    with Catalog.open(fresh) as cat:
        assert _answers(cat) == after


def test_a_watched_run_that_compacts_keeps_the_sidecars_exact(copy_dump, tmp_path):
    """A watcher commits a flat file per iteration (markers and sidecars of one iteration each),
    then compacts its batches: the merged file's sidecar answers for all of them."""
    from ingest.watch import Watcher

    dump = copy_dump("nan_log")
    held = tmp_path / "held"
    held.mkdir()
    iterations = sorted((dump / "rank_0" / "Net" / "0").iterdir())
    for it in iterations[1:]:
        shutil.move(it, held / it.name)
    path = tmp_path / "cat"
    w = Watcher(path, dump, run="w", poll=True, interval=0.1, grace=0.5, compact_min_batches=2, workers=1)
    w.start()
    try:
        assert w.wait_idle(timeout=30)
        for it in iterations[1:]:
            shutil.move(held / it.name, it)
            assert w.wait_idle(timeout=30)
            _assert_sidecars_exact(CatalogStore(path))
    finally:
        w.stop()
    store = CatalogStore(path)
    assert any(b["id"].endswith("-c") for b in store.snapshot()["batches"]), "the watcher compacted nothing"
    _assert_sidecars_exact(store)
    got = _assert_same_without_sidecars(path, tmp_path)
    fresh = tmp_path / "fresh"
    ingest_dump(fresh, dump, run="w", workers=1)
    with Catalog.open(fresh) as cat:
        assert _answers(cat) == got


def test_files_without_sidecars_and_with_them_read_together(tmp_path):
    """A catalog whose older flat files have no sidecar (written before them) and whose newer ones
    do: the files without are read whole, the view answers the same."""
    path = tmp_path / "cat"
    ingest_dump(path, DATA / "ms210" / "dist_allreduce" / "dump", run="old", workers=1)
    for side in [*path.rglob(nonfinite.NONFINITE_FILE), *path.rglob(nonfinite.NONE_FILE)]:
        side.unlink()
    ingest_dump(path, DATA / "msprobe" / "pt_4ranks_recv_l1_statistics", run="new", workers=1)
    files = CatalogStore(path).flat_files()["stats"]
    assert [nonfinite.sidecar_state(f) is None for f in files].count(True) == 1
    with Catalog.open(path) as cat:
        sql = (
            cat.cursor()
            .execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [nonfinite.VIEW])
            .fetchone()[0]
        )
        assert nonfinite.NONFINITE_FILE in sql and flat.DATA_FILE in sql
    got = _assert_same_without_sidecars(path, tmp_path)
    assert {r.split(",", 1)[0] for r in got["first_anomaly"]} == {"('old'", "('new'"}


def test_a_catalog_without_non_finite_rows_reads_no_stats_file_for_first_anomaly(tmp_path):
    """Every stats file marked as holding no NaN/Inf: first_anomaly reads no file at all."""
    path = tmp_path / "cat"
    ingest_dump(path, DATA / "msprobe" / "cnn" / "cnn_clean_tensor", run="clean", workers=1)
    store = CatalogStore(path)
    assert _assert_sidecars_exact(store) == {"sidecar": 0, "none": 1, "whole": 0}
    with Catalog.open(path) as cat:
        assert cat.sql("SELECT count(*) FROM first_anomaly").column(0)[0].as_py() == 0
        plan = "\n".join(r[1] for r in cat.cursor().execute("EXPLAIN SELECT * FROM first_anomaly").fetchall())
        assert "READ_PARQUET" not in plan.upper()


def test_a_sidecar_removed_by_hand_is_not_read(tmp_path):
    """The snapshot's views database is keyed on the sidecars too: one removed by hand (a copy that
    left them out) gives new definitions that read the stats file itself, not an error."""
    path = tmp_path / "cat"
    ingest_dump(path, DATA / "ms210" / "nan_log" / "dump", run="n", workers=1)
    with Catalog.open(path) as cat:
        want = _answers(cat)
        (data,) = cat.store.flat_files()["stats"]
    side = nonfinite.sidecar_state(data)
    assert side
    Path(side).unlink()
    with Catalog.open(path) as cat:
        assert _answers(cat) == want
    assert len(list((path / "views").glob("*.duckdb"))) == 2
