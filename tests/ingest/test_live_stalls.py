"""Live ingest when the producer stalls between files that belong together.

MindSpore may append a tensor's statistic.csv row just before writing its npy file. A row
committed without its file keeps no row id (the file is not matched to it later), so a watcher
must not commit such a row while its file may still come: neither when the producer stalls
between the row and the file for longer than the watcher's one-second settle window, nor when
the file is created between the moment the watcher lists the directory and the moment it reads
statistic.csv (a big directory is listed, scanned by helpers, then finished).

A rank's `.dump_metadata/` files written seconds apart are read twice; the catalog shows the
latest copy once.

The tests drive a real live-mode ingester over a real dump (with a real statistic.csv) and end
equal to a one-shot ingest of the finished tree.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ingest.pipeline import Ingester
from ingest.readers.registry import detect
from ingest.storage.store import CatalogStore
from tests.conftest import dump_of
from tests.ingest.test_replay import RUN, assert_same_tree, content, diff, one_shot
from tests.replay import make_stat_csv_tree, timestamp_of


@pytest.fixture(scope="module")
def stat_simple(tmp_path_factory) -> Path:
    """The `simple` sample with a statistic.csv per iteration directory (tests copy it)."""
    return make_stat_csv_tree(dump_of("simple"), tmp_path_factory.mktemp("stat_simple") / "dump")


@pytest.fixture(scope="module")
def big_leaf(tmp_path_factory) -> Path:
    """`_big_leaf_dump(copies=4)`, made once (tests copy it)."""
    return _big_leaf_dump(tmp_path_factory.mktemp("big_leaf"), copies=4)


@pytest.fixture(scope="module")
def one_shot_of(tmp_path_factory):
    """Content of a one-shot ingest of a finished tree, ingested once per module: a test whose
    tree ends byte for byte equal to it (checked) compares with this."""
    cache: dict[Path, dict[str, list]] = {}

    def get(src: Path, dump: Path) -> dict[str, list]:
        assert_same_tree(src, dump)
        if src not in cache:
            cache[src] = one_shot(tmp_path_factory.mktemp("one_shot"), src)
        return cache[src]

    return get


def _age_tree(root: Path, seconds: float) -> None:
    """Give every file and directory under `root` an mtime `seconds` ago."""
    then = time.time() - seconds
    for p in [root, *root.rglob("*")]:
        os.utime(p, (then, then))


def _last_tensor(leaf: Path) -> Path:
    """The leaf's npy file written last (its statistic.csv row is the last line)."""
    return max(leaf.glob("*.npy"), key=lambda p: timestamp_of(p.name))


def _live_ingester(cat_dir: Path, dump: Path) -> Ingester:
    ing = Ingester(CatalogStore(cat_dir, create=True), RUN, dump, detect(dump))
    ing.live, ing.grace = True, 10.0
    ing.begin()
    return ing


def _unmatched_stat_rows(cat_dir: Path) -> int:
    from catalog import Catalog

    with Catalog.open(cat_dir) as cat:
        return cat.sql("SELECT count(*) FROM stats WHERE row_id IS NULL").column(0)[0].as_py()


def test_a_row_waits_for_a_file_written_after_the_settle_window(tmp_path, stat_simple, one_shot_of):
    """The last row of a directory is on disk, its file is not, and nothing has changed for 3 s
    (past the 1 s settle window, within the 10 s grace): the row waits, and gets its row id once
    the file comes."""
    dump = tmp_path / "dump"
    shutil.copytree(stat_simple, dump)
    leaf = dump / "rank_0/Net/0/1"
    late = _last_tensor(leaf)
    held = tmp_path / late.name
    shutil.move(late, held)
    _age_tree(dump, 3.0)

    cat_dir = tmp_path / "cat"
    ing = _live_ingester(cat_dir, dump)
    ing.scan_all()
    ing.commit()
    assert _unmatched_stat_rows(cat_dir) == 0
    assert f"{ing.rel(str(leaf))}/statistic.csv" in ing.pending_files  # read again later

    shutil.move(held, late)
    ing.scan_path(str(leaf))
    ing.commit()
    assert not ing.pending_files
    assert not diff(one_shot_of(stat_simple, dump), content(cat_dir))


def test_a_row_whose_file_never_comes_is_committed_once_statistic_csv_is_quiet(tmp_path, stat_simple):
    """Past the grace period a row without its file is cataloged as it is (row_id NULL)."""
    dump = tmp_path / "dump"
    shutil.copytree(stat_simple, dump)
    late = _last_tensor(dump / "rank_0/Net/0/1")
    late.unlink()
    _age_tree(dump, 30.0)

    cat_dir = tmp_path / "cat"
    ing = _live_ingester(cat_dir, dump)
    ing.scan_all()
    ing.commit()
    assert not ing.pending_files
    assert _unmatched_stat_rows(cat_dir) == 1
    assert not diff(one_shot(tmp_path, dump), content(cat_dir))


def _big_leaf_dump(root: Path, copies: int) -> Path:
    """The `simple` sample whose first iteration directory holds `copies` times its tensors
    (the same data under later timestamps): big enough for a watcher to scan it on its helpers."""
    src = root / "src"
    shutil.copytree(dump_of("simple"), src)
    leaf = src / "rank_0/Net/0/0"
    for path in sorted(leaf.glob("*.npy")):
        stamp = str(timestamp_of(path.name))
        for k in range(1, copies):
            shutil.copy(path, leaf / path.name.replace(f".{stamp}.", f".{int(stamp) + 10_000_000 * k}.", 1))
    return make_stat_csv_tree(src, root / "dump")


def _scan_with_a_file_arriving_mid_scan(
    tmp_path: Path, workers: int, big_leaf: Path
) -> tuple[Path, Path, Path, Path, Ingester]:
    """A live ingester's first pass over a settled big directory (a copy of `big_leaf`) whose last
    tensor file (and its row) is created after the directory is listed, before its leaf is
    finished: (dump, leaf, the late file, catalog dir, ingester)."""
    dump = tmp_path / "dump"
    shutil.copytree(big_leaf, dump)
    leaf = dump / "rank_0/Net/0/0"
    assert len(list(leaf.iterdir())) >= 256
    late = _last_tensor(leaf)
    held = tmp_path / late.name
    shutil.move(late, held)
    _age_tree(dump, 30.0)  # settled: scanned like a one-shot ingest

    cat_dir = tmp_path / "cat"
    ing = _live_ingester(cat_dir, dump)
    ing.workers = workers
    reader = detect(dump).reader(ing, detect(dump))
    leaves = reader.leaves  # the reader's leaf engine
    drain = leaves._drain_leaves

    def file_arrives_during_the_scan() -> None:
        if leaves._leaf_queue and held.exists():
            shutil.move(held, late)
            _age_tree(leaf, 30.0)  # as if the producer had stalled since
        drain()

    leaves._drain_leaves = file_arrives_during_the_scan  # type: ignore[method-assign]
    ing.reader = reader
    ing.scan_all()
    ing.commit()
    assert not held.exists(), "the scan did not queue the leaf"
    return dump, leaf, late, cat_dir, ing


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_created_between_listing_and_reading_statistic_csv_is_matched(
    tmp_path, workers, big_leaf, one_shot_of
):
    """A settled big directory is listed, its files scanned, then finished: a tensor file (and its
    row) created in between is matched, though the listing does not show it."""
    dump, leaf, _, cat_dir, ing = _scan_with_a_file_arriving_mid_scan(tmp_path, workers, big_leaf)
    assert _unmatched_stat_rows(cat_dir) == 0

    ing.scan_path(str(leaf))  # the watcher's next pass catalogs the file itself
    ing.commit()
    assert not diff(one_shot_of(big_leaf, dump), content(cat_dir))


def test_metadata_written_in_two_goes_shows_its_latest_copy_once(tmp_path):
    """config.json first, data_dump.json after the settle window: two `rank_meta` rows, one
    `rank_metadata` row (the latest, with the dump config) and one `runs` row."""
    from catalog import Catalog

    dump = tmp_path / "dump"
    shutil.copytree(dump_of("simple"), dump)
    meta = dump / "rank_0/.dump_metadata"
    held = tmp_path / "data_dump.json"
    shutil.move(meta / "data_dump.json", held)
    _age_tree(dump, 3.0)

    cat_dir = tmp_path / "cat"
    ing = _live_ingester(cat_dir, dump)
    ing.scan_all()
    ing.commit()
    shutil.move(held, meta / "data_dump.json")
    _age_tree(meta, 2.0)  # settled: read now
    ing.scan_path(str(meta))
    ing.commit()
    with Catalog.open(cat_dir) as cat:
        assert cat.sql("SELECT count(*) FROM raw_rank_meta").column(0)[0].as_py() == 2
        rows = cat.sql("SELECT * FROM rank_metadata").to_pylist()
        assert len(rows) == 1 and rows[0]["dump_config"] == (meta / "data_dump.json").read_text()
        runs = cat.sql("SELECT dump_config FROM runs").to_pylist()
        assert runs == [{"dump_config": rows[0]["dump_config"]}]
    assert not diff(one_shot(tmp_path, dump), content(cat_dir))


def test_a_file_matched_late_is_cataloged_at_once_while_its_directory_is_still_written(
    tmp_path, big_leaf, one_shot_of
):
    """The file created between listing and reading statistic.csv got its row's row id in that
    pass; in the next pass, with statistic.csv and the directory still changing, the file must not
    wait for a row that is already cataloged, nor get statistics computed beside it."""
    dump, leaf, late, cat_dir, ing = _scan_with_a_file_arriving_mid_scan(tmp_path, 2, big_leaf)

    for p in (leaf, leaf / "statistic.csv"):  # the producer goes on writing this iteration
        os.utime(p)
    ing.scan_path(str(leaf))
    ing.commit()
    rel = f"{ing.rel(str(late))}"
    assert rel not in ing.pending_files, "the file waits for a statistic.csv row already cataloged"
    assert ing.summary.computed_stats == 0, "statistics computed for a tensor with a statistic.csv row"
    from catalog import Catalog

    with Catalog.open(cat_dir) as cat:
        rows = (
            cat.sql(
                f"SELECT s.stat_source FROM tensors t JOIN stats s USING (row_id) WHERE t.rel_path = '{rel}'"
            )
            .column(0)
            .to_pylist()
        )
    assert rows == ["statistic.csv"], rows
    assert not diff(one_shot_of(big_leaf, dump), content(cat_dir))
