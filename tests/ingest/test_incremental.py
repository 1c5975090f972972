"""Re-ingest adds nothing, a grown tree adds only what is new, row ids never change, and a
SIGKILL at any moment leaves a catalog that a re-run completes to exactly a one-shot ingest."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalog import Catalog
from tests.compare import catalog_content
from tests.conftest import REPO

COMPARE = (
    "SELECT row_id, rel_path, op_name, shape, dtype FROM tensors ORDER BY row_id",
    "SELECT row_id, stat_source, count, max, min, nan_count, l2norm FROM stats ORDER BY row_id, stat_id",
    "SELECT run, rank, graph_id, exec_index, op_name FROM ops ORDER BY ALL",
    "SELECT * FROM graph_runs ORDER BY ALL",
    "SELECT run, rank, device_target, ms_version FROM rank_metadata ORDER BY ALL",
)


def _content(cat: Catalog) -> list:
    return catalog_content(cat, COMPARE)


def test_reingest_adds_nothing_and_ids_are_stable(tmp_path, copy_dump):
    dump = copy_dump("simple")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    before = _content(cat)
    s = cat.ingest(dump)
    assert (s.tensors, s.stat_rows, s.computed_stats, s.ops, s.errors) == (0, 0, 0, 0, 0)
    assert _content(cat) == before
    # A fresh catalog of the same tree gives the same row ids.
    other = Catalog.open(tmp_path / "cat2", create=True)
    other.ingest(dump)
    assert _content(other) == before


def test_grown_tree_adds_only_new(tmp_path, copy_dump):
    dump = copy_dump("simple")
    moved = tmp_path / "held_back"
    shutil.move(dump / "rank_0/Net/0/2", moved)
    order = dump / "rank_0/execution_order/ms_global_execution_order_graph_0.csv"
    order.write_text("0\n1\n")
    cat = Catalog.open(tmp_path / "cat", create=True)
    first = cat.ingest(dump)
    assert first.tensors == 162
    ids_before = set(cat.sql("SELECT row_id FROM tensors").column(0).to_pylist())
    # Training goes on: iteration 2 appears and the history file is appended to.
    shutil.move(moved, dump / "rank_0/Net/0/2")
    with order.open("a") as fh:
        fh.write("2\n")
    second = cat.ingest(dump)
    assert second.tensors == 81 and second.computed_stats == 81 and second.ops == 0
    ids_after = set(cat.sql("SELECT row_id FROM tensors").column(0).to_pylist())
    assert ids_before < ids_after and len(ids_after) == 243
    assert cat.sql("SELECT list(iteration ORDER BY seq) FROM graph_runs").column(0)[0].as_py() == [0, 1, 2]
    one_shot = Catalog.open(tmp_path / "one", create=True)
    one_shot.ingest(dump)
    assert _content(one_shot) == _content(cat)


def test_statistic_csv_growing_by_appends(tmp_path, copy_dump):
    dump = copy_dump("simple")
    it = dump / "rank_0/Net/0/0"
    files = sorted(it.glob("*.output.0.*.npy"))[:4]
    header = (
        "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
        "Max Value,Min Value,L2Norm Value\n"
    )

    def line(f: Path, mx: float) -> str:
        op_type, op, task, stream, ts, io, slot = f.name.split(".")[:7]
        return f"{op_type},{op},{task},{stream},{ts},{io},{slot},,float32,,{mx},0,1,\n"

    csv = it / "statistic.csv"
    csv.write_text(header + line(files[0], 1) + line(files[1], 2) + line(files[2], 3)[:20])  # last is partial
    cat = Catalog.open(tmp_path / "cat", create=True)
    s1 = cat.ingest(dump)
    assert s1.stat_rows == 2 and s1.errors == 0
    with csv.open("a") as fh:
        fh.write(line(files[2], 3)[20:] + line(files[3], 4))
    s2 = cat.ingest(dump)
    assert s2.stat_rows == 2 and s2.errors == 0
    q = "SELECT max, row_id FROM stats WHERE stat_source = 'statistic.csv' ORDER BY max"
    rows = cat.sql(q).to_pylist()
    assert [r["max"] for r in rows] == [1, 2, 3, 4]
    assert all(r["row_id"] is not None for r in rows)
    # 4 tensors with csv rows and 239 computed: each tensor has exactly one stats row.
    per_tensor = cat.sql("SELECT row_id, count(*) n FROM stats GROUP BY 1 HAVING n > 1")
    assert per_tensor.num_rows == 0
    assert cat.sql("SELECT count(*) FROM stats").column(0)[0].as_py() == 243


def test_several_runs_and_ranks(tmp_path, copy_dump):
    dump = copy_dump("simple", "job")
    shutil.copytree(dump / "rank_0", dump / "rank_1")
    other = copy_dump("nan_log")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump, run="baseline")
    cat.ingest(other)
    per = cat.sql("SELECT run, rank, count(*) n FROM tensors GROUP BY ALL ORDER BY ALL").to_pylist()
    assert per == [
        {"run": "baseline", "rank": 0, "n": 243},
        {"run": "baseline", "rank": 1, "n": 243},
        {"run": "nan_log", "rank": 0, "n": 180},
    ]
    assert cat.sql("SELECT run, ranks FROM runs ORDER BY run").to_pylist() == [
        {"run": "baseline", "ranks": 2},
        {"run": "nan_log", "ranks": 1},
    ]
    # The same file in two runs has two row ids.
    assert cat.sql("SELECT count(DISTINCT row_id) FROM tensors").column(0)[0].as_py() == 666


_KILL_SCRIPT = """
import sys
from ingest.pipeline import ingest_dump
def tell(n):
    print("leaf", flush=True)
ingest_dump(sys.argv[1], sys.argv[2], batch_rows=int(sys.argv[3]), on_progress=tell)
"""


def _start_ingest(cat_dir: Path, dump: Path) -> subprocess.Popen:
    """An ingest in its own process that prints a line as it reaches each leaf directory."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", _KILL_SCRIPT, str(cat_dir), str(dump), "25"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def big_dump(tmp_path_factory):
    """The simple sample as 12 ranks (2,916 real tensors): long enough to kill mid-ingest."""
    from tests.conftest import dump_of

    root = tmp_path_factory.mktemp("big") / "dump"
    for r in range(12):
        shutil.copytree(dump_of("simple") / "rank_0", root / f"rank_{r}")
    return root


def test_sigkill_at_random_moments_then_rerun_equals_one_shot(tmp_path, big_dump):
    """Kills are anchored to progress (after a random number of leaf directories, plus a random
    few milliseconds) rather than to wall time, so they land mid-ingest on a slow or a fast machine."""
    reference = Catalog.open(tmp_path / "ref", create=True)
    reference.ingest(big_dump)
    expected = _content(reference)
    rng = random.Random(20261121)
    timing = _start_ingest(tmp_path / "timing", big_dump)
    leaves = sum(1 for _ in timing.stdout)
    assert timing.wait() == 0 and leaves == 36
    kills = 0
    for attempt in range(3):
        cat_dir = tmp_path / f"cat{attempt}"
        killed_at = []
        for _ in range(3):  # kill up to 3 times, each at a random moment
            proc = _start_ingest(cat_dir, big_dump)
            target = rng.randint(1, leaves)
            seen = 0
            while seen < target and proc.stdout.readline():
                seen += 1
            time.sleep(rng.uniform(0, 0.05))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed_at.append((seen, target))
                kills += 1
            proc.stdout.read()
            proc.wait()
            # Whatever survived is a consistent catalog: readable, never a row twice.
            if (cat_dir / "snapshot.json").exists():
                partial = Catalog.open(cat_dir)
                dup = partial.sql("SELECT row_id FROM tensors GROUP BY 1 HAVING count(*) > 1")
                assert dup.num_rows == 0
                partial.close()
        final = Catalog.open(cat_dir, create=True)
        final.ingest(big_dump)
        assert _content(final) == expected, f"attempt {attempt}, killed after leaves {killed_at}"
    assert kills >= 6, "the ingest finished before most kills: the test would prove nothing"
