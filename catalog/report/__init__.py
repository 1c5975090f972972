"""`dumpcat report`: one self-contained HTML page that shows a run instead of printing it.

The page answers what a person chasing a NaN or a drift asks first: where did each step go wrong
(the first anomaly, its operator and line), how did it spread (a heat map of operators in execution
order × iteration), which operators moved (l2norm, max, min per iteration, the top movers
highlighted), where does the run part from a baseline (`--against`), and what could not be read.

The data is gathered by `data` (DuckDB, bounded results), the figures are plotly (`figures`), the
page around them `page`; this module writes the file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from catalog.report.data import Limits, ReportData, ReportError, ReportSummary, gather

if TYPE_CHECKING:
    from catalog.api import Catalog

# dumpcat is not on PyPI (`pip install 'dumpcat[report]'` would fetch another project): the checkout's extra
INSTALL_HINT = "pip install -e '.[report]'"

__all__ = ["INSTALL_HINT", "Limits", "ReportData", "ReportError", "ReportSummary", "gather", "write_report"]


def _check_out(out: Path) -> Path:
    """The file to write, or a ReportError saying why it cannot be written there.

    A symbolic link is followed (the file it names is replaced, the link kept). Anything that
    exists and is not a regular file is refused: the page replaces its target by a rename, which
    would put a regular file in place of a device (`--out /dev/null` as root), a FIFO or a socket."""
    if out.is_dir():
        raise ReportError(f"--out {out} is a directory: give a file name such as report.html")
    if out.is_symlink():
        out = out.resolve()
    if out.exists() and not out.is_file():
        raise ReportError(
            f"--out {out} is not a regular file (a device, FIFO or socket): give a file name such as "
            "report.html"
        )
    parent = out.parent if str(out.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise ReportError(f"cannot write {out}: {parent} is not a directory")
    if not parent.is_dir():
        raise ReportError(f"cannot write {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ReportError(f"cannot write {out}: directory {parent} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ReportError(f"cannot write {out}: the file is not writable")
    return out


def write_report(
    catalog: Catalog,
    out: str | os.PathLike,
    run: str | None = None,
    against: str | None = None,
    limits: Limits | None = None,
) -> ReportSummary:
    """Write the HTML report of `run` (the only run when None) to `out`, compared with the run
    `against` when given (which needs `dumpcat compare` to have run). The file is replaced
    atomically, so a reader never sees half a page."""
    started = time.perf_counter()
    try:
        from catalog.report.page import render_page
    except ModuleNotFoundError as exc:  # plotly is the `report` extra: only this command draws figures
        if (exc.name or "").split(".")[0] != "plotly":
            raise
        raise ReportError(f"plotly is not installed, which the report draws with: {INSTALL_HINT}") from None
    out = _check_out(Path(out))
    data = gather(catalog, run, against, limits or Limits())
    html = render_page(data)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as exc:  # a full disk, a file-size limit, a read-only or pseudo file system
        raise ReportError(f"cannot write {out}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    steps = data.summary.column("anomalous_steps")[0].as_py() if data.summary.num_rows else 0
    return ReportSummary(
        out=out,
        run=data.run,
        baseline=data.baseline,
        bytes=out.stat().st_size,
        anomalous_steps=steps,
        seconds=time.perf_counter() - started,
    )
