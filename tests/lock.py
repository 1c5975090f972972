"""constraints.txt: the exact versions dumpcat is tested with, for the image and for CI.

pyproject.toml gives ranges (`duckdb>=2.0,<3`); an install from it takes whatever is newest that
day, so two builds of one commit could differ, and differ from what the suite passed on.
constraints.txt pins every distribution that `pip install -e '.[test,spark,report,pandas,polars]'`
brings in (the core dependencies, each extra and all of theirs), as installed in the environment
the suite passed in. The Dockerfile and `.ci/run` install with `pip install -c constraints.txt ...`;
tests/test_dependencies.py checks that the pins satisfy
pyproject's ranges, cover every dependency and are what the suite runs on.

    python -m tests.lock           # rewrite constraints.txt from this environment
    python -m tests.lock --check   # exit 1 (saying what differs) if it is not current
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
EXTRAS = ("test", "spark", "report", "pandas", "polars")  # every extra; the image installs the core alone
HEADER = """\
# The versions dumpcat is tested with: every distribution that
# `pip install -e '.[test,spark,report,pandas,polars]'` installs. Written by `python -m tests.lock`
# (after a dependency change, install, run the suite, then run it); checked by
# tests/test_dependencies.py. Used as `pip install -c constraints.txt ...` by the Dockerfile and
# .ci/run. Resolved on Linux x86_64, CPython 3.11.
"""


def project_requirements(extras: tuple[str, ...] = EXTRAS) -> list[Requirement]:
    """pyproject.toml's core dependencies and those of `extras`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    return [Requirement(s) for s in specs]


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    env = default_environment()
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))


def closure(requirements: list[Requirement]) -> dict[str, str]:
    """{distribution: installed version} of `requirements` and everything they require, as this
    environment has them installed (markers evaluated here). KeyError names one not installed."""
    found: dict[str, str] = {}
    todo = [(r, set(r.extras)) for r in requirements if _applies(r, set())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        key = (name, frozenset(extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise KeyError(name) from None
        found[name] = dist.version
        for spec in dist.requires or []:
            sub = Requirement(spec)
            if _applies(sub, extras):
                todo.append((sub, set(sub.extras)))
    return found


def read_lock(path: Path | None = None) -> dict[str, str]:
    """{distribution: version} of a constraints file of `name==version` lines (constraints.txt)."""
    pins: dict[str, str] = {}
    for line in (path or LOCK).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if m is None:
            raise ValueError(f"{path.name}: not a `name==version` line: {line!r}")
        pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={pins[name]}\n" for name in sorted(pins))


def main(argv: list[str]) -> int:
    pins = closure(project_requirements())
    pins.pop("dumpcat", None)
    if "--check" in argv:
        current = LOCK.read_text(encoding="utf-8") if LOCK.exists() else ""
        if current != render(pins):
            locked = read_lock() if LOCK.exists() else {}
            diff = sorted(
                f"{n}: locked {locked.get(n, '-')}, installed {pins.get(n, '-')}"
                for n in set(locked) | set(pins)
                if locked.get(n) != pins.get(n)
            )
            print("constraints.txt is not current:\n  " + "\n  ".join(diff or ["(formatting)"]))
            return 1
        return 0
    LOCK.write_text(render(pins), encoding="utf-8")
    print(f"wrote {LOCK.name}: {len(pins)} distributions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
