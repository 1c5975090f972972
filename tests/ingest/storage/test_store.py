"""The catalog on disk: atomic batches, compaction that readers never notice, retired files."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pyarrow.parquet as pq

from catalog import Catalog
from ingest.pipeline import ingest_dump
from ingest.storage.store import CatalogStore
from tests.conftest import as_written_before_flat_files, dump_of
from tests.ingest.test_incremental import _content

# Compaction merges at least MIN_BATCHES consecutive small batches and at most 4 x MIN_BATCHES.
# 2 (the watcher's default is 16) with 9 batches still leaves a batch past a full group, at ~2 s
# an ingest: 19 ingests (min_batches=4) were most of this test's time and proved nothing more.
MIN_BATCHES = 2


def test_compaction_keeps_content_and_readers_see_no_change(tmp_path, copy_dump):
    import shutil

    dump = copy_dump("nan_log", "simple")
    cat_dir = tmp_path / "cat"
    for rank in range(1, 4 * MIN_BATCHES + 1):  # ranks arriving one by one: one small batch per ingest
        ingest_dump(cat_dir, dump)
        shutil.copytree(dump / "rank_0", dump / f"rank_{rank}")
    ingest_dump(cat_dir, dump)
    store = CatalogStore(cat_dir)
    before_batches = len(store.snapshot()["batches"])
    assert before_batches > 4 * MIN_BATCHES  # more than one compaction merges
    reader = Catalog.open(cat_dir)
    expected = _content(reader)
    total = expected[0].__len__()

    seen: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read_loop() -> None:
        other = Catalog.open(cat_dir)
        while not stop.is_set():
            try:
                seen.append(other.sql("SELECT count(*) FROM tensors").column(0)[0].as_py())
            except BaseException as exc:  # the test fails on any reader error
                errors.append(exc)

    t = threading.Thread(target=read_loop)
    t.start()
    with store.writer_lock():
        merged = store.compact("simple", min_batches=MIN_BATCHES)
    assert merged == 4 * MIN_BATCHES  # a full group; the batches after it stay as they were
    after = store.snapshot()
    assert len(after["batches"]) == before_batches - merged + 1
    retired_batches = [r for r in after["retired"] if r["path"].startswith("data/run=")]
    assert len(retired_batches) == merged  # (the rest: flat files merged by the ingests)
    with store.writer_lock():
        assert store.purge_retired(older_than=3600) == 0  # too recent: a reader may use them
    stop.set()
    t.join()
    assert not errors and seen and set(seen) == {total}
    assert _content(reader) == expected  # the old reader refreshes to the merged batch
    with store.writer_lock():
        # (a reader's refresh may have purged entries over a minute old already: a loaded machine)
        retired = store.snapshot()["retired"]
        assert retired_batches[0] in retired and store.purge_retired(older_than=0) == len(retired)
    assert all(not (cat_dir / r["path"]).exists() for r in after["retired"])
    assert _content(Catalog.open(cat_dir)) == expected
    # Incremental re-ingest after compaction still adds nothing (the manifest survived the merge).
    s = ingest_dump(cat_dir, dump)
    assert (s.tensors, s.stat_rows, s.ops, s.errors) == (0, 0, 0, 0)


def test_uncommitted_batch_of_a_crashed_writer_is_removed(tmp_path, copy_dump):
    dump = copy_dump("simple")
    cat_dir = tmp_path / "cat"
    ingest_dump(cat_dir, dump)
    orphan = cat_dir / "data" / "run=simple" / "20260101T000000-deadbeef"
    orphan.mkdir()
    (orphan / "tensors.parquet").write_bytes(b"half written")
    assert Catalog.open(cat_dir).sql("SELECT count(*) FROM tensors").column(0)[0].as_py() == 243
    store = CatalogStore(cat_dir)
    with store.writer_lock():
        pass
    assert not orphan.exists()


def test_creation_cut_short_is_finished_and_other_folders_are_refused(tmp_path, copy_dump):
    """A crash while a catalog is being created leaves data/ and snapshot.json (and maybe a temp
    file) but no marker: creating it again finishes the job. A folder with anything else is not
    taken over."""
    import pytest

    from ingest.storage.store import CatalogError

    half = tmp_path / "half"
    (half / "data").mkdir(parents=True)
    (half / "snapshot.json").write_text('{"version": 0, "batches": []}')
    (half / ".snapshot.json.4242.tmp").write_text("{")
    cat = Catalog.open(half, create=True)
    assert cat.ingest(copy_dump("simple")).tensors == 243
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True)
    (other / "notes.txt").write_text("mine")
    with pytest.raises(CatalogError, match="non-empty directory"):
        CatalogStore(other, create=True)
    with pytest.raises(CatalogError, match="not a dumpcat catalog"):
        Catalog.open(tmp_path / "nothing")


def test_catalog_written_before_a_column_existed_still_answers(tmp_path):
    """Parquet files of an older dumpcat lack newer columns (e.g. stat_rows.mismatch): the raw views
    give NULL for them and every view still answers."""
    dump = tmp_path / "d"
    shutil.copytree(dump_of("nan_log"), dump)
    it0 = dump / "rank_0/Net/0/0"
    lines = ["Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value\n"]
    for f in sorted(it0.glob("Log.*.npy")):
        op_type, op, task, stream, ts, io, slot = f.name.split(".")[:7]
        a = np.load(f)
        lines.append(
            f'{op_type},{op},{task},{stream},{ts},{io},{slot},{a.nbytes},float32,"(2,3)",{a.max()},\n'
        )
    (it0 / "statistic.csv").write_text("".join(lines))
    cat_path = tmp_path / "cat"
    Catalog.open(cat_path, create=True).ingest(dump, run="old")
    (stat_file,) = cat_path.glob("data/*/*/stat_rows.parquet")
    old = pq.read_table(stat_file)
    pq.write_table(old.drop_columns(["mismatch"]), stat_file)
    as_written_before_flat_files(cat_path)
    cat = Catalog.open(cat_path)
    rows = cat.sql("SELECT op_type, mismatch FROM stats WHERE stat_source = 'statistic.csv'").to_pylist()
    assert rows == [{"op_type": "Log", "mismatch": None}] * 2
    assert cat.sql("SELECT count(*) FROM first_anomaly").column(0)[0].as_py() == 2
