"""Shared fixtures: paths of the real dump trees committed under tests/data."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SAMPLES = DATA / "samples" / "mindspore-2.10-cpu"
MS210 = DATA / "ms210"


def dump_of(scenario: str) -> Path:
    """The dump root (holding rank_0/) of a committed real dump."""
    for base in (SAMPLES, MS210):
        if (base / scenario / "dump").is_dir():
            return base / scenario / "dump"
    raise FileNotFoundError(scenario)


def nan_log_catalog(folder: Path) -> Path:
    """A catalog of the committed nan_log dump in `folder/cat` (the server tests' catalog)."""
    from catalog.api import Catalog

    path = folder / "cat"
    Catalog.open(path, create=True).ingest(dump_of("nan_log"), run="nan_log")
    return path


def as_written_before_flat_files(catalog: Path) -> None:
    """Make a catalog look like one an older dumpcat wrote: no flat files, no schema ids in the
    snapshot (so readers check each file's columns, as they must for files that lack newer ones)."""
    import json

    snap_file = catalog / "snapshot.json"
    snap = json.loads(snap_file.read_text())
    snap.pop("flat", None)
    for batch in snap["batches"]:
        batch.pop("schema", None)
    snap_file.write_text(json.dumps(snap))
    shutil.rmtree(catalog / "data" / "flat", ignore_errors=True)


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    return tmp_path / "cat"


@pytest.fixture
def copy_dump(tmp_path: Path):
    """Copy a committed dump into tmp_path so a test may modify it."""

    def _copy(scenario: str, name: str | None = None) -> Path:
        dest = tmp_path / (name or scenario)
        shutil.copytree(dump_of(scenario), dest)
        for p in [dest, *dest.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        return dest

    return _copy
