"""MindSpore 1.0-1.2 synchronous (e2e) dumps: one headerless `.bin` file per tensor.

Layout (reference mindspore-dump-formats.md §0 row 1, §3.7): `{path}/{net}/device_{d}/iteration_{n}/`,
or `{path}/{net}/iteration_{n}/` when no device id is given (CPU). Each file is
`{kernel name, "/" -> "--"}_{input|output}_{slot}_shape_{d0}_{d1}…_{dtype}_{format}.bin`, the raw
bytes of the tensor from offset 0, so the name is the only metadata there is: it gives the full
scope name, the slot, the shape, the dtype (`kNumberTypeFloat32` with trans_flag, `Float32`
without) and the format (`ingest.formats.mindspore.legacy_names`). Beside the iterations sit
`{net}/device_{d}/execution_order/` (§2.1) and `{net}/device_{d}/graphs/` (§2.4, the graph IR
with each operator's source lines, in the v1.x .ir grammar of §4), both read as the rank layout
reads them (`{net}/execution_order/` and `{net}/graphs/` too in the CPU form), and
`{path}/.metadata/data_dump.json` (§2.3), which becomes a `rank_meta` row per device.

What the layout does not say, and what the rows hold instead:
- graph id: a v1.0-1.2 iteration folder holds the kernels of every graph of the net, and the path
  names none. Rows get graph 0, so names resolve against `ms_execution_order_graph_0.csv`
  ('exact', with an execution index); kernels of other graphs keep the full name their file name
  gives ('header', no execution index).
- rank: the device id (0 in the CPU form, which has no device folder).
- task id, stream id, timestamp: none (NULL). Tensors are ordered by the execution order only.
- host shape of a device format: a file written without trans_flag holds the device layout
  (NC1HWC0, FRACTAL_Z, ...) and its name gives the device shape only. Such a tensor is served, and
  its statistics computed, in the device layout (C0 and fractal padding included): `host_shape`
  is NULL. `DefaultFormat` files are in the host layout.
- kernel type: the last scope component without `-opN`; a name with no `-opN` is a parameter or a
  constant (`cst{N}`), typed `Parameter` as in the npy dumps of later versions.
- `--` in a file name is read back as `/` (MindSpore's replacement is not invertible): a scope
  name that itself held `--` is misread, and does not resolve against the execution order.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.files import now, size_or_none
from ingest.formats.limits import open_text_capped
from ingest.formats.mindspore.legacy_names import LegacyBinName, parse_legacy_bin_name
from ingest.formats.mindspore.npy_name import op_type_of, sanitize_v23, short_name, without_op_index
from ingest.formats.numbers import INT32_MAX, INT64_MAX, parse_uint
from ingest.formats.tensor_data import stored_nbytes
from ingest.readers.base import Detection, Place, Reader, first_file, list_dir
from ingest.readers.rank_layout import read_execution_order_dir, read_graphs_dir

if TYPE_CHECKING:
    from ingest.readers.sink import IngestSink

PRODUCER = "mindspore-bin"
NAME_ERA = "v1.0-1.2"
GRAPH_ID = 0  # the layout names no graph: see the module docstring
_DEVICE_DIR = re.compile(r"^device_([0-9]+)$")
_ITERATION_DIR = re.compile(r"^iteration_([0-9]+)$")
_KERNEL = re.compile(r"-op[0-9]+$")
_EXEC_DIR = "execution_order"
_GRAPHS_DIR = "graphs"
_META_DIR = ".metadata"
_PEEK = 4  # detection looks at this many candidate folders per level


def _number(match: re.Match | None, limit: int) -> int | None:
    return None if match is None else parse_uint(match.group(1), limit)


def _is_legacy_bin(name: str) -> bool:
    return name.endswith(".bin") and parse_legacy_bin_name(name) is not None


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _net_evidence(net: Path | str) -> str | None:
    """`device_N/iteration_N/` or `iteration_N/` (relative to a net folder) holding a `.bin` tensor
    file, looking at a few folders per level only."""
    entries = [e for e in list_dir(net, 64) if _is_dir(e)]
    iterations = [e for e in entries if _ITERATION_DIR.match(e.name)]
    for device in [e for e in entries if _DEVICE_DIR.match(e.name)][:_PEEK]:
        found = [e for e in list_dir(device.path, 64) if _ITERATION_DIR.match(e.name) and _is_dir(e)]
        iterations += found[:_PEEK]
    for it in iterations[: 2 * _PEEK]:
        if first_file(it.path, 0, _is_legacy_bin, 16) is not None:
            return os.path.relpath(it.path, net) + "/"
    return None


def _operators_first(entries: list[os.DirEntry]) -> list[os.DirEntry]:
    """execution_order/ and graphs/ before the iteration folders: tensors then commit with the
    operators they resolve against, not before them (see `RankLayoutWalker._ingest_rank`)."""
    return sorted(entries, key=lambda e: e.name not in (_EXEC_DIR, _GRAPHS_DIR))


def op_type_of_kernel(kernel_name: str) -> str:
    """`.../Conv2D-op107` -> `Conv2D`; a name without `-opN` (a parameter such as `conv1.weight`,
    a constant `cst3`) is not a kernel: `Parameter`, the type later dumps give both."""
    return op_type_of(kernel_name) if _KERNEL.search(short_name(kernel_name)) else "Parameter"


class MindSporeBinReader(Reader):
    """`{net}/device_N/iteration_N/*.bin` (and the CPU form without `device_N/`)."""

    name = PRODUCER
    producer = "MindSpore 1.0-1.2 (sync .bin)"
    layout = "{net}/device_N/iteration_N/"
    looked_for = (
        "{net}/device_N/iteration_N/ or {net}/iteration_N/ folders of "
        "{kernel}_{io}_{slot}_shape_{dims}_{dtype}_{format}.bin files (MindSpore 1.0-1.2 sync)"
    )
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = "MindSpore 1.0–1.2 sync"
    tree = (
        "`{net}/device_N/iteration_N/{scope--name}_{io}_{i}_shape_{dims}_{dtype}_{format}.bin` (CPU: "
        "no `device_N/`), `{net}/device_N/execution_order/` and `graphs/`"
    )
    cataloged = (
        "a `tensors` row per file (headerless data at offset 0), the execution order, the graph IR "
        "(`.pb`, or the v1.x `.ir`: source lines), `.metadata/data_dump.json`"
    )

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self.nets: list[Path] = list(detection.units)  # the net folder given (fixed), else empty
        self._config: str | None = None

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        """A dump root whose `{net}` folders hold `.bin` tensor files, or one such net folder."""
        hit = _net_evidence(path)
        if hit is not None:  # `path` is a net folder: the dump root is its parent
            return Detection(cls, path.parent, f".bin files in {path.name}/{hit}", (path,), fixed=True)
        nets = [e for e in list_dir(path, 64) if _is_dir(e) and e.name != _META_DIR]
        for net in nets[:_PEEK]:
            hit = _net_evidence(net.path)
            if hit is not None:
                return Detection(cls, path, f".bin files in {net.name}/{hit}")
        return None

    # -- the walk --------------------------------------------------------------------------------

    def walk(self) -> None:
        sink = self.sink
        self._config = self._metadata()
        if self.detection.fixed:
            for net in self.nets:
                self._net(net.name, str(net))
            return
        for entry in sink.scandir(str(self.root)) or []:
            if entry.name == _META_DIR and _is_dir(entry):
                continue
            if _is_dir(entry):
                self._net(entry.name, entry.path)
            else:
                sink.saw_files(1)
                sink.file_error(
                    sink.rel(entry.path), "unknown", "walk", "expected {net}/ folders or .metadata/"
                )

    def scan_path(self, path: str) -> None:
        """Re-read the part of the tree a change at `path` can affect (a watcher's event)."""
        if not os.path.isdir(path):  # the pipeline checked it is a UTF-8 path under the root
            return
        parts = self.sink.rel(path).split("/")
        net, net_path = parts[0], os.path.join(self.root, parts[0])
        if net == _META_DIR:
            self.walk()  # new metadata: every device's rank_meta row
            return
        if self.detection.fixed and net not in {n.name for n in self.nets}:
            return
        if self._config is None:
            self._config = self._metadata()
        if len(parts) == 1:
            self._net(net, net_path)
            return
        device = _number(_DEVICE_DIR.match(parts[1]), INT32_MAX)
        if device is None:
            iteration = _number(_ITERATION_DIR.match(parts[1]), INT64_MAX)
            if iteration is not None:
                self._leaf(Place(0, net, GRAPH_ID, iteration, "iteration"), os.path.join(net_path, parts[1]))
            elif parts[1] == _EXEC_DIR:
                read_execution_order_dir(self.sink, 0, os.path.join(net_path, parts[1]))
            elif parts[1] == _GRAPHS_DIR:
                read_graphs_dir(self.sink, 0, os.path.join(net_path, parts[1]))
            else:
                self._net(net, net_path)  # reports what does not belong there
            return
        device_path = os.path.join(net_path, parts[1])
        iteration = _number(_ITERATION_DIR.match(parts[2]), INT64_MAX) if len(parts) > 2 else None
        if iteration is not None:
            place = Place(device, net, GRAPH_ID, iteration, "iteration")
            self._leaf(place, os.path.join(device_path, parts[2]))
        elif len(parts) > 2 and parts[2] == _EXEC_DIR:
            read_execution_order_dir(self.sink, device, os.path.join(device_path, parts[2]))
        elif len(parts) > 2 and parts[2] == _GRAPHS_DIR:
            read_graphs_dir(self.sink, device, os.path.join(device_path, parts[2]))
        else:
            self._device(net, device, device_path)

    def _net(self, net: str, path: str) -> None:
        sink = self.sink
        cpu_meta = False
        for entry in _operators_first(sink.scandir(path) or []):
            is_dir = _is_dir(entry)
            device = _number(_DEVICE_DIR.match(entry.name), INT32_MAX) if is_dir else None
            iteration = _number(_ITERATION_DIR.match(entry.name), INT64_MAX) if is_dir else None
            if device is not None:
                self._device(net, device, entry.path)
            elif iteration is not None:  # the CPU form: no device folder
                if not cpu_meta:
                    self._rank_meta(0, path, "CPU")
                    cpu_meta = True
                self._leaf(Place(0, net, GRAPH_ID, iteration, "iteration"), entry.path, entry)
            elif is_dir and entry.name == _EXEC_DIR:
                read_execution_order_dir(self.sink, 0, entry.path)
            elif is_dir and entry.name == _GRAPHS_DIR:
                read_graphs_dir(self.sink, 0, entry.path)
            else:
                if not is_dir:
                    sink.saw_files(1)
                reason = (
                    "expected device_N/, iteration_N/, execution_order/ or graphs/ folders in a net folder"
                )
                sink.file_error(sink.rel(entry.path), "unknown", "walk", reason)

    def _device(self, net: str, rank: int, path: str) -> None:
        sink = self.sink
        self._rank_meta(rank, path, None)
        for entry in _operators_first(sink.scandir(path) or []):
            is_dir = _is_dir(entry)
            iteration = _number(_ITERATION_DIR.match(entry.name), INT64_MAX) if is_dir else None
            if iteration is not None:
                self._leaf(Place(rank, net, GRAPH_ID, iteration, "iteration"), entry.path, entry)
            elif is_dir and entry.name == _EXEC_DIR:
                read_execution_order_dir(self.sink, rank, entry.path)
            elif is_dir and entry.name == _GRAPHS_DIR:
                read_graphs_dir(self.sink, rank, entry.path)
            else:
                if not is_dir:
                    sink.saw_files(1)
                reason = "expected iteration_N/, execution_order/ or graphs/ folders in a device folder"
                sink.file_error(sink.rel(entry.path), "unknown", "walk", reason)

    # -- iteration folders ----------------------------------------------------------------------

    def _leaf(self, place: Place, path: str, dir_entry: os.DirEntry | None = None) -> None:
        sink = self.sink
        entries = sink.scandir(path)
        if entries is None:
            return
        rel_dir = sink.rel(path)
        sink.saw_files(len(entries), progress=True)
        if not entries:
            entry = dir_entry or _entry_of(path)
            if entry is None or not sink.still_written(entry, rel_dir):
                sink.file_error(rel_dir, "directory", "walk", "empty iteration folder: no tensor file")
            return
        prev = sink.previous(rel_dir)
        if prev is not None and prev[3] == "error":  # it was empty: no longer an error
            sink.record(rel_dir, "directory", 0, 0, 0, "ok")
        for entry in entries:
            self._file(place, entry)
        sink.flush_if_full()

    def _file(self, place: Place, entry: os.DirEntry) -> None:
        sink = self.sink
        rel = sink.rel(entry.path)
        name = parse_legacy_bin_name(entry.name) if entry.name.endswith(".bin") else None
        if name is None or _is_dir(entry):
            sink.file_error(
                rel, "unknown", "name",
                "not a MindSpore 1.0-1.2 tensor file ({kernel}_{input|output}_{slot}_shape_{dims}_{dtype}"
                "_{format}.bin)",
                size_or_none(entry),
            )  # fmt: skip
            return
        row_id = sink.options.row_id_of(rel)
        if sink.is_known(row_id):
            return
        size = size_or_none(entry)
        if size is None:
            sink.file_error(rel, "tensor", "stat", "cannot stat the file")
            return
        shape = name.shape
        if shape == () and size == 0:
            shape = (0,)  # `shape_0` is a scalar or an empty 1-D tensor; no bytes: the empty one
        nbytes = stored_nbytes(name.stored_dtype, shape)
        if nbytes != size:
            if not sink.still_written(entry, rel):
                sink.file_error(
                    rel, "tensor", "size",
                    f"its name says shape {list(shape)} of {name.dtype_token}: {nbytes} bytes, "
                    f"the file has {size}",
                    size,
                )  # fmt: skip
            return
        sink.add_tensor_rows(rel, [self._row(place, entry, rel, row_id, name, shape, size)])
        if sink.previous(rel) is not None:  # an earlier error for this file is now resolved
            sink.record(rel, "tensor", size, size, 0, "ok")

    def _row(
        self,
        place: Place,
        entry: os.DirEntry,
        rel: str,
        row_id: int,
        name: LegacyBinName,
        shape: tuple[int, ...],
        size: int,
    ) -> tuple:
        """The `tensors` row of one file, in the column order of `ingest.storage.schema.TENSORS`."""
        key = sanitize_v23(name.kernel_name)
        return (
            row_id, self.sink.options.run, place.rank, place.net, place.graph_id, place.iteration,
            place.dir_kind, rel, entry.name, None, op_type_of_kernel(name.kernel_name), key,
            without_op_index(key), None, None, None, name.io, name.slot, name.format, name.dtype_token,
            name.stored_dtype, list(shape), 0, size, size, NAME_ERA, PRODUCER, None, name.kernel_name, None,
        )  # fmt: skip

    # -- execution order and metadata -----------------------------------------------------------

    def _metadata(self) -> str | None:
        """The text of `{path}/.metadata/data_dump.json` (v1.2 keeps one copy for the whole run)."""
        sink = self.sink
        path = os.path.join(self.root, _META_DIR)
        if not os.path.isdir(path):
            return None
        text = None
        for entry in sink.scandir(path) or []:
            sink.saw_files(1)
            rel = sink.rel(entry.path)
            if entry.name != "data_dump.json":
                sink.file_error(rel, "unknown", "metadata", "unrecognised file in .metadata/")
                continue
            if sink.still_written(entry, rel, sink.options.settle):
                continue  # read it once it has stopped changing
            try:
                with open_text_capped(entry.path, "json", sink.options.caps, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as exc:
                sink.file_error(rel, "metadata", "metadata", str(exc), size_or_none(entry))
        return text

    def _rank_meta(self, rank: int, path: str, device_target: str | None) -> None:
        """One `rank_meta` row per device folder (per net folder in the CPU form), written again
        when data_dump.json changes. The device target is known only for the CPU form."""
        sink = self.sink
        config = self._config
        rel = sink.rel(path)
        if config is None or sink.is_unchanged(rel, len(config)):
            return
        sink.add(
            "rank_meta", (sink.options.run, rank, str(self.root), device_target, None, config, None, now())
        )
        sink.record(rel, "metadata", len(config), len(config), 0, "ok")


def _entry_of(path: str) -> os.DirEntry | None:
    """The directory entry of `path` (to ask its age), from its parent's listing."""
    parent, name = os.path.split(path)
    try:
        with os.scandir(parent) as it:
            return next((e for e in it if e.name == name), None)
    except OSError:
        return None
