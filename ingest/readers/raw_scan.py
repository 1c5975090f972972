"""Turn a chunk of raw dump files (and npy tensor files beside them) into `tensors` rows.

The raw-dump counterpart of `leaf_scan`: reading a raw file's header is most of the cost of
cataloging it (an open, a read, a protobuf parse per operator launch), so a one-shot ingest runs
it in helper processes (`helper_pool.run_ordered`) and gets back Arrow tables. The rows are the
same as the ones `readers.ascend_raw` builds file by file: both call `raw_slot_rows`.

As in `leaf_scan`, only complete, well-formed files become rows here. A file that does not parse,
is still being written, or holds no input or output slot is handed back as *irregular*, and the
ingesting process judges it with its full rules (an `ingest_errors` row, or waiting for it).
"""

from __future__ import annotations

import os

import pyarrow as pa

from ingest.formats.ascend import device_format
from ingest.formats.ascend.raw_dump import RawDump, RawDumpError, RawName, parse_raw_name, read_raw_dump
from ingest.formats.mindspore.npy_name import sanitize_v23, without_op_index
from ingest.ids import TensorIdHasher
from ingest.readers.leaf_scan import LeafChunk, LeafContext, scan_tensor_files
from ingest.storage.schema import TENSORS

PRODUCER = "ascend-raw"
TENSOR_IO = ("input", "output")  # buffers and workspaces are not tensors of the operator

_keys: dict[str, tuple[str, str]] = {}  # header op name -> (file_op_name, file_op_base)
_hashers: dict[str, TensorIdHasher] = {}


def slot_key(io: str, index: int) -> str:
    """What a slot's row id is hashed from, after its file's path: `{rel}#{io}.{index}`."""
    return f"#{io}.{index}"


def _op_keys(full_name: str | None, name_op: str) -> tuple[str, str]:
    """(file_op_name, file_op_base): the header's full name sanitised as MindSpore names files,
    else the name's op name (a header without one)."""
    source = full_name or name_op
    keys = _keys.get(source)
    if keys is None:
        if len(_keys) > 100_000:
            _keys.clear()
        key = sanitize_v23(full_name) if full_name else name_op
        keys = _keys[source] = (key, without_op_index(key))
    return keys


def raw_slot_rows(
    row_id_of, ctx: LeafContext, rel: str, file_name: str, name: RawName, dump: RawDump, size: int
) -> list[tuple]:
    """`tensors` rows (in TENSORS column order) of the input and output slots of one raw file.

    `row_id_of` is the run's `TensorIdHasher`; `size` the file's size in bytes."""
    run, rank, net, graph_id, iteration, dir_kind = ctx
    full_name = dump.op_name or None
    key, base = _op_keys(full_name, name.op_name)
    rows: list[tuple] = []
    for slot in dump.slots:
        if slot.io not in TENSOR_IO:
            continue
        # A host shape only where dumpcat converts: formats it has no transform for (group
        # convolutions aside, see device_format) are served in their dumped layout.
        host = slot.original_shape
        if host is not None and (
            slot.format not in device_format.DEVICE_FORMATS
            or not device_format.needs_transform(slot.format, slot.shape, host)
        ):
            host = None
        rows.append(
            (
                row_id_of(rel + slot_key(slot.io, slot.index)), run, rank, net, graph_id, iteration,
                dir_kind, rel, file_name, None, name.op_type, key, base, name.task_id, name.stream_id,
                name.timestamp_us, slot.io, slot.index, slot.format, slot.data_type, slot.stored_dtype,
                list(slot.shape), slot.offset, slot.size, size, "raw", PRODUCER,
                None if host is None else list(host), full_name, None,
            )
        )  # fmt: skip
    return rows


def rows_table(rows: list[tuple]) -> pa.Table:
    """A `tensors` table of row tuples in TENSORS column order."""
    if not rows:
        return TENSORS.empty_table()
    columns = zip(*rows, strict=True)
    return pa.Table.from_arrays(
        [pa.array(column, field.type) for column, field in zip(columns, TENSORS, strict=True)],
        schema=TENSORS,
    )


def scan_raw_files(batch: list[LeafChunk]) -> list[tuple[pa.Table, list[str]]]:
    """For each chunk of `batch`: `tensors` rows of its well-formed complete raw and npy files,
    and the names of the others. Names that do not end in `.npy` are raw dump names."""
    out: list[tuple[pa.Table, list[str]]] = []
    for chunk in batch:
        ctx, dir_path, rel_dir, names, originals = chunk
        npy = [(n, o) for n, o in zip(names, originals, strict=True) if n.endswith(".npy")]
        tables: list[pa.Table] = []
        irregular: list[str] = []
        if npy:
            npy_chunk = (ctx, dir_path, rel_dir, [n for n, _ in npy], [o for _, o in npy])
            table, bad = scan_tensor_files([npy_chunk])[0]
            tables.append(table)
            irregular.extend(bad)
        if len(npy) < len(names):
            hasher = _hashers.get(ctx[0])
            if hasher is None:
                hasher = _hashers[ctx[0]] = TensorIdHasher(ctx[0])
            rows: list[tuple] = []
            dir_prefix, rel_prefix = dir_path + os.sep, rel_dir + "/"
            for name in names:
                if name.endswith(".npy"):
                    continue
                raw_name = parse_raw_name(name)
                try:
                    dump = read_raw_dump(dir_prefix + name) if raw_name is not None else None
                except (RawDumpError, OSError):
                    dump = None
                file_rows = (
                    raw_slot_rows(hasher, ctx, rel_prefix + name, name, raw_name, dump, dump.file_size)
                    if dump is not None
                    else []
                )
                if file_rows:
                    rows.extend(file_rows)
                else:
                    irregular.append(name)
            tables.append(rows_table(rows))
        out.append((tables[0] if len(tables) == 1 else pa.concat_tables(tables), irregular))
    return out
