"""What `pip install .` installs is enough to run dumpcat: every third-party package a shipped module
imports when it loads is a core dependency in pyproject.toml (an optional extra only for its own
front end: Spark). `dumpcat serve` once imported sqlglot, which only the test and spark extras
installed: after the README's `pip install -e .` it ended with a traceback."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from tests.conftest import REPO

# modules that may import the packages of an extra, and which
EXTRAS = {"catalog/spark/": "spark"}


def _requirement_names(specs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}


def _top_level_imports(path) -> set[str]:
    """Packages a module imports when it loads: module-level statements, not those inside functions
    (imported when called) or under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return names


def test_every_package_a_shipped_module_imports_is_a_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = _requirement_names(project["dependencies"])
    extras = {name: _requirement_names(specs) for name, specs in project["optional-dependencies"].items()}
    distributions = importlib.metadata.packages_distributions()
    ours = {"catalog", "ingest", "sql"}
    missing = []
    for package in ("catalog", "ingest"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            allowed = set(core)
            for prefix, extra in EXTRAS.items():
                if rel.startswith(prefix):
                    allowed |= extras[extra]
            for name in _top_level_imports(path) - ours - set(sys.stdlib_module_names):
                dists = {d.lower().replace("_", "-") for d in distributions.get(name, [name])}
                if not dists & allowed:
                    missing.append(f"{rel}: {name} ({', '.join(sorted(dists))})")
    assert missing == [], "imported when the module loads, but not a core dependency:\n" + "\n".join(missing)
