"""The server's views database cache (catalog/server/sandbox.py `views_database`): built by the
first server of a dumpcat version, copied by the next ones, rebuilt when damaged, and not used
from a folder other users can write."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from catalog.server.server import Limits, Server
from ingest.storage.definitions_cache import CACHE_ENV, cache_folder
from tests.conftest import nan_log_catalog


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("views-cache"))


def nan_rows(srv: Server) -> int:
    with psycopg.connect(host="127.0.0.1", port=srv.port, user="u", dbname="d", autocommit=True) as c:
        return c.execute("SELECT count(*) FROM stats WHERE nan_count > 0").fetchall()[0][0]


def serve(cat: Path) -> int:
    with Server(cat, port=0, limits=Limits(max_concurrent=1)) as srv:
        return nan_rows(srv)


def test_the_first_server_fills_the_cache_and_later_ones_copy_it(cat, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    expected = serve(cat)
    assert expected > 0
    (cached,) = (tmp_path / "cache").glob("server-views-*.duckdb")
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    made = cached.stat().st_ino
    assert serve(cat) == expected
    assert cached.stat().st_ino == made  # copied from, not written again
    assert not list((tmp_path / "cache").glob(".*"))  # no partial file left


def test_a_damaged_cache_file_is_built_anew(cat, tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    expected = serve(cat)
    (cached,) = (tmp_path / "cache").glob("server-views-*.duckdb")
    cached.write_bytes(b"not a database" * 100)
    assert serve(cat) == expected
    assert cached.read_bytes()[:14] != b"not a database"  # replaced by a good one
    assert serve(cat) == expected


def test_a_folder_others_can_write_is_not_a_cache(cat, tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv(CACHE_ENV, str(shared))
    assert cache_folder() is None
    assert serve(cat) > 0
    assert not list(shared.iterdir())


def test_an_unusable_cache_folder_only_costs_the_build(cat, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # cannot be made: its parent is a file
    assert cache_folder() is None
    assert serve(cat) > 0
