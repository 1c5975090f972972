"""Write Ascend raw dump trees from a real MindSpore npy dump: the same tensors, so every value a
reader returns can be checked against the npy file MindSpore wrote.

No Ascend machine is reachable here, so this is how the raw-dump test trees are made, strictly from
the reference (mindspore-dump-formats.md §3.8 and §5, msprobe-cann-formats.md §2.4 and §3):

- every operator launch (the npy files of one op in one iteration directory)
  becomes one raw file `{op_type}.{op_name}.{task}.{stream}.{timestamp}` holding its inputs, then
  its outputs, with the full unsanitised op name (from the execution order) in `DumpData.op_name`;
- float tensors are written in the device formats an Ascend kernel would use: 4-D activations in
  NC1HWC0, a Conv2D weight in FRACTAL_Z, 2-D MatMul operands in FRACTAL_NZ, with `original_shape`
  the host shape; everything else ND;
- `layout='rank'` is MindSpore v1.3+ async (`rank_N/{net}/{graph}/{iteration}/`, with the rank's
  execution_order/, graphs/ and .dump_metadata/ copied); `layout='v1.2'` is MindSpore v1.2 async
  (`device_N/{net}_graph_{g}/{g}/{iteration}/`, four-field names without a stream id, the old
  whole-file protobuf layout, `.metadata/data_dump.json` at the top, and MindSpore's
  `execution_order/` and `graphs/` in the 1.x forms in `device_N/`, as trees seen in the field
  hold them: `tests.writers.mindspore_v1_graphs`).

Run it as a script to regenerate the committed trees under tests/data/ascend_raw/.
"""

from __future__ import annotations

import csv
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from ingest.formats.ascend.device_format import host_to_device
from ingest.formats.mindspore.npy_name import parse_tensor_name, sanitize_v23
from tests.writers.ascend_raw import SlotSpec, build_raw_dump
from tests.writers.mindspore_v1_graphs import write_v1_graphs

DATA_TYPES = {
    "float32": "DT_FLOAT", "float16": "DT_FLOAT16", "float64": "DT_DOUBLE", "int8": "DT_INT8",
    "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64", "uint8": "DT_UINT8",
    "uint16": "DT_UINT16", "uint32": "DT_UINT32", "uint64": "DT_UINT64", "bool": "DT_BOOL",
}  # fmt: skip


def device_format_for(op_type: str, io: str, slot: int, arr: np.ndarray) -> str:
    """The device format an Ascend kernel would keep this tensor in (ND when none applies)."""
    if arr.dtype.kind != "f" or arr.size == 0:
        return "ND"
    if arr.ndim == 4:
        return "FRACTAL_Z" if op_type.startswith("Conv2D") and io == "input" and slot == 1 else "NC1HWC0"
    if arr.ndim == 2 and op_type in ("MatMul", "BatchMatMul"):
        return "FRACTAL_NZ"
    return "ND"


def _full_names(rank_dir: Path) -> dict[tuple[int, str], str]:
    """(graph id, sanitised name) -> full scope name, from the execution order."""
    out: dict[tuple[int, str], str] = {}
    for f in sorted((rank_dir / "execution_order").glob("ms_execution_order_graph_*.csv")):
        graph = int(f.stem.rsplit("_", 1)[1])
        with open(f, newline="") as fh:
            for row in csv.reader(fh):
                if row and row[0].strip():
                    out[(graph, sanitize_v23(row[0].strip()))] = row[0].strip()
    return out


def _slot(arr: np.ndarray, fmt: str) -> SlotSpec:
    data = host_to_device(arr, fmt) if fmt != "ND" else arr  # (not ascontiguousarray: keeps 0-d)
    original = tuple(arr.shape) if fmt != "ND" else None
    return SlotSpec(data.tobytes(), DATA_TYPES[arr.dtype.name], tuple(data.shape), fmt, original)


def write_tree(src: Path, dst: Path, *, layout: str = "rank", bin_every: int = 3) -> dict[str, int]:
    """Write the raw tree of npy dump `src` (a dump root holding rank_N/) to `dst`.

    In the rank layout every `bin_every`-th file gets the `.bin` extension and every other file of
    the rest uses the whole-file protobuf layout, so one tree holds every variant. Returns counts.
    """
    counts = {"files": 0, "tensors": 0}
    for rank_dir in sorted(src.glob("rank_*")):
        rank = int(rank_dir.name.split("_")[1])
        names = _full_names(rank_dir)
        if layout == "rank":
            out_rank = dst / rank_dir.name
            for static in ("execution_order", "graphs", ".dump_metadata"):
                if (rank_dir / static).is_dir():
                    shutil.copytree(rank_dir / static, out_rank / static, dirs_exist_ok=True)
        else:
            write_v1_graphs(rank_dir, dst / f"device_{rank}")
            config = rank_dir / ".dump_metadata" / "data_dump.json"
            if config.is_file():
                (dst / ".metadata").mkdir(parents=True, exist_ok=True)
                shutil.copy(config, dst / ".metadata" / "data_dump.json")
        for leaf in sorted(p for p in rank_dir.glob("*/*/*") if p.is_dir() and p.name.isdigit()):
            net, graph, iteration = leaf.parts[-3], int(leaf.parts[-2]), leaf.name
            # MindSpore's CPU writer stamps each file of a launch with its own time: a launch is
            # the files of one op (each op runs once per iteration here), stamped with the first.
            launches: dict[tuple, dict[str, dict[int, np.ndarray]]] = defaultdict(
                lambda: {"input": {}, "output": {}}
            )
            first_ts: dict[tuple, int] = {}
            for f in sorted(leaf.glob("*.npy")):
                tn = parse_tensor_name(f.name)
                op = (tn.op_type, tn.op_name, tn.task_id, tn.stream_id)
                first_ts[op] = min(first_ts.get(op, tn.timestamp_us), tn.timestamp_us)
                launches[op][tn.io][tn.slot] = np.load(f)
            launches = {(*op, first_ts[op]): slots for op, slots in launches.items()}
            if layout == "rank":
                out_dir = dst / rank_dir.name / net / str(graph) / iteration
            else:
                out_dir = dst / f"device_{rank}" / f"{net}_graph_{graph}" / str(graph) / iteration
            out_dir.mkdir(parents=True, exist_ok=True)
            for i, ((op_type, op_name, task, stream, ts), slots) in enumerate(sorted(launches.items())):
                specs = {
                    io: [_slot(a, device_format_for(op_type, io, s, a)) for s, a in sorted(slots[io].items())]
                    for io in ("input", "output")
                }
                full = names.get((graph, op_name), op_name)
                if layout == "rank":
                    ext = ".bin" if i % bin_every == 0 else ""
                    file_layout = "protobuf" if i % 2 else "big_dump"
                    name = f"{op_type}.{op_name}.{task}.{stream}.{ts}{ext}"
                else:
                    file_layout = "protobuf"
                    name = f"{op_type}.{op_name}.{task}.{ts}"
                data = build_raw_dump(
                    op_name=full, inputs=specs["input"], outputs=specs["output"], layout=file_layout,
                    dump_time=ts // 1000,
                )  # fmt: skip
                (out_dir / name).write_bytes(data)
                counts["files"] += 1
                counts["tensors"] += len(specs["input"]) + len(specs["output"])
    return counts


SOURCES = {  # committed tree -> (MindSpore npy dump it is made from, layout)
    "nan_log_rank": ("ms210/nan_log/dump", "rank"),
    "kernels_filter_rank": ("ms210/kernels_filter/dump", "rank"),
    "nan_log_v12": ("ms210/nan_log/dump", "v1.2"),
}


def main(data_dir: Path) -> None:
    for name, (src, layout) in SOURCES.items():
        dst = data_dir / "ascend_raw" / name
        shutil.rmtree(dst, ignore_errors=True)
        counts = write_tree(data_dir / src, dst, layout=layout)
        print(f"{dst.relative_to(data_dir)}: {counts['files']} raw files, {counts['tensors']} tensors")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data")
