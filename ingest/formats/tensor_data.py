"""A tensor's values from where its `tensors` row says they are, whatever the producer wrote.

A row locates a tensor by file, byte offset, stored dtype (how elements are encoded on disk: a numpy
dtype, an `ml_dtypes` type such as bfloat16, packed int4/uint1, or `raw` bytes), shape and format.
When the format is an Ascend device layout (NC1HWC0, FRACTAL_Z, ...) the row also has the host
shape, and the values are returned in the host layout unless the device layout is asked for.

Plain numpy dtypes are memory-mapped: no copy, the cost of `np.load(mmap_mode='r')`. Packed types
and device layouts need one pass that copies (unpacking, the layout transform).
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Sequence
from typing import Literal

import numpy as np

from ingest.formats import dtypes
from ingest.formats.ascend import device_format
from ingest.formats.special_dtypes import SPECIAL_STORED


class TensorDataError(ValueError):
    """The bytes a row points at cannot be turned into values (too short, bad layout)."""


# The `format` of a tensor whose bytes are in column-major order: an npy file with
# `fortran_order: True` (numpy saves a transposed view that way; TorchAir's FX dumps hold some).
FORTRAN_ORDER = "fortran_order"


def is_plain(
    stored_dtype: str, fmt: str | None, shape: Sequence[int], host_shape: Sequence[int] | None
) -> bool:
    """Are the stored bytes already the host values (a numpy dtype, no layout transform)?"""
    if stored_dtype in SPECIAL_STORED or fmt == FORTRAN_ORDER:
        return False
    return host_shape is None or not device_format.needs_transform(fmt or "", tuple(shape), tuple(host_shape))


def stored_nbytes(stored_dtype: str, shape: Sequence[int]) -> int | None:
    """Bytes the tensor takes in its file (None when the encoding does not say: raw bytes)."""
    count = math.prod(int(d) for d in shape)
    return dtypes.nbytes_of(stored_dtype, count)


def map_bytes(path: str | os.PathLike, offset: int, nbytes: int) -> memoryview:
    """A read-only memory map of `nbytes` bytes at `offset` (no copy); TensorDataError when the
    file is shorter."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < offset + nbytes:
            raise TensorDataError(f"file has {size} bytes, data needs {nbytes} bytes from offset {offset}")
        if nbytes == 0:
            return memoryview(b"")
        # Map from 0: mmap offsets must be page-aligned and tensor offsets are not.
        mm = mmap.mmap(f.fileno(), offset + nbytes, access=mmap.ACCESS_READ)
    return memoryview(mm)[offset : offset + nbytes]


def read_bytes(path: str | os.PathLike, offset: int, nbytes: int) -> bytearray:
    """`nbytes` bytes at `offset`, read into memory (one pread); TensorDataError when the file is
    shorter. For a tensor about to be decoded or converted anyway, this is cheaper than a memory
    map, whose set-up and tear-down dominate for the small tensors most operators have."""
    buf = bytearray(nbytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        view = memoryview(buf)
        while got < nbytes:
            k = os.preadv(fd, [view[got:]], offset + got)
            if k == 0:
                size = os.fstat(fd).st_size
                raise TensorDataError(
                    f"file has {size} bytes, data needs {nbytes} bytes from offset {offset}"
                )
            got += k
    finally:
        os.close(fd)
    return buf


def read_tensor(
    path: str | os.PathLike,
    data_offset: int,
    stored_dtype: str,
    shape: Sequence[int],
    fmt: str | None = None,
    host_shape: Sequence[int] | None = None,
    *,
    nbytes: int | None = None,
    layout: Literal["host", "device"] = "host",
    mapped: bool = True,
) -> np.ndarray:
    """The tensor's values: memory-mapped read-only for plain dtypes in their stored layout,
    else decoded (and, for a device format, converted to the host layout unless `layout='device'`).
    `nbytes` is needed only for `raw` data, whose size the dtype cannot say. `mapped=False` reads
    the bytes into memory instead of mapping them (statistics, which decode every tensor whole)."""
    shape = tuple(int(d) for d in shape)
    want = stored_nbytes(stored_dtype, shape)
    if want is None:
        if nbytes is None:
            raise TensorDataError(f"stored dtype {stored_dtype!r} needs the byte count")
        want = nbytes
    buf = map_bytes(path, data_offset, want) if mapped else read_bytes(path, data_offset, want)
    return decode_tensor(buf, stored_dtype, shape, fmt, host_shape, layout=layout)


def decode_tensor(
    buf: memoryview | bytearray,
    stored_dtype: str,
    shape: Sequence[int],
    fmt: str | None = None,
    host_shape: Sequence[int] | None = None,
    *,
    layout: Literal["host", "device"] = "host",
) -> np.ndarray:
    """The values of a tensor's bytes (`buf`, exactly its stored bytes), as `read_tensor` returns
    them: `Catalog.tensors` maps a file once for all the tensors it holds and decodes each slice."""
    shape = tuple(int(d) for d in shape)
    try:
        if fmt == FORTRAN_ORDER and stored_dtype != "raw":
            arr = dtypes.decode(buf, stored_dtype, shape[::-1]).T  # a view: no copy
        else:
            arr = dtypes.decode(buf, stored_dtype, shape)
    except dtypes.DTypeError as exc:
        raise TensorDataError(str(exc)) from exc
    if layout == "host" and host_shape is not None and stored_dtype != "raw":
        hs = tuple(int(d) for d in host_shape)
        if device_format.needs_transform(fmt or "", shape, hs):
            try:
                arr = device_format.device_to_host(arr, fmt or "", hs)
            except device_format.DeviceFormatError as exc:
                raise TensorDataError(str(exc)) from exc
    return arr
