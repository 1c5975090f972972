"""Decode Ascend overflow-debug ("op debug") output: `Opdebug.Node_OpDebug.{task}.{stream}.{ts}`.

With `op_debug_mode: 3` (reference mindspore-dump-formats §7) or CANN `dump_debug: on`
(msprobe-cann §2.4) the runtime writes, next to the overflowing op's own dump, a raw dump file whose
first output tensor is a fixed struct describing where the overflow happened. With MindSpore's
`file_format: npy` the same struct is written as `….output.{slot}.json` (§2.8). Both decode here
to three `OverflowBlock`s, one per unit: "DHA Atomic Add", "L2 Atomic Add", "AI Core".

`decode_opdebug` takes the output tensor's payload (the bytes after the big-dump header, §5.2),
not the whole file: the framing is another module's job.

Byte layout (all fields little-endian uint64), from §5.2: three info blocks of 128/128/256 bytes,
each opening with six words, then two 256-byte status regions, then kernel_code, block_idx,
status. The blocks and regions add up to the "1024-byte struct" of the reference; the three
AI Core words the reference lists after them therefore sit at 1024..1047, so a complete record is
1048 bytes. (MindSpore's and msprobe's own decoders read those offsets; GE allocates a
2048-byte op-debug buffer, so real payloads are longer and the bytes after 1048 are unspecified.)

    offset  size  field
    ------  ----  ----------------------------------------------------------
       0      8   DHA Atomic Add  model_id
       8      8   DHA Atomic Add  stream_id
      16      8   DHA Atomic Add  task_id
      24      8   DHA Atomic Add  task_type
      32      8   DHA Atomic Add  pc_start
      40      8   DHA Atomic Add  para_base
      48     80   DHA Atomic Add  unspecified (10 words)        -> extra[0:10]
     128     48   L2 Atomic Add   model_id ... para_base (same six words)
     176     80   L2 Atomic Add   unspecified (10 words)        -> extra[0:10]
     256     48   AI Core         model_id ... para_base (same six words)
     304    208   AI Core         unspecified (26 words)        -> extra[0:26]
     512      8   DHA Atomic Add  status (first word of its 256-byte status region)
     520    248   DHA Atomic Add  rest of status region (31 words) -> extra[10:41]
     768      8   L2 Atomic Add   status (first word of its 256-byte status region)
     776    248   L2 Atomic Add   rest of status region (31 words) -> extra[10:41]
    1024      8   AI Core         kernel_code
    1032      8   AI Core         block_idx
    1040      8   AI Core         status
    1048      -   unspecified, ignored

What is certain and what is not: the six header words and the region sizes are stated by the
reference; the status being the *first* word of each status region, and the bytes after the six
header words, are not described, so they are not named: every unnamed word is kept, in order, in
`OverflowBlock.extra` (with trailing zero words dropped, so an all-zero remainder is `()` and
`decode_opdebug(encode_opdebug(blocks)) == blocks`). A 1024-byte payload (the struct alone) decodes
with the AI Core status, kernel_code and block_idx set to None.

The newer "magic / acc_list" op-debug layout (msaccucmp `OpDebugInfoParser`, §5.2) is not decoded.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ingest.formats.limits import MetadataCaps, read_capped

DHA = "DHA Atomic Add"
L2 = "L2 Atomic Add"
AI_CORE = "AI Core"
BLOCK_KINDS = (DHA, L2, AI_CORE)

OPDEBUG_STRUCT_SIZE = 1024  # the three info blocks and two status regions
OPDEBUG_RECORD_SIZE = 1048  # plus the AI Core kernel_code, block_idx, status words
UINT64_MAX = 2**64 - 1

_WORD = 8
_HEADER = struct.Struct("<6Q")
_U64 = struct.Struct("<Q")
# kind -> (info block offset, info block size, status offset, status region size)
_LAYOUT = {
    DHA: (0, 128, 512, 256),
    L2: (128, 128, 768, 256),
    AI_CORE: (256, 256, 1040, 0),
}
_KERNEL_CODE_AT = 1024
_BLOCK_IDX_AT = 1032


class OverflowDecodeError(ValueError):
    """Overflow-debug data (raw struct or json) that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class OverflowBlock:
    """One unit's overflow record. `extra` holds the words the reference does not name (see the
    module docstring for their offsets); `kernel_code` and `block_idx` exist for AI Core only."""

    kind: str
    model_id: int
    stream_id: int
    task_id: int
    task_type: int
    pc_start: int
    para_base: int
    status: int | None
    extra: tuple[int, ...] = ()
    kernel_code: int | None = None
    block_idx: int | None = None


_OPDEBUG_PREFIX = r"(?i:opdebug)\.(?i:node_opdebug)"
_TASK_STREAM_TS = r"(?P<task>[0-9]+)(?:\.(?P<stream>[0-9]+))?\.(?P<timestamp>[0-9]+)"
# `Opdebug.Node_OpDebug.{task}.{stream}.{ts}` (MindSpore §2.8) or `OpDebug.Node_Opdebug…` (CANN §2.4),
# optionally `.bin`. `stream` is optional because v1.2 async raw names have no stream_id (§3.8).
OPDEBUG_FILE = re.compile(rf"^{_OPDEBUG_PREFIX}\.{_TASK_STREAM_TS}(?:\.bin)?$")
# The npy-format variant `….output.{slot}.json`.
OPDEBUG_JSON_FILE = re.compile(rf"^{_OPDEBUG_PREFIX}\.{_TASK_STREAM_TS}\.output\.(?P<slot>[0-9]+)\.json$")


def _extra_words(words: Sequence[int]) -> tuple[int, ...]:
    end = len(words)
    while end and words[end - 1] == 0:
        end -= 1
    return tuple(words[:end])


def _words(data: bytes | bytearray | memoryview, start: int, stop: int) -> tuple[int, ...]:
    return struct.unpack_from(f"<{(stop - start) // _WORD}Q", data, start)


def decode_opdebug(data: bytes | bytearray | memoryview) -> list[OverflowBlock]:
    """The three blocks of an op-debug payload, in the order DHA, L2, AI Core.

    Raises OverflowDecodeError when the payload is shorter than the 1024-byte struct, is not a
    whole number of 8-byte words, or stops inside the AI Core tail (1024..1048)."""
    size = len(data)
    if size < OPDEBUG_STRUCT_SIZE:
        raise OverflowDecodeError(f"op-debug payload is {size} bytes, the struct needs {OPDEBUG_STRUCT_SIZE}")
    if size % _WORD:
        raise OverflowDecodeError(f"op-debug payload of {size} bytes is not a whole number of uint64 words")
    if OPDEBUG_STRUCT_SIZE < size < OPDEBUG_RECORD_SIZE:
        raise OverflowDecodeError(
            f"op-debug payload of {size} bytes ends inside the AI Core kernel_code/block_idx/status words"
        )
    has_tail = size >= OPDEBUG_RECORD_SIZE
    blocks = []
    for kind in BLOCK_KINDS:
        info_at, info_size, status_at, status_size = _LAYOUT[kind]
        header = _HEADER.unpack_from(data, info_at)
        unnamed = _words(data, info_at + _HEADER.size, info_at + info_size)
        kernel_code = block_idx = status = None
        if status_size:  # DHA / L2: status opens a region of its own
            status = _U64.unpack_from(data, status_at)[0]
            unnamed += _words(data, status_at + _WORD, status_at + status_size)
        elif has_tail:
            kernel_code = _U64.unpack_from(data, _KERNEL_CODE_AT)[0]
            block_idx = _U64.unpack_from(data, _BLOCK_IDX_AT)[0]
            status = _U64.unpack_from(data, status_at)[0]
        blocks.append(OverflowBlock(kind, *header, status, _extra_words(unnamed), kernel_code, block_idx))
    return blocks


def _max_extra(kind: str) -> int:
    _, info_size, _, status_size = _LAYOUT[kind]
    return (info_size - _HEADER.size) // _WORD + max(status_size - _WORD, 0) // _WORD


def encode_opdebug(blocks: Sequence[OverflowBlock], size: int | None = None) -> bytes:
    """The payload that `decode_opdebug` turns back into `blocks` (for test writers).

    One block of each kind, in any order. The result is 1024 bytes when the AI Core block has no
    status, kernel_code or block_idx (all None), else 1048; `size` pads it with zero bytes (GE's
    real buffer is 2048). A DHA/L2 status of None is written as 0. Raises ValueError on a missing or
    repeated kind, a value outside uint64, or an `extra` longer than the block's unnamed words."""
    by_kind: dict[str, OverflowBlock] = {}
    for block in blocks:
        if block.kind not in _LAYOUT:
            raise ValueError(f"unknown overflow block kind {block.kind!r}")
        if block.kind in by_kind:
            raise ValueError(f"two {block.kind!r} blocks")
        by_kind[block.kind] = block
    missing = [kind for kind in BLOCK_KINDS if kind not in by_kind]
    if missing:
        raise ValueError(f"missing overflow blocks: {missing}")
    core = by_kind[AI_CORE]
    has_tail = any(v is not None for v in (core.status, core.kernel_code, core.block_idx))
    length = OPDEBUG_RECORD_SIZE if has_tail else OPDEBUG_STRUCT_SIZE
    if size is not None:
        if size < length or size % _WORD:
            raise ValueError(f"size {size} is not a multiple of 8 of at least {length}")
        length = size
    out = bytearray(length)
    for kind in BLOCK_KINDS:
        block = by_kind[kind]
        info_at, info_size, status_at, status_size = _LAYOUT[kind]
        header = (
            block.model_id,
            block.stream_id,
            block.task_id,
            block.task_type,
            block.pc_start,
            block.para_base,
        )
        if len(block.extra) > _max_extra(kind):
            raise ValueError(f"{kind}: {len(block.extra)} extra words, the layout has {_max_extra(kind)}")
        if kind != AI_CORE and (block.kernel_code is not None or block.block_idx is not None):
            raise ValueError(f"{kind}: kernel_code and block_idx exist for AI Core only")
        for value in (*header, *block.extra, block.status, block.kernel_code, block.block_idx):
            if value is not None and not (isinstance(value, int) and 0 <= value <= UINT64_MAX):
                raise ValueError(f"{kind}: {value!r} is not a uint64")
        _HEADER.pack_into(out, info_at, *header)
        in_info = (info_size - _HEADER.size) // _WORD
        for i, word in enumerate(block.extra):
            at = info_at + _HEADER.size + i * _WORD if i < in_info else status_at + (i - in_info + 1) * _WORD
            _U64.pack_into(out, at, word)
        if status_size:
            _U64.pack_into(out, status_at, block.status or 0)
        elif has_tail:
            _U64.pack_into(out, _KERNEL_CODE_AT, block.kernel_code or 0)
            _U64.pack_into(out, _BLOCK_IDX_AT, block.block_idx or 0)
            _U64.pack_into(out, status_at, block.status or 0)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# json variant

_FIELDS = ("model_id", "stream_id", "task_id", "task_type", "pc_start", "para_base")
_OPTIONAL = ("status", "kernel_code", "block_idx")
_DECIMAL = re.compile(r"[0-9]{1,40}")
_HEX = re.compile(r"0[xX][0-9a-fA-F]{1,32}")


def _key(text: str) -> str:
    """Spelling-insensitive key: "AI Core", "ai_core", "AICore" and "aiCore" are one key."""
    return text.lower().replace(" ", "").replace("_", "").replace("-", "")


_BLOCK_KEYS = {_key(kind): kind for kind in BLOCK_KINDS}
_FIELD_KEYS = {_key(name): name for name in (*_FIELDS, *_OPTIONAL)}


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise OverflowDecodeError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _uint64(where: str, value: Any) -> int:
    """A json value as uint64: an int, or a decimal / `0x` hex string; nothing else (not bool or
    float, which would silently lose bits of a 64-bit address)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise OverflowDecodeError(f"{where}: {type(value).__name__} {value!r} is not an integer")
    if isinstance(value, str):
        text = value.strip()
        if _DECIMAL.fullmatch(text):
            value = int(text)
        elif _HEX.fullmatch(text):
            value = int(text, 16)
        else:
            raise OverflowDecodeError(f"{where}: {value[:40]!r} is not a decimal or 0x-hex number")
    if not 0 <= value <= UINT64_MAX:
        raise OverflowDecodeError(f"{where}: {value} is outside uint64")
    return value


def _normalised(where: str, obj: dict[str, Any], known: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = known.get(_key(key))
        if name is None:
            continue  # a field this decoder does not know: not needed, so not an error
        if name in out:
            raise OverflowDecodeError(f"{where}: two spellings of {name!r}")
        out[name] = value
    return out


def decode_overflow_json(text: str | bytes) -> list[OverflowBlock]:
    """Blocks of an npy-format overflow record (`….output.{slot}.json`), in the order DHA, L2, AI Core.

    Key spelling is lenient (case, spaces, underscores, hyphens); value types are strict. The six
    header fields are required, `status` (and AI Core `kernel_code` / `block_idx`) may be absent."""
    try:
        top = json.loads(text, object_pairs_hook=_pairs_hook)
    except OverflowDecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # bad json, bad utf-8, a number of over 4300 digits
        raise OverflowDecodeError(f"not json: {str(exc)[:200]}") from None
    if not isinstance(top, dict):
        raise OverflowDecodeError(f"expected a json object, found {type(top).__name__}")
    raw_blocks = _normalised("overflow json", top, _BLOCK_KEYS)
    blocks = []
    for kind in BLOCK_KINDS:
        if kind not in raw_blocks:
            raise OverflowDecodeError(f"no {kind!r} block")
        raw = raw_blocks[kind]
        if not isinstance(raw, dict):
            raise OverflowDecodeError(f"{kind!r} is a {type(raw).__name__}, not an object")
        fields = _normalised(kind, raw, _FIELD_KEYS)
        if kind != AI_CORE:
            for name in ("kernel_code", "block_idx"):
                fields.pop(name, None)  # belong to AI Core; tolerated elsewhere, not kept
        missing = [name for name in _FIELDS if name not in fields]
        if missing:
            raise OverflowDecodeError(f"{kind!r} lacks {missing}")
        values = {
            name: _uint64(f"{kind} {name}", value) if value is not None or name in _FIELDS else None
            for name, value in fields.items()
        }
        blocks.append(
            OverflowBlock(
                kind,
                *(values[name] for name in _FIELDS),
                status=values.get("status"),
                kernel_code=values.get("kernel_code"),
                block_idx=values.get("block_idx"),
            )
        )
    return blocks


def read_overflow_json(path: str | os.PathLike[str], caps: MetadataCaps | None = None) -> list[OverflowBlock]:
    """`decode_overflow_json` of a file: OSError if unreadable or over the `json` cap
    (ingest.formats.limits), OverflowDecodeError for bad content."""
    return decode_overflow_json(read_capped(path, "json", caps))
