"""Ingest of a hostile dump, part two (issue 33 point 5): metadata files of any size.

Each test copies a real dump tree from tests/data, replaces one metadata file by an oversize
regular file (a sparse one, `truncate`d past the default cap of its kind: nothing is written, and
nothing may read it), ingests it through the real `Catalog` API (or a real `dumpcat ingest`), and
checks that the ingest ends normally with one `ingest_errors` row naming the file and the cap, and
that the rest of the tree is cataloged as in the clean copy. Then: a cap lowered through the
configuration, a statistic.csv with rows of 100 KB op names, a dump.json with one huge entry, and a
16 GiB sparse npy file whose statistics must not cost its apparent size.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.limits import DEFAULT_CAPS, ENV, MetadataCaps, format_size
from tests.conftest import DATA, REPO, dump_of

MSPROBE = DATA / "msprobe" / "pt_mix_tensor"
COUNTED = ("tensors", "stats", "ops", "ir_nodes", "source_lines", "rank_metadata", "kernel_args", "modules")


def _tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def _oversize(path: Path, size: int) -> None:
    """`path` replaced by a regular file of `size` bytes, sparse: no block is written."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def _counts(cat: Catalog) -> dict[str, int]:
    return {t: cat.sql(f"SELECT count(*) FROM {t}").column(0)[0].as_py() for t in COUNTED}


def _stats(cat: Catalog) -> list[dict]:
    """Every stats row (NaN as text: NaN equals nothing, not even itself)."""
    rows = cat.sql("SELECT * EXCLUDE (stat_id) FROM stats ORDER BY ALL").to_pylist()
    return [{k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


def _errors(cat: Catalog) -> list[dict]:
    return cat.sql("SELECT path, stage, reason, file_size FROM ingest_errors ORDER BY path").to_pylist()


def _ingest(tree: Path, cat_dir: Path, **options) -> tuple[Catalog, object]:
    cat = Catalog.open(cat_dir, create=True)
    return cat, cat.ingest(tree, run="r", **options)


@pytest.fixture(scope="module")
def clean_catalog(tmp_path_factory: pytest.TempPathFactory):
    """`clean_catalog(src, drop)`: an open catalog (run "r") of a clean copy of `src` less the files
    `drop`, made once per tree for the module: the reference of every case that alters that tree."""
    made: dict[tuple[Path, tuple[str, ...]], Catalog] = {}

    def of(src: Path, drop: tuple[str, ...] = ()) -> Catalog:
        if (src, drop) not in made:
            folder = tmp_path_factory.mktemp("clean")
            clean = _tree(src, folder / "dump")
            for name in drop:
                (clean / name).unlink()
            cat = Catalog.open(folder / "cat", create=True)
            cat.ingest(clean, run="r")
            made[src, drop] = cat
        return made[src, drop]

    yield of
    for cat in made.values():
        cat.close()


def _cap_row(errors: list[dict], rel: str, kind: str) -> dict:
    """The one error row of `rel`, which must name the cap of `kind` and how to raise it."""
    rows = [e for e in errors if e["path"] == rel]
    assert len(rows) == 1, errors
    reason = rows[0]["reason"]
    cap = format_size(DEFAULT_CAPS.of(kind))
    assert reason.startswith("too large: ") and f"over the {cap} cap on {kind}" in reason, reason
    assert "--max-metadata-size" in reason and ENV in reason
    return rows[0]


KERNEL_ARGS = "Conv2D.Default_network-WithLossCell__backbone-Net_conv-Conv2d_Conv2D-op0.json"
# (tree, file to replace, its cap's kind, the stage of its error row, counts it must change)
CASES = {
    "data_dump.json": ("simple", "rank_0/.dump_metadata/data_dump.json", "json", "metadata", {}),
    "config.json": ("simple", "rank_0/.dump_metadata/config.json", "json", "metadata", {}),
    # the graph comes from the .ir instead (one node more, the return value; frames of its own)
    "graph pb": ("simple", "rank_0/graphs/ms_output_trace_code_graph_0.pb", "graph", "graph",
                 {"ir_nodes~", "source_lines~"}),
    # (a clean .pb is read first and the .ir is not read at all: here there is no .pb)
    "graph ir": ("simple", "rank_0/graphs/ms_output_trace_code_graph_0.ir", "graph", "graph",
                 {"ir_nodes", "source_lines"}),
    "execution order": (
        "simple", "rank_0/execution_order/ms_execution_order_graph_0.csv", "csv", "execution_order", {"ops"},
    ),
    "global execution order": (
        "simple", "rank_0/execution_order/ms_global_execution_order_graph_0.csv", "csv", "execution_order",
        set(),
    ),
    # without its mapping.csv, a renamed `<digits>.npy` has no tensor name: those files only
    "mapping.csv": ("long_names", "rank_0/Net/0/0/mapping.csv", "csv", "mapping_csv", {"tensors", "stats"}),
    "kernel args": ("simple", f"rank_0/Net/0/0/{KERNEL_ARGS}", "json", "kernel_args", {}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_an_oversize_metadata_file_is_one_error_row_and_the_rest_is_cataloged(case, tmp_path, clean_catalog):
    scenario, rel, kind, stage, changed = CASES[case]
    drop = ("rank_0/graphs/ms_output_trace_code_graph_0.pb",) if case == "graph ir" else ()
    cat = clean_catalog(dump_of(scenario), drop)
    want, clean_errors = _counts(cat), _errors(cat)
    tree = _tree(dump_of(scenario), tmp_path / "dump")
    for name in drop:
        (tree / name).unlink()
    size = DEFAULT_CAPS.of(kind) + 1
    _oversize(tree / rel, size)
    started = time.perf_counter()
    cat, summary = _ingest(tree, tmp_path / "cat")
    assert time.perf_counter() - started < 60  # nothing read: a whole read of 512 MiB of zeros takes long
    errors = [e for e in _errors(cat) if e not in clean_errors]
    if case == "mapping.csv":  # the renamed files it names cannot be cataloged without it
        unnamed = [e for e in errors if e["path"] != rel]
        assert unnamed and all(e["stage"] == "name" for e in unnamed), unnamed
        errors = [e for e in errors if e["path"] == rel]
    row = _cap_row(errors, rel, kind)
    assert len(errors) == 1 and row["stage"] == stage and row["file_size"] == size
    got = _counts(cat)
    for table in COUNTED:
        if table in changed:
            assert got[table] < want[table], (table, got, want)
        elif f"{table}~" in changed:
            assert got[table] > 0, (table, got, want)
        elif case != "kernel args" or table != "kernel_args":
            assert got[table] == want[table], (table, got, want)
    assert got["tensors"] > 0 and summary.tensors == got["tensors"]
    # once is enough: a re-ingest reads nothing again and records no second row
    again = cat.ingest(tree, run="r")
    assert again.errors == 0 and len([e for e in _errors(cat) if e["path"] == rel]) == 1


def test_both_graph_files_oversize_lose_only_the_graph(tmp_path):
    tree = _tree(dump_of("simple"), tmp_path / "dump")
    graphs = tree / "rank_0/graphs"
    for name in ("ms_output_trace_code_graph_0.pb", "ms_output_trace_code_graph_0.ir"):
        _oversize(graphs / name, DEFAULT_CAPS.graph + 1)
    cat, _ = _ingest(tree, tmp_path / "cat")
    errors = _errors(cat)
    for name in ("pb", "ir"):
        _cap_row(errors, f"rank_0/graphs/ms_output_trace_code_graph_0.{name}", "graph")
    counts = _counts(cat)
    assert counts["ir_nodes"] == 0 and counts["tensors"] > 0 and counts["ops"] > 0


# (file, its cap's kind, its error's stage, a count that only it gives: 0 without it)
MSPROBE_CASES = {
    "stack.json": ("step1/rank0/stack.json", "stack", "stack_json", None),  # step 2 has the same stacks
    "construct.json": (
        "step1/rank0/construct.json", "json", "construct_json",
        "SELECT count(*) FROM modules WHERE iteration = 1",
    ),
    # zeros are not msprobe's layout, so they would be read whole: the dump_json cap
    "dump.json": (
        "step1/rank0/dump.json", "dump_json", "dump_json",
        "SELECT count(*) FROM stats WHERE iteration = 1 AND stat_source = 'dump.json'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MSPROBE_CASES))
def test_oversize_msprobe_json_files(case, tmp_path, clean_catalog):
    rel, kind, stage, only = MSPROBE_CASES[case]
    cat = clean_catalog(MSPROBE)
    want = _counts(cat)
    assert only is None or cat.sql(only).column(0)[0].as_py() > 0
    tree = _tree(MSPROBE, tmp_path / "dump")
    _oversize(tree / rel, DEFAULT_CAPS.of(kind) + 1)
    cat, _ = _ingest(tree, tmp_path / "cat")
    errors = _errors(cat)
    assert _cap_row(errors, rel, kind)["stage"] == stage and len(errors) == 1, errors
    assert only is None or cat.sql(only).column(0)[0].as_py() == 0
    got = _counts(cat)
    for table in COUNTED:  # the tensor files are all cataloged (stats: their computed statistics)
        if table not in ("modules", "stats", "source_lines"):
            assert got[table] == want[table], (table, got, want)
    assert got["tensors"] > 0


def test_ge_graph_and_cann_stats_csv_over_their_caps(tmp_path):
    tree = _tree(DATA / "ge" / "torchair", tmp_path / "torchair")
    graph = "dynamo_original_graph_1_rank_0_pid_4242_ts_20250314101500000000.txt"
    _oversize(tree / graph, DEFAULT_CAPS.graph + 1)
    cat, summary = _ingest(tree, tmp_path / "cat")
    errors = _errors(cat)
    assert _cap_row(errors, graph, "graph")["stage"] == "ge_graph" and len(errors) == 1
    assert summary.tensors > 0 and cat.sql("SELECT count(*) FROM fx_links").column(0)[0].as_py() == 0

    stats = _tree(DATA / "ge" / "ge_stats", tmp_path / "ge_stats")
    clean = Catalog.open(tmp_path / "clean.cat", create=True)
    clean.ingest(DATA / "ge" / "ge_stats", run="r")
    want = clean.sql("SELECT count(*) FROM stats").column(0)[0].as_py()
    victim = sorted(stats.rglob("*.csv"))[0]
    _oversize(victim, DEFAULT_CAPS.csv + 1)
    cat2, _ = _ingest(stats, tmp_path / "cat2")
    errors = _errors(cat2)
    rel = victim.relative_to(stats).as_posix()
    assert _cap_row(errors, rel, "csv")["stage"] == "cann_stats_csv" and len(errors) == 1
    got = cat2.sql("SELECT count(*) FROM stats").column(0)[0].as_py()
    assert 0 < got < want


def test_a_cap_lowered_through_the_api_applies_to_small_files(tmp_path):
    """`max_metadata_size` sets the caps: a real 500-byte data_dump.json over `json=100` is an error
    row; config.json (45 bytes) is still read, and so is everything else."""
    tree = _tree(dump_of("simple"), tmp_path / "dump")
    cat, _ = _ingest(tree, tmp_path / "cat", max_metadata_size="json=100")
    errors = _errors(cat)
    row = next(e for e in errors if e["path"] == "rank_0/.dump_metadata/data_dump.json")
    assert "over the 100 B cap on json" in row["reason"] and len(errors) == 1, errors
    meta = cat.sql("SELECT device_target, dump_config FROM rank_metadata").to_pylist()
    assert meta[0]["device_target"] == "CPU" and meta[0]["dump_config"] is None
    with pytest.raises(ValueError, match="KIND=SIZE"):
        cat.ingest(tree, run="r", max_metadata_size="jsn=1MiB")


def test_the_cap_through_a_real_dumpcat_ingest_and_its_environment(tmp_path):
    tree = _tree(dump_of("simple"), tmp_path / "dump")
    _oversize(tree / "rank_0/graphs/ms_output_trace_code_graph_0.pb", 2 << 20)
    cmd = [
        sys.executable,
        "-m",
        "catalog.cli.commands",
        "ingest",
        str(tree),
        "-c",
        str(tmp_path / "cat"),
        "--run",
        "r",
    ]
    out = subprocess.run(
        [*cmd, "--max-metadata-size", "graph=1MiB"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "1 errors" in out.stdout
    with Catalog.open(tmp_path / "cat") as cat:
        row = _errors(cat)[0]
    assert row["path"].endswith(".pb") and "over the 1 MiB cap on graph" in row["reason"]
    bad = subprocess.run(
        [*cmd, "--max-metadata-size", "lots"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert bad.returncode == 2 and "cannot read 'lots'" in bad.stderr
    env = subprocess.run(
        [*cmd[:-4], "-c", str(tmp_path / "cat_env"), "--run", "r"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env={**os.environ, ENV: "1MiB"},
    )  # fmt: skip
    assert env.returncode == 0, env.stderr
    with Catalog.open(tmp_path / "cat_env") as cat:
        assert [e["path"] for e in _errors(cat)] == ["rank_0/graphs/ms_output_trace_code_graph_0.pb"]


def test_caps_parse(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert MetadataCaps.parse(None) == DEFAULT_CAPS
    monkeypatch.setenv(ENV, "csv=1KiB")
    assert MetadataCaps.parse(None).csv == 1024 and MetadataCaps.parse("2KiB").csv == 2048
    every = MetadataCaps.parse("1GiB")
    assert every.json == every.graph == every.stack == 1 << 30
    some = MetadataCaps.parse("graph=2GB, json=128MiB")
    assert some.graph == 2 * 10**9 and some.json == 128 << 20 and some.csv == DEFAULT_CAPS.csv
    for bad in ("", "0", "-1MiB", "big", "json:1MiB", "yaml=1MiB"):
        with pytest.raises(ValueError):
            MetadataCaps.parse(bad)


# -- statistic.csv: a huge field is a row's error, not an allocation --------------------------------

STAT_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
    "L2Norm Value\n"
)


def test_statistic_csv_rows_with_100_kb_op_names_are_error_rows(tmp_path):
    """The issue's file, scaled down: rows whose op names are 10^5 characters. Each is an error
    row with its line number; the real rows around them are cataloged and matched."""
    from ingest.formats.mindspore.statistic_csv import MAX_FIELD_BYTES

    tree = _tree(dump_of("simple"), tmp_path / "dump")
    leaf = tree / "rank_0/Net/0/0"
    good = []
    for f in sorted(leaf.glob("*.output.0.*.Float32.npy"))[:2]:
        op_type, op, task, stream, ts, io, slot = f.name.split(".")[:7]
        a = np.load(f, mmap_mode="r")
        shape = '"(' + ",".join(map(str, a.shape)) + ')"'
        good.append(
            f"{op_type},{op},{task},{stream},{ts},{io},{slot},{a.nbytes},float32,{shape},1.5,-2,3.25,\n"
        )
    huge = [
        f'Conv2D,Default/{"x" * 100_000}-op{i},{i},0,1795302018857953,output,0,4,float32,"(1,)",1,1,1,\n'
        for i in range(200)
    ]
    (leaf / "statistic.csv").write_text(STAT_HEADER + good[0] + "".join(huge) + good[1])
    cat, summary = _ingest(tree, tmp_path / "cat")
    errors = _errors(cat)
    assert [e["path"] for e in errors] == sorted(f"rank_0/Net/0/0/statistic.csv:{n}" for n in range(3, 203))
    assert all(
        f"over the {MAX_FIELD_BYTES:,}-byte cap" in e["reason"] and "'Op Name' is 100," in e["reason"]
        for e in errors
    )
    assert summary.stat_rows == 2
    rows = cat.sql("SELECT row_id, max FROM stats WHERE stat_source = 'statistic.csv'").to_pylist()
    assert len(rows) == 2 and all(r["row_id"] is not None and r["max"] == 1.5 for r in rows)


# -- msprobe dump.json: streamed, and one huge entry is skipped -------------------------------------


def test_dump_json_is_streamed_and_an_entry_over_the_cap_is_one_problem(tmp_path, monkeypatch, clean_catalog):
    """A dump.json is read in pieces (here 4 KiB, so the real file takes many); an entry over the
    json cap (lowered to 2 KiB) is one error row naming it and the cap, and every other entry is
    cataloged as from the clean file."""
    from ingest.formats.msprobe import dump_json as msprobe_json

    want = _stats(clean_catalog(MSPROBE))  # (read whole: the module's clean catalog)
    monkeypatch.setattr(msprobe_json, "_STREAM_BYTES", 4096)
    tree = _tree(MSPROBE, tmp_path / "dump")
    path = tree / "step1/rank0/dump.json"
    text = path.read_text()
    key = '  "Torch.log.0.forward": {'
    assert key in text
    cat, _ = _ingest(tree, tmp_path / "cat")  # streamed: the same rows as a whole read
    assert _stats(cat) == want
    padded = text.replace(key, key + '\n   "padding": "' + "p" * 10_000 + '",', 1)
    path.write_text(padded)
    cat, _ = _ingest(tree, tmp_path / "cat2", max_metadata_size="json=2KiB")
    errors = _errors(cat)
    assert len(errors) == 1 and errors[0]["path"] == "step1/rank0/dump.json", errors
    assert "'Torch.log.0.forward' is more than 2,048 bytes, over the json cap" in errors[0]["reason"]
    got = _stats(cat)
    from_json = [r for r in want if r["stat_source"] == "dump.json"]
    lost = [r for r in from_json if r["file_op_name"] == "Torch.log.0.forward" and r["iteration"] == 1]
    kept = [r for r in got if r["stat_source"] == "dump.json"]
    assert lost and len(kept) == len(from_json) - len(lost)


# -- a sparse tensor file costs its real size, not its apparent one ---------------------------------


def test_a_sparse_16_gib_npy_gets_no_statistics_and_costs_nothing(tmp_path):
    tree = _tree(dump_of("simple"), tmp_path / "dump")
    leaf = tree / "rank_0/Net/0/0"
    name = "Conv2D.Default_network-WithLossCell__backbone-Net_conv-Conv2d_Conv2D-op0.0.0.1795302018857953.output.9.DefaultFormat.Float32.npy"  # noqa: E501
    shape = (1 << 12, 1 << 20)  # 16 GiB of float32
    with open(leaf / name, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        f.truncate(f.tell() + 4 * shape[0] * shape[1])  # all holes
    started = time.perf_counter()
    cat, summary = _ingest(tree, tmp_path / "cat")
    assert time.perf_counter() - started < 60  # reading 16 GiB of holes takes minutes
    rel = f"rank_0/Net/0/0/{name}"
    row = cat.sql(f"SELECT shape, file_size FROM tensors WHERE rel_path = '{rel}'").to_pylist()
    assert row and row[0]["shape"] == list(shape) and row[0]["file_size"] > 16 << 30
    errors = _errors(cat)
    assert len(errors) == 1 and errors[0]["path"] == rel and errors[0]["stage"] == "tensor_stats"
    assert errors[0]["reason"].startswith("sparse: ") and "holes" in errors[0]["reason"]
    # the other tensors have their statistics, the sparse one is still readable
    assert summary.computed_stats == summary.tensors - 1
