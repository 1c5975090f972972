"""The batched tensor-file scan (ingest/readers/leaf_scan.py) and its use on every core by a one-shot ingest:
the same rows as the file-by-file path, whatever the batching, the helpers, or the bad files."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ingest.pipeline as pipeline
import ingest.readers.mindspore_npy as npy_reader
from catalog import Catalog
from ingest import helper_pool
from ingest.formats.mindspore.npy_name import parse_tensor_name
from ingest.formats.npy_header import read_npy_header
from ingest.ids import tensor_row_id
from ingest.readers import stat_match
from ingest.readers.leaf_scan import scan_tensor_files
from ingest.storage.schema import TENSORS
from tests.compare import catalog_content
from tests.conftest import REPO, dump_of

COMPARE = (
    "SELECT * FROM raw_tensors ORDER BY row_id",
    "SELECT row_id, stat_id, stat_source, max, min, nan_count FROM stats ORDER BY row_id, stat_id",
    "SELECT path, stage, reason FROM ingest_errors ORDER BY ALL",
)


@pytest.fixture(autouse=True)
def _stop_helpers():
    yield
    helper_pool._shutdown_helpers()


def _content(cat: Catalog) -> list:
    return catalog_content(cat, COMPARE)


def test_scan_gives_header_and_name_fields_and_hands_back_bad_files(copy_dump):
    dump = copy_dump("simple")
    leaf = dump / "rank_0/Net/0/0"
    names = sorted(p.name for p in leaf.glob("*.npy"))
    good = names[:5]
    (leaf / names[5]).write_bytes((leaf / names[5]).read_bytes()[:100])  # truncated
    (leaf / "garbled.npy").write_bytes(b"not an npy")  # name fits no pattern either
    bad_header = names[6]
    (leaf / bad_header).write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': oops}  \n")
    batch_names = [*good, names[5], "garbled.npy", bad_header]
    ctx = ("run1", 0, "Net", 0, 0, "iteration")
    [(table, irregular)] = scan_tensor_files(
        [(ctx, str(leaf), "rank_0/Net/0/0", batch_names, [None] * len(batch_names))]
    )
    assert table.schema == TENSORS
    assert irregular == [names[5], "garbled.npy", bad_header]
    rows = table.to_pylist()
    assert [r["file_name"] for r in rows] == good
    for r in rows:
        tn = parse_tensor_name(r["file_name"])
        header, size = read_npy_header(leaf / r["file_name"])
        assert r["row_id"] == tensor_row_id("run1", "rank_0/Net/0/0/" + r["file_name"])
        assert (r["run"], r["rank"], r["net"], r["graph_id"], r["iteration"]) == ("run1", 0, "Net", 0, 0)
        keys = (r["op_type"], r["file_op_name"], r["io"], r["slot"])
        assert keys == (tn.op_type, tn.op_name, tn.io, tn.slot)
        assert r["shape"] == list(header.shape) and r["stored_dtype"] == header.dtype_name
        assert (r["data_offset"], r["nbytes"], r["file_size"]) == (header.data_offset, header.nbytes, size)
        assert r["rel_path"] == "rank_0/Net/0/0/" + r["file_name"]
    # A chunk with nothing readable still gives a (typed, empty) table.
    [(empty, bad)] = scan_tensor_files([(ctx, str(leaf), "rank_0/Net/0/0", ["x.npy"], [None])])
    assert empty.num_rows == 0 and empty.schema == TENSORS and bad == ["x.npy"]


def test_mapped_names_are_parsed_from_their_original(tmp_path):
    leaf = tmp_path / "d"
    leaf.mkdir()
    np.save(leaf / "7.npy", np.arange(3, dtype=np.int16))
    long_name = "Add." + "A" * 300 + ".0.0.12.output.0.DefaultFormat.int16.npy"
    ctx = ("r", 0, "Net", 0, 1, "iteration")
    [(table, irregular)] = scan_tensor_files([(ctx, str(leaf), "d", ["7.npy"], [long_name])])
    [row] = table.to_pylist()
    assert not irregular
    assert row["file_name"] == "7.npy" and row["original_name"] == long_name
    assert row["file_op_name"] == "A" * 300 and row["dtype"] == "int16" and row["shape"] == [3]


def _bad_tree(root: Path) -> Path:
    """12 ranks of the simple sample plus a few broken files in several leaves."""
    dump = root / "dump"
    for r in range(12):
        shutil.copytree(dump_of("simple") / "rank_0", dump / f"rank_{r}")
    for r in (0, 5, 11):
        leaf = dump / f"rank_{r}/Net/0/1"
        victim = sorted(leaf.glob("*.npy"))[3]
        victim.write_bytes(victim.read_bytes()[:90])
        (leaf / "Bad.name.npy").write_bytes(b"x")
    return dump


@pytest.fixture(scope="module")
def file_by_file(tmp_path_factory) -> tuple[Path, tuple]:
    """The bad tree and the content of its catalog made by the file-by-file path (the reference of
    both parameters below: made once)."""
    tmp_path = tmp_path_factory.mktemp("file_by_file")
    dump = _bad_tree(tmp_path)
    reference = Catalog.open(tmp_path / "ref", create=True)

    modes: list[bool] = []

    class LiveRules:
        """The reader's sink as a live ingest in which nothing is young sees it: live-mode rules
        (each file judged by itself), every file judged now (a one-shot sink never waits)."""

        def __init__(self, sink):
            self._sink = sink

        @property
        def options(self):
            return dataclasses.replace(self._sink.options, live=True, grace=0.0, settle=0.0)

        def __getattr__(self, name):
            return getattr(self._sink, name)

    engine = npy_reader.LeafEngine
    process_leaf, ingest_leaf = engine._process_leaf, engine.ingest_leaf

    def one_file_at_a_time(self, leaf, *, scanned):
        modes.append(scanned)
        return process_leaf(self, leaf, scanned=scanned)

    def with_live_rules(self, *args):
        self.sink, sink = LiveRules(self.sink), self.sink
        try:
            ingest_leaf(self, *args)
        finally:
            self.sink = sink

    with pytest.MonkeyPatch.context() as reference_only:  # the leaf engine, for the reference only
        reference_only.setattr(engine, "_process_leaf", one_file_at_a_time)
        reference_only.setattr(engine, "ingest_leaf", with_live_rules)
        reference.ingest(dump, run="r")
    assert modes and not any(modes), "the reference must be the file-by-file path"
    expected = _content(reference)
    assert sum(1 for r in expected[2] if r["stage"] == "npy_header") == 3
    assert sum(1 for r in expected[2] if r["stage"] == "name") == 3
    return dump, expected


@pytest.mark.parametrize("workers", [1, 3])  # one process; the ingesting one and two helpers
def test_batching_and_helpers_do_not_change_the_catalog(tmp_path, monkeypatch, workers, file_by_file):
    """Small batches and groups (so that leaves are split across batches and a batch spans
    leaves) on 1 and 3 processes give exactly the catalog of the file-by-file path."""
    dump, expected = file_by_file
    monkeypatch.setattr(npy_reader, "_SCAN_BATCH_FILES", 50)
    monkeypatch.setattr(npy_reader, "_SCAN_GROUP_FILES", 700)
    monkeypatch.setattr(helper_pool, "_CALLER_COMPUTES", False)
    cat = Catalog.open(tmp_path / f"cat{workers}", create=True)
    summary = cat.ingest(dump, run="r", workers=workers)
    assert summary.errors == 6
    assert _content(cat) == expected
    # A directory over the giant-leaf bound goes file by file, flushing as it goes: a batch once 200
    # rows are pending, every third of the 36 leaves of 80-81 files (each commit costs ~0.5 s of
    # resolving: 100-row batches, 18 commits, proved nothing more).
    monkeypatch.setattr(npy_reader, "_GIANT_LEAF_FILES", 60)
    summary = pipeline.ingest_dump(tmp_path / f"giant{workers}", dump, "r", workers=workers, batch_rows=200)
    assert summary.errors == 6 and summary.batches >= 12
    assert _content(Catalog.open(tmp_path / f"giant{workers}")) == expected


def test_regrown_leaf_is_scanned_for_new_files_only(tmp_path, copy_dump):
    dump = copy_dump("simple")
    leaf = dump / "rank_0/Net/0/2"
    held = sorted(leaf.glob("*.npy"))[40:]
    for p in held:
        p.rename(tmp_path / p.name)
    cat = Catalog.open(tmp_path / "cat", create=True)
    assert cat.ingest(dump).tensors == 202
    for p in held:
        (tmp_path / p.name).rename(p)
    second = cat.ingest(dump)
    assert second.tensors == len(held) and second.computed_stats == len(held)
    one = Catalog.open(tmp_path / "one", create=True)
    one.ingest(dump)
    assert _content(one) == _content(cat)


def test_statistic_rows_match_unique_keys_only():
    files = pa.table(
        {
            "op_type": ["Add", "Add", "Mul", "Mul"],
            "file_op_name": ["a", "a", "m", "m"],
            "io": ["output"] * 4,
            "slot": pa.array([0, 0, 0, 1], pa.int32()),
            "timestamp_us": pa.array([5, 6, 7, 7], pa.int64()),
            "row_id": pa.array([1, 2, 3, 4], pa.int64()),
        }
    )
    stats = pa.table(
        {
            "op_type": ["Add", "Add", "Add", "Mul", "Mul", "Mul"],
            "file_op_name": ["a", "a", "a", "m", "m", "x"],
            "io": ["output"] * 6,
            "slot": pa.array([0, 0, 0, 1, 0, 0], pa.int32()),
            "timestamp_us": pa.array([6, 5, 99, 123, 7, 7], pa.int64()),
        }
    )
    got = stat_match.match_stat_rows(stats, files).column("row_id").to_pylist()
    # exact, exact, ambiguous loose (two Add files) -> NULL, unique loose, exact, no such op
    assert got == [2, 1, None, 4, 3, None]
    none = stat_match.match_stat_rows(stats, files.slice(0, 0)).column("row_id")
    assert none.null_count == 6


def test_watcher_scans_settled_directories_like_a_one_shot_ingest(tmp_path, monkeypatch, file_by_file):
    """`dumpcat watch` started on a dump that already holds many files: the directories nothing
    changed in for `grace` seconds take the batched scan, a directory still being written keeps the
    file-by-file live rules, and the result equals a one-shot ingest of the tree as it ends (the
    module's reference: the file-by-file catalog, which a one-shot ingest gives, see
    test_batching_and_helpers_do_not_change_the_catalog; the content holds no absolute path)."""
    from ingest.watch import Watcher

    dump = _bad_tree(tmp_path)
    _, expected = file_by_file
    old = 1_000_000_000
    for p in dump.rglob("*"):
        os.utime(p, (old, old))
    young_leaf = dump / "rank_3/Net/0/2"
    young = sorted(young_leaf.glob("*.npy"))[7]
    full = young.read_bytes()
    n_tensors = len(expected[0])  # (raw_tensors: one row per tensor)
    young.write_bytes(full[:100])  # being written: its directory is not settled
    monkeypatch.setattr(npy_reader, "_LIVE_SCAN_MIN_FILES", 20)
    modes: list[bool] = []
    process_leaf = npy_reader.LeafEngine._process_leaf

    def spy(self, leaf, *, scanned):
        modes.append(scanned)
        return process_leaf(self, leaf, scanned=scanned)

    monkeypatch.setattr(npy_reader.LeafEngine, "_process_leaf", spy)
    cat_dir = tmp_path / "cat"
    w = Watcher(cat_dir, dump, "r", interval=0.2, grace=60.0)
    w.start()
    try:
        deadline = time.monotonic() + 60
        while w.status().get("tensors", 0) < n_tensors - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = w.status()
        assert first["tensors"] == n_tensors - 1 and first["pending"] == 1, first  # waits, no error
        young.write_bytes(full)
        assert w.wait_idle(timeout=60), w.status()
        status = w.status()
    finally:
        w.stop()
    assert status["pending"] == 0 and status["errors"] == 6
    assert True in modes and False in modes  # both paths ran
    with Catalog.open(cat_dir) as live:
        assert _content(live) == expected


def test_default_workers_follow_the_usable_cores(tmp_path):
    """One worker per core the ingest may run on (taskset / container limits), at most 8: on a
    1-core affinity an ingest starts no helper process at all, nor does a small dump; a big one
    starts `workers` helpers."""
    # the most helper processes seen while the ingest ran (it stops them before its last merge)
    code = (
        "import sys, threading, psutil\n"
        "from ingest.helper_pool import default_workers\n"
        "from ingest.pipeline import ingest_dump\n"
        "seen, done = [0], threading.Event()\n"
        "def watch():\n"
        "    while not done.is_set():\n"
        "        try:\n"
        "            kids = [c for c in psutil.Process().children() if '_serve' in ' '.join(c.cmdline())]\n"
        "        except psutil.Error:\n"
        "            continue\n"
        "        seen[0] = max(seen[0], len(kids))\n"
        "        done.wait(0.01)\n"
        "t = threading.Thread(target=watch)\n"
        "t.start()\n"
        "ingest_dump(sys.argv[1], sys.argv[2])\n"
        "done.set()\n"
        "t.join()\n"
        "print(default_workers(), seen[0])\n"
    )
    repo = str(REPO)
    cmd = [sys.executable, "-c", code, str(tmp_path / "cat"), str(dump_of("simple"))]
    one = subprocess.run(["taskset", "-c", "0", *cmd], capture_output=True, text=True, cwd=repo, check=True)
    assert one.stdout.split() == ["1", "0"]
    cores = len(os.sched_getaffinity(0))
    small = subprocess.run(
        [*cmd[:3], str(tmp_path / "cat2"), cmd[4]], capture_output=True, text=True, cwd=repo, check=True
    )
    # a small dump starts no helper (each costs more to start than its files take)
    assert small.stdout.split() == [str(min(cores, 8)), "0"]
    sys.path.insert(0, str(Path(repo) / "bench"))
    import synth

    big = tmp_path / "big"
    synth.generate(big, 3000, ranks=1, iterations=1, workers=1)
    both = subprocess.run(
        [*cmd[:3], str(tmp_path / "cat3"), str(big)], capture_output=True, text=True, cwd=repo, check=True
    )
    assert both.stdout.split() == [str(min(cores, 8))] * 2  # the header scan runs in `workers` helpers


def test_scan_columns_name_every_tensors_column():
    from ingest.readers import leaf_scan

    named = set(leaf_scan._CONSTANT_COLUMNS) | set(leaf_scan._FILE_COLUMNS) | set(leaf_scan._READER_COLUMNS)
    assert named == set(TENSORS.names)


def test_helpers_scan_without_pyarrow_or_numpy(tmp_path):
    """A helper process as ingest starts it (its preloads, its environment) has not imported
    pyarrow (~25 MiB of each helper's memory) nor numpy (~15 MiB), nor after scanning a real leaf
    directory, and its columns make the same rows as the in-process scan."""
    leaf = next(p for p in sorted((dump_of("simple") / "rank_0").glob("*/*/*")) if p.is_dir())
    names = sorted(n for n in os.listdir(leaf) if n.endswith(".npy"))
    ctx = ("r", 0, "Net", 0, 0, "iteration")
    chunk = (ctx, str(leaf), "rank_0/Net/0/0", names, [None] * len(names))
    scan_task = npy_reader.LeafFiles.scan_function
    probe = (
        "import sys\n"
        "from ingest.helper_pool import _task_module\n"
        "import importlib\n"
        f"for m in _task_module({scan_task!r}): importlib.import_module(m)\n"
        "heavy = lambda: [m for m in ('pyarrow', 'numpy') if m in sys.modules]\n"
        "before = heavy()\n"
        "from ingest.readers.leaf_scan import scan_tensor_columns\n"
        f"out = scan_tensor_columns([{chunk!r}])\n"
        "print(before, heavy(), out[0][1][0][1])\n"  # (row_id column: its kind, its rows, ...)
        # statistics computed in the scan: numpy for the kernel, still no pyarrow
        f"out = scan_tensor_columns([{chunk!r}], False)\n"
        "print(heavy(), len(out[0][3][1]), sum(out[0][3][0]))\n"
    )
    from ingest.storage.memory import helper_environment

    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=helper_environment(), timeout=120,
        cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "[]", str(len(names)), "['numpy']", "12", str(len(names))]
    from ingest.readers.leaf_scan import columns_table, scan_tensor_columns

    [(table, irregular)] = scan_tensor_files([chunk])
    assert columns_table(scan_tensor_columns([chunk])[0]) == (table, irregular)
    assert table.num_rows == len(names) and not irregular


def test_one_shot_ingest_judges_irregular_files_from_a_new_listing(copy_dump, tmp_path, monkeypatch):
    """A one-shot ingest keeps only the names of a leaf's files while it scans them, not their
    directory entries: the files its scan hands back as irregular (here a truncated npy) are
    listed again and judged as before, and one deleted between its scan and its judgement becomes
    an ingest_errors row while every other file is cataloged."""
    dump = copy_dump("simple")
    leaf = dump / "rank_0/Net/0/0"
    names = sorted(p.name for p in leaf.glob("*.npy"))
    truncated, vanishing = names[3], names[4]
    for name in (truncated, vanishing):
        (leaf / name).write_bytes((leaf / name).read_bytes()[:100])
    original = npy_reader.LeafFiles.scanned_table

    def scanned_table(scanned):
        table, irregular = original(scanned)
        if vanishing in irregular:
            (leaf / vanishing).unlink()  # after the scan, before the leaf is finished
        return table, irregular

    monkeypatch.setattr(npy_reader.LeafFiles, "scanned_table", staticmethod(scanned_table))
    path = tmp_path / "cat"
    summary = pipeline.ingest_dump(path, dump, run="r", workers=1)
    with Catalog.open(path) as cat:
        errors = {
            r["path"]: (r["stage"], r["reason"]) for r in cat.sql("SELECT * FROM ingest_errors").to_pylist()
        }
        cataloged = {r["rel_path"] for r in cat.sql("SELECT rel_path FROM tensors").to_pylist()}
    assert errors[f"rank_0/Net/0/0/{truncated}"][0] == "npy_header"
    assert "truncated" in errors[f"rank_0/Net/0/0/{truncated}"][1]
    assert errors[f"rank_0/Net/0/0/{vanishing}"] == ("walk", "file vanished while being ingested")
    assert len(errors) == 2 and summary.errors == 2
    every = {p.relative_to(dump).as_posix() for p in dump.rglob("*.npy")}
    assert cataloged == every - {f"rank_0/Net/0/0/{truncated}"} and len(cataloged) == summary.tensors


@pytest.mark.parametrize("smallest", [1, 81])
def test_pending_rows_held_dictionary_encoded_give_the_same_catalog(
    tmp_path, monkeypatch, smallest, file_by_file
):
    """Big pending chunks hold their repetitive text columns dictionary-encoded (a full batch's
    rows take ~27% less memory); chunks of both kinds in one batch (`smallest` 81: the leaves
    with broken files, 80 rows, stay plain) are joined without decoding, and the written catalog
    is exactly the one of plain pending rows (the file-by-file reference, which plain pending rows
    of any batching give: test_batching_and_helpers_do_not_change_the_catalog), its raw files in
    their schema."""
    import pyarrow.parquet as pq

    from ingest.storage.schema import TABLES

    dump, expected = file_by_file

    encoded, mixed = [], []
    batch_tables, concat = pipeline.Ingester._batch_tables, pipeline.concat_pending

    def record_batch(self):
        pending = [
            t for ts in (self.pending.tables.values(), self.pending.rows.values()) for v in ts for t in v
        ]
        encoded.extend(
            pa.types.is_dictionary(f.type) for t in pending if isinstance(t, pa.Table) for f in t.schema
        )
        return batch_tables(self)

    def record_concat(tables):
        mixed.append(len({t.schema for t in tables}) > 1)
        return concat(tables)

    monkeypatch.setattr(pipeline.Ingester, "_batch_tables", record_batch)
    monkeypatch.setattr(pipeline, "concat_pending", record_concat)
    monkeypatch.setattr(pipeline, "_DICTIONARY_MIN_ROWS", smallest)
    pipeline.ingest_dump(tmp_path / "cat", dump, "r", workers=1, batch_rows=400)
    cat = Catalog.open(tmp_path / "cat")
    assert any(encoded) and (any(mixed) if smallest > 1 else True)
    assert _content(cat) == expected
    for batch in cat.store.snapshot()["batches"]:
        for table in batch["tables"]:
            written = pq.read_schema(cat.store.root / batch["path"] / f"{table}.parquet")
            assert written.remove_metadata().equals(TABLES[table]), table


_TEXT = st.one_of(
    st.none(), st.text(max_size=12), st.sampled_from(["", "Conv2D-op1", "Default/网络", "a\udcff"])
)
_INTS = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
_SHAPES = st.one_of(st.none(), st.tuples(), st.lists(st.integers(0, 2**40), max_size=5).map(tuple))


_FLOATS = st.one_of(st.none(), st.floats(allow_nan=False), st.sampled_from([float("inf"), -0.0, 5e-324]))


def test_statistics_travel_in_the_schema_s_columns():
    """A helper encodes the statistics it computes by kernel.STAT_KEYS and kinds of its own (it
    imports no pyarrow, so not the schema): the same names, order and types as STAT_VALUE_FIELDS."""
    from ingest.readers.leaf_scan import _STAT_KINDS
    from ingest.statistics.kernel import STAT_KEYS
    from ingest.storage.schema import STAT_VALUE_FIELDS

    kinds = {"d": pa.float64(), "q": pa.int64(), "s": pa.string()}
    assert [(k, kinds[t]) for k, t in zip(STAT_KEYS, _STAT_KINDS, strict=True)] == STAT_VALUE_FIELDS


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=40),
    ints=st.lists(_INTS, min_size=1, max_size=40),
    small=st.lists(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=40),
    shapes=st.lists(_SHAPES, min_size=1, max_size=40),
    floats=st.lists(_FLOATS, min_size=1, max_size=40),
)
def test_helper_columns_decode_to_what_pyarrow_makes_of_the_values(texts, ints, small, shapes, floats):
    """The buffers a helper sends (`_encode`, standard library only) wrap into the array pyarrow
    itself makes of the same Python values: nulls, empty and non-ASCII text (a lone surrogate
    becomes "?": the column stays valid UTF-8), 64-bit extremes, empty shapes, float64 statistics.
    A helper reads them back (`_values`, the jobs of the statistics it computes) as those values."""
    from ingest.readers.leaf_scan import _decode, _encode, _values

    valid = [None if t is None else t.encode("utf-8", "replace").decode("utf-8") for t in texts]
    for kind, values, expected in (
        ("s", texts, valid),
        ("q", ints, ints),
        ("i", small, small),
        ("l", shapes, shapes),
        ("d", floats, floats),
    ):
        assert _values(_encode(kind, tuple(values))) == expected, kind

    decoded = _decode(_encode("s", tuple(texts)), pa.string())
    decoded.validate(full=True)
    assert decoded.equals(pa.array(valid, pa.string()))
    for kind, values, type_ in (
        ("q", ints, pa.int64()),
        ("i", small, pa.int32()),
        ("l", shapes, pa.list_(pa.int64())),
        ("d", floats, pa.float64()),
    ):
        got = _decode(_encode(kind, tuple(values)), type_)
        got.validate(full=True)
        assert got.equals(pa.array(values, type_)), kind


def test_constant_columns_are_the_context_repeated():
    """The columns every file of a leaf shares are built from buffers too, and equal pyarrow's."""
    from ingest.readers.leaf_scan import _repeated

    for value, type_ in (("Net", pa.string()), ("", pa.string()), ("网", pa.string()), (7, pa.int32()),
                         (-(2**62), pa.int64()), (None, pa.int64()), (None, pa.string())):  # fmt: skip
        for n in (0, 1, 5):
            got = _repeated(value, n, type_)
            got.validate(full=True)
            assert got.equals(pa.array([value] * n, type_)), (value, n)
