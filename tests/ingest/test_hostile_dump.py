"""Ingest never leaves the dump root (issue 33 point 5), on real dump trees made hostile:

- a symlink whose target is outside the root (an npy file, a leaf folder, `/`, msprobe's
  `dump_tensor_data`, `/dev/zero` as `data_dump.json`) is an `ingest_errors` row and is not read,
  unless `--follow-symlinks`; symlinks inside the root are followed as before;
- a FIFO named like an npy file or like `data_dump.json` is an error row and is never opened
  (opening it would wait for a writer forever): the ingest, a real `dumpcat ingest` process,
  ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catalog import Catalog
from tests.conftest import DATA, REPO, dump_of

OUTSIDE = "a symlink out of the dump root: not followed (--follow-symlinks to allow it)"


def _errors(cat: Catalog) -> dict[str, str]:
    return {r["path"]: r["reason"] for r in cat.sql("SELECT path, reason FROM ingest_errors").to_pylist()}


def _ingest(tree: Path, cat_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """A real `dumpcat ingest` process, which must end (a FIFO opened for reading would block it)."""
    return subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(tree), "-c", str(cat_dir), "--run", "r", *extra],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip


@pytest.fixture
def hostile(tmp_path) -> tuple[Path, dict[str, str], int]:
    """The `simple` sample with links out of its root, links inside it and FIFOs; returns the
    tree, what each planted entry is, and how many tensors the untouched sample has."""
    outside = tmp_path / "outside"
    shutil.copytree(dump_of("nan_log") / "rank_0/Net/0/0", outside / "leaf")
    tree = Path(shutil.copytree(dump_of("simple"), tmp_path / "dump"))
    with Catalog.open(tmp_path / "plain", create=True) as cat:
        plain = cat.ingest(tree, run="plain").tensors
    rank = tree / "rank_0"
    leaf = rank / "Net/0/0"
    outside_npy = sorted((outside / "leaf").glob("*.npy"))[0]
    planted = {
        f"rank_0/Net/0/0/{outside_npy.name}": "npy out",
        "rank_0/Net/0/7": "leaf out",
        "rank_0/Net/0/8": "root",
        "rank_0/Net/0/0/Evil.Fifo-op0.0.0.1795302018857953.output.0.DefaultFormat.Float32.npy": "fifo",
    }
    os.symlink(outside_npy, leaf / outside_npy.name)
    os.symlink(outside / "leaf", rank / "Net/0/7")
    os.symlink("/", rank / "Net/0/8")
    os.mkfifo(leaf / "Evil.Fifo-op0.0.0.1795302018857953.output.0.DefaultFormat.Float32.npy")
    meta = rank / ".dump_metadata"
    meta.mkdir(exist_ok=True)
    (meta / "data_dump.json").unlink(missing_ok=True)
    os.symlink("/dev/zero", meta / "data_dump.json")
    planted["rank_0/.dump_metadata/data_dump.json"] = "dev zero"
    inside = sorted(leaf.glob("*.npy"))[0]  # a link inside the root: still cataloged
    (rank / "Net/0/9").mkdir()
    os.symlink(inside, rank / "Net/0/9" / inside.name)
    return tree, planted, plain


def test_nothing_outside_the_root_is_read_and_fifos_do_not_hang(hostile, tmp_path):
    tree, planted, plain = hostile
    out = _ingest(tree, tmp_path / "cat")
    assert out.returncode == 0, out.stderr
    with Catalog.open(tmp_path / "cat") as cat:
        errors = _errors(cat)
        for rel, what in planted.items():
            want = "a FIFO, not a regular file: not read" if what == "fifo" else OUTSIDE
            assert errors.get(rel) == want, (what, errors)
        assert not any(e.startswith("rank_0/Net/0/8/") for e in errors)  # `/` was never listed
        assert cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py() == plain + 1  # the inside link
        assert (
            cat.sql("SELECT count(*) FROM tensors WHERE rel_path LIKE 'rank_0/Net/0/9/%'")
            .column(0)[0]
            .as_py()
            == 1
        )
        assert cat.sql("SELECT count(*) FROM tensors WHERE iteration IN (7, 8)").column(0)[0].as_py() == 0


def test_follow_symlinks_reads_them_but_never_a_device(hostile, tmp_path):
    tree, planted, plain = hostile
    fifo = next(rel for rel, what in planted.items() if what == "fifo")
    (tree / "rank_0/Net/0/8").unlink()  # not the whole file system
    out = _ingest(tree, tmp_path / "cat", "--follow-symlinks")
    assert out.returncode == 0, out.stderr
    with Catalog.open(tmp_path / "cat") as cat:
        errors = _errors(cat)
        assert (
            errors["rank_0/.dump_metadata/data_dump.json"]
            == "a character device, not a regular file: not read"
        )
        assert OUTSIDE not in errors.values()
        linked = cat.sql("SELECT count(*) FROM tensors WHERE iteration = 7").column(0)[0].as_py()
        assert linked == len(list((tmp_path / "outside/leaf").glob("*.npy")))
        total = cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()
        assert total == plain + 1 + 1 + linked  # the inside link, the outside npy, the outside leaf
        assert errors[fifo] == "a FIFO, not a regular file: not read"
        row = cat.sql("SELECT row_id FROM tensors WHERE iteration = 7 LIMIT 1").column(0)[0].as_py()
        assert cat.tensor(row).size >= 0


def test_msprobe_tensor_folder_linked_out_of_the_root(tmp_path):
    tree = Path(shutil.copytree(DATA / "msprobe/pt_mix_tensor", tmp_path / "dump"))
    data = tree / "step0/rank0/dump_tensor_data"
    shutil.move(data, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", data)
    with Catalog.open(tmp_path / "cat", create=True) as cat:
        cat.ingest(tree, run="r")
        assert _errors(cat).get("step0/rank0/dump_tensor_data") == OUTSIDE
        outside = cat.sql("SELECT count(*) FROM tensors WHERE rel_path LIKE 'step0/rank0/dump_tensor_data/%'")
        assert outside.column(0)[0].as_py() == 0


def test_a_watcher_does_not_leave_the_root_either(hostile, tmp_path):
    """A real `dumpcat watch` on the hostile tree: the same error rows, the same tensors, and it
    keeps running (a FIFO would have blocked its walk); SIGTERM ends it cleanly."""
    tree, planted, plain = hostile
    (tree / "rank_0/Net/0/8").unlink()
    cat_dir = tmp_path / "watched"
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog.cli", "watch", str(tree), "-c", str(cat_dir), "--run", "r",
         "--interval", "0.2"],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        errors: dict[str, str] = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            if (cat_dir / "snapshot.json").exists():
                with Catalog.open(cat_dir) as cat:
                    errors = _errors(cat)
                    tensors = cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()
                if tensors == plain + 1 and len(errors) >= 3:
                    break
            time.sleep(0.3)
        fifo = next(rel for rel, what in planted.items() if what == "fifo")
        assert errors.get(fifo) == "a FIFO, not a regular file: not read", errors
        assert errors.get("rank_0/Net/0/7") == OUTSIDE and tensors == plain + 1, (errors, tensors)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()


def test_serve_watch_takes_the_ingest_options(hostile, tmp_path):
    """`dumpcat serve --watch` (a real process, queried with psycopg) applies --max-metadata-size
    and leaves links out of the root alone, as `dumpcat watch` does."""
    import psycopg

    from tests.hostile import ServeProcess

    tree = hostile[0]
    (tree / "rank_0/Net/0/8").unlink()
    (tree / "rank_0/.dump_metadata/data_dump.json").unlink()
    shutil.copyfile(
        dump_of("simple") / "rank_0/.dump_metadata/data_dump.json",
        tree / "rank_0/.dump_metadata/data_dump.json",
    )
    srv = ServeProcess(
        tmp_path / "cat", tmp_path, "--watch", str(tree), "--run", "r", "--max-metadata-size", "json=100"
    )
    try:
        deadline = time.monotonic() + 90
        errors: dict[str, str] = {}
        while time.monotonic() < deadline and len(errors) < 3:
            with psycopg.connect(**srv.dsn()) as conn:
                errors = dict(conn.execute("SELECT path, reason FROM ingest_errors").fetchall())
            time.sleep(0.3)
        assert "over the 100 B cap on json" in errors.get("rank_0/.dump_metadata/data_dump.json", ""), errors
        assert errors.get("rank_0/Net/0/7") == OUTSIDE, errors
    finally:
        srv.stop()
