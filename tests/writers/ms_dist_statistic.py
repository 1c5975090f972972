"""A statistics-only 4-rank MindSpore dump (issue 37): tests/data/ms_dist_statistic/dist_allreduce/.

What MindSpore 2.3+ writes on Ascend or GPU with `saved_data: "statistic"` and the default
`statistic_category` (`["max", "min", "l2norm"]`): one `statistic.csv` per rank and iteration
instead of `.npy` files. The CPU backend refuses `saved_data: "statistic"`, so this tree is written
strictly from the reference (mindspore-dump-formats.md §1: the default ≥2.3 header, a trailing comma
on every data row, 6 significant digits, `nan`/`inf`, max and min `nan` as soon as one element is
NaN, `"(d0,d1)"` shapes, µs timestamps equal to the npy file's), from the tensors of the REAL 4-rank
run tests/data/ms210/dist_allreduce: one row per `.npy` file, in the file's own name, timestamp and
order (by timestamp). Each rank's `execution_order/` and `graphs/` are copied unchanged, so names
and source lines resolve as for the npy tree; `.dump_metadata/` is not (it describes a tensor dump).

What it keeps from the npy tree: the planted NaN on rank 2, iteration 1, `Log-op0` (line 95 of
tests/writers/ms210_dist_dumps.py), and ranks 0, 1, 3 first see it in `Default/AllReduce-op2`'s
output. What it loses: there are no NaN or Inf counts, only max/min/l2norm, so a tensor is known to
hold NaN (max `nan`) or Inf (max or min `inf`, no NaN), not how many elements.

Run it as a script (project venv) to regenerate the tree.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).parents[1] / "data"
SOURCE = DATA / "ms210" / "dist_allreduce" / "dump"
OUT = DATA / "ms_dist_statistic" / "dist_allreduce"
HEADER = (  # the default >= 2.3 header (statistic_category max, min, l2norm), reference §1.2
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
    "Max Value,Min Value,L2Norm Value"
)


def number(value: float) -> str:
    """C++ ostream default formatting of a double: 6 significant digits, `nan`, `inf`, `-inf`."""
    return "%g" % value  # noqa: UP031 (%g is exactly ostream's default)


def row(path: Path) -> tuple[int, str]:
    """(timestamp, csv line) of one npy file."""
    op_type, op_name, task, stream, ts, io, slot = path.name.split(".")[:7]
    a = np.load(path)
    values = a.astype(np.float64).ravel()
    if values.size == 0:
        stats = ["", "", ""]
    elif np.isnan(values).any():
        stats = ["nan", "nan", "nan"]
    else:
        stats = [number(values.max()), number(values.min()), number(float(np.sqrt(np.sum(values * values))))]
    shape = '"(' + ",".join(str(d) for d in a.shape) + ')"'
    fields = [op_type, op_name, task, stream, ts, io, slot, str(a.nbytes), a.dtype.name, shape, *stats]
    return int(ts), ",".join(fields) + ","


def write(src: Path, out: Path) -> int:
    """Write the tree; returns the number of statistic rows."""
    if out.exists():
        shutil.rmtree(out)
    rows = 0
    for rank_dir in sorted(src.glob("rank_*")):
        for part in ("execution_order", "graphs"):
            shutil.copytree(rank_dir / part, out / rank_dir.name / part)
        for it_dir in sorted((rank_dir / "Net" / "0").iterdir()):
            lines = [line for _, line in sorted(row(p) for p in it_dir.glob("*.npy"))]
            dst = out / rank_dir.name / "Net" / "0" / it_dir.name
            dst.mkdir(parents=True)
            (dst / "statistic.csv").write_text(HEADER + "\n" + "\n".join(lines) + "\n")
            rows += len(lines)
    return rows


if __name__ == "__main__":
    print(f"{write(SOURCE, Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)} statistic rows")
