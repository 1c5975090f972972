"""Cached view definitions (ingest/storage/definitions_cache.py): the writer's resolution views
(ingest/storage/flat.py) and the template of every snapshot's views database (catalog/views.py),
built once into the user's cache and attached or copied after that. A catalog made and read with
the cache is the catalog made and read without one (every view defined on the spot, as before the
cache existed), on real committed dumps of three producers; a damaged cached file is built anew."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from catalog.api import Catalog
from catalog.guard import dumpcat_table_macros
from catalog.views import USER_VIEWS, definitions_connection
from ingest.pipeline import ingest_dump
from ingest.storage.definitions_cache import CACHE_ENV, cache_folder
from tests.conftest import DATA, dump_of

TREES = {
    "nan_log": dump_of("nan_log"),
    "ascend": DATA / "ascend_raw" / "nan_log_rank",
    "msprobe": DATA / "msprobe" / "pt_l1_statistics_2ranks",
}


VOLATILE = {"runs": ("ingested_at",)}  # the time of the ingest


def _catalog(path: Path) -> Path:
    for run, root in TREES.items():
        ingest_dump(path, root, run=run, workers=1)
    return path


def _views(path: Path) -> dict[str, tuple[list[tuple], list]]:
    """Every user view's columns (name, type) and rows (as text, sorted: NaN equals NaN)."""
    out = {}
    with Catalog.open(path) as cat:
        for view in USER_VIEWS:
            volatile = VOLATILE.get(view)
            columns = f"* EXCLUDE ({', '.join(volatile)})" if volatile else "*"
            table = cat.sql(f"SELECT {columns} FROM {view}")
            columns = [(f.name, str(f.type)) for f in table.schema]
            out[view] = (columns, sorted(repr(row) for row in table.to_pylist()))
    return out


def _no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # cannot be made: its parent is a file
    assert cache_folder() is None


@pytest.fixture(scope="module")
def uncached(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The catalog made and read with every view defined on the spot."""
    tmp = tmp_path_factory.mktemp("uncached")
    with pytest.MonkeyPatch.context() as mp:
        _no_cache(mp, tmp)
        return _views(_catalog(tmp / "cat"))


def test_a_catalog_made_and_read_with_the_cache_is_the_one_made_without(uncached, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    first = _views(_catalog(tmp_path / "first"))
    files = {p.name.split("-")[0] + "-" + p.name.split("-")[1]: p for p in cache.glob("*.duckdb")}
    assert set(files) == {"writer-views", "views-template"}, sorted(cache.iterdir())
    made = {name: p.stat().st_ino for name, p in files.items()}
    second = _views(_catalog(tmp_path / "second"))  # from the cached files, not built again
    assert {name: p.stat().st_ino for name, p in files.items()} == made
    assert not list(cache.glob(".*")), "a partial file was left"
    for view, (columns, rows) in uncached.items():
        assert first[view][0] == columns, view
        assert first[view][1] == rows, view
        assert second[view] == first[view], view
    assert sum(len(rows) for _, rows in uncached.values()) > 1000


@pytest.mark.parametrize(
    "damaged, how",
    [("writer-views", "garbage"), ("writer-views", "empty database"), ("views-template", "garbage")],
)
def test_a_damaged_cached_file_is_built_anew(uncached, tmp_path, monkeypatch, damaged, how):
    """Bytes that are no database, or a database without the views (the writer checks that its
    resolution views are there): the ingest and the queries give the same catalog, and the file
    is built anew."""
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    _views(_catalog(tmp_path / "first"))  # (the ingest makes the writer's views, a query the template)
    (cached,) = cache.glob(f"{damaged}-*.duckdb")
    cached.unlink()
    if how == "garbage":
        cached.write_bytes(b"not a database" * 100)
    else:
        duckdb.connect(str(cached)).close()
    assert _views(_catalog(tmp_path / "second")) == uncached
    with duckdb.connect(str(cached), read_only=True) as con:  # replaced by a good one
        assert con.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchone()[0] > 10


def test_the_table_macros_listed_from_the_cache_are_those_defined_on_the_spot(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    dumpcat_table_macros.cache_clear()
    try:
        cached = dumpcat_table_macros()
        with definitions_connection() as con:  # the template attached: a database of its own
            where = con.execute("SELECT current_database()").fetchone()[0]
        _no_cache(monkeypatch, tmp_path)
        dumpcat_table_macros.cache_clear()
        assert dumpcat_table_macros() == cached
    finally:
        dumpcat_table_macros.cache_clear()
    assert where == "dumpcat"
    assert {"watch_nonfinite", "first_divergence", "compare_stats"} <= cached
