"""Size caps on the metadata files an ingest reads whole (issue 33: ingest of a hostile dump).

A dump is input from anyone. A regular file named `stack.json`, `graphs/*.pb` or `data_dump.json`
can hold gigabytes (a copy of `/dev/zero`, a sparse file): read whole, it took 23.5 GB before the
OOM killer ended the ingest and nothing was cataloged. Every metadata reader therefore opens its file
through `open_capped` / `read_capped`, which check the opened file's size (fstat, so a file swapped
after listing is still checked) against the cap of its kind and never read more than the cap even
when the size lies or the file grows meanwhile. A file over its cap is a `MetadataTooLarge`, an
OSError every reader already turns into one `ingest_errors` row naming the file and the cap; the
rest of the dump is cataloged.

Files that are legitimately big are streamed instead and have no cap of their own: tensor files,
`statistic.csv` (a cap per line and per field, `ingest.formats.mindspore.statistic_csv`), msprobe's
`dump.json`
(entry by entry, `ingest.formats.msprobe.dump_json`; the cap applies to one entry, or to a file not laid
out as msprobe writes it, which must be read whole).

The caps are generous, far above any real file (the real sizes behind each number are in
`DEFAULT_CAPS`), and configurable in one place: `max_metadata_size` of `Catalog.ingest`,
`dumpcat ingest|watch --max-metadata-size`, or the environment variable DUMPCAT_MAX_METADATA_SIZE,
each either one size for every kind (`1GiB`) or `kind=size` pairs (`graph=1GiB,json=128MiB`).
"""

from __future__ import annotations

import errno
import io
import os
import re
from dataclasses import dataclass, fields, replace
from typing import BinaryIO

ENV = "DUMPCAT_MAX_METADATA_SIZE"
OPTION = "--max-metadata-size"

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class MetadataCaps:
    """The largest file of each kind an ingest reads (bytes)."""

    # config.json, data_dump.json, hccl.json, kernel-args json, overflow json, construct.json, one
    # entry of dump.json: real ones are under a few KiB (tests/data: 45 B-41 KiB; a construct.json
    # of 10^5 modules ~5 MiB). 64 MiB is >1,000x that and parses in well under a GiB.
    json: int = 64 * MiB
    # mapping.csv, execution-order csvs, CANN stats csv: a line per renamed file, kernel or step
    # (~150-250 B). 10^5 kernels' execution order is ~15 MiB; tests/data's are 5 KiB.
    csv: int = 64 * MiB
    # stack.json (and ptdbg's .pkl lines): one stack per API call in the old flat form, ~1.5 KiB
    # each; a level-L1 step of 10^5 calls is ~150 MiB flat (grouped as msprobe >= 8 writes it, far
    # less). Parsed whole (its groups are shared), so 256 MiB.
    stack: int = 256 * MiB
    # graphs/*.pb and *.ir, GE graph text: ~1.2 KiB of IR per node, so a 100,000-node IR is ~115
    # MiB (bench/bench_ir.py) and the .pb a little less; tests/data's are 46-580 KiB. 512 MiB holds
    # ~450,000 nodes, more than any kernel graph seen, and bounds what protobuf decodes whole.
    graph: int = 512 * MiB
    # a dump.json not laid out as msprobe writes it (so not streamed entry by entry): read whole.
    # msprobe's own files are streamed whatever their size (10^5 entries are 78 MiB).
    dump_json: int = 256 * MiB

    @classmethod
    def parse(cls, text: str | int | MetadataCaps | None) -> MetadataCaps:
        """Caps from `1GiB` (every kind), `graph=1GiB,json=128MiB` (those kinds; the others keep
        their defaults), a number of bytes, or None (DUMPCAT_MAX_METADATA_SIZE, else the defaults).
        ValueError says what is wrong."""
        if isinstance(text, MetadataCaps):
            return text
        if text is None:
            text = os.environ.get(ENV, "").strip()
            if not text:
                return cls()
        if isinstance(text, int):
            return cls._every(_positive(text, str(text)))
        caps = cls()
        kinds = {f.name for f in fields(cls)}
        items = [p.strip() for p in text.split(",") if p.strip()]
        if not items:
            raise ValueError(f"max metadata size: empty ({_HELP})")
        if len(items) == 1 and "=" not in items[0]:
            return cls._every(parse_size(items[0]))
        for item in items:
            kind, sep, size = (s.strip() for s in item.partition("="))
            if not sep or kind not in kinds:
                known = ", ".join(sorted(kinds))
                raise ValueError(f"max metadata size: {item!r} is not KIND=SIZE with KIND one of {known}")
            caps = replace(caps, **{kind: parse_size(size)})
        return caps

    @classmethod
    def _every(cls, size: int) -> MetadataCaps:
        return cls(**{f.name: size for f in fields(cls)})

    def of(self, kind: str) -> int:
        return getattr(self, kind)

    def describe(self) -> str:
        return ", ".join(f"{f.name}={format_size(getattr(self, f.name))}" for f in fields(self))


DEFAULT_CAPS = MetadataCaps()
_HELP = "e.g. 1GiB, or graph=1GiB,json=128MiB"


def _positive(value: int, text: str) -> int:
    if value < 1:
        raise ValueError(f"max metadata size: {text!r} is not a positive size ({_HELP})")
    return value


_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(I?B?)\s*", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'64MiB' / '1GB' / '1.5 GiB' / '4096' -> bytes (KiB..TiB powers of 1024, KB..TB of 1000)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(f"max metadata size: cannot read {text!r} ({_HELP})")
    number, unit, suffix = m.group(1), m.group(2).upper(), m.group(3).upper()
    base = 1024 if suffix == "IB" else 1000
    return _positive(int(float(number) * base ** "_KMGT".index(unit or "_")), text)


def format_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


class MetadataTooLarge(OSError):
    """A metadata file over the cap of its kind: an OSError (errno EFBIG), so every reader's
    existing error path makes it one `ingest_errors` row; `str()` is the whole reason."""

    def __init__(self, kind: str, size: int | None, cap: int, what: str | None = None) -> None:
        seen = f"{size:,} bytes" if size is not None else "more bytes"
        message = (
            f"too large: {seen}{f' ({what})' if what else ''}, over the {format_size(cap)} cap on {kind} "
            f"metadata files (not read; raise it with {OPTION} {kind}=SIZE or {ENV})"
        )
        super().__init__(errno.EFBIG, message)
        self.kind, self.size, self.cap = kind, size, cap

    def __str__(self) -> str:
        return self.strerror


class _CappedRaw(io.RawIOBase):
    """A file descriptor that yields at most `cap` bytes in all: reading past them raises
    MetadataTooLarge (a size that lies, as /proc's do, or a file that grew after it was checked)."""

    def __init__(self, fd: int, kind: str, cap: int) -> None:
        self._fd, self._kind, self._cap, self._left = fd, kind, cap, cap

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self._fd, pos, whence)

    def tell(self) -> int:
        return os.lseek(self._fd, 0, os.SEEK_CUR)

    def fileno(self) -> int:
        return self._fd

    def readinto(self, b) -> int:
        if self._left <= 0:
            if os.read(self._fd, 1):
                raise MetadataTooLarge(self._kind, None, self._cap, "the file grew while it was read")
            return 0
        view = memoryview(b).cast("B")[: self._left]
        n = os.readv(self._fd, [view])
        self._left -= n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def check_size(size: int, kind: str, caps: MetadataCaps | None = None, what: str | None = None) -> None:
    """MetadataTooLarge when `size` bytes are over the cap of `kind` (for data already in hand or
    a part of a file, e.g. one dump.json entry)."""
    cap = (caps or DEFAULT_CAPS).of(kind)
    if size > cap:
        raise MetadataTooLarge(kind, size, cap, what)


def open_capped(path: str | os.PathLike, kind: str, caps: MetadataCaps | None = None) -> BinaryIO:
    """The file opened for binary reading, after checking its size against the cap of `kind`;
    reads stop at the cap whatever the size said. OSError (MetadataTooLarge over the cap)."""
    cap = (caps or DEFAULT_CAPS).of(kind)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size > cap:
            raise MetadataTooLarge(kind, size, cap)
        raw = _CappedRaw(fd, kind, cap)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(raw)  # type: ignore[return-value]


def read_capped(path: str | os.PathLike, kind: str, caps: MetadataCaps | None = None) -> bytes:
    """The whole file, when it is within the cap of `kind` (MetadataTooLarge otherwise)."""
    with open_capped(path, kind, caps) as f:
        return f.read()


def open_text_capped(
    path: str | os.PathLike, kind: str, caps: MetadataCaps | None = None, **text_options
) -> io.TextIOWrapper:
    """`open_capped` for text (`encoding`, `errors`, `newline` as `open` takes them)."""
    return io.TextIOWrapper(open_capped(path, kind, caps), **text_options)  # type: ignore[arg-type]
