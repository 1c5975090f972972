"""The Python API in a notebook (issue 36, part 2): query answers are `Result`s (the Arrow table,
with `.df()`, `.pl()`, `.fetchall()` and an HTML view), `Catalog.runs()` and the catalog's own HTML
view, `Catalog.tensors(ids)` in one call, local DataFrames in a guarded query (`frames=`),
`where(code=)` by a fragment of the line, and PIVOT without an IN list refused with its reason.
Everything runs on real dumps committed under tests/data, with real pandas, polars and DuckDB."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from catalog import Catalog, QueryRefused, Result, TensorNotFoundError
from tests.conftest import DATA, REPO, as_written_before_flat_files

# One run of each producer whose tensors `tensor()` reads (npy with bfloat16/int4 stored types, a
# raw Ascend dump with device layouts, msprobe, MindSpore .bin), a run with a commented source line,
# and a statistics-only run.
RUNS = {
    "nan_log": DATA / "ms210/nan_log/dump",
    "lowp": DATA / "ms210/lowp/dump",
    "raw": DATA / "ascend_raw/nan_log_rank",
    "probe": DATA / "msprobe/pt_mix_tensor",
    "bin": DATA / "mindspore_bin/kernels_filter_device",
    "cast": DATA / "ms210/compare/cast/dump",
    "stats_only": DATA / "msprobe/pt_L0_statistics",
}


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Catalog:
    path = tmp_path_factory.mktemp("notebook") / "c<&>.cat"  # a path HTML must escape
    c = Catalog.open(path, create=True)
    for run, dump in RUNS.items():
        c.ingest(dump, run=run)
    yield c
    c.close()


# -- Result ----------------------------------------------------------------------------------


def test_result_is_the_arrow_table_for_code_written_for_one(cat):
    r = cat.sql("SELECT run, count(*) AS n FROM tensors GROUP BY run ORDER BY run")
    assert isinstance(r, Result)
    table = r.arrow()
    assert type(table) is pa.Table
    # what code written against a pyarrow.Table calls
    assert r.num_rows == len(r) == 6 and r.num_columns == 2
    assert r.schema == table.schema and r.column_names == ["run", "n"]
    assert r.column("run").to_pylist() == ["bin", "cast", "lowp", "nan_log", "probe", "raw"]
    assert r["n"].to_pylist() == table.column(1).to_pylist()
    assert r.to_pylist()[0] == {"run": "bin", "n": 24}
    assert r.to_pydict() == table.to_pydict()
    assert r == table and table == r and r == Result(table) and r != table.slice(1)
    assert pd.testing.assert_frame_equal(r.to_pandas(), table.to_pandas()) is None
    # rows, as a DB-API cursor gives them
    assert r.fetchall() == list(r) == list(zip(*table.to_pydict().values(), strict=True))
    assert r.fetchall()[0] == ("bin", 24)
    # the other table-returning methods
    for other in (
        cat.where(file="train.py", line=16),
        cat.anomalies(),
        cat.anomalies(by_graph=True),
        cat.runs(),
    ):
        assert isinstance(other, Result) and other.num_rows > 0


def test_result_converts_to_pandas_polars_and_is_read_without_copies(cat):
    r = cat.sql("SELECT row_id, op_name, nan_count, shape FROM stats WHERE run = 'nan_log' ORDER BY row_id")
    df = r.df()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == ["row_id", "op_name", "nan_count", "shape"]
    assert df["row_id"].tolist() == r.column("row_id").to_pylist() and len(df) == 180
    frame = r.pl()
    assert isinstance(frame, pl.DataFrame) and frame.equals(pl.from_arrow(r.arrow()))
    # the Arrow C stream: pyarrow, polars and DuckDB read the Result itself, sharing its buffers
    again = pa.table(r)
    assert again == r.arrow()
    address = r.arrow().column("row_id").chunk(0).buffers()[1].address
    assert again.column("row_id").chunk(0).buffers()[1].address == address
    assert pl.DataFrame(r).equals(frame)
    con = duckdb.connect()
    total = sum(r.column("nan_count").to_pylist())
    assert total > 0 and con.execute("SELECT count(*), sum(nan_count) FROM r").fetchone() == (180, total)


def test_result_repr_and_html_are_bounded_and_escaped(cat):
    r = cat.sql("SELECT i, '<b>' || i || '&' AS tag FROM range(100) t(i)")
    page = r._repr_html_()
    assert page.count("<tr>") == 1 + 20  # the header and the first 20 rows
    assert "&lt;b&gt;0&amp;" in page and "<b>0" not in page
    assert "100 rows × 2 columns, first 20 shown" in page
    text = repr(r)
    assert text.startswith("Result: 100 rows × 2 columns\n") and text.endswith("… 90 more rows")
    assert "<b>9&" in text and "<b>10&" not in text
    small = cat.sql("SELECT 1 AS one")
    assert repr(small).splitlines() == ["Result: 1 row × 1 column", "one", "-----", "1"]
    assert "first" not in small._repr_html_()
    infinite = cat.sql("SELECT 'infinity'::TIMESTAMP AS t, 1 AS n")  # no Python datetime holds it
    assert "<td>1</td>" in infinite._repr_html_() and repr(infinite).startswith("Result: 1 row × 2 columns")
    long = cat.sql("SELECT repeat('x', 500) AS s")._repr_html_()
    assert "x" * 119 + "…" in long and "x" * 121 not in long


@pytest.mark.parametrize(("library", "method"), [("pandas", "df"), ("polars", "pl")])
def test_df_and_pl_name_the_extra_when_the_library_is_missing(cat, library, method):
    """In a process where the library cannot be imported (sys.modules[name] = None)."""
    script = (
        "import sys\n"
        f"sys.modules[{library!r}] = None\n"
        "from catalog import Catalog\n"
        f"r = Catalog.open(sys.argv[1]).sql('SELECT 1 AS one')\n"
        "assert r.fetchall() == [(1,)]\n"  # everything else works without it
        "try:\n"
        f"    r.{method}()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(cat.path)], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.strip() == (
        f"Result.{method}() needs {library}, which is not installed: "
        f"pip install -e '.[{library}]' (or pip install {library})"
    )


# -- runs() and the catalog's HTML view ------------------------------------------------------


def test_runs_has_one_row_per_run_with_what_users_want(cat):
    runs = {row["run"]: row for row in cat.runs().to_pylist()}
    assert list(runs) == list(RUNS)  # in ingest order
    assert cat.runs().column_names == [
        "run", "producer", "ranks", "steps", "first_step", "last_step", "tensors", "tensor_bytes",
        "statistic_rows", "errors", "ingested_at", "dump_root",
    ]  # fmt: skip
    for run, row in runs.items():
        expected = cat.sql(
            "SELECT count(*), coalesce(sum(nbytes), 0), count(DISTINCT rank) FROM tensors WHERE run = ?",
            [run],
        ).fetchall()[0]
        assert (row["tensors"], row["tensor_bytes"]) == expected[:2], run
        assert row["dump_root"] == str(RUNS[run]), run
    assert {r: runs[r]["producer"] for r in runs} == {
        "nan_log": "mindspore-npy", "lowp": "mindspore-npy", "raw": "ascend-raw", "probe": "msprobe",
        "bin": "mindspore-bin", "cast": "mindspore-npy", "stats_only": None,
    }  # fmt: skip
    assert (runs["nan_log"]["ranks"], runs["nan_log"]["steps"], runs["nan_log"]["last_step"]) == (1, 2, 1)
    # a statistics-only dump: no tensors, its steps and ranks from the statistics rows
    only = runs["stats_only"]
    assert only["tensors"] == 0 and only["statistic_rows"] == 72 and only["steps"] == 3 and only["ranks"] == 1
    assert all(row["errors"] == 0 for row in runs.values())


def test_catalog_html_view_shows_its_path_and_runs(cat, tmp_path):
    page = cat._repr_html_()
    assert html.escape(str(cat.path)) in page and str(cat.path) not in page  # `c<&>.cat`, escaped
    total = cat.sql("SELECT count(*) FROM tensors").fetchall()[0][0]
    assert f"7 runs, {total:,} tensors" in page
    assert all(f"<td>{run}</td>" in page for run in RUNS)
    empty = Catalog.open(tmp_path / "empty.cat", create=True)
    assert "0 runs, 0 tensors" in empty._repr_html_() and "<table>" not in empty._repr_html_()


# -- tensors(ids) ----------------------------------------------------------------------------


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("run", ["nan_log", "lowp", "raw", "probe", "bin"])
def test_tensors_equal_tensor_for_each_id_in_the_order_asked(cat, run):
    ids = (
        cat.sql("SELECT row_id FROM tensors WHERE run = ? ORDER BY row_id DESC", [run]).column(0).to_pylist()
    )
    assert len(ids) >= 20
    arrays = cat.tensors(ids)
    assert len(arrays) == len(ids)
    for row_id, arr in zip(ids, arrays, strict=True):
        assert _same(arr, cat.tensor(row_id)), row_id
    # any order, repeats, numpy or pyarrow ids
    picked = [ids[3], ids[0], ids[3]]
    assert all(_same(a, cat.tensor(i)) for a, i in zip(cat.tensors(np.array(picked)), picked, strict=True))
    column = cat.sql("SELECT row_id FROM tensors WHERE run = ? ORDER BY row_id", [run]).column("row_id")
    assert [a.shape for a in cat.tensors(column)] == [cat.tensor(i).shape for i in column.to_pylist()]


def test_tensors_cover_stored_types_and_device_layouts(cat):
    kinds = cat.sql(
        "SELECT DISTINCT ON (stored_dtype, format) row_id, stored_dtype, format FROM tensors ORDER BY ALL"
    ).to_pylist()
    assert {"bfloat16", "<E2"} & {k["stored_dtype"] for k in kinds}
    assert "FRACTAL_NZ" in {k["format"] for k in kinds}
    ids = [k["row_id"] for k in kinds]
    for layout in ("host", "device"):
        for row_id, arr in zip(ids, cat.tensors(ids, layout=layout), strict=True):
            assert _same(arr, cat.tensor(row_id, layout=layout)), (row_id, layout)


def test_tensors_are_memory_mapped_read_only(cat):
    ids = cat.sql("SELECT row_id FROM tensors WHERE run = 'nan_log' AND nbytes > 0 LIMIT 5").column(0)
    for arr in cat.tensors(ids):
        assert not arr.flags.writeable
        base = arr
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        base = base.obj if isinstance(base, memoryview) else base
        assert type(base).__name__ == "mmap", type(base)


def test_tensors_name_unknown_ids_and_refuse_bad_input(cat):
    known = cat.sql("SELECT row_id FROM tensors LIMIT 1").fetchall()[0][0]
    with pytest.raises(TensorNotFoundError, match=r"^2 of 3 row ids are not tensors of catalog .*: 1, 2$"):
        cat.tensors([known, 2, 1])
    assert cat.tensors([]) == []
    with pytest.raises(TypeError, match="row ids are integers; got 'x'"):
        cat.tensors([known, "x"])
    with pytest.raises(TypeError, match="row_ids must be a list of integers, not int"):
        cat.tensors(known)


def test_tensors_of_a_catalog_without_flat_files_and_of_a_removed_file(tmp_path, copy_dump):
    """A catalog an older dumpcat wrote has no memory-mapped index: the batches' index is searched.
    A file removed since ingest raises TensorNotFoundError naming the file, as `tensor()` does."""
    dump = copy_dump("nan_log")
    path = tmp_path / "old.cat"
    Catalog.open(path, create=True).ingest(dump, run="nan_log")
    as_written_before_flat_files(path)
    old = Catalog.open(path)
    ids = old.sql("SELECT row_id FROM tensors ORDER BY row_id").column(0).to_pylist()
    assert len(ids) == 180
    assert all(_same(a, old.tensor(i)) for a, i in zip(old.tensors(ids), ids, strict=True))
    with pytest.raises(TensorNotFoundError, match=r"^1 of 2 row ids are not tensors of catalog .*: 7$"):
        old.tensors([ids[0], 7])
    gone_id, gone = old.sql("SELECT row_id, path FROM tensors ORDER BY row_id LIMIT 1").fetchall()[0]
    Path(gone).unlink()
    with pytest.raises(TensorNotFoundError, match=f"tensor {gone_id} was cataloged but the file is gone"):
        old.tensors(ids)


# -- frames= ---------------------------------------------------------------------------------


def _notes(kind: str) -> object:
    data = {"run": ["nan_log", "raw", "nowhere"], "note": ["npy", "ascend", "none"]}
    if kind == "pandas":
        return pd.DataFrame(data)
    if kind == "polars":
        return pl.DataFrame(data)
    return pa.table(data)


@pytest.mark.parametrize("kind", ["pandas", "polars", "pyarrow"])
def test_frames_join_a_local_dataframe_with_a_catalog_view(cat, kind):
    q = "SELECT m.run, m.note, r.tensors FROM mine m JOIN runs_of_mine r USING (run) ORDER BY m.run"
    runs = cat.runs()
    got = cat.sql(q, frames={"mine": _notes(kind), "runs_of_mine": runs})
    assert got.fetchall() == [("nan_log", "npy", 180), ("raw", "ascend", 180)]
    joined = cat.sql(
        "SELECT m.note, count(*) FROM tensors t JOIN mine m USING (run) GROUP BY ALL ORDER BY 1",
        frames={"mine": _notes(kind)},
    )
    assert joined.fetchall() == [("ascend", 180), ("npy", 180)]
    # parameters still work beside frames
    assert cat.sql(
        "SELECT note FROM mine WHERE run = ?", ["raw"], frames={"mine": _notes(kind)}
    ).fetchall() == [("ascend",)]
    # gone after the call
    with pytest.raises(duckdb.CatalogException, match="mine"):
        cat.sql("SELECT * FROM mine")


def test_frames_stay_inside_the_guard(cat):
    mine = {"mine": _notes("pandas")}
    with pytest.raises(QueryRefused, match="read_csv"):
        cat.sql("SELECT * FROM mine, read_csv('/etc/passwd')", frames=mine)
    with pytest.raises(QueryRefused, match="COPY to a file or program is not allowed"):
        cat.sql("COPY (SELECT * FROM mine) TO 'out.csv'", frames=mine)
    with pytest.raises(QueryRefused, match="ATTACH is not allowed"):
        cat.sql("ATTACH 'x.duckdb'", frames=mine)
    with pytest.raises(QueryRefused, match="INSERT statements are not allowed"):
        cat.sql("INSERT INTO mine VALUES ('a', 'b')", frames=mine)


@pytest.mark.parametrize(
    ("frames", "error", "message"),
    [
        ({"stats": pd.DataFrame({"a": [1]})}, ValueError, "frame name 'stats' is a relation of the catalog"),
        ({"RUNS": pd.DataFrame({"a": [1]})}, ValueError, "frame name 'RUNS' is a relation of the catalog"),
        ({"raw_tensors": pd.DataFrame({"a": [1]})}, ValueError, "'raw_tensors' is a relation of the catalog"),
        ({"my.csv": pd.DataFrame({"a": [1]})}, ValueError, "frame name 'my.csv' is not an identifier"),
        ({"x": "/etc/passwd"}, TypeError, "frame 'x' is a builtins.str: give a pandas or polars DataFrame"),
        ([("x", 1)], TypeError, "frames must be a dict of name -> DataFrame, not list"),
    ],
)
def test_frames_with_bad_names_or_objects_are_refused(cat, frames, error, message):
    with pytest.raises(error, match=message.replace(".", r"\.").replace("(", r"\(")):
        cat.sql("SELECT 1", frames=frames)


# -- where(code=) ----------------------------------------------------------------------------


def test_where_code_matches_a_fragment_of_the_line(cat):
    """make_runs.py:87 is `x = self.cast(x, ms.float16)  # run B only: round the activation to float16`."""
    line = "x = self.cast(x, ms.float16)  # run B only: round the activation to float16"
    by_line = cat.where(file="make_runs.py", line=87)
    assert set(by_line.column("code").to_pylist()) == {line}
    ops = sorted(set(by_line.column("op_name").to_pylist()))
    assert ops == [
        "Default/network-WithLossCell/_backbone-Net/Cast-op2",
        "Gradients/Default/network-WithLossCell/_backbone-Net/Grad_Cast/Cast-op3",
    ]
    for fragment in ("self.cast(x, ms.float16)", "x = self.cast(x,   ms.float16)", "ms.float16)  # run B"):
        found = cat.where(file="make_runs.py", code=fragment)
        assert sorted(set(found.column("op_name").to_pylist())) == ops, fragment
    # without a file, every script's lines that hold the fragment (lowp's train.py casts too)
    everywhere = cat.where(code="self.cast(x, ms.float16)")
    assert set(everywhere.column("op_name").to_pylist()) > set(ops)
    assert all("self.cast(x, ms.float16)" in c for c in everywhere.column("code").to_pylist())
    assert cat.where(code="SELF.CAST(x, ms.float16)").num_rows == 0  # case-sensitive
    # both cast lines of make_runs.py hold `self.cast(`
    assert set(cat.where(file="make_runs.py", code="self.cast(").column("line").to_pylist()) == {87, 88}
    # the whole line, for those who want the old rule
    assert cat.where(code=line, exact=True) == cat.where(code=line)
    assert cat.where(code="self.cast(x, ms.float16)", exact=True).num_rows == 0
    with pytest.raises(ValueError, match="code is empty"):
        cat.where(code="  ")


# -- PIVOT -----------------------------------------------------------------------------------


def test_pivot_without_in_is_refused_with_its_reason_and_with_in_runs(cat):
    for query in (
        "PIVOT stats ON io USING count(*) GROUP BY run",
        "SELECT * FROM (PIVOT stats ON io USING count(*)) p",
    ):
        with pytest.raises(QueryRefused) as refused:
            cat.sql(query)
        assert str(refused.value).startswith(
            "PIVOT without an IN list is not supported: DuckDB needs a first pass"
        )
        assert "PIVOT ... ON col IN ('a', 'b')" in str(refused.value)
        assert refused.value.sqlstate == "0A000"
    pivot = cat.sql(
        "PIVOT tensors ON io IN ('input', 'output') USING count(*) GROUP BY run ORDER BY run"
    ).fetchall()
    counted = cat.sql(
        "SELECT run, count(*) FILTER (io = 'input'), count(*) FILTER (io = 'output') FROM tensors "
        "GROUP BY run ORDER BY run"
    ).fetchall()
    assert pivot == counted and len(pivot) == 6


def test_the_cli_says_why_a_pivot_without_in_is_refused(cat):
    out = subprocess.run(
        [sys.executable, "-m", "catalog.cli", "sql", str(cat.path), "PIVOT tensors ON io USING count(*)"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith("dumpcat: error: refused: PIVOT without an IN list is not supported")
    assert "Traceback" not in out.stderr


def test_readme_notebook_recipe_runs(tmp_path):
    """The README's *In a notebook* recipe, run as written on the demo catalog of the page."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("\n### In a notebook\n")
    code = readme[start:].split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "tests").symlink_to(REPO / "tests")
    Catalog.open(tmp_path / "scratch/demo.cat", create=True).ingest(DATA / "ms210/nan_log/dump")
    check = "\nprint(len(df), len(arrays), sum(int(np.isnan(a).sum()) for a in arrays))\n"
    out = subprocess.run(
        [sys.executable, "-c", "import numpy as np\n" + code + check],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    cat = Catalog.open(tmp_path / "scratch/demo.cat")
    nan_tensors, nans = cat.sql("SELECT count(*), sum(nan_count) FROM stats WHERE nan_count > 0").fetchall()[
        0
    ]
    assert out.stdout.split() == ["2", str(nan_tensors), str(nans)]


def test_python_api_notebook_examples_print_what_the_page_shows(tmp_path, monkeypatch):
    """docs/python-api.md *In a notebook*: its `>>>` examples, run with doctest on the README's demo
    catalog (scratch/demo.cat of the committed nan_log dump)."""
    import doctest

    page = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    section = page[page.index("\n## In a notebook\n") :]
    examples = "\n".join(re.findall(r"^```python\n(>>> .*?)^```$", section, re.M | re.S))
    assert examples.count(">>> ") >= 8
    monkeypatch.chdir(tmp_path)
    Catalog.open(tmp_path / "scratch/demo.cat", create=True).ingest(DATA / "ms210/nan_log/dump")
    test = doctest.DocTestParser().get_doctest(
        examples, {"Catalog": Catalog, "pd": pd}, "python-api.md", None, 0
    )
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=lambda text: pytest.fail(text))
    assert runner.summarize(verbose=False).attempted == examples.count(">>> ")
