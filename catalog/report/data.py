"""The report's data: everything aggregated in DuckDB by the queries in `sql/queries/report_*.sql`;
Python only receives small, bounded results (see `Limits`), so the page stays a few MB and opens
quickly whatever the number of tensors."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from catalog.views import query_text

if TYPE_CHECKING:
    import duckdb

    from catalog.api import Catalog

__all__ = ["Limits", "ReportData", "ReportError", "ReportSummary", "gather"]


class ReportError(ValueError):
    """The report cannot be made (no such run, no comparison to show, an unusable output path)."""


@dataclass(frozen=True)
class Limits:
    """What the page shows at most, so its size is bounded whatever the catalog's.

    Every cut is said on the page, next to the figure it applies to."""

    max_ops: int = 150  # heat-map rows: first anomalies first, then the most anomalous operators
    max_columns: int = 120  # heat-map and trend columns: more iterations become equal ranges
    max_ranks: int = 8  # heat-map ranks: those with the most anomalous cells
    top_movers: int = 8  # trend lines highlighted (largest l2norm movement)
    other_trends: int = 40  # further trend lines drawn in grey (the next movers)
    max_steps: int = 200  # rows of the per-step first-anomaly table
    max_first_ops: int = 20  # rows of the first-anomaly operators table
    max_compare_points: int = 1000  # points per iteration of the comparison figure
    max_compare_iterations: int = 6  # iterations drawn in the comparison figure
    max_divergence_rows: int = 50  # rows of the first-divergence table (per kind)


@dataclass
class ReportData:
    """The aggregated results the page is made of (each a small Arrow table)."""

    catalog: str
    run: str
    baseline: str | None
    limits: Limits
    summary: pa.Table
    steps: pa.Table
    first_ops: pa.Table
    heat_ops: pa.Table
    columns: pa.Table
    heat_cells: pa.Table
    trends: pa.Table
    errors: pa.Table
    compare_points: pa.Table | None = None
    compare_iterations: list[int] = field(default_factory=list)
    compare_ops: int = 0
    divergences: pa.Table | None = None
    compare_status: pa.Table | None = None
    origins: pa.Table | None = None  # nan_origin's origin ranks (rank, iterations), for the heat map


@dataclass
class ReportSummary:
    """What `write_report` wrote."""

    out: Path
    run: str
    baseline: str | None
    bytes: int
    anomalous_steps: int
    seconds: float

    def line(self) -> str:
        against = f" against {self.baseline!r}" if self.baseline else ""
        return (
            f"wrote {self.out} ({self.bytes / 1e6:.1f} MB): run {self.run!r}{against}, "
            f"{self.anomalous_steps:,} anomalous steps, in {self.seconds:.2f} s"
        )


def _query(cur: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> pa.Table:
    return cur.sql(query_text(name), params=params or {}).to_arrow_table()


def _keep(cur: duckdb.DuckDBPyConnection, table: str, name: str, params: dict | None = None) -> None:
    """Keep the result of sql/queries/{name}.sql as the temporary table `table` of this cursor."""
    text = query_text(name).strip().rstrip(";")
    cur.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {text}", params or {})


def _choose_run(runs: list[str], run: str | None, catalog: str) -> str:
    if not runs:
        raise ReportError(
            f"catalog {catalog} holds no run yet: ingest a dump first "
            f"(dumpcat ingest DUMP --catalog {catalog})"
        )
    if run is None:
        if len(runs) > 1:
            raise ReportError(
                f"the catalog holds {len(runs)} runs ({', '.join(runs)}): choose one with --run"
            )
        return runs[0]
    if run not in runs:
        raise ReportError(f"run {run!r} is not in the catalog (runs: {', '.join(runs)})")
    return run


def gather(
    catalog: Catalog, run: str | None = None, against: str | None = None, limits: Limits = Limits()
) -> ReportData:
    """Run the report's queries on `catalog` and return their (small) results as a ReportData."""
    cur = catalog.cursor()
    try:
        runs = [r[0] for r in cur.execute("SELECT run FROM runs ORDER BY run").fetchall()]
        run = _choose_run(runs, run, str(catalog.path))
        if against is not None:
            if against == run:
                raise ReportError(f"--against names the run itself ({run!r}): give another run as baseline")
            if against not in runs:
                raise ReportError(f"baseline run {against!r} is not in the catalog (runs: {', '.join(runs)})")
        shown = [run] if against is None else [run, against]
        p = {"run": run}
        _keep(cur, "report_first", "report_first_anomaly", p)
        _keep(cur, "report_cells", "report_cells", p)
        _keep(cur, "report_columns", "report_columns", {"max_columns": limits.max_columns})
        _keep(cur, "report_heat_ops", "report_heat_ops", {"max_ops": limits.max_ops})
        data = ReportData(
            catalog=str(catalog.path),
            run=run,
            baseline=against,
            limits=limits,
            summary=_query(cur, "report_summary", {"runs": shown}),
            steps=_query(cur, "report_steps", {"limit": limits.max_steps}),
            first_ops=_query(cur, "report_first_ops", {"limit": limits.max_first_ops}),
            heat_ops=cur.sql("SELECT * FROM report_heat_ops ORDER BY y").to_arrow_table(),
            columns=cur.sql(
                "SELECT DISTINCT col, first_iteration, last_iteration FROM report_columns ORDER BY col"
            ).to_arrow_table(),
            heat_cells=_query(cur, "report_heatmap", {"max_ranks": limits.max_ranks}),
            trends=_query(cur, "report_trends", {"top_k": limits.top_movers, "others": limits.other_trends}),
            errors=_query(cur, "report_errors", {"runs": shown}),
            origins=_query(cur, "report_origins", p),
        )
        if against is not None:
            _gather_compare(cur, data, run, against, limits)
        return data
    finally:
        cur.close()


def _gather_compare(
    cur: duckdb.DuckDBPyConnection, data: ReportData, run: str, baseline: str, limits: Limits
) -> None:
    p = {"run": run, "baseline": baseline}
    data.compare_status = _query(cur, "report_compare_status", p)
    if data.compare_status.num_rows == 0:
        command = shlex.join(["dumpcat", "compare", data.catalog, run, baseline])
        raise ReportError(
            f"run {run!r} has not been compared with {baseline!r} yet: run `{command}` first, then the report"
        )
    _keep(cur, "report_compare_ops", "report_compare_ops", p)
    data.compare_ops = cur.sql("SELECT count(DISTINCT op_name) FROM report_compare_ops").fetchall()[0][0]
    data.compare_iterations = [
        r["iteration"]
        for r in _query(
            cur, "report_compare_iterations", {"max_iterations": limits.max_compare_iterations}
        ).to_pylist()
    ]
    data.compare_points = _query(
        cur,
        "report_compare",
        {"iterations": data.compare_iterations, "max_points": limits.max_compare_points},
    )
    data.divergences = _query(cur, "report_divergence", {**p, "limit": limits.max_divergence_rows})
