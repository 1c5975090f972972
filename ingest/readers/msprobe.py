"""msprobe dumps (PyPI `mindstudio-probe`): PyTorch and MindSpore PyNative, levels L0/L1/mix.

Layout (reference msprobe-cann-formats.md §1.1): `{dump_path}/step{N}/rank{M}/` (or `proc{pid}/`,
`pid{pid}/` when the rank is unknown; MindSpore >= 2.7 splits `graph/` and `pynative/` trees above
the steps), each holding `dump.json` (or `debug.json`), `stack.json`, `construct.json` and, for
task 'tensor', `dump_tensor_data/` with a `.pt` (PyTorch) or `.npy` (MindSpore) file per tensor.

What is cataloged, per rank folder of a step:
- every tensor dump.json describes: a `stat_rows` row (stat_source 'dump.json', stat_semantics
  'msprobe': its Max/Min/Mean/Norm, md5 or xor checksum), with the entry key as the op's full name,
  the entry's position in the file as its execution index, `io` (input, output, parameter,
  parameter_grad), `arg_path` (`input.1.0`, `kwargs.target`, `parameters.weight`, ...);
- every tensor file: a `tensors` row (its header gives the dtype, shape and byte offset: `.pt`
  through `formats.torch_pt`, never torch's unpickler) whose counts dumpcat computes from the data,
  so `nan_count` works on msprobe dumps with data; files dump.json does not list (a run that
  stopped before msprobe wrote its json) are cataloged from their names;
- stack.json (flat or grouped form): `source_lines` of each entry (graph_id NULL);
- construct.json: the module tree (`modules`).

Rank: `rank{M}`; `proc{pid}`/`pid{pid}` folders are numbered after the highest real rank of the step,
as msprobe's own dump2db does. Iteration: the step number. net: the framework dump.json names (or
the `graph`/`pynative` tree). msprobe writes dump.json only when the debugger stops, so a watcher
catalogs a step's statistics once its json is complete.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.files import size_or_none
from ingest.formats.graph_model import is_framework_path
from ingest.formats.limits import MetadataTooLarge, read_capped
from ingest.formats.msprobe.dump_json import (
    PKL_NAMES,
    DumpJson,
    Leaf,
    MsprobeJsonError,
    dump_json_layout,
    entry_cut,
    gc_paused,
    io_of_arg,
    join_parts,
    parse_construct_json,
    parse_dump_json,
    parse_entry_key,
    parse_frame,
    parse_pkl_lines,
    parse_stack_json,
    split_data_name,
    stream_dump_range,
    tree_depths,
)
from ingest.formats.msprobe.torch_pt import PtError, read_pt_header
from ingest.formats.npy_header import NpyHeaderError, read_npy_header
from ingest.formats.tensor_data import FORTRAN_ORDER
from ingest.helper_pool import resolve_workers, run_ordered
from ingest.ids import stat_row_ids
from ingest.readers.base import Detection, Reader, list_dir
from ingest.readers.sink import IngestSink
from ingest.storage.schema import TABLES, conform

PRODUCER = "msprobe"
_STEP_DIR = re.compile(r"^step(\d+)$")
_PTDBG_DIR = re.compile(r"^ptdbg_dump_v[0-9.]+$")  # ptdbg_ascend put its steps one folder down
_RANK_DIR = re.compile(r"^(rank|proc|pid)(\d+)$")
_MODE_DIRS = ("graph", "pynative")  # MindSpore >= 2.7 with mindspore.jit at L0/mix
_DUMP_JSON = ("dump.json", "debug.json", *PKL_NAMES)
_DATA_DIRS = ("dump_tensor_data", "tensor_data")
_TENSOR_FILE = (".pt", ".npy")
_UNPARSED = object()
_SPLIT_BYTES = 8 << 20  # a dump.json this big is parsed on two cores
# The helper parses one half of it; this process reads the folder's stack.json and construct.json
# meanwhile, then parses the other half (the helper's half costs more: it also reads its bytes and
# sends the result back, which balances the two, measured).
_PIECES, _HELPER_PIECES = 2, 1


def _is_dir(path: str | os.DirEntry) -> bool:
    try:
        return path.is_dir() if isinstance(path, os.DirEntry) else os.path.isdir(path)
    except OSError:
        return False


def _rank_dir_with_json(path: str) -> str | None:
    names = {e.name for e in list_dir(path, 256)}
    return next((n for n in _DUMP_JSON if n in names), None) or (
        next((d for d in _DATA_DIRS if d in names), None)
    )


class MsprobeReader(Reader):
    name = PRODUCER
    producer = "msprobe (mindstudio-probe: PyTorch, MindSpore PyNative)"
    layout = "step{N}/rank{M}|proc{pid}/ (dump.json, stack.json, construct.json, dump_tensor_data/)"
    looked_for = "step{N}/rank{M}/dump.json (msprobe), or a step or rank folder of one"
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = (
        "msprobe (PyPI `mindstudio-probe`) dumps of PyTorch and MindSpore PyNative, levels L0/L1/mix, "
        "tasks statistics and tensor; ptdbg_ascend's older `.pkl` lines"
    )
    tree = (
        "`step{N}/rank{M}|proc{pid}/{dump.json, stack.json, construct.json, "
        "dump_tensor_data/*.pt|*.npy}` (also `graph/`, `pynative/` trees; "
        "`ptdbg_dump_v*/step{N}/rank{M}/api_stack_dump.pkl`)"
    )
    cataloged = (
        "a `stats` row per tensor of dump.json (Max/Min/Mean/Norm, md5; `stat_semantics = 'msprobe'`) "
        "with its argument path; a `tensors` row per `.pt`/`.npy` file (read without torch) whose "
        "counts dumpcat computes; stack.json as `source_lines`; construct.json as `modules`"
    )
    decoders = (
        "ingest.formats.msprobe.dump_json",
        "ingest.formats.msprobe.torch_pt",
    )

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self._stacks_seen: set[tuple[int, str]] = set()  # (rank, entry key): one stack per op
        self._frames: dict[str, tuple | None] = {}  # frame text -> (file, line, code, is user code)

    # -- detection -------------------------------------------------------------------------------

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        found = cls._shape(Path(path))
        if found is None:
            return None
        kind, evidence = found
        return Detection(cls, Path(path), f"{evidence} ({kind})", ())

    @classmethod
    def _shape(cls, path: Path) -> tuple[str, str] | None:
        """What kind of msprobe folder `path` is: a dump path, a mode tree, a step or a rank."""
        entries = [e for e in list_dir(path, 4096)]
        if _rank_dir_with_json(str(path)) and _RANK_DIR.match(path.name):
            return "a rank folder", f"{path.name}/"
        steps = [e for e in entries if _STEP_DIR.match(e.name) and _is_dir(e)]
        for step in steps[:4]:
            for rank in list_dir(step.path, 256):
                if _RANK_DIR.match(rank.name) and _is_dir(rank):
                    hit = _rank_dir_with_json(rank.path)
                    if hit:
                        return "a dump path", f"{step.name}/{rank.name}/{hit}"
        for mode in [e for e in entries if (e.name in _MODE_DIRS or _PTDBG_DIR.match(e.name)) and _is_dir(e)]:
            inner = cls._shape(Path(mode.path))
            if inner is not None and inner[0] == "a dump path":
                kind = "graph/pynative trees" if mode.name in _MODE_DIRS else "ptdbg_ascend .pkl"
                return kind, f"{mode.name}/{inner[1]}"
        if _STEP_DIR.match(path.name):
            for rank in entries:
                if _RANK_DIR.match(rank.name) and _is_dir(rank) and _rank_dir_with_json(rank.path):
                    return "a step folder", f"{rank.name}/"
        return None

    # -- walk ------------------------------------------------------------------------------------

    def walk(self) -> None:
        root = str(self.root)
        name = os.path.basename(root)
        if _RANK_DIR.match(name) and _rank_dir_with_json(root):
            parent = _STEP_DIR.match(os.path.basename(os.path.dirname(root)))
            step = int(parent.group(1)) if parent else None
            self._rank_dir(root, self._rank_number(name, {}), step, None)
            return
        if _STEP_DIR.match(name):
            self._step(root, int(_STEP_DIR.match(name).group(1)), None)
            return
        entries = self.sink.scandir(root) or []
        modes = [e for e in entries if (e.name in _MODE_DIRS or _PTDBG_DIR.match(e.name)) and _is_dir(e)]
        trees = [(e.path, e.name) for e in modes] or [(root, None)]
        for tree, mode in trees:
            for entry in self.sink.scandir(tree) if mode else entries:
                m = _STEP_DIR.match(entry.name)
                if m and _is_dir(entry):
                    self._step(entry.path, int(m.group(1)), mode if mode in _MODE_DIRS else None)
                elif mode is None:
                    self._other(entry)

    def _other(self, entry: os.DirEntry) -> None:
        """A file beside the steps (msprobe's config copy, logs): noted, not an error."""
        self.sink.saw_files(1)

    def _rank_number(self, name: str, proc_ranks: dict[str, int]) -> int:
        m = _RANK_DIR.match(name)
        if m.group(1) == "rank":
            return int(m.group(2))
        return proc_ranks.get(name, int(m.group(2)))

    def _step(self, path: str, step: int, mode: str | None) -> None:
        entries = self.sink.scandir(path) or []
        ranks = [e for e in entries if _RANK_DIR.match(e.name) and _is_dir(e)]
        real = [int(_RANK_DIR.match(e.name).group(2)) for e in ranks if e.name.startswith("rank")]
        next_rank = max(real, default=-1) + 1
        proc_ranks: dict[str, int] = {}
        for e in sorted((e for e in ranks if not e.name.startswith("rank")), key=lambda e: e.name):
            proc_ranks[e.name] = next_rank
            next_rank += 1
        for e in entries:
            if e in ranks:
                self._rank_dir(e.path, self._rank_number(e.name, proc_ranks), step, mode)
            else:
                self.sink.saw_files(1)

    # -- one rank folder of one step ---------------------------------------------------------------

    def _rank_dir(self, path: str, rank: int, step: int | None, mode: str | None) -> None:
        sink = self.sink
        entries = sink.scandir(path) or []
        by_name = {e.name: e for e in entries}
        sink.saw_files(len(entries), progress=True)
        dump: DumpJson | None = None
        self._current_rank = rank
        json_entry = next((by_name[n] for n in _DUMP_JSON if n in by_name), None)

        def side_files() -> None:
            """stack.json and construct.json: read while a helper parses a big dump.json."""
            if "stack.json" in by_name:
                self._stack_json(by_name["stack.json"], rank)
            if "construct.json" in by_name:
                self._construct_json(by_name["construct.json"], rank, step)

        if json_entry is not None:
            dump = self._dump_json(json_entry, side_files)
        else:
            side_files()
        net = mode or (dump.framework if dump is not None and dump.framework else "msprobe")
        data_dir = next((by_name[d] for d in _DATA_DIRS if d in by_name and _is_dir(by_name[d])), None)
        files: dict[str, os.DirEntry] = {}
        if data_dir is not None:
            for e in sink.scandir(data_dir.path) or []:
                sink.saw_files(1)
                if e.name.endswith(_TENSOR_FILE):
                    files[e.name] = e
                else:
                    sink.file_error(sink.rel(e.path), "unknown", "walk", "not a .pt or .npy tensor file")
        listed: dict[str, Leaf] = {}
        if dump is not None and files:
            names = dump.table.column("data_name").to_pylist()
            hits = [i for i, n in enumerate(names) if n in files]
            picked = dump.table.take(pa.array(hits, pa.int64()))
            cols = picked.select(["entry", "io", "slot", "arg_path", "dtype"]).to_pylist()
            for i, r in zip(hits, cols, strict=True):
                key = dump.keys[r["entry"]].key
                listed[names[i]] = Leaf(key, r["io"], r["slot"], r["arg_path"], r["dtype"], None, None, None,
                                        None, None, None, None, names[i])  # fmt: skip
        row_ids = self._tensor_files(files, listed, rank, net, step, dump)
        if dump is not None and json_entry is not None:
            self._stat_rows(json_entry, dump, rank, net, step, row_ids)
        sink.flush_if_full()

    def _read_json_file(self, entry: os.DirEntry, kind: str, cap_kind: str = "json"):
        """The bytes of a json file to read now, or None (unchanged, still written, unreadable, or
        over the `cap_kind` cap of ingest.formats.limits: an error row, not read)."""
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry)
        if size is None or sink.is_unchanged(rel, size):
            return None
        if sink.options.live and sink.still_written(entry, rel, sink.options.settle):
            return None
        try:
            return read_capped(entry.path, cap_kind, sink.options.caps)
        except MetadataTooLarge as exc:
            sink.file_error(rel, kind, kind, str(exc), size)
        except OSError as exc:
            sink.file_error(rel, kind, kind, f"unreadable: {exc.strerror}", size)
        return None

    def _dump_json(self, entry: os.DirEntry, meanwhile: Callable[[], None]) -> DumpJson | None:
        """The rank folder's dump.json (or .pkl); `meanwhile` (the other files) runs while a helper
        parses part of a big one, else before it."""
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry)
        if entry.name.endswith(".pkl"):
            data = self._read_json_file(entry, "dump_json", "dump_json")
            meanwhile()
            if data is None:
                return None
        elif (
            size is None
            or sink.is_unchanged(rel, size)
            or (sink.options.live and sink.still_written(entry, rel, sink.options.settle))
        ):
            meanwhile()
            return None
        try:
            if entry.name.endswith(".pkl"):
                dump, stacks = parse_pkl_lines(data)
                self._add_stacks(rel, stacks, self._current_rank)
            else:
                dump = self._parse_dump_json(entry.path, meanwhile)
        except MsprobeJsonError as exc:
            if not sink.still_written(entry, rel):
                sink.file_error(rel, "dump_json", "dump_json", str(exc), size)
            return None
        except MetadataTooLarge as exc:
            sink.file_error(rel, "dump_json", "dump_json", str(exc), size)
            return None
        except OSError as exc:
            sink.file_error(rel, "dump_json", "dump_json", f"unreadable: {exc.strerror}", size)
            return None
        for problem in dump.problems:
            sink.error(rel, "dump_json", problem, size)
        return dump

    def _parse_dump_json(self, path: str, meanwhile: Callable[[], None]) -> DumpJson:
        """A dump.json laid out as msprobe writes it is streamed, never held whole
        (`stream_dump_range`); a big one on two cores: a helper process streams the first part of
        its entries while this one runs `meanwhile` and streams the rest. One of any other layout
        is read whole, within the `dump_json` cap (MetadataTooLarge over it)."""
        sink = self.sink
        with open(path, "rb") as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            layout = dump_json_layout(fd, size)
            if layout is None:
                meanwhile()
                return parse_dump_json(read_capped(path, "dump_json", sink.options.caps))
            header, start, end = layout
            cap = sink.options.caps.json
            mid = None
            if end - start >= _SPLIT_BYTES and resolve_workers(sink.options.workers) > 1:
                mid = entry_cut(fd, start + (end - start) * _HELPER_PIECES // _PIECES, end)
            if mid is None:
                meanwhile()
                part = stream_dump_range(fd, start, end, cap)
                if part is None:
                    return parse_dump_json(read_capped(path, "dump_json", sink.options.caps))
                return join_parts(header, [part])
            first: list = []

            def in_helper() -> None:  # waits on the helper's pipe: this thread holds no CPU meanwhile
                task = "ingest.formats.msprobe.dump_json:parse_dump_range"
                first.extend(
                    run_ordered(task, iter([(path, start, mid, cap)]), 1, caller_helps=False, slots=1)
                )

            thread = threading.Thread(target=in_helper, name="dumpcat-dump-json", daemon=True)
            thread.start()
            meanwhile()
            second = stream_dump_range(fd, mid + 2, end, cap)
            thread.join()
        if not first or first[0] is None or second is None:
            return parse_dump_json(read_capped(path, "dump_json", sink.options.caps))
        return join_parts(header, [first[0], second])

    def _tensor_files(
        self, files: dict[str, os.DirEntry], listed: dict[str, Leaf], rank: int, net: str,
        step: int | None, dump: DumpJson | None,
    ) -> dict[str, int]:  # fmt: skip
        """`tensors` rows of the data files not cataloged yet; {file name: row id} of every file
        present (cataloged now or before), for the stat rows to point at."""
        sink = self.sink
        rows: list[tuple] = []
        row_ids: dict[str, int] = {}
        for name in sorted(files):
            entry = files[name]
            rel = sink.rel(entry.path)
            row_id = sink.options.row_id_of(rel)
            row_ids[name] = row_id
            if sink.is_known(row_id):
                continue
            leaf = listed.get(name)
            if leaf is not None:
                key, arg_path, io, slot, dtype = leaf.key, leaf.arg_path, leaf.io, leaf.slot, leaf.dtype
            else:
                split = split_data_name(name)
                if split is None:
                    sink.file_error(rel, "tensor", "name", "not an msprobe tensor file name")
                    row_ids.pop(name)
                    continue
                key, arg_path = split
                io, slot, dtype = io_of_arg(arg_path), _slot_of(arg_path), None
            size = size_or_none(entry) or 0
            try:
                if name.endswith(".pt"):
                    head = read_pt_header(entry.path)
                    fmt = None if head.contiguous else _column_major(head)
                    if not head.contiguous and fmt is None:
                        raise PtError(f"strides {head.strides} are neither row- nor column-major")
                    stored, shape = head.stored_dtype, list(head.shape)
                    offset, nbytes = head.data_offset, head.nbytes
                    dtype = dtype or head.torch_dtype
                else:
                    header, size = read_npy_header(entry.path)
                    stored, shape = header.dtype_name, list(header.shape)
                    offset, nbytes = header.data_offset, header.nbytes
                    dtype = dtype or stored
                    fmt = FORTRAN_ORDER if header.fortran_order else None
            except (PtError, NpyHeaderError, OSError) as exc:
                if not sink.still_written(entry, rel):
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    sink.file_error(rel, "tensor", "tensor", reason, size)
                row_ids.pop(name)
                continue
            parsed = parse_entry_key(key)
            sink.judged(rel)
            rows.append(
                (
                    row_id, sink.options.run, rank, net, None, step, "step", rel, name, None, parsed.op_type,
                    key, key, None, None, None, io, slot, fmt, dtype, stored, shape, offset, nbytes, size,
                    "msprobe", PRODUCER, None, key, None,
                )
            )  # fmt: skip
            if sink.previous(rel) is not None:
                sink.record(rel, "tensor", size, size, 0, "ok")
        if rows:
            sink.add_tensor_table(_rows_table(rows), new_files=len(rows))
        return row_ids

    def _stat_rows(
        self, entry: os.DirEntry, dump: DumpJson, rank: int, net: str, step: int | None,
        row_ids: dict[str, int],
    ) -> None:  # fmt: skip
        """One stat row per tensor of dump.json, built column by column (a dump.json of 10^5
        entries is half a million tensors)."""
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry) or 0
        prev = sink.previous(rel)
        done = prev[2] if prev is not None and prev[3] == "ok" else 0  # tensors taken before
        leaves = dump.table
        total = leaves.num_rows
        sink.record(rel, "dump_json", size, size, total, "ok")
        n = total - done
        if n <= 0:
            return
        leaves = leaves.slice(done)
        entry = leaves.column("entry")
        schema = TABLES["stat_rows"]
        names = pa.array([k.key for k in dump.keys], pa.string())
        arrays: dict[str, pa.Array] = {
            "line_no": pa.array(np.arange(done + 1, total + 1), pa.int64()),
            "op_type": pa.array([k.op_type for k in dump.keys], pa.string()).take(entry),
            "file_op_name": names.take(entry),
            "exec_index": entry,
            "data_type": leaves.column("dtype"),
            "avg": leaves.column("mean"),
            "l2norm": leaves.column("norm"),
        }
        for column in ("io", "slot", "shape", "max", "min", "md5", "arg_path", "requires_grad"):
            arrays[column] = leaves.column(column)
        data_names = leaves.column("data_name")
        if row_ids and data_names.null_count < n:
            arrays["row_id"] = pa.array([row_ids.get(x) for x in data_names.to_pylist()], pa.int64())
        arrays["stat_id"] = pa.array(
            stat_row_ids(sink.options.run, rel, np.arange(done + 1, total + 1)), pa.int64()
        )
        for name, value in (
            ("run", sink.options.run), ("rank", rank), ("net", net), ("iteration", step), ("csv_path", rel),
            ("stat_source", "dump.json"), ("stat_semantics", "msprobe"),
        ):  # fmt: skip
            arrays[name] = _repeat(value, n, schema.field(name).type)
        arrays["file_op_base"] = arrays["file_op_name"]
        arrays["op_full_name"] = arrays["file_op_name"]
        table = conform(pa.table(arrays), schema)
        sink.add_stat_chunk(table)
        # the peers and group of the collectives among the new entries (communication_ops)
        new_entries = set(np.unique(np.asarray(entry)).tolist())
        sink.add_rows(
            "kernel_args",
            [
                (sink.options.run, rank, net, None, step, rel, k.op_type, k.key, name, value)
                for i, k in enumerate(dump.keys)
                if k.peers and i in new_entries
                for name, value in k.peers
            ],
        )

    def _parsed(
        self, entry: os.DirEntry, kind: str, parse: Callable[[bytes], object], cap_kind: str = "json"
    ):
        """(rel path, size, what `parse` made of the file), or None when there is nothing to read
        now (unchanged, still written) or it does not parse or is over its cap (an error row)."""
        sink = self.sink
        rel = sink.rel(entry.path)
        data = self._read_json_file(entry, kind, cap_kind)
        if data is None:
            return None
        try:
            return rel, len(data), parse(data)
        except MsprobeJsonError as exc:
            if not sink.still_written(entry, rel):
                sink.file_error(rel, kind, kind, str(exc), len(data))
            return None

    def _stack_json(self, entry: os.DirEntry, rank: int) -> None:
        got = self._parsed(entry, "stack_json", parse_stack_json, "stack")
        if got is not None:
            rel, size, stacks = got
            self._add_stacks(rel, stacks, rank)
            self.sink.record(rel, "stack_json", size, size, 0, "ok")

    def _add_stacks(self, rel: str, stacks: dict[str, list[str]], rank: int) -> None:
        """`source_lines` of each op's stack (innermost frame first), once per op and rank, as one
        Arrow table: a level-L1 step has a stack per API call, and most frames repeat (each distinct
        frame text is parsed once)."""
        with gc_paused():
            self._add_stacks_now(rel, stacks, rank)

    def _add_stacks_now(self, rel: str, stacks: dict[str, list[str]], rank: int) -> None:
        sink = self.sink
        groups: dict[int, tuple[list[str], list[str]]] = {}  # one per distinct stack (grouped form)
        for key, frames in stacks.items():
            if (rank, key) in self._stacks_seen:
                continue
            self._stacks_seen.add((rank, key))
            group = groups.get(id(frames))
            if group is None:
                groups[id(frames)] = (frames, [key])
            else:
                group[1].append(key)
        bad = 0
        tables: list[pa.Table] = []
        for frames, keys in groups.values():
            parsed = [self._frame(text) for text in frames]
            bad += len(keys) * sum(p is None for p in parsed)
            parsed = [p for p in parsed if p is not None]
            n, k = len(parsed), len(keys)
            if not n:
                continue
            # every key of the group gets the group's frames: index arrays, not a row per frame
            each = np.tile(np.arange(n), k)
            file, line, code, user = (list(c) for c in zip(*parsed, strict=True))
            key_array = pa.array(keys, pa.string()).take(np.repeat(np.arange(k), n))
            tables.append(
                pa.table({
                    "node_key": key_array, "full_name": key_array,
                    "depth": pa.array(np.tile(np.arange(n - 1, -1, -1), k), pa.int32()),  # depth 0: outermost
                    "file": pa.array(file, pa.string()).take(each),
                    "line": pa.array(line, pa.int64()).take(each),
                    "code": pa.array(code, pa.string()).take(each),
                    "is_user_code": pa.array(user, pa.bool_()).take(each),
                })
            )  # fmt: skip
        if tables:
            table = pa.concat_tables(tables)
            n = table.num_rows
            table = table.append_column("run", _repeat(sink.options.run, n, pa.string()))
            table = table.append_column("rank", _repeat(rank, n, pa.int32()))
            sink.add_table("source_lines", conform(table, TABLES["source_lines"]))
        if bad:
            sink.error(rel, "stack_json", f"{bad} stack frame(s) not of the form 'File …, line N, in …'")

    def _frame(self, text: str) -> tuple | None:
        """(file, line, code, is user code) of a stack line, parsed once per distinct text."""
        frame = self._frames.get(text, _UNPARSED)
        if frame is _UNPARSED:
            f = parse_frame(text)
            frame = None if f is None else (f.file, f.line, f.code, not is_framework_path(f.file))
            self._frames[text] = frame
        return frame

    def _construct_json(self, entry: os.DirEntry, rank: int, step: int | None) -> None:
        sink = self.sink
        got = self._parsed(entry, "construct_json", parse_construct_json)
        if got is None:
            return
        rel, size, nodes = got
        depths = tree_depths(nodes)
        if nodes:
            n = len(nodes)
            node, parent, micro = (list(c) for c in zip(*nodes, strict=True))
            table = pa.table(
                {
                    "run": _repeat(sink.options.run, n, pa.string()), "rank": _repeat(rank, n, pa.int32()),
                    "iteration": _repeat(step, n, pa.int64()),
                    "rel_path": _repeat(rel, n, pa.string()),
                    "node": pa.array(node, pa.string()), "parent": pa.array(parent, pa.string()),
                    "depth": pa.array([depths.get(x, 0) for x in node], pa.int32()),
                    "micro_step": pa.array(micro, pa.int64()),
                }
            )  # fmt: skip
            sink.add_table("modules", conform(table, TABLES["modules"]))
        sink.record(rel, "construct_json", size, size, 0, "ok")


def _repeat(value, n: int, type_: pa.DataType) -> pa.Array:
    """`n` copies of one value, without a Python list of them."""
    return pa.repeat(pa.scalar(value, type_), n)


def _column_major(head) -> str | None:
    """FORTRAN_ORDER when a .pt tensor's strides are column-major (a saved transpose), else None."""
    want, step = [], 1
    for dim in head.shape:
        want.append(step)
        step *= dim
    dims = [i for i, d in enumerate(head.shape) if d != 1]  # strides of size-1 dims do not matter
    ok = all(head.strides[i] == want[i] for i in dims)
    return FORTRAN_ORDER if ok and head.stored_dtype not in ("int4", "uint1") else None


def _slot_of(arg_path: str) -> int:
    """The slot of a file dump.json does not list: its first index, else 0."""
    for part in arg_path.split(".")[1:]:
        if part.isdigit():
            return int(part)
    return 0


def _rows_table(rows: list[tuple]) -> pa.Table:
    schema = TABLES["tensors"]
    columns = list(zip(*rows, strict=True))
    arrays = [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)
