"""Many writers, one catalog: `--writer NAME` shards (ingest/storage/store.py).

Hosts are simulated by separate dump roots, each holding some `rank_N` folders of one real
multi-rank dump (the committed `nan_log` rank copied as several ranks). Every catalog written by
several writers must equal a one-shot single-writer ingest of one root holding all the ranks, with
real processes killed at random moments; readers see the union of the shards' committed snapshots
and never an uncommitted batch.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from catalog import Catalog
from catalog.server.sandbox import ContainedEngine, build_views_database
from ingest.storage import flat
from ingest.storage.store import CatalogError, CatalogStore, CatalogWarning, shard_path
from ingest.watch import read_status, status_path
from tests.conftest import REPO, dump_of
from tests.ingest.test_replay import COMPARE, DUPLICATES, _norm
from tests.replay import WriteBudget, files_written, make_stat_csv_tree, replay

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
RUN = "multi"
HOSTS = 3

# What must be equal between a sharded catalog and a single-writer one: the replay tests' tables,
# plus the views that aggregate over a run (one row per run however many writers wrote it).
SHARD_COMPARE = {
    **COMPARE,
    "runs": "SELECT run, ranks, device_target, ms_version, dumpcat_version FROM runs ORDER BY ALL",
    "first_anomaly": "SELECT * EXCLUDE (input_ops) FROM first_anomaly ORDER BY ALL",
    "tensor_names": "SELECT row_id, op_name, name_match, exec_index, source_line, iteration FROM tensors "
    "ORDER BY row_id",
    "status": None,  # dumpcat status' counts, filled in by content()
}
SHARD_DUPLICATES = (
    *DUPLICATES,
    "SELECT row_id FROM raw_tensors GROUP BY 1 HAVING count(*) > 1",
    "SELECT run FROM runs GROUP BY 1 HAVING count(*) > 1",
)


def content(cat_dir: Path) -> dict[str, list]:
    from catalog.views import query_text

    with Catalog.open(cat_dir) as cat:
        out = {
            name: [tuple(_norm(v) for v in row.values()) for row in cat.sql(q).to_pylist()]
            for name, q in SHARD_COMPARE.items()
            if q is not None
        }
        out["status"] = [tuple(r.values()) for r in cat.sql(query_text("status")).to_pylist()]
    return out


def shard_diff(expected: dict[str, list], actual: dict[str, list]) -> str:
    out = []
    for name in SHARD_COMPARE:
        e, a = expected[name], actual[name]
        if e != a:
            missing = [r for r in e if r not in set(a)]
            extra = [r for r in a if r not in set(e)]
            out.append(
                f"{name}: expected {len(e)} rows, got {len(a)}; missing {len(missing)} e.g. {missing[:2]}; "
                f"unexpected {len(extra)} e.g. {extra[:2]}"
            )
    return "\n".join(out)


def assert_readable_without_duplicates(cat_dir: Path, when: str) -> int:
    """The catalog answers and shows no row twice; returns its tensor count."""
    with Catalog.open(cat_dir) as cat:
        for q in SHARD_DUPLICATES:
            assert cat.sql(q).num_rows == 0, f"duplicates ({q}) {when}"
        return cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()


def make_hosts(base: Path, ranks: int, with_csv: bool = False) -> tuple[Path, list[Path]]:
    """`base/all/dump` holding ranks 0..ranks-1 (the committed nan_log rank, copied), and HOSTS
    host roots `base/hostK/dump` holding ranks K, K+HOSTS, ... of the same bytes."""
    one = base / "one_root" / "dump"
    for r in range(ranks):
        shutil.copytree(dump_of("nan_log") / "rank_0", one / f"rank_{r}")
    for p in [one, *one.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    if with_csv:
        everything = make_stat_csv_tree(one, base / "all" / "dump")
    else:
        everything = base / "all" / "dump"
        shutil.copytree(one, everything)
    hosts = []
    for k in range(HOSTS):
        root = base / f"host{k}" / "dump"
        root.mkdir(parents=True)
        for r in range(k, ranks, HOSTS):
            shutil.copytree(everything / f"rank_{r}", root / f"rank_{r}")
        hosts.append(root)
    return everything, hosts


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, list[Path]]:
    """Six ranks: one root with all of them, and three host roots with two each."""
    return make_hosts(tmp_path_factory.mktemp("hosts"), 6)


@pytest.fixture(scope="module")
def expected(tree, tmp_path_factory) -> dict[str, list]:
    """Content of a one-shot single-writer ingest of the root holding every rank."""
    cat_dir = tmp_path_factory.mktemp("one") / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        cat.ingest(tree[0], run=RUN)
    return content(cat_dir)


def ingest_hosts(cat_dir: Path, hosts: list[Path]) -> None:
    with Catalog.open(cat_dir, create=True) as cat:
        for k, root in enumerate(hosts):
            cat.ingest(root, run=RUN, writer=f"host{k}")


@pytest.fixture(scope="module")
def union(tree, tmp_path_factory) -> Path:
    """The three hosts ingested by three named writers into one catalog (read only by the tests
    that share it)."""
    cat_dir = tmp_path_factory.mktemp("union") / "cat"
    ingest_hosts(cat_dir, tree[1])
    return cat_dir


def dumpcat(*args, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", *map(str, args)],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if check:
        assert proc.returncode == 0, f"dumpcat {args}: {proc.stderr}"
    return proc


def start_ingest(root: Path, cat_dir: Path, k: int | str) -> subprocess.Popen:
    """`dumpcat ingest ROOT --writer hostK` as its own process."""
    return subprocess.Popen(
        [sys.executable, "-m", "catalog.cli", "ingest", str(root), "--catalog", str(cat_dir),
         "--run", RUN, "--writer", f"host{k}"],
        cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def shard_dir(cat_dir: Path, writer: str, run: str = RUN) -> Path:
    return cat_dir / shard_path(run, writer)


def committed_tensors(cat_dir: Path, writer: str) -> int:
    """Tensor rows the shard's snapshot lists (0 before its first commit)."""
    path = shard_dir(cat_dir, writer) / "snapshot.json"
    if not path.exists():
        return 0
    snap = json.loads(path.read_text())
    return sum(b["tables"].get("tensors", 0) for b in snap["batches"])


def leftovers(cat_dir: Path, writer: str) -> list[str]:
    """Batch and flat directories of a shard its snapshot neither lists nor retires."""
    sdir = shard_dir(cat_dir, writer)
    snap = json.loads((sdir / "snapshot.json").read_text())
    live = {b["path"] for b in snap["batches"]} | {r["path"] for r in snap.get("retired", [])}
    live |= {e["path"] for entries in snap["flat"].values() for e in entries}
    rel = shard_path(RUN, writer)
    found = [f"{rel}/{d.name}" for d in sdir.iterdir() if d.is_dir() and d.name not in ("flat", "tmp")]
    if (sdir / "flat").exists():
        found += [f"{rel}/flat/{t.name}/{d.name}" for t in (sdir / "flat").iterdir() for d in t.iterdir()]
    return sorted(set(found) - live)


# --------------------------------------------------------------------------------------------------
# The union, in one process


def test_three_writers_equal_one_writer(tree, expected, union):
    _, hosts = tree
    cat_dir = union
    got = content(cat_dir)
    assert not shard_diff(expected, got), shard_diff(expected, got)
    assert len(got["tensors"]) > 0
    with Catalog.open(cat_dir) as cat:
        runs = cat.sql("SELECT * FROM runs").to_pylist()
        assert len(runs) == 1 and runs[0]["ranks"] == 6
        # several roots: no single dump_root; every root listed
        assert runs[0]["dump_root"] is None
        assert runs[0]["dump_roots"] == sorted(str(h) for h in hosts)
        # each rank's metadata and each tensor's path name its own host's root
        meta = cat.sql("SELECT rank, dump_root FROM rank_metadata ORDER BY rank").to_pylist()
        assert [m["dump_root"] for m in meta] == [str(hosts[r % HOSTS]) for r in range(6)]
        rows = cat.sql("SELECT row_id, rank, rel_path, path FROM tensors ORDER BY row_id").to_pylist()
        assert all(r["path"] == f"{hosts[r['rank'] % HOSTS]}/{r['rel_path']}" for r in rows)
        # fetch by row id works for every shard's rows
        for r in rows[:: max(1, len(rows) // 60)]:
            path, _ = cat.locate(r["row_id"])
            assert str(path) == r["path"]
            assert np.array_equal(cat.tensor(r["row_id"]), np.load(r["path"]), equal_nan=True)
    # one snapshot per shard, flat files per shard, the default shard empty
    for k in range(HOSTS):
        snap = json.loads((shard_dir(cat_dir, f"host{k}") / "snapshot.json").read_text())
        assert snap["ranks"] == {RUN: [k, k + HOSTS]}
        assert all(
            e["path"].startswith(shard_path(RUN, f"host{k}") + "/flat/") for e in snap["flat"]["tensors"]
        )
        assert len(snap["flat"]["tensors"]) == 1  # a one-shot ingest ends with one flat file per table
    assert json.loads((cat_dir / "snapshot.json").read_text())["batches"] == []
    assert json.loads((cat_dir / "dumpcat.json").read_text())["version"] == 2


def test_readers_of_every_kind_see_the_union(tree, expected, union, tmp_path):
    _, hosts = tree
    cat_dir = union
    n = len(expected["tensors"])
    # the server's contained engine (its own views database; datasets opened by pyarrow, or the
    # files read by DuckDB itself, every shard's inside the data folder it may read)
    folder = tmp_path / "views"
    folder.mkdir()
    views = build_views_database(folder)
    with Catalog.open(cat_dir) as cat:
        want = cat.sql("SELECT row_id, path FROM tensors ORDER BY row_id").to_pylist()
    for native in (False, True):
        engine = ContainedEngine(cat_dir, views, native=native)
        try:
            cur = engine.cursor(1)
            for view, q in (("tensors", "SELECT count(*), count(DISTINCT row_id) FROM tensors"),
                            ("stats", "SELECT count(*), count(DISTINCT row_id) FROM stats")):  # fmt: skip
                assert cur.sql(q).fetchall() == [(n, n)], view
            assert cur.sql("SELECT count(*), max(ranks) FROM runs").fetchall() == [(1, 6)]
            rows = cur.sql("SELECT row_id, path FROM tensors ORDER BY row_id").fetchall()
            assert [dict(zip(("row_id", "path"), r, strict=True)) for r in rows] == want
        finally:
            engine.close()
    # dumpcat status: one row for the run
    rows = [json.loads(line) for line in dumpcat("status", cat_dir, "--format", "json").stdout.splitlines()]
    assert [(r["run"], r["tensors"], r["errors"]) for r in rows] == [(RUN, n, 0)]
    # the HTML report names every root of the run
    dumpcat("report", cat_dir, "--out", tmp_path / "r.html")
    assert ", ".join(str(h) for h in hosts) in (tmp_path / "r.html").read_text()
    # export: the union's rows; a run over several roots has no single root to join paths to
    out = tmp_path / "cat.duckdb"
    dumpcat("export-duckdb", cat_dir, out)
    import duckdb

    con = duckdb.connect(str(out), read_only=True)
    try:
        assert con.sql("SELECT count(*), count(DISTINCT row_id), count(path) FROM tensors").fetchall() == [
            (n, n, 0)
        ]
        assert con.sql("SELECT count(*) FROM stats").fetchall() == [(len(expected["stats"]),)]
        assert con.sql("SELECT count(*), any_value(ranks) FROM runs").fetchall() == [(1, 6)]
    finally:
        con.close()


def test_default_layout_is_unchanged_without_writer(tree, tmp_path):
    """No --writer: no shards.json, a format-1 marker, today's paths. A named writer of another
    run then joins the catalog, and the default writer's crash recovery leaves its shard alone."""
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        cat.ingest(hosts[0], run="solo")
    assert not (cat_dir / "shards.json").exists()
    assert json.loads((cat_dir / "dumpcat.json").read_text())["version"] == 1
    snap = json.loads((cat_dir / "snapshot.json").read_text())
    assert all(b["path"].startswith("data/run=solo/") and b["path"].count("/") == 2 for b in snap["batches"])
    assert all(e["path"].startswith("data/flat/") for entries in snap["flat"].values() for e in entries)
    with Catalog.open(cat_dir) as cat:
        cat.ingest(hosts[1], run=RUN, writer="host1")
        before = cat.sql("SELECT run, count(*) FROM tensors GROUP BY ALL ORDER BY ALL").to_pylist()
    # the default writer takes its lock (cleaning up after a crash) with a named shard present
    with CatalogStore(cat_dir).writer_lock():
        pass
    with Catalog.open(cat_dir) as cat:
        assert cat.sql("SELECT run, count(*) FROM tensors GROUP BY ALL ORDER BY ALL").to_pylist() == before
        assert [r["run"] for r in cat.sql("SELECT run FROM runs ORDER BY run").to_pylist()] == [RUN, "solo"]
        # a run with one root keeps it
        assert cat.sql("SELECT dump_root, dump_roots FROM runs WHERE run = 'solo'").to_pylist() == [
            {"dump_root": str(hosts[0]), "dump_roots": [str(hosts[0])]}
        ]
    assert json.loads((cat_dir / "dumpcat.json").read_text())["version"] == 2


def test_uncommitted_work_of_a_shard_is_invisible_then_removed(tree, expected, tmp_path):
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        cat.ingest(hosts[0], run=RUN, writer="host0")
        cat.ingest(hosts[1], run=RUN, writer="host1")
    # host2's writer crashed mid-commit: its shard is registered, its batch and flat files are
    # written (copies of host1's, so that they would show rows if anyone read them), its
    # snapshot does not list them yet
    store = CatalogStore(cat_dir).shard(RUN, "host2")
    with store.writer_lock():
        pass
    src = shard_dir(cat_dir, "host1")
    dst = shard_dir(cat_dir, "host2")
    batch = next(d for d in src.iterdir() if d.is_dir() and d.name[0].isdigit())
    shutil.copytree(batch, dst / "20991231T000000-0123456789ab")
    shutil.copytree(src / "flat", dst / "flat")
    # and a shard directory nobody registered (a writer that died before registering, or a copy)
    shutil.copytree(shard_dir(cat_dir, "host0"), shard_dir(cat_dir, "ghost"))
    two_hosts = len(expected["tensors"]) * 2 // 3
    with Catalog.open(cat_dir) as cat:
        counts = cat.sql("SELECT count(*) AS n, count(DISTINCT row_id) AS d FROM tensors").to_pylist()
        assert counts == [{"n": two_hosts, "d": two_hosts}]
        assert cat.sql("SELECT count(*) AS n FROM raw_tensors").to_pylist() == [{"n": two_hosts}]
        assert sorted(r["rank"] for r in cat.sql("SELECT DISTINCT rank FROM tensors").to_pylist()) == [
            0,
            1,
            3,
            4,
        ]
    assert len(leftovers(cat_dir, "host2")) == 1 + sum(
        1 for t in (dst / "flat").iterdir() for _ in t.iterdir()
    )
    # the next writer of the same name removes them, then ingests its ranks
    with Catalog.open(cat_dir) as cat:
        cat.ingest(hosts[2], run=RUN, writer="host2")
    assert leftovers(cat_dir, "host2") == []
    got = content(cat_dir)
    assert not shard_diff(expected, got), shard_diff(expected, got)


def test_a_catalog_from_before_flat_files_gets_them_from_its_first_named_writer(tree, tmp_path):
    """Readers resolve at query time while any shard lacks flat files, so the first named writer
    gives the default shard its flat files (and readers then read flat files only)."""
    from tests.conftest import as_written_before_flat_files

    _, hosts = tree
    cat_dir = tmp_path / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        cat.ingest(hosts[0], run="old")
        want = cat.sql("SELECT row_id, op_name, path FROM tensors ORDER BY row_id").to_pylist()
    as_written_before_flat_files(cat_dir)
    assert CatalogStore(cat_dir).union_snapshot().get("flat") is None
    with Catalog.open(cat_dir) as cat:
        cat.ingest(hosts[1], run=RUN, writer="host1")
    union = CatalogStore(cat_dir).union_snapshot()
    assert {e["run"] for e in union["flat"]["tensors"]} == {"old", RUN}
    with Catalog.open(cat_dir) as cat:
        got = cat.sql(
            "SELECT row_id, op_name, path FROM tensors WHERE run = 'old' ORDER BY row_id"
        ).to_pylist()
        assert got == want
        assert cat.sql(f"SELECT count(path) FROM tensors WHERE run = '{RUN}'").column(0)[0].as_py() > 0


def test_damaged_registry_and_missing_shard_snapshot(tree, tmp_path):
    """A registered shard whose snapshot is not there yet holds nothing. A damaged shards.json (bad
    JSON, an entry without a path, one naming a directory outside the catalog) hides nothing: the
    shards are found from the layout, a one-line warning names the file, and the next writer to
    register rewrites it."""
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        cat.ingest(hosts[0], run=RUN, writer="host0")
        cat.ingest(hosts[1], run="other", writer="host1")
    good = (cat_dir / "shards.json").read_text()
    registry = json.loads(good)
    registry["shards"].append({"run": RUN, "writer": "late", "path": shard_path(RUN, "late")})
    (cat_dir / "shards.json").write_text(json.dumps(registry))
    with Catalog.open(cat_dir) as cat:
        assert cat.sql("SELECT DISTINCT rank FROM tensors ORDER BY 1").column(0).to_pylist() == [0, 1, 3, 4]
    elsewhere = tmp_path / "elsewhere"
    with Catalog.open(elsewhere, create=True) as cat:
        cat.ingest(hosts[2], run=RUN, writer="host2")
    outside = {"run": RUN, "writer": "host2", "path": f"../elsewhere/{shard_path(RUN, 'host2')}"}
    for damaged in (
        '{"shards": [',
        '{"shards": [{"run": "multi"}]}',
        "[]",
        json.dumps({"shards": [outside]}),
    ):
        (cat_dir / "shards.json").write_text(damaged)
        with pytest.warns(CatalogWarning, match="shards.json"), Catalog.open(cat_dir) as cat:
            got = cat.sql(
                "SELECT run, rank, count(*) AS n FROM tensors GROUP BY ALL ORDER BY ALL"
            ).to_pylist()
        assert [(r["run"], r["rank"]) for r in got] == [(RUN, 0), (RUN, 3), ("other", 1), ("other", 4)], (
            damaged
        )
        proc = dumpcat("sql", cat_dir, "SELECT count(*) AS n FROM tensors", "--format", "csv")
        assert proc.stdout.split() == ["n", str(sum(r["n"] for r in got))]
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dumpcat: warning: ") and "shards.json" in lines[0], (
            lines
        )
    # a writer registering its shard rewrites the registry from what it found
    with Catalog.open(cat_dir) as cat:
        cat.ingest(hosts[2], run=RUN, writer="host2")
    assert sorted(e["path"] for e in json.loads((cat_dir / "shards.json").read_text())["shards"]) == sorted(
        [shard_path(RUN, "host0"), shard_path("other", "host1"), shard_path(RUN, "host2")]
    )
    assert "warning" not in dumpcat("sql", cat_dir, "SELECT count(*) FROM tensors").stderr


def test_a_damaged_shard_is_left_out_the_others_stay_readable(tmp_path):
    """One shard's snapshot damaged (cut short, or naming files outside its directory): readers show
    the other shards with a one-line warning naming the damaged one; its own writer is refused in
    one line; other writers keep committing the ranks they hold, but no writer of the run takes a
    new rank (the damaged shard's ranks are unknown). Deleting the snapshot and running its writer
    again catalogs its ranks anew: the catalog is a one-shot ingest's again."""
    _, hosts = make_hosts(tmp_path / "tree", 6)
    cat_dir = tmp_path / "cat"
    ingest_hosts(cat_dir, hosts)
    snap_file = shard_dir(cat_dir, "host1") / "snapshot.json"
    text = snap_file.read_text()
    outside = json.loads(text)
    outside["batches"][0]["path"] = "../../../elsewhere"
    for damaged in (text[: len(text) // 2], json.dumps(outside), '{"version": 3}'):
        snap_file.write_text(damaged)
        left_out = pytest.warns(CatalogWarning, match="shard writer=host1 of run 'multi' is left out")
        with left_out, Catalog.open(cat_dir) as cat:
            ranks = cat.sql("SELECT DISTINCT rank FROM tensors ORDER BY 1").column(0).to_pylist()
        assert ranks == [0, 2, 3, 5]
        proc = dumpcat("sql", cat_dir, "SELECT count(*) FROM stats")
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dumpcat: warning: shard writer=host1 of run"), lines
        assert str(snap_file) in lines[0]
    # a compare would commit the left-out shard's tensors as unmatched pairs: refused
    with Catalog.open(cat_dir) as cat:
        cat.ingest(hosts[2], run="base")
    proc = dumpcat("compare", cat_dir, RUN, "base", check=False)
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("dumpcat: warning: ")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert errors[0].startswith("dumpcat: error: not compared while part of the catalog is unreadable: shard")
    with pytest.warns(CatalogWarning), Catalog.open(cat_dir) as cat:
        assert cat.sql("SELECT count(*) FROM comparisons").column(0)[0].as_py() == 0
    proc = dumpcat("ingest", hosts[1], "--catalog", cat_dir, "--run", RUN, "--writer", "host1", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"dumpcat: error: cannot read {snap_file}"), proc.stderr
    # host0's ranks are its own: a new iteration of them commits; a new rank is refused
    for rank in (0, 3):
        iters = hosts[0] / f"rank_{rank}" / "Net" / "0"
        shutil.copytree(iters / "1", iters / "7")
    Catalog.open(cat_dir).ingest(hosts[0], run=RUN, writer="host0")
    shutil.copytree(hosts[0] / "rank_0", hosts[0] / "rank_9")
    with pytest.raises(CatalogError, match="no writer of run 'multi' can take a new rank"):
        Catalog.open(cat_dir).ingest(hosts[0], run=RUN, writer="host0")
    shutil.rmtree(hosts[0] / "rank_9")
    with pytest.warns(CatalogWarning), Catalog.open(cat_dir) as cat:
        assert cat.sql("SELECT count(*) FROM tensors WHERE iteration = 7").column(0)[0].as_py() > 0
    # recovery: delete the snapshot, run the writer again; then the extra iteration goes too
    snap_file.unlink()
    with Catalog.open(cat_dir) as cat:
        cat.ingest(hosts[1], run=RUN, writer="host1")
    assert leftovers(cat_dir, "host1") == []
    proc = dumpcat("sql", cat_dir, "SELECT count(*) FROM tensors")
    assert proc.stderr == ""
    cat2 = tmp_path / "cat2"
    ingest_hosts(cat2, hosts)
    with Catalog.open(cat2) as cat:
        cat.ingest(hosts[2], run="base")
    assert shard_diff(content(cat2), content(cat_dir)) == ""
    assert_readable_without_duplicates(cat_dir, "after recovery")


def test_stats_of_a_catalog_with_a_damaged_shard(tree, tmp_path):
    """`dumpcat stats` computes the readable shards' statistics and commits them, then names the
    damaged shard in one error line (exit status 1), never a traceback."""
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        for k, root in enumerate(hosts):
            cat.ingest(root, run=RUN, writer=f"host{k}", compute_stats=False)
    snap_file = shard_dir(cat_dir, "host0") / "snapshot.json"
    snap_file.write_text(snap_file.read_text()[:100])
    proc = dumpcat("stats", cat_dir, check=False)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dumpcat: error:")]
    assert (
        len(errors) == 1 and "shard writer=host0 of run 'multi'" in errors[0] and str(snap_file) in errors[0]
    )
    assert "Traceback" not in proc.stderr
    counts = dumpcat("sql", cat_dir, "SELECT rank, count(max) AS n FROM stats GROUP BY ALL ORDER BY 1",
                     "--format", "csv").stdout.split()  # fmt: skip
    per_rank = counts[1].split(",")[1]
    assert int(per_rank) > 0 and counts == ["rank,n", *(f"{r},{per_rank}" for r in (1, 2, 4, 5))]


def test_writers_racing_for_the_same_rank_one_gets_it(tree, tmp_path):
    """Two writers of different names (two hosts mounting the same dump, say) ingest the same ranks
    at the same moment: one catalogs them and the other is refused in one line, never both (each
    row would show twice). Tried a few times, since the start is a race."""
    _, hosts = tree
    for attempt in range(4):
        cat_dir = tmp_path / f"cat{attempt}"
        Catalog.open(cat_dir, create=True).close()
        procs = [start_ingest(hosts[0], cat_dir, name) for name in ("A", "B")]
        results = [(p.wait(120), p.stderr.read()) for p in procs]
        assert sorted(rc for rc, _ in results) == [0, 1], (attempt, results)
        refused = next(err for rc, err in results if rc == 1)
        assert "of run 'multi' is already cataloged by writer 'host" in refused, refused
        assert "Traceback" not in refused
        assert_readable_without_duplicates(cat_dir, f"after race {attempt}")
        with Catalog.open(cat_dir) as cat:
            assert cat.sql("SELECT DISTINCT rank FROM tensors ORDER BY 1").column(0).to_pylist() == [0, 3]


def test_status_of_watchers_on_other_hosts(tmp_path):
    """`dumpcat status` merges the run's watchers; one on another host is judged by its flushes."""
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).close()
    (cat_dir / "watch").mkdir()
    now = time.time()
    for writer, host, last, pending in (
        ("a", "elsewhere-1", now - 5, 3),
        ("b", "elsewhere-2", now - 3600, 7),
    ):
        st = {"run": RUN, "writer": writer, "host": host, "pid": 1, "mode": "poll", "last_flush": last,
              "pending": pending, "lag_seconds": 1.5}  # fmt: skip
        status_path(cat_dir, RUN, writer).write_text(json.dumps(st))
    merged = read_status(cat_dir)[RUN]
    assert [w["alive"] for w in merged["watchers"]] == [True, False]
    assert merged["alive"] and merged["pending"] == 3 and merged["last_flush"] == now - 5


def test_union_follows_each_shard_commit(tree, tmp_path):
    """A long-lived reader sees a shard's new commit (the union's token follows every shard)."""
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    Catalog.open(cat_dir, create=True).close()
    with Catalog.open(cat_dir) as reader:
        seen = [reader.sql("SELECT count(*) AS n FROM tensors").to_pylist()[0]["n"]]
        for k in range(HOSTS):
            with Catalog.open(cat_dir) as w:
                w.ingest(hosts[k], run=RUN, writer=f"host{k}")
            seen.append(reader.sql("SELECT count(*) AS n FROM tensors").to_pylist()[0]["n"])
            row = reader.sql(f"SELECT min(row_id) AS r FROM tensors WHERE rank = {k}").to_pylist()[0]["r"]
            assert reader.tensor(row).shape is not None
    per_host = seen[1]
    assert seen == [0, per_host, 2 * per_host, 3 * per_host]


def test_a_rank_split_across_writers_is_refused(tree, tmp_path):
    """Each rank of a run belongs to one writer: a second writer bringing rows of a rank another
    shard holds gets a clear error, and nothing of its batch becomes visible."""
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    with Catalog.open(cat_dir, create=True) as cat:
        cat.ingest(hosts[0], run=RUN, writer="host0")  # ranks 0 and 3
        before = cat.sql("SELECT count(*) AS n FROM tensors").to_pylist()
    overlap = tmp_path / "overlap" / "dump"
    shutil.copytree(hosts[0] / "rank_3", overlap / "rank_3")
    proc = dumpcat("ingest", overlap, "--catalog", cat_dir, "--run", RUN, "--writer", "other", check=False)
    assert proc.returncode == 1
    assert "rank 3 of run 'multi' is already cataloged by writer 'host0'" in proc.stderr, proc.stderr
    # the default writer too
    with pytest.raises(CatalogError, match="rank 3 of run 'multi' is already cataloged by writer 'host0'"):
        Catalog.open(cat_dir).ingest(overlap, run=RUN)
    with Catalog.open(cat_dir) as cat:
        assert cat.sql("SELECT count(*) AS n FROM tensors").to_pylist() == before
        for q in SHARD_DUPLICATES:
            assert cat.sql(q).num_rows == 0
    # and the other way round: the default shard holds a rank, a named writer brings it again
    cat2 = tmp_path / "cat2"
    Catalog.open(cat2, create=True).ingest(overlap, run=RUN)
    with pytest.raises(CatalogError, match="already cataloged by the default writer"):
        Catalog.open(cat2).ingest(hosts[0], run=RUN, writer="host0")


def test_one_writer_per_shard_name_and_bad_names(tree, tmp_path):
    """A live writer holds its shard: a second process with the same name is refused, naming the
    holder's pid; a writer of another name proceeds at the same time. Bad names are refused
    before anything is written."""
    _, hosts = tree
    cat_dir = tmp_path / "cat"
    watch = subprocess.Popen(
        [sys.executable, "-m", "catalog.cli", "watch", str(hosts[0]), "--catalog", str(cat_dir),
         "--run", RUN, "--writer", "host0", "--interval", "0.2"],
        cwd=REPO, env=ENV, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        status = status_path(cat_dir, RUN, "host0")
        deadline = time.monotonic() + 60
        while not status.exists() and watch.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.exists(), watch.stderr.read() if watch.poll() is not None else "no status"
        proc = dumpcat(
            "ingest", hosts[0], "--catalog", cat_dir, "--run", RUN, "--writer", "host0", check=False
        )
        assert proc.returncode == 1
        assert f"locked by pid {watch.pid} on " in proc.stderr, proc.stderr
        assert "writer=host0 of run 'multi'" in proc.stderr
        with Catalog.open(cat_dir) as cat:  # another name proceeds meanwhile
            cat.ingest(hosts[1], run=RUN, writer="host1")
        st = read_status(cat_dir)[RUN]
        assert st["alive"] and st["writer"] == "host0"
        table = dumpcat("status", cat_dir).stdout
        assert f"host0: inotify (pid {watch.pid})" in table or "host0: poll" in table, table
    finally:
        watch.send_signal(signal.SIGTERM)
        rc = watch.wait(30)
    assert rc == 0, watch.stderr.read()[-2000:]
    with Catalog.open(cat_dir) as cat:
        ranks = cat.sql("SELECT DISTINCT rank FROM tensors ORDER BY rank").to_pylist()
        assert [r["rank"] for r in ranks] == [0, 1, 3, 4]
    # every bad name is refused by the library before anything is created; the command line
    # (which calls the same check) once for a name click could take for an option, once for ""
    from ingest.pipeline import ingest_dump

    for bad in ("../x", "", "a/b", "-lead", "x" * 65, "sp ace"):
        with pytest.raises(CatalogError, match="writer name"):
            ingest_dump(tmp_path / "fresh", hosts[2], run=RUN, writer=bad)
    for bad in ("-lead", ""):
        proc = dumpcat("ingest", hosts[2], "--catalog", tmp_path / "fresh", "--writer", bad, check=False)
        assert proc.returncode == 1 and "writer name" in proc.stderr, (bad, proc.stderr)
    assert not (tmp_path / "fresh").exists()


def test_snapshot_of_a_shard_lists_only_root_relative_paths(union):
    """Every path a shard's snapshot names is inside the shard's own directory (so two shards
    never touch each other's files) and relative to the catalog root (so readers need only
    concatenate the snapshots)."""
    cat_dir = union
    for k in range(HOSTS):
        rel = shard_path(RUN, f"host{k}") + "/"
        snap = json.loads((cat_dir / rel / "snapshot.json").read_text())
        paths = [b["path"] for b in snap["batches"]] + [e["path"] for es in snap["flat"].values() for e in es]
        assert paths and all(p.startswith(rel) and (cat_dir / p).is_dir() for p in paths)
        for b in snap["batches"]:
            assert pq.read_table(cat_dir / b["path"] / "tensors.parquet").num_rows == b["tables"]["tensors"]


# --------------------------------------------------------------------------------------------------
# Real processes, killed at random moments


class UnionReader:
    """Queries the catalog in a loop from its own thread while writers run: records errors,
    duplicates and whether counts ever went down."""

    def __init__(self, cat_dir: Path) -> None:
        self.cat_dir = cat_dir
        self.errors: list[str] = []
        self.duplicates: list[str] = []
        self.counts: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        cat = Catalog.open(self.cat_dir)
        try:
            while not self._stop.is_set():
                try:
                    n = cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()
                    s = cat.sql("SELECT count(*) FROM stats").column(0)[0].as_py()
                    cat.sql("SELECT * FROM runs").to_pylist()
                    for q in SHARD_DUPLICATES:
                        if cat.sql(q).num_rows:
                            self.duplicates.append(q)
                    self.counts.append((n, s))
                except Exception as exc:  # every error is a failure to report
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)
        finally:
            cat.close()

    def stop(self) -> None:
        """Stop once it has run at least 10 rounds (a loaded machine may finish the writers
        first; queries of the finished catalog are checked the same way)."""
        deadline = time.monotonic() + 60
        while len(self.counts) < 10 and not self.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(60)

    def check(self) -> None:
        assert not self.errors, f"{len(self.errors)} reader errors, first: {self.errors[:2]}"
        assert not self.duplicates, self.duplicates[:3]
        for i in (0, 1):
            seq = [c[i] for c in self.counts]
            assert seq == sorted(seq), f"a count went down while writers wrote: {seq}"
        assert len(self.counts) >= 10, f"the reader ran {len(self.counts)} queries only"


def test_writers_starting_together_create_the_catalog_together(tree, expected, tmp_path):
    """Every host starts at once on a catalog that does not exist yet: one creates it, the others
    find it (or finish the creation), and all three shards land."""
    _, hosts = tree
    cat_dir = tmp_path / "new" / "cat"
    procs = [start_ingest(hosts[k], cat_dir, k) for k in range(HOSTS)]
    for k, p in enumerate(procs):
        rc = p.wait(120)
        assert rc == 0, f"host{k}: {p.stderr.read()[-2000:]}"
        p.stderr.close()
    got = content(cat_dir)
    assert not shard_diff(expected, got), shard_diff(expected, got)
    assert sorted(e["writer"] for e in json.loads((cat_dir / "shards.json").read_text())["shards"]) == [
        f"host{k}" for k in range(HOSTS)
    ]


def _phase(cat_dir: Path, k: int) -> str:
    """How far host k's writer got, as seen on disk: 'started' (no shard yet), 'locked' (its shard
    exists), 'writing' (directories its snapshot does not list yet), 'committed' (rows listed)."""
    if not (shard_dir(cat_dir, f"host{k}") / "snapshot.json").exists():
        return "started"
    try:
        if leftovers(cat_dir, f"host{k}"):
            return "writing"
    except (FileNotFoundError, json.JSONDecodeError):  # a directory removed as it was listed
        return "writing"
    return "committed" if committed_tensors(cat_dir, f"host{k}") else "locked"


KILL_PHASES = ("started", "locked", "writing", "committed")
KILL_SEED = 20261124


def _killed_writers_scenario(
    hosts: list[Path], expected: dict, cat_dir: Path, rng: random.Random, want: list[str]
) -> list[tuple]:
    """One catalog: the three writers started, each round killing writers in the phases of `want`
    no kill has landed in yet, then restarted, until all finish; every check of the test after
    every round and at the end. A phase is aimed at a writer with no shard yet (what the disk
    shows is then its own progress): 'started' (killed within 50 ms of its start, while Python
    starts), 'locked' (its shard taken, the dump being walked), 'writing' (a batch's and its flat
    files' directories written but not listed by its snapshot), 'committed' (just after its
    commit, before it exits). Returns the kills: (round, host, phase aimed at, phase seen at the
    kill, committed tensors after it)."""
    Catalog.open(cat_dir, create=True).close()
    reader = UnionReader(cat_dir)
    reader.start()
    done: set[int] = set()
    kills: list[tuple[int, int, str, str, int]] = []
    try:
        for round_ in range(6):
            todo = [k for k in range(HOSTS) if k not in done]
            if not todo:
                break
            landed = {kill[3] for kill in kills if kill[2] == kill[3]}
            fresh = [k for k in todo if not (shard_dir(cat_dir, f"host{k}") / "snapshot.json").exists()]
            rng.shuffle(fresh)
            # the other writers run to the end (a restarted one first removes its crashed files)
            aims = [ph for ph in want if ph not in landed]
            aim = {
                k: (ph, 0.0 if ph == "committed" else rng.uniform(0.0, 0.05))
                for k, ph in zip(fresh, aims, strict=False)  # fewer phases left than writers: others finish
            }
            procs = {k: start_ingest(hosts[k], cat_dir, k) for k in todo}
            started = time.monotonic()
            reached: dict[int, float] = {}
            while any(p.poll() is None for p in procs.values()):
                now = time.monotonic()
                for k, p in procs.items():
                    if p.poll() is not None or k not in aim:
                        continue
                    target, delay = aim[k]
                    seen = _phase(cat_dir, k)
                    if k not in reached and KILL_PHASES.index(seen) >= KILL_PHASES.index(target):
                        reached[k] = now
                    if k in reached and now >= reached[k] + delay:
                        seen = _phase(cat_dir, k)
                        p.send_signal(signal.SIGKILL)
                        p.wait(10)
                        kills.append((round_, k, target, seen, committed_tensors(cat_dir, f"host{k}")))
                        del aim[k]
                assert now - started < 120, "writers did not finish"
                time.sleep(0.005)
            for k, p in procs.items():
                if p.returncode == 0:
                    done.add(k)
                else:
                    assert p.returncode == -signal.SIGKILL, f"host{k} failed: {p.stderr.read()[-2000:]}"
                p.stderr.close()
            assert_readable_without_duplicates(
                cat_dir, f"after round {round_} (seed {KILL_SEED}, kills {kills})"
            )
    finally:
        reader.stop()
    assert done == set(range(HOSTS)), f"seed {KILL_SEED}, kills {kills}"
    got = content(cat_dir)
    assert not shard_diff(expected, got), f"seed {KILL_SEED}, kills {kills}:\n{shard_diff(expected, got)}"
    # each killed writer's uncommitted files were removed by its restart
    for k in range(HOSTS):
        assert leftovers(cat_dir, f"host{k}") == []
    reader.check()
    return kills


def test_three_ingest_writers_killed_in_every_phase_then_finished(tree, expected, tmp_path):
    """`dumpcat ingest --writer hostK` x 3 at once, SIGKILLed in each phase of its progress seen
    on disk (still starting, shard locked and the dump walked, batch and flat files being written,
    rows committed) and restarted: after every round the catalog is readable without duplicates;
    once every writer finished it equals the one-shot single-writer ingest, and no killed writer's
    files are left behind. The hosts and the moments within a phase are drawn from a seeded RNG.

    Round 0 aims three writers at three phases, round 1 the writer killed while starting (still
    without a shard) at the fourth; a kill whose writer left the phase first (a phase can be short
    on a fast machine) is aimed again in a new catalog, at most twice."""
    _, hosts = tree
    seed = KILL_SEED
    rng = random.Random(seed)
    kills: list[tuple] = []
    for attempt in range(3):
        landed = {kill[4] for kill in kills if kill[3] == kill[4]}
        want = [ph for ph in KILL_PHASES if ph not in landed]
        if not want:
            break
        if "started" not in want:  # every other phase needs a writer with no shard yet
            want = ["started", *want]
        kills += [
            (attempt, *kill)
            for kill in _killed_writers_scenario(hosts, expected, tmp_path / f"cat{attempt}", rng, want)
        ]
    print(f"seed {seed}, kills (attempt, round, host, aimed at, seen, committed tensors): {kills}")
    landed = {kill[4] for kill in kills if kill[3] == kill[4]}
    assert landed == set(KILL_PHASES), f"seed {seed}: kills landed in {landed} only: {kills}"


@pytest.fixture(scope="module")
def live_tree(tmp_path_factory) -> tuple[Path, list[Path]]:
    """Three ranks with a statistic.csv per iteration directory (appended row by row in a
    replay): one root with all of them, and one host root per rank."""
    return make_hosts(tmp_path_factory.mktemp("live"), 3, with_csv=True)


def test_three_watchers_killed_at_random_while_training_writes(live_tree, tmp_path):
    """Three hosts' training jobs write their ranks (tests/replay.py) while a `dumpcat watch
    --writer hostK` per host catalogs them into one catalog. Each host's watcher is SIGKILLed once
    (in an order and at a moment after one of its commits a seeded RNG picks) and restarted; a
    reader queries throughout. After every kill the catalog is readable without duplicates; at
    the end it equals a one-shot single-writer ingest of one root holding every rank, and
    `dumpcat status` shows the run once with its three watchers."""
    seed = 20261125
    rng = random.Random(seed)
    everything, sources = live_tree
    cat_dir = tmp_path / "cat"
    dsts = [tmp_path / f"host{k}" / "dump" for k in range(HOSTS)]
    for k, dst in enumerate(dsts):
        (dst / f"rank_{k}").mkdir(parents=True)
    Catalog.open(cat_dir, create=True).close()
    failure: list[BaseException] = []
    # A host's training goes on only while its watcher is up, and only as far as the test lets it:
    # a host writes an eighth of its files, then one eighth more each time its watcher is picked
    # to be killed, so every kill lands mid-run however fast or slow the machine is.
    gate = WriteBudget([files_written(src, seed=seed + k) for k, src in enumerate(sources)], parts=8)

    def write(k: int) -> None:
        try:
            replay(sources[k], dsts[k], seed=seed + k, rate=80, pause=(0.005, 0.1),
                   on_file=lambda rel, event: gate.wait(k, event))  # fmt: skip
        except BaseException as exc:
            failure.append(exc)

    def launch(k: int) -> subprocess.Popen:
        status_path(cat_dir, RUN, f"host{k}").unlink(missing_ok=True)
        return subprocess.Popen(
            [sys.executable, "-m", "catalog.cli", "watch", str(dsts[k]), "--catalog", str(cat_dir),
             "--run", RUN, "--writer", f"host{k}", "--interval", "0.2"],
            cwd=REPO, env=ENV, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def up(k: int, proc: subprocess.Popen) -> subprocess.Popen:
        status = status_path(cat_dir, RUN, f"host{k}")
        deadline = time.monotonic() + 60
        while proc.poll() is None and not status.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # its first pass is done once it writes its status
        assert proc.poll() is None, f"host{k}'s watcher exited: {proc.stderr.read()[-2000:]}"
        gate.up(k)
        return proc

    def start(k: int) -> subprocess.Popen:
        return up(k, launch(k))

    writers = [threading.Thread(target=write, args=(k,)) for k in range(HOSTS)]
    procs: list[subprocess.Popen | None] = [None] * HOSTS
    reader = UnionReader(cat_dir)
    kills: list[tuple[int, float, int]] = []
    after_kill: list[int] = []
    try:
        for w in writers:
            w.start()
        for k in range(HOSTS):  # the hosts start together
            procs[k] = launch(k)
        for k in range(HOSTS):
            up(k, procs[k])
        reader.start()
        for k in rng.sample(range(HOSTS), HOSTS):
            before = committed_tensors(cat_dir, f"host{k}")
            gate.release(k)
            started = time.monotonic()
            # kill once this watcher committed something new (or its host is done), plus a random moment
            while time.monotonic() < started + 60:
                if not writers[k].is_alive() or committed_tensors(cat_dir, f"host{k}") > before:
                    break
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.6))
            alive = procs[k].poll() is None
            procs[k].send_signal(signal.SIGKILL)
            procs[k].wait(10)
            gate.down(k)
            assert alive, f"host{k}'s watcher exited by itself: {procs[k].stderr.read()[-2000:]}"
            procs[k].stderr.close()
            kills.append((k, round(time.monotonic() - started, 2), committed_tensors(cat_dir, f"host{k}")))
            after_kill.append(
                assert_readable_without_duplicates(cat_dir, f"after kill {len(kills)} (seed {seed})")
            )
            procs[k] = start(k)
        gate.open_all()
        for w in writers:
            w.join(180)
        assert not failure, failure
        expected_dir = tmp_path / "one"
        with Catalog.open(expected_dir, create=True) as cat:
            cat.ingest(everything, run=RUN)
        want = content(expected_dir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(committed_tensors(cat_dir, f"host{k}") for k in range(HOSTS)) >= len(want["tensors"]):
                got = content(cat_dir)
                if not shard_diff(want, got):
                    break
            time.sleep(0.1)
        got = content(cat_dir)
        assert not shard_diff(want, got), f"seed {seed}, kills {kills}:\n{shard_diff(want, got)}"
        st = read_status(cat_dir)[RUN]
        assert st["alive"] and len(st["watchers"]) == HOSTS and st["pending"] == 0, st
        table = dumpcat("status", cat_dir).stdout
        assert all(f"host{k}: " in table and str(procs[k].pid) in table for k in range(HOSTS)), table
    finally:
        reader.stop()
        gate.open_all()
        for w in writers:
            w.join(60)
        for p in procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for k, p in enumerate(procs):
            if p is not None:
                rc = p.wait(30)
                assert rc == 0, f"host{k}'s watcher exited {rc} on SIGTERM: {p.stderr.read()[-2000:]}"
    n = len(want["tensors"])
    assert sum(0 < c < n for c in after_kill) >= 2, f"kills did not land mid-run: {after_kill} of {n}"
    assert not shard_diff(want, content(cat_dir))
    for k in range(HOSTS):
        assert leftovers(cat_dir, f"host{k}") == [], f"host{k}'s crashed writes were not removed"
    reader.check()


def test_each_shard_compacts_and_merges_its_own_files(live_tree, tmp_path):
    """Two watchers of one run in one process (threads), each its own shard, compacting after
    every 4 small batches while training writes: each compacts only its own batches and merges
    its own flat files, a reader never sees a row twice, and the end equals a one-shot ingest."""
    from ingest.watch import Watcher

    everything, sources = live_tree
    cat_dir = tmp_path / "cat"
    dsts = [tmp_path / f"host{k}" / "dump" for k in range(2)]
    for k, dst in enumerate(dsts):
        (dst / f"rank_{k}").mkdir(parents=True)
    Catalog.open(cat_dir, create=True).close()
    watchers = [
        Watcher(cat_dir, dst, RUN, writer=f"host{k}", interval=0.1, compact_min_batches=4)
        for k, dst in enumerate(dsts)
    ]
    reader = UnionReader(cat_dir)
    for w in watchers:
        w.start()
    reader.start()
    try:
        threads = [
            threading.Thread(target=replay, args=(sources[k], dsts[k]), kwargs={"seed": 40 + k, "rate": 60})
            for k in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(w.wait_idle(timeout=30) for w in watchers)
        statuses = [w.status() for w in watchers]
    finally:
        reader.stop()
        for w in watchers:
            w.stop()
    assert all(st["compactions"] >= 1 for st in statuses), statuses
    two = tmp_path / "two" / "dump"
    for k in range(2):
        shutil.copytree(everything / f"rank_{k}", two / f"rank_{k}")
    with Catalog.open(tmp_path / "one", create=True) as cat:
        cat.ingest(two, run=RUN)
    want, got = content(tmp_path / "one"), content(cat_dir)
    assert not shard_diff(want, got), shard_diff(want, got)
    for k in range(2):
        rel = shard_path(RUN, f"host{k}") + "/"
        snap = json.loads((cat_dir / rel / "snapshot.json").read_text())
        assert any(b["id"].endswith("-c") for b in snap["batches"]), f"host{k} compacted nothing"
        paths = [b["path"] for b in snap["batches"]] + [r["path"] for r in snap.get("retired", [])]
        paths += [e["path"] for es in snap["flat"].values() for e in es]
        assert all(p.startswith(rel) for p in paths), "a shard's writer touched another shard's files"
        # flat files merged by size tier, as a single writer's are
        assert len(snap["flat"]["tensors"]) < flat.MERGE_FANIN * 2
    reader.check()
