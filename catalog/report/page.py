"""The report's HTML page: the tables, the figures and plotly.js, all inline.

Nothing on the page is fetched: plotly.js comes from the plotly package (once, in <head>), the
style and the few lines of script are written here, and no font, image or stylesheet is linked.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from catalog.report.data import ReportData
from catalog.report.figures import compare_figure, figure_html, heatmap_figure, trends_figure

__all__ = ["render_page"]

_CSS = """
:root { color-scheme: light; --red: #c1121f; --orange: #f4a261; --muted: #5c6670; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2329;
       background: #f6f7f9; }
header { background: #1d2733; color: #fff; padding: 14px 24px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header .meta { color: #b8c2cc; font-size: 12px; margin-top: 4px; word-break: break-all; }
nav { background: #fff; border-bottom: 1px solid #dde1e6; padding: 6px 24px; position: sticky; top: 0;
      z-index: 10; }
nav a { margin-right: 16px; color: #24527a; text-decoration: none; font-weight: 500; }
main { padding: 8px 24px 40px; max-width: 1600px; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 12px 16px;
          margin: 14px 0; }
h2 { font-size: 17px; margin: 2px 0 8px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
p.note { color: var(--muted); font-size: 12.5px; margin: 4px 0 8px; }
.headline { font-size: 15px; padding: 8px 12px; border-left: 4px solid var(--red); background: #fdf1f1;
            margin: 8px 0 4px; }
.headline.ok { border-color: #2a9d8f; background: #eef8f6; }
.table-wrap { overflow-x: auto; max-height: 560px; overflow-y: auto; }
table { border-collapse: collapse; font-size: 12.5px; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #edf0f2; vertical-align: top; }
th { background: #f0f2f5; position: sticky; top: 0; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.code, td.text { overflow-wrap: anywhere; }
td.op { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; word-break: break-all; }
td.code code, td.row code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
td.line { white-space: nowrap; }
.type { color: var(--muted); font-size: 11px; display: block; }
tr:target { background: #ffe8a3; }
tr.bad td.num.nan { color: var(--red); font-weight: 600; }
.figure { width: 100%; }
footer { color: var(--muted); font-size: 12px; padding: 0 24px 24px; }
"""

# Runs before the figures: counts the figures drawn, so a reader (or a test, or the benchmark)
# knows when the page is complete: <html data-rendered="true"> and a performance mark.
_HEAD_SCRIPT = """
window.dumpcatReport = {expected: %d, rendered: 0};
function dumpcatRendered() {
  var r = window.dumpcatReport;
  r.rendered += 1;
  if (r.rendered >= r.expected) {
    performance.mark('dumpcat-rendered');
    document.documentElement.dataset.rendered = 'true';
  }
}
if (window.dumpcatReport.expected === 0) {
  document.addEventListener('DOMContentLoaded', function () {
    window.dumpcatReport.expected = 1; dumpcatRendered();
  });
}
"""

# A click on a heat-map cell that is a step's first anomaly goes to that step's row of the table.
_HEATMAP_CLICK = """
document.getElementById('{plot_id}').on('plotly_click', function (ev) {
  var p = ev.points[0];
  var row = document.getElementById('fa-' + p.data.meta + '-' + p.x);
  if (row) { location.hash = row.id; }
});
"""


MAX_TEXT = 1000  # characters of one name, path, line of code or message on the page


def _e(value: object) -> str:
    """Text from the catalog (dump content: names, paths, code, messages) as HTML: escaped, and
    cut at MAX_TEXT characters so that no string can make the page large."""
    text = "" if value is None else str(value)
    if len(text) > MAX_TEXT:
        text = f"{text[:MAX_TEXT]}… ({len(text) - MAX_TEXT:,} more characters)"
    return html.escape(text, quote=True)


def _num(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return _e(value)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return ""


def _span(first: object, last: object) -> str:
    return _e(first) if first == last else f"{_e(first)}–{_e(last)}"


def _op_cell(r: dict) -> str:
    """An operator cell of a table: its name, its type below it."""
    return f'{_e(r["op_name"])}<span class="type">{_e(r["op_type"])}</span>'


def _tensor_cell(r: dict) -> str:
    return f"{_e(r['io'])} {r['slot']}"


def _code_cell(r: dict) -> str:
    return f"<code>{_e(r['source_code'])}</code>" if r["source_code"] else "–"


def _source(file: str | None, line: int | None) -> str:
    """`train.py:16`, the full path in the tooltip."""
    if file is None:
        return "–"
    name = PurePosixPath(file).name or file
    return f'<span title="{_e(file)}:{_e(line)}">{_e(name)}:{_e(line)}</span>'


Column = tuple[str, str, Callable[[dict], str]]  # header, <td> class, cell html


def _table(
    rows: Iterable[dict], columns: list[Column], table_id: str = "", row_attrs: Callable | None = None
) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h, _, _ in columns)
    body = []
    for r in rows:
        attrs = row_attrs(r) if row_attrs else ""
        cells = "".join(f'<td class="{cls}">{cell(r)}</td>' for _, cls, cell in columns)
        body.append(f"<tr{attrs}>{cells}</tr>")
    ident = f' id="{table_id}"' if table_id else ""
    return (
        f'<div class="table-wrap"><table{ident}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _summary(data: ReportData) -> str:
    def iterations(r: dict) -> str:
        if not r["iterations"]:
            return "0"
        return f"{r['iterations']:,} ({_span(r['first_iteration'], r['last_iteration'])})"

    def where(r: dict) -> str:
        parts = [p for p in (r["device_target"], r["ms_version"] and f"MindSpore {r['ms_version']}") if p]
        return _e(", ".join(parts) or "–")

    columns: list[Column] = [
        (
            "run",
            "",
            lambda r: f"<b>{_e(r['run'])}</b>" + (" (baseline)" if r["run"] == data.baseline else ""),
        ),
        ("dump root", "op", lambda r: _e(r["dump_root"])),
        ("producer", "", lambda r: _e(r["producers"] or "–")),
        ("device", "", where),
        ("ranks", "num", lambda r: _num(r["ranks"])),
        ("iterations", "num", iterations),
        ("steps", "num", lambda r: _num(r["steps"])),
        ("tensors", "num", lambda r: f"{_num(r['tensors'])} ({_bytes(r['tensor_bytes'])})"),
        ("statistic rows", "num", lambda r: _num(r["stat_rows"])),
        ("anomalous tensors", "num nan", lambda r: _num(r["anomalous_tensors"])),
        ("anomalous steps", "num nan", lambda r: _num(r["anomalous_steps"])),
        ("ingest errors", "num", lambda r: _num(r["errors"])),
    ]
    rows = data.summary.to_pylist()
    steps = data.steps.to_pylist()
    if steps:
        f = steps[0]
        code = f" <code>{_e(f['source_code'])}</code>" if f["source_code"] else ""
        line = f" at {_source(f['source_file'], f['source_line'])}{code}" if f["source_file"] else ""
        headline = (
            f'<div class="headline">First anomalous step: iteration {f["iteration"]}, rank {f["rank"]}. '
            f"Its first output holding NaN/Inf is <b>{_e(f['op_name'])}</b> ({_e(f['op_type'])}, "
            f"{_e(f['io'])} {f['slot']}){line}. {_num(f['steps'])} step(s) hold NaN or Inf: see "
            '<a href="#first-anomalies">the first anomaly of every step</a>.</div>'
        )
    elif rows and not rows[0]["stat_rows"] and not rows[0]["tensors"]:
        errors = rows[0]["errors"]
        why = (
            f'none of its files could be cataloged: see <a href="#errors">the {errors:,} ingest error(s)</a>'
            if errors
            else "its dump held no tensor"
        )
        headline = (
            f'<div class="headline">Run <b>{_e(data.run)}</b> holds no tensor and no statistic: {why}.</div>'
        )
    elif rows and not rows[0]["stat_rows"]:
        headline = (
            f'<div class="headline">Run <b>{_e(data.run)}</b> has no statistics (ingested with '
            "<code>--no-stats</code>?), so whether it holds NaN or Inf cannot be told: ingest it again "
            "with statistics.</div>"
        )
    else:
        headline = f'<div class="headline ok">No output of run <b>{_e(data.run)}</b> holds NaN or Inf.</div>'
    return (
        '<section id="summary"><h2>Summary</h2>'
        + headline
        + _table(rows, columns, "summary-table", lambda r: ' class="bad"' if r["anomalous_steps"] else "")
        + "</section>"
    )


def _first_anomalies(data: ReportData) -> str:
    steps = data.steps.to_pylist()
    if not steps:
        stats = data.summary.num_rows and data.summary.column("stat_rows")[0].as_py()
        tensors = data.summary.num_rows and data.summary.column("tensors")[0].as_py()
        why = (
            "No step has an output holding NaN or Inf."
            if stats
            else "The run has no statistics."
            if tensors
            else "The run holds no tensor."
        )
        return f'<section id="first-anomalies"><h2>First anomaly of every step</h2><p>{why}</p></section>'

    total = steps[0]["steps"]
    cat = data.catalog

    def row_id(r: dict) -> str:
        cmd = f"dumpcat tensor {cat} {r['row_id']}"
        return f'<code title="{_e(cmd)}">{_e(r["row_id"])}</code>'

    columns: list[Column] = [
        ("rank", "num", lambda r: _num(r["rank"])),
        ("iteration", "num", lambda r: _num(r["iteration"])),
        ("operator", "op", _op_cell),
        ("tensor", "", _tensor_cell),
        ("NaN", "num nan", lambda r: _num(r["nan_count"])),
        ("−Inf", "num nan", lambda r: _num(r["neg_inf_count"])),
        ("+Inf", "num nan", lambda r: _num(r["pos_inf_count"])),
        ("source line", "line", lambda r: _source(r["source_file"], r["source_line"])),
        ("code", "code", _code_cell),
        ("anomalous outputs", "num", lambda r: _num(r["anomalous_outputs"])),
        ("row id", "row", row_id),
    ]

    def attrs(r: dict) -> str:
        return (
            f' id="fa-{r["rank"]}-{r["iteration"]}" class="bad" data-op="{_e(r["op_name"])}"'
            f' data-line="{_e(r["source_line"])}" data-row-id="{_e(r["row_id"])}"'
        )

    cut = (
        f" The first {len(steps):,} of {total:,} steps are listed; "
        f"<code>dumpcat anomalies {_e(cat)} --run {_e(data.run)}</code> lists them all."
        if total > len(steps)
        else ""
    )
    ops_columns: list[Column] = [
        ("operator", "op", _op_cell),
        ("source line", "line", lambda r: _source(r["source_file"], r["source_line"])),
        ("code", "code", _code_cell),
        ("steps", "num", lambda r: _num(r["steps"])),
        ("ranks", "num", lambda r: _num(r["ranks"])),
        ("iterations", "num", lambda r: _span(r["first_iteration"], r["last_iteration"])),
    ]
    return (
        '<section id="first-anomalies"><h2>First anomaly of every step</h2>'
        '<p class="note">Per rank and iteration, the first output holding NaN or ±Inf in the order the step '
        "ran (file timestamps across kernel graphs), as the <code>first_anomaly</code> view answers it. "
        "The row id fetches the tensor (<code>dumpcat tensor CAT ROW_ID</code>, shown on hover); a first-"
        f"anomaly cell of the heat map links to its row here.{cut}</p>"
        + _table(steps, columns, "first-anomaly", attrs)
        + "<h3>Operators that were a step's first anomaly</h3>"
        + _table(data.first_ops.to_pylist(), ops_columns, "first-anomaly-ops")
        + "</section>"
    )


def _cut_note(shown: int, total: int, what: str, how: str) -> str:
    return f" Showing {shown:,} of {total:,} {what} ({how})." if total > shown else ""


def _heatmap(data: ReportData) -> str:
    fig = heatmap_figure(data)
    head = '<section id="heatmap"><h2>Where NaN/Inf appeared and spread</h2>'
    if fig is None:
        return head + "<p>No output statistics in this run.</p></section>"
    ops = data.heat_ops
    anomalous = sum(1 for c in data.heat_cells.column("category").to_pylist() if c)
    shown, total = ops.num_rows, ops.column("total")[0].as_py()
    n_cols = data.columns.num_rows
    ranks = sorted(set(data.heat_cells.column("rank").to_pylist()))
    total_ranks = data.summary.column("ranks")[0].as_py()
    notes = _cut_note(
        shown, total, "operators", "every step's first anomaly, then those anomalous in the most cells"
    )
    if (
        n_cols
        and data.columns.column("first_iteration").to_pylist()
        != data.columns.column("last_iteration").to_pylist()
    ):
        notes += f" Iterations are grouped into {n_cols} equal ranges; a cell shows the worst of its range."
    notes += _cut_note(len(ranks), total_ranks, "ranks", "those with the most anomalous cells")
    empty = "" if anomalous else " No cell holds NaN or Inf: every output of the run is clean."
    return (
        head
        + '<p class="note">Operators in execution order (rows; the earliest place each takes in a step) × '
        'iteration (columns), from the statistics of their outputs: <b style="color:var(--red)">first '
        'anomaly</b> of the step, <b style="color:#c76b1c">propagated</b> NaN/Inf, or clean (grey); '
        "white: not dumped. The numbers are NaN (and ∞) elements; hover for the counts"
        + (", and pick the rank in the menu" if len(ranks) > 1 else "")
        + (
            " (<b>· origin</b>: a rank where the NaN/Inf was born, by <code>nan_origin</code>; the others "
            "received it through collectives or started from it)"
            if len(ranks) > 1 and data.origins is not None and data.origins.num_rows
            else ""
        )
        + f".{notes}{empty}</p>"
        + figure_html(fig, "heatmap-figure", "dumpcatRendered();" + _HEATMAP_CLICK)
        + "</section>"
    )


def _trends(data: ReportData) -> str:
    fig = trends_figure(data)
    head = '<section id="trends"><h2>Trend lines: l2norm, max and min per operator</h2>'
    if fig is None:
        return head + (
            "<p>No trend to draw: no operator has a positive finite l2norm in two or more iterations.</p>"
            "</section>"
        )
    lim = data.limits
    movers: dict[str, dict] = {}
    for r in data.trends.to_pylist():
        m = movers.setdefault(r["op_name"], {**r, "low": None, "high": None})
        if r["l2norm"] is not None and r["l2norm"] > 0:
            m["low"] = r["l2norm"] if m["low"] is None else min(m["low"], r["l2norm"])
            m["high"] = r["l2norm"] if m["high"] is None else max(m["high"], r["l2norm"])
    columns: list[Column] = [
        ("#", "num", lambda r: f"<b>{r['mover_rank']}</b>" if r["top"] else str(r["mover_rank"])),
        ("operator", "op", _op_cell),
        ("l2norm moved", "num", lambda r: f"×{10 ** r['moved']:.4g}"),
        ("smallest l2norm", "num", lambda r: _num(r["low"])),
        ("largest l2norm", "num", lambda r: _num(r["high"])),
    ]
    return (
        head
        + '<p class="note">Per operator and iteration: the largest finite l2norm and max and the smallest '
        "finite min of its outputs over every rank (NaN/Inf values leave a gap). The "
        f"{lim.top_movers} operators whose l2norm moved most over the run (log10 of its largest over "
        "its smallest value: explosion and vanishing alike) are in colour, ranked in the legend; the "
        f"next {lim.other_trends} are grey (hover names their number in the table below). Click a "
        "legend entry to hide it.</p>"
        + figure_html(fig, "trends-figure", "dumpcatRendered();")
        + "<h3>Movers</h3>"
        + _table(sorted(movers.values(), key=lambda r: r["mover_rank"]), columns, "movers-table")
        + "</section>"
    )


def _compare(data: ReportData) -> str:
    if data.baseline is None:
        return ""
    head = f'<section id="compare"><h2>Against {_e(data.baseline)}</h2>'
    status_columns: list[Column] = [
        ("status", "", lambda r: _e(r["status"])),
        ("tensors", "num", lambda r: _num(r["tensors"])),
        ("outputs", "num", lambda r: _num(r["outputs"])),
    ]
    fig = compare_figure(data)
    its = data.compare_iterations
    points = data.compare_points.num_rows if data.compare_points is not None else 0
    lim = data.limits
    notes = ""
    if points and points < data.compare_ops * len(its):
        notes += (
            f" An iteration with more than {lim.max_compare_points:,} operators is drawn as "
            f"{lim.max_compare_points:,} runs of consecutive operators (the worst of each)."
        )
    figure = (
        figure_html(fig, "compare-figure", "dumpcatRendered();")
        if fig is not None
        else "<p>No output was compared in both runs.</p>"
    )
    div_columns: list[Column] = [
        ("iteration", "num", lambda r: _num(r["iteration"])),
        ("rank", "num", lambda r: _num(r["rank"])),
        ("operator", "op", _op_cell),
        ("tensor", "", _tensor_cell),
        ("reason", "text", lambda r: _e(r["reason"])),
        ("cosine", "num", lambda r: _num(r["cosine"])),
        ("max abs error", "num", lambda r: _num(r["max_abs_err"])),
        ("source line", "line", lambda r: _source(r["source_file"], r["source_line"])),
        ("code", "code", _code_cell),
    ]
    rows = data.divergences.to_pylist() if data.divergences is not None else []
    tables = ""
    for kind, title in (
        (
            "tolerance",
            "First divergence (cosine < 0.99 or max abs error > 0.001, or a status that is not ok)",
        ),
        ("any difference", "First output that differs at all (max abs error > 0)"),
    ):
        sel = [r for r in rows if r["kind"] == kind]
        body = (
            _table(sel, div_columns, f"divergence-{kind.replace(' ', '-')}")
            if sel
            else "<p>None: every output compared agrees.</p>"
        )
        tables += f"<h3>{_e(title)}</h3>{body}"
    shown_its = ", ".join(str(i) for i in its)
    return (
        head
        + f'<p class="note">From <code>comparisons</code> (<code>dumpcat compare</code>): per operator, in '
        "execution order, the smallest cosine and the largest max abs error of its outputs over ranks; "
        f"iterations drawn: {_e(shown_its)}. ★ marks each iteration's first divergence by the default "
        f"tolerances (<code>first_divergence()</code>), ◇ the first output that differs at all.{notes}</p>"
        + figure
        + tables
        + "<h3>Pairs by status</h3>"
        + _table(data.compare_status.to_pylist(), status_columns, "compare-status")
        + "</section>"
    )


def _errors(data: ReportData) -> str:
    rows = data.errors.to_pylist()
    head = '<section id="errors"><h2>Ingest errors by stage</h2>'
    if not rows:
        return head + "<p>None: every file of the run was cataloged.</p></section>"
    columns: list[Column] = [
        ("stage", "", lambda r: _e(r["stage"])),
        ("errors", "num", lambda r: _num(r["errors"])),
        ("example", "op", lambda r: _e(r["example_path"])),
        ("reason", "text", lambda r: _e(r["example_reason"])),
    ]
    return (
        head
        + '<p class="note">Files or lines that could not be cataloged (<code>ingest_errors</code>), one row '
        "per stage with its first example.</p>" + _table(rows, columns, "errors-table") + "</section>"
    )


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render_page(data: ReportData) -> str:
    """The whole page: one string, with plotly.js inline once."""
    sections = [_summary(data), _first_anomalies(data), _heatmap(data), _trends(data), _compare(data)]
    sections.append(_errors(data))
    body = "".join(sections)
    expected = body.count("dumpcatRendered();")
    title = f"dumpcat report: {data.run}" + (f" against {data.baseline}" if data.baseline else "")
    nav = [("summary", "Summary"), ("first-anomalies", "First anomalies"), ("heatmap", "Heat map")]
    nav += [("trends", "Trends")] + ([("compare", "Comparison")] if data.baseline else [])
    nav += [("errors", "Ingest errors")]
    links = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav)
    when = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lim = data.limits
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style>"
        f"<script>{_HEAD_SCRIPT % expected}</script>"
        f'<script type="text/javascript">{_plotly_js()}</script>'
        "</head><body>"
        f"<header><h1>{_e(title)}</h1>"
        f'<div class="meta">catalog {_e(data.catalog)} · made {_e(when)} by dumpcat report</div></header>'
        f"<nav>{links}</nav><main>{body}</main>"
        "<footer>Aggregated in DuckDB (sql/queries/report_*.sql); at most "
        f"{lim.max_ops} heat-map operators × {lim.max_columns} iteration columns × {lim.max_ranks} ranks, "
        f"{lim.top_movers} + {lim.other_trends} trend lines, {lim.max_steps} step rows, "
        f"{lim.max_compare_points:,} comparison points × {lim.max_compare_iterations} iterations. "
        "Self-contained: nothing is fetched; plotly.js is inline.</footer>"
        "</body></html>\n"
    )
