"""Replay a real dump tree file by file, the way a training job writes it (for the live watcher).

    replay(src, dst, rate=0.0, seed=0, half_written=0.3) -> [rel paths, in order of creation]
    python -m tests.replay SRC DST [--rate FILES_PER_S] [--seed N] [--log]

``SRC`` is a dump root (the folder holding ``rank_N/``); ``DST`` ends up byte-identical to it. The
order is MindSpore's:

1. Compile-time files first, per rank: ``.dump_metadata/``, ``graphs/``,
   ``execution_order/ms_execution_order_graph_{g}.csv`` (and any other file outside the net
   directories), written whole.
2. Then the iterations, one after another in iteration order (``constants/`` first). Within an
   iteration the ``.npy`` files of every graph and rank are written in timestamp order (the
   timestamp field of the name, the field before ``input``/``output``; for a renamed
   ``<digits>.npy`` file, that of its ``mapping.csv`` name). Ranks interleave by timestamp.
   Kernel-args ``.json`` and other files of an iteration directory come after its npy files.
3. ``execution_order/ms_global_execution_order_graph_{g}.csv`` gets its next line (the lines of
   SRC, in order) appended just before the first file of that iteration in that rank.
4. ``statistic.csv`` is appended row by row: the header with the first row, each row just
   before its tensor file (``stat_rows="before"``, as MindSpore's ``E2eDump::DumpOutputImpl``
   does: ``DumpTensorStatsToFile`` runs before ``DumpMemToFile``) or just after it
   (``stat_rows="after"``). Rows without a tensor file follow the row before them. A seeded
   fraction of appends (``partial_lines``) stops inside a line; the rest of that line comes
   with the next append to the file, or after the next file written.
5. ``mapping.csv`` gets each line just after its renamed ``<digits>.npy`` file.

A seeded random fraction ``half_written`` of the npy files is written in two parts: the header
and part of the data (or, for a fraction ``cut_in_header`` of them, only part of the header),
then the writer calls ``on_file(rel, "partial")`` and sleeps ``pause`` seconds (a float, or a
``(low, high)`` range drawn per file) before writing the rest. ``on_file(rel, event)`` is also
called with ``"done"`` when a file is complete and ``"append"`` after every append to a csv.

``rate`` limits the files written per second (appends are not counted; 0 = as fast as possible).
The writer runs in the calling thread; run it as ``python -m tests.replay`` in a subprocess to be
able to SIGKILL it. With ``--log`` the command prints one line per event,
``{event}\\t{rel}\\t{unix time}``, flushed, so a driver can act at a precise moment.

``make_stat_csv_tree(src_dump, dst)`` copies a real dump and adds a v2.3-format ``statistic.csv``
(``Max Value,Min Value,L2Norm Value``, a trailing comma on every row, ``%g`` numbers of the real
data) to every iteration directory, so that replays exercise csv appends on real tensors.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import re
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["StatCsvRow", "make_stat_csv_tree", "plan", "replay", "tensor_key", "timestamp_of"]

STAT_CSV_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
    "Max Value,Min Value,L2Norm Value\n"
)
STATIC_RANK_DIRS = (".dump_metadata", "graphs", "execution_order")
GLOBAL_ORDER = re.compile(r"^ms_global_execution_order_graph_(\d+)\.csv$")
RANK_DIR = re.compile(r"^rank_(\d+)$")
DTYPE_TOKENS = frozenset(
    {
        "bool", "int2", "int4", "int8", "int16", "int32", "int64", "uint1", "uint2", "uint8", "uint16",
        "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "hifloat8", "float16", "float32", "float64",
        "bfloat16", "complex64", "complex128", "string",
    }
)  # fmt: skip
OnFile = Callable[[str, str], None]


# --------------------------------------------------------------------------------------------------
# File names


def tensor_key(name: str) -> tuple[str, str, str, str, str, str, str] | None:
    """(op_type, op_name, task, stream, timestamp, io, slot) of a tensor file name, or None.

    Parsed from the right as MindSpore does (op names may hold dots before v2.3); the optional
    v2.4+ dtype token is dropped.
    """
    if not name.endswith(".npy"):
        return None
    parts = name[:-4].split(".")
    if len(parts) >= 9 and parts[-1].lower() in DTYPE_TOKENS:
        parts.pop()
    if len(parts) < 8 or parts[-3] not in ("input", "output"):
        return None
    _fmt, slot, io_, ts, stream, task = parts[-1], parts[-2], parts[-3], parts[-4], parts[-5], parts[-6]
    return parts[0], ".".join(parts[1:-6]), task, stream, ts, io_, slot


def timestamp_of(name: str) -> int | None:
    """The µs timestamp of a tensor file name: the field before ``input``/``output`` (the 5th
    from the end before v2.4, the 6th when the name ends with a dtype token)."""
    key = tensor_key(name)
    if key is not None and key[4].isdigit():
        return int(key[4])
    parts = name.split(".")
    if len(parts) >= 5 and parts[-5].isdigit():
        return int(parts[-5])
    return None


def _read_lines(path: Path) -> list[bytes]:
    """The lines of a file with their end (the last one may lack it)."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _mapping(path: Path) -> dict[str, str]:
    out = {}
    for line in _read_lines(path):
        digits, _, original = line.decode("utf-8", "replace").strip().partition(",")
        if original:
            out[digits] = original
    return out


# --------------------------------------------------------------------------------------------------
# The plan: an ordered list of whole-file writes and appends


@dataclass
class _Write:
    rel: str
    src: Path
    tensor: bool  # an npy file that may be written in two parts


@dataclass
class _Append:
    rel: str
    data: bytes


@dataclass
class _Leaf:
    rank: int
    rel_dir: str
    path: Path
    iteration: int  # -1 for constants/ and any non-numeric leaf
    tensors: list[tuple[int, str]] = field(default_factory=list)  # (timestamp, name)
    others: list[str] = field(default_factory=list)
    mapping: dict[str, str] = field(default_factory=dict)


def _leaves(src: Path, rank: int, rank_dir: Path) -> tuple[list[Path], list[_Leaf]]:
    """Compile-time files of a rank, and its leaf (iteration / constants) directories."""
    static: list[Path] = []
    leaves: list[_Leaf] = []
    for entry in sorted(rank_dir.iterdir()):
        if entry.is_file():
            static.append(entry)
        elif entry.name in STATIC_RANK_DIRS:
            static.extend(p for p in sorted(entry.rglob("*")) if p.is_file())
        else:  # a net directory: {net}/{graph}/{leaf}/files
            leaf_dirs = {p for p in entry.glob("*/*") if p.is_dir()}
            for p in sorted(entry.rglob("*")):
                if p.is_file() and p.parent not in leaf_dirs:
                    static.append(p)  # unexpected place: written with the compile-time files
            for d in sorted(leaf_dirs):
                it = int(d.name) if d.name.isdigit() else -1
                leaves.append(_Leaf(rank, d.relative_to(src).as_posix(), d, it))
    for leaf in leaves:
        if (leaf.path / "mapping.csv").is_file():
            leaf.mapping = _mapping(leaf.path / "mapping.csv")
        for p in sorted(leaf.path.iterdir()):
            if p.is_dir():
                static.extend(q for q in sorted(p.rglob("*")) if q.is_file())
            elif p.name in ("statistic.csv", "mapping.csv"):
                continue
            elif p.name.endswith(".npy"):
                ts = timestamp_of(leaf.mapping.get(p.name, p.name))
                leaf.tensors.append((ts if ts is not None else 2**63, p.name))
            else:
                leaf.others.append(p.name)
    return static, leaves


def plan(
    src: str | os.PathLike,
    *,
    seed: int = 0,
    stat_rows: str = "before",
    partial_lines: float = 0.25,
) -> list[_Write | _Append]:
    """The ordered writes and appends that rebuild ``src`` (see the module docstring)."""
    if stat_rows not in ("before", "after"):
        raise ValueError("stat_rows must be 'before' or 'after'")
    src = Path(src)
    rng = random.Random(f"plan-{seed}")
    head: list[_Write] = [_Write(p.relative_to(src).as_posix(), p, False) for p in sorted(src.iterdir())
                          if p.is_file()]  # fmt: skip
    ranks = sorted(
        ((int(m.group(1)), p) for p in src.iterdir() if p.is_dir() and (m := RANK_DIR.match(p.name))),
    )
    others = [p for p in sorted(src.iterdir()) if p.is_dir() and not RANK_DIR.match(p.name)]
    for d in others:  # not a dump layout: write it with the compile-time files
        head.extend(_Write(p.relative_to(src).as_posix(), p, False) for p in sorted(d.rglob("*"))
                    if p.is_file())  # fmt: skip

    # Events in file order: (iteration, timestamp, rank, rel_dir, tie, name, leaf).
    events: list[tuple] = []
    globals_: list[tuple[int, Path]] = []
    for rank, rank_dir in ranks:
        static, leaves = _leaves(src, rank, rank_dir)
        for p in static:
            if (
                p.parent.name == "execution_order"
                and p.parent.parent == rank_dir
                and GLOBAL_ORDER.match(p.name)
            ):
                globals_.append((rank, p))
            else:
                head.append(_Write(p.relative_to(src).as_posix(), p, False))
        for leaf in leaves:
            for ts, name in leaf.tensors:
                events.append((leaf.iteration, ts, rank, leaf.rel_dir, 0, name, leaf))
            last = max((ts for ts, _ in leaf.tensors if ts < 2**63), default=0)
            for name in leaf.others:
                events.append((leaf.iteration, last, rank, leaf.rel_dir, 1, name, leaf))
    events.sort(key=lambda e: e[:6])
    n = len(events)

    # Appends, keyed by position: before[i] happens just before event i (i == n: at the end),
    # after[i] just after it.
    before: list[list[_Append]] = [[] for _ in range(n + 1)]
    after: list[list[_Append]] = [[] for _ in range(n + 1)]
    index = {(e[3], e[5]): i for i, e in enumerate(events)}

    # Global execution history: a line when its iteration starts in that rank.
    for rank, path in globals_:
        rel = path.relative_to(src).as_posix()
        firsts: dict[int, int] = {}
        for i, e in enumerate(events):
            if e[2] == rank:
                firsts.setdefault(e[0], i)
        due = 0
        for line in _read_lines(path):
            text = line.strip()
            it = int(text) if text.isdigit() else None
            if it is not None:
                later = [i for k, i in firsts.items() if k >= it]
                pos = firsts.get(it, min(later) if later else n)
                due = max(due, pos)
            before[due].append(_Append(rel, line))

    # statistic.csv and mapping.csv of every leaf.
    leaves_seen = {}
    for e in events:
        leaves_seen.setdefault(e[3], e[6])
    for rel_dir, leaf in leaves_seen.items():
        first = min(index[(rel_dir, name)] for _, name in leaf.tensors) if leaf.tensors else n
        stat = leaf.path / "statistic.csv"
        if stat.is_file():
            _plan_stat_csv(stat, f"{rel_dir}/statistic.csv", leaf, index, first, n,
                           before if stat_rows == "before" else after, after, rng, partial_lines)  # fmt: skip
        mp = leaf.path / "mapping.csv"
        if mp.is_file():
            due = first
            for line in _read_lines(mp):
                digits = line.decode("utf-8", "replace").partition(",")[0]
                due = max(due, index.get((rel_dir, digits), due))
                after[due].append(_Append(f"{rel_dir}/mapping.csv", line))

    ops: list[_Write | _Append] = list(head)
    for i, e in enumerate(events):
        ops.extend(before[i])
        leaf = e[6]
        ops.append(_Write(f"{leaf.rel_dir}/{e[5]}", leaf.path / e[5], e[4] == 0))
        ops.extend(after[i])
    ops.extend(before[n])
    ops.extend(after[n])
    return ops


def _plan_stat_csv(
    path: Path,
    rel: str,
    leaf: _Leaf,
    index: dict[tuple[str, str], int],
    first: int,
    n: int,
    rows_at: list[list[_Append]],
    after: list[list[_Append]],
    rng: random.Random,
    partial_lines: float,
) -> None:
    """Rows of one statistic.csv, each due with its tensor file; some appends end mid-line."""
    by_key = {}
    for _, name in leaf.tensors:
        key = tensor_key(leaf.mapping.get(name, name))
        if key is not None:
            by_key.setdefault(key, name)
    lines = _read_lines(path)
    dues: list[int] = []
    due = first
    for k, line in enumerate(lines):
        if k > 0:
            try:
                fields = next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))))
            except (csv.Error, StopIteration):
                fields = []
            if len(fields) >= 7:
                name = by_key.get(tuple(fields[:7]))
                if name is not None:
                    due = max(due, index[(leaf.rel_dir, name)])
        dues.append(due)
    # The header goes with the first row.
    if len(dues) > 1:
        dues[0] = dues[1]
    # Group consecutive lines due at the same point into one append.
    chunks: list[tuple[int, bytes]] = []
    for due, line in zip(dues, lines, strict=True):
        if chunks and chunks[-1][0] == due:
            chunks[-1] = (due, chunks[-1][1] + line)
        else:
            chunks.append((due, line))
    # Some appends stop inside their last line; the rest comes with the next append, or (for the
    # last one) after the next file written.
    carry = b""
    for j, (due, chunk) in enumerate(chunks):
        data = carry + chunk
        carry = b""
        if rng.random() < partial_lines:
            start = data.rstrip(b"\n").rfind(b"\n") + 1
            if len(data) - start > 1:
                cut = rng.randrange(max(start, 1), len(data))
                data, carry = data[:cut], data[cut:]
        rows_at[due].append(_Append(rel, data))
        if carry and j + 1 == len(chunks):
            tail_at = due if rows_at is not after else min(due + 1, n)
            after[tail_at].append(_Append(rel, carry))


# --------------------------------------------------------------------------------------------------
# Writing


def _header_end(data: bytes) -> int:
    """Offset where an npy file's data starts (0 when it is not an npy file)."""
    if len(data) >= 10 and data.startswith(b"\x93NUMPY"):
        if data[6] == 1:
            return min(len(data), 10 + struct.unpack_from("<H", data, 8)[0])
        if data[6] in (2, 3) and len(data) >= 12:
            return min(len(data), 12 + struct.unpack_from("<I", data, 8)[0])
    return 0


class WriteBudget:
    """How far each host's training may write: nothing while its watcher is down, and at most
    `parts` shares of its files, one share at the start and one more per `release`."""

    def __init__(self, totals: list[int], parts: int) -> None:
        self._share = [max(1, -(-total // parts)) for total in totals]
        self._budget = list(self._share)
        self._done = [0] * len(totals)
        self._up = [False] * len(totals)
        self._cond = threading.Condition()

    def wait(self, k: int, event: str) -> None:
        """Called by host k's writer after each write; blocks until the test lets it go on."""
        with self._cond:
            self._done[k] += event == "done"
            self._cond.wait_for(lambda: self._up[k] and self._done[k] < self._budget[k], timeout=180)

    def release(self, k: int) -> None:
        with self._cond:
            self._budget[k] += self._share[k]
            self._cond.notify_all()

    def up(self, k: int) -> None:
        with self._cond:
            self._up[k] = True
            self._cond.notify_all()

    def down(self, k: int) -> None:
        with self._cond:
            self._up[k] = False

    def open_all(self) -> None:
        """Let every host write the rest of its files."""
        with self._cond:
            self._up = [True] * len(self._up)
            self._budget = [1 << 62] * len(self._budget)
            self._cond.notify_all()


def files_written(
    src: Path | str, *, seed: int = 0, stat_rows: str = "before", partial_lines: float = 0.25
) -> int:
    """How many files `replay` of `src` writes whole, i.e. its "done" events (csv appends aside)."""
    ops = plan(Path(src), seed=seed, stat_rows=stat_rows, partial_lines=partial_lines)
    return sum(not isinstance(op, _Append) for op in ops)


def replay(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    rate: float = 0.0,
    seed: int = 0,
    half_written: float = 0.3,
    on_file: OnFile | None = None,
    pause: float | tuple[float, float] = (0.005, 0.05),
    cut_in_header: float = 0.0,
    stat_rows: str = "before",
    partial_lines: float = 0.25,
) -> list[str]:
    """Rebuild ``src`` under ``dst`` file by file, as training writes it; return the rel paths
    in order of creation (each once). ``dst`` is created; files in it are overwritten."""
    ops = plan(src, seed=seed, stat_rows=stat_rows, partial_lines=partial_lines)
    rng = random.Random(f"write-{seed}")
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    seen: set[str] = set()
    made_dirs: set[Path] = set()
    notify = on_file or (lambda rel, event: None)
    started = time.monotonic()
    written = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)

    def mkparent(path: Path) -> None:
        if path.parent not in made_dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            made_dirs.add(path.parent)

    for op in ops:
        target = dst / op.rel
        if isinstance(op, _Append):
            mkparent(target)
            if op.rel not in seen:
                seen.add(op.rel)
                created.append(op.rel)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, op.data)
            finally:
                os.close(fd)
            notify(op.rel, "append")
            continue
        if rate > 0:
            wait = started + written / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        written += 1
        data = op.src.read_bytes()
        mkparent(target)
        half = op.tensor and len(data) > 1 and rng.random() < half_written
        if half:
            hend = _header_end(data)
            if hend <= 1 or hend >= len(data) or rng.random() < cut_in_header:
                cut = rng.randrange(1, max(2, min(hend, len(data)) if hend > 1 else len(data)))
            else:
                cut = hend + rng.randrange(0, len(data) - hend)
            nap = pause if isinstance(pause, int | float) else rng.uniform(*pause)
        if op.rel not in seen:
            seen.add(op.rel)
            created.append(op.rel)
        fd = os.open(target, flags, 0o644)
        try:
            if half:
                os.write(fd, data[:cut])
                notify(op.rel, "partial")
                time.sleep(nap)
                os.write(fd, data[cut:])
            else:
                os.write(fd, data)
        finally:
            os.close(fd)
        notify(op.rel, "done")
    return created


# --------------------------------------------------------------------------------------------------
# A statistic.csv for every iteration directory of a real (CPU) dump


@dataclass(frozen=True)
class StatCsvRow:
    name: str
    line: str


def _g(x: float) -> str:
    return "%g" % x  # noqa: UP031 (C's %g, as MindSpore's ostream writes 6 significant digits)


def _stat_rows(leaf: Path) -> list[StatCsvRow]:
    mapping = _mapping(leaf / "mapping.csv") if (leaf / "mapping.csv").is_file() else {}
    rows = []
    for p in leaf.iterdir():
        if not p.name.endswith(".npy"):
            continue
        original = mapping.get(p.name, p.name)
        key = tensor_key(original)
        if key is None:
            continue
        arr = np.load(p, allow_pickle=False)
        if arr.size == 0 or arr.dtype.kind == "c":
            continue
        vals = arr.astype(np.float64).ravel()
        with np.errstate(invalid="ignore", over="ignore"):
            mx, mn = float(np.max(vals)), float(np.min(vals))
            l2 = float(np.sqrt(np.sum(vals * vals)))
        token = original[:-4].rsplit(".", 1)[-1].lower()
        dtype = token if token in DTYPE_TOKENS else arr.dtype.name
        shape = '"(' + ",".join(str(d) for d in arr.shape) + ')"'
        op_type, op_name, task, stream, ts, io_, slot = key
        line = (
            f"{op_type},{op_name},{task},{stream},{ts},{io_},{slot},{arr.nbytes},{dtype},{shape},"
            f"{_g(mx)},{_g(mn)},{_g(l2)},\n"
        )
        rows.append((int(ts), p.name, StatCsvRow(p.name, line)))
    rows.sort(key=lambda r: r[:2])
    return [r[2] for r in rows]


def make_stat_csv_tree(src_dump: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy a real dump to ``dst`` and add a v2.3-format statistic.csv (max, min, l2norm of the real
    data, one row per npy file in timestamp order) to every iteration directory. Returns ``dst``."""
    src_dump, dst = Path(src_dump), Path(dst)
    shutil.copytree(src_dump, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for rank_dir in sorted(p for p in dst.iterdir() if p.is_dir() and RANK_DIR.match(p.name)):
        for net in sorted(p for p in rank_dir.iterdir() if p.is_dir() and p.name not in STATIC_RANK_DIRS):
            for leaf in sorted(net.glob("*/*")):
                if leaf.is_dir() and leaf.name.isdigit():
                    rows = _stat_rows(leaf)
                    if rows:
                        text = STAT_CSV_HEADER + "".join(r.line for r in rows)
                        (leaf / "statistic.csv").write_text(text, encoding="utf-8", newline="")
    return dst


# --------------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="dump root to copy (holds rank_N/)")
    p.add_argument("dst", help="where to write it")
    p.add_argument("--rate", type=float, default=0.0, help="files per second (0: as fast as possible)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--half-written", type=float, default=0.3, help="share of npy files written in two parts")
    p.add_argument("--pause", type=float, nargs=2, default=(0.005, 0.05), metavar=("LOW", "HIGH"),
                   help="seconds between the two parts (drawn uniformly)")  # fmt: skip
    p.add_argument(
        "--cut-in-header", type=float, default=0.0, help="share of two-part files cut in the header"
    )
    p.add_argument("--stat-rows", choices=["before", "after"], default="before")
    p.add_argument("--partial-lines", type=float, default=0.25)
    p.add_argument("--log", action="store_true", help="print 'event<TAB>rel<TAB>time' per event, flushed")
    a = p.parse_args(argv)

    def log(rel: str, event: str) -> None:
        sys.stdout.write(f"{event}\t{rel}\t{time.time():.6f}\n")
        sys.stdout.flush()

    files = replay(
        a.src, a.dst, rate=a.rate, seed=a.seed, half_written=a.half_written,
        on_file=log if a.log else None, pause=tuple(a.pause), cut_in_header=a.cut_in_header,
        stat_rows=a.stat_rows, partial_lines=a.partial_lines,
    )  # fmt: skip
    if a.log:
        log("", "end")
    else:
        print(f"{len(files)} files written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
