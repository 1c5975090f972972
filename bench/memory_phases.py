"""Where an ingest's memory peaks: RSS of the ingesting process and its helpers, per step.

`bench_speed.py --only memory` gives one figure, the peak summed over the process tree. This
probe says which step of the ingest holds it. A thread of the ingesting process reads
/proc/<pid>/status of the process and of its helpers every 20 ms. Each sample is tagged with the
step the main thread is in: the walk, building a batch's tables, committing them, the flat writer
resolving a batch, the run's final files (the last batch) or the last merge. The probe prints
each step's peak, split into anonymous and
file-backed (mapped library) memory per process.

Two figures depend on the page cache's state (docs/benchmarks.md, *Memory*): the file-backed
part of the ingesting process (51-146 MiB of the same libraries), and so the totals. Compare
only runs made back to back.

    python bench/memory_phases.py TREE --catalog SCRATCH_DIR [--no-stats]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ingest.pipeline as pipeline
import ingest.storage.flat as flat_mod
import ingest.storage.store as store_mod

# (class, method, step): the step a call of the method is, while it runs
STEPS = [
    (pipeline.Ingester, "_batch_tables", "batch tables"),
    (store_mod.CatalogStore, "commit_batch", "commit"),
    (flat_mod.FlatWriter, "after_batch", "flat: resolve a batch"),
    (flat_mod.FlatWriter, "resolve_run", "flat: the run's final files"),
    (flat_mod.FlatWriter, "consolidate", "flat: last merge"),
]


def _memory(pid: int) -> tuple[int, int] | None:
    """(anonymous, file-backed) resident MiB of a process, or None if it is gone."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("RssAnon", "RssFile"):
                    values[key] = int(value.split()[0]) >> 10
    except OSError:
        return None
    if len(values) < 2:  # a zombie
        return None
    return values["RssAnon"], values["RssFile"]


def _children(pid: int) -> list[int]:
    """Every descendant of `pid`."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                for child in children.read().split():
                    found += [int(child), *_children(int(child))]
    except OSError:
        pass
    return found


def _command(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""


class PhaseSampler:
    """Samples the process tree every `interval` seconds; keeps the peak of each step."""

    def __init__(self, interval: float = 0.02) -> None:
        self.step = "start-up"
        self.peaks: dict[str, tuple[int, str]] = {}
        self.interval = interval
        self._own = _command(os.getpid())
        self._lock = threading.Lock()  # the sampler thread and a step's start and end both sample

    def sample(self) -> None:
        own = _memory(os.getpid())
        if own is None:
            return
        # a child between fork and exec runs on this process's pages: it is not a helper yet
        helpers = [m for c in _children(os.getpid()) if _command(c) != self._own and (m := _memory(c))]
        total = sum(own) + sum(a + f for a, f in helpers)
        shown = " ".join(f"{a}+{f}" for a, f in helpers) or "none"
        with self._lock:
            if total > self.peaks.get(self.step, (0, ""))[0]:
                self.peaks[self.step] = (total, f"ingesting process {own[0]}+{own[1]}, helpers {shown}")

    def run(self) -> None:
        while True:
            self.sample()
            time.sleep(self.interval)

    def tag(self, cls: type, name: str, step: str) -> None:
        """Make calls of cls.name count as `step` while they run."""
        original = getattr(cls, name)

        @functools.wraps(original)
        def tagged(*args, **kwargs):
            outer, self.step = self.step, step
            self.sample()  # (a step shorter than the interval is still seen)
            try:
                return original(*args, **kwargs)
            finally:
                self.sample()
                self.step = outer

        setattr(cls, name, tagged)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", help="the dump to ingest")
    parser.add_argument("--catalog", required=True, help="catalog to write (removed first)")
    parser.add_argument("--no-stats", action="store_true", help="do not compute statistics from the data")
    args = parser.parse_args(argv)
    shutil.rmtree(args.catalog, ignore_errors=True)
    sampler = PhaseSampler()
    for cls, name, step in STEPS:
        sampler.tag(cls, name, step)
    threading.Thread(target=sampler.run, daemon=True).start()
    sampler.step = "walk"
    started = time.perf_counter()
    summary = pipeline.ingest_dump(args.catalog, args.tree, run="probe", compute_stats=not args.no_stats)
    seconds = time.perf_counter() - started
    print(f"{summary.tensors:,} tensors in {seconds:.1f} s; peak RSS per step, MiB (anonymous+file-backed):")
    for step, (total, detail) in sorted(sampler.peaks.items(), key=lambda item: -item[1][0]):
        print(f"  {step:24s} {total:5d}  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
