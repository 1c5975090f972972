"""A hostile dump tree, made from a real one (issue 33 point 6): everything an attacker or a broken
producer can leave in a dump root, in one tree, each entry with the outcome dumpcat promises.

Used by tests/ingest/test_hostile_tree.py (a real `dumpcat ingest` and `dumpcat watch` of it, in CI) and
by bench/bench_hostile_ingest.py (time and peak RSS against the clean tree). `build_hostile_tree`
copies the real MindSpore 2.10 `nan_log` dump and plants, beside its 180 real tensors:

- symlinks out of the root (an npy file, a leaf folder, `/`, `/dev/zero` as `data_dump.json`) and
  one inside it; a FIFO named like an npy file and one named like an execution-order csv; a unix
  socket named like an npy file;
- truncated files: an npy cut inside its data, one cut inside its header, an empty one, garbage
  with an npy name, a statistic.csv whose last row is cut, a data_dump.json cut in half;
- huge fields (statistic.csv rows whose op names are 10^5 characters) and oversize metadata (a
  sparse kernel-args json over the json cap);
- a sparse 16 GiB npy file (holes only), and names an attacker picks: terminal escapes, bytes that
  are not UTF-8, a folder 64 levels deep.

Growth (a file written while ingest runs) needs a writer during the ingest: `GrowingNpy` is that
writer, held at half of its data until the test lets it finish. Each planted entry says what must
happen: an `ingest_errors` row whose reason starts with a given text, a tensor row, or both.
Every real tensor of the clean tree stays cataloged.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SRC_SCENARIO = "nan_log"
OUTSIDE = "a symlink out of the dump root: not followed (--follow-symlinks to allow it)"
LEAF = "rank_0/Net/0/0"
NPY_NAME = (
    "{op}.Default_network-WithLossCell__backbone-Net_{op}-op{n}.0.0.{ts}.output.0.DefaultFormat.Float32.npy"
)
STAT_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
    "L2Norm Value\n"
)
HUGE_NAME_ROWS = 50


@dataclass
class Planted:
    """One hostile entry: its path under the root (as dumpcat reports it) and what must happen."""

    rel: str
    what: str
    error: str | None  # the start of its ingest_errors reason, None for no error row
    cataloged: bool = False  # a tensor row too

    @property
    def fails(self) -> bool:
        return self.error is not None and not self.cataloged


@dataclass
class HostileTree:
    root: Path
    planted: list[Planted] = field(default_factory=list)
    clean_tensors: int = 0  # tensors of the untouched copy
    huge_rows: list[str] = field(default_factory=list)  # error rows of statistic.csv lines

    def plant(self, rel: str, what: str, error: str | None, *, cataloged: bool = False) -> None:
        self.planted.append(Planted(rel, what, error, cataloged))


def _npy_name(op: str, n: int, ts: int = 1795302834560000) -> str:
    return NPY_NAME.format(op=op, n=n, ts=ts + n)


def build_hostile_tree(dest: Path, source: Path, *, sparse_gib: int = 16) -> HostileTree:
    """`source` (a MindSpore dump root holding rank_0/) copied to `dest/dump` and made hostile;
    `dest/outside` holds what the links point at. Returns the tree and its planted entries."""
    outside = dest / "outside"
    shutil.copytree(source / LEAF, outside / "leaf")
    root = Path(shutil.copytree(source, dest / "dump"))
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    tree = HostileTree(root, clean_tensors=sum(1 for _ in root.rglob("*.npy")))
    leaf = root / LEAF
    real = sorted(leaf.glob("*.output.0.DefaultFormat.Float32.npy"))

    # -- out of the root, and inside it
    outside_npy = sorted((outside / "leaf").glob("*.npy"))[0]
    os.symlink(outside_npy, leaf / _npy_name("LinkOut", 0))
    tree.plant(f"{LEAF}/{_npy_name('LinkOut', 0)}", "npy linked out of the root", OUTSIDE)
    os.symlink(outside / "leaf", root / "rank_0/Net/0/7")
    tree.plant("rank_0/Net/0/7", "leaf folder linked out of the root", OUTSIDE)
    os.symlink("/", root / "rank_0/Net/0/8")
    tree.plant("rank_0/Net/0/8", "link to /", OUTSIDE)
    meta = root / "rank_0/.dump_metadata/data_dump.json"
    meta.unlink()
    os.symlink("/dev/zero", meta)
    tree.plant("rank_0/.dump_metadata/data_dump.json", "/dev/zero as data_dump.json", OUTSIDE)
    (root / "rank_0/Net/0/9").mkdir()
    os.symlink(real[0], root / "rank_0/Net/0/9" / real[0].name)
    tree.plant(f"rank_0/Net/0/9/{real[0].name}", "npy linked inside the root", None, cataloged=True)

    # -- files that are not regular files
    os.mkfifo(leaf / _npy_name("Fifo", 0))
    tree.plant(f"{LEAF}/{_npy_name('Fifo', 0)}", "FIFO as npy", "a FIFO, not a regular file")
    fifo_csv = "rank_0/execution_order/ms_execution_order_graph_5.csv"
    os.mkfifo(root / fifo_csv)
    tree.plant(fifo_csv, "FIFO as an execution-order csv", "a FIFO, not a regular file")
    sock_name = "Socket.Socket-op0.0.0.1795302834560000.output.0.DefaultFormat.Float32.npy"  # < 108 bytes
    _unix_socket_file(leaf / sock_name)
    tree.plant(f"{LEAF}/{sock_name}", "socket as npy", "a socket, not a regular file")

    # -- truncated and garbage files
    data = real[1].read_bytes()
    (leaf / _npy_name("CutData", 0)).write_bytes(data[: len(data) - 5])
    tree.plant(f"{LEAF}/{_npy_name('CutData', 0)}", "npy cut in its data", "truncated: header promises")
    (leaf / _npy_name("CutHeader", 0)).write_bytes(data[:40])
    tree.plant(f"{LEAF}/{_npy_name('CutHeader', 0)}", "npy cut in its header", "truncated npy header")
    (leaf / _npy_name("Empty", 0)).write_bytes(b"")
    tree.plant(f"{LEAF}/{_npy_name('Empty', 0)}", "empty npy", "not an npy file")
    (leaf / _npy_name("Garbage", 0)).write_bytes(os.urandom(4096))
    tree.plant(f"{LEAF}/{_npy_name('Garbage', 0)}", "random bytes as npy", "not an npy file")

    # -- statistic.csv: huge fields and a cut last row, in an iteration folder of its own
    stat_leaf = root / "rank_0/Net/0/5"
    stat_leaf.mkdir()
    good = [_stat_row(f) for f in real[2:4]]
    huge = [
        f'Conv2D,Default/{"x" * 100_000}-op{i},{i},0,1795302834569999,output,0,4,float32,"(1,)",1,1,1,\n'
        for i in range(HUGE_NAME_ROWS)
    ]
    (stat_leaf / "statistic.csv").write_text(STAT_HEADER + good[0] + "".join(huge) + good[1][:-9])
    tree.huge_rows = [f"rank_0/Net/0/5/statistic.csv:{n}" for n in range(3, 3 + HUGE_NAME_ROWS)]

    # -- oversize metadata (sparse: nothing may read it) and a sparse 16 GiB tensor
    from ingest.formats.limits import DEFAULT_CAPS

    kernel_args = f"{LEAF}/Evil.Default_network-Evil-op0.json"
    with open(root / kernel_args, "wb") as f:
        f.truncate(DEFAULT_CAPS.json + 1)
    tree.plant(kernel_args, "kernel-args json over the cap", "too large: ")
    sparse = _npy_name("Sparse", 0)
    shape = (sparse_gib << 8, 1 << 20)  # float32: sparse_gib GiB
    with open(leaf / sparse, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        f.truncate(f.tell() + 4 * shape[0] * shape[1])
    tree.plant(f"{LEAF}/{sparse}", "sparse 16 GiB npy", "sparse: ", cataloged=True)

    # -- names an attacker picks
    escape = _npy_name("Esc\x1b]0;pwned\x07\x1b[2J", 0)
    shutil.copyfile(real[4], leaf / escape)
    tree.plant(f"{LEAF}/{escape}", "terminal escapes in the name", None, cataloged=True)
    undecodable = os.fsdecode(b"Bad\xff\xfe" + _npy_name("Name", 0).encode())
    shutil.copyfile(real[6], leaf / undecodable)
    shown = "Bad\\xff\\xfe" + _npy_name("Name", 0)  # how dumpcat names it: the bytes escaped
    tree.plant(f"{LEAF}/{shown}", "a name that is not UTF-8", "file name is not valid UTF-8")
    deep = root / "rank_0/Net/0/6"
    for level in range(64):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    shutil.copyfile(real[5], deep / real[5].name)
    tree.plant("rank_0/Net/0/6/d0", "a folder 64 levels deep inside a leaf", "unrecognised file")
    return tree


def _stat_row(npy: Path) -> str:
    op_type, op, task, stream, ts, io, slot = npy.name.split(".")[:7]
    a = np.load(npy, mmap_mode="r")
    shape = '"(' + ",".join(map(str, a.shape)) + ')"'
    return f"{op_type},{op},{task},{stream},{ts},{io},{slot},{a.nbytes},float32,{shape},1.5,-2,3.25,\n"


def _unix_socket_file(path: Path) -> None:
    """A socket file at `path` (bound, then closed: the file stays)."""
    here = Path.cwd()
    os.chdir(path.parent)  # a socket address is limited to ~107 bytes: bind the bare name
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(path.name)
    finally:
        os.chdir(here)


class GrowingNpy:
    """A producer caught mid-write: `path` holds an npy header and the first half of its data
    until `finish()` writes the rest (as a dump writer does, which flushes as it goes)."""

    def __init__(self, path: Path, elements: int = 1 << 20) -> None:
        self.path = path
        self._data = np.ones(elements, dtype="<f4").tobytes()
        self._file = open(path, "wb")  # noqa: SIM115 (held open across the ingest, closed in finish)
        np.lib.format.write_array_header_1_0(
            self._file, {"descr": "<f4", "fortran_order": False, "shape": (elements,)}
        )
        self._file.write(self._data[: len(self._data) // 2])
        self._file.flush()

    def finish(self) -> None:
        self._file.write(self._data[len(self._data) // 2 :])
        self._file.close()
