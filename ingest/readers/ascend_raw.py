"""Ascend raw dumps: CANN's `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}` files.

Ascend graph-sink (O2) and async dumps, and every CANN/GE job, write one raw file per operator
launch: a uint64 header length, a `DumpData` protobuf, then the bytes of every input and output
(older CANN: the whole file is one `DumpData` with the bytes inside). Each input and output slot
becomes one `tensors` row with its byte offset in the file, its device format and shape, and the
host shape from the header, so `Catalog.tensor` maps the slice and statistics are computed on the
host-layout values. The header's `op_name` is the operator's full, unsanitised scope name.

Layouts read (reference: mindspore-dump-formats.md §3.8 and §5, msprobe-cann-formats.md §2.4, §3):
- MindSpore v1.3+ async/O2 `bin`: the rank layout `rank_N/{net}/{graph}/{iteration}/`
  (`AscendRawReader`: the rank-level execution order and graphs are read as for npy dumps);
- MindSpore v1.2 async: `device_N/{net}_graph_{g}/{g}/{iteration}/`, four-field names without a
  stream id, and `.metadata/data_dump.json` at the top (`AscendRawV12Reader`). MindSpore's own
  `execution_order/` and `graphs/` folders are read in `device_N/` and in `{net}/device_N/` (the
  reference gives the latter, §2.1; trees seen in the field hold the former).

Beside raw files may sit files `msaccucmp convert` made from them (`{raw}.{io}.{i}.{shape}.npy`,
`{raw}.{io}.{i}.{shape}.{dtype}.{format}.bin`): each is cataloged with `source_row_id`, the row of
the raw slot it came from, and without statistics of its own, so a tensor is counted once. Overflow
debug files (`Opdebug.Node_OpDebug.*`, and their npy-format `.json`) add `overflows` rows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.files import now, size_or_none
from ingest.formats.ascend.overflow import (
    OPDEBUG_FILE,
    OPDEBUG_JSON_FILE,
    OverflowBlock,
    OverflowDecodeError,
    decode_opdebug,
    read_overflow_json,
)
from ingest.formats.ascend.raw_dump import (
    RawDump,
    RawDumpError,
    RawDumpIncomplete,
    RawName,
    parse_raw_name,
    read_raw_dump,
)
from ingest.formats.limits import open_text_capped
from ingest.formats.mindspore.legacy_names import ConvertedName, parse_converted_name
from ingest.formats.mindspore.npy_name import without_op_index
from ingest.formats.npy_header import NpyHeaderError, read_npy_header
from ingest.readers.base import Detection, Place, Reader, first_file, list_dir
from ingest.readers.mindspore_npy import LeafEngine, LeafFiles
from ingest.readers.rank_layout import (
    RANK_LAYOUT,
    RankLayoutWalker,
    rank_root,
    read_execution_order_dir,
    read_graphs_dir,
)
from ingest.readers.raw_scan import PRODUCER, raw_slot_rows, slot_key
from ingest.readers.sink import IngestSink
from ingest.storage.schema import TENSORS

CONVERTED = "msaccucmp"
_MAX_OPDEBUG_BYTES = 1 << 20  # an overflow record is 1024 or 1048 bytes; a bigger slot is not read
_STORED = TENSORS.names.index("stored_dtype")


def is_raw_name(name: str) -> bool:
    """A raw dump file name (not an npy, csv or json file)."""
    return not name.endswith((".npy", ".csv", ".json")) and parse_raw_name(name) is not None


def slot_row_id(row_id_of: Callable[[str], int], rel: str, io: str, index: int) -> int:
    """The row id of one input/output slot of a raw file: a function of the run (`row_id_of`, the
    ingest's), the file's path and the slot, like every tensor row id."""
    return row_id_of(rel + slot_key(io, index))


class RawFiles:
    """Catalogs raw dump files, their msaccucmp conversions and overflow files of one leaf
    directory: the part both raw layouts share."""

    def __init__(self, sink: IngestSink) -> None:
        self.sink = sink

    def handle(self, place: Place, entry: os.DirEntry) -> bool:
        """Catalog `entry` if it is a file this module reads; True when it was."""
        name = entry.name
        if OPDEBUG_JSON_FILE.match(name):
            self._overflow_json(place, entry)
            return True
        converted = parse_converted_name(name) if name.endswith((".npy", ".bin")) else None
        if converted is not None and converted.raw_name != name:
            self._converted(place, entry, converted)
            return True
        raw_name = parse_raw_name(name) if not name.endswith((".npy", ".csv", ".json")) else None
        if raw_name is not None:
            self._raw(place, entry, raw_name)
            return True
        return False

    # -- raw files -----------------------------------------------------------------------------

    def _raw(self, place: Place, entry: os.DirEntry, name: RawName) -> None:
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry)
        prev = sink.previous(rel)
        if prev is not None and prev[3] == "ok" and prev[0] == size:
            return  # cataloged before, unchanged
        try:
            dump = read_raw_dump(entry.path)
        except RawDumpIncomplete as exc:
            if not sink.still_written(entry, rel):
                sink.file_error(rel, "raw_dump", "raw_dump", f"incomplete: {exc}", size)
            return
        except RawDumpError as exc:
            if not sink.still_written(entry, rel):
                sink.file_error(rel, "raw_dump", "raw_dump", str(exc), size)
            return
        except OSError as exc:
            sink.file_error(rel, "raw_dump", "raw_dump", f"unreadable: {exc.strerror}", size)
            return
        rows, needs_stats = self._slot_rows(place, entry, rel, name, dump, size or 0)
        sink.add_tensor_rows(rel, rows, needs_stats)
        if OPDEBUG_FILE.match(entry.name):
            self._opdebug(place, entry, rel, name, dump)
        sink.record(rel, "raw_dump", size or 0, size or 0, 0, "ok")
        sink.flush_if_full()

    def _slot_rows(
        self, place: Place, entry: os.DirEntry, rel: str, name: RawName, dump: RawDump, size: int
    ) -> tuple[list[tuple], list[int]]:
        sink = self.sink
        ctx = (sink.options.run, place.rank, place.net, place.graph_id, place.iteration, place.dir_kind)
        rows = [
            r
            for r in raw_slot_rows(sink.options.row_id_of, ctx, rel, entry.name, name, dump, size)
            if not sink.is_known(r[0])
        ]
        return rows, [r[0] for r in rows if r[_STORED] != "raw"]

    def add_scanned(self, table: pa.Table) -> None:
        """Queue the rows `raw_scan` made of complete raw files, with the bookkeeping `_raw` does
        per file (manifest, summary, statistics to compute), once per table."""
        sink = self.sink
        if not table.num_rows:
            return
        needs_stats: list[int] = []
        if sink.options.compute_stats:
            import pyarrow.compute as pc  # here, not at start-up: most dumps never need it

            decodable = pc.not_equal(table.column("stored_dtype"), "raw")
            needs_stats = table.column("row_id").filter(decodable).to_pylist()
        files = table.select(["rel_path", "file_size"]).group_by(["rel_path", "file_size"]).aggregate([])
        sink.add_tensor_table(table, needs_stats, new_files=files.num_rows)
        rels, sizes = files.column("rel_path").to_pylist(), files.column("file_size").to_pylist()
        for rel, size in zip(rels, sizes, strict=True):
            sink.judged(rel)
            sink.record(rel, "raw_dump", size, size, 0, "ok")

    # -- overflow debug files ------------------------------------------------------------------

    def _opdebug(self, place: Place, entry: os.DirEntry, rel: str, name: RawName, dump: RawDump) -> None:
        outputs = [s for s in dump.slots if s.io == "output"]
        if not outputs:
            self.sink.error(rel, "overflow", "overflow debug file has no output to decode")
            return
        slot = outputs[0]
        if slot.size > _MAX_OPDEBUG_BYTES:  # the record is 1024 or 1048 bytes: never buffer a huge slot
            self.sink.error(rel, "overflow", f"overflow record of {slot.size:,} bytes (one is 1024 or 1048)")
            return
        try:
            with open(entry.path, "rb") as f:
                f.seek(slot.offset)
                data = f.read(slot.size)
            blocks = decode_opdebug(data)
        except (OSError, OverflowDecodeError) as exc:
            self.sink.error(rel, "overflow", f"cannot decode the overflow record: {exc}")
            return
        self._add_overflows(place, rel, name.task_id, name.stream_id, name.timestamp_us, blocks)

    def _overflow_json(self, place: Place, entry: os.DirEntry) -> None:
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry) or 0
        if sink.is_unchanged(rel, size):
            return
        m = OPDEBUG_JSON_FILE.match(entry.name)
        try:
            blocks = read_overflow_json(entry.path, sink.options.caps)
        except (OSError, OverflowDecodeError, UnicodeDecodeError) as exc:
            if not sink.still_written(entry, rel):
                sink.file_error(rel, "overflow", "overflow", str(exc), size)
            return
        task, stream, timestamp = m.group("task", "stream", "timestamp")
        stream_id = None if stream is None else int(stream)
        self._add_overflows(place, rel, int(task), stream_id, int(timestamp), blocks)
        sink.record(rel, "overflow", size, size, 0, "ok")

    def _add_overflows(
        self,
        place: Place,
        rel: str,
        task_id: int,
        stream_id: int | None,
        timestamp_us: int,
        blocks: list[OverflowBlock],
    ) -> None:
        for b in blocks:
            words = (b.model_id, b.stream_id, b.task_id, b.task_type, b.pc_start, b.para_base, b.status,
                     b.kernel_code, b.block_idx)  # fmt: skip
            self.sink.add(
                "overflows",
                (self.sink.options.run, place.rank, place.net, place.graph_id, place.iteration, rel, task_id,
                 stream_id, timestamp_us, b.kind, *(_int64(w) for w in words)),
            )  # fmt: skip

    # -- msaccucmp conversions -----------------------------------------------------------------

    def _converted(self, place: Place, entry: os.DirEntry, conv: ConvertedName) -> None:
        """A file msaccucmp converted from a raw slot: its values in the host layout, linked to
        the slot. It gets statistics only when its raw file is not in the directory."""
        sink = self.sink
        rel = sink.rel(entry.path)
        row_id = sink.options.row_id_of(rel)
        if sink.is_known(row_id):
            return
        size = size_or_none(entry) or 0
        rel_dir = rel.rsplit("/", 1)[0]
        raw = parse_raw_name(conv.raw_name)
        if raw is None:
            sink.file_error(rel, "tensor", "name", f"converted from {conv.raw_name!r}, not a raw dump name")
            return
        try:
            if conv.kind == "bin":
                stored, shape, offset, nbytes = _converted_bin_layout(conv, size)
            else:
                header, size = read_npy_header(entry.path)
                stored, shape, offset, nbytes = (
                    header.dtype_name,
                    list(header.shape),
                    header.data_offset,
                    header.nbytes,
                )
        except (NpyHeaderError, OSError, ValueError) as exc:
            if not sink.still_written(entry, rel):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                sink.file_error(rel, "tensor", "converted", reason, size)
            return
        source_exists = os.path.exists(os.path.join(os.path.dirname(entry.path), conv.raw_name))
        source = slot_row_id(sink.options.row_id_of, f"{rel_dir}/{conv.raw_name}", conv.io, conv.slot)
        row = (
            row_id, sink.options.run, place.rank, place.net, place.graph_id, place.iteration, place.dir_kind,
            rel, entry.name, None, raw.op_type, raw.op_name, without_op_index(raw.op_name), raw.task_id,
            raw.stream_id, raw.timestamp_us, conv.io, conv.slot, conv.format or "host",
            conv.dtype_token or stored, stored, shape, offset, nbytes, size, "msaccucmp", CONVERTED,
            None, None, source if source_exists else None,
        )  # fmt: skip
        sink.add_tensor_rows(rel, [row], () if source_exists else None)
        if sink.previous(rel) is not None:  # an earlier error for this file is now resolved
            sink.record(rel, "tensor", size, size, 0, "ok")


def _int64(word: int | None) -> int | None:
    """A uint64 word as a BIGINT: words of 2**63 and above (never seen in ids or addresses, which
    are 48-bit) keep their bit pattern as a negative number rather than failing the batch."""
    if word is None or word < 1 << 63:
        return word
    return word - (1 << 64)


_BIN_DTYPES = {
    "float32": "float32", "float16": "float16", "float64": "float64", "int8": "int8", "int16": "int16",
    "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
    "uint64": "uint64", "bool": "bool",
}  # fmt: skip


def _converted_bin_layout(conv: ConvertedName, size: int) -> tuple[str, list[int], int, int]:
    """(stored dtype, shape, offset, nbytes) of an msaccucmp `.bin` conversion: raw bytes, no header."""
    token = (conv.dtype_token or "").lower().removeprefix("dt_")
    token = {"float": "float32", "double": "float64"}.get(token, token)
    stored = _BIN_DTYPES.get(token)
    if stored is None or conv.shape is None:
        raise ValueError(f"converted .bin with unknown dtype {conv.dtype_token!r} or no shape")
    nbytes = int(np.prod(conv.shape, dtype=np.int64)) * np.dtype(stored).itemsize
    if nbytes != size:
        raise ValueError(f"shape {conv.shape} of {stored} needs {nbytes} bytes, the file has {size}")
    return stored, list(conv.shape), 0, nbytes


class RawLeafFiles(LeafFiles):
    """The leaf-engine policy of trees of raw dump files: raw files (headers read on every core, with
    the npy files beside them), their msaccucmp conversions and overflow files are `RawFiles`';
    npy tensor files, statistic.csv and kernel args are read as in an npy leaf. `handlers` are tried
    before the raw files, each taking the files it reads (GE: CANN statistics CSVs)."""

    def __init__(
        self,
        sink: IngestSink,
        raw_files: RawFiles,
        handlers: Sequence[Callable[[Place, os.DirEntry], bool]] = (),
    ) -> None:
        super().__init__(sink)
        self.raw_files = raw_files
        self.handlers = tuple(handlers)

    def is_tensor_npy(self, name: str) -> bool:
        return name.endswith(".npy") and parse_converted_name(name) is None

    def other_file(self, place: Place, entry: os.DirEntry) -> bool:
        for handle in self.handlers:
            if handle(place, entry):
                return True
        return self.raw_files.handle(place, entry)

    # A one-shot ingest reads raw headers in helper processes, with the npy files beside them.
    # Overflow debug files are decoded here (file by file): a run has few of them.
    scan_function = "ingest.readers.raw_scan:scan_raw_files"

    @staticmethod
    def scanned_table(scanned: tuple[pa.Table, list[str]]) -> tuple[pa.Table, list[str]]:
        """scan_raw_files returns Arrow already (its helpers decode raw headers with pyarrow)."""
        return scanned

    def scan_args(self) -> tuple:
        return ()  # (statistics of raw tensors are computed at the flush: they are decoded first)

    @staticmethod
    def scanned_stats(scanned: tuple[pa.Table, list[str]], table: pa.Table) -> None:
        return None

    def is_scanned(self, name: str) -> bool:
        if name.endswith(".npy"):
            return self.is_tensor_npy(name)
        return is_raw_name(name) and not OPDEBUG_FILE.match(name)

    def is_cataloged(self, rel: str) -> bool:
        if rel.endswith(".npy"):
            return super().is_cataloged(rel)
        prev = self.sink.previous(rel)
        return prev is not None and prev[3] == "ok"

    def add_scanned_tensors(
        self, table: pa.Table, matched: set[int], computed=(), computed_ids=frozenset()
    ) -> None:
        import pyarrow.compute as pc

        is_raw = pc.equal(table.column("name_era"), "raw")
        if not pc.any(is_raw).as_py():
            super().add_scanned_tensors(table, matched, computed, computed_ids)
            return
        super().add_scanned_tensors(table.filter(pc.invert(is_raw)), matched, computed, computed_ids)
        self.raw_files.add_scanned(table.filter(is_raw))


class AscendRawReader(Reader):
    """Raw files in MindSpore's rank layout (v1.3+ async/O2 with `file_format: bin`): the rank-layout
    walker hands each leaf directory to the leaf engine, with the raw policy."""

    name = PRODUCER
    producer = "Ascend raw dump (CANN DumpData)"
    layout = RANK_LAYOUT
    looked_for = (
        "raw files {op_type}.{op_name}.{task}.{stream}.{timestamp} in rank_N/{net}/{graph}/{iteration}/"
    )
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = "Ascend raw dumps (MindSpore 1.3+ async/O2 `file_format: bin`, CANN `DumpData`)"
    tree = "`rank_N/{net}/{graph}/{iteration}/{op_type}.{op_name}.{task}.{stream}.{timestamp}[.bin]`"
    cataloged = (
        "a `tensors` row per input and output slot: byte offset in the file, `DT_*` type, device "
        "format and shape, host shape (`original_shape`), the full op name from the header; "
        "`overflows` from `Opdebug.Node_OpDebug.*` files and their npy-format `.json`; msaccucmp "
        "conversions beside raw files linked to their slot; rank-level files as for npy"
    )

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self.raw_files = RawFiles(sink)
        self.leaves = LeafEngine(sink, RawLeafFiles(sink, self.raw_files))
        self.rank_layout = RankLayoutWalker(sink, detection, self.leaves.ingest_leaf)

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        found = rank_root(path)
        if found is None:
            return None
        root, ranks, fixed = found
        for rank in ranks[:4]:
            hit = first_file(rank, 3, is_raw_name)
            if hit is not None:
                return Detection(
                    cls, root, f"raw files in {rank.name}/{hit.rsplit('/', 1)[0]}/", tuple(ranks), fixed
                )
        return None

    def walk(self) -> None:
        self.rank_layout.walk()

    def scan_path(self, path: str) -> None:
        self.rank_layout.scan_path(path)

    def finish(self) -> None:
        self.leaves.finish()


_DEVICE_DIR = re.compile(r"^device_(\d+)$")
_V12_MODEL_DIR = re.compile(r"^(?P<net>.+)_graph_(?P<graph>\d+)$")


class AscendRawV12Reader(Reader):
    """MindSpore v1.2 async: `device_N/{net}_graph_{g}/{g}/{iteration}/` raw files."""

    name = "ascend-raw-v1.2"
    producer = "MindSpore 1.2 async (Ascend raw dump)"
    layout = "device_N/{net}_graph_{g}/{g}/{iteration}/"
    looked_for = "device_N/{net}_graph_{g}/{g}/{iteration}/ folders of raw files (MindSpore 1.2 async)"
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = "MindSpore 1.2 async"
    tree = (
        "`device_N/{net}_graph_{g}/{g}/{iteration}/{op_type}.{op_name}.{task}.{timestamp}`, "
        "`.metadata/data_dump.json`; MindSpore's `execution_order/` and `graphs/` in `device_N/` or "
        "`{net}/device_N/`"
    )
    cataloged = (
        "as `ascend-raw`; the execution order and the graph IR (source lines) when the dump has them, "
        "else op names from the file headers"
    )

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self.raw_files = RawFiles(sink)

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        devices = [e for e in list_dir(path) if _DEVICE_DIR.match(e.name) and e.is_dir()]
        for device in devices[:4]:
            for model in list_dir(device.path, 64):
                if _V12_MODEL_DIR.match(model.name) and model.is_dir():
                    hit = first_file(model.path, 2, is_raw_name)
                    if hit is not None:
                        where = f"{device.name}/{model.name}/{hit.rsplit('/', 1)[0]}/"
                        return Detection(
                            cls, path, f"raw files in {where}", tuple(Path(d.path) for d in devices)
                        )
        return None

    def walk(self) -> None:
        sink = self.sink
        config = None
        for entry in sink.scandir(str(self.root)) or []:
            if entry.name == ".metadata" and entry.is_dir():
                config = self._metadata(entry.path)
        entries = sink.scandir(str(self.root)) or []
        # MindSpore's own folders first (see _device): tensors commit with their operators.
        for entry in sorted(entries, key=lambda e: bool(_DEVICE_DIR.match(e.name))):
            m = _DEVICE_DIR.match(entry.name)
            if m and entry.is_dir():
                self._device(int(m.group(1)), entry.path, config)
            elif entry.is_dir() and entry.name != ".metadata" and self._net_operators(entry.path):
                continue
            elif entry.name != ".metadata":
                sink.saw_files(1)
                reason = "expected device_N/, {net}/device_N/ or .metadata/"
                sink.file_error(sink.rel(entry.path), "unknown", "walk", reason)

    def _net_operators(self, path: str) -> bool:
        """`{net}/device_N/execution_order/` and `{net}/device_N/graphs/`: where v1.2's session
        writes them beside the runtime's `device_N/` tensor folders (reference §2.1). False when
        `path` holds nothing of the kind (it is then reported as not belonging to the dump)."""
        devices = [e for e in self.sink.scandir(path) or [] if _DEVICE_DIR.match(e.name) and e.is_dir()]
        found = False
        for device in devices:
            rank = int(_DEVICE_DIR.match(device.name).group(1))
            for entry in self.sink.scandir(device.path) or []:
                found |= self._operator_folder(rank, entry)
        return found

    def _operator_folder(self, rank: int, entry: os.DirEntry) -> bool:
        """Read `entry` when it is an execution_order/ or graphs/ folder of device `rank`."""
        if entry.name == "execution_order" and entry.is_dir():
            read_execution_order_dir(self.sink, rank, entry.path)
        elif entry.name == "graphs" and entry.is_dir():
            read_graphs_dir(self.sink, rank, entry.path)
        else:
            return False
        return True

    def _metadata(self, path: str) -> str | None:
        sink = self.sink
        for entry in sink.scandir(path) or []:
            sink.saw_files(1)
            if entry.name != "data_dump.json":
                continue
            try:
                with open_text_capped(entry.path, "json", sink.options.caps, encoding="utf-8") as f:
                    return f.read()
            except (OSError, UnicodeDecodeError) as exc:
                sink.file_error(sink.rel(entry.path), "metadata", "metadata", str(exc), size_or_none(entry))
        return None

    def _device(self, rank: int, path: str, config: str | None) -> None:
        sink = self.sink
        rel = sink.rel(path)
        if config is not None and not sink.is_unchanged(rel, len(config)):
            sink.add(
                "rank_meta", (sink.options.run, rank, str(self.root), "Ascend", None, config, None, now())
            )
            sink.record(rel, "metadata", len(config), len(config), 0, "ok")
        models = sink.scandir(path) or []
        for model in sorted(models, key=lambda e: e.name not in ("execution_order", "graphs")):
            if self._operator_folder(rank, model):
                continue
            m = _V12_MODEL_DIR.match(model.name)
            if not (m and model.is_dir()):
                sink.saw_files(1)
                sink.file_error(
                    sink.rel(model.path), "unknown", "walk",
                    "expected a {net}_graph_{g}/, execution_order/ or graphs/ folder",
                )  # fmt: skip
                continue
            net = m.group("net")
            for graph in sink.scandir(model.path) or []:
                if not (graph.is_dir() and graph.name.isdigit()):
                    sink.file_error(sink.rel(graph.path), "unknown", "walk", "expected a graph-id directory")
                    continue
                for it in sink.scandir(graph.path) or []:
                    if not (it.is_dir() and it.name.isdigit()):
                        sink.file_error(
                            sink.rel(it.path), "unknown", "walk", "expected an iteration directory"
                        )
                        continue
                    place = Place(rank, net, int(graph.name), int(it.name), "iteration")
                    self._leaf(place, it.path)

    def _leaf(self, place: Place, path: str) -> None:
        sink = self.sink
        entries = sink.scandir(path) or []
        sink.saw_files(len(entries), progress=True)
        for entry in entries:
            if not self.raw_files.handle(place, entry):
                sink.file_error(sink.rel(entry.path), "unknown", "walk", "not a raw dump file")
