"""The MindSpore 1.0-1.2 layouts' `graphs/` and `execution_order/` folders (issue 32 point 4).

The committed 1.x trees carry the graph IR of the real MindSpore 2.10 run they were made from, in
the 1.x forms (tests/writers/mindspore_v1_graphs.py): the `.pb` checked back with the protobuf
library, the `.ir` in the v1.x grammar. Every operator of a 1.x tree must then get the same
source line, and the same execution index, that the real npy dump gives it, wherever the layout
keeps the folders: `{net}/device_N/` in the sync layout, `device_N/` or `{net}/device_N/` in the
v1.2 async layout, from the .pb or from the .ir alone, in one ingest or arriving after the tensors.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from catalog import Catalog
from ingest.pipeline import Ingester, detect_dump
from ingest.storage.store import CatalogStore
from tests.conftest import DATA
from tests.writers.mindspore_v1_graphs import check_v1_graphs

SYNC = DATA / "mindspore_bin/kernels_filter_device"
ASYNC = DATA / "ascend_raw/nan_log_v12"
SOURCES = {SYNC: DATA / "ms210/kernels_filter/dump", ASYNC: DATA / "ms210/nan_log/dump"}
OPERATORS = (
    "SELECT DISTINCT op_name, exec_index, source_file, source_line, name_match FROM tensors "
    "WHERE run = $run AND op_type <> 'Parameter' ORDER BY op_name"
)


def _operators(cat: Catalog, run: str) -> list[dict]:
    return cat.sql(OPERATORS, {"run": run}).to_pylist()


@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> dict[Path, list[dict]]:
    """What the real npy dump each tree was made from says of every operator."""
    out = {}
    with Catalog.open(tmp_path_factory.mktemp("npy") / "cat", create=True) as cat:
        for tree, src in SOURCES.items():
            cat.ingest(src, run=tree.name)
            out[tree] = _operators(cat, tree.name)
    return out


@pytest.mark.parametrize("tree", [SYNC / "Net/device_0", ASYNC / "device_0"], ids=["sync", "async"])
def test_committed_graphs_decode_with_protobuf(tree):
    """The .pb written for the 1.x trees decodes with protobuf to the real graph's nodes, every
    frame in the ≤1.6 `file(line)` form."""
    src = SOURCES[SYNC if SYNC in tree.parents else ASYNC] / "rank_0"
    check_v1_graphs(src, tree)
    assert sorted(p.name for p in (tree / "execution_order").iterdir()) == ["ms_execution_order_graph_0.csv"]


def _layouts(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """name -> (tree, the real npy tree it matches): the committed ones and their variants."""
    reference_form = tmp_path / "async_net_device"  # v1.2 async as reference §2.1 places them
    shutil.copytree(ASYNC, reference_form)
    (reference_form / "Net").mkdir()
    shutil.move(reference_form / "device_0/graphs", reference_form / "Net/device_0/graphs")
    shutil.move(reference_form / "device_0/execution_order", reference_form / "Net/device_0/execution_order")
    ir_only = tmp_path / "sync_ir_only"  # the .ir alone: the v1.x text grammar
    shutil.copytree(SYNC, ir_only)
    (ir_only / "Net/device_0/graphs/ms_output_trace_code_graph_0.pb").unlink()
    return {
        "sync": (SYNC, SYNC),
        "sync_ir_only": (ir_only, SYNC),
        "async_device": (ASYNC, ASYNC),
        "async_net_device": (reference_form, ASYNC),
    }


def test_every_operator_gets_the_npy_dumps_source_line_and_order(tmp_path, truth):
    with Catalog.open(tmp_path / "cat", create=True) as cat:
        for name, (tree, same_as) in _layouts(tmp_path).items():
            summary = cat.ingest(tree, run=name)
            assert summary.errors == 0, (name, cat.sql("SELECT * FROM ingest_errors").to_pylist())
            got = _operators(cat, name)
            want = truth[same_as]
            assert got == want, name
            assert all(r["name_match"] == "exact" and r["exec_index"] is not None for r in got), name
            assert sum(r["source_line"] is not None for r in got) >= 4, name
            nodes = cat.sql("SELECT count(*) FROM ir_nodes WHERE run = $run", {"run": name}).column(0)[0]
            assert nodes.as_py() > 0, name


def test_graphs_arriving_after_the_tensors_resolve_them(tmp_path, truth):
    """A watcher sees the iteration folders before MindSpore has written graphs/: the next pass
    reads them, and the tensors already cataloged gain their source lines."""
    tree = tmp_path / "dump"
    shutil.copytree(SYNC, tree)
    held = tmp_path / "held"
    shutil.move(tree / "Net/device_0/graphs", held)
    with Catalog.open(tmp_path / "cat", create=True) as cat:
        cat.ingest(tree, run="late")
        before = _operators(cat, "late")
        assert before and all(r["source_line"] is None for r in before)
        shutil.move(held, tree / "Net/device_0/graphs")
        summary = cat.ingest(tree, run="late")
        assert summary.errors == 0 and summary.ir_nodes > 0
        assert _operators(cat, "late") == truth[SYNC]


@pytest.mark.parametrize(
    ("source", "graphs"),
    [(SYNC, "Net/device_0/graphs"), (ASYNC, "device_0/graphs")],
    ids=["sync", "async"],
)
def test_a_watchers_event_on_graphs_reads_them(tmp_path, truth, source, graphs):
    """The path a watcher hands over when graphs/ appears (`scan_path`) is read by each reader."""
    tree = tmp_path / "dump"
    shutil.copytree(source, tree)
    shutil.move(tree / graphs, tmp_path / "held")
    ing = Ingester(CatalogStore(tmp_path / "cat", create=True), "live", tree, detect_dump(tree))
    ing.live = True
    ing.begin()
    ing.scan_all()
    ing.commit()
    assert ing.summary.ir_nodes == 0 and ing.summary.errors == 0
    shutil.move(tmp_path / "held", tree / graphs)
    ing.scan_path(str(tree / graphs))
    ing.commit()
    assert ing.summary.ir_nodes > 0 and ing.summary.errors == 0
    with Catalog.open(tmp_path / "cat") as cat:
        assert _operators(cat, "live") == truth[source]


def test_a_corrupt_graph_file_is_an_error_row_and_the_rest_is_cataloged(tmp_path):
    tree = tmp_path / "dump"
    shutil.copytree(ASYNC, tree)
    pb = tree / "device_0/graphs/ms_output_trace_code_graph_0.pb"
    pb.write_bytes(b"\x93not a protobuf" * 10)
    (tree / "device_0/graphs/ms_output_trace_code_graph_0.ir").write_bytes(b"\xff\xfe garbage\n")
    (tree / "device_0/graphs/notes.txt").write_text("not a graph")
    with Catalog.open(tmp_path / "cat", create=True) as cat:
        summary = cat.ingest(tree, run="r")
        assert summary.tensors == 180
        errors = cat.sql("SELECT path, stage, reason FROM ingest_errors ORDER BY path").to_pylist()
        paths = [e["path"] for e in errors]
        assert "device_0/graphs/notes.txt" in paths
        assert any(p.startswith("device_0/graphs/ms_output_trace_code_graph_0") for p in paths), errors
        ops = _operators(cat, "r")
        assert ops and all(r["exec_index"] is not None for r in ops)  # the execution order still counts
