"""What a benchmark script prints for `python -m bench`: its headline figures as lines the runner
parses, and where its markdown report starts.

The protocol, on standard output (anything else a script prints is progress, shown in the run's
log but not in the docs):

- ``BENCH-SUMMARY<TAB>figure<TAB>target<TAB>measured<TAB>met`` for each headline figure, ``met``
  being ``yes``, ``no`` or ``-`` (no target, or one that a ratio cannot meet or miss). The runner
  puts one row per line into the *Summary* of docs/benchmarks.md.
- ``BENCH-REPORT`` alone on a line: what follows is the script's markdown report, which the runner
  puts into the script's section. A script that never prints it has its whole output shown as
  preformatted text instead.

Written as plain prints so that a script run by hand shows the same thing the runner reads."""

from __future__ import annotations

import os
from pathlib import Path

SUMMARY = "BENCH-SUMMARY"
REPORT = "BENCH-REPORT"


def _cell(text: object) -> str:
    return " ".join(str(text).replace("\t", " ").replace("|", "\\|").split())


def summary(figure: str, target: str, measured: str, met: bool | None = None) -> None:
    """Print one headline figure: what, its target ("" for none), what was measured, and whether the
    target is met (None: no target to meet)."""
    flag = "-" if met is None else ("yes" if met else "no")
    print("\t".join([SUMMARY, _cell(figure), _cell(target) or "-", _cell(measured), flag]), flush=True)


def report_follows() -> None:
    """Print the line after which the script's markdown report comes."""
    print(f"\n{REPORT}", flush=True)


def cpu_and_memory() -> tuple[str, float]:
    """The CPU model ("" where /proc/cpuinfo does not say) and the machine's memory in GiB, for the
    header of a benchmark's report."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return model, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
