"""The views of a snapshot are defined once, into the catalog's views/ folder, and later connections
attach them (catalog/views.py `use_views`): every open, every commit and every failure to write or
read that file still gives the catalog's own rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from catalog import Catalog
from catalog.views import VIEWS_FOLDER, define_views
from ingest.storage.store import CatalogStore
from tests.conftest import REPO, dump_of

QUERIES = (
    "SELECT count(*), sum(nan_count), sum(pos_inf_count) FROM stats",
    "SELECT op_name, iteration, rank FROM first_anomaly ORDER BY ALL",
    "SELECT count(*), count(DISTINCT file_name), count(path) FROM tensors",
    "SELECT count(*) FROM ops",
    "SELECT * FROM op_feeders ORDER BY ALL",
    "SELECT op_name, input_ops FROM first_anomaly ORDER BY ALL",
)


def _reference(cat_dir: Path) -> dict[str, list]:
    """The rows of QUERIES on a connection that defines the views itself (no views database)."""
    store = CatalogStore(cat_dir)
    snap = store.union_snapshot()
    with duckdb.connect() as con:
        define_views(con, store.table_files(snap), store.flat_files(snap), store.full_schema_tables(snap))
        return {q: con.execute(q).fetchall() for q in QUERIES}


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> dict[str, list]:
    cat_dir = tmp_path_factory.mktemp("views-reference") / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    return _reference(cat_dir)


def _answers(cat: Catalog) -> dict[str, list]:
    return {q: [tuple(r.values()) for r in cat.sql(q).to_pylist()] for q in QUERIES}


def _views_files(cat_dir: Path) -> list[Path]:
    return sorted((cat_dir / VIEWS_FOLDER).glob("*.duckdb"))


def _in_memory(cat: Catalog) -> bool:
    """Whether the views a cursor sees are defined in memory (not a views database attached)."""
    with cat.cursor() as cur:
        query = "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        return cur.execute(query).fetchall()[0][0] is None


def test_a_snapshot_is_defined_once_and_attached_after(tmp_path, expected):
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    with Catalog.open(cat_dir) as first:
        assert _answers(first) == expected
    (made,) = _views_files(cat_dir)
    written = made.stat().st_mtime_ns
    with Catalog.open(cat_dir) as second:
        assert _answers(second) == expected
        assert not _in_memory(second)
    assert _views_files(cat_dir) == [made] and made.stat().st_mtime_ns == written
    assert not [p for p in (cat_dir / VIEWS_FOLDER).iterdir() if p.name.startswith(".")]


def test_a_views_database_stores_op_feeders_and_the_view_reads_it(tmp_path, expected):
    """`op_feeders` (STORED_VIEWS) is computed once per snapshot into its views database: the
    rows of the query-time view (`expected` defines its views itself), read from a table."""
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    with Catalog.open(cat_dir) as cat:
        assert _answers(cat) == expected
        feeders = expected["SELECT * FROM op_feeders ORDER BY ALL"]
        assert feeders  # the nan_log dump has graph IR
        with cat.cursor() as cur:
            stored = "SELECT estimated_size FROM duckdb_tables() WHERE table_name = 'op_feeders_stored'"
            assert cur.execute(stored).fetchall() == [(len(feeders),)]
            plan = "\n".join(r[1] for r in cur.execute("EXPLAIN SELECT * FROM op_feeders").fetchall())
            assert "op_feeders_stored" in plan and "edges" not in plan


def test_a_commit_moves_open_catalogs_and_their_cursors_to_the_new_views(tmp_path):
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="one")
    with Catalog.open(cat_dir) as cat:
        held = cat.cursor()  # a cursor kept across the commit, as a thread would keep one
        assert held.execute("SELECT list(DISTINCT run) FROM tensors").fetchall() == [(["one"],)]
        Catalog.open(cat_dir).ingest(dump_of("div_late"), run="two")
        runs = cat.sql("SELECT run FROM tensors GROUP BY run ORDER BY run").column(0).to_pylist()
        assert runs == ["one", "two"]
        assert held.execute("SELECT count(DISTINCT run) FROM stats").fetchall() == [(2,)]
        held.close()
        assert _answers(cat) == _reference(cat_dir)
        # following a live catalog, it defines the views in memory (after that only the file
        # lists, at each commit): no file is made per commit
        assert len(_views_files(cat_dir)) == 1
    with Catalog.open(cat_dir) as fresh:  # a new reader of the new snapshot makes its file
        assert fresh.sql("SELECT count(DISTINCT run) FROM stats").column(0).to_pylist() == [2]
        assert not _in_memory(fresh)
    assert len(_views_files(cat_dir)) == 2


def test_a_file_rewritten_in_place_gets_views_of_its_own(tmp_path, expected):
    """dumpcat never rewrites a file, but a hand or a tool might: the views database of the old
    file is not used for the new one (its columns may differ)."""
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    with Catalog.open(cat_dir) as cat:
        assert _answers(cat) == expected
    store = CatalogStore(cat_dir)
    (flat_stats,) = store.flat_files(store.union_snapshot())["stats"]
    copy = Path(flat_stats + ".copy")
    copy.write_bytes(Path(flat_stats).read_bytes())
    copy.replace(flat_stats)  # the same bytes under the same name: a new file all the same
    with Catalog.open(cat_dir) as cat:
        assert _answers(cat) == expected
    assert len(_views_files(cat_dir)) == 2


def test_a_catalog_whose_views_folder_cannot_be_written_defines_them_itself(tmp_path, expected):
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    (cat_dir / VIEWS_FOLDER).write_text("not a folder")  # mkdir fails as on a read-only catalog
    with Catalog.open(cat_dir) as cat:
        assert _answers(cat) == expected
        assert _in_memory(cat)


def test_a_damaged_views_file_is_made_anew(tmp_path, expected):
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    with Catalog.open(cat_dir) as cat:
        _answers(cat)
    (made,) = _views_files(cat_dir)
    made.write_bytes(made.read_bytes()[:5000])
    with Catalog.open(cat_dir) as cat:
        assert _answers(cat) == expected
        assert not _in_memory(cat)
    assert _views_files(cat_dir) == [made] and made.stat().st_size > 5000


def test_processes_opening_a_new_snapshot_at_once_all_answer(tmp_path, expected):
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).ingest(dump_of("nan_log"), run="nan_log")
    query = QUERIES[0]
    cmd = [sys.executable, "-m", "catalog.cli", "sql", str(cat_dir), query, "--format", "csv"]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs]
    count, nans, infs = expected[query][0]
    assert {out.strip().splitlines()[-1] for out, _ in outs} == {f"{count},{nans},{infs}"}
    assert len(_views_files(cat_dir)) == 1
    assert not [p for p in (cat_dir / VIEWS_FOLDER).iterdir() if p.name.startswith(".")]
