"""Run every benchmark and rewrite docs/benchmarks.md from that run: `python -m bench`.

Each benchmark of bench/suite.py runs in a fresh process (`python bench/<script> ARGS`), one after
the other, its output captured. Its headline figures (``BENCH-SUMMARY`` lines, bench/emit.py) become
rows of the generated *Summary*; its report becomes its section's block; a benchmark that failed or
whose need is missing is written as "not run: <reason>" in both, never left out. Text outside the
markers (what each benchmark measures and why) is kept byte for byte.

    python -m bench                       # every benchmark, full sizes; rewrites docs/benchmarks.md
    python -m bench --quick               # small sizes: checks the scripts and the runner (no docs)
    python -m bench --only bench_ir,bench_open --no-docs
    python -m bench --list

Exit status: 0 when every requested benchmark ran, 1 when one failed, 2 when none failed but one
could not run here (a need missing)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import docs_block  # noqa: E402
import emit  # noqa: E402
import suite  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
SUMMARY_BLOCK = "bench_summary"
README_BLOCK = "bench_readme"
# the Summary rows the README's speed line shows: (its label, benchmark, how the row's figure starts)
README_PICKS = (
    ("metadata ingest", "bench_core", "metadata ingest ("),
    ("the NaN query on 10^6 rows", "bench_core", "stats WHERE nan_count > 0 (1,000,000 rows"),
    ("statistics computed from tensor data", "bench_speed", "statistics from data vs a page-cache read"),
    ("peak memory of a 10^6-tensor ingest", "bench_core", "ingest peak RSS, ru_maxrss (1,000,000"),
)
STDERR_TAIL = 15


@dataclass
class Outcome:
    """One benchmark's run: whether it ran, its figures and report, and how long it took."""

    bench: suite.Benchmark
    command: str = ""  # as a reader would type it: python bench/x.py ... (no machine paths)
    not_run: str = ""  # why not, if it did not run or failed
    failed: bool = False
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    report: str = ""


def machine() -> str:
    """The machine in one line: cores this process may use, CPU model, memory, versions."""
    model, memory = emit.cpu_and_memory()
    versions = []
    for dist in ("numpy", "duckdb", "pyarrow"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
    cores = len(os.sched_getaffinity(0))
    return (
        f"{cores} cores ({model or platform.machine()}), {memory:.1f} GiB, "
        f"Python {platform.python_version()}, {', '.join(versions)}"
    )


def revision() -> str:
    """The commit the run measured (with `+changes` when the work tree differs from it)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" +changes" if dirty else "")


def shown(cmd: list[str], ctx: suite.Context) -> str:
    """A command line without this machine's paths: `python bench/x.py ... WORKDIR/x`."""
    parts = ["python"]
    for arg in cmd[1:]:
        arg = arg.replace(str(ctx.workdir), "WORKDIR") if str(ctx.workdir) != "." else arg
        arg = arg.replace(str(ROOT) + "/", "")
        for value, name in ((ctx.real_tree, "REAL_TREE"), (ctx.msprobe, "MSPROBE"), (ctx.before, "BEFORE")):
            if value and arg == value:
                arg = name
        parts.append(arg)
    return shlex.join(parts)


def scrubbed(text: str, ctx: suite.Context) -> str:
    """`text` (what a benchmark printed) without this machine's paths: the work folder, the real
    tree, msprobe, the earlier checkout and the checkout itself by the names `shown` gives them (a
    report that prints its scratch folder wrote a temporary folder of this machine into the docs)."""
    named = [
        (ctx.workdir, "WORKDIR"),
        (ctx.real_tree, "REAL_TREE"),
        (ctx.msprobe, "MSPROBE"),
        (ctx.before, "BEFORE"),
    ]
    for value, name in sorted(
        ((str(v), n) for v, n in named if v and str(v) not in (".", "/")), key=lambda x: -len(x[0])
    ):
        text = text.replace(value, name)
    return text.replace(str(ROOT) + "/", "")


def parse_output(stdout: str) -> tuple[list[tuple[str, str, str, str]], str]:
    """The BENCH-SUMMARY rows and the report of a script's standard output. Without a BENCH-REPORT
    line the whole output is the report, shown as preformatted text."""
    rows, lines, report_at = [], [], None
    for line in stdout.splitlines():
        if line.startswith(emit.SUMMARY + "\t"):
            cells = [*line.split("\t")[1:], "", "", "", ""]
            rows.append((cells[0], cells[1], cells[2], cells[3] or "-"))
        elif line.strip() == emit.REPORT:
            report_at = len(lines)
        else:
            lines.append(line)
    if report_at is not None:
        return rows, "\n".join(lines[report_at:]).strip() + "\n"
    text = "\n".join(lines).strip()
    return rows, (f"```text\n{text}\n```\n" if text else "")


def run_one(bench: suite.Benchmark, ctx: suite.Context, quick: bool, timeout: float, logs: Path) -> Outcome:
    """Run one benchmark in a fresh process; its output goes to logs/<name>.out and .err."""
    outcome = Outcome(bench)
    reasons = suite.missing_needs(bench, ctx)
    cmd = suite.command(bench, ctx, quick, sys.executable) if not reasons else []
    outcome.command = shown(cmd, ctx) if cmd else f"python bench/{bench.script.name}"
    if reasons:
        outcome.not_run = "; ".join(reasons)
        return outcome
    (ctx.workdir / bench.name).mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / f"{bench.name}.out", logs / f"{bench.name}.err"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    start_load, start = os.getloadavg()[0], time.monotonic()
    with out_path.open("w") as out, err_path.open("w") as err:
        try:
            code = subprocess.run(
                cmd, cwd=ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    outcome.seconds = time.monotonic() - start
    outcome.load = (start_load, os.getloadavg()[0])
    stdout = scrubbed(out_path.read_text(errors="replace"), ctx)
    outcome.rows, outcome.report = parse_output(stdout)
    if code != 0:
        outcome.failed = True
        tail = err_path.read_text(errors="replace").strip().splitlines()[-STDERR_TAIL:]
        why = f"timed out after {timeout:.0f} s" if code is None else f"exit status {code}"
        outcome.not_run = f"`{outcome.command}` failed ({why})"
        outcome.report = "```text\n" + "\n".join(tail or ["(nothing on standard error)"]) + "\n```\n"
    return outcome


def section_text(o: Outcome, day: str, quick: bool, where: str = "") -> str:
    """The generated block of one benchmark's section; `where` is the machine and commit."""
    if o.not_run:
        text = f"*Not run: {o.not_run} ({day}).*\n"
        return text + ("\n" + o.report if o.failed and o.report else "")
    label = "quick run (small sizes: checks the script, not a figure)" if quick else "Run"
    head = (
        f"*{label} {day}: `{o.command}`, {o.seconds:.0f} s, load average {o.load[0]:.2f} at start, "
        f"{o.load[1]:.2f} at end{'; ' + where if where else ''}.*\n"
    )
    return head + "\n" + (o.report or "(the script printed no report)\n")


def summary_rows(o: Outcome, day: str) -> list[str]:
    """The Summary's rows of one benchmark: one per headline figure, or one saying why there are none."""
    name = f"`{o.bench.name}`"
    if o.not_run:
        return [f"| {name} | **not run:** {o.not_run} | | | | {day} |"]
    if not o.rows:
        return [f"| {name} | (no headline figure printed; see its section) | | | | {day} |"]
    return [
        f"| {name} | {fig} | {target} | {measured} | {met} | {day} |" for fig, target, measured, met in o.rows
    ]


def old_rows(block: str | None) -> dict[str, list[str]]:
    """Rows of an existing Summary block, by benchmark name, to keep those this run did not touch."""
    rows: dict[str, list[str]] = {}
    for line in (block or "").splitlines():
        if line.startswith("| `") and "` |" in line:
            rows.setdefault(line[3 : line.index("` |")], []).append(line)
    return rows


def summary_text(outcomes: list[Outcome], previous: str | None, head: str, day: str) -> str:
    """The generated Summary: the run's header, then every registered benchmark's rows in registry
    order, this run's where it ran one, the last run's (with their date) where not."""
    kept = old_rows(previous)
    fresh = {o.bench.name: o for o in outcomes}
    lines = [head, "", "| benchmark | figure | target | measured | met | run |", "|---|---|---|---|---|---|"]
    for bench in suite.BENCHMARKS:
        if bench.kept:
            continue
        if bench.name in fresh:
            lines += summary_rows(fresh[bench.name], day)
        else:
            lines += kept.get(bench.name, [f"| `{bench.name}` | not run yet | | | | |"])
    kept_names = ", ".join(f"`{b.name}`" for b in suite.BENCHMARKS if b.kept)
    if kept_names:
        lines += [
            "",
            f"Not generated yet: {kept_names}. Their figures are in their sections, measured by hand; "
            "their rows will come from their BENCH-SUMMARY lines.",
        ]
    return "\n".join(lines) + "\n"


def readme_text(doc: str) -> str:
    """The README's speed line: the Summary rows of README_PICKS, as the docs now hold them."""
    rows = old_rows(docs_block.block_text(doc, SUMMARY_BLOCK))
    picked = []
    for label, bench, start in README_PICKS:
        for line in rows.get(bench, []):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[1].startswith(start):
                target = f", target {cells[2]}" if cells[2] not in ("", "-") else ""
                picked.append(f"{label} {cells[3]} ({cells[5]}{target})")
                break
    if not picked:
        return "Speed: not measured by `python -m bench` yet ([docs/benchmarks.md](docs/benchmarks.md)).\n"
    return (
        "Speed on a 2-core machine, each figure against a baseline measured in the same run "
        "([docs/benchmarks.md](docs/benchmarks.md)): " + "; ".join(picked) + ".\n"
    )


def write_docs(
    outcomes: list[Outcome],
    docs: Path,
    readme: Path | None,
    head: str,
    day: str,
    quick: bool,
    where: str = "",
) -> None:
    """Rewrite the Summary block and the block of every benchmark that was requested (`where`: the
    machine and commit, for each section's header)."""
    doc = docs.read_text(encoding="utf-8")
    for o in outcomes:
        if not o.bench.kept:
            doc = docs_block.replace_block(doc, o.bench.name, section_text(o, day, quick, where))
    doc = docs_block.replace_block(
        doc, SUMMARY_BLOCK, summary_text(outcomes, docs_block.block_text(doc, SUMMARY_BLOCK), head, day)
    )
    docs.write_text(doc, encoding="utf-8")
    if readme is not None:
        text = readme.read_text(encoding="utf-8")
        readme.write_text(docs_block.replace_block(text, README_BLOCK, readme_text(doc)), encoding="utf-8")


def select(only: str, skip: str) -> list[suite.Benchmark]:
    """The benchmarks to run: --only's (kept ones included), else every one not kept; minus --skip."""

    def names(text: str) -> list[str]:
        found = [n.strip().removesuffix(".py") for n in text.split(",") if n.strip()]
        unknown = [n for n in found if n not in suite.BY_NAME]
        if unknown:
            raise SystemExit(f"unknown benchmark(s): {', '.join(unknown)} (python -m bench --list)")
        return found

    chosen = [suite.BY_NAME[n] for n in names(only)] if only else [b for b in suite.BENCHMARKS if not b.kept]
    skipped = set(names(skip))
    return [b for b in chosen if b.name not in skipped]


def list_benchmarks() -> str:
    """--list: every benchmark, what it needs, whether a plain run runs it; then the helpers."""
    lines = []
    for b in suite.BENCHMARKS:
        needs = ", ".join(suite.NEEDS[n][0] for n in b.needs) or "-"
        default = "kept by hand, runs with --only" if b.kept else "runs by default"
        lines.append(f"{b.name:24} {default:32} needs: {needs}")
    lines.append("")
    lines += [f"{name + '.py':24} helper: {what}" for name, what in suite.HELPERS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the benchmarks, rewrite the docs; the exit status (see the docstring)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default="", help="comma-separated benchmarks (python -m bench --list)")
    ap.add_argument("--skip", default="", help="comma-separated benchmarks not to run")
    ap.add_argument(
        "--quick", action="store_true", help="small sizes; writes docs only with an explicit --docs"
    )
    ap.add_argument("--list", action="store_true", help="list the benchmarks and helpers, run nothing")
    ap.add_argument("--no-docs", action="store_true", help="print only; write neither docs nor README")
    ap.add_argument("--docs", type=Path, help=f"the file to rewrite (default {DOCS.relative_to(ROOT)})")
    ap.add_argument(
        "--readme",
        type=Path,
        help="the README whose speed line to rewrite (default README.md "
        "with the default --docs, none otherwise)",
    )
    ap.add_argument("--workdir", type=Path, help="scratch space (default: a temp dir, removed after)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per benchmark (default 3600)")
    ap.add_argument(
        "--real-tree", default="", help="a real dump tree for real_tree (bench/ms_resnet_tree.py)"
    )
    ap.add_argument("--torch-python", default="", help="a Python that has torch, for bench_pt")
    ap.add_argument("--msprobe", default="", help="the msprobe executable, for bench_compare_msprobe")
    ap.add_argument("--before", default="", help="a checkout of an earlier commit, for bench_server_compare")
    args = ap.parse_args(argv)
    if args.list:
        print(list_benchmarks())
        return 0

    chosen = select(args.only, args.skip)
    docs: Path | None = args.docs or (None if args.quick else DOCS)
    readme = args.readme or (README if args.docs is None else None)
    if args.no_docs:
        docs = readme = None
    if args.quick and docs is None and not args.no_docs:
        print("--quick: docs are not written (small sizes are not figures); --docs FILE writes a copy")

    ctx = suite.Context.from_environment(
        real_tree=args.real_tree, torch_python=args.torch_python, msprobe=args.msprobe, before=args.before
    )
    own_workdir = args.workdir is None
    ctx.workdir = Path(tempfile.mkdtemp(prefix="dumpcat-bench-")) if own_workdir else args.workdir.resolve()
    logs = ctx.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    day = now.strftime("%Y-%m-%d") + (" (quick)" if args.quick else "")
    commit, host = revision(), machine()  # what is measured: the tree as the run starts
    given = argv if argv is not None else sys.argv[1:]
    argv_shown = "python -m bench" + shown([sys.executable, *given], ctx).removeprefix("python")
    load_start, start = os.getloadavg(), time.monotonic()
    outcomes = []
    try:
        for i, bench in enumerate(chosen, 1):
            print(f"[{i}/{len(chosen)}] {bench.name} ...", end=" ", flush=True)
            o = run_one(bench, ctx, args.quick, args.timeout, logs)
            outcomes.append(o)
            print(f"not run: {o.not_run}" if o.not_run else f"ok ({o.seconds:.0f} s)", flush=True)
            for fig, target, measured, met in o.rows:
                print(f"    {fig}: {measured} (target {target}, met {met})")
            if o.failed:
                print("    " + o.report.replace("\n", "\n    ").rstrip())
    finally:
        if own_workdir:
            shutil.rmtree(ctx.workdir, ignore_errors=True)
        else:
            print(f"logs: {logs}")
    seconds, load_end = time.monotonic() - start, os.getloadavg()
    ran = [o.bench.name for o in outcomes if not o.not_run]
    not_ran = [o.bench.name for o in outcomes if o.not_run]
    head = (
        f"*Generated by `python -m bench` (bench/__main__.py). Last run, started {now:%Y-%m-%d %H:%M} UTC: "
        f"`{argv_shown}`, {seconds / 60:.1f} min, commit {commit}; {host}; load average "
        f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end. It ran {len(ran)} of {len(outcomes)}"
        f"{' (not run: ' + ', '.join(not_ran) + ')' if not_ran else ''}. A row of a benchmark it did not "
        "run keeps the date of its own run.*"
    )
    print(
        f"\n{len(ran)} of {len(outcomes)} ran in {seconds / 60:.1f} min; load average "
        f"{load_start[0]:.2f} -> {load_end[0]:.2f}"
    )
    if docs is not None:
        write_docs(outcomes, docs, readme, head, day, args.quick, f"commit {commit}; {host}")
        print(f"rewrote {docs}" + (f" and {readme}" if readme else ""))
    if any(o.failed for o in outcomes):
        return 1
    return 2 if not_ran else 0


if __name__ == "__main__":
    sys.exit(main())
