"""Parse one Ascend/CANN raw dump file `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`.

Two layouts exist (reference msprobe-cann-formats.md §3.2, mindspore-dump-formats.md §5.2):

- 'big_dump' (dump version 2.0, all current CANN and MindSpore >= 1.6): a little-endian uint64
  header length, a `toolkit.dumpdata.DumpData` protobuf of that length whose `data` fields are
  empty, then the tensor bytes of every input, output, buffer (and workspace `space`) in that order,
  each exactly its declared `size` long;
- 'protobuf' (dump version 1.0, pre-2021): the whole file is one DumpData with the bytes inline.

The TLV "nano" layout (magic 0x5A5A5A5A at offset 8) is recognised and refused: the reference
does not pin down its TLNV framing (widths of tag/length/count, alignment of the descriptors) nor
the full GE data-type numbering it uses, and a guessed decoder would read wrong numbers.

Headers are decoded by a small protobuf wire-format walker, which must exist anyway to find where
each inline `data` field starts in the 'protobuf' layout and which reports exactly which byte of a
broken header is wrong. The common case, a big-dump header whose sizes add up to the file, is
first tried with the generated `dump_data_pb2` (its C parser is 3x faster); anything else goes to
the walker. Tests cross-check the two.

Nothing here reads tensor bytes: `RawSlot.offset`/`size` locate them for `dtypes.decode`.
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ingest.formats import dtypes

HEADER_PROBE_BYTES = 4096  # one page; real headers are a few hundred bytes, longer ones are re-read
NANO_MAGIC = 0x5A5A5A5A
_MAX_HEADER = 1 << 30  # a header length beyond this is not a header, whatever the file size
_MAX_SIZE = 1 << 48  # 256 TiB: a declared tensor size beyond this is garbage, not a file still growing
_MAX_ELEMENTS = 1 << 50


class RawDumpError(ValueError):
    """The file is not a usable raw dump; the message says exactly why."""


class RawDumpIncomplete(RawDumpError):
    """The file is shorter than its header or sizes declare: still being written, or truncated."""


class _NeedBytes(RawDumpError):
    """parse_raw_header was given too short a prefix; read_raw_dump reads `want` bytes and retries."""

    def __init__(self, want: int, have: int) -> None:
        super().__init__(f"need the first {want} bytes of the file to parse its header, got {have}")
        self.want = want


class _NotDumpData(RawDumpError):
    """The bytes tried are not a DumpData at all (so the file may have the other layout)."""


@dataclass(frozen=True, slots=True)
class RawSlot:
    """One tensor of the dump: where its bytes are and how to decode them.

    Buffers carry no type: they are 'DT_UNDEFINED' / 'raw', format 'ND', shape (size,).
    """

    io: str  # 'input' | 'output' | 'buffer' | 'space' ('space' is never produced yet, see module doc)
    index: int  # position within its io kind
    data_type: str  # 'DT_FLOAT16', or 'DT_<number>' for numbers this version does not know
    stored_dtype: str  # dtypes.stored_dtype_of(data_type)
    format: str  # 'NC1HWC0', 'ND', ... or 'FORMAT_<number>'
    shape: tuple[int, ...]  # shape.dim: the device shape
    original_shape: tuple[int, ...] | None  # None when absent or empty in the header
    size: int  # bytes declared
    offset: int  # absolute byte offset of the data in the file
    sub_format: int


@dataclass(frozen=True, slots=True)
class RawDump:
    layout: str  # 'big_dump' | 'protobuf'
    version: str
    dump_time: int
    op_name: str  # DumpData.op_name: the full, unsanitised scope name
    header_len: int  # 0 for 'protobuf'
    slots: tuple[RawSlot, ...]  # inputs, outputs, buffers, in file order
    declared_size: int  # total bytes the header says the file has
    file_size: int  # bytes in the file when its header was read


# ---------------------------------------------------------------------------------------------
# protobuf wire format


class _WireError(Exception):
    """Malformed protobuf wire data; the message names the byte offset."""


class _Truncated(_WireError):
    """A field runs past the end of the available bytes."""


_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _Truncated(f"varint at byte {start} runs past the end ({end})")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & 0xFFFF_FFFF_FFFF_FFFF, pos
        shift += 7
        if shift >= 70:
            raise _WireError(f"varint at byte {start} is longer than 10 bytes")


def _next_field(buf: bytes, pos: int, end: int) -> tuple[int, int, int | None, int, int]:
    """Decode the field whose tag is at `pos`: (number, wire type, value, value start, next pos).

    value is the integer for VARINT/I64/I32 and the end offset for LEN (the bytes are
    buf[start:value]); groups (deprecated, never in DumpData) are skipped with value None.
    """
    tag_at = pos
    tag, pos = _varint(buf, pos, end)
    number, wire = tag >> 3, tag & 7
    if number == 0:
        raise _WireError(f"field number 0 at byte {tag_at}")
    start = pos
    value: int | None
    if wire == _VARINT:
        value, pos = _varint(buf, pos, end)
    elif wire == _LEN:
        length, start = _varint(buf, pos, end)
        pos = value = start + length
        if pos > end:
            raise _Truncated(
                f"field {number} at byte {tag_at} declares {length} bytes, which run past the end ({end})"
            )
    elif wire in (_I64, _I32):
        pos += 8 if wire == _I64 else 4
        if pos > end:
            raise _Truncated(f"fixed-width field {number} at byte {tag_at} runs past the end ({end})")
        value = int.from_bytes(buf[start:pos], "little")
    elif wire == _SGROUP:
        value = None
        while True:  # skip to the matching END_GROUP
            if pos >= end:
                raise _Truncated(f"group {number} at byte {tag_at} is not closed before the end ({end})")
            inner, after = _varint(buf, pos, end)
            if inner & 7 == _EGROUP:
                if inner >> 3 != number:
                    raise _WireError(f"group {number} at byte {tag_at} closed by field {inner >> 3}")
                pos = after
                break
            pos = _next_field(buf, pos, end)[4]
    else:
        raise _WireError(f"wire type {wire} of field {number} at byte {tag_at} is invalid here")
    return number, wire, value, start, pos


def _fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any, int]]:
    """Yield (number, wire type, value, value start) for each field in buf[pos:end]."""
    while pos < end:
        number, wire, value, start, pos = _next_field(buf, pos, end)
        yield number, wire, value, start


def _int32(value: int) -> int:
    """A proto int32/enum varint (negative values are sign-extended to 64 bits) as a Python int."""
    value &= 0xFFFF_FFFF_FFFF_FFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def _shape_dims(buf: bytes, start: int, end: int, into: list[int]) -> None:
    for number, wire, value, vstart in _fields(buf, start, end):
        if number != 1:
            continue
        if wire == _VARINT:
            into.append(value)
        elif wire == _LEN:  # packed
            pos = vstart
            while pos < value:
                dim, pos = _varint(buf, pos, value)
                into.append(dim)


@dataclass(slots=True)
class _Slot:
    data_type: int = 0
    format: int = 0
    shape: list[int] | None = None
    original_shape: list[int] | None = None
    data_start: int = 0
    data_len: int = 0
    size: int = 0
    sub_format: int = 0


# Field numbers per message kind: (data_type, format, shape, data, size, original_shape, sub_format).
_OUTPUT = (1, 2, 3, 5, 6, 7, 8)
_INPUT = (1, 2, 3, 4, 5, 6, 7)
_BUFFER = (None, None, None, 2, 3, None, None)


def _slot(buf: bytes, start: int, end: int, numbers: tuple[int | None, ...]) -> _Slot:
    f_dt, f_fmt, f_shape, f_data, f_size, f_orig, f_sub = numbers
    slot = _Slot()
    for number, wire, value, vstart in _fields(buf, start, end):
        if wire == _VARINT:
            if number == f_dt:
                slot.data_type = _int32(value)
            elif number == f_fmt:
                slot.format = _int32(value)
            elif number == f_size:
                slot.size = value
            elif number == f_sub:
                slot.sub_format = _int32(value)
        elif wire == _LEN:
            if number == f_data:
                slot.data_start, slot.data_len = vstart, value - vstart
            elif number == f_shape:
                slot.shape = slot.shape if slot.shape is not None else []
                _shape_dims(buf, vstart, value, slot.shape)  # a repeated message field merges
            elif number == f_orig:
                slot.original_shape = slot.original_shape if slot.original_shape is not None else []
                _shape_dims(buf, vstart, value, slot.original_shape)
    return slot


@dataclass(slots=True)
class _Header:
    version: str = ""
    dump_time: int = 0
    op_name: str = ""
    inputs: list[_Slot] = field(default_factory=list)
    outputs: list[_Slot] = field(default_factory=list)
    buffers: list[_Slot] = field(default_factory=list)
    unknown_fields: bool = False


def _dump_data(buf: bytes, start: int, end: int) -> _Header:
    """Decode a DumpData message in buf[start:end]; offsets in the slots are absolute in buf."""
    head = _Header()
    for number, wire, value, vstart in _fields(buf, start, end):
        if wire == _LEN and number in (1, 6):
            # proto3 strings are UTF-8; a producer bug should not cost the tensors, so be lenient
            text = bytes(buf[vstart:value]).decode("utf-8", errors="replace")
            if number == 1:
                head.version = text
            else:
                head.op_name = text
        elif wire == _VARINT and number == 2:
            head.dump_time = value
        elif wire == _LEN and number == 3:
            head.outputs.append(_slot(buf, vstart, value, _OUTPUT))
        elif wire == _LEN and number == 4:
            head.inputs.append(_slot(buf, vstart, value, _INPUT))
        elif wire == _LEN and number == 5:
            head.buffers.append(_slot(buf, vstart, value, _BUFFER))
        else:
            head.unknown_fields = True  # newer CANN: `space`, `attr`, ...
    return head


# ---------------------------------------------------------------------------------------------
# layouts


def _check_dims(where: str, dims: list[int]) -> tuple[int, ...]:
    for dim in dims:
        if dim >= 1 << 63:
            raise RawDumpError(f"{where}: negative dimension {dim - (1 << 64)} in shape")
        if dim > _MAX_ELEMENTS:
            raise RawDumpError(f"{where}: dimension {dim} is absurdly large")
    if math.prod(dims) > _MAX_ELEMENTS:
        raise RawDumpError(f"{where}: shape {tuple(dims)} has absurdly many elements")
    return tuple(dims)


def _make_slot(io: str, index: int, raw: _Slot, size: int, offset: int) -> RawSlot:
    where = f"{io} {index}"
    if size >= _MAX_SIZE:
        raise RawDumpError(f"{where}: declared size {size} bytes is absurd")
    if io == "buffer":
        return RawSlot(io, index, "DT_UNDEFINED", "raw", "ND", (size,), None, size, offset, 0)
    data_type = dtypes.data_type_name(raw.data_type)
    stored = dtypes.stored_dtype_of(data_type)
    shape = _check_dims(where, raw.shape or [])
    original = _check_dims(f"{where} original_shape", raw.original_shape) if raw.original_shape else None
    need = dtypes.nbytes_of(stored, math.prod(shape))
    if need is not None and need != size:
        raise RawDumpError(
            f"{where}: shape {shape} of {data_type} needs {need} bytes, header declares {size}"
        )
    fmt = dtypes.format_name(raw.format)
    return RawSlot(io, index, data_type, stored, fmt, shape, original, size, offset, raw.sub_format)


def _parsed_by_protobuf(head: bytes, file_size: int, header_len: int) -> RawDump | None:
    """The common case, fast: a big-dump header the generated `dump_data_pb2` parses (C code, 3x
    faster than the walker) whose sizes add up to the file exactly. None for anything else, which
    the walker then judges and, if need be, explains."""
    # protobuf is imported by the first raw dump (a start-up cost other dumps do not pay)
    from google.protobuf.message import DecodeError

    from ingest.formats.ascend import dump_data_pb2

    end = 8 + header_len
    try:
        message = dump_data_pb2.DumpData.FromString(head[8:end])
    except DecodeError:
        return None
    slots: list[RawSlot] = []
    cursor = end
    for io, group in (("input", message.input), ("output", message.output)):
        for index, pb in enumerate(group):
            dims = list(pb.shape.dim)
            original = list(pb.original_shape.dim) or None
            raw = _Slot(pb.data_type, pb.format, dims, original, 0, 0, pb.size, pb.sub_format)
            slots.append(_make_slot(io, index, raw, pb.size, cursor))
            cursor += pb.size
    for index, pb in enumerate(message.buffer):
        slots.append(_make_slot("buffer", index, _Slot(size=pb.size), pb.size, cursor))
        cursor += pb.size
    if cursor != file_size:
        return None
    return RawDump(
        "big_dump", message.version, message.dump_time, message.op_name, header_len, tuple(slots), cursor,
        file_size,
    )  # fmt: skip


def _parse_big_dump(head: bytes, file_size: int, header_len: int, fast: bool) -> RawDump:
    end = 8 + header_len
    if len(head) < end:
        raise _NeedBytes(end, len(head))
    parsed = _parsed_by_protobuf(head, file_size, header_len) if fast else None
    if parsed is not None:
        return parsed
    try:
        header = _dump_data(head, 8, end)
    except _WireError as exc:
        raise _NotDumpData(f"the {header_len}-byte header does not parse as DumpData: {exc}") from None
    slots: list[RawSlot] = []
    cursor = end
    for io, group in (("input", header.inputs), ("output", header.outputs), ("buffer", header.buffers)):
        for index, raw in enumerate(group):
            slots.append(_make_slot(io, index, raw, raw.size, cursor))
            cursor += raw.size
    if cursor > file_size:
        raise RawDumpIncomplete(
            f"header declares {cursor} bytes (8 + {header_len} header + {cursor - end} data), "
            f"the file has {file_size}"
        )
    if cursor < file_size and not header.unknown_fields:
        raise RawDumpError(
            f"sizes do not add up: header declares {cursor} bytes (8 + {header_len} header + "
            f"{cursor - end} data), the file has {file_size}"
        )
    # with unknown fields (newer CANN `space` workspaces) the bytes past `cursor` are theirs
    return RawDump(
        "big_dump",
        header.version,
        header.dump_time,
        header.op_name,
        header_len,
        tuple(slots),
        cursor,
        file_size,
    )


def _parse_protobuf(head: bytes, file_size: int) -> RawDump:
    if len(head) < file_size:
        raise _NeedBytes(file_size, len(head))
    try:
        header = _dump_data(head, 0, file_size)
    except _WireError as exc:
        raise _NotDumpData(f"the file does not parse as a DumpData protobuf: {exc}") from None
    slots: list[RawSlot] = []
    for io, group in (("input", header.inputs), ("output", header.outputs), ("buffer", header.buffers)):
        for index, raw in enumerate(group):
            if raw.size and raw.size != raw.data_len:
                raise RawDumpError(f"{io} {index}: declares {raw.size} bytes but holds {raw.data_len} inline")
            slots.append(_make_slot(io, index, raw, raw.data_len, raw.data_start))
    if not slots:
        raise _NotDumpData("the file parses as a DumpData protobuf but holds no tensors")
    return RawDump(
        "protobuf", header.version, header.dump_time, header.op_name, 0, tuple(slots), file_size, file_size
    )


def parse_raw_header(head: bytes, file_size: int, *, fast: bool = True) -> RawDump:
    """Parse a raw dump from its first bytes `head` and the size of the whole file.

    `head` must hold the 8-byte length and the header for a big dump, the whole file for the
    'protobuf' layout (RawDumpError says how many bytes are needed otherwise). Detection follows
    the reference's order: TLV nano magic, then big dump (header length fits, header parses),
    then the whole file as one DumpData. A big-dump header that parses but declares more bytes
    than the file has is RawDumpIncomplete at once: the whole file is not read to rule out the
    (pre-2021) 'protobuf' layout, which a watcher would otherwise do for every growing file.
    `fast=False` skips the `dump_data_pb2` path (tests check both give the same result).
    """
    head = head if isinstance(head, bytes) else bytes(head)
    if len(head) > file_size:
        raise RawDumpError(f"{len(head)} header bytes given for a file of {file_size}")
    if file_size == 0:
        raise RawDumpIncomplete("empty file (0 bytes)")
    if file_size < 8:
        raise RawDumpIncomplete(f"file has {file_size} bytes, fewer than the 8-byte header length")
    if len(head) < min(12, file_size):
        raise _NeedBytes(min(12, file_size), len(head))
    if file_size >= 12 and struct.unpack_from("<I", head, 8)[0] == NANO_MAGIC:
        raise RawDumpError("TLV nano dump format is not supported")
    header_len = struct.unpack_from("<Q", head, 0)[0]
    big_error: RawDumpError | None = None
    if 0 < header_len <= file_size - 8:
        try:
            return _parse_big_dump(head, file_size, header_len, fast)
        except _NotDumpData as exc:  # any other error: the header parsed, so it is a big dump
            big_error = exc
    try:
        return _parse_protobuf(head, file_size)
    except _NotDumpData as pb_error:
        if big_error is not None:
            raise RawDumpError(f"{big_error} (nor does the whole file parse as DumpData)") from None
        if file_size - 8 < header_len <= _MAX_HEADER:
            raise RawDumpIncomplete(
                f"header length {header_len} runs past the end of the file ({file_size} bytes)"
            ) from None
        if header_len == 0:
            raise RawDumpError(f"header length is 0 and {pb_error}") from None
        raise RawDumpError(
            f"not a raw dump: header length {header_len} is beyond the file ({file_size} bytes) "
            f"and {pb_error}"
        ) from None


def read_raw_dump(path: str | os.PathLike[str]) -> RawDump:
    """Parse the raw dump file at `path`, reading only its header for a big dump.

    The 'protobuf' layout keeps tensors inline, so recognising it means reading the whole file.
    """
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        head = f.read(min(HEADER_PROBE_BYTES, file_size))
        while True:  # at most: the probe, then the whole header, then the whole (old-layout) file
            try:
                return parse_raw_header(head, file_size)
            except _NeedBytes as need:  # need.want > len(head) and <= file_size: this terminates
                more = f.read(need.want - len(head))
                if len(head) + len(more) < need.want:
                    raise RawDumpIncomplete(
                        f"file shrank while reading: {len(head) + len(more)} of {need.want} bytes"
                    ) from None
                head += more


# ---------------------------------------------------------------------------------------------
# file names


@dataclass(frozen=True, slots=True)
class RawName:
    op_type: str
    op_name: str  # as written in the name: sanitised, possibly shortened
    task_id: int
    stream_id: int | None  # None in the v1.2 four-field form
    timestamp_us: int
    extension: str  # '' or '.bin'


_OP_TYPE = re.compile(r"[A-Za-z0-9_-]+")  # msaccucmp OFFLINE_DUMP_PATTERN's op_type


def parse_raw_name(file_name: str) -> RawName | None:
    """Split a raw dump file name, or None if it is not one (`x.npy`, `statistic.csv`, ...).

    `{op_type}.{op_name}.{task}.{stream}.{ts}[.bin]`, or the v1.2 form `{op_type}.{op_name}.{task}.{ts}`
    when the field before the task is not a number. The numbers are taken from the right so that
    an op name may hold dots; a name that fits both forms is read as the five-field form.
    """
    base, extension = (file_name[:-4], ".bin") if file_name.endswith(".bin") else (file_name, "")
    parts = base.split(".")
    if len(parts) < 4 or not all(p.isascii() and p.isdigit() for p in parts[-2:]):
        return None
    if not _OP_TYPE.fullmatch(parts[0]):
        return None
    if len(parts) >= 5 and parts[-3].isascii() and parts[-3].isdigit():
        op_name, task, stream = ".".join(parts[1:-3]), int(parts[-3]), int(parts[-2])
    else:
        op_name, task, stream = ".".join(parts[1:-2]), int(parts[-2]), None
    if not op_name:
        return None
    return RawName(parts[0], op_name, task, stream, int(parts[-1]), extension)
