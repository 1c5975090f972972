"""The report's figures, made with plotly from the aggregated tables of `catalog.report.data`.

Arrays go to plotly as numpy arrays, which plotly.py writes as base64 typed arrays (about a third
of the size of JSON numbers). plotly.js itself is included once per page by `page`, so each
figure here is only its data and layout.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
from plotly.subplots import make_subplots

from catalog.report.data import ReportData

__all__ = ["compare_figure", "figure_html", "heatmap_figure", "label", "op_labels", "trends_figure"]

CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
CLEAN, PROPAGATED, FIRST = "#dfe4ea", "#f4a261", "#c1121f"
MOVER_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
OTHER_COLOUR = "rgba(140, 140, 140, 0.35)"
FONT = {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 12}


AXIS_TEXT = 60  # characters of an axis label or legend entry: a longer one would squeeze the plot away
HOVER_TEXT = 300  # characters of a name in hover text, and of a heat-map row's name


def short_name(op_name: str, parts: int = 2) -> str:
    """The last scope components of an operator name (`fc-Dense/MatMul-op0`): what fits on an axis."""
    tail = op_name.rsplit("/", parts)
    return "/".join(tail[1:]) if len(tail) > parts else op_name


def label(text: object, limit: int = HOVER_TEXT) -> str:
    """`text` (an operator name, a reason: dump content) as plotly.js must show it, verbatim.

    plotly.js reads every label, legend entry, tick and hover text as a subset of HTML (`<a href>`
    makes a link, `<span style>` styles, `<br>` breaks, entities are decoded), so the HTML special
    characters become entities; a text longer than `limit` keeps its start and end around '…'."""
    text = "" if text is None else str(text)
    if len(text) > limit:
        tail = (limit - 1) // 3
        text = text[: limit - 1 - tail] + "…" + text[len(text) - tail :]
    return html.escape(text, quote=False)


def op_labels(names: list[str]) -> list[str]:
    """The heat map's row names (its y categories, shown in the hover): `label`s, made distinct
    where two long names cut to the same text."""
    out: list[str] = []
    seen: set[str] = set()
    for i, name in enumerate(names):
        text = label(name)
        if text in seen:
            text = f"{text} [{i}]"
        seen.add(text)
        out.append(text)
    return out


def column_labels(columns: pa.Table) -> list[str]:
    """'3' for a column of one iteration, '10–19' for a range."""
    first = columns.column("first_iteration").to_pylist()
    last = columns.column("last_iteration").to_pylist()
    return [str(a) if a == b else f"{a}–{b}" for a, b in zip(first, last, strict=True)]


def _layout(fig: go.Figure, height: int, **kw) -> go.Figure:
    fig.update_layout(
        template="plotly_white", height=height, font=FONT, margin={"l": 10, "r": 10, "t": 40, "b": 40}, **kw
    )
    return fig


def _origin_note(iterations: list[int] | None) -> str:
    """' (origin at iteration 1, 5)' for a rank where nan_origin says a NaN/Inf was born."""
    if not iterations:
        return ""
    return f" (origin at iteration {', '.join(map(str, iterations))})"


def _rank_label(rank: int, origins: dict[int, list[int]]) -> str:
    """The rank's name in the menu: 'rank 1 · origin' where a NaN/Inf was born (nan_origin)."""
    return f"rank {rank} · origin" if origins.get(rank) else f"rank {rank}"


def heatmap_figure(data: ReportData) -> go.Figure | None:
    """Operators (rows, execution order) × iteration columns, one heat map per rank (a menu picks
    the rank): first anomaly of the step, propagated NaN/Inf, or clean; the counts in the hover."""
    cells, ops = data.heat_cells, data.heat_ops
    if cells.num_rows == 0 or ops.num_rows == 0:
        return None
    op_names = ops.column("op_name").to_pylist()
    names = op_labels(op_names)
    labels = column_labels(data.columns)
    n_y, n_x = len(names), len(labels)
    rank = cells.column("rank").to_numpy()
    y = cells.column("y").to_numpy()
    x = cells.column("col").to_numpy()
    category = cells.column("category").to_numpy()
    counts = np.stack(
        [cells.column(c).to_numpy().astype(np.int64) for c in ("nan_elements", "inf_elements", "anomalous")],
        axis=-1,
    )
    # the smallest unsigned type that holds every count (most cells hold small numbers): the hover
    # data of 150 × 120 cells × 8 ranks stays about 1 MB
    top = int(counts.max(initial=0))
    kind = np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.uint32
    counts = counts.clip(max=np.iinfo(np.uint32).max).astype(kind)
    ranks = sorted({int(r) for r in rank})
    # where nan_origin says a NaN/Inf was born: marked in the rank's name, menu entry and hover
    origins = {} if data.origins is None else {o["rank"]: o["iterations"] for o in data.origins.to_pylist()}
    with_text = n_y * n_x <= 1500
    fig = go.Figure()
    for i, r in enumerate(ranks):
        m = rank == r
        z = np.full((n_y, n_x), np.nan, dtype=np.float32)
        z[y[m], x[m]] = category[m]
        custom = np.zeros((n_y, n_x, 3), dtype=counts.dtype)
        custom[y[m], x[m]] = counts[m]
        text = None
        if with_text:
            text = np.full((n_y, n_x), "", dtype=object)
            for yy, xx, (nan, inf, _) in zip(y[m], x[m], counts[m].tolist(), strict=True):
                if nan or inf:
                    text[yy, xx] = f"{nan:,}" + (f"+{inf:,}∞" if inf else "")
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=labels,
                y=names,
                customdata=custom,
                text=text,
                texttemplate="%{text}" if with_text else None,
                textfont={"size": 10},
                zmin=0,
                zmax=2,
                xgap=1,
                ygap=1,
                colorscale=[
                    [0.0, CLEAN],
                    [1 / 3, CLEAN],
                    [1 / 3, PROPAGATED],
                    [2 / 3, PROPAGATED],
                    [2 / 3, FIRST],
                    [1.0, FIRST],
                ],
                colorbar={
                    "tickvals": [1 / 3, 1, 5 / 3],
                    "ticktext": ["clean", "propagated", "first anomaly"],
                    "thickness": 12,
                    "len": 0.5 if n_y > 20 else 1,
                    "y": 1,
                    "yanchor": "top",
                },
                hovertemplate=(
                    f"rank {r}{_origin_note(origins.get(r))}, iteration %{{x}}<br>%{{y}}<br>NaN elements "
                    "%{customdata[0]}, Inf elements %{customdata[1]}<br>anomalous outputs %{customdata[2]}"
                    "<extra></extra>"
                ),
                name=_rank_label(r, origins),
                meta=r,
                visible=i == 0,
            )
        )
    row_px = 20 if n_y <= 40 else 14 if n_y <= 100 else 11
    height = max(320, min(2400, row_px * n_y + 130))
    menus = []
    if len(ranks) > 1:
        buttons = [
            {
                "label": _rank_label(r, origins),
                "method": "update",
                "args": [{"visible": [j == i for j in range(len(ranks))]}],
            }
            for i, r in enumerate(ranks)
        ]
        menus = [
            {"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom", "pad": {"b": 4}}
        ]
    _layout(fig, height, updatemenus=menus)
    fig.update_yaxes(
        autorange="reversed",
        tickvals=names,
        ticktext=[label(short_name(n), AXIS_TEXT) for n in op_names],
        tickfont={"size": 10 if n_y > 40 else 11},
        automargin=True,
    )
    fig.update_xaxes(title_text="iteration", type="category", side="bottom")
    return fig


def trends_figure(data: ReportData) -> go.Figure | None:
    """l2norm (log scale), max and min per operator across the iteration columns: the top movers
    in colour, the next ones in grey."""
    t = data.trends
    if t.num_rows == 0:
        return None
    # x: the column's first iteration, on a numeric axis (a range of iterations starts there)
    starts = data.columns.column("first_iteration").to_pylist()
    ranged = starts != data.columns.column("last_iteration").to_pylist()
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("l2norm (log scale; 0 is not drawn)", "max", "min"),
    )
    rows = t.to_pydict()
    order: list[str] = []
    series: dict[str, dict] = {}
    for i, name in enumerate(rows["op_name"]):
        s = series.get(name)
        if s is None:
            order.append(name)
            s = series[name] = {
                "top": rows["top"][i], "rank": rows["mover_rank"][i], "moved": rows["moved"][i],
                "op_type": rows["op_type"][i], "x": [], "l2norm": [], "max": [], "min": [], "nonfinite": [],
            }  # fmt: skip
        s["x"].append(starts[rows["col"][i]])
        for key in ("l2norm", "max", "min", "nonfinite"):
            s[key].append(rows[key][i])
    metrics = ("l2norm", "max", "min")
    # a marker is an SVG node: beyond a few dozen columns, lines only (thousands of markers take
    # seconds to draw)
    mode = "lines+markers" if len(starts) <= 30 else "lines"

    def values(s: dict, key: str) -> list[float]:
        # l2norm is drawn on a log axis, where 0 has no place (plotly would draw a line falling off
        # the panel): a gap, as for NaN/Inf
        low = 0.0 if key == "l2norm" else -np.inf
        return [np.nan if v is None or v <= low else v for v in s[key]]

    # The grey lines: one trace per panel (operators apart by a gap), drawn first, under the movers.
    others = [n for n in order if not series[n]["top"]]
    if others:
        for row, key in enumerate(metrics, start=1):
            xs: list = []
            ys: list = []
            hover: list = []
            for name in others:
                s = series[name]
                xs += [*s["x"], np.nan]
                ys += [*values(s, key), np.nan]
                hover += [f"mover #{s['rank']}"] * (len(s["x"]) + 1)  # named in the table below the figure
            fig.add_trace(
                go.Scatter(
                    x=np.array(xs, dtype=np.float64),
                    y=np.array(ys, dtype=np.float64),
                    mode=mode,
                    line={"color": OTHER_COLOUR, "width": 1},
                    marker={"size": 3, "color": OTHER_COLOUR},
                    connectgaps=False,
                    name=f"next {len(others)} movers",
                    legendgroup="others",
                    showlegend=row == 1,
                    hovertext=hover,
                    hovertemplate=f"%{{hovertext}}<br>iteration %{{x}}: {key} %{{y:.4g}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
    for name in sorted((n for n in order if series[n]["top"]), key=lambda n: -series[n]["rank"]):
        s = series[name]
        colour = MOVER_COLOURS[(s["rank"] - 1) % len(MOVER_COLOURS)]
        legend = f"{s['rank']}. {label(short_name(name), AXIS_TEXT)} (×10^{s['moved']:.1f})"
        for row, key in enumerate(metrics, start=1):
            fig.add_trace(
                go.Scatter(
                    x=np.array(s["x"], dtype=np.int64),
                    y=np.array(values(s, key), dtype=np.float64),
                    mode=mode,
                    line={"color": colour, "width": 2.5},
                    marker={"size": 5},
                    name=legend,
                    legendgroup=f"mover{s['rank']}",
                    showlegend=row == 1,
                    # the name goes in as hover text, never into the template: a '%{y}' in it is text
                    hovertext=label(name),  # one string for every point of the line
                    hovertemplate=(
                        f"%{{hovertext}}<br>mover {s['rank']}: l2norm moved ×10^{s['moved']:.2f}<br>"
                        f"iteration %{{x}}: {key} %{{y:.4g}}<extra></extra>"
                    ),
                ),
                row=row,
                col=1,
            )
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(type="linear", tickformat="d")
    if len(starts) <= 20:
        fig.update_xaxes(tickvals=starts)
    title = "iteration (the first of each range)" if ranged else "iteration"
    fig.update_xaxes(title_text=title, row=3, col=1)
    _layout(fig, 820, legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}})
    return fig


def compare_figure(data: ReportData) -> go.Figure | None:
    """Cosine and max abs error of each operator's outputs against the baseline, operators in
    execution order, one line per iteration drawn; the first divergence of each marked."""
    pts = data.compare_points
    if pts is None or pts.num_rows == 0:
        return None
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("cosine (worst output of the operator)", "max abs error (log scale; 0 is not drawn)"),
    )
    p = pts.to_pydict()
    by_iter: dict[int, list[int]] = {}
    for i, it in enumerate(p["iteration"]):
        by_iter.setdefault(it, []).append(i)
    mode = "lines+markers" if max(len(idx) for idx in by_iter.values()) <= 60 else "lines"  # see trends
    for k, (it, idx) in enumerate(by_iter.items()):
        colour = MOVER_COLOURS[k % len(MOVER_COLOURS)]
        xs = [p["x"][i] for i in idx]
        hover = [
            label(p["op_name"][i])
            + (f" … {label(p['last_op_name'][i])} ({p['ops'][i]} operators)" if p["ops"][i] > 1 else "")
            + f"<br>{label(p['statuses'][i])}"
            for i in idx
        ]
        for row, key in ((1, "cosine"), (2, "max_abs_err")):
            ys = np.array([np.nan if p[key][i] is None else p[key][i] for i in idx], dtype=np.float64)
            if key == "max_abs_err":
                ys[ys <= 0] = np.nan
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode=mode,
                    line={"color": colour, "width": 1.5},
                    marker={"size": 4},
                    name=f"iteration {it}",
                    legendgroup=f"it{it}",
                    showlegend=row == 1,
                    hovertext=hover,
                    hovertemplate=(
                        f"iteration {it}, #%{{x}}: %{{hovertext}}<br>{key} %{{y:.6g}}<extra></extra>"
                    ),
                ),
                row=row,
                col=1,
            )
    marks = {"tolerance": ("star", FIRST, 14), "any difference": ("diamond-open", "#333333", 11)}
    if data.divergences is not None:
        d = data.divergences.to_pydict()
        for kind, (symbol, colour, size) in marks.items():
            sel = [i for i, k in enumerate(d["kind"]) if k == kind and d["x"][i] is not None]
            sel = [i for i in sel if d["iteration"][i] in by_iter]
            if not sel:
                continue
            for row, key in ((1, "cosine"), (2, "max_abs_err")):
                fig.add_trace(
                    go.Scatter(
                        x=[d["x"][i] for i in sel],
                        y=[d[key][i] for i in sel],
                        mode="markers",
                        marker={"symbol": symbol, "size": size, "color": colour},
                        name=f"first divergence ({kind})",
                        legendgroup=kind,
                        showlegend=row == 1,
                        hovertext=[
                            f"iteration {d['iteration'][i]}: {label(d['op_name'][i])}<br>"
                            + label(d["reason"][i])
                            for i in sel
                        ],
                        hovertemplate="%{hovertext}<extra></extra>",
                    ),
                    row=row,
                    col=1,
                )
        first = [
            i
            for i, k in enumerate(d["kind"])
            if k == "tolerance" and d["x"][i] is not None and d["iteration"][i] in by_iter
        ]
        if first:
            i = min(first, key=lambda j: (d["iteration"][j], d["x"][j]))
            fig.add_vline(
                x=d["x"][i],
                line={"color": FIRST, "dash": "dash", "width": 1},
                annotation_text=f"first divergence: {label(short_name(d['op_name'][i]), AXIS_TEXT)}",
                annotation_position="top right",
                annotation_font={"color": FIRST},
            )
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_xaxes(title_text="operator, in execution order", row=2, col=1)
    _layout(fig, 620, legend={"orientation": "h", "y": -0.12})
    return fig


def figure_html(fig: go.Figure, div_id: str, post_script: str = "") -> str:
    """The figure as a <div> and the script that draws it (plotly.js is included once by the page)."""
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config=CONFIG,
        post_script=post_script or None,
        default_width="100%",
        default_height=f"{fig.layout.height}px",
    )
