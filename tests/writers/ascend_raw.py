"""Write Ascend/CANN raw dump files, strictly from the reference (no Ascend device runs here).

Layouts per msprobe-cann-formats.md §3.2 / mindspore-dump-formats.md §5.2:

- 'big_dump': little-endian uint64 header length, a `toolkit.dumpdata.DumpData` with empty `data`
  fields and `size` set, then input, output and buffer bytes in that order (msaccucmp's own
  `write_dump_data` writes `pack('Q', len(hdr)) + hdr + raw`);
- 'protobuf': the whole file is one DumpData with the bytes inline.

The header is serialised by the generated `dump_data_pb2`, never by the code under test, and the
element encodings in `encode` are written from the reference, not from ingest.formats.dtypes.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from ingest.formats.ascend import dump_data_pb2 as pb

_ML = {
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
}


@dataclass(frozen=True)
class SlotSpec:
    """One input/output: its bytes already encoded, and the header fields describing them.

    `data_type` is a DT_* name or a bare number (to write numbers no enum knows); `format` a name
    without the FORMAT_ prefix or a number. `size` overrides the declared size (bad-input tests);
    `extra` is raw protobuf wire bytes appended to the message (fields newer CANN adds).
    """

    data: bytes
    data_type: str | int
    shape: tuple[int, ...]
    format: str | int = "ND"
    original_shape: tuple[int, ...] | None = None
    sub_format: int = 0
    size: int | None = None
    extra: bytes = b""


def encode(arr: np.ndarray, stored: str) -> bytes:
    """The on-disk bytes of `arr` in stored dtype `stored`.

    int4: two per byte, low nibble first (CANN SplitInt8ToInt4x2); uint1: `np.packbits` (most
    significant bit first, the inverse of msaccucmp's `np.unpackbits`); complex32: (real, imag)
    float16 pairs; bf16 / float8: the ml_dtypes encodings; everything little-endian.
    """
    arr = np.asarray(arr)
    if stored == "int4":
        values = arr.astype(np.int64).ravel()
        if values.size and (values.min() < -8 or values.max() > 7):
            raise ValueError("int4 values must lie in [-8, 7]")
        nibbles = (values & 0xF).astype(np.uint8)
        if nibbles.size % 2:
            nibbles = np.append(nibbles, np.uint8(0))
        return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()
    if stored == "uint1":
        bits = arr.astype(np.uint8).ravel()
        if bits.size and bits.max() > 1:
            raise ValueError("uint1 values must be 0 or 1")
        return np.packbits(bits).tobytes()
    if stored == "complex32":
        flat = arr.astype(np.complex64).ravel()
        pairs = np.empty(2 * flat.size, dtype="<f2")
        pairs[0::2] = flat.real
        pairs[1::2] = flat.imag
        return pairs.tobytes()
    if stored in _ML:
        return arr.astype(_ML[stored]).tobytes()
    if stored == "raw":
        return np.ascontiguousarray(arr).tobytes()
    return np.ascontiguousarray(arr, dtype=np.dtype(stored).newbyteorder("<")).tobytes()


def bf16_bytes_by_truncation(arr: np.ndarray) -> bytes:
    """bf16 as the top 16 bits of float32 (reference §5.3), independent of ml_dtypes' rounding."""
    top = (np.asarray(arr, dtype="<f4").view("<u4") >> 16).astype("<u2")
    return top.tobytes()


def _enum(value: str | int, enum, prefix: str = "") -> int:
    return value if isinstance(value, int) else enum.Value(prefix + value)


def _fill(msg, spec: SlotSpec, inline: bool, inline_size: bool) -> None:
    msg.data_type = _enum(spec.data_type, pb.OutputDataType)
    msg.format = _enum(spec.format, pb.OutputFormat, "FORMAT_")
    msg.shape.dim.extend(spec.shape)
    if spec.original_shape is not None:
        msg.original_shape.dim.extend(spec.original_shape)
    msg.sub_format = spec.sub_format
    if inline:
        msg.data = spec.data
    if spec.size is not None:
        msg.size = spec.size
    elif not inline or inline_size:
        msg.size = len(spec.data)
    if spec.extra:
        msg.MergeFromString(spec.extra)  # kept as unknown fields and serialised again


def build_raw_dump(
    *,
    op_name: str,
    inputs: Sequence[SlotSpec] = (),
    outputs: Sequence[SlotSpec] = (),
    buffers: Sequence[bytes] = (),
    layout: str = "big_dump",
    dump_time: int = 1_725_960_383_079,
    version: str = "2.0",
    inline_size: bool = True,
    header_extra: bytes = b"",
    trailing: bytes = b"",
) -> bytes:
    """The bytes of one raw dump file.

    `header_extra` is raw wire bytes merged into DumpData (e.g. a newer CANN `space` entry) and
    `trailing` bytes written after the buffers (that entry's data). For the 'protobuf' layout,
    `inline_size=False` leaves `size` at 0, as old writers may have.
    """
    if layout not in ("big_dump", "protobuf"):
        raise ValueError(f"unknown layout {layout!r}")
    inline = layout == "protobuf"
    msg = pb.DumpData(version=version, dump_time=dump_time, op_name=op_name)
    for spec in inputs:
        _fill(msg.input.add(), spec, inline, inline_size)
    for spec in outputs:
        _fill(msg.output.add(), spec, inline, inline_size)
    for data in buffers:
        buf = msg.buffer.add(buffer_type=pb.L1)
        if inline:
            buf.data = data
        if not inline or inline_size:
            buf.size = len(data)
    if header_extra:
        msg.MergeFromString(header_extra)
    header = msg.SerializeToString()
    if inline:
        return header + trailing
    payload = b"".join([*(s.data for s in inputs), *(s.data for s in outputs), *buffers])
    return struct.pack("<Q", len(header)) + header + payload + trailing


def write_raw_dump(path: str | os.PathLike[str], **kwargs) -> Path:
    """Write `build_raw_dump(**kwargs)` to `path` (parent folders created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(build_raw_dump(**kwargs))
    return path


def sanitize(part: str) -> str:
    """CANN-rt SanitizeFileNamePart: ' ', '.', '/' and '\\' become '_' (reference §2.4)."""
    for ch in " ./\\":
        part = part.replace(ch, "_")
    return part


def raw_file_name(
    op_type: str, op_name: str, task_id: int, stream_id: int, timestamp_us: int, extension: str = ""
) -> str:
    """`{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}` with both names sanitised."""
    return f"{sanitize(op_type)}.{sanitize(op_name)}.{task_id}.{stream_id}.{timestamp_us}{extension}"


def varint(value: int) -> bytes:
    """Protobuf base-128 varint (for hand-made unknown fields in tests)."""
    value &= 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data
