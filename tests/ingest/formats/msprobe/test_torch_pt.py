"""ingest.formats.msprobe.torch_pt: real torch.save files read back without torch, hostile ones refused.

The committed files in tests/data/torch_pt/ were written by torch 2.13 (tests/writers/torch_pt_files.py);
their `.npy` twins hold what torch.load gave. The hostile pickles are assembled here from opcodes,
so no test needs torch.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ingest.formats import dtypes
from ingest.formats.msprobe import torch_pt
from ingest.formats.msprobe.torch_pt import PtError, load_pt, read_pt_header
from tests.conftest import DATA as TEST_DATA

DATA = TEST_DATA / "torch_pt"
MANIFEST: dict[str, dict] = json.loads((DATA / "manifest.json").read_text())
READABLE = sorted(n for n, e in MANIFEST.items() if "refused" not in e)
REFUSED = sorted(n for n, e in MANIFEST.items() if "refused" in e)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN-safe, -0.0 distinct from 0.0), shapes and dtypes equal."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def itemsize(h: torch_pt.PtTensor) -> int:
    return 1 if h.stored_dtype in torch_pt._ML_ONLY else dtypes.nbytes_of(h.stored_dtype, 1)


def expected(name: str, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ours, twin) comparable: bf16/fp8 arrays viewed as the raw bits the twin holds."""
    entry = MANIFEST[name]
    twin = np.load(DATA / entry["twin"])
    if entry["twin_kind"] == "bits":
        arr = np.ascontiguousarray(arr).view(twin.dtype)
    return arr, twin


def test_manifest_covers_the_brief():
    dts = {MANIFEST[n]["torch_dtype"] for n in READABLE}
    for dt in ("float16", "float32", "float64", "bfloat16", "complex32", "complex64", "complex128", "int8",
               "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn",
               "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):  # fmt: skip
        assert f"torch.{dt}" in dts
    assert {
        "scalar",
        "empty",
        "transpose",
        "slice_offset",
        "requires_grad",
        "nan_inf",
        "legacy_float32",
    } <= set(READABLE)
    assert "dict_of_tensors" in REFUSED
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 300_000


@pytest.mark.parametrize("mapped", [True, False])
@pytest.mark.parametrize("name", READABLE)
def test_real_file_equals_twin(name, mapped):
    arr = load_pt(DATA / MANIFEST[name]["file"], mapped=mapped)
    ours, twin = expected(name, arr)
    assert same_bits(ours, twin), (ours, twin)
    if not mapped:
        assert arr.flags.writeable


@pytest.mark.parametrize("name", READABLE)
def test_real_file_header_equals_manifest(name):
    entry = MANIFEST[name]
    h = read_pt_header(DATA / entry["file"])
    assert h.torch_dtype == entry["torch_dtype"]
    assert list(h.shape) == entry["shape"]
    assert list(h.strides) == entry["strides"]
    assert h.storage_offset == entry["storage_offset"]
    assert h.requires_grad == entry["requires_grad"]
    assert h.contiguous == entry["contiguous"]
    item = 4 if h.stored_dtype == "complex32" else np.dtype(load_pt(DATA / entry["file"]).dtype).itemsize
    assert h.nbytes == int(np.prod(h.shape)) * item
    # The stored dtype is one the catalog can decode (the two fnuz float8 types are not in dtypes.py yet).
    if h.stored_dtype not in torch_pt._ML_ONLY:
        assert h.stored_dtype in dtypes.STORED_DTYPES
        dtypes.decode(b"\0" * h.nbytes, h.stored_dtype, h.shape)


@pytest.mark.parametrize("name", [n for n in READABLE if MANIFEST[n]["contiguous"]])
def test_data_offset_points_at_the_values(name):
    path = DATA / MANIFEST[name]["file"]
    h = read_pt_header(path)
    raw = path.read_bytes()[h.data_offset : h.data_offset + h.nbytes]
    assert len(raw) == h.nbytes
    if not MANIFEST[name]["legacy"]:  # torch aligns storages to 64 bytes in the zip
        assert (h.data_offset - h.storage_offset * itemsize(h)) % 64 == 0
    got = dtypes.decode(raw, h.stored_dtype, h.shape) if h.stored_dtype not in torch_pt._ML_ONLY else None
    if got is None:
        got = np.frombuffer(raw, dtype=torch_pt._ML_ONLY[h.stored_dtype]).reshape(h.shape)
    ours, twin = expected(name, got)
    assert same_bits(ours, twin)


def test_mapped_contiguous_is_a_read_only_map():
    arr = load_pt(DATA / "float32.pt")
    assert not arr.flags.writeable
    assert arr.base is not None


@pytest.mark.parametrize("name", ["transpose", "slice_offset", "expand", "bfloat16_transpose"])
def test_views_map_with_their_strides_or_copy(name):
    """mapped: a read-only strided array over the map, as `.numpy()` gives; read: a C-ordered copy."""
    path = DATA / MANIFEST[name]["file"]
    mapped, read = load_pt(path), load_pt(path, mapped=False)
    assert not mapped.flags.writeable
    assert mapped.strides == tuple(s * mapped.itemsize for s in MANIFEST[name]["strides"])
    assert read.flags.c_contiguous and read.flags.writeable and read.flags.owndata
    assert same_bits(mapped, read)


def test_complex32_is_widened_to_complex64():
    assert load_pt(DATA / "complex32.pt").dtype == np.complex64
    assert read_pt_header(DATA / "complex32.pt").stored_dtype == "complex32"


@pytest.mark.parametrize("name", REFUSED)
def test_refused_real_files(name):
    with pytest.raises(PtError, match=MANIFEST[name]["refused"]):
        read_pt_header(DATA / MANIFEST[name]["file"])
    with pytest.raises(PtError, match=MANIFEST[name]["refused"]):
        load_pt(DATA / MANIFEST[name]["file"])


def test_real_msprobe_dump_files():
    """Every .pt msprobe wrote for the committed dumps reads, and its header agrees with the values."""
    files = sorted((TEST_DATA / "msprobe").rglob("*.pt"))
    if not files:
        pytest.skip("no msprobe dumps committed")
    for path in files:
        h = read_pt_header(path)
        arr = load_pt(path)
        assert arr.shape == h.shape and arr.dtype.name in (h.stored_dtype, "complex64")


# --- hand-built files -----------------------------------------------------------------------------


def _str(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _obj(value: object) -> bytes:
    """Opcodes pushing a plain value (ints, tuples, bools) as pickle writes them, PROTO/STOP cut off."""
    return pickle.dumps(value, protocol=2)[2:-1]


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def tensor_pickle(
    storage_cls: tuple[str, str] = ("torch", "FloatStorage"),
    numel: int = 6,
    offset: int = 0,
    shape: tuple = (2, 3),
    stride: tuple = (3, 1),
    requires_grad: bool = False,
    v3_dtype: str | None = None,
    key: str = "0",
) -> bytes:
    """data.pkl as torch.save writes it for one tensor (v3 when `v3_dtype` names a torch dtype)."""
    fn = "_rebuild_tensor_v3" if v3_dtype else "_rebuild_tensor_v2"
    out = b"\x80\x02" + _global("torch._utils", fn) + b"(("
    out += _str("storage") + _global(*storage_cls) + _str(key) + _str("cpu") + _obj(numel) + b"tQ"
    out += _obj(offset) + _obj(tuple(shape)) + _obj(tuple(stride)) + _obj(requires_grad)
    out += _global("collections", "OrderedDict") + b")R"
    if v3_dtype:
        out += _global("torch", v3_dtype)
    return out + b"tR."


def make_pt(path: Path, pkl: bytes, storages: dict[str, bytes] | None = None, **kw) -> Path:
    """A zip laid out like torch.save's: {arch}/data.pkl, byteorder, data/{key}, version."""
    arch = kw.get("arch", "archive")
    storages = {"0": np.arange(6, dtype="<f4").tobytes()} if storages is None else storages
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{arch}/data.pkl", pkl)
        if kw.get("byteorder", b"little") is not None:
            zf.writestr(f"{arch}/byteorder", kw.get("byteorder", b"little"))
        for key, blob in storages.items():
            zf.writestr(f"{arch}/data/{key}", blob, compress_type=kw.get("compress", zipfile.ZIP_STORED))
        zf.writestr(f"{arch}/version", b"3\n")
        for name, blob in kw.get("extra", {}).items():
            zf.writestr(name, blob)
    return path


def test_hand_built_file_reads(tmp_path):
    path = make_pt(tmp_path / "t.pt", tensor_pickle())
    assert same_bits(load_pt(path), np.arange(6, dtype=np.float32).reshape(2, 3))
    path = make_pt(
        tmp_path / "u.pt", tensor_pickle(("torch.storage", "UntypedStorage"), 24, v3_dtype="float32")
    )
    assert same_bits(load_pt(path), np.arange(6, dtype=np.float32).reshape(2, 3))
    path = make_pt(tmp_path / "no_order.pt", tensor_pickle(), byteorder=None)  # torch < 1.12 wrote none
    assert read_pt_header(path).shape == (2, 3)


def _marker_cmd(marker: Path) -> str:
    return f"touch {marker}"


def _reduce_call(module: str, name: str, *args: str) -> bytes:
    return _global(module, name) + b"(" + b"".join(_str(a) for a in args) + b"tR"


def _hostile(marker: Path) -> dict[str, tuple[bytes, str]]:
    cmd = _marker_cmd(marker)

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (cmd,))

    py = f"open({str(marker)!r}, 'w').close()"
    stack_global = b"\x80\x04" + _str("posix")[:0]  # protocol 4: SHORT_BINUNICODE module, name, STACK_GLOBAL
    stack_global += (
        b"\x8c\x05posix\x8c\x06system\x93" + b"\x8c" + bytes([len(cmd)]) + cmd.encode() + b"\x85R."
    )
    return {
        "os.system GLOBAL+REDUCE": (b"\x80\x02" + _reduce_call("os", "system", cmd) + b".", "os.system"),
        "builtins.eval": (b"\x80\x02" + _reduce_call("builtins", "eval", py) + b".", "builtins.eval"),
        "__builtin__.eval (py2 name)": (b"\x80\x02" + _reduce_call("__builtin__", "eval", py) + b".", "eval"),
        "subprocess.Popen": (
            b"\x80\x02"
            + _global("subprocess", "Popen")
            + b"(("
            + _str("touch")
            + _str(str(marker))
            + b"ltR.",
            "subprocess.Popen",
        ),
        "__reduce__ of a class": (pickle.dumps(Evil(), protocol=2), "system"),
        "__reduce__, protocol 5": (pickle.dumps(Evil(), protocol=5), "system"),
        "posix.system STACK_GLOBAL": (stack_global, "posix.system"),
        "INST opcode": (b"(" + _str(cmd) + b"ios\nsystem\n.", "os.system"),
        "OBJ opcode": (b"\x80\x02(" + _global("os", "system") + _str(cmd) + b"o.", "os.system"),
        "hook is a call": (
            b"\x80\x02"
            + _global("torch._utils", "_rebuild_tensor_v2")
            + b"(("
            + _str("storage")
            + _global("torch", "FloatStorage")
            + _str("0")
            + _str("cpu")
            + _obj(6)
            + b"tQ"
            + _obj(0)
            + _obj((2, 3))
            + _obj((3, 1))
            + b"\x89"
            + _reduce_call("os", "system", cmd)
            + b"tR.",
            "os.system",
        ),
        "torch.load inside": (b"\x80\x02" + _reduce_call("torch", "load", str(marker)) + b".", "torch.load"),
        "numpy rebuild (weights_only allows it)": (
            b"\x80\x02" + _reduce_call("torch._utils", "_rebuild_device_tensor_from_numpy", "x") + b".",
            "numpy arrays are not supported",
        ),
        "numpy reconstruct": (
            b"\x80\x02" + _reduce_call("numpy.core.multiarray", "_reconstruct", "x") + b".",
            "numpy.core.multiarray._reconstruct",
        ),
        "tensor subclass": (
            b"\x80\x02" + _reduce_call("torch._utils", "_rebuild_wrapper_subclass", "x") + b".",
            "subclasses",
        ),
        "EXT1 opcode": (b"\x80\x02\x82\x01.", "corrupt pickle"),
        "persistent id of a module": (b"\x80\x02(" + _str("module") + _str("os") + b"tQ.", "persistent id"),
        "persistent id text (PERSID)": (b"P" + cmd.encode() + b"\n.", "persistent id"),
        "storage type is a function": (
            b"\x80\x02(("
            + _str("storage")
            + _global("torch._utils", "_rebuild_tensor_v2")
            + _str("0")
            + _str("cpu")
            + _obj(6)
            + b"tQ.",
            "not a torch storage class",
        ),
        "NEWOBJ on a stand-in": (
            b"\x80\x02" + _global("collections", "OrderedDict") + b")\x81.",
            "corrupt pickle",
        ),
    }


@pytest.mark.parametrize("case", sorted(_hostile(Path("/nonexistent")).keys()))
def test_hostile_pickle_is_refused_without_side_effect(tmp_path, case):
    marker = tmp_path / "pwned"
    pkl, message = _hostile(marker)[case]
    path = make_pt(tmp_path / "evil.pt", pkl)
    with pytest.raises(PtError, match=message.replace(".", r"\.")):
        load_pt(path)
    with pytest.raises(PtError):
        read_pt_header(path)
    assert not marker.exists()


def test_hostile_legacy_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    head = pickle.dumps(torch_pt._LEGACY_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2)
    head += pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
    path = tmp_path / "evil.pt"
    path.write_bytes(head + b"\x80\x02" + _reduce_call("os", "system", _marker_cmd(marker)) + b".")
    with pytest.raises(PtError, match=r"os\.system"):
        load_pt(path)
    assert not marker.exists()


def test_dict_of_tensors_is_refused(tmp_path):
    pkl = b"\x80\x02}(" + _str("a") + tensor_pickle()[2:-1] + _str("b") + tensor_pickle()[2:-1] + b"u."
    with pytest.raises(PtError, match="holds a dict, not one tensor"):
        load_pt(make_pt(tmp_path / "d.pt", pkl))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"byteorder": b"big"}, "only little-endian"),
        ({"storages": {}}, r"data/0 \(the tensor's storage\) is missing"),
        ({"storages": {"0": b"\0" * 20}}, "holds 20 bytes, its storage needs 24"),
        ({"extra": {"other/data.pkl": b""}}, "holds 2 archives"),
        ({"extra": {"stray.txt": b""}}, "outside archive/"),
        ({"compress": zipfile.ZIP_DEFLATED}, "is compressed"),
        ({"pkl": tensor_pickle(numel=5)}, "needs 24 bytes of storage '0', which holds 20"),
        ({"pkl": tensor_pickle(offset=1)}, "needs 28 bytes"),
        ({"pkl": tensor_pickle(shape=(2**40, 2**40), stride=(2**40, 1))}, "needs .* bytes"),
        ({"pkl": tensor_pickle(shape=(2**70,), stride=(1,))}, "below 2\\*\\*62"),
        ({"pkl": tensor_pickle(shape=(-1,), stride=(1,))}, "non-negative"),
        ({"pkl": tensor_pickle(stride=(-3, 1))}, "non-negative"),
        ({"pkl": tensor_pickle(shape=(2, 3), stride=(1,))}, "differ in length"),
        ({"pkl": tensor_pickle(shape=(1,) * 65, stride=(1,) * 65)}, "at most 64"),
        ({"pkl": tensor_pickle(numel=2**62 - 1)}, "its storage needs"),
        ({"pkl": tensor_pickle(("torch", "QInt8Storage"))}, "quantized"),
        (
            {"pkl": tensor_pickle(("torch.storage", "UntypedStorage"), 24, v3_dtype="float4_e2m1fn_x2")},
            "float4",
        ),
        ({"pkl": tensor_pickle(("torch.storage", "UntypedStorage"), 24)}, "needs _rebuild_tensor_v3"),
        ({"pkl": tensor_pickle(key="../../etc/passwd")}, "missing"),
        ({"pkl": b"\x80\x02" + _obj([1, 2]) + b"."}, "holds a list, not one tensor"),
        ({"pkl": b"\x80\x02N."}, "holds a NoneType, not one tensor"),
        ({"pkl": b"\x80\x02\x88."}, "holds a bool"),
        ({"pkl": b"garbage"}, "corrupt pickle"),
        ({"pkl": b""}, "corrupt pickle"),
    ],
)
def test_bad_archives_are_refused(tmp_path, kw, message):
    pkl = kw.pop("pkl", tensor_pickle())
    path = make_pt(tmp_path / "bad.pt", pkl, **kw)
    with pytest.raises(PtError, match=message):
        load_pt(path)


def test_not_torch_files(tmp_path):
    cases = {
        "empty": b"",
        "text": b"hello world, not a tensor\n",
        "npy": (DATA / "float32.npy").read_bytes(),
        "zip without pickle": _zip_bytes({"a/b.txt": b"x"}),
        "empty zip": _zip_bytes({}),
    }
    for name, blob in cases.items():
        path = tmp_path / f"{name}.pt"
        path.write_bytes(blob)
        with pytest.raises(PtError):
            load_pt(path)
    tar_path = tmp_path / "old.pt"
    with tarfile.open(tar_path, "w") as tar:
        info = tarfile.TarInfo("storages")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(PtError, match=r"legacy tar torch\.save format"):
        load_pt(tar_path)
    with pytest.raises(OSError):
        load_pt(tmp_path / "missing.pt")


def _zip_bytes(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in entries.items():
            zf.writestr(name, blob)
    return buf.getvalue()


# --- fuzz -----------------------------------------------------------------------------------------


def _overwrite(path: Path, blob: bytes) -> None:
    """Make the file hold exactly `blob`. Rewritten in place, not truncated to 0 first: on ext4 a file
    truncated to 0 and written again is flushed at close (auto_da_alloc), ~1.5 ms per variant."""
    with open(path, "r+b" if path.exists() else "wb") as f:
        f.write(blob)
        f.truncate()


def _strided_from_bytes(blob: bytes, h: torch_pt.PtTensor, like: np.ndarray) -> np.ndarray:
    """The values the header describes, read straight from the file bytes (a second, naive decoder)."""
    item = itemsize(h)
    out = np.empty(h.shape, dtype=like.dtype)
    for idx in np.ndindex(*h.shape):
        at = h.data_offset + sum(i * s for i, s in zip(idx, h.strides, strict=True)) * item
        out[idx] = np.frombuffer(blob[at : at + item], dtype=like.dtype)[0]
    return out


@pytest.mark.parametrize(
    "name", ["float32", "transpose", "slice_offset", "bfloat16", "legacy_float32", "scalar"]
)
def test_every_truncation_and_byte_flip(tmp_path, name):
    """Each variant is refused (PtError/OSError) or read correctly: the same dtype and shape, and
    values equal to the file's bytes at the header's offset and strides. In a zip, a flip outside the
    storage bytes that still reads must give the original values (data.pkl is CRC-checked); the
    legacy format has no checksum, so a flip there may describe another valid view of the storage,
    which torch.load reads the same way (tests/writers/torch_pt_files.py --fuzz compares with torch)."""
    orig_path = DATA / MANIFEST[name]["file"]
    data = orig_path.read_bytes()
    orig = load_pt(orig_path)
    h0 = read_pt_header(orig_path)
    span = (
        h0.data_offset - h0.storage_offset * (h0.nbytes // max(1, int(np.prod(h0.shape)))),
        h0.data_offset,
    )
    storage_end = h0.data_offset + max(h0.nbytes, 1) * 4 + 64  # generous bound on the storage's bytes
    variants = [(f"truncated to {n}", data[:n], None) for n in range(len(data))]
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            variants.append((f"byte {i} ^ {mask:#x}", data[:i] + bytes([data[i] ^ mask]) + data[i + 1 :], i))
    path = tmp_path / "v.pt"
    read = 0
    for what, blob, flipped in variants:
        _overwrite(path, blob)
        try:
            arr = load_pt(path)
            h = read_pt_header(path)
        except (PtError, OSError):
            continue
        except Exception as exc:  # pragma: no cover - the assertion this test is for
            pytest.fail(f"{name}, {what}: {type(exc).__name__}: {exc}")
        read += 1
        assert arr.shape == h.shape, what
        assert arr.dtype == orig.dtype, what
        assert same_bits(arr, _strided_from_bytes(blob, h, orig)), what
        in_storage = flipped is not None and span[0] <= flipped < storage_end
        if not in_storage and not MANIFEST[name]["legacy"]:
            assert (h.torch_dtype, h.shape, h.strides) == (h0.torch_dtype, h0.shape, h0.strides), what
            assert same_bits(arr, orig), what
    assert read > len(data) // 4  # flips in the values and in records a tensor does not need still read


def test_random_mutations_raise_only_pt_or_os_errors(tmp_path):
    """Several random byte edits, deletions and insertions per file, over every committed file."""
    rng = np.random.default_rng(7)
    files = sorted(DATA.glob("*.pt"))
    path = tmp_path / "m.pt"
    for _ in range(1500):
        blob = bytearray(files[rng.integers(len(files))].read_bytes())
        for _ in range(rng.integers(1, 5)):
            at, op = int(rng.integers(len(blob))), rng.random()
            if op < 0.6:
                blob[at] = int(rng.integers(256))
            elif op < 0.8:
                del blob[at : at + int(rng.integers(1, 9))]
            else:
                blob[at:at] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        _overwrite(path, blob)
        for read in (read_pt_header, load_pt, lambda p: load_pt(p, mapped=False)):
            with contextlib.suppress(PtError, OSError):
                read(path)


def test_every_stored_dtype_a_pt_can_have_is_one_dumpcat_decodes():
    """Whatever `read_pt_header` can report as stored dtype, `dtypes.decode` accepts, and the ml_dtypes
    ones (bfloat16, every float8 incl. the fnuz types) take the decoded path of the statistics: a .pt
    tensor is never cataloged but unreadable."""
    from ingest.formats import dtypes
    from ingest.formats.msprobe.torch_pt import _DTYPES
    from ingest.formats.special_dtypes import SPECIAL_STORED

    for dt in _DTYPES.values():
        assert dt.stored in dtypes.STORED_DTYPES, dt
        if dt.stored.startswith(("bfloat", "float8")):
            assert dt.stored in SPECIAL_STORED, dt
        data = bytes(dtypes.nbytes_of(dt.stored, 2) or 0)
        assert dtypes.decode(data, dt.stored, (2,)).size == 2, dt
