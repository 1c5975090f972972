"""Derive the other on-disk forms of an msprobe dump from a REAL msprobe tree (no torch needed).

Runs with the project venv:  .venv/bin/python tests/writers/msprobe_forms.py {oldstack,pkl} ...

1. stack.json forms (reference msprobe-cann-formats.md §1.3):
   - new, grouped form (what msprobe 26.2.0 writes):
       {"0": [[entry keys sharing this stack...], ["File {path}, line {n}, in {func}, \\n {code}", ...]], ...}
   - old, flat form (MSTT before commit ed9a4f7c, 2025-05-06):
       {"<entry key>": ["File {path}, line {n}, in {func}, \\n {code}", ...], ...}
   `new_to_old` flattens, `old_to_new` groups identical stacks again (first-seen order).

2. ptdbg_ascend's JSON-lines `*.pkl` (the predecessor of msprobe; see tests/data/msprobe/README.md
   for the evidence). One `json.dumps` array per line:
       tensor: [name, dump_step, md5, dtype, shape, summary]
         name    = "{Prefix}_{api}_{count}_{forward|backward}_{input|output}" + ".{i}" per list level
         md5     = [] (statistics) or the checksum string (md5 summary mode, summary then [])
         summary = [max, min, mean, norm]  (older ptdbg releases wrote only [max, min, mean])
       stack:  [name + "_stack_info", [[path, "lineno", func, code], ...]]   (innermost frame first)
   Only API entries are written (ptdbg dumped APIs, not modules); kwargs are not written (ptdbg's
   hook received positional inputs only). Backward "input" = gradients w.r.t. the forward outputs
   and backward "output" = gradients w.r.t. the forward inputs, as in msprobe.
   The implementation is written from that description, not copied from ptdbg_ascend.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

_STACK_LINE = re.compile(r"^File (.*), line (\d+), in (.*?), \n (.*)$", re.S)


# ----------------------------------------------------------------------------- stack.json forms
def is_new_stack(obj: dict) -> bool:
    """msprobe's own test: the grouped form has the key "0"."""
    return "0" in obj


def new_to_old(obj: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for _idx, (names, lines) in obj.items():
        for name in names:
            out[name] = list(lines)
    return out


def old_to_new(obj: dict) -> dict[str, list]:
    groups: dict[tuple, list[str]] = {}
    for name, lines in obj.items():
        groups.setdefault(tuple(lines), []).append(name)
    return {str(i): [names, list(lines)] for i, (lines, names) in enumerate(groups.items())}


# ----------------------------------------------------------------------------- ptdbg .pkl lines
def _legacy_api_name(key: str) -> str | None:
    """'Functional.linear.0.forward' -> 'Functional_linear_0_forward'; modules -> None."""
    parts = key.split(".")
    if parts[0] in ("Module", "Cell") or len(parts) < 4 or parts[-1] not in ("forward", "backward"):
        return None
    prefix, count, direction = parts[0], parts[-2], parts[-1]
    api = ".".join(parts[1:-2])  # api names may contain dots (e.g. Aten ops 'add.Tensor')
    return f"{prefix}_{api}_{count}_{direction}"


def _tensor_lines(obj: Any, name: str, dump_step: int, out: list) -> None:
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            _tensor_lines(item, f"{name}.{i}", dump_step, out)
        return
    if not isinstance(obj, dict) or "dtype" not in obj or "shape" not in obj:
        return  # None, scalars and other non-tensors: skipped (ptdbg's default filter)
    if "md5" in obj:
        md5, summary = obj["md5"], []
    else:
        md5, summary = [], [obj.get("Max"), obj.get("Min"), obj.get("Mean"), obj.get("Norm")]
    out.append([name, dump_step, md5, obj["dtype"], list(obj["shape"]), summary])


def _stack_frames(lines: list[str]) -> list[list[str]]:
    frames = []
    for line in lines:
        m = _STACK_LINE.match(line)
        if m:
            path, lineno, func, code = m.groups()
            frames.append([path, lineno, func, code.strip()])
    return frames


def dump_json_to_pkl_lines(dump: dict, stack: dict | None, dump_step: int = 1) -> list[list]:
    stacks = new_to_old(stack) if stack and is_new_stack(stack) else (stack or {})
    lines: list[list] = []
    for key, body in dump["data"].items():
        base = _legacy_api_name(key)
        if base is None:
            continue
        if key.endswith(".forward"):
            ins, outs = body.get("input_args", []), body.get("output", [])
        else:
            ins, outs = body.get("input", []), body.get("output", [])
        _tensor_lines(ins, f"{base}_input", dump_step, lines)
        # a single output tensor was dumped without an index by ptdbg
        if isinstance(outs, list) and len(outs) == 1:
            _tensor_lines(outs[0], f"{base}_output", dump_step, lines)
        else:
            _tensor_lines(outs, f"{base}_output", dump_step, lines)
        if key in stacks:
            lines.append([f"{base}_stack_info", _stack_frames(stacks[key])])
    return lines


# ----------------------------------------------------------------------------- CLI
def _load(p: Path) -> Any:
    return json.loads(p.read_text())  # accepts msprobe's bare NaN / Infinity


def make_oldstack(src_tree: Path, dst_tree: Path, steps: list[str]) -> None:
    """Copy src steps, rewriting each rank dir's stack.json into the old flat form."""
    if dst_tree.exists():
        shutil.rmtree(dst_tree)
    for step in steps:
        for rank_dir in sorted((src_tree / step).iterdir()):
            dst = dst_tree / step / rank_dir.name
            shutil.copytree(rank_dir, dst)
            stack = _load(rank_dir / "stack.json")
            (dst / "stack.json").write_text(json.dumps(new_to_old(stack), indent=1, ensure_ascii=False))


def make_pkl(src_tree: Path, dst_tree: Path, version: str = "4.0", mode: str = "api_stack") -> None:
    if dst_tree.exists():
        shutil.rmtree(dst_tree)
    root = dst_tree / f"ptdbg_dump_v{version}"
    for step_dir in sorted(p for p in src_tree.iterdir() if p.name.startswith("step")):
        for rank_dir in sorted(step_dir.iterdir()):
            dump = _load(rank_dir / "dump.json")
            stack = _load(rank_dir / "stack.json") if mode == "api_stack" else None
            lines = dump_json_to_pkl_lines(dump, stack)
            out = root / step_dir.name / rank_dir.name / (f"{mode}_dump.pkl" if mode != "all" else "dump.pkl")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("".join(json.dumps(line) + "\n" for line in lines))


# Where the committed trees say their files were: the machine that wrote them is not named in the
# repository. msprobe records absolute paths (stack frames, dump_data_dir); `anonymise` rewrites
# those prefixes, and nothing else, in every .json and .pkl file of a tree.
NEUTRAL_PREFIXES = {
    "site-packages": "/opt/venv/lib/python3.11/site-packages",
    "stdlib": "/usr/lib/python3.11",
    "script": "/home/user/msprobe_demo",
    "dump": "/home/user/msprobe_demo/dump",
}


def anonymise(tree: Path, prefixes: dict[str, str]) -> int:
    """Rewrite the machine's path prefixes (`prefixes`: NEUTRAL_PREFIXES key -> this machine's
    prefix) to the neutral ones; the longest prefix first. Returns the number of files changed."""
    pairs = sorted(((real, NEUTRAL_PREFIXES[k]) for k, real in prefixes.items()), key=lambda p: -len(p[0]))
    changed = 0
    for path in sorted(tree.rglob("*")):
        if not path.is_file() or path.suffix not in (".json", ".pkl"):
            continue
        text = path.read_text(encoding="utf-8")
        new = text
        for real, neutral in pairs:
            new = new.replace(real, neutral)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def main(argv: list[str]) -> int:
    data = Path(__file__).resolve().parents[1] / "data" / "msprobe"
    if argv[:1] == ["anonymise"]:
        # anonymise SITE_PACKAGES STDLIB SCRIPT_DIR DUMP_ROOT: the prefixes of the machine that ran
        # msprobe_dumps.py (it calls this itself after writing the trees)
        prefixes = dict(zip(("site-packages", "stdlib", "script", "dump"), argv[1:5], strict=True))
        for tree in sorted(p for p in data.iterdir() if p.is_dir()):
            anonymise(tree, prefixes)
        return 0
    if argv[:1] == ["oldstack"]:
        make_oldstack(data / "pt_mix_tensor", data / "pt_mix_tensor_oldstack", ["step0"])
    elif argv[:1] == ["pkl"]:
        make_pkl(data / "pt_mix_tensor", data / "pt_pkl_legacy")
    else:
        print("usage: msprobe_forms.py oldstack|pkl|anonymise SITE STDLIB SCRIPT DUMP", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
