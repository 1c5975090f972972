"""The local API is walled by its engine (issue 33 point 4): the DuckDB behind `Catalog.sql` and
`dumpcat sql` opens the catalog's own files and nothing else, so that SQL the guard never sees
(nested in a string, or run on a raw cursor) reads nothing outside; and the functions that run
SQL held in a string are refused by the guard as well."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from catalog import Catalog, QueryRefused
from tests.conftest import REPO, dump_of

PASSWD_BY_PLAN = (
    "SELECT regexp_extract(json_serialize_plan('SELECT * FROM read_csv(''{path}'', sep=''\x01'', "
    "header=true, max_line_size=4)'), 'Original Line: ([^\\\\]*)', 1) AS line"
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("wall")
    secret = tmp / "outside" / "secret.csv"
    secret.parent.mkdir()
    secret.write_text("token\nhunter2\n")
    with Catalog.open(tmp / "cat", create=True) as cat:
        cat.ingest(dump_of("nan_log"), run="r")
    return tmp / "cat", secret


def test_the_reproducer_is_refused_by_the_cli(setup):
    cat, secret = setup
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "sql", str(cat), PASSWD_BY_PLAN.format(path=secret)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 1 and "hunter2" not in out.stdout + out.stderr
    assert out.stderr.startswith("dumpcat: error: refused: function json_serialize_plan() is not allowed")


@pytest.mark.parametrize("function", ["json_serialize_plan", "json_serialize_sql", "json_deserialize_sql"])
def test_functions_running_sql_in_a_string_are_refused(setup, function):
    with Catalog.open(setup[0]) as cat, pytest.raises(QueryRefused, match=function):
        cat.sql(f"SELECT {function}('SELECT 1')")


def test_a_raw_cursor_cannot_read_outside_the_catalog(setup):
    """As if the guard let everything through: the engine still refuses."""
    cat_path, secret = setup
    with Catalog.open(cat_path) as cat:
        cur = cat.cursor()
        assert cur.execute("SELECT count(*) FROM stats").fetchone()[0] > 0  # its own files: yes
        for query in (
            f"SELECT * FROM read_csv('{secret}')",
            f"SELECT * FROM '{secret}'",
            "SELECT * FROM read_text('/etc/passwd')",
            f"COPY (SELECT 1) TO '{secret.parent / 'written.csv'}'",
            f"ATTACH '{secret.parent / 'x.duckdb'}'",
        ):
            with pytest.raises(duckdb.Error, match=r"(?i)permission|disabled|access"):
                cur.execute(query)
        assert not (secret.parent / "written.csv").exists()
        plan = cur.execute(PASSWD_BY_PLAN.format(path=secret)).fetchone()[0]
        assert "hunter2" not in plan and "token" not in plan
        for setting in ("SET enable_external_access = true", "SET allowed_directories = ['/']",
                        "RESET lock_configuration"):  # fmt: skip
            with pytest.raises(duckdb.Error, match="locked"):
                cur.execute(setting)


def test_ingest_compare_and_queries_still_work_on_one_catalog(tmp_path):
    with Catalog.open(tmp_path / "cat", create=True) as cat:
        cat.ingest(dump_of("nan_log"), run="a")
        assert cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py() > 0
        cat.ingest(dump_of("nan_log"), run="b")
        summary = cat.compare("a", "b", workers=1)
        assert summary.pairs > 0
        assert cat.sql("SELECT count(*) FROM comparisons WHERE status = 'ok'").column(0)[0].as_py() > 0
        spill = cat.cursor().execute("SELECT current_setting('temp_directory')").fetchone()[0]
        assert Path(spill).is_dir() and Path(spill).name.startswith("dumpcat-spill-")
