"""The `dumpcat` command as a user runs it: real processes, real exit codes, real output."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from catalog import Catalog
from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import dump_of


def dumpcat(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"dumpcat {args} exited {proc.returncode}: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def cat(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "cat"
    out = dumpcat("ingest", dump_of("nan_log"), "--catalog", path, "--run", "nan_log")
    assert "run 'nan_log'" in out.stdout and "180 new tensors" in out.stdout and "0 errors" in out.stdout
    return path


def test_readme_query_table(cat):
    out = dumpcat("sql", cat, "SELECT op_name FROM stats WHERE nan_count > 0")
    assert "op_name" in out.stdout.splitlines()[0]
    assert "Default/network-WithLossCell/_backbone-Net/Log-op0" in out.stdout
    assert out.stdout.rstrip().endswith("rows)")


def test_sql_csv_and_json(cat):
    q = "SELECT row_id, op_name, shape, max FROM stats WHERE op_type = 'Log' AND io = 'output' ORDER BY 1"
    # output formatting: the command's code in this process (test_readme_query_table runs `sql` for real)
    rows = list(csv.DictReader(io.StringIO(dumpcat_in_process("sql", cat, q, "--format", "csv").stdout)))
    assert len(rows) == 2 and rows[0]["shape"] == "[2, 3]" and rows[0]["max"] == "nan"
    lines = dumpcat_in_process("sql", cat, q, "--format", "json").stdout.splitlines()
    recs = [json.loads(line) for line in lines]
    assert recs[0]["shape"] == [2, 3] and recs[0]["max"] == "nan"
    assert str(recs[0]["row_id"]) == rows[0]["row_id"]


def test_json_and_csv_hold_every_duckdb_value(cat):
    """HUGEINT sums, BLOBs, structs holding NaN and timestamps Python cannot represent are written
    as valid JSON (and CSV), not a traceback."""
    q = (
        "SELECT sum(nbytes) AS total, '\\x01\\xff'::BLOB AS raw, {'m': max(max)} AS st,"
        " 'infinity'::TIMESTAMPTZ AS forever FROM stats WHERE op_type = 'Log'"
    )
    [line] = dumpcat_in_process("sql", cat, q, "--format", "json").stdout.splitlines()
    assert "NaN" not in line and "Infinity" not in line  # strict JSON has neither
    rec = json.loads(line)
    assert isinstance(rec["total"], int) and rec["total"] > 0
    assert rec["raw"] == "01ff" and rec["st"] == {"m": "nan"} and rec["forever"]
    rows = list(csv.DictReader(io.StringIO(dumpcat_in_process("sql", cat, q, "--format", "csv").stdout)))
    assert rows[0]["total"] == str(rec["total"])
    assert "(1 row)" in dumpcat_in_process("sql", cat, q).stdout


def test_tensor_out_and_print(cat, tmp_path):
    q = "SELECT row_id FROM tensors WHERE op_type='Log' AND io='output' AND iteration=0"
    row_id = dumpcat_in_process("sql", cat, q, "--format", "csv").stdout.splitlines()[1]
    out_file = tmp_path / "t.npy"
    dumpcat("tensor", cat, row_id, "--out", out_file)  # a real process
    arr = np.load(out_file)
    assert arr.shape == (2, 3) and np.isnan(arr).sum() == 1
    printed = dumpcat_in_process("tensor", cat, row_id).stdout
    assert "shape (2, 3), dtype float32" in printed and "nan" in printed


def test_views_lists_columns(cat):
    out = dumpcat("views", cat).stdout
    assert "stats:" in out and "    nan_count BIGINT" in out and "ingest_errors:" in out


@pytest.fixture(scope="module")
def damaged(cat, tmp_path_factory):
    """A copy of the catalog whose snapshot.json is cut (the tests only read it)."""
    path = tmp_path_factory.mktemp("damaged") / "cat"
    shutil.copytree(cat, path)
    (path / "snapshot.json").write_text("{")
    return path


# (args, message, in a real process): one case per command runs as a real `dumpcat` process (its
# start-up path and the interpreter's exit status); the others run the same command code in this
# process (tests/catalog/cli/in_process.py), with the same checks on exit status and stderr.
@pytest.mark.parametrize(
    "args, message, real",
    [
        (("tensor", "{cat}", "42"), "no tensor with row id 42", True),
        (("sql", "{cat}", "SELEC nonsense"), "syntax error", True),
        (("sql", "{cat}", "SELECT no_such_column FROM stats"), "no_such_column", False),
        (("sql", "{missing}", "SELECT 1"), "is not a dumpcat catalog", False),
        (("ingest", "{missing}", "--catalog", "{tmp}/c2"), "does not exist", True),
        (("ingest", "{tmp}", "--catalog", "{tmp}/c3"), "not a dump dumpcat can read. Looked for", True),
        (("sql", "{damaged}", "SELECT 1"), "cannot read", False),  # a damaged snapshot.json
        (("sql", "{cat}", "SELECT 1; SELECT 2"), "one SQL statement at a time", False),
        (("sql", "{cat}", "DROP VIEW stats"), "refused: DROP statements are not allowed", False),
        (("sql", "{cat}", "CREATE TABLE t AS SELECT 1"), "refused: CREATE statements are not allowed", False),
        (
            ("sql", "{cat}", "COPY stats TO 'x.csv'"),
            "refused: COPY to a file or program is not allowed",
            False,
        ),
        (
            ("sql", "{cat}", "SELECT * FROM read_csv('/etc/passwd')"),
            "refused: table function read_csv()",
            False,
        ),
        (("sql", "{cat}", "  ;  "), "refused: empty statement", False),
        (("serve", "{cat}", "--memory-limit", "10MB"), "--memory-limit must be at least 128 MiB", True),
        (("serve", "{cat}", "--max-result-bytes", "lots"), "not a size: 'lots'", False),
        (("status", "{damaged}"), "cannot read", True),
        (
            ("tensor", "{cat}", "{row_id}", "--out", "{tmp}/no/such/dir/t.npy"),
            "No such file or directory",
            False,
        ),
    ],
)
def test_errors_are_one_line_exit_1(cat, damaged, tmp_path, args, message, real):
    with Catalog.open(cat) as c:
        row_id = c.sql("SELECT min(row_id) FROM tensors").column(0)[0].as_py()
    args = [
        a.format(cat=cat, missing=tmp_path / "missing", tmp=tmp_path, damaged=damaged, row_id=row_id)
        for a in args
    ]
    proc = dumpcat(*args, check=False) if real else dumpcat_in_process(*args)
    assert proc.returncode == 1
    assert proc.stderr.startswith("dumpcat: error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_ingest_with_errors_exits_0_and_counts_them(tmp_path, copy_dump):
    dump = copy_dump("simple")
    (dump / "rank_0/Net/0/0/broken.npy").write_bytes(b"nope")
    out = dumpcat("ingest", dump, "--catalog", tmp_path / "cat", "--run", "r1")
    assert "1 errors" in out.stdout and "SELECT * FROM ingest_errors" in out.stdout


def test_run_with_several_dumps_is_refused(tmp_path):
    proc = dumpcat("ingest", dump_of("simple"), dump_of("nan_log"), "--catalog", tmp_path / "c", "--run", "x",
                   check=False)  # fmt: skip
    assert proc.returncode == 1 and "--run names a single dump" in proc.stderr


def test_a_failed_ingest_leaves_no_catalog_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    for dump in (tmp_path / "missing", tmp_path / "empty"):
        proc = dumpcat("ingest", dump, "--catalog", tmp_path / "c", check=False)
        assert proc.returncode == 1 and proc.stderr.startswith("dumpcat: error: ")
        assert not (tmp_path / "c").exists()
    proc = dumpcat("ingest", dump_of("nan_log"), tmp_path / "empty", "--catalog", tmp_path / "c", check=False)
    assert proc.returncode == 1 and not (tmp_path / "c").exists()  # checked before anything is written


def test_several_dumps_become_several_runs(tmp_path, copy_dump):
    a, b = copy_dump("simple", "job_a"), copy_dump("nan_log", "job_b")
    dumpcat("ingest", a, b, "--catalog", tmp_path / "c", "--no-stats")
    out = dumpcat_in_process(
        "sql", tmp_path / "c", "SELECT run, count(*) FROM tensors GROUP BY 1 ORDER BY 1", "--format", "csv"
    )
    assert out.stdout.split() == ["run,count_star()", "job_a,243", "job_b,180"]
    stats = dumpcat_in_process("sql", tmp_path / "c", "SELECT count(*) FROM stats", "--format", "csv")
    assert stats.stdout.split()[1] == "0"


def test_two_dumps_with_the_same_folder_name_need_run(tmp_path):
    a, b = tmp_path / "a" / "job", tmp_path / "b" / "job"
    shutil.copytree(dump_of("simple"), a)
    shutil.copytree(dump_of("nan_log"), b)
    dumpcat("ingest", a, "--catalog", tmp_path / "c")
    proc = dumpcat("ingest", b, "--catalog", tmp_path / "c", check=False)
    assert proc.returncode == 1 and "already holds dump" in proc.stderr and "--run" in proc.stderr


@pytest.mark.parametrize("given", ["dump", "dump/rank_0"])
def test_a_dump_folder_named_dump_is_run_after_its_parent(tmp_path, given):
    """MindSpore users often set `path` to `…/<job>/dump`: the run is named `<job>`, also when a
    single rank folder is given."""
    proc = dumpcat("ingest", dump_of("nan_log").parent / given, "--catalog", tmp_path / "c")
    detected, summary = proc.stdout.splitlines()[:2]
    assert "MindSpore 1.3+ (npy)" in detected and "*.npy in rank_0/Net/0/" in detected
    assert summary.startswith("run 'nan_log' (")
    out = dumpcat_in_process("sql", tmp_path / "c", "SELECT run FROM runs", "--format", "csv").stdout.split()
    assert out == ["run", "nan_log"]


def test_export_duckdb_command(cat, tmp_path):
    out = tmp_path / "export.duckdb"
    proc = dumpcat("export-duckdb", cat, out)
    assert proc.stdout.startswith("wrote ") and out.exists()
    import duckdb

    con = duckdb.connect(str(out), read_only=True)
    rows = con.sql("SELECT DISTINCT op_name FROM stats WHERE nan_count > 0 AND op_type = 'Log'").fetchall()
    assert rows == [("Default/network-WithLossCell/_backbone-Net/Log-op0",)]
    bad = dumpcat_in_process("export-duckdb", tmp_path / "missing", out)
    assert bad.returncode == 1 and "not a dumpcat catalog" in bad.stderr


def test_serve_help_documents_every_flag_and_environment_variable():
    import click

    from catalog.cli.commands import serve

    undocumented = [p.name for p in serve.params if isinstance(p, click.Option) and not p.help]
    assert not undocumented
    help_text = dumpcat("serve", "--help").stdout
    for word in ("DUMPCAT_USER", "DUMPCAT_PASSWORD", "DUMPCAT_TLS_CERT", "--memory-limit", "--idle-timeout"):
        assert word in help_text, word
