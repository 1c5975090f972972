"""Re-ingest adds nothing, a grown tree adds only what is new, row ids never change, and a
SIGKILL at any moment leaves a catalog that a re-run completes to exactly a one-shot ingest."""

from __future__ import annotations

import json
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
from ingest.readers.mindspore_npy import LeafEngine
listed = LeafEngine.ingest_leaf
def tell(self, *args):
    print("leaf", flush=True)
    return listed(self, *args)
LeafEngine.ingest_leaf = tell
ingest_dump(sys.argv[1], sys.argv[2], batch_rows=int(sys.argv[3]))
"""


def _start_ingest(cat_dir: Path, dump: Path) -> subprocess.Popen:
    """An ingest in its own process that prints a line as it reaches each leaf directory."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", _KILL_SCRIPT, str(cat_dir), str(dump), "25"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def big_dump(tmp_path_factory):
    """The simple sample as 4 ranks (972 real tensors, some 40 batches of 25 rows)."""
    from tests.conftest import dump_of

    root = tmp_path_factory.mktemp("big") / "dump"
    for r in range(4):
        shutil.copytree(dump_of("simple") / "rank_0", root / f"rank_{r}")
    return root


def _phase_on_disk(cat_dir: Path) -> str:
    """How far an ingest into a new catalog got, as seen on disk: 'read' (nothing written yet),
    'write' (a batch's directory not listed by the snapshot), 'flat' (its flat files too),
    'committed' (the snapshot lists rows)."""
    try:
        snap = json.loads((cat_dir / "snapshot.json").read_text())
        if any(b["tables"].get("tensors", 0) for b in snap["batches"]):
            return "committed"
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        pass
    data = cat_dir / "data"
    try:
        if (data / "flat").is_dir() and any(any(t.iterdir()) for t in (data / "flat").iterdir()):
            return "flat"
        if data.is_dir() and any(any(r.iterdir()) for r in data.iterdir() if r.name != "flat"):
            return "write"
    except FileNotFoundError:  # a directory removed as it was listed
        return "write"
    return "read"


PHASES = ("read", "write", "flat", "committed")


def test_sigkill_in_each_phase_then_rerun_equals_one_shot(tmp_path, big_dump):
    """An ingest reaches every leaf directory within a moment (the walk), reads the files, writes
    its batch, then its flat files, commits, and exits. Each run is SIGKILLed in one of these
    phases: at a leaf of the walk; while it reads (a seeded moment within the reading time of an
    uninterrupted run timed first); as soon as its batch, its flat files, its commit show on disk
    (plus a seeded jitter). After every kill the catalog is readable and shows no row twice; a
    re-run completes it to exactly a one-shot ingest."""
    reference = Catalog.open(tmp_path / "ref", create=True)
    reference.ingest(big_dump)
    expected = _content(reference)
    seed = 20261121
    rng = random.Random(seed)
    # the uninterrupted run: when it ends its walk, when its first batch shows on disk
    timing = _start_ingest(tmp_path / "timing", big_dump)
    walked = sum(1 for _ in range(12) if timing.stdout.readline())
    walk_end = time.monotonic()
    while timing.poll() is None and _phase_on_disk(tmp_path / "timing") == "read":
        time.sleep(0.005)
    reading = time.monotonic() - walk_end
    walked += sum(1 for _ in timing.stdout)
    assert timing.wait() == 0 and walked == 12, f"{walked} leaves"
    # per catalog, the kill of each run: ("walk", n) once it reached n leaves; ("read", s) s seconds
    # after its walk; (phase, jitter) once the phase shows on disk
    plans = [
        [("walk", rng.randint(1, 11)), ("write", rng.uniform(0, 0.02)), ("committed", rng.uniform(0, 0.02))],
        [("read", rng.uniform(0.2, 0.7) * reading), ("flat", rng.uniform(0, 0.02))],
    ]
    kills = []  # (catalog, run, planned, phase seen at the kill, committed tensors after it)
    for attempt, plan in enumerate(plans):
        cat_dir = tmp_path / f"cat{attempt}"
        for run, (aim, at) in enumerate(plan):
            proc = _start_ingest(cat_dir, big_dump)
            seen = 0
            while seen < (at if aim == "walk" else 12) and proc.stdout.readline():
                seen += 1
            if aim == "read":
                time.sleep(at)
            elif aim != "walk":
                while proc.poll() is None and PHASES.index(_phase_on_disk(cat_dir)) < PHASES.index(aim):
                    time.sleep(0.002)
                time.sleep(at)
            phase = "walk" if aim == "walk" else _phase_on_disk(cat_dir)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            else:
                phase = "exited"
            proc.stdout.read()
            proc.wait()
            committed = 0
            # Whatever survived is a consistent catalog: readable, never a row twice.
            if (cat_dir / "snapshot.json").exists():
                with Catalog.open(cat_dir) as partial:
                    dup = partial.sql("SELECT row_id FROM tensors GROUP BY 1 HAVING count(*) > 1")
                    assert dup.num_rows == 0, f"seed {seed}, kills {kills}"
                    committed = partial.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()
            kills.append((attempt, run, (aim, round(at, 3)), phase, committed))
        final = Catalog.open(cat_dir, create=True)
        final.ingest(big_dump)
        assert _content(final) == expected, f"seed {seed}, kills {kills}"
    print(f"seed {seed}, reading {reading:.2f} s, kills {kills}")
    landed = {k[3] for k in kills}
    assert {"walk", "write", "flat", "committed"} <= landed, f"seed {seed}: kills missed a phase: {kills}"
