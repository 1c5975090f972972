"""Write MindSpore 1.0-1.2 synchronous `.bin` dump trees from a real MindSpore npy dump: the same
tensors, so every value a reader returns can be checked against the npy file MindSpore wrote.

No MindSpore 1.x run is available here, so the trees are made strictly from the reference
(mindspore-dump-formats.md §0 row 1, §2.1, §2.3, §3.7):

- `{path}/{net}/device_{d}/iteration_{n}/` (form 'device'), or `{path}/{net}/iteration_{n}/`
  (form 'cpu': no device id);
- one file per tensor, `{full name with "/" -> "--"}_{input|output}_{slot}_shape_{d0}_{d1}…_{dtype}
  _{format}.bin`, holding the raw bytes with no header; a scalar is written `shape_0`. The full
  name comes from the execution order (the npy names hold it sanitised), so every tensor's operator
  must be in it: parameters, whose original names the npy files do not keep, are not supported;
- dtype token: `TypeIdLabel` (`kNumberTypeFloat32`) with trans_flag, `TypeIdToType()->ToString()`
  (`Float32`) without; format `DefaultFormat`, or with `device_formats` (device form, no
  trans_flag) the Ascend device format `ascend_tree.device_format_for` picks, with the bytes and
  the shape in the name in that layout;
- the device form gets the rank's `execution_order/ms_execution_order_graph_{g}.csv` and its
  `graphs/` in the 1.x forms (`tests.writers.mindspore_v1_graphs`) in `{net}/device_{d}/` (the
  CPU form has neither: §2.1 names the device path only);
- `{path}/.metadata/data_dump.json`: the source run's config, with `trans_flag` set to what the
  names say.

Run it as a script to regenerate the committed trees under tests/data/mindspore_bin/.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from ingest.formats.ascend.device_format import host_to_device
from ingest.formats.mindspore.npy_name import parse_tensor_name, sanitize_v23
from tests.writers.ascend_tree import device_format_for
from tests.writers.mindspore_v1_graphs import write_v1_graphs

# numpy dtype -> the TypeId's name without `kNumberType` (`Float32`), as §3.7 spells both forms.
TYPE_NAMES = {
    "bool": "Bool", "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64", "uint8": "UInt8",
    "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "float16": "Float16", "float32": "Float32",
    "float64": "Float64",
}  # fmt: skip


def bin_name(full_name: str, io: str, slot: int, shape: tuple[int, ...], dtype: str, fmt: str) -> str:
    """The §3.7 file name of one tensor (`dtype` is the token as written)."""
    dims = "_".join(str(d) for d in shape) if shape else "0"
    return f"{full_name.replace('/', '--')}_{io}_{slot}_shape_{dims}_{dtype}_{fmt}.bin"


def _full_names(rank_dir: Path) -> dict[tuple[int, str], str]:
    """(graph id, sanitised name) -> full scope name, from the execution order."""
    out: dict[tuple[int, str], str] = {}
    for f in sorted((rank_dir / "execution_order").glob("ms_execution_order_graph_*.csv")):
        graph = int(f.stem.rsplit("_", 1)[1])
        with open(f, newline="") as fh:
            for row in list(csv.reader(fh))[1:]:
                if row and row[0].strip():
                    out[(graph, sanitize_v23(row[0].strip()))] = row[0].strip()
    return out


def write_tree(
    src: Path, dst: Path, *, form: str = "device", trans_flag: bool = True, device_formats: bool = False
) -> dict[str, int]:
    """Write the `.bin` tree of npy dump `src` (a dump root holding rank_N/) to `dst`; returns counts."""
    if form not in ("device", "cpu"):
        raise ValueError(f"form must be 'device' or 'cpu', not {form!r}")
    if device_formats and (trans_flag or form == "cpu"):
        raise ValueError("device formats are written by a device without trans_flag only")
    counts = {"files": 0, "bytes": 0}
    for rank_dir in sorted(src.glob("rank_*")):
        rank = int(rank_dir.name.split("_")[1])
        names = _full_names(rank_dir)
        config = rank_dir / ".dump_metadata" / "data_dump.json"
        if config.is_file():
            settings = json.loads(config.read_text())
            settings.setdefault("e2e_dump_settings", {})["trans_flag"] = trans_flag
            (dst / ".metadata").mkdir(parents=True, exist_ok=True)
            (dst / ".metadata" / "data_dump.json").write_text(json.dumps(settings, indent=4) + "\n")
        for leaf in sorted(p for p in rank_dir.glob("*/*/*") if p.is_dir() and p.name.isdigit()):
            net, graph, iteration = leaf.parts[-3], int(leaf.parts[-2]), int(leaf.name)
            net_dir = dst / net if form == "cpu" else dst / net / f"device_{rank}"
            if form == "device":
                write_v1_graphs(rank_dir, net_dir)
            out_dir = net_dir / f"iteration_{iteration}"
            out_dir.mkdir(parents=True, exist_ok=True)
            for f in sorted(leaf.glob("*.npy")):
                tn = parse_tensor_name(f.name)
                arr = np.load(f)
                fmt = device_format_for(tn.op_type, tn.io, tn.slot, arr) if device_formats else "ND"
                data = host_to_device(arr, fmt) if fmt != "ND" else arr
                base = TYPE_NAMES[arr.dtype.name]
                token = f"kNumberType{base}" if trans_flag else base
                name = bin_name(
                    names[(graph, tn.op_name)], tn.io, tn.slot, data.shape, token,
                    "DefaultFormat" if fmt == "ND" else fmt,
                )  # fmt: skip
                target = out_dir / name
                if target.exists():
                    raise ValueError(f"two tensors of one iteration would both be {target}")
                target.write_bytes(data.tobytes())
                counts["files"] += 1
                counts["bytes"] += data.nbytes
    return counts


SOURCES = {  # committed tree -> (MindSpore npy dump it is made from, form, trans_flag)
    "kernels_filter_device": ("ms210/kernels_filter/dump", "device", True),
    "kernels_filter_cpu": ("ms210/kernels_filter/dump", "cpu", False),
}


def main(data_dir: Path) -> None:
    for name, (src, form, trans_flag) in SOURCES.items():
        dst = data_dir / "mindspore_bin" / name
        shutil.rmtree(dst, ignore_errors=True)
        counts = write_tree(data_dir / src, dst, form=form, trans_flag=trans_flag)
        print(f"{dst.relative_to(data_dir)}: {counts['files']} .bin files, {counts['bytes']} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data")
