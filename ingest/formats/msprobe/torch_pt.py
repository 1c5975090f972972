"""PyTorch `.pt` files holding one tensor (msprobe's `dump_tensor_data/*.pt`), read without torch.

`torch.save(tensor, path)` writes (since torch 1.6) an uncompressed ZIP archive with one top folder
`{archive}/`: `data.pkl` (a pickle, protocol 2) and, per storage, `data/{key}` holding its raw
bytes, plus `byteorder`, `version` and a few bookkeeping records. The pickle rebuilds the tensor
with `torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
backward_hooks[, metadata])` (or `_rebuild_tensor_v3(..., dtype[, metadata])` for the dtypes that
have no typed storage class: float8, uint16/32/64, complex32), where `storage` is a persistent id
`('storage', StorageType, key, location, numel)`.

A pickle can name any Python callable, so unpickling a foreign file runs its author's code. Here the
unpickler resolves only an explicit allowlist of names (the rebuild functions, the storage classes,
`torch.<dtype>` objects, `collections.OrderedDict`) and resolves them to stand-ins defined in this
module: nothing is imported from torch (which need not be installed) and any other name is a
`PtError` naming it. The stand-ins only record what the tensor is; the values are read from the
archive's bytes at the offset the ZIP local header gives (memory-mapped by default), so
`read_pt_header` costs the same for a 4 kB and a 4 GB tensor. Only the tensor bytes go unchecked:
data.pkl's CRC is verified by zipfile, the storage's is not (torch.load does not check it either).

The pre-1.6 format (`_use_new_zipfile_serialization=False`: five pickles in a row, then each
storage as an int64 element count and its bytes) is read the same way; the older tar format
(torch < 0.4) is refused. Big-endian files (`byteorder` 'big') are refused rather than byteswapped:
no big-endian machine made the dumps this tool is for, and none was at hand to test with.

Values follow `torch.load(path).numpy()` (after `detach()` and `resolve_conj()`/`resolve_neg()`,
which `.numpy()` insists on): bfloat16 and float8 come back as `ml_dtypes` arrays, complex32
(`torch.chalf`, which `.numpy()` cannot convert) is widened to complex64 exactly as
`ingest.formats.dtypes` decodes its 'complex32'. Quantized, sparse, nested, meta and subclass
tensors, float4 and the bit/sub-byte placeholder dtypes are refused.
"""

from __future__ import annotations

import errno
import io
import math
import mmap
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ingest.formats import dtypes


class PtError(ValueError):
    """A `.pt` file is not one plain tensor this reader can fetch safely; the message says why."""


@dataclass(frozen=True, slots=True)
class PtTensor:
    """Where and what one saved tensor is: enough to catalog it and map its bytes without torch."""

    torch_dtype: str  # 'torch.float32', 'torch.bfloat16', ...
    stored_dtype: str  # a dumpcat stored dtype name (ingest/formats/dtypes.py): 'float32', 'bfloat16', ...
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    storage_offset: int  # in elements
    data_offset: int  # absolute byte offset in the file of the first element (storage start + offset)
    nbytes: int  # prod(shape) * itemsize
    contiguous: bool  # C-contiguous and no lazy conj/neg bit: bytes [data_offset, +nbytes) are the values
    requires_grad: bool


# --- dtypes ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _DType:
    """A torch dtype: its canonical name, the dumpcat stored dtype of its bytes and its item size."""

    name: str  # canonical torch name without 'torch.'
    stored: str
    itemsize: int


_DTYPES: dict[str, _DType] = {
    d.name: d
    for d in (
        _DType("float32", "float32", 4),
        _DType("float64", "float64", 8),
        _DType("float16", "float16", 2),
        _DType("bfloat16", "bfloat16", 2),
        _DType("complex64", "complex64", 8),
        _DType("complex128", "complex128", 16),
        _DType("complex32", "complex32", 4),  # (real, imag) float16 pairs; decoded widened to complex64
        _DType("int8", "int8", 1),
        _DType("int16", "int16", 2),
        _DType("int32", "int32", 4),
        _DType("int64", "int64", 8),
        _DType("uint8", "uint8", 1),
        _DType("uint16", "uint16", 2),
        _DType("uint32", "uint32", 4),
        _DType("uint64", "uint64", 8),
        _DType("bool", "bool", 1),
        _DType("float8_e4m3fn", "float8_e4m3fn", 1),
        _DType("float8_e5m2", "float8_e5m2", 1),
        _DType("float8_e4m3fnuz", "float8_e4m3fnuz", 1),
        _DType("float8_e5m2fnuz", "float8_e5m2fnuz", 1),
        _DType("float8_e8m0fnu", "float8_e8m0fnu", 1),
    )
}
# The other names torch pickles or aliases for the same dtypes (`torch.half`, `torch.cfloat`, ...).
_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
    "long": "int64",
    "int": "int32",
    "short": "int16",
}
# Stored dtypes that ingest/formats/dtypes.py does not know (yet): decoded here with ml_dtypes.
_ML_ONLY = {
    name: np.dtype(getattr(ml_dtypes, name))
    for name in ("float8_e4m3fnuz", "float8_e5m2fnuz")
    if name not in dtypes.STORED_DTYPES and hasattr(ml_dtypes, name)
}
# torch dtypes that exist but hold no values this reader can give (packed sub-byte, bit containers).
_REFUSED_DTYPES = {
    "float4_e2m1fn_x2": "packs two float4 values per byte",
    "bits1x8": "is an opaque bit container",
    "bits2x4": "is an opaque bit container",
    "bits4x2": "is an opaque bit container",
    "bits8": "is an opaque bit container",
    "bits16": "is an opaque bit container",
    **{f"uint{n}": "is a sub-byte placeholder type" for n in range(1, 8)},
    **{f"int{n}": "is a sub-byte placeholder type" for n in range(1, 8)},
}
_QUANTIZED = {"qint8", "quint8", "qint32", "quint4x2", "quint2x4"}

# Legacy typed storage classes (`torch.FloatStorage`, ...): the dtype of their elements.
_STORAGE_CLASSES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
}
_QUANTIZED_STORAGES = {"QInt8Storage", "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage"}

_MAX_NDIM = 64  # torch allows at most 64 dimensions
_MAX_INDEX = 1 << 62  # any size, stride or offset past this is corruption, not a tensor
_MAX_PICKLE = 16 << 20  # one tensor's pickle is ~200 bytes; refuse to buffer more than this
_LEGACY_HEAD = 1 << 20  # the legacy format's five pickles for one tensor take ~350 bytes
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001


# --- stand-ins the pickle may reach ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _StorageType:
    """Stand-in for `torch.FloatStorage` & co. (dtype set) or `torch.UntypedStorage` (dtype None: bytes)."""

    name: str
    dtype: _DType | None


@dataclass(frozen=True, slots=True)
class _Storage:
    """One persistent-id storage: its archive key, element dtype (None: bytes), element count, and
    for a legacy view the (offset, numel) in elements of its root storage."""

    key: str
    dtype: _DType | None
    numel: int
    view: tuple[int, int] | None = None

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize if self.dtype is not None else 1


@dataclass(frozen=True, slots=True)
class _Spec:
    """What a rebuild stand-in returns instead of a tensor."""

    storage: _Storage
    dtype: _DType
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    requires_grad: bool
    conj: bool = False
    neg: bool = False


class _HooksDict(dict):  # type: ignore[type-arg]
    """Stand-in for `collections.OrderedDict` (backward hooks; a state_dict's container): a dict that
    BUILD may give attributes to, never a torch object."""


def _ordered_dict(*args: Any) -> _HooksDict:
    if args and not (len(args) == 1 and isinstance(args[0], (list, tuple, dict))):
        raise PtError("pickle calls collections.OrderedDict with unexpected arguments")
    return _HooksDict(*args)


def _index(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < _MAX_INDEX:
        raise PtError(f"{what} is {value!r}, not a non-negative integer below 2**62")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > _MAX_NDIM:
        raise PtError(f"{what} is {value!r}, not a tuple of at most {_MAX_NDIM} integers")
    return tuple(_index(v, what) for v in value)


def _metadata_bits(metadata: Any) -> tuple[bool, bool]:
    """The (conj, neg) bits of `torch._utils.get_tensor_metadata`; anything else is refused."""
    if metadata is None:
        return False, False
    if not isinstance(metadata, dict) or not set(metadata) <= {"conj", "neg"}:
        raise PtError(f"tensor metadata {metadata!r} is not the conj/neg bits this reader knows")
    conj, neg = metadata.get("conj", False), metadata.get("neg", False)
    if type(conj) is not bool or type(neg) is not bool:
        raise PtError(f"tensor metadata {metadata!r} is not the conj/neg bits this reader knows")
    return conj, neg


def _spec(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any,
    hooks: Any,
    dtype: _DType | None,
    metadata: Any,
) -> _Spec:
    if not isinstance(storage, _Storage):
        raise PtError(f"tensor storage is {type(storage).__name__}, not a persistent storage reference")
    if type(requires_grad) is not bool:
        raise PtError(f"requires_grad is {requires_grad!r}, not a bool")
    if not isinstance(hooks, dict):
        raise PtError(f"backward hooks are {type(hooks).__name__}, not an OrderedDict")
    shape, strides = _ints(size, "tensor size"), _ints(stride, "tensor stride")
    if len(shape) != len(strides):
        raise PtError(f"tensor size {shape} and stride {strides} differ in length")
    if dtype is None:
        if storage.dtype is None:
            raise PtError("an untyped storage needs _rebuild_tensor_v3 and its dtype")
        dtype = storage.dtype
    conj, neg = _metadata_bits(metadata)
    return _Spec(storage, dtype, _index(offset, "storage offset"), shape, strides, requires_grad, conj, neg)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> _Spec:
    """Stand-in for torch._utils._rebuild_tensor (pickles of torch 0.4-1.x)."""
    return _spec(storage, offset, size, stride, False, {}, None, None)


def _rebuild_tensor_v2(
    storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, metadata: Any = None
) -> _Spec:
    """Stand-in for torch._utils._rebuild_tensor_v2: typed storage, the tensor has its dtype."""
    return _spec(storage, offset, size, stride, requires_grad, hooks, None, metadata)


def _rebuild_tensor_v3(
    storage: Any,
    offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any,
    hooks: Any,
    dtype: Any,
    metadata: Any = None,
) -> _Spec:
    """Stand-in for torch._utils._rebuild_tensor_v3: untyped (byte) storage and an explicit dtype."""
    if not isinstance(dtype, _DType):
        raise PtError(f"_rebuild_tensor_v3 dtype is {dtype!r}, not a torch dtype")
    return _spec(storage, offset, size, stride, requires_grad, hooks, dtype, metadata)


def _rebuild_parameter(data: Any, requires_grad: Any, hooks: Any, state: Any = None) -> _Spec:
    """Stand-in for torch._utils._rebuild_parameter[_with_state]: a Parameter is its data; Python
    attributes (`state`) do not change the values."""
    if not isinstance(data, _Spec):
        raise PtError(f"parameter data is {type(data).__name__}, not a tensor")
    if type(requires_grad) is not bool:
        raise PtError(f"requires_grad is {requires_grad!r}, not a bool")
    return _Spec(
        data.storage, data.dtype, data.offset, data.shape, data.strides, requires_grad, data.conj, data.neg
    )


@dataclass(frozen=True, slots=True)
class _TensorType:
    """Stand-in for `torch.Tensor` / `torch.nn.Parameter` as `_rebuild_from_type_v2` names them."""

    name: str


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> _Spec:
    """Stand-in for torch._tensor._rebuild_from_type_v2: a plain tensor or Parameter carrying Python
    attributes (`state`), which do not change its values. Subclasses never reach here: find_class
    refuses their names."""
    if func not in (_rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_tensor, _rebuild_parameter):
        raise PtError("_rebuild_from_type_v2 wraps something other than a tensor rebuild")
    if not isinstance(new_type, _TensorType) or not isinstance(args, tuple):
        raise PtError("_rebuild_from_type_v2 names a type other than torch.Tensor / Parameter")
    out = func(*args)
    if not isinstance(out, _Spec):
        raise PtError("_rebuild_from_type_v2 did not rebuild a tensor")
    return out


_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Tensor"): _TensorType("torch.Tensor"),
    ("torch._tensor", "Tensor"): _TensorType("torch.Tensor"),
    ("torch.nn.parameter", "Parameter"): _TensorType("torch.nn.Parameter"),
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch", "UntypedStorage"): _StorageType("UntypedStorage", None),
    ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", None),
    **{("torch", cls): _StorageType(cls, _DTYPES[dt]) for cls, dt in _STORAGE_CLASSES.items()},
    **{("torch.cuda", cls): _StorageType(cls, _DTYPES[dt]) for cls, dt in _STORAGE_CLASSES.items()},
    **{("torch", name): dt for name, dt in _DTYPES.items()},
    **{("torch", alias): _DTYPES[name] for alias, name in _ALIASES.items()},
}
_REFUSED_GLOBALS = {
    "_rebuild_qtensor": "quantized tensors are not supported",
    "_rebuild_sparse_tensor": "sparse tensors are not supported",
    "_rebuild_sparse_csr_tensor": "sparse tensors are not supported",
    "_rebuild_nested_tensor": "nested tensors are not supported",
    "_rebuild_meta_tensor_no_storage": "meta tensors have no values",
    "_rebuild_wrapper_subclass": "tensor subclasses are not supported",
    "_rebuild_device_tensor_from_numpy": "device tensors saved from numpy arrays are not supported",
    "_rebuild_device_tensor_from_cpu_tensor": "device tensors saved from numpy arrays are not supported",
}


class _Unpickler(pickle.Unpickler):
    """Resolves globals from the allowlist only, storages from persistent ids only."""

    def __init__(self, data: bytes | io.BytesIO, *, legacy: bool) -> None:
        super().__init__(data if isinstance(data, io.BytesIO) else io.BytesIO(data))
        self.legacy = legacy
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if module.startswith("torch"):
            if name in _REFUSED_GLOBALS:
                raise PtError(f"{_REFUSED_GLOBALS[name]} ({module}.{name})")
            if name in _QUANTIZED_STORAGES or name in _QUANTIZED:
                raise PtError(f"quantized tensors are not supported ({module}.{name})")
            if name in _REFUSED_DTYPES:
                raise PtError(f"torch.{name} {_REFUSED_DTYPES[name]}: not supported")
        raise PtError(f"pickle names {module}.{name}, not tensor rebuilding")

    def persistent_load(self, pid: Any) -> _Storage:
        want = 6 if self.legacy else 5
        if not isinstance(pid, tuple) or len(pid) != want or pid[0] not in ("storage", b"storage"):
            raise PtError(f"persistent id {pid!r:.100} is not ('storage', type, key, location, numel)")
        storage_type, key, location, numel = pid[1:5]
        if not isinstance(storage_type, _StorageType):
            raise PtError(f"persistent id names storage type {storage_type!r:.60}, not a torch storage class")
        if isinstance(key, bytes):
            key = key.decode("ascii", "replace")
        if not isinstance(key, str) or not isinstance(location, (str, bytes)):
            raise PtError(f"persistent id {pid!r:.100} has a non-string key or location")
        numel = _index(numel, "storage size")
        view = None
        if self.legacy and pid[5] is not None:
            meta = pid[5]
            if not (isinstance(meta, tuple) and len(meta) == 3 and isinstance(meta[0], (str, bytes))):
                raise PtError(f"storage view {meta!r:.100} is not (key, offset, size)")
            view = (_index(meta[1], "storage view offset"), _index(meta[2], "storage view size"))
        storage = _Storage(key, storage_type.dtype, numel)
        known = self.storages.setdefault(key, storage)
        if known != storage:
            raise PtError(f"storage {key!r} is referenced twice with different types or sizes")
        return storage if view is None else _Storage(key, storage.dtype, numel, view)


def _unpickle(data: bytes | io.BytesIO, *, legacy: bool) -> tuple[Any, dict[str, _Storage]]:
    """Run the restricted unpickler; any failure is a PtError saying what went wrong."""
    up = _Unpickler(data, legacy=legacy)
    try:
        obj = up.load()
    except PtError:
        raise
    except RecursionError as exc:  # pragma: no cover - the C unpickler does not recurse
        raise PtError("pickle nests too deeply") from exc
    except MemoryError as exc:
        raise PtError("pickle claims an object larger than memory") from exc
    except Exception as exc:  # the C unpickler raises many types for corrupt input
        raise PtError(f"corrupt pickle: {type(exc).__name__}: {exc}") from exc
    return obj, up.storages


def _one_tensor(obj: Any) -> _Spec:
    if isinstance(obj, _Spec):
        return obj
    kind = "dict" if isinstance(obj, dict) else type(obj).__name__
    raise PtError(f"holds a {kind}, not one tensor")


# --- container formats ----------------------------------------------------------------------------


def _extent(spec: _Spec) -> int:
    """Bytes of storage the tensor reaches from its storage start (0 elements: up to its offset)."""
    item = spec.dtype.itemsize
    if math.prod(spec.shape) == 0:
        return spec.offset * item
    last = spec.offset + sum((d - 1) * s for d, s in zip(spec.shape, spec.strides, strict=True))
    return (last + 1) * item


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    if math.prod(shape) == 0:
        return True
    expected = 1
    for dim, stride in zip(reversed(shape), reversed(strides), strict=True):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _finish(spec: _Spec, storage_start: int, storage_nbytes: int) -> tuple[PtTensor, _Spec]:
    need = _extent(spec)
    if need > storage_nbytes:
        raise PtError(
            f"tensor of shape {spec.shape}, stride {spec.strides}, offset {spec.offset} needs {need} bytes "
            f"of storage {spec.storage.key!r}, which holds {storage_nbytes}"
        )
    if spec.storage.dtype is not None and spec.storage.dtype.itemsize != spec.dtype.itemsize:
        raise PtError(
            f"tensor dtype {spec.dtype.name} does not match its storage's {spec.storage.dtype.name}"
        )
    nbytes = math.prod(spec.shape) * spec.dtype.itemsize
    header = PtTensor(
        torch_dtype=f"torch.{spec.dtype.name}",
        stored_dtype=spec.dtype.stored,
        shape=spec.shape,
        strides=spec.strides,
        storage_offset=spec.offset,
        data_offset=storage_start + spec.offset * spec.dtype.itemsize,
        nbytes=nbytes,
        contiguous=_is_c_contiguous(spec.shape, spec.strides) and not (spec.conj or spec.neg),
        requires_grad=spec.requires_grad,
    )
    return header, spec


def _check_header_offset(info: zipfile.ZipInfo, f: Any) -> None:
    size = os.fstat(f.fileno()).st_size
    if not 0 <= info.header_offset <= size - 30:
        raise PtError(
            f"entry {info.filename!r}: local header offset {info.header_offset} is outside the file"
        )


def _local_data_offset(f: io.BufferedReader, info: zipfile.ZipInfo, file_size: int) -> int:
    """Absolute offset of an entry's bytes: after its local header, whose name and extra field
    lengths may differ from the central directory's (torch pads the extra field to align data)."""
    _check_header_offset(info, f)
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise PtError(f"entry {info.filename!r} has no local file header at offset {info.header_offset}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    name = f.read(name_len)
    if name.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace") != info.orig_filename:
        raise PtError(f"entry {info.filename!r}: local header names {name!r}")
    # torch pads the extra field with one 'FB' record so that the data is 64-byte aligned; any
    # extra field must be whole (id, size, data) records, which catches a corrupt length.
    extra = f.read(extra_len)
    at = 0
    while at + 4 <= len(extra):
        at += 4 + struct.unpack_from("<H", extra, at + 2)[0]
    if at != extra_len or len(extra) != extra_len:
        raise PtError(f"entry {info.filename!r}: its local header's extra field is not whole records")
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > file_size:
        raise PtError(f"entry {info.filename!r} runs past the end of the file ({file_size} bytes)")
    return start


def _zip_header(f: io.BufferedReader, file_size: int) -> tuple[PtTensor, _Spec]:
    try:
        zf = zipfile.ZipFile(f)
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # a corrupt directory offset made zipfile seek before the start
            raise PtError(f"not a readable zip archive: {exc}") from exc
        raise
    except Exception as exc:  # zipfile raises BadZipFile, ValueError, struct.error, ... on corrupt input
        raise PtError(f"not a readable zip archive: {type(exc).__name__}: {exc}") from exc
    infos = zf.infolist()
    names = {i.filename: i for i in infos}
    if len(names) != len(infos):
        raise PtError("zip archive has duplicate entry names")
    pickles = sorted(n for n in names if n.endswith("/data.pkl") and n.count("/") == 1)
    if not pickles:
        raise PtError("zip archive has no {archive}/data.pkl entry: not written by torch.save")
    if len(pickles) > 1:
        raise PtError(
            f"zip archive holds {len(pickles)} archives ({', '.join(pickles)}); torch.save writes one"
        )
    prefix = pickles[0][: -len("data.pkl")]
    strays = [n for n in names if not n.startswith(prefix)]
    if strays:
        raise PtError(f"zip archive has entries outside {prefix}: {strays[0]!r}")
    order = names.get(prefix + "byteorder")
    if order is not None:
        value = _read_entry(zf, order, 16)
        if value != b"little":
            raise PtError(f"byteorder is {value[:16]!r}: only little-endian .pt files are supported")
    pkl = names[pickles[0]]
    obj, _ = _unpickle(_read_entry(zf, pkl, _MAX_PICKLE), legacy=False)
    spec = _one_tensor(obj)
    entry = names.get(f"{prefix}data/{spec.storage.key}")
    if entry is None:
        raise PtError(f"entry {prefix}data/{spec.storage.key} (the tensor's storage) is missing")
    if entry.compress_type != zipfile.ZIP_STORED:
        raise PtError(f"entry {entry.filename!r} is compressed; torch.save stores storages uncompressed")
    storage_nbytes = spec.storage.numel * spec.storage.itemsize
    if entry.file_size < storage_nbytes:
        raise PtError(
            f"entry {entry.filename!r} holds {entry.file_size} bytes, its storage needs {storage_nbytes}"
        )
    start = _local_data_offset(f, entry, file_size)
    return _finish(spec, start, storage_nbytes)


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    _check_header_offset(info, zf.fp)
    if info.file_size > limit:
        raise PtError(f"entry {info.filename!r} is {info.file_size} bytes, more than the {limit} expected")
    if info.flag_bits & 0x1:
        raise PtError(f"entry {info.filename!r} is encrypted; torch.save never encrypts")
    try:
        return zf.read(info)
    except OSError:
        raise
    except Exception as exc:  # BadZipFile (CRC), zlib.error, NotImplementedError (method), ...
        raise PtError(f"entry {info.filename!r} is unreadable: {type(exc).__name__}: {exc}") from exc


def _legacy_header(f: io.BufferedReader, file_size: int) -> tuple[PtTensor, _Spec]:
    """The pre-1.6 format: pickles of the magic number, protocol version, system info, the object
    and the sorted storage keys; then per key an int64 element count and the storage's bytes."""
    f.seek(0)
    head = io.BytesIO(f.read(min(file_size, _LEGACY_HEAD)))
    magic, _ = _unpickle(head, legacy=True)
    if magic != _LEGACY_MAGIC:
        raise PtError("not a torch.save file: the first pickle is not torch's magic number")
    version, _ = _unpickle(head, legacy=True)
    if version != _LEGACY_PROTOCOL:
        raise PtError(f"legacy torch.save protocol {version!r}, not {_LEGACY_PROTOCOL}")
    info, _ = _unpickle(head, legacy=True)
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise PtError("legacy torch.save file is not little-endian (sys_info little_endian is not True)")
    obj, storages = _unpickle(head, legacy=True)
    spec = _one_tensor(obj)
    keys, _ = _unpickle(head, legacy=True)
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise PtError("legacy torch.save file: the storage key list is not a list of strings")
    pos = head.tell()
    start = None
    for key in keys:
        storage = storages.get(key)
        if storage is None:
            raise PtError(f"legacy torch.save file lists storage {key!r} that the pickle never uses")
        f.seek(pos)
        count = f.read(8)
        if len(count) != 8:
            raise PtError(f"legacy torch.save file ends before storage {key!r}")
        (numel,) = struct.unpack("<q", count)
        if numel != storage.numel:
            raise PtError(f"storage {key!r} holds {numel} elements, the pickle says {storage.numel}")
        if key == spec.storage.key:
            start = pos + 8
        pos += 8 + numel * storage.itemsize
        if pos > file_size:
            raise PtError(f"storage {key!r} runs past the end of the file ({file_size} bytes)")
    if start is None:
        raise PtError(f"storage {spec.storage.key!r} (the tensor's) is missing from the file")
    root = storages[spec.storage.key]
    storage_nbytes = root.numel * root.itemsize
    if spec.storage.view is not None:
        view_offset, view_numel = spec.storage.view
        if (view_offset + view_numel) * root.itemsize > storage_nbytes:
            raise PtError(f"storage view of {root.key!r} runs past its end")
        start += view_offset * root.itemsize
        storage_nbytes = view_numel * root.itemsize
    return _finish(spec, start, storage_nbytes)


def _header(f: io.BufferedReader) -> tuple[PtTensor, _Spec]:
    file_size = os.fstat(f.fileno()).st_size
    magic = f.read(8)
    if magic[:4] == b"PK\x03\x04" or (magic[:4] == b"PK\x05\x06" and file_size == 22):
        return _zip_header(f, file_size)
    if magic[:2] == b"\x80\x02" or magic[:1] == b"\x80":
        return _legacy_header(f, file_size)
    f.seek(257)
    if f.read(5) == b"ustar":
        raise PtError("legacy tar torch.save format (PyTorch < 0.4) is not supported")
    raise PtError(f"not a torch.save file: it starts with {magic!r}, neither a zip archive nor a pickle")


def read_pt_header(path: str | os.PathLike[str]) -> PtTensor:
    """Dtype, shape, strides and file offset of the tensor a `.pt` file holds. Reads the zip
    directory and `data.pkl` (or the legacy pickles) only, never the tensor bytes."""
    with open(path, "rb") as f:
        return _header(f)[0]


# --- values ---------------------------------------------------------------------------------------


def _decode(buf: Any, stored: str, shape: tuple[int, ...]) -> np.ndarray:
    if stored in _ML_ONLY:
        return np.frombuffer(buf, dtype=_ML_ONLY[stored]).reshape(shape)
    try:
        return dtypes.decode(buf, stored, shape)
    except dtypes.DTypeError as exc:  # pragma: no cover - sizes are checked before
        raise PtError(str(exc)) from exc


def _read_span(f: io.BufferedReader, offset: int, nbytes: int) -> bytearray:
    buf = bytearray(nbytes)
    f.seek(offset)
    got = f.readinto(buf)
    if got != nbytes:
        raise PtError(f"file ends {nbytes - (got or 0)} bytes short of the tensor data at offset {offset}")
    return buf


def load_pt(path: str | os.PathLike[str], *, mapped: bool = True) -> np.ndarray:
    """The values of the tensor a `.pt` file holds, equal to `torch.load(path).numpy()`.

    `mapped=True` memory-maps the bytes and returns a read-only array over the map (no copy):
    C-ordered for a contiguous tensor, and for a view (transposed, sliced, expanded) a strided array
    with the tensor's strides, as `.numpy()` gives. `mapped=False` reads into memory and returns a
    new writable C-ordered array. complex32 is always decoded into a new complex64 array.
    """
    with open(path, "rb") as f:
        header, spec = _header(f)
        shape, strides, item = header.shape, header.strides, spec.dtype.itemsize
        dense = _is_c_contiguous(shape, strides)  # True for every empty tensor
        span = header.nbytes if dense else _extent(spec) - spec.offset * item
        if span == 0:
            buf: Any = bytearray()
        elif mapped:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            buf = memoryview(mm)[header.data_offset : header.data_offset + span]
        else:
            buf = _read_span(f, header.data_offset, span)
    if dense:
        arr = _decode(buf, header.stored_dtype, shape)
    else:
        flat = _decode(buf, header.stored_dtype, (span // item,))
        step = flat.itemsize  # complex32 is decoded to 8-byte complex64
        arr = np.lib.stride_tricks.as_strided(flat, shape, tuple(s * step for s in strides), writeable=False)
        if not mapped:
            arr = np.ascontiguousarray(arr)
    if spec.conj:
        arr = np.conjugate(arr)
    if spec.neg:
        arr = np.negative(arr)
    return arr
