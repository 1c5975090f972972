"""Ascend raw dumps through the whole pipeline: the committed raw trees (tests/data/ascend_raw,
made by tests/writers/ascend_tree.py from real MindSpore 2.10 CPU tensors) give back every value
MindSpore wrote to its npy files, the same statistics, the same first anomaly and source lines."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.ascend.device_format import host_to_device
from ingest.formats.ascend.overflow import AI_CORE, DHA, L2, OverflowBlock, encode_opdebug
from ingest.formats.mindspore.npy_name import parse_tensor_name
from ingest.pipeline import detect_dump
from ingest.watch import Watcher
from tests.conftest import DATA
from tests.writers.ascend_raw import SlotSpec, build_raw_dump
from tests.writers.ascend_tree import device_format_for, write_tree

RAW = DATA / "ascend_raw"
SOURCES = {
    "nan_log_rank": DATA / "ms210/nan_log/dump",
    "kernels_filter_rank": DATA / "ms210/kernels_filter/dump",
    "nan_log_v12": DATA / "ms210/nan_log/dump",
}
STAT_COLUMNS = (
    "count",
    "nan_count",
    "neg_inf_count",
    "pos_inf_count",
    "zero_count",
    "neg_count",
    "pos_count",
)


def _npy_of(src: Path, rel_dir_parts: tuple[str, ...], op_name: str, io: str, slot: int) -> Path:
    """The npy file MindSpore wrote for this slot (the raw tree was made from it)."""
    rank, net, graph, iteration = rel_dir_parts
    leaf = src / rank / net / graph / iteration
    hits = [
        f for f in leaf.glob("*.npy")
        if (tn := parse_tensor_name(f.name)).op_name == op_name and tn.io == io and tn.slot == slot
    ]  # fmt: skip
    assert len(hits) == 1, (leaf, op_name, io, slot)
    return hits[0]


def _raw_to_npy_place(tree: str, rel_path: str) -> tuple[str, ...]:
    parts = rel_path.split("/")
    if tree.endswith("_v12"):  # device_0/Net_graph_0/0/1/file
        return (f"rank_{parts[0].split('_')[1]}", parts[1].rsplit("_graph_", 1)[0], parts[2], parts[3])
    return tuple(parts[:4])


def _npy_run(tree: str) -> str:
    """The run of the npy source of `tree` (nan_log's serves both of its raw layouts)."""
    return f"npy_{SOURCES[tree].parent.name}"


@pytest.fixture(scope="module")
def raw_catalogs(tmp_path_factory):
    """Each committed raw tree and its npy source, in one catalog (each source ingested once)."""
    path = tmp_path_factory.mktemp("raw") / "cat"
    cat = Catalog.open(path, create=True)
    for tree in SOURCES:
        cat.ingest(RAW / tree, run=tree)
    for run, src in {_npy_run(tree): src for tree, src in SOURCES.items()}.items():
        cat.ingest(src, run=run)
    return cat


@pytest.mark.parametrize("tree", list(SOURCES))
def test_every_slot_gives_back_the_npy_values(raw_catalogs, tree):
    cat = raw_catalogs
    rows = cat.sql(
        "SELECT row_id, rel_path, file_op_name, io, slot, format, shape, host_shape, producer "
        "FROM tensors WHERE run = $run",
        {"run": tree},
    ).to_pylist()
    n_npy = cat.sql("SELECT count(*) FROM tensors WHERE run = $run", {"run": _npy_run(tree)}).column(0)[0]
    assert len(rows) == n_npy.as_py() > 0
    formats = set()
    for r in rows:
        assert r["producer"] == "ascend-raw"
        place = _raw_to_npy_place(tree, r["rel_path"])
        expected = np.load(_npy_of(SOURCES[tree], place, r["file_op_name"], r["io"], r["slot"]))
        got = cat.tensor(r["row_id"])
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        formats.add(r["format"])
        if r["host_shape"] is not None:  # a device layout: asked for, it is the dumped bytes
            device = cat.tensor(r["row_id"], layout="device")
            assert list(device.shape) == r["shape"] and list(expected.shape) == r["host_shape"]
            np.testing.assert_array_equal(device, host_to_device(expected, r["format"]))
        else:
            assert isinstance(got, np.memmap) or got.base is not None  # mapped, not copied
    wanted = {"ND", "FRACTAL_NZ"} if "nan_log" in tree else {"ND", "NC1HWC0", "FRACTAL_Z"}
    assert wanted <= formats


@pytest.mark.parametrize("tree", list(SOURCES))
def test_statistics_never_count_device_padding(raw_catalogs, tree):
    """Statistics of a raw slot equal those of its npy file: C0 and fractal padding are zeros the
    device layout adds, and are never counted (count, zero_count, avg, l2norm)."""
    cat = raw_catalogs
    q = (
        "SELECT op_name, iteration, io, slot, count, nan_count, neg_inf_count, pos_inf_count, zero_count, "
        "neg_count, pos_count, avg, l2norm, max, min FROM stats WHERE run = $run ORDER BY ALL"
    )
    raw = cat.sql(q, {"run": tree}).to_pylist()
    npy = cat.sql(q, {"run": _npy_run(tree)}).to_pylist()
    assert len(raw) == len(npy) > 0
    padded = cat.sql(
        "SELECT count(*) FROM tensors WHERE run = $run AND host_shape IS NOT NULL "
        "AND list_reduce(shape, lambda a, b: a * b) > list_reduce(host_shape, lambda a, b: a * b)",
        {"run": tree},
    ).column(0)[0]
    assert padded.as_py() > 0, "the tree must hold padded device layouts"
    for a, b in zip(raw, npy, strict=True):
        assert a["op_name"] == b["op_name"]
        for c in STAT_COLUMNS:
            assert a[c] == b[c], (a, c)
        for c in ("avg", "l2norm", "max", "min"):
            assert a[c] == pytest.approx(b[c], rel=1e-12, nan_ok=True), (a, c)


@pytest.mark.parametrize("tree", ["nan_log_rank", "nan_log_v12"])
def test_first_anomaly_and_source_lines(raw_catalogs, tree):
    cat = raw_catalogs
    q = (
        "SELECT iteration, op_name, io, slot, nan_count, source_file, source_line "
        "FROM first_anomaly WHERE run = $run ORDER BY iteration"
    )
    raw = cat.sql(q, {"run": tree}).to_pylist()
    npy = cat.sql(q, {"run": _npy_run(tree)}).to_pylist()
    assert (
        [r["op_name"] for r in raw]
        == [r["op_name"] for r in npy]
        == [
            "Default/network-WithLossCell/_backbone-Net/Log-op0",
            "Default/network-WithLossCell/_backbone-Net/fc-Dense/MatMul-op0",
        ]
    )
    # Both layouts carry MindSpore's graphs/ (v1.2 in device_0/): source lines resolve as in npy.
    assert raw == npy and all(r["source_line"] for r in raw)
    match = cat.sql(
        "SELECT DISTINCT op_type = 'Parameter' AS param, name_match FROM tensors WHERE run = $run ORDER BY 1",
        {"run": tree},
    ).to_pylist()
    assert match == [{"param": False, "name_match": "exact"}, {"param": True, "name_match": "header"}]


def test_detection_and_forced_producer(tmp_path):
    d = detect_dump(RAW / "nan_log_rank")
    assert d.reader.name == "ascend-raw" and "raw files in rank_0/Net/0/" in d.description
    d = detect_dump(RAW / "nan_log_v12")
    assert d.reader.name == "ascend-raw-v1.2" and "device_0/Net_graph_0/0/" in d.description
    d = detect_dump(RAW / "nan_log_rank" / "rank_0")  # one rank folder
    assert d.reader.name == "ascend-raw" and d.fixed and d.root == RAW / "nan_log_rank"
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(RAW / "nan_log_rank"), "-c", str(tmp_path / "c")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines()[0].endswith(
        "nan_log_rank: Ascend raw dump (CANN DumpData), rank_N/{net}/{graph}/{iteration}/ "
        "(raw files in rank_0/Net/0/0/)"
    )
    # Forced as npy, the raw files are what they are to that reader: unrecognised files.
    cat = Catalog.open(tmp_path / "forced", create=True)
    s = cat.ingest(RAW / "nan_log_rank", producer="mindspore-npy")
    assert s.tensors == 0 and s.errors == 62
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", str(RAW / "nan_log_v12"), "-c", str(tmp_path / "d"),
         "--producer", "ascend-raw"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (
        proc.returncode == 1 and "is not a ascend-raw dump. Looked for ascend-raw: raw files" in proc.stderr
    )


def _one_op_tree(root: Path) -> tuple[Path, np.ndarray]:
    """A rank-layout tree with one Conv2D launch, from real tensors of the kernels_filter dump."""
    src = DATA / "ms210/kernels_filter/dump"
    write_tree(src, root)
    leaf = next(p for p in root.glob("rank_0/Net/*/*") if p.is_dir())
    return leaf, np.load(next((src / "rank_0/Net/0/0").glob("Conv2D*output.0*.npy")))


def _bad_files(leaf: Path, good: bytes) -> dict[str, str]:
    """Broken raw files beside good ones; name -> what the error row must say."""
    header_len = struct.unpack("<Q", good[:8])[0]
    spec = SlotSpec(np.arange(6, dtype=np.float32).tobytes(), "DT_FLOAT", (2, 3))
    cases = {
        "Add.truncated_header.1.1.1000": (good[: 8 + header_len // 2], "incomplete"),
        "Add.beyond.1.1.1001": (struct.pack("<Q", 1 << 40) + good[8:], "not a raw dump"),
        "Add.short_data.1.1.1002": (good[:-5], "incomplete"),
        "Add.sizes.1.1.1003": (good + b"\0" * 7, "do not add up"),
        "Add.wrong_size.1.1.1004": (
            build_raw_dump(op_name="x", outputs=[SlotSpec(spec.data, "DT_FLOAT", (2, 3), size=20)]),
            "needs 24 bytes",
        ),
        "Add.garbage.1.1.1005": (b"\xff" * 64, "not a raw dump"),
        "Add.empty.1.1.1006": (b"", "incomplete"),
    }
    for name, (data, _) in cases.items():
        (leaf / name).write_bytes(data)
    unknown = build_raw_dump(op_name="x", outputs=[SlotSpec(b"\1\2\3\4", 99, (4,), format=77)])
    (leaf / "Add.unknown_type.1.1.1007").write_bytes(unknown)
    return {name: why for name, (_, why) in cases.items()}


def test_bad_raw_files_are_error_rows_and_the_rest_is_cataloged(tmp_path):
    leaf, _ = _one_op_tree(tmp_path / "dump")
    good = next(
        p for p in leaf.iterdir() if not p.name.endswith(".bin") and p.name.startswith("Conv2D")
    ).read_bytes()
    expected = _bad_files(leaf, good)
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(tmp_path / "dump")
    errors = {
        r["path"].rsplit("/", 1)[1]: r["reason"]
        for r in cat.sql("SELECT path, reason FROM ingest_errors").to_pylist()
    }
    assert set(errors) == set(expected), errors
    for name, why in expected.items():
        assert why in errors[name], (name, errors[name])
    assert s.tensors == 24 + 1  # every good slot, and the unknown type's bytes
    row = cat.sql(
        "SELECT row_id, dtype, stored_dtype, format FROM tensors WHERE file_name LIKE 'Add.unknown%'"
    ).to_pylist()
    assert row == [
        {"row_id": row[0]["row_id"], "dtype": "DT_99", "stored_dtype": "raw", "format": "FORMAT_77"}
    ]
    assert cat.tensor(row[0]["row_id"]).tobytes() == b"\1\2\3\4"  # raw bytes, never numbers
    assert cat.sql("SELECT count(*) FROM stats WHERE file_op_name = 'unknown_type'").column(0)[0].as_py() == 0


def test_watcher_waits_for_a_raw_file_to_be_complete(tmp_path):
    """A raw file is complete only when its header and every size it declares are on disk: the
    watcher neither catalogs nor reports it before."""
    dump = tmp_path / "dump"
    leaf, conv_out = _one_op_tree(dump)
    data = build_raw_dump(
        op_name="Default/late/Add-op9",
        inputs=[SlotSpec(conv_out.tobytes(), "DT_FLOAT", conv_out.shape)],
        outputs=[SlotSpec(conv_out.tobytes(), "DT_FLOAT", conv_out.shape)],
    )
    cat_dir = tmp_path / "cat"
    w = Watcher(cat_dir, dump, "w", interval=0.1, grace=30.0)
    w.start()
    try:
        assert w.wait_idle(60)
        assert w.status()["tensors"] == 24
        target = leaf / "Add.Default_late_Add-op9.7.7.1795302834999999"
        with open(target, "wb") as f:
            for cut in (3, 8 + 10, len(data) - conv_out.nbytes - 1, len(data) - 1):
                f.write(data[f.tell() : cut])
                f.flush()
                time.sleep(0.4)
                st = w.status()
                assert st["tensors"] == 24 and st["errors"] == 0 and st["pending"] >= 1, (cut, st)
            f.write(data[f.tell() :])
        assert w.wait_idle(60)
        st = w.status()
        assert st["tensors"] == 26 and st["errors"] == 0 and st["pending"] == 0
    finally:
        w.stop()
    cat = Catalog.open(cat_dir)
    rows = cat.sql(
        "SELECT row_id, io FROM tensors WHERE file_op_name = 'Default_late_Add-op9' ORDER BY io"
    ).to_pylist()
    assert [r["io"] for r in rows] == ["input", "output"]
    np.testing.assert_array_equal(cat.tensor(rows[1]["row_id"]), conv_out)


def test_overflow_records_join_the_operator_that_overflowed(tmp_path):
    dump = tmp_path / "dump"
    leaf, _ = _one_op_tree(dump)
    conv = next(p for p in leaf.iterdir() if p.name.startswith("Conv2D"))
    # CPU dumps give every kernel task 0 on stream 0: an Ascend launch has its own task id.
    op_type, op_name, _, _, ts = conv.name.removesuffix(".bin").split(".")
    task, stream = 42, 3
    conv.rename(leaf / f"{op_type}.{op_name}.{task}.{stream}.{ts}")
    blocks = [
        OverflowBlock(DHA, 0, 0, 0, 0, 0, 0, 0, ()),
        OverflowBlock(L2, 0, 0, 0, 0, 0, 0, 0, ()),
        OverflowBlock(AI_CORE, 1, stream, task, 2, 0x12C0_0000_1000, 0x12C0_0800_0000, 0x10, (), 7, 3),
    ]
    record = encode_opdebug(blocks)
    raw = build_raw_dump(op_name="Node_OpDebug", outputs=[SlotSpec(record, "DT_UINT8", (len(record),))])
    (leaf / "Opdebug.Node_OpDebug.99.1.1795302834999000").write_bytes(raw)
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    rows = cat.sql(
        "SELECT block, task_id, stream_id, status, op_name, op_type FROM overflows ORDER BY block"
    ).to_pylist()
    assert [r["block"] for r in rows] == [AI_CORE, DHA, L2]
    ai = rows[0]
    assert ai["status"] == 0x10 and ai["op_type"] == "Conv2D"
    assert ai["op_name"] == "Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op0"
    assert rows[1]["op_name"] is None  # the DHA block's zeros name no operator
    ambiguous = cat.sql("SELECT op_name, len(row_ids) AS n FROM overflow_ops WHERE task_id = 0").to_pylist()
    assert ambiguous[0]["op_name"] is None and ambiguous[0]["n"] > 1  # shared task ids name nothing


def test_msaccucmp_conversions_link_to_their_slot_and_are_counted_once(tmp_path):
    dump = tmp_path / "dump"
    leaf, conv_out = _one_op_tree(dump)
    conv = next(p for p in leaf.iterdir() if p.name.startswith("Conv2D"))
    np.save(leaf / f"{conv.name}.output.0.{'x'.join(map(str, conv_out.shape))}.npy", conv_out)
    orphan = "Relu.gone_op.5.1.1795302834999111"  # its raw file is not here: counted on its own
    np.save(leaf / f"{orphan}.output.0.2x3.npy", np.ones((2, 3), np.float32))
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    rows = cat.sql(
        "SELECT row_id, io, slot, producer, source_row_id, file_name FROM tensors "
        "WHERE producer = 'msaccucmp' ORDER BY file_name"
    ).to_pylist()
    assert len(rows) == 2
    linked = next(r for r in rows if r["file_name"].startswith("Conv2D"))
    source = (
        cat.sql(
            "SELECT row_id FROM tensors WHERE rel_path = $p AND io = 'output' AND slot = 0",
            {"p": str(conv.relative_to(dump))},
        )
        .column(0)[0]
        .as_py()
    )
    assert linked["source_row_id"] == source
    np.testing.assert_array_equal(cat.tensor(linked["row_id"]), cat.tensor(source))
    in_stats = cat.sql("SELECT row_id FROM stats").column(0).to_pylist()
    assert linked["row_id"] not in in_stats and source in in_stats
    orphan_row = next(r for r in rows if r["file_name"].startswith("Relu"))
    assert orphan_row["source_row_id"] is None and orphan_row["row_id"] in in_stats


def test_device_format_choice_is_the_one_documented():
    a4 = np.zeros((2, 3, 4, 4), np.float32)
    assert device_format_for("Conv2D", "input", 1, a4) == "FRACTAL_Z"
    assert device_format_for("Conv2D", "input", 0, a4) == "NC1HWC0"
    assert device_format_for("MatMul", "output", 0, np.zeros((2, 3), np.float32)) == "FRACTAL_NZ"
    assert device_format_for("Add", "output", 0, np.zeros((2, 3), np.int32)) == "ND"


def test_committed_trees_are_what_the_writer_writes(tmp_path):
    """The committed trees are regenerated byte for byte by tests/writers/ascend_tree.py."""
    for tree, src in SOURCES.items():
        out = tmp_path / tree
        write_tree(src, out, layout="v1.2" if tree.endswith("_v12") else "rank")
        committed = sorted(p.relative_to(RAW / tree) for p in (RAW / tree).rglob("*") if p.is_file())
        written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        assert committed == written
        for rel in committed:
            assert (RAW / tree / rel).read_bytes() == (out / rel).read_bytes(), rel


def test_a_raw_file_is_the_message_a_standard_protobuf_parser_reads():
    """The committed files decode with the protobuf package's own parser to the same slots."""
    from ingest.formats.ascend import dump_data_pb2
    from ingest.formats.ascend.raw_dump import read_raw_dump

    for f in sorted((RAW / "nan_log_rank").rglob("*.*.*.*.*"))[:20]:
        if not f.is_file() or f.parent.name in ("execution_order", "graphs", ".dump_metadata"):
            continue
        data = f.read_bytes()
        ours = read_raw_dump(f)
        if ours.layout == "big_dump":
            n = struct.unpack("<Q", data[:8])[0]
            msg = dump_data_pb2.DumpData.FromString(data[8 : 8 + n])
        else:
            msg = dump_data_pb2.DumpData.FromString(data)
        assert msg.op_name == ours.op_name
        theirs = [(tuple(s.shape.dim), s.size or len(s.data)) for s in [*msg.input, *msg.output]]
        assert theirs == [(s.shape, s.size) for s in ours.slots]
        for s, m in zip(ours.slots, [*msg.input, *msg.output], strict=True):
            if ours.layout == "protobuf":
                assert data[s.offset : s.offset + s.size] == m.data


def test_old_catalog_without_the_new_columns_still_fetches(tmp_path, raw_catalogs):
    """Row ids and tensors keep working when parquet files lack the columns this version added."""
    import pyarrow.parquet as pq

    from tests.conftest import as_written_before_flat_files

    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(DATA / "ms210/nan_log/dump")
    for f in (tmp_path / "cat").rglob("tensors.parquet"):
        t = pq.read_table(f)
        pq.write_table(t.drop_columns(["producer", "host_shape", "op_full_name", "source_row_id"]), f)
    as_written_before_flat_files(tmp_path / "cat")
    fresh = Catalog.open(tmp_path / "cat")
    row = fresh.sql("SELECT row_id, producer, host_shape FROM tensors LIMIT 1").to_pylist()[0]
    assert row["producer"] is None and row["host_shape"] is None
    assert fresh.tensor(row["row_id"]).size > 0


def test_reingest_adds_nothing_and_sigkill_then_rerun_equals_one_shot(tmp_path):
    """Crash safety holds for raw dumps: an ingest SIGKILLed at moments spread over its walk (after
    a few, a third, two thirds and all but one of its 32 leaf directories, each killed run resumed
    by the next), then run again, gives exactly the one-shot catalog (every slot once, same row ids,
    same statistics). (Three rounds of two kills at random leaves cost a subprocess start each and
    fell in the same phases.)"""
    import shutil
    import signal

    from tests.ingest.test_incremental import _content, _start_ingest

    dump = tmp_path / "dump"
    for r in range(16):
        shutil.copytree(RAW / "nan_log_rank" / "rank_0", dump / f"rank_{r}")
    reference = Catalog.open(tmp_path / "ref", create=True)
    reference.ingest(dump)
    expected = _content(reference)
    again = reference.ingest(dump)
    assert (again.tensors, again.computed_stats, again.errors) == (0, 0, 0)
    assert _content(reference) == expected
    kills = 0
    for attempt, targets in enumerate(((3, 21), (11, 31))):
        cat_dir = tmp_path / f"cat{attempt}"
        for target in targets:
            proc = _start_ingest(cat_dir, dump)
            seen = 0
            while seen < target and proc.stdout.readline():
                seen += 1
            time.sleep(0.01 * attempt)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.stdout.read()
            proc.wait()
        final = Catalog.open(cat_dir, create=True)
        final.ingest(dump)
        assert _content(final) == expected, attempt
    assert kills >= 3, "the ingest finished before most kills: the test would prove nothing"


def test_cli_tensor_prints_host_or_device_layout(tmp_path):
    cat = Catalog.open(tmp_path / "c", create=True)
    cat.ingest(RAW / "kernels_filter_rank")
    row = cat.sql(
        "SELECT row_id, shape, host_shape FROM tensors WHERE format = 'NC1HWC0' ORDER BY row_id LIMIT 1"
    ).to_pylist()[0]
    cli = [sys.executable, "-m", "catalog.cli", "tensor", str(tmp_path / "c"), str(row["row_id"])]
    host = subprocess.run(cli, capture_output=True, text=True, check=True).stdout.splitlines()[1]
    device = subprocess.run([*cli, "--device-layout"], capture_output=True, text=True, check=True).stdout
    assert host == f"# shape {tuple(row['host_shape'])}, dtype float32"
    assert device.splitlines()[1] == f"# shape {tuple(row['shape'])}, dtype float32"


def test_packed_and_ml_dtypes_slots_through_the_pipeline(tmp_path):
    """bfloat16, float8, int4 and uint1 slots (made from a real MindSpore tensor) come back decoded
    from the catalog, and their statistics are those of the decoded values."""
    import ml_dtypes

    from tests.writers.ascend_raw import encode

    dump = tmp_path / "dump"
    leaf, conv_out = _one_op_tree(dump)
    real = conv_out.ravel()[:33]  # an odd count: int4 and uint1 end in a half-used byte
    cases = {
        "DT_BF16": real.astype(ml_dtypes.bfloat16),
        "DT_FLOAT8_E4M3FN": real.astype(ml_dtypes.float8_e4m3fn),
        "DT_INT4": np.clip(np.round(real * 4), -8, 7).astype(np.int8),
        "DT_UINT1": (real > 0).astype(np.uint8),
    }
    stored = {
        "DT_BF16": "bfloat16",
        "DT_FLOAT8_E4M3FN": "float8_e4m3fn",
        "DT_INT4": "int4",
        "DT_UINT1": "uint1",
    }
    outputs = [SlotSpec(encode(v, stored[dt]), dt, v.shape) for dt, v in cases.items()]
    (leaf / "Cast.Default_Cast-op5.9.9.1795302834999500").write_bytes(
        build_raw_dump(op_name="Default/Cast-op5", outputs=outputs)
    )
    cat = Catalog.open(tmp_path / "cat", create=True)
    assert cat.ingest(dump).errors == 0
    rows = cat.sql(
        "SELECT t.row_id, t.slot, t.producer_dtype AS dtype, t.stored_dtype, s.count, s.max, s.min, "
        "s.zero_count "
        "FROM tensors t JOIN stats s USING (row_id) WHERE t.file_op_name = 'Default_Cast-op5' ORDER BY t.slot"
    ).to_pylist()
    assert [r["dtype"] for r in rows] == list(cases)
    for r, (dt, want) in zip(rows, cases.items(), strict=True):
        got = cat.tensor(r["row_id"])
        assert r["stored_dtype"] == stored[dt] and got.shape == want.shape
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
        values = want.astype(np.float64)
        assert r["count"] == 33 and r["zero_count"] == int((values == 0).sum())
        assert (r["max"], r["min"]) == (values.max(), values.min())


def test_overflow_json_in_a_dump_tree(tmp_path):
    """The npy-format overflow record (`….output.0.json`) becomes `overflows` rows too; a garbled one
    is an error row and the rest of the tree is still cataloged."""
    import json

    dump = tmp_path / "dump"
    leaf, _ = _one_op_tree(dump)
    record = {
        "DHA Atomic Add": {"model_id": 0, "stream_id": 0, "task_id": 0, "task_type": 0, "pc_start": "0x0",
                           "para_base": "0x0", "status": 0},
        "L2 Atomic Add": {"model_id": 0, "stream_id": 0, "task_id": 0, "task_type": 0, "pc_start": "0x0",
                          "para_base": "0x0", "status": 0},
        "AI Core": {"model_id": 1, "stream_id": 3, "task_id": 42, "task_type": 2,
                    "pc_start": "0x12c000001000", "para_base": "0x12c008000000", "status": 16},
    }  # fmt: skip
    (leaf / "Opdebug.Node_OpDebug.99.1.1795302834999000.output.0.json").write_text(json.dumps(record))
    (leaf / "Opdebug.Node_OpDebug.98.1.1795302834998000.output.0.json").write_text("{not json")
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.tensors == 24 and s.errors == 1
    rows = cat.sql(
        "SELECT block, task_id, stream_id, status, pc_start FROM overflows ORDER BY block"
    ).to_pylist()
    assert rows[0] == {
        "block": AI_CORE,
        "task_id": 42,
        "stream_id": 3,
        "status": 16,
        "pc_start": 0x12C0_0000_1000,
    }
    err = cat.sql("SELECT path, stage FROM ingest_errors").to_pylist()
    assert err == [{"path": err[0]["path"], "stage": "overflow"}] and err[0]["path"].endswith(
        "98.1.1795302834998000.output.0.json"
    )


def test_raw_headers_read_in_helpers_give_the_file_by_file_catalog(tmp_path, monkeypatch):
    """A one-shot ingest reads raw headers in helper processes (ingest/readers/raw_scan.py) and judges
    the files they could not read in the ingesting process. Its catalog is exactly the one made
    file by file: every column of every row, the statistics, the errors and the counts."""
    import shutil

    from ingest.formats.ascend.raw_dump import read_raw_dump
    from ingest.readers import mindspore_npy
    from ingest.readers.ascend_raw import is_raw_name
    from tests.compare import catalog_content

    dump = tmp_path / "dump"
    for r in range(4):
        shutil.copytree(RAW / "nan_log_rank" / "rank_0", dump / f"rank_{r}")
    leaf = dump / "rank_1" / "Net" / "0" / "0"
    good = next(p for p in sorted(leaf.iterdir()) if read_raw_dump(p).layout == "big_dump")
    raw_files = sum(1 for p in dump.rglob("*") if p.is_file() and is_raw_name(p.name))
    (leaf / "Conv2D.cut_short.9.9.1001").write_bytes(good.read_bytes()[:-4])
    (leaf / "Conv2D.not_protobuf.9.9.1002").write_bytes(struct.pack("<Q", 8) + b"\xff" * 64)
    queries = (
        "SELECT * FROM tensors ORDER BY row_id",
        "SELECT * EXCLUDE (stat_id) FROM stats ORDER BY row_id",
        "SELECT path, reason FROM ingest_errors ORDER BY path",
    )
    # Small scan batches: the raw files make several batches, so helpers (workers=2) read them all.
    monkeypatch.setattr(mindspore_npy, "_SCAN_BATCH_FILES", 16)
    scanned_cat = Catalog.open(tmp_path / "scanned", create=True)
    scanned = scanned_cat.ingest(dump, workers=2)
    monkeypatch.setattr(mindspore_npy, "_GIANT_LEAF_FILES", 0)  # every leaf read file by file
    serial_cat = Catalog.open(tmp_path / "serial", create=True)
    serial = serial_cat.ingest(dump, workers=1)
    counts = ("files_seen", "files_new", "tensors", "computed_stats", "errors")
    assert [getattr(scanned, c) for c in counts] == [getattr(serial, c) for c in counts]
    assert raw_files > 4 * 16 and scanned.files_new == raw_files and scanned.errors == 2
    assert scanned.tensors >= raw_files and scanned.tensors % 4 == 0  # every rank the same
    assert catalog_content(scanned_cat, queries) == catalog_content(serial_cat, queries)
    errors = catalog_content(scanned_cat, queries[2:])[0]
    assert [e["path"].rsplit("/", 1)[1] for e in errors] == [
        "Conv2D.cut_short.9.9.1001",
        "Conv2D.not_protobuf.9.9.1002",
    ]
    assert "incomplete" in errors[0]["reason"]
    again = scanned_cat.ingest(dump, workers=2)  # nothing is read twice
    assert (again.tensors, again.files_new, again.computed_stats) == (0, 0, 0)
