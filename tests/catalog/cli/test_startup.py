"""Start-up of a one-shot `dumpcat ingest` (issue 14, part 4): what makes a small ingest fast is
checked as behaviour, on real processes and real dumps; its time is measured by
bench/bench_speed.py, not here.

- the command line imports neither DuckDB, numpy nor pyarrow before a command runs;
- the writer's DuckDB is opened and its resolution views bound in a thread while the rest is
  imported (ingest/storage/writer_warm_up.py), and the catalog it writes is the one a writer that connects
  itself writes;
- a small batch resolves its tensors and stats side by side on two cursors, with the same files
  as one after the other;
- a small npy dump with computed statistics never imports pyarrow.compute (~40 ms);
- a mistyped DUMPCAT_WRITER_MEMORY, or one under 1 MiB, is one line before anything is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from catalog.api import Catalog
from ingest.pipeline import ingest_dump
from ingest.storage import flat
from tests.conftest import DATA, REPO

ROOT = REPO
sys.path.insert(0, str(ROOT / "bench"))

import synth  # noqa: E402


def _python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory) -> Path:
    """200 npy tensors without statistic.csv (statistics computed), as bench_speed's part 4."""
    tree = tmp_path_factory.mktemp("startup") / "tree_200"
    synth.generate(tree, 200, ranks=1, iterations=2, statistic_csv=False, workers=1)
    return tree


def test_cli_imports_no_engine_before_a_command():
    out = _python(
        "import sys, catalog.cli.commands\n"
        "print(sorted(m for m in ('duckdb', 'numpy', 'pyarrow', 'catalog.api') if m in sys.modules))"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    # the package's names still import as before
    out = _python(
        "from catalog import Catalog, CatalogError, QueryRefused, TensorNotFoundError; print(Catalog)"
    )
    assert "catalog.api.Catalog" in out.stdout, out.stderr


def test_producer_choices_are_the_registrys_without_a_reader_import():
    """`--producer` offers the registry's names; neither importing the command line nor listing
    them imports a reader module, and only listing them looks up the plug-ins (importlib.metadata)."""
    out = _python(
        "import sys, json, catalog.cli.commands\n"
        "looked_up = 'importlib.metadata' in sys.modules\n"
        "choice = next(p for p in catalog.cli.commands.ingest.params if p.name == 'producer').type\n"
        "names = list(choice.choices)\n"
        "readers = sorted(m for m in sys.modules if m.startswith('ingest.readers.')\n"
        "                 and m.rsplit('.', 1)[1] not in ('base', 'registry', 'sink'))\n"
        "print(json.dumps([looked_up, names, readers]))"
    )
    assert out.returncode == 0, out.stderr
    from ingest.readers.registry import reader_names

    looked_up, names, readers = json.loads(out.stdout)
    assert not looked_up
    assert names == reader_names()
    assert readers == []


def test_export_default_matches_the_cli():
    from catalog.cli.commands import export_duckdb_cmd
    from catalog.export import DEFAULT_STORAGE_VERSION

    option = next(p for p in export_duckdb_cmd.params if p.name == "storage_version")
    assert option.default == DEFAULT_STORAGE_VERSION


def _flat_rows(path: Path) -> dict[str, str]:
    with Catalog.open(path) as cat:
        return {
            view: repr(cat.sql(f"SELECT * FROM {view} ORDER BY ALL").to_pylist())
            for view in flat.FLAT_SOURCES
        }


def test_cli_ingest_uses_the_warm_connection_and_writes_what_a_cold_writer_does(small_tree, tmp_path):
    """`dumpcat ingest` in a real process: its writer took the warmed-up connection, nothing
    imported pyarrow.compute, and its flat tables equal those of an ingest whose writer connected
    itself (the Python API does not warm up)."""
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    # pandas blocked: where it is installed, pyarrow imports it (and with it pyarrow.compute) on
    # its first pa.array() of a Python list; this test is about what dumpcat itself imports
    code = (
        "import sys, json\n"
        "class NoPandas:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "from catalog.cli.commands import main\n"
        "import ingest.storage.writer_warm_up as w\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(json.dumps({'warmed': w._thread is not None, 'left': w._connection is not None,\n"
        "                  'compute': 'pyarrow.compute' in sys.modules}))\n"
    )
    out = _python(code, "ingest", str(small_tree), "--catalog", str(warm))
    assert out.returncode == 0, out.stderr
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state == {"warmed": True, "left": False, "compute": False}
    assert "200 new tensors" in out.stdout and "200 computed stats" in out.stdout
    ingest_dump(cold, small_tree, run=small_tree.name, workers=1)
    assert _flat_rows(warm) == _flat_rows(cold)


def test_warm_connection_has_the_resolution_views():
    from ingest.storage import writer_warm_up

    con = flat.open_writer_connection()
    try:
        names = {
            r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        }
        assert {"tensors_resolved", "stats_resolved", "raw_tensors", "raw_ops"} <= names
        assert con.execute("SELECT count(*) FROM stats_resolved").fetchall() == [(0,)]
    finally:
        con.close()
    # without a warm-up there is nothing to take
    if writer_warm_up._thread is None:
        assert writer_warm_up.take_warm_connection() is None


@pytest.mark.parametrize(
    "root",
    [DATA / "ms210" / "control_flow" / "dump", DATA / "msprobe" / "pt_l1_statistics_2ranks"],
    ids=lambda p: p.parent.name if p.name == "dump" else p.name,
)
def test_side_by_side_resolution_writes_the_same_files(root, tmp_path, monkeypatch):
    """Small batches resolve tensors and stats on two cursors at once; forced one after the other
    (the path of big batches), every flat file has the same rows in the same order."""
    pools: list[int] = []

    class CountedPool(ThreadPoolExecutor):  # the real pool, counted: which path each ingest took
        def __init__(self, *args, **kwargs) -> None:
            pools.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(flat, "ThreadPoolExecutor", CountedPool)
    both = tmp_path / "both"
    ingest_dump(both, root, run="r", batch_rows=50, workers=1)
    side_by_side = len(pools)
    monkeypatch.setattr(flat, "_SIDE_BY_SIDE_ROWS", -1)
    serial = tmp_path / "serial"
    ingest_dump(serial, root, run="r", batch_rows=50, workers=1)
    assert len(pools) == side_by_side, "a batch was resolved side by side with the path turned off"
    has_both = root.name == "dump"  # control_flow: tensors and computed stats in every batch
    assert (side_by_side > 0) == has_both
    rows = 0
    for view in flat.FLAT_SOURCES:
        files = []
        for path in (both, serial):
            with Catalog.open(path) as cat:
                entries = cat.store.snapshot()["flat"][view]
                files.append([pq.read_table(path / e["path"] / flat.DATA_FILE).to_pylist() for e in entries])
        assert repr(files[0]) == repr(files[1]), view
        rows += sum(len(f) for f in files[0])
    assert rows > 100
    assert _flat_rows(both) == _flat_rows(serial)


@pytest.mark.parametrize(
    ("setting", "message"),
    [("lots", "cannot read 'lots' (e.g. 256MB)"), ("1MB", "'1MB' is less than 1 MiB (e.g. 256MB)")],
)
def test_a_bad_writer_memory_is_one_line_before_anything_is_written(small_tree, tmp_path, setting, message):
    cat = tmp_path / "cat"
    env = dict(os.environ, DUMPCAT_WRITER_MEMORY=setting)
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(small_tree), "--catalog", str(cat)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [f"dumpcat: error: DUMPCAT_WRITER_MEMORY: {message}"]
    assert not list(cat.rglob("*.parquet"))


def test_a_refused_ingest_ends_cleanly_while_the_writer_warms_up(tmp_path):
    """A dump root refused at once ends the process while the warm-up thread may still be inside
    DuckDB: the process waits for it (a daemon thread there aborted the interpreter, exit -6)."""
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-m", "catalog.cli", "ingest", str(tmp_path), "--catalog", str(tmp_path / "c")],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith("dumpcat: error: ") and len(out.stderr.strip().splitlines()) == 1
