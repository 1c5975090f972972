"""The reader contract (issue 34): the registry names every reader without importing it, a producer
can live outside the tree (an entry point of `dumpcat.producers`), readers reach the pipeline only
through `IngestSink`, and `dumpcat ingest` detects each dump once."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import ingest.readers.registry as registry
from catalog import Catalog
from ingest.pipeline import ReaderSink, detect_dump, ingest_dump
from ingest.readers.base import Reader
from ingest.readers.sink import IngestOptions, IngestSink
from tests.conftest import REPO, dump_of

ROOT = REPO


def test_each_registry_name_is_its_readers():
    classes = registry.built_in_readers()
    assert [cls.name for cls in classes] == registry.built_in_names()
    assert all(issubclass(cls, Reader) for cls in classes)
    for name, cls in zip(registry.built_in_names(), classes, strict=True):
        assert registry.reader_by_name(name) is cls


def test_no_built_in_reader_inherits_from_another():
    """Readers share their parts by composition (a walker, a leaf engine and its file policy), not
    by subclassing one another: no built-in reader has another registered reader among its bases."""
    readers = set(registry.built_in_readers())
    for cls in readers:
        ancestors = [c for c in cls.__mro__[1:] if c is not Reader and c is not object]
        assert not [c for c in ancestors if c in readers], cls


# -- a producer outside the tree ---------------------------------------------------------------

TOY_READER = '''
"""A producer that is not dumpcat's: folders holding a `toy.marker` file."""

from pathlib import Path

from ingest.readers.base import Detection, Reader


class ToyReader(Reader):
    name = "toy"
    producer = "a toy producer"
    layout = "{root}/toy.marker"
    looked_for = "a toy.marker file"
    cataloged = "an ingest_errors row per file"

    @classmethod
    def detect(cls, path):
        return Detection(cls, Path(path), "toy.marker") if (Path(path) / "toy.marker").is_file() else None

    def walk(self):
        entries = self.sink.scandir(str(self.root)) or []
        self.sink.saw_files(len(entries), progress=True)
        for entry in entries:
            self.sink.file_error(self.sink.rel(entry.path), "toy", "toy", "seen by the toy reader")
'''


def _distribution(where: Path, entry_points: str, module: str = TOY_READER) -> Path:
    """An installed distribution as importlib.metadata finds one: a module and a `.dist-info`
    folder with its METADATA and entry_points.txt, in a folder to put on sys.path."""
    where.mkdir()
    (where / "dumpcat_toy_reader.py").write_text(textwrap.dedent(module), encoding="utf-8")
    info = where / "dumpcat_toy_reader-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dumpcat-toy-reader\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")
    return where


@pytest.fixture
def plugin_path(monkeypatch):
    """Put a folder on sys.path for the test, and look the plug-ins up afresh before and after."""
    registry.external_readers.cache_clear()

    def install(where: Path) -> None:
        monkeypatch.syspath_prepend(str(where))

    yield install
    monkeypatch.undo()
    registry.external_readers.cache_clear()


def test_a_producer_outside_the_tree_is_found_by_its_entry_point(tmp_path, plugin_path):
    plugin_path(_distribution(tmp_path / "site", "[dumpcat.producers]\ntoy = dumpcat_toy_reader:ToyReader\n"))
    assert registry.reader_names() == [*registry.built_in_names(), "toy"]
    toy = registry.reader_by_name("toy")
    assert toy.__module__ == "dumpcat_toy_reader"
    from catalog.cli.commands import ingest as ingest_command

    choice = next(p for p in ingest_command.params if p.name == "producer").type
    assert "toy" in choice.choices

    root = tmp_path / "toy_dump"
    root.mkdir()
    (root / "toy.marker").write_text("")
    (root / "a.bin").write_bytes(b"x")
    detection = detect_dump(root)
    assert detection.reader is toy
    # tried after the built-in readers: a built-in dump is still theirs
    assert detect_dump(dump_of("nan_log")).reader.name == "mindspore-npy"
    # and it ingests through the pipeline like any reader
    summary = ingest_dump(tmp_path / "cat", root)
    assert (summary.producer, summary.files_seen, summary.errors) == ("toy", 2, 2)
    errors = Catalog.open(tmp_path / "cat").sql("SELECT path FROM ingest_errors ORDER BY 1").column(0)
    assert errors.to_pylist() == ["a.bin", "toy.marker"]


def test_a_broken_plugin_is_left_out_with_a_warning(tmp_path, plugin_path):
    plugin_path(
        _distribution(
            tmp_path / "site",
            "[dumpcat.producers]\n"
            "not-toy = dumpcat_toy_reader:ToyReader\n"  # the name is not the reader's
            "missing = dumpcat_toy_reader:Missing\n"
            "ascend-raw = dumpcat_toy_reader:ToyReader\n",  # a built-in name
        )
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert registry.reader_names() == registry.built_in_names()
    messages = " | ".join(str(w.message) for w in caught)
    assert "'not-toy'" in messages and "is named 'toy'" in messages
    assert "'missing'" in messages and "cannot be loaded" in messages
    assert "'ascend-raw'" in messages


# -- the sink is all a reader sees of the pipeline ---------------------------------------------


def _protocol_members(cls: type) -> set[str]:
    return {n for n in vars(cls) if not n.startswith("_")}


def test_readers_use_only_the_sink_contract():
    """Every attribute a reader module asks of `sink` / `self.sink` is a member of IngestSink, and
    every `sink.options.X` a field of IngestOptions: the contract is all a reader depends on."""
    members = _protocol_members(IngestSink)
    fields = {f.name for f in dataclasses.fields(IngestOptions)}
    used: dict[str, set[str]] = {}
    for path in sorted((ROOT / "ingest/readers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            is_sink = (isinstance(value, ast.Name) and value.id == "sink") or (
                isinstance(value, ast.Attribute) and value.attr == "sink"
            )
            if is_sink:
                used.setdefault(node.attr, set()).add(path.name)
            if isinstance(value, ast.Attribute) and value.attr == "options":
                assert node.attr in fields, (path.name, node.attr)
    assert used, "no reader uses its sink?"
    assert set(used) <= members, {k: v for k, v in used.items() if k not in members}


def test_the_pipelines_sink_is_the_contract_and_nothing_more():
    assert _protocol_members(ReaderSink) == _protocol_members(IngestSink)


def test_readers_never_import_the_pipeline():
    for path in sorted((ROOT / "ingest/readers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "ingest.pipeline", path.name
            elif isinstance(node, ast.Import):
                assert all(a.name != "ingest.pipeline" for a in node.names), path.name


# -- detection once per ingest -------------------------------------------------------------------


def test_the_command_line_detects_each_dump_once(tmp_path, monkeypatch):
    calls: list[Path] = []
    detect = registry.detect

    def counted(root, producer=None):
        calls.append(root)
        return detect(root, producer)

    monkeypatch.setattr(registry, "detect", counted)
    from catalog.cli.commands import main

    args = ["ingest", str(dump_of("nan_log")), "-c", str(tmp_path / "cat"), "--no-progress", "--workers", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "MindSpore" in result.output.splitlines()[0]  # the claim, shown before the ingest
    assert len(calls) == 1, calls


def test_the_producers_table_is_rendered_from_the_registry():
    """docs/producers.md's table is the registry's (`python tests/producers_table.py --write`): a
    producer added to the registry gets its row from its reader's class attributes."""
    from tests.producers_table import PAGE, page_with_table, producers_table

    page = PAGE.read_text(encoding="utf-8")
    assert page == page_with_table(page), "run: python tests/producers_table.py --write"
    rows = [line for line in producers_table().splitlines()[2:]]
    assert len(rows) == len(registry.built_in_names())
    for line, name in zip(rows, registry.built_in_names(), strict=True):
        assert line.startswith(f"| `{name}`: "), line
