"""The benchmarks `python -m bench` runs: one entry per script of bench/, and the scripts that are not
benchmarks (generators, probes, the runner's own modules).

Every `bench/*.py` is in exactly one of BENCHMARKS and HELPERS (tests/test_bench_suite.py checks
it), so a new benchmark cannot be left out of the run and out of docs/benchmarks.md by mistake.

An entry's arguments may hold placeholders the runner fills: ``{workdir}`` (a scratch folder of the
benchmark's own, under the runner's ``--workdir``), ``{real_tree}``, ``{msprobe}`` and ``{before}``
(from the runner's options of the same names, or the environment variables of NEEDS)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script: how to run it, what it needs, and where its figures go."""

    name: str  # the script's stem, and the name of its block in docs/benchmarks.md
    heading: str  # the heading of the section that holds its block
    args: str = ""  # a normal run (split like a shell line; placeholders filled by `command`)
    quick: str = ""  # small sizes: checks that the script and the runner work
    needs: tuple[str, ...] = ()  # keys of NEEDS
    python: str = ""  # "torch": run under the Python given by --torch-python, not this one
    kept: str = ""  # non-empty: the section's figures are kept by hand for now (why); not run by default

    @property
    def script(self) -> Path:
        return HERE / f"{self.name}.py"


@dataclass
class Context:
    """What the runner was told about this machine: paths the needs check."""

    real_tree: str = ""
    torch_python: str = ""
    msprobe: str = ""
    before: str = ""
    workdir: Path = Path()

    @classmethod
    def from_environment(cls, **given: str) -> Context:
        """Options given on the command line, else the environment variables NEEDS names."""
        env = {
            "real_tree": "DUMPCAT_BENCH_REAL_TREE",
            "torch_python": "DUMPCAT_BENCH_TORCH_PYTHON",
            "msprobe": "DUMPCAT_BENCH_MSPROBE",
            "before": "DUMPCAT_BENCH_BEFORE",
        }
        return cls(**{key: given.get(key) or os.environ.get(var, "") for key, var in env.items()})


def _spark(ctx: Context) -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None:
        return "no Java on PATH (Spark needs a JVM: apt-get install openjdk-17-jdk-headless)"
    return None


def _chromium(ctx: Context) -> str | None:
    missing = [tool for tool in ("chromium", "chromedriver") if shutil.which(tool) is None]
    if not missing:
        return None
    return f"no {' and no '.join(missing)} on PATH (apt-get install chromium chromium-driver)"


def _torch(ctx: Context) -> str | None:
    if not ctx.torch_python:
        return "no Python with torch given (--torch-python or DUMPCAT_BENCH_TORCH_PYTHON)"
    probe = subprocess.run([ctx.torch_python, "-c", "import torch"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"{ctx.torch_python} cannot import torch"


def _msprobe(ctx: Context) -> str | None:
    if not ctx.msprobe:
        return "no msprobe executable given (--msprobe or DUMPCAT_BENCH_MSPROBE)"
    return None if os.access(ctx.msprobe, os.X_OK) else f"{ctx.msprobe} is not an executable"


def _real_tree(ctx: Context) -> str | None:
    if not ctx.real_tree:
        return "no real dump tree given (--real-tree or DUMPCAT_BENCH_REAL_TREE; bench/ms_resnet_tree.py)"
    return None if Path(ctx.real_tree).is_dir() else f"{ctx.real_tree} is not a folder"


def _before(ctx: Context) -> str | None:
    if not ctx.before:
        return "no earlier checkout given (--before or DUMPCAT_BENCH_BEFORE; `git worktree add DIR COMMIT`)"
    return None if (Path(ctx.before) / "catalog").is_dir() else f"{ctx.before} is not a dumpcat checkout"


def _disk(gb: int) -> Callable[[Context], str | None]:
    def check(ctx: Context) -> str | None:
        free = shutil.disk_usage(ctx.workdir if ctx.workdir.exists() else "/").free / 2**30
        return None if free >= gb else f"{free:.0f} GiB free in the workdir, needs {gb} GiB"

    return check


# need -> (what it is, a check that returns why it is missing, or None)
NEEDS: dict[str, tuple[str, Callable[[Context], str | None]]] = {
    "spark": ("pyspark and a Java runtime", _spark),
    "chromium": ("Debian's chromium and chromium-driver", _chromium),
    "torch": ("a Python with torch (--torch-python)", _torch),
    "msprobe": ("an msprobe executable (--msprobe)", _msprobe),
    "real-tree": ("a real dump tree (--real-tree; bench/ms_resnet_tree.py)", _real_tree),
    "before": ("a checkout of an earlier commit (--before)", _before),
    "disk-10": ("10 GiB free in the workdir", _disk(10)),
    "disk-40": ("40 GiB free in the workdir", _disk(40)),
}


BENCHMARKS: list[Benchmark] = [
    Benchmark(
        "bench_core",
        "Core: ingest, statistics, queries, fetch, memory (bench/bench_core.py)",
        args="--rows-1m --workdir {workdir}",
        quick="--tensors 4000 --stats-tensors 1000 --stats-big-tensors 20 --repeat 1 --query-runs 3 "
        "--lookups 200 --workdir {workdir}",
        needs=("disk-10",),
    ),
    Benchmark("bench_ir", "IR parsing (bench/bench_ir.py)", quick="--nodes 5000 --runs 1"),
    Benchmark(
        "bench_speed",
        "Speed: flat tables, fused statistics, fetch, start-up, memory (bench/bench_speed.py)",
        args="--workdir {workdir}",
        quick="--scale 5000 --only queries,tensor,startup,memory --repeat 1 --query-runs 3 --lookups 100 "
        "--workdir {workdir}",
    ),
    Benchmark(
        "bench_stats",
        "Statistics against a naive loop (bench/bench_stats.py)",
        args="--mode naive",  # its vs-read mode is bench_speed's part 2
        quick="--mode naive --files 500 5 --repeat 1",
    ),
    Benchmark(
        "real_tree",
        "A real MindSpore tree (bench/real_tree.py)",
        args="{real_tree} --work {workdir}",
        quick="{real_tree} --work {workdir} --repeat 1",
        needs=("real-tree",),
    ),
    Benchmark(
        "bench_watch",
        "Live watcher (bench/bench_watch.py)",
        args="--workdir {workdir}",
        quick="--rates 200 --duration 3 --workdir {workdir}",
    ),
    Benchmark(
        "bench_raw",
        "Ascend raw dumps (bench/bench_raw.py)",
        args="--workdir {workdir}",
        quick="--quick --workdir {workdir}",
    ),
    Benchmark(
        "bench_device_format",
        "Device formats (bench/bench_device_format.py)",
        quick="--repeat 1 --only NC1HWC0",
    ),
    Benchmark(
        "bench_msprobe", "msprobe dump.json (bench/bench_msprobe.py)", quick="--entries 5000 --repeat 1"
    ),
    Benchmark(
        "bench_dump_json_memory",
        "A 250 MB dump.json, streamed (bench/bench_dump_json_memory.py)",
        quick="--entries 10000 --repeat 1",
    ),
    Benchmark(
        "bench_pt", "`.pt` tensors (bench/bench_pt.py)", quick="--rounds 20", needs=("torch",), python="torch"
    ),
    Benchmark(
        "bench_hostile_ingest",
        "Ingest of a hostile dump (bench/bench_hostile_ingest.py)",
        args="--repeat 5",
        quick="--repeat 1",
    ),
    Benchmark(
        "bench_writer_memory",
        "The writer's memory cap (bench/bench_writer_memory.py)",
        args="--workdir {workdir}",
        quick="--tensors 2000 --caps 64MB --rounds 1 --workdir {workdir}",
    ),
    Benchmark("bench_open", "Opening a catalog (bench/bench_open.py)", quick="--rounds 1"),
    Benchmark(
        "bench_nonfinite",
        "first_anomaly over the NaN/Inf sidecars of the stats files (bench/bench_nonfinite.py)",
        quick="--rows 20000 --rounds 1 --runs 1 --shares 2",
    ),
    Benchmark("bench_many_runs", "Many runs in one catalog (bench/bench_many_runs.py)", quick="--rounds 1"),
    Benchmark("bench_tensors", "Many tensors in one call (bench/bench_tensors.py)", quick="--rounds 1"),
    Benchmark(
        "bench_nan_origin",
        "Which rank started it: nan_origin against first_anomaly (bench/bench_nan_origin.py)",
        quick="--iterations 2 --step-rows 500 --rounds 3",
    ),
    Benchmark(
        "bench_report",
        "HTML report (bench/bench_report.py)",
        args="--workdir {workdir}",
        quick="--tensors 5000 --layout 2x20 --loads 1 --workdir {workdir}",
        needs=("chromium", "disk-10"),
    ),
    Benchmark(
        "bench_spark_jobs",
        "Statistics on Spark (bench/bench_spark_jobs.py)",
        args="--workdir {workdir}",
        quick="--small 2000 --big 0 --repeat 1 --workdir {workdir}",
        needs=("spark",),
    ),
    Benchmark(
        "bench_scale",
        "Scale: 10^6, 10^7 and 10^8 statistic rows (bench/bench_scale.py)",
        args="--rows 1e6 --workdir {workdir}",
        quick="--rows 2e4 --step-rows 500 --iterations 10 --engines duckdb --runs 1 --workdir {workdir}",
        needs=("spark",),
    ),
    # compare: part of every plain run (bench_compare_msprobe where msprobe is given)
    Benchmark(
        "bench_compare",
        "Run-vs-run comparison (bench/bench_compare.py)",
        quick="--scale 0.01 --repeat 1",
    ),
    Benchmark(
        "bench_compare_msprobe",
        "Against msprobe compare (bench/bench_compare_msprobe.py)",
        args="--msprobe {msprobe}",
        quick="--msprobe {msprobe} --rounds 1 --repeat-entries 1",
        needs=("msprobe",),
    ),
    # the server sections: some run on request (--only), their figures kept by hand for now
    Benchmark(
        "bench_dialect",
        "The dumpcat:// SQLAlchemy dialect against Catalog.sql (bench/bench_dialect.py)",
        args="--workdir {workdir}",
        quick="--tensors 2000 --rounds 1 --reps 2 --workdir {workdir}",
    ),
    Benchmark(
        "bench_server",
        "Queries/s against in-process DuckDB (bench/bench_server.py)",
        quick="--rounds 1 --slice 0.5",
    ),
    # runs where an earlier checkout is given (--before); elsewhere "not run", as any missing need
    Benchmark(
        "bench_server_compare",
        "Containment cost against an earlier checkout (bench/bench_server_compare.py)",
        args="--before {before}",
        quick="--before {before} --rounds 1 --slice 0.5",
        needs=("before",),
    ),
    Benchmark(
        "bench_serve_clients",
        "Clients and result formats (bench/bench_serve_clients.py)",
        args="--rounds 3 --tries 5 --workdir {workdir}",
        quick="--rows 20000 --rounds 1 --tries 1 --workdir {workdir}",
    ),
    Benchmark(
        "bench_pgcodec",
        "Encoding results for the wire (bench/bench_pgcodec.py)",
        quick="--rows 20000 --repeat 1 --calls 10000",
    ),
    Benchmark(
        "bench_contained_scan",
        "What scanning Arrow datasets costs at scale (bench/bench_contained_scan.py)",
        quick="--rows 20000",
    ),
    Benchmark(
        "bench_worker_start",
        "Starting workers (bench/bench_worker_start.py)",
        args="--rounds 3",
        quick="--rounds 1",
    ),
    Benchmark("bench_serve_attacks", "Availability attacks (bench/bench_serve_attacks.py)"),
]

# bench/*.py that are not benchmarks, and what each is for
HELPERS: dict[str, str] = {
    "__main__": "the runner: python -m bench",
    "suite": "this registry",
    "emit": "the BENCH-SUMMARY / BENCH-REPORT lines a benchmark prints",
    "docs_block": "replaces the generated blocks of docs/benchmarks.md and README.md",
    "synth": "writes synthetic MindSpore dump trees (benchmarks and tests)",
    "ms_resnet_tree": "writes the real MindSpore tree that real_tree.py measures (needs MindSpore)",
    "memory_phases": "a probe: which step of one ingest holds its memory peak",
    "phases": "times the methods an ingest spends its time in (its flat files, its phases)",
    "report_screenshots": "makes the screenshots of docs/report/ (not a benchmark)",
}

BY_NAME: dict[str, Benchmark] = {b.name: b for b in BENCHMARKS}


def missing_needs(bench: Benchmark, ctx: Context) -> list[str]:
    """Why `bench` cannot run here: one reason per need that is not met (empty: it can run)."""
    reasons = []
    for need in bench.needs:
        reason = NEEDS[need][1](ctx)
        if reason:
            reasons.append(reason)
    return reasons


def command(bench: Benchmark, ctx: Context, quick: bool, python: str) -> list[str]:
    """The command line of one run: the interpreter, the script and its arguments, placeholders filled."""
    values = {
        "workdir": str(ctx.workdir / bench.name),
        "real_tree": ctx.real_tree,
        "msprobe": ctx.msprobe,
        "before": ctx.before,
    }
    interpreter = ctx.torch_python if bench.python == "torch" else python
    args = [arg.format(**values) for arg in shlex.split(bench.quick if quick else bench.args)]
    return [interpreter, str(bench.script), *args]
