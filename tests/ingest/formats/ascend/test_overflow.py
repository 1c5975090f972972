"""Overflow-debug records decode field by field (mindspore-dump-formats §2.8, §5.2; msprobe-cann §2.4).

The byte strings here are built with `struct` at offsets worked out from the reference, not with
`encode_opdebug`, so a wrong offset in the module cannot hide behind a matching encoder."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.formats.ascend.overflow import (
    AI_CORE,
    DHA,
    L2,
    OPDEBUG_FILE,
    OPDEBUG_JSON_FILE,
    OverflowBlock,
    OverflowDecodeError,
    decode_opdebug,
    decode_overflow_json,
    encode_opdebug,
    read_overflow_json,
)

PC = 0xFFFE_C012_3400  # just under 2**48, like a device code address
PARA = 0xFFFE_8000_1C40


def _hand_built(size: int = 2048) -> bytes:
    """An op-debug payload as GE would hand it over (2048-byte buffer), written with struct."""
    buf = bytearray(size)
    struct.pack_into("<6Q", buf, 0, 1, 5, 101, 2, PC, PARA)  # DHA Atomic Add info
    struct.pack_into("<6Q", buf, 128, 1, 5, 102, 2, PC + 0x100, PARA + 0x200)  # L2 Atomic Add info
    struct.pack_into("<6Q", buf, 256, 1, 5, 103, 0, PC + 0x800, PARA + 0x400)  # AI Core info
    struct.pack_into("<Q", buf, 512, 0x10)  # DHA status
    struct.pack_into("<Q", buf, 768, 0x20)  # L2 status
    if size >= 1048:  # kernel_code, block_idx, status
        struct.pack_into("<3Q", buf, 1024, 0xDEAD_BEEF_0000_0001, 7, 0x8000_0000)
    return bytes(buf)


def test_hand_built_payload_decodes_field_by_field():
    dha, l2, core = decode_opdebug(_hand_built())
    assert dha == OverflowBlock(DHA, 1, 5, 101, 2, PC, PARA, 0x10)
    assert l2 == OverflowBlock(L2, 1, 5, 102, 2, PC + 0x100, PARA + 0x200, 0x20)
    assert core.kind == AI_CORE
    assert (core.model_id, core.stream_id, core.task_id, core.task_type) == (1, 5, 103, 0)
    assert (core.pc_start, core.para_base) == (PC + 0x800, PARA + 0x400)
    assert (core.kernel_code, core.block_idx, core.status) == (0xDEAD_BEEF_0000_0001, 7, 0x8000_0000)
    assert dha.kernel_code is None and dha.block_idx is None
    assert dha.extra == l2.extra == core.extra == ()


def test_unnamed_words_land_in_extra_by_position():
    buf = bytearray(_hand_built(1048))
    struct.pack_into("<Q", buf, 48, 0xAA)  # DHA info word 6: extra[0]
    struct.pack_into("<Q", buf, 520, 0xBB)  # DHA status region word 1: extra[10]
    struct.pack_into("<Q", buf, 128 + 120, 0xCC)  # L2 info last word: extra[9]
    struct.pack_into("<Q", buf, 504, 0xDD)  # AI Core info last word: extra[25]
    dha, l2, core = decode_opdebug(bytes(buf))
    assert dha.extra == (0xAA,) + (0,) * 9 + (0xBB,)
    assert l2.extra == (0,) * 9 + (0xCC,)
    assert core.extra == (0,) * 25 + (0xDD,)
    assert decode_opdebug(encode_opdebug([dha, l2, core])) == [dha, l2, core]
    assert encode_opdebug([dha, l2, core]) == bytes(buf)


def test_struct_alone_has_no_ai_core_status():
    dha, l2, core = decode_opdebug(_hand_built(1024))
    assert (dha.status, l2.status) == (0x10, 0x20)
    assert core.status is core.kernel_code is core.block_idx is None


def test_round_trip_realistic_values():
    blocks = [
        OverflowBlock(DHA, 3, 11, 65535, 1, 2**48 - 8, 2**47 + 64, 0),
        OverflowBlock(L2, 3, 11, 4097, 1, 2**48 - 0x1000, 0x1240_8000_0000, 1),
        OverflowBlock(
            AI_CORE, 3, 11, 4098, 0, 2**48 - 0x2000, 0x1240_8000_1000, 0x1, (5, 0, 9), 0x7F00_0012, 31
        ),
    ]
    data = encode_opdebug(blocks)
    assert len(data) == 1048
    assert decode_opdebug(data) == blocks
    assert struct.unpack_from("<6Q", data, 256) == (3, 11, 4098, 0, 2**48 - 0x2000, 0x1240_8000_1000)
    assert struct.unpack_from("<3Q", data, 1024) == (0x7F00_0012, 31, 1)
    padded = encode_opdebug(list(reversed(blocks)), size=2048)
    assert len(padded) == 2048 and padded[:1048] == data and decode_opdebug(padded) == blocks


def test_encode_without_ai_core_tail_is_1024_bytes():
    blocks = [
        OverflowBlock(DHA, 0, 0, 1, 0, 0, 0, 0),
        OverflowBlock(L2, 0, 0, 1, 0, 0, 0, 0),
        OverflowBlock(AI_CORE, 0, 0, 1, 0, 0, 0, None),
    ]
    data = encode_opdebug(blocks)
    assert len(data) == 1024
    assert decode_opdebug(data) == blocks


@pytest.mark.parametrize("size", [0, 8, 512, 1016, 1025, 1032, 1040, 2047])
def test_short_or_odd_payload_is_an_error(size):
    with pytest.raises(OverflowDecodeError):
        decode_opdebug(b"\x00" * size)


@pytest.mark.parametrize(
    "blocks",
    [
        [OverflowBlock(DHA, 0, 0, 0, 0, 0, 0, 0), OverflowBlock(L2, 0, 0, 0, 0, 0, 0, 0)],  # no AI Core
        [OverflowBlock(DHA, 0, 0, 0, 0, 0, 0, 0)] * 2 + [OverflowBlock(AI_CORE, 0, 0, 0, 0, 0, 0, 0)],
        [
            OverflowBlock(DHA, 2**64, 0, 0, 0, 0, 0, 0),
            OverflowBlock(L2, 0, 0, 0, 0, 0, 0, 0),
            OverflowBlock(AI_CORE, 0, 0, 0, 0, 0, 0, 0),
        ],
        [
            OverflowBlock(DHA, 0, 0, 0, 0, 0, 0, 0, kernel_code=1),
            OverflowBlock(L2, 0, 0, 0, 0, 0, 0, 0),
            OverflowBlock(AI_CORE, 0, 0, 0, 0, 0, 0, 0),
        ],
        [
            OverflowBlock(DHA, 0, 0, 0, 0, 0, 0, 0),
            OverflowBlock(L2, 0, 0, 0, 0, 0, 0, 0),
            OverflowBlock(AI_CORE, 0, 0, 0, 0, 0, 0, 0, (1,) * 27),
        ],
    ],
)
def test_encode_refuses_bad_blocks(blocks):
    with pytest.raises(ValueError):
        encode_opdebug(blocks)


@pytest.mark.parametrize(
    ("name", "task", "stream", "ts"),
    [
        ("Opdebug.Node_OpDebug.12.3.1623124369613540", "12", "3", "1623124369613540"),
        ("OpDebug.Node_Opdebug.12.3.1623124369613540", "12", "3", "1623124369613540"),
        ("Opdebug.Node_OpDebug.65535.65535.1725960383079645.bin", "65535", "65535", "1725960383079645"),
        ("Opdebug.Node_OpDebug.7.1623124369613540", "7", None, "1623124369613540"),  # v1.2: no stream
    ],
)
def test_opdebug_file_names(name, task, stream, ts):
    match = OPDEBUG_FILE.match(name)
    assert match is not None
    assert (match["task"], match["stream"], match["timestamp"]) == (task, stream, ts)


@pytest.mark.parametrize(
    "name",
    [
        "Opdebug.Node_OpDebug.12.3.1623124369613540.output.0.json",
        "Conv2D.Conv2D-op12.12.3.1623124369613540",
        "Opdebug.Node_OpDebug.12.3.1623124369613540.npy",
        "Opdebug.Node_OpDebug.12",
        "xOpdebug.Node_OpDebug.12.3.1623124369613540",
    ],
)
def test_opdebug_file_non_matches(name):
    assert OPDEBUG_FILE.match(name) is None


def test_opdebug_json_file_name():
    match = OPDEBUG_JSON_FILE.match("Opdebug.Node_OpDebug.12.3.1623124369613540.output.0.json")
    assert match is not None and (match["task"], match["stream"], match["slot"]) == ("12", "3", "0")


# The shape MindSpore's/msprobe's DumpOpDebugToFile writes: addresses and kernel_code as hex strings.
WRITTEN = {
    "DHA Atomic Add": {
        "model_id": 1,
        "stream_id": 5,
        "task_id": 101,
        "task_type": 2,
        "pc_start": "0xfffec0123400",
        "para_base": "0xfffe80001c40",
        "status": 16,
    },
    "L2 Atomic Add": {
        "model_id": 1,
        "stream_id": 5,
        "task_id": 102,
        "task_type": 2,
        "pc_start": "0xfffec0123500",
        "para_base": "0xfffe80001e40",
        "status": 32,
    },
    "AI Core": {
        "model_id": 1,
        "stream_id": 5,
        "task_id": 103,
        "task_type": 0,
        "pc_start": "0xfffec0123c00",
        "para_base": "0xfffe80002040",
        "kernel_code": "0xdeadbeef00000001",
        "block_idx": 7,
        "status": 2147483648,
    },
}


def test_json_from_a_written_file_matches_the_raw_decode(tmp_path):
    path = tmp_path / "Opdebug.Node_OpDebug.103.5.1623124369613540.output.0.json"
    path.write_text(json.dumps(WRITTEN))
    assert read_overflow_json(path) == decode_opdebug(_hand_built())


def test_json_odd_key_spellings_and_number_forms():
    doc = {
        "dha_atomic_add": {
            "Model ID": "1",
            "STREAM_ID": 5,
            "taskId": "0x65",
            "task-type": 2,
            "PcStart": str(PC),
            "para base": "0XFFFE80001C40",
            "Status": " 16 ",
            "comment": "ignored",
        },
        "L2AtomicAdd": {**WRITTEN["L2 Atomic Add"], "status": None},
        "ai core": WRITTEN["AI Core"],
        "unrelated": [1, 2],
    }
    dha, l2, core = decode_overflow_json(json.dumps(doc))
    assert dha == OverflowBlock(DHA, 1, 5, 0x65, 2, PC, PARA, 16)
    assert l2.status is None and l2.task_id == 102
    assert core.kernel_code == 0xDEAD_BEEF_0000_0001 and core.block_idx == 7


def _with(block: str, **fields: object) -> str:
    doc = json.loads(json.dumps(WRITTEN))
    doc[block].update(fields)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text",
    [
        _with("AI Core", task_id=1.0),  # float
        _with("AI Core", task_id=True),  # bool
        _with("DHA Atomic Add", pc_start=None),  # required field null
        _with("DHA Atomic Add", pc_start=[1]),
        _with("DHA Atomic Add", status={"v": 1}),
        _with("L2 Atomic Add", model_id=-1),
        _with("L2 Atomic Add", model_id=2**64),
        _with("L2 Atomic Add", model_id="-1"),
        _with("L2 Atomic Add", model_id="1_000"),
        _with("L2 Atomic Add", model_id="0x"),
        _with("L2 Atomic Add", model_id="1e3"),
        _with("L2 Atomic Add", model_id="١٢"),  # Arabic-Indic digits: int() would take them
        _with("AI Core", block_idx="seven"),
        _with("AI Core", modelId=2),  # two spellings of one field
        json.dumps({k: v for k, v in WRITTEN.items() if k != "L2 Atomic Add"}),  # missing block
        json.dumps({**WRITTEN, "AI Core": "0x1"}),  # block not an object
        json.dumps({**WRITTEN, "AI Core": {"model_id": 1}}),  # missing fields
        json.dumps([WRITTEN]),
        '{"AI Core": {}, "AI Core": {}}',  # duplicate key
        "{not json",
        "",
    ],
)
def test_json_bad_content_is_an_error(text):
    with pytest.raises(OverflowDecodeError):
        decode_overflow_json(text)


def test_json_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(OverflowDecodeError):
        read_overflow_json(path)


def test_json_with_a_huge_number_or_deep_nesting():
    for text in ('{"AI Core": ' + "1" * 5000 + "}", "[" * 100_000 + "]" * 100_000):
        with pytest.raises(OverflowDecodeError):
            decode_overflow_json(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1100))
def test_any_bytes_decode_or_raise_the_module_error(data):
    try:
        blocks = decode_opdebug(data)
    except OverflowDecodeError:
        return
    assert [b.kind for b in blocks] == [DHA, L2, AI_CORE]
    assert encode_opdebug(blocks) == data[:1048]


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=12,
    )
)
def test_any_json_decodes_or_raises_the_module_error(doc):
    with contextlib.suppress(OverflowDecodeError):
        decode_overflow_json(json.dumps(doc))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=128, max_size=256).filter(
        lambda w: len(w) not in range(129, 131)
    )
)
def test_any_word_payload_round_trips(words):
    data = struct.pack(f"<{len(words)}Q", *words)
    blocks = decode_opdebug(data)
    assert (
        blocks[0].model_id == words[0] and blocks[1].task_id == words[18] and blocks[2].pc_start == words[36]
    )
    assert blocks[0].status == words[64] and blocks[1].status == words[96]
    if len(words) >= 131:
        assert (blocks[2].kernel_code, blocks[2].block_idx, blocks[2].status) == tuple(words[128:131])
    assert encode_opdebug(blocks, size=len(data)) == data[:1048].ljust(len(data), b"\0")
