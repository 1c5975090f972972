"""`dumpcat report` on a dump whose every string is hostile, opened in real headless Chromium.

Operator names, source paths and lines of code, the run name, the dump root and ingest error
messages all come from the dump, so an attacker who can write a dump controls them. Here they
carry `</script>` breakouts, `<img onerror>` and `<svg onload>` handlers, links and styles that
fetch, quotes, backslashes, U+2028/U+2029, `{{ }}` and plotly's own `%{...}` template syntax,
entities, RTL and astral characters, and 10^5-character names. Each payload that runs sets a
global `pwn*` or asks for a URL: the page must do neither, draw every figure, show every string
verbatim (as text, never as markup), keep its plots usable and its size bounded.

The dump is the committed real msprobe 2-rank tree with its strings rewritten (the JSON stays what
msprobe writes), plus a dump.json whose entry is not an object, so that an ingest error names a
hostile key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.api import Catalog
from catalog.report.figures import AXIS_TEXT, label, short_name
from catalog.report.page import MAX_TEXT
from tests.catalog.report.test_report import figure_data, not_blank
from tests.conftest import DATA
from tests.report_browser import Browser

CLI = [sys.executable, "-m", "catalog.cli"]
SOURCE = DATA / "msprobe" / "pt_l1_statistics_2ranks"

# Each payload, if it ever ran, sets self.pwnN or asks for a URL on localhost:9
PAYLOADS = [
    "</script><script>self['pwn1']=1</script>",
    "<img src=x onerror=\"self['pwn2']=1;fetch('http://localhost:9/img')\">",
    "\"'`\\\\ {{7*7}} ${x} %{y} %{customdata[0]} \u2028\u2029 </",
    # no '/' in these: the short names on the axes and legend keep the last two '/' parts
    '<a href="http:localhost:9">link</a><span style="background:url(http:localhost:9)">s</span>',
    "<!-- <svg onload=self['pwn3']=1> ]]> &amp; &lt;b&gt; \u202e\u05d0\u0301 \U0001f600 \ufeff",
    "<b>bold</b><br><i>it</i><sup>up</sup>",
]
LONG = 100_000  # characters of the longest name and line of code
FRAME = "/home/u/</script><script>self['pwn4']=1</script>/\"q'\\\\\u2028/"
CODE = " # </script><img src=x onerror=self['pwn5']=1> \u2029 {{x}} %{x}"
RUN = "run</script><script>self['pwn6']=1</script>\"'<img src=x onerror=self['pwn7']=1>\u2028"
BAD_KEY = "Torch.<img src=x onerror=self['pwn8']=1>%{y}.0.forward"


def hostile_name(key: str, i: int) -> str:
    """msprobe's `Torch.sqrt.0.forward` with a payload in its API name (still a valid entry key)."""
    api_type, name, rest = key.split(".", 2)
    tail = "L" * LONG if name == "sqrt" else ""  # the step's first NaN: its name is the longest
    return f"{api_type}.{name}{PAYLOADS[i % len(PAYLOADS)]}{tail}.{rest}"


def hostile_tree(dest: Path) -> Path:
    """The real 2-rank msprobe tree, every entry key, user frame path and line of code rewritten."""
    shutil.copytree(SOURCE, dest)
    for dump in sorted(dest.glob("step*/rank*/dump.json")):
        doc = json.loads(dump.read_text(encoding="utf-8"))
        names = {key: hostile_name(key, i) for i, key in enumerate(doc["data"])}
        doc["data"] = {names[k]: v for k, v in doc["data"].items()}
        dump.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        stack_file = dump.with_name("stack.json")
        stack = json.loads(stack_file.read_text(encoding="utf-8"))
        for group, frames in stack.values():
            group[:] = [names.get(n, n) for n in group]
            for j, frame in enumerate(frames):
                if "/home/user/msprobe_demo/" in frame:
                    head, code = frame.split(", \n ", 1)
                    long = "c" * LONG if "sqrt" in code else ""
                    frames[j] = f"{head.replace('/home/user/msprobe_demo/', FRAME)}, \n {code}{CODE}{long}"
        stack_file.write_text(json.dumps(stack, ensure_ascii=False), encoding="utf-8")
    bad = dest / "step3" / "rank0"
    bad.mkdir(parents=True)
    (bad / "dump.json").write_text(json.dumps({"task": "statistics", "data": {BAD_KEY: 5}}), encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> tuple[Path, Path]:
    """(catalog, report) of the hostile tree, whose dump root is itself a `</script>` breakout."""
    folder = tmp_path_factory.mktemp("hostile")
    root = folder / "<" / "script><script>self['pwn9']=1<" / "script>dump"
    root.parent.mkdir(parents=True)
    hostile_tree(root)
    cat = folder / "cat"
    Catalog.open(cat, create=True).ingest(root, run=RUN)
    out = folder / "report.html"
    proc = subprocess.run([*CLI, "report", str(cat), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return cat, out


def pwned(browser: Browser) -> list[str]:
    return browser.driver.execute_script("return Object.keys(self).filter(k => k.startsWith('pwn'))")


def test_the_probe_sees_a_payload_that_runs(tmp_path, browser):
    """The checks below can fail: the same payloads, written into a page unescaped, do run."""
    page = tmp_path / "control.html"
    page.write_text(
        "<!DOCTYPE html><html><body>"
        + PAYLOADS[1]
        + "<script>document.documentElement.dataset.rendered = 'true';</script></body></html>",
        encoding="utf-8",
    )
    load = browser.open(page)
    browser.driver.execute_script("return new Promise(r => setTimeout(r, 200))")
    assert pwned(browser) == ["pwn2"]
    assert load.network_requests  # the image's own request


def test_hostile_strings_never_run_and_show_verbatim(hostile, browser):
    cat_path, out = hostile
    cat = Catalog.open(cat_path)
    html = out.read_text(encoding="utf-8")
    assert out.stat().st_size < 6e6  # plotly.js is 4.8 MB: the 10^5-character strings are cut

    page = browser.open(out, screenshot=True)
    browser.driver.execute_script("return new Promise(r => setTimeout(r, 300))")  # late handlers
    assert pwned(browser) == []
    assert page.errors == [], page.errors
    assert page.network_requests == [], page.network_requests
    expected = browser.driver.execute_script("return window.dumpcatReport.expected")
    assert expected == 2 and browser.driver.execute_script("return window.dumpcatReport.rendered") == 2
    colours, inked = not_blank(page.screenshot)
    assert colours > 50 and inked > 0.2, (colours, inked)
    # nothing from the dump became markup: no link, image, frame or script beyond the page's own
    from plotly.offline import get_plotlyjs

    found = browser.driver.execute_script(
        "return [document.querySelectorAll('a[href^=\"http\"], img, iframe, svg a, object, embed').length,"
        " document.scripts.length]"
    )
    assert found == [0, html.replace(get_plotlyjs(), "").count("<script")], found

    # The tables show the catalog's strings as text (cut at MAX_TEXT characters).
    def shown(text: str) -> str:
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"

    view = cat.sql(
        "SELECT rank, iteration, op_name, source_line, source_code FROM first_anomaly "
        "ORDER BY iteration, rank"
    ).to_pylist()
    assert any(len(v["op_name"]) > LONG for v in view)  # the long name is a first anomaly
    rows = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#first-anomaly tbody tr'), tr => ({id: tr.id,"
        " op: tr.dataset.op, cells: Array.from(tr.cells, td => td.textContent)}));"
    )
    assert [r["id"] for r in rows] == [f"fa-{v['rank']}-{v['iteration']}" for v in view]
    for r, v in zip(rows, view, strict=True):
        assert r["cells"][2].startswith(shown(v["op_name"]))
        assert r["op"].startswith(shown(v["op_name"]))
        assert r["cells"][8].startswith(shown(v["source_code"]))
        assert len(r["cells"][2]) < 2 * MAX_TEXT + 100  # name and type, each cut
    title = browser.driver.execute_script("return document.title")
    assert title == f"dumpcat report: {RUN}"
    assert (
        browser.driver.execute_script(
            "return document.querySelector('#summary-table tbody td b').textContent"
        )
        == RUN
    )
    errors = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#errors-table tbody tr'),"
        " tr => Array.from(tr.cells, td => td.textContent));"
    )
    reasons = cat.sql("SELECT stage, reason FROM ingest_errors").to_pylist()
    assert any(BAD_KEY in r["reason"] for r in reasons)
    assert [(c[0], c[3]) for c in errors] == [(r["stage"], r["reason"]) for r in reasons]

    # The heat map: every row named verbatim in its tick (text, not markup), the plot not squeezed
    # away by a 10^5-character name.
    ticks = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#heatmap-figure .ytick text'), t => t.textContent)"
    )
    ops = (
        cat.sql("SELECT DISTINCT op_name FROM stats WHERE io <> 'input' AND iteration IS NOT NULL")
        .column(0)
        .to_pylist()
    )
    expected_ticks = {_unescape(label(short_name(o), AXIS_TEXT)) for o in ops}
    assert ticks and set(ticks) <= expected_ticks, sorted(set(ticks) - expected_ticks)[:3]
    assert any("<!-- <svg onload=self['pwn3']=" in t for t in ticks), ticks
    for figure in ("heatmap-figure", "trends-figure"):
        plot, whole = browser.driver.execute_script(
            "const gd = document.getElementById(arguments[0]);"
            "return [gd.querySelector('.nsewdrag').getBoundingClientRect().width,"
            " gd.getBoundingClientRect().width];",
            figure,
        )
        assert plot > 0.4 * whole, (figure, plot, whole)
    # Trend lines: names only in hover text, never in a hover template (where '%{y}' would be read).
    traces = browser.driver.execute_script(
        "return document.getElementById('trends-figure').data.map(t => [t.name, t.hovertemplate])"
    )
    for name, template in traces:
        assert "%{y} %{customdata" not in template and "pwn" not in template
        assert len(name) < AXIS_TEXT + 30
    legend = [t["name"] for t in figure_data(browser, "trends-figure") if t["showlegend"]]
    fragments = ("<svg onload", "%{y}", "<b>bold</b>", "script><script>", "<img src=x")
    assert any(f in _unescape(n) for n in legend for f in fragments), legend


def _unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_a_run_that_only_failed_says_so(tmp_path, browser):
    """Every file of the dump failed: the page says the run holds nothing and points at the errors
    (not at `--no-stats`)."""
    root = tmp_path / "broken"
    (root / "step0" / "rank0").mkdir(parents=True)
    (root / "step0" / "rank0" / "dump.json").write_text('{"task": "statistics", "data": {', encoding="utf-8")
    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(root, run="broken")
    out = tmp_path / "broken.html"
    cat.report(out)
    page = browser.open(out)
    assert page.errors == [] and page.network_requests == []
    headline = browser.text(".headline")[0]
    assert "holds no tensor and no statistic" in headline and "1 ingest error" in headline, headline
    assert "--no-stats" not in headline
    assert browser.text("#errors-table tbody td:first-child") == ["dump_json"]
