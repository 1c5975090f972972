"""Ascend raw dump files: both layouts decode bit-exactly, and every broken file says why."""

from __future__ import annotations

import builtins
import mmap
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ingest.formats import dtypes
from ingest.formats.ascend import dump_data_pb2 as pb
from ingest.formats.ascend import raw_dump as rd
from ingest.formats.ascend.raw_dump import (
    RawDumpError,
    RawDumpIncomplete,
    RawName,
    parse_raw_header,
    parse_raw_name,
    read_raw_dump,
)
from tests.conftest import DATA, dump_of
from tests.writers.ascend_raw import (
    SlotSpec,
    build_raw_dump,
    encode,
    field_bytes,
    field_varint,
    raw_file_name,
    write_raw_dump,
)

STEP0 = dump_of("nan_log") / "rank_0" / "Net" / "0" / "0"
DIV = "Gradients/Default/network-WithLossCell/_backbone-Net/Grad_Log/Div-op0"
NUMPY_TO_DT = {
    "float32": "DT_FLOAT",
    "float16": "DT_FLOAT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "bool": "DT_BOOL",
}


def real(op_prefix: str, io: str, slot: int) -> np.ndarray:
    """A tensor MindSpore 2.10 wrote for `op_prefix` in step 0 of the nan_log run."""
    (path,) = STEP0.glob(f"{op_prefix}.*.{io}.{slot}.DefaultFormat.*.npy")
    return np.load(path)


def spec_of(arr: np.ndarray, **kw) -> SlotSpec:
    arr = np.asarray(arr)
    return SlotSpec(encode(arr, arr.dtype.name), NUMPY_TO_DT[arr.dtype.name], arr.shape, **kw)


def real_op() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The Div of Grad_Log (inputs 0 and 1, output 0; the output holds NaN)."""
    name = "Div.Gradients_Default_network-WithLossCell__backbone-Net_Grad_Log_Div-op0"
    inputs = [real(name, "input", 0), real(name, "input", 1)]
    outputs = [real(name, "output", 0)]
    assert np.isnan(outputs[0]).any()
    return inputs, outputs


def decode_all(path: Path, dump: rd.RawDump) -> list[np.ndarray]:
    """Every slot of `path` decoded from a read-only mmap, copied out before the map closes."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        out = [
            dtypes.decode(view[s.offset : s.offset + s.size], s.stored_dtype, s.shape).copy()
            for s in dump.slots
        ]
        view.release()
    return out


def pb_slots(path: Path, dump: rd.RawDump) -> tuple[pb.DumpData, list]:
    """The same file read by the standard protobuf parser: (message, [(msg, data bytes)...])."""
    raw = path.read_bytes()
    if dump.layout == "big_dump":
        (n,) = struct.unpack_from("<Q", raw)
        msg = pb.DumpData.FromString(raw[8 : 8 + n])
        cursor, pairs = 8 + n, []
        for item in [*msg.input, *msg.output, *msg.buffer]:
            pairs.append((item, raw[cursor : cursor + item.size]))
            cursor += item.size
        assert cursor == len(raw)
        return msg, pairs
    msg = pb.DumpData.FromString(raw)
    return msg, [(item, item.data) for item in [*msg.input, *msg.output, *msg.buffer]]


@pytest.mark.parametrize("layout", ["big_dump", "protobuf"])
@pytest.mark.parametrize("extension", ["", ".bin"])
def test_real_tensors_round_trip_bit_exactly(tmp_path, layout, extension):
    inputs, outputs = real_op()
    name = raw_file_name("RealDiv", DIV, 12, 3, 1725960383079645, extension)
    path = write_raw_dump(
        tmp_path / name,
        op_name=DIV,
        inputs=[spec_of(a, format="NCHW", original_shape=a.shape) for a in inputs],
        outputs=[spec_of(a, format="ND") for a in outputs],
        buffers=[b"L1 buffer bytes"],
        layout=layout,
        dump_time=1725960383079,
    )
    assert parse_raw_name(path.name) == RawName(
        "RealDiv",
        "Gradients_Default_network-WithLossCell__backbone-Net_Grad_Log_Div-op0",
        12,
        3,
        1725960383079645,
        extension,
    )
    dump = read_raw_dump(path)
    assert dump.layout == layout
    assert (dump.version, dump.dump_time, dump.op_name) == ("2.0", 1725960383079, DIV)
    assert dump.declared_size == path.stat().st_size
    assert [(s.io, s.index) for s in dump.slots] == [("input", 0), ("input", 1), ("output", 0), ("buffer", 0)]
    assert dump.slots[0].format == "NCHW" and dump.slots[0].original_shape == inputs[0].shape
    assert dump.slots[2].format == "ND" and dump.slots[2].original_shape is None
    assert dump.slots[3].stored_dtype == "raw" and dump.slots[3].shape == (15,)
    decoded = decode_all(path, dump)
    for got, want in zip(decoded, [*inputs, *outputs], strict=False):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # bit-exact, NaN included
    assert decoded[3].tobytes() == b"L1 buffer bytes"

    msg, pairs = pb_slots(path, dump)
    assert (msg.op_name, msg.version, msg.dump_time) == (dump.op_name, dump.version, dump.dump_time)
    assert len(pairs) == len(dump.slots)
    for slot, got, (item, data) in zip(dump.slots, decoded, pairs, strict=True):
        assert got.tobytes() == data
        if slot.io != "buffer":
            assert slot.data_type == pb.OutputDataType.Name(item.data_type)
            assert slot.format == pb.OutputFormat.Name(item.format).removeprefix("FORMAT_")
            assert slot.shape == tuple(item.shape.dim)
    if layout == "big_dump":
        assert dump.header_len == struct.unpack_from("<Q", path.read_bytes())[0]
        assert dump.slots[0].offset == 8 + dump.header_len
    else:
        assert dump.header_len == 0


def test_protobuf_layout_without_size_fields(tmp_path):
    inputs, outputs = real_op()
    path = write_raw_dump(
        tmp_path / "RealDiv.x.1.1.1",
        op_name=DIV,
        inputs=[spec_of(a) for a in inputs],
        outputs=[spec_of(a) for a in outputs],
        layout="protobuf",
        version="1.0",
        inline_size=False,
    )
    assert all(item.size == 0 for item in pb.DumpData.FromString(path.read_bytes()).input)
    dump = read_raw_dump(path)
    assert dump.layout == "protobuf" and dump.version == "1.0"
    for got, want in zip(decode_all(path, dump), [*inputs, *outputs], strict=True):
        assert got.tobytes() == want.tobytes()


def sample_for(dt_name: str, rng: np.random.Generator) -> tuple[bytes, tuple[int, ...], np.ndarray | None]:
    """Bytes of a (3, 5) tensor of `dt_name` and what it must decode to (None: raw bytes)."""
    stored = dtypes.stored_dtype_of(dt_name)
    shape = (3, 5)
    pool = np.load(next(STEP0.glob("MatMul.Gradients*op2.*.input.0.*Float32.npy"))).reshape(-1)
    values = np.resize(np.nan_to_num(pool) * 10, 15).reshape(shape)
    if stored == "raw":
        return rng.integers(0, 256, 11, dtype=np.uint8).tobytes(), shape, None
    if stored == "int4":
        arr = rng.integers(-8, 8, shape).astype(np.int8)
    elif stored == "uint1":
        arr = rng.integers(0, 2, shape).astype(np.uint8)
    elif stored == "complex32":
        arr = (values.astype(np.float16) + 1j * values[::-1].astype(np.float16)).astype(np.complex64)
    elif stored == "bool":
        arr = values > 0
    elif stored == "float8_e8m0fnu":
        arr = np.abs(values) + 0.5
    else:
        arr = values.astype(stored) if stored[0] in "fbc" else rng.integers(-100, 100, shape).astype(stored)
    data = encode(arr, stored)
    if stored in ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu"):
        arr = np.frombuffer(data, dtype=getattr(ml_dtypes, stored)).reshape(shape)
    return data, shape, arr


@pytest.mark.parametrize("layout", ["big_dump", "protobuf"])
def test_every_data_type(tmp_path, layout):
    rng = np.random.default_rng(7)
    numbers = [*sorted(dtypes.DATA_TYPE_NAMES), 99]
    samples = [sample_for(dtypes.data_type_name(n), rng) for n in numbers]
    outputs = [
        SlotSpec(data, n, shape, format=n % 50) for n, (data, shape, _) in zip(numbers, samples, strict=True)
    ]
    path = write_raw_dump(tmp_path / "Cast.every.1.2.3", op_name="every", outputs=outputs, layout=layout)
    dump = read_raw_dump(path)
    decoded = decode_all(path, dump)
    _, pairs = pb_slots(path, dump)
    for n, slot, got, (data, shape, want), (_, pb_data) in zip(
        numbers, dump.slots, decoded, samples, pairs, strict=True
    ):
        name = dtypes.data_type_name(n)
        assert slot.data_type == name == (f"DT_{n}" if n == 99 else pb.OutputDataType.Name(n))
        assert slot.stored_dtype == dtypes.stored_dtype_of(name)
        assert slot.format == dtypes.format_name(n % 50)
        assert pb_data == data
        if want is None:
            assert slot.stored_dtype == "raw"
            assert got.dtype == np.uint8 and got.tobytes() == data
        else:
            assert got.shape == shape and got.dtype == want.dtype, name
            assert got.tobytes() == want.tobytes(), name


def test_unknown_format_and_negative_enum_values():
    spec = SlotSpec(b"\0" * 4, "DT_FLOAT", (1,), format=77, sub_format=-3)
    blob = build_raw_dump(op_name="x", outputs=[spec])
    (slot,) = parse_raw_header(blob, len(blob)).slots
    assert (slot.format, slot.sub_format) == ("FORMAT_77", -3)
    blob = build_raw_dump(op_name="x", outputs=[SlotSpec(b"\0", -2, (1,))])
    assert parse_raw_header(blob, len(blob)).slots[0].data_type == "DT_-2"


def test_newer_cann_unknown_fields_are_skipped():
    """Newer CANN adds address/offset to slots and `space` workspaces to DumpData (numbers unverified)."""
    extra = field_varint(20, 0x12C0_0000_0000) + field_varint(21, 64) + field_bytes(22, b"\x08\x01\x10\x02")
    inputs, outputs = real_op()
    space = field_bytes(30, field_varint(1, 0) + field_varint(3, 32)) + field_bytes(31, b"attr")
    for layout in ("big_dump", "protobuf"):
        blob = build_raw_dump(
            op_name=DIV,
            inputs=[spec_of(a, extra=extra) for a in inputs],
            outputs=[spec_of(a, extra=extra) for a in outputs],
            layout=layout,
            header_extra=space,
            trailing=b"\xaa" * 32 if layout == "big_dump" else b"",
        )
        dump = parse_raw_header(blob, len(blob))
        assert dump.layout == layout
        if layout == "big_dump":
            assert dump.declared_size == len(blob) - 32
        for slot, want in zip(dump.slots, [*inputs, *outputs], strict=True):
            got = dtypes.decode(
                memoryview(blob)[slot.offset : slot.offset + slot.size], slot.stored_dtype, slot.shape
            )
            assert got.tobytes() == want.tobytes()


def test_long_headers_are_reread_and_tensor_bytes_never_read(tmp_path, monkeypatch):
    long_name = "Default/" + "/".join(f"block{i}-Cell" for i in range(800)) + "/MatMul-op1"
    inputs = [spec_of(np.full((4, 4), i, np.float32)) for i in range(50)]
    blob = build_raw_dump(
        op_name=long_name, inputs=inputs, outputs=[spec_of(np.zeros((1 << 20,), np.float32))]
    )
    header_end = 8 + struct.unpack_from("<Q", blob)[0]
    assert header_end > rd.HEADER_PROBE_BYTES
    path = tmp_path / "MatMul.long.1.1.1"
    path.write_bytes(blob)
    reads: list[int] = []
    real_open = builtins.open

    def spy_open(*args, **kwargs):
        f = real_open(*args, **kwargs)
        real_read = f.read

        class Spy:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def fileno(self):
                return f.fileno()

            def read(self, n=-1):
                data = real_read(n)
                reads.append(len(data))
                return data

        return Spy()

    monkeypatch.setattr(rd, "open", spy_open, raising=False)
    dump = read_raw_dump(path)
    assert dump.op_name == long_name and len(dump.slots) == 51
    assert sum(reads) <= max(header_end, rd.HEADER_PROBE_BYTES)
    assert dump.slots[-1].offset + dump.slots[-1].size == len(blob)


# ---------------------------------------------------------------------------------------------
# broken files


def good_blob(layout: str = "big_dump", **kw) -> bytes:
    spec = SlotSpec(encode(np.arange(6, dtype=np.float32), "float32"), "DT_FLOAT", (2, 3))
    return build_raw_dump(op_name="Default/Add-op1", inputs=[spec], outputs=[spec], layout=layout, **kw)


def header_of(blob: bytes) -> pb.DumpData:
    (n,) = struct.unpack_from("<Q", blob)
    return pb.DumpData.FromString(blob[8 : 8 + n])


def reframe(msg: pb.DumpData, payload: bytes) -> bytes:
    header = msg.SerializeToString()
    return struct.pack("<Q", len(header)) + header + payload


PAYLOAD = encode(np.arange(6, dtype=np.float32), "float32") * 2


def _size_mismatch() -> bytes:
    msg = header_of(good_blob())
    msg.output[0].size = 20
    return reframe(msg, PAYLOAD[:44])


def _negative_dim() -> bytes:
    msg = header_of(good_blob())
    msg.input[0].shape.dim[0] = (1 << 64) - 1
    return reframe(msg, PAYLOAD)


def _huge_dims() -> bytes:
    msg = header_of(good_blob())
    msg.input[0].data_type = pb.DT_STRING
    del msg.input[0].shape.dim[:]
    msg.input[0].shape.dim.extend([1 << 40, 1 << 40])
    return reframe(msg, PAYLOAD)


def _absurd_size() -> bytes:
    msg = header_of(good_blob())
    msg.input[0].data_type = pb.DT_STRING
    msg.input[0].size = 1 << 60
    return reframe(msg, PAYLOAD)


def _inline_size_disagrees() -> bytes:
    msg = pb.DumpData.FromString(good_blob("protobuf"))
    msg.output[0].size = 28
    return msg.SerializeToString()


BAD = {
    "empty": (b"", RawDumpIncomplete, r"empty file \(0 bytes\)"),
    "shorter than the length": (b"\x10\0\0", RawDumpIncomplete, "fewer than the 8-byte header length"),
    "truncated header": (
        good_blob()[:30],
        RawDumpIncomplete,
        "header length 57 runs past the end of the file",
    ),
    "length beyond the file": (
        struct.pack("<Q", 1 << 60) + b"\xff" * 40,
        RawDumpError,
        "not a raw dump: header length 1152921504606846976 is beyond the file",
    ),
    "zero header length": (b"\0" * 20, RawDumpError, "header length is 0"),
    "header does not parse": (
        struct.pack("<Q", 12) + b"\xff" * 12 + b"\0" * 8,
        RawDumpError,
        "the 12-byte header does not parse as DumpData: varint at byte 8 is longer than 10 bytes",
    ),
    "field runs past the header": (
        struct.pack("<Q", 3) + b"\x0a\x09\x41" + b"\0" * 9,
        RawDumpError,
        "field 1 at byte 8 declares 9 bytes, which run past the end",
    ),
    "truncated data": (
        good_blob()[:-1],
        RawDumpIncomplete,
        r"header declares 113 bytes \(8 \+ 57 header \+ 48 data\), the file has 112",
    ),
    "sizes do not add up": (
        good_blob() + b"\0",
        RawDumpError,
        "sizes do not add up: header declares 113 bytes .*, the file has 114",
    ),
    "shape and size disagree": (
        _size_mismatch(),
        RawDumpError,
        r"output 0: shape \(2, 3\) of DT_FLOAT needs 24 bytes, header declares 20",
    ),
    "negative dim": (_negative_dim(), RawDumpError, "input 0: negative dimension -1"),
    "huge dims": (_huge_dims(), RawDumpError, "absurdly many elements"),
    "absurd size": (_absurd_size(), RawDumpError, "declared size 1152921504606846976 bytes is absurd"),
    "nano": (
        struct.pack("<QII", 40, 0x5A5A5A5A, 1) + b"\0" * 40,
        RawDumpError,
        "TLV nano dump format is not supported",
    ),
    "protobuf inline size disagrees": (
        _inline_size_disagrees(),
        RawDumpError,
        "output 0: declares 28 bytes but holds 24",
    ),
    "protobuf truncated": (good_blob("protobuf")[:-5], RawDumpError, "does not parse as a DumpData protobuf"),
    "protobuf without tensors": (
        pb.DumpData(version="1.0", op_name="Add").SerializeToString(),
        RawDumpError,
        "holds no tensors",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_say_why(tmp_path, case):
    blob, error, message = BAD[case]
    with pytest.raises(error, match=message):
        parse_raw_header(blob, len(blob))
    path = tmp_path / "Add.bad.1.1.1"
    path.write_bytes(blob)
    with pytest.raises(error, match=message) as info:
        read_raw_dump(path)
    if error is RawDumpError:
        assert not isinstance(info.value, RawDumpIncomplete), case


def test_short_head_asks_for_more_bytes():
    blob = good_blob()
    with pytest.raises(RawDumpError, match="need the first 65 bytes"):
        parse_raw_header(blob[:20], len(blob))


def test_every_prefix_and_every_byte_flip_is_handled():
    """Truncated or corrupted files give RawDumpError (or parse), never another exception.

    Every cut big dump is an error. The old 'protobuf' layout has no overall length, so a cut at a
    field boundary is a valid, shorter DumpData (here: without `op_name`, or without the input).
    """
    for layout in ("big_dump", "protobuf"):
        blob = good_blob(layout)
        parsed_cuts = []
        for cut in range(len(blob)):
            try:
                dump = parse_raw_header(blob[:cut], cut)
            except RawDumpError:
                continue
            assert all(s.offset + s.size <= cut for s in dump.slots)
            parsed_cuts.append(cut)
        assert parsed_cuts == ([] if layout == "big_dump" else [52, 92])
        for at in range(len(blob)):
            for value in (0x00, 0xFF, blob[at] ^ 0x80):
                bad = blob[:at] + bytes([value]) + blob[at + 1 :]
                try:
                    dump = parse_raw_header(bad, len(bad))
                except RawDumpError:
                    continue
                assert all(s.offset + s.size <= len(bad) for s in dump.slots)


def _outcome(blob: bytes, fast: bool):
    try:
        return parse_raw_header(blob, len(blob), fast=fast)
    except RawDumpError as exc:
        return type(exc), str(exc)


def test_protobuf_fast_path_and_walker_agree():
    """Big-dump headers are parsed by dump_data_pb2 when that works and the sizes add up, else by
    the wire walker: both give the same RawDump (or the same error) for every committed raw file
    and every corruption of one."""
    trees = DATA / "ascend_raw"
    committed = [p for p in trees.rglob("*") if p.is_file() and parse_raw_name(p.name)]
    assert len(committed) > 100
    big = 0
    for path in committed:
        blob = path.read_bytes()
        fast = _outcome(blob, True)
        assert fast == _outcome(blob, False), path
        big += getattr(fast, "layout", None) == "big_dump"
    assert 0 < big < len(committed)  # both layouts are among them
    blob = good_blob("big_dump")
    for at in range(len(blob)):
        for value in (0x00, 0xFF, blob[at] ^ 0x80):
            bad = blob[:at] + bytes([value]) + blob[at + 1 :]
            assert _outcome(bad, True) == _outcome(bad, False), (at, value)


def test_read_raw_dump_of_a_missing_file_is_oserror(tmp_path):
    with pytest.raises(OSError):
        read_raw_dump(tmp_path / "nope")


# ---------------------------------------------------------------------------------------------
# file names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "Add.Default_network_Add-op1.8.5.1682067845380164",
            RawName("Add", "Default_network_Add-op1", 8, 5, 1682067845380164, ""),
        ),
        (
            "aclnnBatchMatMul_0_L2.aclnnBatchMatMul.65535.65535.1725960383079645.bin",
            RawName("aclnnBatchMatMul_0_L2", "aclnnBatchMatMul", 65535, 65535, 1725960383079645, ".bin"),
        ),
        ("Add.8.5.1682067845380164", RawName("Add", "8", 5, None, 1682067845380164, "")),
        (
            "Conv2D.Default.net.conv1.Conv2D-op7.12.3.1682067845380164",
            RawName("Conv2D", "Default.net.conv1.Conv2D-op7", 12, 3, 1682067845380164, ""),
        ),
        (
            "Conv2D.conv1-Conv2D-op7.12.1682067845380164",
            RawName("Conv2D", "conv1-Conv2D-op7", 12, None, 1682067845380164, ""),
        ),
        ("Cast.v1.2.name.4.1616391236123456", RawName("Cast", "v1.2.name", 4, None, 1616391236123456, "")),
        (
            "Opdebug.Node_OpDebug.10.3.1682067845380164",
            RawName("Opdebug", "Node_OpDebug", 10, 3, 1682067845380164, ""),
        ),
        ("Add.x.1.2.3.bin", RawName("Add", "x", 1, 2, 3, ".bin")),
    ],
)
def test_raw_names(name, expected):
    assert parse_raw_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "x.npy",
        "statistic.csv",
        "mapping.csv",
        "Add.Add_1.8.5.1682067845380164.csv",
        "Parameter.global_step.0.0.1795302834568971.output.0.DefaultFormat.Int32.npy",
        "Add.Default_Add-op1.8.5.1682067845380164.output.0.NCHW.npy",
        "Add.Default_Add-op1.8.5.1682067845380164.output.0.2_3.float32.NCHW.bin",
        "Add.8.1682067845380164",
        "Add..5.1682067845380164",
        "bad type.x.1.2.3",
        ".hidden.1.2.3",
        "Add.x.1.2.16820678453801e4",
        "Add.x.1.2.١٢٣",
        "",
    ],
)
def test_non_names(name):
    assert parse_raw_name(name) is None


def test_names_written_by_the_writer_parse_back():
    name = raw_file_name("Mat Mul", "Default/net.fc/MatMul-op3", 7, 2, 1725960383079645, ".bin")
    assert name == "Mat_Mul.Default_net_fc_MatMul-op3.7.2.1725960383079645.bin"
    parsed = parse_raw_name(name)
    assert parsed is not None and parsed.op_name == "Default_net_fc_MatMul-op3"
