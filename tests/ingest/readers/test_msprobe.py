"""msprobe dumps through the whole pipeline: the real trees msprobe 26.2 wrote from a PyTorch run
(tests/data/msprobe, made by tests/writers/msprobe_dumps.py), the old stack.json form and
ptdbg_ascend's .pkl lines made from them, and bad input."""

from __future__ import annotations

import io
import json
import math
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from catalog import Catalog
from ingest.formats.msprobe.dump_json import parse_dump_json, parse_stack_json, split_data_name
from ingest.pipeline import detect_dump
from tests.conftest import DATA as TEST_DATA

DATA = TEST_DATA / "msprobe"
TREES = ("pt_mix_tensor", "pt_L0_statistics", "pt_l1_statistics_2ranks", "pt_md5", "pt_pkl_legacy")
SQRT_LINE = "root = torch.sqrt(h + offset)  # NaN where h + offset < 0"


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    c = Catalog.open(tmp_path_factory.mktemp("cat"), create=True)
    for tree in (*TREES, "pt_mix_tensor_oldstack"):
        s = c.ingest(DATA / tree, run=tree)
        assert s.producer == "msprobe" and s.errors == 0, (tree, s)
    return c


def _rows(cat: Catalog, sql: str, **params) -> list[dict]:
    return cat.sql(sql, params).to_pylist() if params else cat.sql(sql).to_pylist()


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("where", ["", "/step1", "/step1/rank0"])
def test_detects_a_dump_path_a_step_and_a_rank_folder(where):
    d = detect_dump(Path(str(DATA / "pt_mix_tensor") + where))
    assert d.reader.name == "msprobe"
    assert "dump.json" in d.description or "rank0" in d.description


def test_every_dump_json_tensor_is_one_stat_row_with_its_values(cat):
    for tree in ("pt_mix_tensor", "pt_md5", "pt_l1_statistics_2ranks"):
        for path in sorted((DATA / tree).glob("step*/rank*/dump.json")):
            step, rank = int(path.parts[-3][4:]), int(path.parts[-2][4:])
            dump = parse_dump_json(path.read_bytes())
            expected = [(e.key, leaf) for e, leaves in dump.entries for leaf in leaves]
            got = _rows(
                cat,
                "SELECT op_name, arg_path, io, max, min, avg, l2norm, md5, producer_dtype, shape, "
                "stat_semantics, stat_source, exec_index FROM stats "
                "WHERE run = $run AND rank = $rank AND iteration = $step "
                "ORDER BY stat_id IS NULL, exec_index, io, arg_path",
                run=tree, rank=rank, step=step,
            )  # fmt: skip
            assert len(got) == len(expected) > 20
            by_key = {(r["op_name"], r["arg_path"]): r for r in got}
            for key, leaf in expected:
                row = by_key[(key, leaf.arg_path)]
                assert (row["io"], row["producer_dtype"], row["shape"]) == (leaf.io, leaf.dtype, leaf.shape)
                for column, value in (
                    ("max", leaf.max),
                    ("min", leaf.min),
                    ("avg", leaf.mean),
                    ("l2norm", leaf.norm),
                ):
                    assert _same(row[column], value), (key, leaf.arg_path, column)
                assert row["md5"] == leaf.md5
                assert (row["stat_semantics"], row["stat_source"]) == ("msprobe", "dump.json")
    md5 = _rows(cat, "SELECT count(*) AS n FROM stats WHERE run = 'pt_md5' AND md5 IS NOT NULL")[0]["n"]
    assert md5 > 200  # CRC32 hex in summary_mode md5


def test_arguments_are_named_as_msprobe_names_their_files(cat):
    rows = _rows(
        cat,
        "SELECT op_name, arg_path, io, slot FROM stats WHERE run = 'pt_mix_tensor' AND iteration = 0 "
        "AND op_name IN ('Torch.cat.0.forward', 'Functional.mse_loss.0.forward', "
        "'Functional.linear.0.backward', 'Module.enc.0.Linear.forward.0', "
        "'Module.enc.0.Linear.parameters_grad.0')",
    )  # fmt: skip
    got = {(r["op_name"], r["arg_path"]): (r["io"], r["slot"]) for r in rows}
    assert got[("Torch.cat.0.forward", "input.0.1")] == ("input", 0)  # a list argument's second tensor
    assert got[("Functional.mse_loss.0.forward", "kwargs.target")][0] == "input"
    assert got[("Functional.linear.0.backward", "output.2")] == ("output", 2)  # output.1 is None
    assert ("Functional.linear.0.backward", "output.1") not in got
    assert got[("Module.enc.0.Linear.forward.0", "parameters.weight")][0] == "parameter"
    assert got[("Module.enc.0.Linear.parameters_grad.0", "parameters_grad.weight")][0] == "parameter_grad"
    files = {p.name for p in (DATA / "pt_mix_tensor/step0/rank0/dump_tensor_data").iterdir()}
    for op, arg in got:
        suffix = arg.removeprefix("parameters_grad.") if "parameters_grad" in op else arg
        assert f"{op}.{suffix}.pt" in files, (op, arg)


def test_pt_tensors_come_back_as_the_values_msprobe_summarised(cat):
    rows = _rows(
        cat,
        "SELECT s.row_id, s.max, s.min, s.avg, s.l2norm, s.nan_count, s.count, t.stored_dtype, t.shape "
        "FROM stats s JOIN tensors t USING (row_id) WHERE s.run = 'pt_mix_tensor'",
    )
    assert len(rows) == 294
    nan_tensors = 0
    for r in rows:
        arr = cat.tensor(r["row_id"])
        assert isinstance(arr, np.ndarray) and list(arr.shape) == r["shape"]
        x = arr.astype(np.float64)
        assert r["count"] == x.size and r["nan_count"] == int(np.isnan(x).sum())
        if x.size == 0:
            continue
        if np.isnan(x).any():  # msprobe's Max/Min/Mean/Norm let NaN through
            nan_tensors += 1
            assert math.isnan(r["max"]) and math.isnan(r["min"])
            continue
        assert r["max"] == float(arr.max()) and r["min"] == float(arr.min())
        assert r["avg"] == pytest.approx(float(x.mean()), rel=1e-5, abs=1e-6)
        assert r["l2norm"] == pytest.approx(float(np.sqrt((x * x).sum())), rel=1e-5, abs=1e-6)
    assert nan_tensors > 10


def test_nan_query_and_first_anomaly_on_every_tree(cat):
    nan_ops = {r["op_name"] for r in _rows(cat, "SELECT op_name FROM stats WHERE nan_count > 0")}
    assert "Torch.sqrt.0.forward" in nan_ops  # counts computed from the saved tensors
    first = {
        (r["run"], r["rank"], r["iteration"]): r
        for r in _rows(cat, "SELECT * FROM first_anomaly")
    }  # fmt: skip
    for tree in ("pt_mix_tensor", "pt_md5", "pt_pkl_legacy"):
        assert (tree, 0, 0) not in first  # step 0 is clean
        f = first[(tree, 0, 1)]
        assert (f["op_name"], f["io"], f["source_code"]) == ("Torch.sqrt.0.forward", "output", SQRT_LINE)
        assert f["source_file"] == "/home/user/msprobe_demo/msprobe_dumps.py"
    assert first[("pt_mix_tensor", 0, 1)]["nan_count"] == 11  # 11 of 24 elements
    two = "pt_l1_statistics_2ranks"
    assert first[(two, 1, 1)]["op_name"] == "Torch.sqrt.0.forward"
    assert first[(two, 0, 1)]["op_name"] == "Distributed.all_reduce.0.forward"  # rank 0 got it from rank 1
    # L0 dumps modules only: at step 1 the NaN first shows as a gradient entering the encoder
    assert (first[("pt_L0_statistics", 0, 1)]["op_name"], first[("pt_L0_statistics", 0, 1)]["io"]) == (
        "Module.enc.Sequential.backward.0",
        "input",
    )
    assert not any(k[0] == "pt_mix_tensor_oldstack" for k in first)  # only step 0 was copied


def test_old_and_new_stack_json_give_the_same_source_lines(cat):
    query = (
        "SELECT full_name, depth, file, line, code, is_user_code FROM source_lines "
        "WHERE run = $run ORDER BY ALL"
    )
    old = _rows(cat, query, run="pt_mix_tensor_oldstack")
    new = _rows(cat, query, run="pt_mix_tensor")
    assert old == new and len(old) > 100
    stacks = parse_stack_json((DATA / "pt_mix_tensor/step0/rank0/stack.json").read_bytes())
    assert {r["full_name"] for r in new} == set(stacks)
    torch_frames = [r for r in new if "/site-packages/torch/" in r["file"]]
    assert torch_frames and not any(r["is_user_code"] for r in torch_frames)


def test_construct_json_is_the_module_tree(cat):
    rows = _rows(cat, "SELECT node, parent, depth FROM modules WHERE run = 'pt_mix_tensor' AND iteration = 0")
    tree = {r["node"]: (r["parent"], r["depth"]) for r in rows}
    assert tree["Module.enc.Sequential.forward.0"] == (None, 0)
    assert tree["Module.enc.0.Linear.forward.0"] == ("Module.enc.Sequential.forward.0", 1)
    assert tree["Functional.linear.0.forward"] == ("Module.enc.0.Linear.forward.0", 2)
    assert tree["Tensor.add_.0.forward"] == ("optimizer", 1)


def test_reingest_adds_nothing(cat):
    s = cat.ingest(DATA / "pt_mix_tensor", run="pt_mix_tensor")
    assert (s.tensors, s.stat_rows, s.computed_stats, s.errors) == (0, 0, 0, 0)


def _evil_pt(marker: Path) -> bytes:
    """A torch.save-shaped zip whose pickle calls os.system (GLOBAL + REDUCE)."""
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def test_bad_input_is_error_rows_and_the_rest_is_cataloged(tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(DATA / "pt_mix_tensor", dump)
    (dump / "step0/rank0/dump.json").write_text('{"task": "tensor", "data": {"Torch.log.0.forward": ')
    nested = {"task": "statistics", "data": {"Torch.deep.0.forward": {"input_args": [[[[[[[[[[]]]]]]]]]]}}}
    deep: list = []
    for _ in range(40):
        deep = [deep]
    nested["data"]["Torch.deep.0.forward"]["input_args"] = deep
    nested["data"]["Torch.ok.0.forward"] = json.loads((DATA / "pt_md5/step0/rank0/dump.json").read_text())[
        "data"
    ]["Functional.linear.0.forward"]
    (dump / "step2/rank0/dump.json").write_text(json.dumps(nested))
    marker = tmp_path / "pwned"
    data_dir = dump / "step1/rank0/dump_tensor_data"
    (data_dir / "Torch.sqrt.0.forward.output.0.pt").write_bytes(_evil_pt(marker))
    (dump / "step1/rank0/stack.json").write_text("[not json")
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert not marker.exists()  # the pickle was never run
    errors = {r["path"]: r["reason"] for r in _rows(cat, "SELECT path, reason FROM ingest_errors")}
    assert "not JSON" in errors["step0/rank0/dump.json"]
    assert "nests more than" in errors["step2/rank0/dump.json"]
    assert "os.system" in errors["step1/rank0/dump_tensor_data/Torch.sqrt.0.forward.output.0.pt"]
    assert "not JSON" in errors["step1/rank0/stack.json"]
    assert s.errors == 4
    # step 0's tensor files are still cataloged, from their names; step 1's stats and other files too
    by_step = {
        r["iteration"]: r for r in _rows(cat, "SELECT iteration, count(*) AS n FROM tensors GROUP BY 1")
    }
    assert by_step[0]["n"] == len(list((dump / "step0/rank0/dump_tensor_data").iterdir()))
    assert by_step[1]["n"] == len(list(data_dir.iterdir())) - 1
    step2 = _rows(cat, "SELECT op_name FROM stats WHERE iteration = 2 AND stat_source = 'dump.json'")
    assert {r["op_name"] for r in step2} == {"Torch.ok.0.forward"}
    orphan = _rows(
        cat,
        "SELECT t.op_name, t.io, s.arg_path FROM tensors t JOIN stats s USING (row_id) "
        "WHERE t.iteration = 0 AND t.file_name = 'Functional.mse_loss.0.forward.kwargs.target.pt'",
    )
    assert orphan == [{"op_name": "Functional.mse_loss.0.forward", "io": "input", "arg_path": None}]


def test_proc_folders_are_numbered_after_the_real_ranks(tmp_path):
    dump = tmp_path / "dump"
    src = DATA / "pt_l1_statistics_2ranks/step0"
    for name in ("rank0", "rank1"):
        shutil.copytree(src / name, dump / "step0" / name)
    shutil.copytree(src / "rank1", dump / "step0" / "proc4242")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump)
    ranks = _rows(cat, "SELECT DISTINCT rank FROM stats ORDER BY rank")
    assert [r["rank"] for r in ranks] == [0, 1, 2]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Torch.log.0.forward.output.0.pt", ("Torch.log.0.forward", "output.0")),
        ("Torch.cat.0.forward.input.0.1.pt", ("Torch.cat.0.forward", "input.0.1")),
        (
            "Functional.mse_loss.0.forward.kwargs.target.pt",
            ("Functional.mse_loss.0.forward", "kwargs.target"),
        ),
        (
            "Module.enc.0.Linear.forward.0.parameters.bias.pt",
            ("Module.enc.0.Linear.forward.0", "parameters.bias"),
        ),
        (
            "Module.enc.0.Linear.parameters_grad.0.weight.pt",
            ("Module.enc.0.Linear.parameters_grad.0", "parameters_grad.weight"),
        ),
        ("Cell.net.Dense.backward.1.input.0.npy", ("Cell.net.Dense.backward.1", "input.0")),
        ("notes.txt.pt", None),
    ],
)
def test_tensor_file_names(name, expected):
    assert split_data_name(name) == expected


def test_saved_transposes_and_views_come_back_right(tmp_path):
    """msprobe saves whatever tensor the API returned: a transpose (column-major strides) is served
    through its layout, a view of a bigger storage from its offset; both equal what torch saved."""
    torch_pt = TEST_DATA / "torch_pt"
    dump = tmp_path / "dump"
    shutil.copytree(DATA / "pt_mix_tensor" / "step0", dump / "step0")
    data_dir = dump / "step0/rank0/dump_tensor_data"
    shutil.copy(torch_pt / "transpose.pt", data_dir / "Torch.t.0.forward.output.0.pt")
    shutil.copy(torch_pt / "slice_offset.pt", data_dir / "Tensor.__getitem__.0.forward.output.0.pt")
    cat = Catalog.open(tmp_path / "cat", create=True)
    s = cat.ingest(dump)
    assert s.errors == 1  # slice_offset's strides are neither row- nor column-major
    (row,) = _rows(cat, "SELECT row_id, format FROM tensors WHERE op_name = 'Torch.t.0.forward'")
    assert row["format"] == "fortran_order"
    want = np.load(torch_pt / "transpose.npy")
    got = cat.tensor(row["row_id"])
    assert got.shape == want.shape and np.array_equal(got, want)
    stats = _rows(cat, "SELECT count, max FROM stats WHERE row_id = $r", r=row["row_id"])
    assert stats == [{"count": want.size, "max": float(want.max())}]


def _pylist(table) -> list[dict]:
    """Rows with NaN spelled 'nan' (NaN equals nothing)."""
    return [
        {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in table.to_pylist()
    ]


def test_a_big_dump_json_split_across_processes_gives_the_same_catalog(tmp_path, monkeypatch):
    """A big dump.json is cut at entry boundaries and half of it parsed in a helper process: every
    row is what parsing it whole gives. (The size threshold is lowered so the real trees take that
    path.)"""
    from ingest.formats.msprobe.dump_json import join_parts, parse_dump_part, split_dump_json
    from ingest.readers import msprobe
    from tests.compare import catalog_content

    for path in sorted(DATA.glob("pt_*/step1/rank*/dump.json")):
        data = path.read_bytes()
        whole = parse_dump_json(data)
        for parts in (2, 3, 7):
            header, ranges = split_dump_json(data, parts)
            got = join_parts(header, [parse_dump_part(data[a:b]) for a, b in ranges])
            assert _pylist(got.table) == _pylist(whole.table) and got.keys == whole.keys, (path, parts)
            assert (got.task, got.level, got.framework) == (whole.task, whole.level, whole.framework)
    assert split_dump_json(json.dumps({"data": {"a": {}}}).encode(), 2) is None  # not msprobe's layout
    queries = (
        "SELECT * EXCLUDE (stat_id) FROM stats ORDER BY run, rank, iteration, exec_index, arg_path",
        "SELECT * FROM source_lines ORDER BY ALL",
        "SELECT * FROM modules ORDER BY ALL",
    )
    monkeypatch.setattr(msprobe, "_SPLIT_BYTES", 0)
    results = []
    for workers in (1, 2):
        cat = Catalog.open(tmp_path / f"cat{workers}", create=True)
        for tree in ("pt_mix_tensor", "pt_l1_statistics_2ranks"):
            cat.ingest(DATA / tree, run=tree, workers=workers)
        results.append(catalog_content(cat, queries))
    assert results[0] == results[1] and len(results[0][0]) > 500
