"""msprobe dump.json ingest speed: entries per second on a dump.json of 10^5 entries.

The file is built from the real entries of tests/data/msprobe/pt_md5 (statistics task, mix level,
md5 summaries: API and module entries, forward and backward, nested list arguments), repeated with
fresh call counts until it holds `--entries` entries, in one step/rank folder with a stack.json
(grouped as msprobe writes it: each distinct stack once, with the keys of the calls that had it)
and a construct.json of the same entries. Each round ingests it into a fresh catalog (`ingest_dump`),
with the default workers and with `workers=1` (a dump.json is parsed in the ingesting process:
the workers matter for other files). The baseline, in the same process, is `json.loads` of the
same bytes: the least any reader must do. Target: >= 50,000 entries/s.

    python bench/bench_msprobe.py                 # 100,000 entries, 5 rounds
    python bench/bench_msprobe.py --entries 20000 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
from bench_core import Report, machine  # noqa: E402

SOURCE = HERE.parent / "tests" / "data" / "msprobe" / "pt_md5" / "step1" / "rank0"


def renamed_key(key: str, copy: int) -> str:
    """The key of the `copy`-th repetition: its call count moved by copy * 1000."""
    parts = key.split(".")
    for i in (len(parts) - 1, len(parts) - 2):
        if parts[i].isdigit():
            parts[i] = str(int(parts[i]) + copy * 1000)
            return ".".join(parts)
    return f"{key}.{copy}"


def build(root: Path, entries: int) -> tuple[Path, int, int]:
    """A dump path with one step/rank holding `entries` entries; (dump.json path, entries, tensors)."""
    dump = json.loads((SOURCE / "dump.json").read_text())
    stack = json.loads((SOURCE / "stack.json").read_text())
    construct = json.loads((SOURCE / "construct.json").read_text())
    template = list(dump["data"].items())
    flat_stack = {name: group[1] for group in stack.values() for name in group[0]}
    data, stacks, tree = {}, {}, {}
    copy = 0
    while len(data) < entries:
        for key, body in template:
            if len(data) >= entries:
                break
            new = renamed_key(key, copy)
            data[new] = body
            if key in flat_stack:
                stacks[new] = flat_stack[key]
            parent = construct.get(key)
            tree[new] = renamed_key(parent, copy) if parent and parent != "optimizer" else parent
        copy += 1
    rank = root / "dump" / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps(dict(dump, data=data), indent=1))
    # msprobe writes each distinct stack once with the keys of every call that had it (the
    # repeated calls here come from the same lines, as the layers of a deep model do)
    groups: dict[tuple, list[str]] = {}
    for key, frames in stacks.items():
        groups.setdefault(tuple(frames), []).append(key)
    grouped = {str(i): [keys, list(frames)] for i, (frames, keys) in enumerate(groups.items())}
    (rank / "stack.json").write_text(json.dumps(grouped, indent=1))
    (rank / "construct.json").write_text(json.dumps(tree, indent=1))
    tensors = sum(1 for body in data.values() for _ in _tensors(body))
    return rank / "dump.json", len(data), tensors


def _tensors(obj):
    if isinstance(obj, dict):
        if "dtype" in obj and "shape" in obj:
            yield obj
            return
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _tensors(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    from ingest.pipeline import ingest_dump

    rep = Report()
    started = time.time()
    with tempfile.TemporaryDirectory() as td:
        work = Path(td)
        path, entries, tensors = build(work, args.entries)
        size = path.stat().st_size
        rep.add("-", "dump.json built", entries, "entries", note=f"{tensors:,} tensors, {size / 1e6:.1f} MB")
        loads: list[float] = []
        ingests: dict[int | None, list[float]] = {None: [], 1: []}
        for i in range(args.repeat):
            t = time.perf_counter()
            json.loads(path.read_bytes())
            loads.append(time.perf_counter() - t)
            for workers, times in ingests.items():  # interleaved: default workers, then one process
                cat = work / f"cat{i}_{workers}"
                t = time.perf_counter()
                s = ingest_dump(cat, work / "dump", run="bench", workers=workers)
                times.append(time.perf_counter() - t)
                assert s.stat_rows == tensors and s.errors == 0, s
                shutil.rmtree(cat)
        best_load = min(loads)
        for workers, times in ingests.items():
            best = min(times)
            rate = entries / best
            label = "default workers" if workers is None else f"workers={workers}"
            target = workers is None
            rounds = ", ".join(f"{x:.2f}" for x in times)
            rep.add(
                "a", f"ingest of dump.json (+stack, construct), {label}", rate, "entries/s",
                target=">= 50,000" if target else None, ok=rate >= 50_000 if target else None,
                note=f"{best:.2f} s; {tensors / best:,.0f} tensors/s; rounds: {rounds} s",
            )  # fmt: skip
            rep.add(
                "a", f"ingest time / json.loads time, {label}", best, "s", baseline=best_load,
                ratio=best / best_load, note="json.loads of the same bytes, same process",
            )  # fmt: skip
    params = {
        "command": "python bench/bench_msprobe.py " + " ".join(sys.argv[1:]),
        "entries": f"{args.entries:,}",
        "rounds": args.repeat,
        "total runtime": f"{time.time() - started:.0f} s",
    }
    rep.emit_summary()
    emit.report_follows()
    print(rep.markdown(machine(), params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
