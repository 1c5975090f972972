"""`nan_origin_ranks`, the per-rank part of `nan_origin`, is stored in each snapshot's views database
(catalog/views.py STORED_VIEWS): `nan_origin` then reads a table of a few rows, not the anomalous
statistics, and its rows are those of the query-time views as commits change the snapshot."""

from __future__ import annotations

from pathlib import Path

import duckdb

from catalog import Catalog
from catalog.views import define_views
from ingest.storage.store import CatalogStore
from tests.conftest import DATA

QUERIES = ("SELECT * FROM nan_origin", "SELECT * FROM nan_origin_ranks")


def _rows(cur: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Each query's rows (repr: NaN statistics compare equal), sorted."""
    return {q: sorted(map(repr, cur.execute(q).fetchall())) for q in QUERIES}


def _query_time(cat_dir: Path) -> dict[str, list[str]]:
    """The rows on a connection that defines the views itself (nothing stored)."""
    store = CatalogStore(cat_dir)
    snap = store.union_snapshot()
    with duckdb.connect() as con:
        define_views(con, store.table_files(snap), store.flat_files(snap), store.full_schema_tables(snap))
        return _rows(con)


def test_nan_origin_reads_its_stored_per_rank_rows_and_they_follow_each_snapshot(tmp_path):
    cat_dir = tmp_path / "cat"
    runs = [
        ("four", DATA / "msprobe" / "pt_4ranks_allreduce_l1_statistics"),  # ranks that received it
        ("two", DATA / "msprobe" / "pt_l1_statistics_2ranks"),  # a second run: a new snapshot
    ]
    Catalog.open(cat_dir, create=True)
    for n, (run, root) in enumerate(runs, 1):
        Catalog.open(cat_dir).ingest(root, run=run)
        with Catalog.open(cat_dir) as cat, cat.cursor() as cur:
            got = _rows(cur)
            plan = "\n".join(r[1] for r in cur.execute("EXPLAIN SELECT * FROM nan_origin").fetchall())
            assert "nan_origin_ranks_stored" in plan and "READ_PARQUET" not in plan.upper()
            origins = cur.execute(
                "SELECT run, count(*), count(reached) FROM nan_origin GROUP BY run"
            ).fetchall()
        assert got == _query_time(cat_dir)
        assert {r[0] for r in origins} == {run for run, _ in runs[:n]}
        assert dict((r[0], r[2]) for r in origins)["four"] > 0  # received ranks traced back
