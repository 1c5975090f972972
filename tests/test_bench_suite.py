"""`python -m bench` (bench/__main__.py, bench/suite.py): every benchmark script is registered, every
registered benchmark has its block in docs/benchmarks.md under its heading, the runner rewrites
only what lies between the markers, and one cheap benchmark runs through it end to end. Nothing
here times anything: the figures are the benchmarks' business, not the tests'."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

BENCH = REPO / "bench"
DOCS = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"
sys.path.insert(0, str(BENCH))

import docs_block  # noqa: E402
import suite  # noqa: E402

from bench import __main__ as runner  # noqa: E402


def _outside(doc: str) -> str:
    """The document with every block's content cut out: what the runner must not change."""
    for name in docs_block.block_names(doc):
        start, end = docs_block.markers(name)
        head, rest = doc.split(start, 1)
        doc = head + start + end + rest.split(end, 1)[1]
    return doc


def _run(*args: str, tmp_path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )  # fmt: skip


def test_every_bench_script_is_a_registered_benchmark_or_a_helper():
    scripts = {p.stem for p in BENCH.glob("*.py")}
    registered = {b.name for b in suite.BENCHMARKS}
    assert len(registered) == len(suite.BENCHMARKS), "a benchmark is registered twice"
    assert not registered & set(suite.HELPERS)
    assert scripts == registered | set(suite.HELPERS), (
        f"not registered: {sorted(scripts - registered - set(suite.HELPERS))}; "
        f"registered but missing: {sorted((registered | set(suite.HELPERS)) - scripts)}"
    )
    for bench in suite.BENCHMARKS:
        assert set(bench.needs) <= set(suite.NEEDS), bench.name
        assert bench.script.is_file()


def test_list_names_every_benchmark_and_helper(tmp_path):
    proc = _run("--list", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert listed == [b.name for b in suite.BENCHMARKS] + [f"{h}.py" for h in suite.HELPERS]


def test_the_docs_hold_every_benchmarks_block_under_its_heading():
    doc = DOCS.read_text(encoding="utf-8")
    lines = doc.splitlines()
    assert docs_block.block_text(doc, runner.SUMMARY_BLOCK) is not None
    for bench in suite.BENCHMARKS:
        start, end = docs_block.markers(bench.name)
        assert doc.count(start) == 1 and doc.count(end) == 1, bench.name
        heading = [line for line in lines[: lines.index(start)] if line.startswith("#")][-1]
        assert heading.lstrip("#").strip() == bench.heading, bench.name
    assert docs_block.block_text(README.read_text(encoding="utf-8"), runner.README_BLOCK) is not None


def _outcome(name: str, **kw) -> runner.Outcome:
    return runner.Outcome(suite.BY_NAME[name], command=f"python bench/{name}.py", **kw)


def test_rewriting_keeps_every_byte_outside_the_markers(tmp_path, monkeypatch):
    # a benchmark whose figures are kept by hand (`kept`), whichever the registry has now
    kept = dataclasses.replace(suite.BY_NAME["bench_serve_attacks"], kept="kept by hand for this test")
    monkeypatch.setattr(suite, "BENCHMARKS", [kept if b.name == kept.name else b for b in suite.BENCHMARKS])
    monkeypatch.setitem(suite.BY_NAME, kept.name, kept)
    docs, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    shutil.copy(DOCS, docs)
    shutil.copy(README, readme)
    before, readme_before = docs.read_text(encoding="utf-8"), readme.read_text(encoding="utf-8")
    outcomes = [
        _outcome("bench_ir", seconds=2.0, rows=[("parsing a 9-node graph IR", ">= 1", "7 nodes/s", "no")],
                 report="| a | b |\n|---|---|\n"),
        _outcome("bench_pt", not_run="no Python with torch given"),
        _outcome("bench_open", failed=True, not_run="`python bench/bench_open.py` failed (exit status 1)",
                 report="```text\nTraceback\n```\n"),
        _outcome("bench_core", rows=[("metadata ingest (10 tensors)", ">= 50,000", "9 tensors/s", "no")]),
        _outcome("bench_serve_attacks", rows=[("kept", "-", "1", "-")], report="KEPT FIGURES"),
    ]  # fmt: skip
    runner.write_docs(outcomes, docs, readme, "*the run's header*", "2026-01-02", quick=False)
    after = docs.read_text(encoding="utf-8")
    assert _outside(after) == _outside(before)
    assert _outside(readme.read_text(encoding="utf-8")) == _outside(readme_before)

    assert "| a | b |" in docs_block.block_text(after, "bench_ir")
    assert "*Not run: no Python with torch given (2026-01-02).*" in docs_block.block_text(after, "bench_pt")
    assert "failed (exit status 1)" in docs_block.block_text(after, "bench_open")
    assert "Traceback" in docs_block.block_text(after, "bench_open")
    # a kept benchmark's block is left as it was, even when it ran
    assert docs_block.block_text(after, "bench_serve_attacks") == docs_block.block_text(
        before, "bench_serve_attacks"
    )
    summary = docs_block.block_text(after, runner.SUMMARY_BLOCK)
    assert summary.startswith("*the run's header*")
    assert "| `bench_ir` | parsing a 9-node graph IR | >= 1 | 7 nodes/s | no | 2026-01-02 |" in summary
    assert "| `bench_pt` | **not run:** no Python with torch given |" in summary
    assert "KEPT" not in summary and "| `bench_serve_attacks` |" not in summary
    assert "metadata ingest 9 tensors/s (2026-01-02, target >= 50,000)" in readme.read_text(encoding="utf-8")

    # a second, partial run keeps the other benchmarks' rows with their own date
    runner.write_docs(
        [_outcome("bench_pt", not_run="still none")], docs, None, "*second*", "2026-01-03", False
    )
    summary = docs_block.block_text(docs.read_text(encoding="utf-8"), runner.SUMMARY_BLOCK)
    assert "| `bench_ir` | parsing a 9-node graph IR | >= 1 | 7 nodes/s | no | 2026-01-02 |" in summary
    assert "| `bench_pt` | **not run:** still none | | | | 2026-01-03 |" in summary


def test_the_protocol_lines_are_parsed_and_plain_output_is_kept_as_text():
    out = "progress\nBENCH-SUMMARY\tfig\t>= 2x\t3.1x\tyes\n\nBENCH-REPORT\n| t |\n|---|\n"
    rows, report = runner.parse_output(out + "BENCH-SUMMARY\tg\t-\t1\t-\n")
    assert rows == [("fig", ">= 2x", "3.1x", "yes"), ("g", "-", "1", "-")]
    assert report == "| t |\n|---|\n"
    rows, report = runner.parse_output("just\ntext\n")
    assert rows == [] and report == "```text\njust\ntext\n```\n"


def test_a_missing_need_is_written_as_not_run_and_the_exit_status_says_so(tmp_path):
    docs = tmp_path / "benchmarks.md"
    shutil.copy(DOCS, docs)
    args = ("--only", "bench_pt", "--docs", str(docs), "--workdir", str(tmp_path / "w"))
    proc = _run(*args, tmp_path=tmp_path, env={"DUMPCAT_BENCH_TORCH_PYTHON": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    block = docs_block.block_text(docs.read_text(encoding="utf-8"), "bench_pt")
    assert block.startswith("*Not run: no Python with torch given"), block


def test_a_cheap_benchmark_runs_end_to_end_through_the_runner(tmp_path):
    docs, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    shutil.copy(DOCS, docs)
    shutil.copy(README, readme)
    before = docs.read_text(encoding="utf-8")
    proc = _run("--quick", "--only", "bench_ir", "--docs", str(docs), "--readme", str(readme),
                "--workdir", str(tmp_path / "w"), tmp_path=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[1/1] bench_ir ... ok" in proc.stdout
    after = docs.read_text(encoding="utf-8")
    assert _outside(after) == _outside(before)
    block = docs_block.block_text(after, "bench_ir")
    assert block.startswith("*quick run (small sizes"), block
    assert "`python bench/bench_ir.py --nodes 5000 --runs 1`" in block
    assert "| `parse_ir_text` |" in block and "baseline: `text.split" in block
    summary = docs_block.block_text(after, runner.SUMMARY_BLOCK)
    assert "`python -m bench --quick --only bench_ir" in summary
    row = [line for line in summary.splitlines() if line.startswith("| `bench_ir` |")]
    assert len(row) == 1 and "parsing a 5,000-node graph IR | >= 50,000 nodes/s |" in row[0], summary
    assert (tmp_path / "w" / "logs" / "bench_ir.out").is_file()  # a given workdir is kept


@pytest.mark.parametrize("name", [b.name for b in suite.BENCHMARKS])
def test_every_benchmarks_command_line_fills_its_placeholders(name, tmp_path):
    ctx = suite.Context(real_tree="/t", torch_python="/py", msprobe="/m", before="/b", workdir=tmp_path)
    for quick in (False, True):
        cmd = suite.command(suite.BY_NAME[name], ctx, quick, sys.executable)
        assert not any("{" in arg for arg in cmd), cmd
        assert cmd[1] == str(BENCH / f"{name}.py")


def test_reports_are_written_without_this_machines_paths(tmp_path):
    """A report that prints its scratch folder, the real tree or the checkout gets the names the
    command lines get (a temporary folder of the machine that ran it once reached the docs)."""
    ctx = suite.Context(
        real_tree=str(tmp_path / "tree"), msprobe=str(tmp_path / "venv/bin/msprobe"), workdir=tmp_path
    )
    printed = (
        f"| workdir | {tmp_path}/bench_core |\nout_dir={tmp_path}/x\ntree {tmp_path}/tree, "
        f"{tmp_path}/venv/bin/msprobe, {runner.ROOT}/bench/x.py"
    )
    text = runner.scrubbed(printed, ctx)
    assert str(tmp_path) not in text and str(runner.ROOT) not in text
    assert text == "| workdir | WORKDIR/bench_core |\nout_dir=WORKDIR/x\ntree REAL_TREE, MSPROBE, bench/x.py"
