"""`dumpcat report` on the committed real dumps, opened in real headless Chromium.

Each sample's catalog is made by a real ingest (and for the pair, a real `dumpcat compare`), its
report written by the CLI, and the page opened by Debian's chromium through chromedriver: it must
load with no console error and no network request, draw every figure, not be blank, and show the
same first anomalies as the catalog's own `first_anomaly` view, which must also be the known fact
of the sample (its README: nan_log's `x = self.log(x)` at train.py:16, control_flow's
`x = self.sqrt(x)` at train.py:34, msprobe's `torch.sqrt` on rank 1, the compare pair's
`x = self.fc2(x)` at line 89).

`bench/report_screenshots.py` makes docs/report/*.png from the same SAMPLES; the tests never write
into the repository.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from catalog.api import Catalog
from catalog.report import Limits, ReportError, gather, write_report
from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import DATA, MS210, REPO, dump_of
from tests.report_browser import Browser

ROOT = REPO
CLI = [sys.executable, "-m", "catalog.cli"]
PREFIX = "Default/network-WithLossCell/_backbone-Net/"


@dataclass(frozen=True)
class Sample:
    """A committed dump (or pair) and what its README says went wrong first."""

    dumps: tuple[tuple[Path, str], ...]  # (dump root, run name)
    run: str
    against: str | None = None
    # (rank, iteration, operator, line, code) of the first anomalous step, from the sample's README
    first: tuple[int, int, str, int | None, str] | None = None
    # iteration, operator, line of the first output that differs from the baseline (README)
    first_difference: tuple[int, str, int] | None = None


SAMPLES = {
    "nan_log": Sample(
        ((dump_of("nan_log"), "nan_log"),), "nan_log", first=(0, 0, PREFIX + "Log-op0", 16, "x = self.log(x)")
    ),
    "control_flow": Sample(
        ((dump_of("control_flow"), "control_flow"),),
        "control_flow",
        first=(0, 0, PREFIX + "Sqrt-op0", 34, "x = self.sqrt(x)"),
    ),
    "multigraph": Sample(((dump_of("multigraph"), "multigraph"),), "multigraph"),
    "div_late": Sample(
        ((dump_of("div_late"), "div_late"),),
        "div_late",
        # step 0 is clean; at step 1 a zero scale makes the Div's output ±Inf (no NaN)
        first=(0, 1, "Default/network-WithLoss/_backbone-Net/Div-op0", 16, "x = self.div(x, scale)"),
    ),
    "msprobe_2ranks": Sample(
        ((DATA / "msprobe" / "pt_l1_statistics_2ranks", "msprobe"),),
        "msprobe",
        # rank 1 is the "nan rank": its Torch.sqrt output is the first NaN at step 1
        first=(1, 1, "Torch.sqrt.0.forward", None, "root = torch.sqrt(h + offset)"),
    ),
    "compare": Sample(
        ((MS210 / "compare" / "base" / "dump", "base"), (MS210 / "compare" / "cast" / "dump", "cast")),
        "cast",
        against="base",
        first_difference=(0, PREFIX + "fc2-Dense/MatMul-op0", 89),
    ),
}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd)


def build_sample(name: str, folder: Path) -> tuple[Path, Path]:
    """Ingest the sample into folder/cat (compare the pair) and write its report with the CLI."""
    s = SAMPLES[name]
    cat = folder / "cat"
    for dump, run in s.dumps:
        Catalog.open(cat, create=True).ingest(dump, run=run)
    args = ["--run", s.run]
    if s.against:
        Catalog.open(cat).compare(s.run, s.against, workers=1)
        args += ["--against", s.against]
    out = folder / f"{name}.html"
    # nan_log's report is written by a real `dumpcat` process, the others by the same command code
    # in this process (the start-up path is the same for every sample)
    report = cli if name == "nan_log" else dumpcat_in_process
    proc = report("report", str(cat), *args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {out} ("), proc.stdout
    return cat, out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in cache:
            cache[name] = build_sample(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def figure_data(browser: Browser, div_id: str) -> list[dict]:
    """The traces plotly drew in the page (typed arrays decoded), as JSON."""
    text = browser.driver.execute_script(
        "const gd = document.getElementById(arguments[0]);"
        "if (!gd || !gd._fullData) return null;"
        "const plain = v => (v && typeof v === 'object' && typeof v.length === 'number')"
        "    ? Array.from(v, plain) : v;"
        "return JSON.stringify(gd._fullData.map(t => ({type: t.type, name: t.name, meta: t.meta,"
        "  visible: t.visible, showlegend: t.showlegend, x: plain(t.x), y: plain(t.y), z: plain(t.z),"
        "  hovertext: plain(t.hovertext)})));",
        div_id,
    )
    return json.loads(text) if text else []


def heatmap_traces(browser: Browser) -> list[dict]:
    """Every rank's heat map as drawn: each picked in turn, as the page's rank menu does."""
    n = browser.driver.execute_script("return document.getElementById('heatmap-figure').data.length")
    traces = []
    for i in range(n):
        browser.driver.execute_async_script(
            "const done = arguments[arguments.length - 1], gd = document.getElementById('heatmap-figure');"
            "Plotly.restyle(gd, {visible: gd.data.map((t, j) => j === arguments[0])}).then(() => done(1));",
            i,
        )
        traces.append(next(t for t in figure_data(browser, "heatmap-figure") if t["visible"] is True))
    return traces


def not_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours, share of pixels that are not the most common colour) of a PNG."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 20)
    top = max(colours)[0]
    return len(colours), 1 - top / (img.width * img.height)


def has_colour(png: bytes, rgb: tuple[int, int, int], rect: dict) -> bool:
    """Whether the part of a full-page screenshot under an element's rect has this exact colour."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    box = (rect["x"], rect["y"], rect["x"] + rect["width"], rect["y"] + rect["height"])
    return any(c == rgb for _, c in img.crop(tuple(round(v) for v in box)).getcolors(maxcolors=1 << 20))


FIRST_RGB = (0xC1, 0x12, 0x1F)  # report_figures.FIRST: a first-anomaly cell
PROPAGATED_RGB = (0xF4, 0xA2, 0x61)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_report_opens_offline_and_shows_what_the_catalog_says(name, built, browser):
    sample = SAMPLES[name]
    cat_path, out = built(name)
    html = out.read_text(encoding="utf-8")
    # one self-contained file: plotly.js inline exactly once, nothing else linked or fetched
    from plotly.offline import get_plotlyjs

    assert html.count(get_plotlyjs()) == 1 and html.count("* plotly.js v") == 1
    assert not re.search(r"src=|<link|@import|url\(|https?:|wss?:", html.replace(get_plotlyjs(), ""))
    assert out.stat().st_size < 10e6

    page = browser.open(out, screenshot=True)
    assert page.errors == [], page.errors
    assert page.network_requests == [], page.network_requests
    assert page.url in page.requests
    assert browser.driver.execute_script("return window.dumpcatReport.rendered") >= 2  # heat map, trends
    colours, inked = not_blank(page.screenshot)
    assert colours > 50 and inked > 0.2, (colours, inked)

    cat = Catalog.open(cat_path)
    # The first-anomaly table is the catalog's first_anomaly view, step by step ...
    view = cat.sql(
        "SELECT rank, iteration, op_name, source_line, row_id FROM first_anomaly WHERE run = $run "
        "ORDER BY iteration, rank",
        {"run": sample.run},
    ).to_pylist()
    rows = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#first-anomaly tbody tr'), tr => ({id: tr.id,"
        " op: tr.dataset.op, line: tr.dataset.line, row_id: tr.dataset.rowId,"
        " cells: Array.from(tr.cells, td => td.innerText)}));"
    )
    assert [(r["id"], r["op"], r["line"]) for r in rows] == [
        (
            f"fa-{v['rank']}-{v['iteration']}",
            v["op_name"],
            "" if v["source_line"] is None else str(v["source_line"]),
        )
        for v in view
    ]
    for r, v in zip(rows, view, strict=True):
        assert v["op_name"] in r["cells"][2]  # the operator is shown, not only in an attribute
        if v["source_line"] is not None:
            assert r["cells"][7].endswith(f":{v['source_line']}")
        assert r["row_id"] == ("" if v["row_id"] is None else str(v["row_id"]))
    # ... and its first step is the sample's known fact, named in the page's words too.
    if sample.first:
        rank, iteration, op, line, code = sample.first
        known = [r for r in rows if r["id"] == f"fa-{rank}-{iteration}"]
        assert known and known[0]["op"] == op, rows
        if line is not None:
            assert known[0]["line"] == str(line) and known[0]["cells"][7].endswith(f":{line}")
        assert code in known[0]["cells"][8]
    else:
        assert view == []
        assert "holds NaN or Inf" in browser.text(".headline")[0]

    # The heat map: first-anomaly cells are exactly the view's steps; anomalous cells exactly the
    # (rank, operator, iteration) whose outputs hold NaN/Inf in `stats`.
    traces = heatmap_traces(browser)
    drawn = {}
    for t in traces:
        for y, row in zip(t["y"], t["z"], strict=True):
            for x, z in zip(t["x"], row, strict=True):
                if z is not None:
                    drawn[(t["meta"], y, int(x))] = z
    firsts = {(k, op, int(it)) for (k, op, it), z in drawn.items() if z == 2}
    assert firsts == {(v["rank"], v["op_name"], v["iteration"]) for v in view}
    anomalous = cat.sql(
        "SELECT DISTINCT rank, op_name, iteration FROM stats WHERE run = $run AND io <> 'input' "
        "AND iteration IS NOT NULL AND (has_nan OR has_inf)",
        {"run": sample.run},
    ).to_pylist()
    assert {k for k, z in drawn.items() if z >= 1} == {
        (a["rank"], a["op_name"], a["iteration"]) for a in anomalous
    }
    assert (
        len(traces)
        == cat.sql("SELECT count(DISTINCT rank) FROM stats WHERE run = $run", {"run": sample.run})
        .column(0)[0]
        .as_py()
    )
    if view:  # a click on a first-anomaly cell goes to its row of the table
        v = view[-1]
        browser.driver.execute_script(
            "const gd = document.getElementById('heatmap-figure');"
            "const trace = gd.data.find(t => t.meta === arguments[0]);"
            "gd.emit('plotly_click', {points: [{data: trace, x: arguments[1]}]});",
            v["rank"],
            str(v["iteration"]),
        )
        assert browser.driver.execute_script("return location.hash") == f"#fa-{v['rank']}-{v['iteration']}"
    rect = browser.driver.execute_script(  # the plot area, in page coordinates (not the colour bar)
        "const r = document.querySelector('#heatmap-figure .nsewdrag').getBoundingClientRect();"
        "return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height};"
    )
    shown = [z for (k, _, _), z in drawn.items() if k == traces[0]["meta"]]  # the rank on screen
    assert has_colour(page.screenshot, FIRST_RGB, rect) == (2 in shown)
    assert has_colour(page.screenshot, PROPAGATED_RGB, rect) == (1 in shown)

    # Trend lines: the first mover is the operator whose largest/smallest l2norm ratio over the
    # iterations is largest (computed here from `stats`, not from the report's query).
    per = cat.sql(
        "SELECT op_name, iteration, max(l2norm) FILTER (WHERE isfinite(l2norm)) AS l2 FROM stats "
        "WHERE run = $run AND io <> 'input' AND iteration IS NOT NULL GROUP BY ALL",
        {"run": sample.run},
    ).to_pylist()
    values: dict[str, list[float]] = {}
    for p in per:
        if p["l2"] is not None and p["l2"] > 0:
            values.setdefault(p["op_name"], []).append(p["l2"])
    moved = sorted((-math.log10(max(v) / min(v)), op) for op, v in values.items() if len(v) >= 2)
    legend = [t["name"] for t in figure_data(browser, "trends-figure") if t["showlegend"]]
    top = moved[0][1]
    short = "/".join(top.rsplit("/", 2)[1:]) if top.count("/") >= 2 else top
    assert legend[-1].startswith(f"1. {short} (×10^"), (legend, moved[:3])
    _check_trends(sample, cat, browser)

    if sample.against:
        _check_compare(sample, cat, browser)


def _check_trends(sample: Sample, cat: Catalog, browser: Browser) -> None:
    """Every coloured trend line is its operator's l2norm, max and min per iteration as `stats`
    gives them (finite values only; l2norm 0 is not drawn on the log panel)."""
    per = cat.sql(
        "SELECT op_name, iteration, max(l2norm) FILTER (WHERE isfinite(l2norm)) AS l2norm,"
        " max(max) FILTER (WHERE isfinite(max)) AS max, min(min) FILTER (WHERE isfinite(min)) AS min "
        "FROM stats WHERE run = $run AND io <> 'input' AND iteration IS NOT NULL GROUP BY ALL",
        {"run": sample.run},
    ).to_pylist()
    expected: dict[tuple[str, str], dict[int, float]] = {}
    for p in per:
        for key in ("l2norm", "max", "min"):
            v = p[key]
            if v is not None and not (key == "l2norm" and v <= 0):
                expected.setdefault((p["op_name"], key), {})[p["iteration"]] = v
    traces = browser.driver.execute_script(
        "return document.getElementById('trends-figure')._fullData.filter(t => t.legendgroup !== 'others')"
        ".map(t => ({op: t.hovertext, axis: t.yaxis, x: Array.from(t.x), y: Array.from(t.y)}))"
    )
    assert traces
    key_of = {"y": "l2norm", "y2": "max", "y3": "min"}
    for t in traces:
        op = html.unescape(t["op"])
        drawn = {int(x): y for x, y in zip(t["x"], t["y"], strict=True) if y is not None}
        want = expected.get((op, key_of[t["axis"]]), {})
        assert drawn.keys() == want.keys(), (op, t["axis"], drawn, want)
        assert all(math.isclose(drawn[i], want[i], rel_tol=1e-6) for i in want), (op, drawn, want)
    log_panel = browser.driver.execute_script(
        "return document.getElementById('trends-figure')._fullData.filter(t => t.yaxis === 'y')"
        ".flatMap(t => Array.from(t.y)).filter(v => v !== null && !Number.isNaN(v))"
    )
    assert log_panel and min(log_panel) > 0


def _check_compare(sample: Sample, cat: Catalog, browser: Browser) -> None:
    """The comparison section: the first divergences are the view's, and the known fact."""
    params = {"run": sample.run, "baseline": sample.against}
    tolerance = cat.sql(
        "SELECT * FROM first_divergence() WHERE run = $run AND baseline_run = $baseline", params
    ).num_rows
    shown = browser.text("#divergence-tolerance tbody tr")
    assert len(shown) == tolerance  # the pair agrees within msprobe's tolerances: 0 rows, "None"
    view = cat.sql(
        "SELECT iteration, op_name, source_line FROM first_divergence(max_abs := 0) "
        "WHERE run = $run AND baseline_run = $baseline ORDER BY iteration, rank",
        params,
    ).to_pylist()
    cells = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#divergence-any-difference tbody tr'),"
        " tr => Array.from(tr.cells, td => td.innerText));"
    )
    assert [(int(c[0]), c[2].split("\n")[0], c[7].rsplit(":", 1)[-1]) for c in cells] == [
        (v["iteration"], v["op_name"], str(v["source_line"])) for v in view
    ]
    iteration, op, line = sample.first_difference
    assert (int(cells[0][0]), cells[0][2].split("\n")[0], cells[0][7].rsplit(":", 1)[-1]) == (
        iteration, op, str(line),
    )  # fmt: skip
    traces = figure_data(browser, "compare-figure")
    marks = [t for t in traces if t["name"] == "first divergence (any difference)"]
    assert marks and any(op in h for h in marks[0]["hovertext"])
    lines = [t for t in traces if t["name"].startswith("iteration ") and t["showlegend"]]
    assert {t["name"] for t in lines} == {f"iteration {i}" for i in (0, 1)}


def test_ingest_errors_are_summarised_by_stage(tmp_path, copy_dump, browser):
    """A real dump with two damaged files: the report's table is the ingest_errors view by stage."""
    dump = copy_dump("nan_log")
    folder = dump / "rank_0" / "Net" / "0" / "0"
    victims = sorted(folder.glob("*.npy"))[:2]
    victims[0].write_bytes(b"\x93NUMPY\x01\x00 this header is cut")
    victims[1].write_bytes(b"not an npy file at all")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(dump, run="broken")
    out = tmp_path / "broken.html"
    cat.report(out)
    expected = cat.sql(
        "SELECT stage, count(*) AS n FROM ingest_errors WHERE run = 'broken' "
        "GROUP BY stage ORDER BY n DESC, stage"
    ).to_pylist()
    assert sum(e["n"] for e in expected) >= 2
    page = browser.open(out)
    assert page.errors == [] and page.network_requests == []
    cells = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#errors-table tbody tr'),"
        " tr => Array.from(tr.cells, td => td.innerText));"
    )
    assert [(c[0], int(c[1])) for c in cells] == [(e["stage"], e["n"]) for e in expected]
    assert any(v.name in " ".join(c[2] for c in cells) for v in victims)
    summary = browser.text("#summary-table tbody tr td:last-child")
    assert summary == [str(sum(e["n"] for e in expected))]


def test_limits_cut_operators_iterations_and_ranks_and_say_so(built, tmp_path):
    """What the page does at scale, on real data: fewer operators, columns and ranks than the run
    has, the ones kept are those that matter, and a cell shows the worst of its range."""
    cat = Catalog.open(built("nan_log")[0])
    full = gather(cat, "nan_log")
    small = gather(cat, "nan_log", limits=Limits(max_ops=4, max_columns=1))
    ops = small.heat_ops.column("op_name").to_pylist()
    assert len(ops) == 4 and small.heat_ops.column("total")[0].as_py() == full.heat_ops.num_rows
    firsts = set(full.steps.column("op_name").to_pylist())
    assert firsts <= set(ops)  # every step's first anomaly survives the cut
    order = full.heat_ops.column("op_name").to_pylist()
    assert ops == [o for o in order if o in ops]  # still in execution order
    assert small.columns.to_pylist() == [{"col": 0, "first_iteration": 0, "last_iteration": 1}]
    # one column for both iterations: each cell is the worst category of its operator's iterations
    worst: dict[str, int] = {}
    y_of = dict(zip(full.heat_ops.column("y").to_pylist(), order, strict=True))
    for c in full.heat_cells.to_pylist():
        worst[y_of[c["y"]]] = max(worst.get(y_of[c["y"]], 0), c["category"])
    small_y = dict(zip(small.heat_ops.column("y").to_pylist(), ops, strict=True))
    assert {small_y[c["y"]]: c["category"] for c in small.heat_cells.to_pylist()} == {
        o: worst[o] for o in ops
    }
    out = tmp_path / "small.html"
    write_report(cat, out, limits=Limits(max_ops=4, max_columns=1, max_steps=1))
    html = out.read_text(encoding="utf-8")
    assert f"Showing 4 of {full.heat_ops.num_rows} operators" in html
    assert "Iterations are grouped into 1 equal ranges" in html
    assert "The first 1 of 2 steps are listed" in html

    # ranks: the one with the most anomalous cells is kept (msprobe's rank 1, the "nan rank")
    ms = Catalog.open(built("msprobe_2ranks")[0])
    one = gather(ms, "msprobe", limits=Limits(max_ranks=1))
    assert set(one.heat_cells.column("rank").to_pylist()) == {1}


def test_catalog_report_api(built, tmp_path):
    cat = Catalog.open(built("nan_log")[0])
    out = tmp_path / "api.html"
    summary = cat.report(out, "nan_log")
    assert summary.out == out and summary.bytes == out.stat().st_size
    assert summary.run == "nan_log" and summary.baseline is None
    assert summary.anomalous_steps == cat.sql("SELECT count(*) FROM first_anomaly").column(0)[0].as_py()
    assert summary.line().startswith(f"wrote {out} (")
    out.write_text("old")
    cat.report(out)  # replaced whole
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob(".api.html.*"))
    with pytest.raises(ReportError, match="not in the catalog"):
        cat.report(out, "nope")


def test_bad_input_is_one_clear_line(built, tmp_path):
    nan_cat = str(built("nan_log")[0])
    pair = str(built("compare")[0])
    empty = tmp_path / "empty.cat"
    Catalog.open(empty, create=True)
    two = tmp_path / "two.cat"
    for run in ("a", "b"):
        Catalog.open(two, create=True).ingest(dump_of("nan_log"), run=run)
    (tmp_path / "afile").write_text("x")
    out = str(tmp_path / "r.html")
    cases = [
        (
            ["report", nan_cat, "--run", "nope", "--out", out],
            "run 'nope' is not in the catalog (runs: nan_log)",
        ),
        (["report", str(empty), "--out", out], "holds no run yet"),
        (["report", str(two), "--out", out], "holds 2 runs (a, b): choose one with --run"),
        (["report", str(two), "--run", "a", "--against", "zz", "--out", out], "baseline run 'zz' is not in"),
        (["report", str(two), "--run", "a", "--against", "b", "--out", out], f"`dumpcat compare {two} a b`"),
        (["report", pair, "--run", "cast", "--against", "cast", "--out", out], "names the run itself"),
        (["report", nan_cat, "--out", str(tmp_path / "nodir" / "r.html")], "does not exist"),
        (["report", nan_cat, "--out", str(tmp_path)], "is a directory"),
        (["report", nan_cat, "--out", str(tmp_path / "afile" / "r.html")], "afile is not a directory"),
        (["report", str(tmp_path / "missing.cat"), "--out", out], "is not a dumpcat catalog"),
    ]
    # the first case runs as a real process; the others run the same command code in this process
    for i, (args, message) in enumerate(cases):
        proc = cli(*args) if i == 0 else dumpcat_in_process(*args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("dumpcat: error: ") and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not Path(out).exists()
    proc = dumpcat_in_process("report", nan_cat)  # --out is required: a usage error
    assert proc.returncode == 2 and "--out" in proc.stderr


def test_out_is_written_as_a_plain_file_or_refused(built, tmp_path):
    """--out never replaces what is not a regular file (a FIFO here; `/dev/null` as root would be
    the same rename), writes through a symbolic link, and a write that fails is one line that
    leaves the old file whole and no temporary file behind."""
    import os
    import resource

    nan_cat = str(built("nan_log")[0])
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    # in this process (the command's code), but for the full disk below: a real process
    proc = dumpcat_in_process("report", nan_cat, "--out", str(fifo))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"dumpcat: error: --out {fifo} is not a regular file"), proc.stderr
    assert fifo.is_fifo()

    target = tmp_path / "real.html"
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target.name)
    proc = dumpcat_in_process("report", nan_cat, "--out", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dirlink").symlink_to("dir")
    proc = dumpcat_in_process("report", nan_cat, "--out", str(tmp_path / "dirlink"))
    assert proc.returncode == 1 and "dirlink is a directory" in proc.stderr, proc.stderr

    def small_files() -> None:  # a disk that fills up after 1 MB
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    out = tmp_path / "kept.html"
    out.write_text("old")
    proc = subprocess.run(
        [*CLI, "report", nan_cat, "--out", str(out)], capture_output=True, text=True, preexec_fn=small_files
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"dumpcat: error: cannot write {out}: File too large\n", proc.stderr
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["fifo.html", "real.html", "link.html", "dir", "dirlink", "kept.html"]
    )


# The README's *The HTML report* recipe (each report's printed line, and the error line
# docs/report.md quotes) is checked by tests/test_readme.py::test_readme_examples_print_what_the_readme_shows,
# which runs every command of the README, these included.


def test_docs_show_a_screenshot_of_every_sample():
    """bench/report_screenshots.py made one PNG per sample; the README and docs/report.md show one."""
    from PIL import Image

    for name in SAMPLES:
        png = ROOT / "docs" / "report" / f"{name}.png"
        assert png.is_file() and png.stat().st_size < 400_000, png
        assert Image.open(png).width >= 600
    assert re.search(r"!\[[^\]]*\]\(docs/report/\w+\.png\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    page = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    assert re.search(r"!\[[^\]]*\]\(report/\w+\.png\)", page)
