"""Statistics computed by the metadata scan (leaf_scan, in the helpers, while the walk goes on) are
exactly those the flush computes (`computed_stats_rows`): on every committed MindSpore 2.10 dump, on
a tree whose statistic.csv leaves some tensors without a row, and with md5. The flush path is the one
a policy without `scan_args` takes (the raw policy), so turning the scan's statistics off is turning
on the other real path, not a mock."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import ingest.pipeline as pipeline
from bench import synth
from catalog import Catalog
from ingest.pipeline import ingest_dump
from ingest.readers import mindspore_npy

DATA = Path(__file__).resolve().parents[1] / "data"
MS210_DUMPS = sorted(p.parent for p in (DATA / "ms210").glob("*/dump.json")) + sorted(
    p.parent for p in (DATA / "ms210").glob("*/*/dump.json")
)


def _ingest(catalog: Path, root: Path, monkeypatch, *, in_scan: bool, **kw) -> tuple[object, int]:
    """Ingest `root`; the statistics computed by the scan, or (in_scan=False) all at the flush.
    Returns the summary and the tensors whose statistics the flush computed."""
    at_flush: list[int] = []
    real = pipeline.computed_stats_rows

    def counted(tensors, *args, **kwargs):
        at_flush.append(tensors.num_rows)
        return real(tensors, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(pipeline, "computed_stats_rows", counted)
        if not in_scan:
            m.setattr(mindspore_npy.LeafFiles, "scan_args", lambda self: (None,))
        summary = ingest_dump(catalog, root, run="r", **kw)
    return summary, sum(at_flush)


def _stats_and_errors(catalog: Path) -> tuple[str, str]:
    with Catalog.open(catalog) as cat:
        stats = cat.sql("SELECT * FROM stats ORDER BY row_id, stat_id").to_pylist()
        errors = cat.sql('SELECT * EXCLUDE ("at") FROM ingest_errors ORDER BY ALL').to_pylist()
    return repr(stats), repr(errors)


@pytest.mark.parametrize("root", [p / "dump" for p in MS210_DUMPS], ids=lambda p: p.parent.name)
def test_statistics_from_the_scan_equal_those_of_the_flush(root, tmp_path, monkeypatch):
    scanned, flushed = tmp_path / "scan", tmp_path / "flush"
    s1, at_flush = _ingest(scanned, root, monkeypatch, in_scan=True, workers=1)
    s2, at_flush_before = _ingest(flushed, root, monkeypatch, in_scan=False, workers=1)
    assert s1.computed_stats == s2.computed_stats == at_flush_before > 0
    assert at_flush == 0  # no statistic.csv in these dumps: every tensor's came from the scan
    assert s1.errors == s2.errors
    assert _stats_and_errors(scanned) == _stats_and_errors(flushed)


def test_helpers_compute_them_with_md5_on_a_tree_where_statistic_csv_misses_rows(tmp_path, monkeypatch):
    """A synthetic tree (npy files and statistic.csv in each leaf) from which one leaf's
    statistic.csv lost half its rows and another leaf lost its statistic.csv: the scan computes the
    latter leaf's statistics (on helper processes: the tree needs several scan batches), the flush
    those of the tensors left without a row, and the catalogs are the same."""
    tree = tmp_path / "tree"
    synth.generate(tree, 3000, ranks=1, iterations=3, workers=1)
    leaves = sorted(p.parent for p in tree.rglob("statistic.csv"))
    assert len(leaves) >= 2
    (leaves[0] / "statistic.csv").unlink()
    cut = leaves[1] / "statistic.csv"
    with open(cut, newline="") as f:
        lines = list(csv.reader(f))
    with open(cut, "w", newline="") as f:
        csv.writer(f).writerows(lines[: 1 + (len(lines) - 1) // 2])
    scanned, flushed = tmp_path / "scan", tmp_path / "flush"
    s1, at_flush = _ingest(scanned, tree, monkeypatch, in_scan=True, workers=2, md5=True)
    s2, at_flush_before = _ingest(flushed, tree, monkeypatch, in_scan=False, workers=2, md5=True)
    in_leaf = sum(1 for _ in leaves[0].glob("*.npy"))
    assert s1.computed_stats == s2.computed_stats == at_flush_before
    assert 0 < at_flush < at_flush_before - in_leaf + 1  # the leaf without a csv: by the scan
    assert _stats_and_errors(scanned) == _stats_and_errors(flushed)
    with Catalog.open(scanned) as cat:
        md5s = (
            cat.sql("SELECT count(*) FROM stats WHERE stat_source = 'computed' AND md5 IS NOT NULL")
            .column(0)[0]
            .as_py()
        )
    assert md5s == s1.computed_stats


def test_statistic_csv_rows_win_over_the_scans_statistics_of_the_same_tensors(tmp_path):
    """A statistic.csv that the ingest reads after the scan found none (a folder being written to)
    matches some of the tensors the scan computed statistics for: those keep the csv's rows only,
    the others keep the scan's. Real scan, real ingester, real catalog."""
    from ingest.pipeline import Ingester, ReaderSink, detect_dump
    from ingest.readers.leaf_scan import scan_tensor_columns
    from ingest.storage.store import CatalogStore

    root = DATA / "ms210" / "nan_log" / "dump"
    leaf = root / "rank_0" / "Net" / "0" / "0"
    names = sorted(p.name for p in leaf.glob("*.npy"))
    store = CatalogStore(tmp_path / "cat", create=True).shard("r", None)
    ing = Ingester(store, "r", root, detect_dump(root), workers=1)
    files = mindspore_npy.LeafFiles(ReaderSink(ing))
    ctx = ("r", 0, "Net", 0, 0, "iteration")
    [scanned] = scan_tensor_columns([(ctx, str(leaf), "rank_0/Net/0/0", names, [None] * len(names))], False)
    table, irregular = files.scanned_table(scanned)
    computed = files.scanned_stats(scanned, table)
    assert computed is not None and not irregular and computed[0].num_rows == len(names) > 3
    ids = table.column("row_id").to_pylist()
    matched = set(ids[:3])
    with store.writer_lock():
        ing.begin()
        store.start_run()
        files.add_scanned_tensors(table, matched, [computed], set(ids))
        ing.flush(last=True)
        store.finish_run("r")
    assert ing.summary.computed_stats == len(ids) - 3
    with Catalog.open(tmp_path / "cat") as cat:
        got = cat.sql("SELECT row_id FROM stats WHERE stat_source = 'computed'").column(0).to_pylist()
    assert sorted(got) == sorted(set(ids) - matched)
