"""The structure holds (issue 34): no module imports a layer above its own (`ingest` never imports
`catalog`; the storage layer imports neither), the storage layer has no import cycle, no new cycle
appears, and docs/structure.md is the picture of today's imports."""

from __future__ import annotations

from pathlib import Path

from tests.import_layers import STRUCTURE, cycles, import_graph, structure_markdown, upward_imports

# Cycles still to be broken (issue 34): none left. A cycle may leave this list, not join it. (The
# readers and the pipeline left it: readers see the pipeline through ingest/readers/sink.py only;
# `dumpcat stats` and its Spark jobs: both call ingest/statistics/rows.py.)
KNOWN_CYCLES: list[list[str]] = []


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports(import_graph()) == []


def test_no_new_import_cycle_and_none_in_storage():
    found = cycles(import_graph())
    assert not any(m.startswith("ingest.storage") for c in found for m in c), found
    new = [c for c in found if not any(set(c) <= set(known) for known in KNOWN_CYCLES)]
    assert not new, new


def test_known_cycles_still_exist():
    """A cycle that was broken leaves KNOWN_CYCLES, so that it cannot come back unnoticed."""
    found = cycles(import_graph())
    gone = [known for known in KNOWN_CYCLES if not any(set(c) <= set(known) for c in found)]
    assert not gone, gone


def test_the_structure_picture_is_current():
    want = structure_markdown(import_graph())
    assert STRUCTURE.read_text(encoding="utf-8") == want, "run: python tests/import_layers.py --write"


def test_every_package_is_shipped():
    """pyproject.toml lists its packages by hand: a new subpackage missing there would be left out of
    a (non-editable) install, the Docker image's."""
    import tomllib

    from tests.import_layers import ROOT

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = setuptools.get("package-dir", {})  # import name -> folder (dumpcat_sql is sql/)
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("catalog", "ingest")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, found - listed

    def folder(name: str) -> Path:
        top, *rest = name.split(".")
        return ROOT / folders.get(top, top) / "/".join(rest)

    assert all(folder(name).is_dir() for name in listed)
    # sql/ and sql/queries hold SQL files only, installed as dumpcat_sql (not `sql`, JupySQL's name)
    assert folder("dumpcat_sql.queries") == ROOT / "sql" / "queries"
    assert {"dumpcat_sql", "dumpcat_sql.queries"} <= listed and "sql" not in listed
    assert not (ROOT / "sql" / "__init__.py").exists()


def test_tests_mirror_the_packages():
    """A test file lives in the folder of the package it tests (tests/ingest/storage/ tests
    ingest/storage/), or at the top of tests/ when it tests the project as a whole (the README,
    the structure, the benchmarks' scripts, the Dockerfile)."""
    from tests.import_layers import ROOT

    tests = ROOT / "tests"
    folders = {p.parent for p in tests.rglob("test_*.py") if "data" not in p.relative_to(tests).parts}
    assert len(folders) > 5, folders
    for folder in folders - {tests}:
        package = ROOT / folder.relative_to(tests)
        assert (package / "__init__.py").is_file(), f"{folder} mirrors no package"
        assert (folder / "__init__.py").is_file(), f"{folder} lacks __init__.py"
