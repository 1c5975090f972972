"""`dumpcat report` at scale: page size and the time a browser takes to show it.

Synthetic trees (bench/synth.py; 1% of float tensors hold NaN/Inf at random, so thousands of
operators are anomalous somewhere) are ingested, in two layouts: 2 ranks × 20 iterations (25,000
tensors a step), and 8 ranks × 250 iterations, which fills every cap of the page (150 operators ×
120 iteration ranges × 8 ranks). The report is written and the page is opened in headless
Chromium (Debian's `chromium` through chromedriver, tests/report_browser.py):

- cold: the first page a freshly started browser opens (plotly.js compiled from nothing), one new
  browser per measurement;
- warm: the same page opened again in that browser.

Each time is navigation start -> every figure drawn (the page's `dumpcat-rendered` mark, after the
load event). The page must load with no console error and no network request. The committed
nan_log sample is measured the same way, as the small end. Targets: < 10 MB and < 3 s at 10^6.

    python bench/bench_report.py                               # 10^6 tensors, temp dir (~9 GB)
    python bench/bench_report.py --workdir BIG_DIR             # keep / reuse the tree and catalog
    python bench/bench_report.py --tensors 100000 --layout 2x20

The report (markdown) is printed; `python -m bench` puts it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
import synth  # noqa: E402

from catalog.api import Catalog  # noqa: E402
from tests.report_browser import Browser  # noqa: E402

SAMPLE = ROOT / "tests" / "data" / "ms210" / "nan_log" / "dump"


def catalog_of(work: Path, tensors: int, ranks: int, iterations: int) -> tuple[Path, dict]:
    """A catalog of one synthetic run (made once per work dir), and how long it took."""
    tree, cat = work / f"tree_{tensors}_{ranks}x{iterations}", work / f"cat_{tensors}_{ranks}x{iterations}"
    made: dict = {}
    if not (tree / "rank_0").exists():
        s = synth.generate(tree, tensors, ranks=ranks, iterations=iterations)
        made["generate_s"] = s.seconds
    if not (cat / "snapshot.json").exists():
        t = time.perf_counter()
        Catalog.open(cat, create=True).ingest(tree, run="run0")
        made["ingest_s"] = time.perf_counter() - t
    return cat, made


def measure(cat: Path, out: Path, loads: int) -> dict:
    """Write the report of `cat`'s run, then open it `loads` times cold and warm."""
    t = time.perf_counter()
    with Catalog.open(cat) as c:
        rows = c.sql("SELECT count(*) FROM tensors").column(0)[0].as_py()
        summary = c.report(out)
    write_s = time.perf_counter() - t
    cold, warm = [], []
    for _ in range(loads):
        with Browser() as b:
            first = b.open(out)
            again = b.open(out)
        for load in (first, again):
            if load.errors or load.network_requests:
                raise SystemExit(f"{out}: console errors {load.errors}, requests {load.network_requests}")
        cold.append(first.rendered_seconds)
        warm.append(again.rendered_seconds)
    return {
        "tensors": rows,
        "write_s": write_s,
        "mb": out.stat().st_size / 1e6,
        "cold": cold,
        "warm": warm,
        "steps": summary.anomalous_steps,
    }


def markdown(results: list[tuple[str, dict]], params: dict) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{params['load']} at the start; Chromium {params['chromium']}; `python bench/bench_report.py "
        f"{params['argv']}`.",
        "",
        "| catalog | tensors | report written | page size | load, cold browser (median / max) "
        "| load, warm (median) | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results:
        target = "< 10 MB, < 3 s" if r["tensors"] >= 1_000_000 else ""
        lines.append(
            f"| {name} | {r['tensors']:,} | {r['write_s']:.2f} s | {r['mb']:.1f} MB "
            f"| {statistics.median(r['cold']):.2f} s / {max(r['cold']):.2f} s "
            f"| {statistics.median(r['warm']):.2f} s | {target} |"
        )
    lines += [
        "",
        f"Load: navigation start to every figure drawn, {params['loads']} fresh browsers each; no console "
        "error and no network request in any load. Of the page, plotly.js is "
        f"{params['plotly_mb']:.1f} MB; a page holding only plotly.js takes {params['plotly_cold']:.2f} s "
        f"cold and {params['plotly_warm']:.2f} s warm in the same browser (the floor of every load above).",
        "",
    ]
    return "\n".join(lines)


def plotly_only(work: Path, loads: int) -> tuple[float, float, float]:
    """The floor: a page holding only plotly.js."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    page = work / "plotly_only.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><script>" + js + "</script><script>"
        "performance.mark('dumpcat-rendered');document.documentElement.dataset.rendered='true';"
        "</script></head><body></body></html>",
        encoding="utf-8",
    )
    cold, warm = [], []
    for _ in range(loads):
        with Browser() as b:
            cold.append(b.open(page).rendered_seconds)
            warm.append(b.open(page).rendered_seconds)
    return len(js) / 1e6, statistics.median(cold), statistics.median(warm)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tensors", type=int, default=1_000_000)
    p.add_argument(
        "--layout", action="append", help="RANKSxITERATIONS of a synthetic tree (default: 2x20 and 8x250)"
    )
    p.add_argument("--loads", type=int, default=3, help="fresh browsers per page (default 3)")
    p.add_argument("--workdir", help="tree, catalog and pages (default: a temp dir, deleted)")
    a = p.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dumpcat-report-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    load = "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
    try:
        import subprocess

        chromium = subprocess.run(
            [shutil.which("chromium") or "chromium", "--version"], capture_output=True, text=True
        ).stdout.split()
        sample_cat = work / "cat_sample"
        if not (sample_cat / "snapshot.json").exists():
            Catalog.open(sample_cat, create=True).ingest(SAMPLE, run="nan_log")
        results = [("nan_log sample", measure(sample_cat, work / "sample.html", a.loads))]
        print(f"# sample: {results[-1][1]}", flush=True)
        for layout in a.layout or ["2x20", "8x250"]:
            ranks, iterations = (int(v) for v in layout.split("x"))
            big, made = catalog_of(work, a.tensors, ranks, iterations)
            print(f"# catalog {big.name}: {made}", flush=True)
            results.append(
                (
                    f"synthetic, {ranks} ranks × {iterations} iterations",
                    measure(big, work / f"big_{layout}.html", a.loads),
                )
            )
            print(f"# {layout}: {results[-1][1]}", flush=True)
        plotly_mb, plotly_cold, plotly_warm = plotly_only(work, a.loads)
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    given = argv if argv is not None else sys.argv[1:]
    shown_argv = " ".join("DIR" if x.startswith("/") else x for x in given)
    md = markdown(
        results,
        {
            "argv": shown_argv, "load": load, "loads": a.loads,
            "chromium": chromium[1] if len(chromium) > 1 else "?",
            "plotly_mb": plotly_mb, "plotly_cold": plotly_cold, "plotly_warm": plotly_warm,
        },
    )  # fmt: skip
    for name, r in results[1:]:
        big = r["tensors"] >= 1_000_000
        cold = statistics.median(r["cold"])
        emit.summary(
            f"`dumpcat report` of {r['tensors']:,} tensors ({name}): page size, cold load",
            "< 10 MB, < 3 s" if big else "",
            f"{r['mb']:.1f} MB, {cold:.2f} s",
            (r["mb"] < 10 and cold < 3) if big else None,
        )
    emit.report_follows()
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
