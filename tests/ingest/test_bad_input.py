"""Bad input never aborts an ingest: each problem is one ingest_errors row, the rest is cataloged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.pipeline import DumpRootError, ingest_dump
from ingest.readers.registry import all_readers
from ingest.storage.store import CatalogError
from tests.conftest import REPO

ITER0 = "rank_0/Net/0/0"


def _errors(cat: Catalog) -> dict[str, tuple[str, str]]:
    rows = cat.sql("SELECT path, stage, reason FROM ingest_errors").to_pylist()
    return {r["path"]: (r["stage"], r["reason"]) for r in rows}


def test_corrupt_files_become_error_rows(tmp_path, copy_dump):
    dump = copy_dump("simple")
    it = dump / ITER0
    victims = sorted(it.glob("*.output.0.DefaultFormat.Float32.npy"))[:3]
    victims[0].write_bytes(victims[0].read_bytes()[:100])  # truncated in the data
    victims[1].write_bytes(b"garbage, not an npy")  # bad magic
    victims[2].write_bytes(victims[2].read_bytes()[:20])  # truncated in the header
    (it / "Conv2D.no-pattern.npy").write_bytes(b"x")  # name fits no pattern
    (it / "notes.txt").write_text("hello")  # unknown file kind
    (dump / "rank_0" / "Net" / "0" / "junk").mkdir()  # not an iteration dir
    (dump / "rank_0" / "execution_order" / "ms_global_execution_order_graph_0.csv").write_text(
        "0\n1\nfoo\n2\n"
    )
    (dump / "rank_0" / ".dump_metadata" / "config.json").write_text("{not json")
    order = dump / "rank_0" / "execution_order" / "ms_execution_order_graph_0.csv"
    kernels = order.read_text().splitlines()
    garbage = ["\x00\x01\x02junk", "just some words", "Conv2D-op\x07"]
    order.write_bytes("\n".join([*kernels[:3], *garbage, *kernels[3:]]).encode() + b"\n\xff\xfe-op1\n")

    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    errors = _errors(cat)
    rel = lambda p: str(p.relative_to(dump))  # noqa: E731
    assert errors[rel(victims[0])][0] == "npy_header" and "truncated" in errors[rel(victims[0])][1]
    assert "bad magic" in errors[rel(victims[1])][1]
    assert "truncated" in errors[rel(victims[2])][1]
    assert errors[f"{ITER0}/Conv2D.no-pattern.npy"][0] == "name"
    assert errors[f"{ITER0}/notes.txt"][0] == "walk"
    assert errors["rank_0/Net/0/junk"][0] == "walk"
    assert errors["rank_0/execution_order/ms_global_execution_order_graph_0.csv:3"][0] == "execution_order"
    assert errors["rank_0/.dump_metadata/config.json"][0] == "metadata"
    # Garbage lines in the execution order are error rows, never `ops` rows; the kernels after them
    # keep their positions (a line's number is its execution index).
    junk_lines = {n: errors[f"rank_0/execution_order/ms_execution_order_graph_0.csv:{n}"] for n in (4, 5, 6)}
    assert all(stage == "execution_order" for stage, _ in junk_lines.values()), junk_lines
    assert (
        "not UTF-8" in errors[f"rank_0/execution_order/ms_execution_order_graph_0.csv:{len(kernels) + 4}"][1]
    )
    ops = cat.sql("SELECT exec_index, op_name FROM ops WHERE graph_id = 0 ORDER BY exec_index").to_pylist()
    assert [o["op_name"] for o in ops] == kernels[1:]
    assert [o["exec_index"] for o in ops] == [*range(2), *range(5, 5 + len(kernels) - 3)]
    assert s.errors == len(errors) == 12
    # Everything else is cataloged.
    good = len(list(dump.rglob("*.npy"))) - 4
    assert s.tensors == good
    assert cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py() == good
    assert cat.sql("SELECT list(iteration ORDER BY seq) FROM graph_runs").column(0)[0].as_py() == [0, 1, 2]
    # Re-ingest records no error twice.
    s2 = cat.ingest(dump)
    assert s2.errors == 0 and s2.tensors == 0
    assert len(cat.sql("SELECT * FROM ingest_errors")) == 12


def test_garbled_statistic_csv_rows(tmp_path, copy_dump):
    dump = copy_dump("simple")
    it = dump / ITER0
    f = sorted(it.glob("Conv2D.*output.0*.npy"))[0]
    _, op, task, stream, ts, io, slot = f.name.split(".")[:7]
    header = (
        "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
        "Max Value,Min Value,L2Norm Value\n"
    )
    good = f'Conv2D,{op},{task},{stream},{ts},{io},{slot},32768,float32,"(4,8,16,16)",1.5,-2,3.25,\n'
    bad = "Conv2D,only,three\n"
    (it / "statistic.csv").write_text(header + good + bad)
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    errors = _errors(cat)
    assert (
        list(errors) == [f"{ITER0}/statistic.csv:3"]
        and errors[f"{ITER0}/statistic.csv:3"][0] == "statistic_csv"
    )
    assert s.stat_rows == 1
    row = cat.sql("SELECT * FROM stats WHERE stat_source = 'statistic.csv'").to_pylist()
    assert len(row) == 1 and row[0]["max"] == 1.5 and row[0]["l2norm"] == 3.25
    assert (
        row[0]["row_id"]
        == cat.sql(f"SELECT row_id FROM tensors WHERE file_name = '{f.name}'").column(0)[0].as_py()
    )


def test_unreadable_directory(copy_dump):
    """An unreadable iteration directory is one error row; the other iterations are cataloged.

    Root reads every directory, so under root (as in CI) the ingest runs in a child process that
    has dropped to the unprivileged user `nobody`.
    """
    work = Path(tempfile.mkdtemp(prefix="dumpcat-perm-"))
    try:
        work.chmod(0o777)
        dump = work / "dump"
        shutil.copytree(copy_dump("simple"), dump)
        for p in [dump, *dump.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (dump / "rank_0/Net/0/1").chmod(0)
        # Import everything first, then drop privileges (root's Python lives under /root).
        code = (
            "import os, sys; from ingest.pipeline import ingest_dump; "
            "import ingest.statistics.kernel, ingest.formats.mindspore.statistic_csv; "
            "import ingest.readers.registry; "
            "import pyarrow.parquet; "
            "import ingest.formats.mindspore.graph_pb, ingest.formats.ascend.dump_data_pb2; "
            "import google.protobuf.message; "
            "import duckdb, ingest.storage.sql_views, ingest.storage.flat; "
            "ingest.storage.sql_views.view_sql_files(); "
            "os.geteuid() == 0 and os.setuid(65534); "
            "s = ingest_dump(sys.argv[1], sys.argv[2]); print(s.tensors, s.errors)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(work / "cat"), str(dump)],
            capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        tensors, errors = map(int, out.stdout.split())
        assert errors == 1 and tensors == 162  # iterations 0 and 2 of 243 tensors in 3 iterations
        cat = Catalog.open(work / "cat")
        assert _errors(cat)["rank_0/Net/0/1"] == ("walk", "unreadable directory: Permission denied")
    finally:
        (work / "dump/rank_0/Net/0/1").chmod(0o755)
        shutil.rmtree(work)


def test_unreadable_file_as_root_too(tmp_path, copy_dump):
    """A tensor path that is a dangling symlink cannot be opened by anyone, root included."""
    dump = copy_dump("simple")
    os.symlink(dump / "does-not-exist", dump / ITER0 / "Add.Add-op1.0.0.5.output.0.DefaultFormat.npy")
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert _errors(cat)[f"{ITER0}/Add.Add-op1.0.0.5.output.0.DefaultFormat.npy"][0] == "npy_header"
    assert s.tensors == 243


def test_unusable_dump_root(tmp_path):
    with pytest.raises(DumpRootError, match="does not exist"):
        ingest_dump(tmp_path / "cat", tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpRootError, match="not a dump dumpcat can read") as caught:
        ingest_dump(tmp_path / "cat", tmp_path / "empty")
    for reader in all_readers():  # the message lists what every reader looked for
        assert f"{reader.name}: {reader.looked_for}" in str(caught.value)
    with pytest.raises(DumpRootError, match="unknown producer 'nope'; known producers: "):
        ingest_dump(tmp_path / "cat", tmp_path / "empty", producer="nope")
    assert not (tmp_path / "cat").exists()


def test_unusable_catalog(tmp_path, copy_dump):
    dump = copy_dump("simple")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CatalogError, match="not a directory"):
        ingest_dump(tmp_path / "file", dump)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("x")
    with pytest.raises(CatalogError, match="not a dumpcat catalog"):
        ingest_dump(tmp_path / "other", dump)
    with pytest.raises(CatalogError, match="not a dumpcat catalog"):
        Catalog.open(tmp_path / "missing")


def test_same_run_name_for_another_dump_is_refused(tmp_path, copy_dump):
    a = copy_dump("simple", "a")
    b = copy_dump("simple", "b")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(a, run="x")
    with pytest.raises(CatalogError, match="already holds dump"):
        cat.ingest(b, run="x")


def test_file_fixed_later_is_cataloged_and_its_error_hidden(tmp_path, copy_dump):
    dump = copy_dump("simple")
    victim = sorted((dump / ITER0).glob("*.npy"))[0]
    saved = victim.read_bytes()
    victim.write_bytes(saved[:50])
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    assert len(cat.sql("SELECT * FROM ingest_errors")) == 1
    victim.write_bytes(saved)
    s = cat.ingest(dump)
    assert s.tensors == 1
    assert len(cat.sql("SELECT * FROM ingest_errors")) == 0
    assert cat.sql("SELECT count(*) FROM tensors").column(0)[0].as_py() == 243


def test_constant_and_scalar_and_empty_tensors(tmp_path, copy_dump):
    dump = copy_dump("simple")
    const_dir = dump / "rank_0/Net/0/constants"
    const_dir.mkdir()
    np.save(
        const_dir / "Parameter.data-1.0.0.1795302018868000.output.0.DefaultFormat.Float32.npy",
        np.float32(2.5),
    )
    np.save(
        dump / ITER0 / "Reshape.Default_Reshape-op9.0.0.17.output.0.DefaultFormat.Float32.npy",
        np.zeros((0, 3), np.float32),
    )
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.errors == 0
    c = cat.sql("SELECT * FROM tensors WHERE dir_kind = 'constants'").to_pylist()
    assert len(c) == 1 and c[0]["iteration"] is None and c[0]["shape"] == [] and c[0]["op_name"] == "data-1"
    assert float(cat.tensor(c[0]["row_id"])) == 2.5
    e = cat.sql("SELECT s.count, s.max FROM stats s WHERE file_op_name = 'Default_Reshape-op9'").to_pylist()
    assert e == [{"count": 0, "max": None}]
    empty_id = cat.sql("SELECT row_id FROM tensors WHERE file_op_name = 'Default_Reshape-op9'").column(0)[0]
    assert cat.tensor(empty_id.as_py()).shape == (0, 3)
    shutil.rmtree(const_dir)


def test_kernel_args_files(tmp_path, copy_dump):
    """`{op_type}.{op_name}.json` as `E2eDump::DumpArgsSingleNode` writes it (json.dump(4) of strings);
    MindSpore 2.10 writes none on CPU, so the file is written here to the reference's format."""
    dump = copy_dump("simple")
    it = dump / ITER0
    name = "MatMul.Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0.json"
    (it / name).write_text('{\n    "transpose_a": "False",\n    "transpose_b": "True"\n}')
    (it / "Add.Default_Add-op0.json").write_text("[1, 2]")  # not an object
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    rows = cat.sql("SELECT op_type, file_op_name, arg_name, arg_value, iteration FROM kernel_args ORDER BY 3")
    op = "Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op0"
    assert rows.to_pylist() == [
        {
            "op_type": "MatMul",
            "file_op_name": op,
            "arg_name": "transpose_a",
            "arg_value": "False",
            "iteration": 0,
        },
        {
            "op_type": "MatMul",
            "file_op_name": op,
            "arg_name": "transpose_b",
            "arg_value": "True",
            "iteration": 0,
        },
    ]
    assert s.errors == 1 and _errors(cat)[f"{ITER0}/Add.Default_Add-op0.json"][0] == "kernel_args"
    assert cat.ingest(dump).errors == 0  # nothing recorded twice
    assert cat.sql("SELECT count(*) FROM kernel_args").column(0)[0].as_py() == 2


def test_big_endian_tensor_round_trips(tmp_path, copy_dump):
    dump = copy_dump("simple")
    name = "Abs.Default_Abs-op3.0.0.99.output.0.DefaultFormat.float32.npy"
    want = np.array([[1.5, -2.0], [np.nan, 4.0]], dtype=">f4")
    np.save(dump / ITER0 / name, want)
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    row = cat.sql(f"SELECT row_id, stored_dtype, dtype FROM tensors WHERE file_name = '{name}'").to_pylist()[
        0
    ]
    assert row["stored_dtype"] == ">f4" and row["dtype"] == "float32"
    np.testing.assert_array_equal(cat.tensor(row["row_id"]), want)
    stats = cat.sql(
        f"SELECT nan_count, neg_count, count FROM stats WHERE row_id = {row['row_id']}"
    ).to_pylist()
    assert stats == [{"nan_count": 1, "neg_count": 1, "count": 4}]


def test_names_that_are_not_utf8(tmp_path, copy_dump):
    """Linux names are bytes: one that is not UTF-8 is an error row (bad bytes escaped), never a
    traceback, and everything else is cataloged; such a dump root is refused with one line."""
    dump = copy_dump("simple")
    leaf = os.fsencode(dump / ITER0)
    victim = sorted(os.listdir(leaf))[5]
    os.rename(leaf + b"/" + victim, leaf + b"/Add.Add\xff-op1.0.0.5.output.0.DefaultFormat.npy")
    os.mkdir(os.fsencode(dump / "rank_0") + b"/Net\xfe")
    cat = Catalog.open(tmp_path / "cat", create=True)
    summary = cat.ingest(dump)
    assert summary.errors == 2 and summary.tensors == 242
    assert _errors(cat) == {
        f"{ITER0}/Add.Add\\xff-op1.0.0.5.output.0.DefaultFormat.npy": (
            "walk",
            "file name is not valid UTF-8; rename it to catalog it",
        ),
        "rank_0/Net\\xfe": ("walk", "file name is not valid UTF-8; rename it to catalog it"),
    }
    assert cat.ingest(dump).errors == 0  # recorded once
    bad_root = os.fsencode(tmp_path) + b"/dump\xff"
    shutil.copytree(dump, os.fsdecode(bad_root))
    with pytest.raises(DumpRootError, match=r"dump\\xff has a name that is not valid UTF-8"):
        ingest_dump(tmp_path / "cat2", os.fsdecode(bad_root))
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "ingest", bad_root, "--catalog", tmp_path / "cat3"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "not valid UTF-8" in out.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_tensor_whose_statistics_cannot_be_computed(tmp_path, copy_dump, workers):
    """A well-formed npy whose data cannot be read as numbers (pickled Python objects) is cataloged
    as a tensor, gets an ingest_errors row at the `tensor_stats` stage and no statistics; every
    other tensor of the batch gets its statistics."""
    dump = copy_dump("simple")
    victim = sorted((dump / ITER0).glob("*.output.0.DefaultFormat.Float32.npy"))[0]
    np.save(victim, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump, workers=workers)
    rel = str(victim.relative_to(dump))
    stage, reason = _errors(cat)[rel]
    assert stage == "tensor_stats" and "Python objects" in reason
    assert s.errors == 1 and s.tensors == 243 and s.computed_stats == 242
    q = "SELECT count(*) FILTER (WHERE rel_path = ?) AS victim, count(*) AS n FROM tensors"
    assert cat.sql(q, [rel]).to_pylist() == [{"victim": 1, "n": 243}]
    stats = cat.sql(
        "SELECT count(*) AS n, count(max) AS with_max FROM stats WHERE row_id IN "
        "(SELECT row_id FROM tensors WHERE rel_path = ?)",
        [rel],
    ).to_pylist()
    assert stats == [{"n": 0, "with_max": 0}]
    assert cat.sql("SELECT count(*) FROM stats").column(0)[0].as_py() == 242


def test_json_files_with_odd_values_or_deep_nesting(tmp_path, copy_dump):
    """JSON that parses but holds what no catalog column takes (a number where text is expected,
    a lone surrogate escape), and JSON nested too deep to parse: values are kept as text, the
    unparseable file is one error row, and nothing raises."""
    dump = copy_dump("simple")
    meta = dump / "rank_0" / ".dump_metadata"
    (meta / "config.json").write_text('{"device_target": "CPU\\ud800", "ms_version": 2.5}')
    (meta / "data_dump.json").write_text("[" * 100_000)
    (dump / ITER0 / "Add.Add-op1.json").write_text('{"\\udc00key": "v", "n": null, "shape": [2, 3]}')
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.errors == 1 and _errors(cat)["rank_0/.dump_metadata/data_dump.json"][0] == "metadata"
    meta_rows = cat.sql("SELECT device_target, ms_version FROM rank_metadata").to_pylist()
    assert meta_rows == [{"device_target": "CPU\ufffd", "ms_version": "2.5"}]
    args = cat.sql("SELECT arg_name, arg_value FROM kernel_args ORDER BY arg_name").to_pylist()
    assert args == [
        {"arg_name": "n", "arg_value": "null"},
        {"arg_name": "shape", "arg_value": "[2, 3]"},
        {"arg_name": "\ufffdkey", "arg_value": "v"},
    ]
