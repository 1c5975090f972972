"""dumpcat's structure, read from its own imports: the layers, the imports between modules, and
any import that runs back up or closes a cycle (issue 34).

Every `import` and `from ... import` of `catalog/` and `ingest/` counts, also those inside
functions (a cycle hidden in a function is still a cycle); those under `if TYPE_CHECKING:` do not
(they never run). `python tests/import_layers.py --write` regenerates docs/structure.md, the picture
of the structure; tests/test_import_layers.py checks that it is current and that the layers hold.
"""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ingest", "catalog")
STRUCTURE = ROOT / "docs" / "structure.md"

# Layers from the bottom up: a module may import its own layer and the layers below it. The ingest
# side: the catalog on disk (storage) -> byte formats (bytes to values, by producer family) -> the
# kernels that compute over tensors and the processes they use -> one reader per producer -> the
# producer-agnostic pipeline and the watcher. The catalog
# side: the query core (views, the guard) -> the operations a Catalog offers (compare, missing
# statistics, export, the report, the Spark jobs), each taking what it needs as arguments -> the
# `Catalog` API, a facade over them -> the front ends that serve a user (the CLI, the server, the
# DB-API driver and SQLAlchemy dialect).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("storage", ("ingest.storage",)),
    ("formats", ("ingest.formats",)),
    (
        "kernels",
        (
            "ingest.statistics",
            "ingest.compare_metrics",
            "ingest._compare_kernel",
            "ingest.helper_pool",
            "ingest.ids",
            "ingest.row_id_set",
            "ingest.errors",
            "ingest.files",
        ),
    ),
    ("readers", ("ingest.readers",)),
    ("pipeline", ("ingest",)),
    ("query", ("catalog.views", "catalog.guard", "catalog.session_commands", "catalog.tensor_index")),
    (
        "operations",
        ("catalog.compare", "catalog.missing_stats", "catalog.export", "catalog.report", "catalog.spark"),
    ),
    ("api", ("catalog",)),
    ("front ends", ("catalog.cli", "catalog.server", "catalog.dbapi", "catalog.sqlalchemy_dialect")),
]


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages: the Python ones, and the C
    extensions setup.py builds from a `.c` file beside them (they import nothing of ours)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted([*(ROOT / package).rglob("*.py"), *(ROOT / package).rglob("*.c")]):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of `known` an import statement of the file names. `from package import
    module` names the module only (a package's __init__ runs before any of its modules anyway)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            members = {f"{module}.{alias.name}" for alias in node.names}
            names.update(members)
            if not members & known:
                names.add(module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports."""
    mods = modules()
    known = set(mods)
    return {
        name: {m for m in _imported(name, path, known) if m in known and m != name}
        if path.suffix == ".py"
        else set()
        for name, path in mods.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def layer_of(module: str) -> int:
    """The index in LAYERS of the most specific layer holding `module`."""
    best, length = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = i, len(prefix)
    return best


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a lower layer imports a higher one."""
    return sorted((a, b) for a, deps in graph.items() for b in deps if layer_of(b) > layer_of(a))


def structure_markdown(graph: dict[str, set[str]]) -> str:
    """docs/structure.md: the layers, their modules, and the imports between groups (mermaid)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for module in graph:
        parts = module.split(".")
        groups[".".join(parts[:2]) if len(parts) > 2 else module].append(module)

    def group_of(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 else module

    edges = sorted(
        {(group_of(a), group_of(b)) for a, deps in graph.items() for b in deps} - {(g, g) for g in groups}
    )
    node = {g: g.replace(".", "_") for g in groups}
    lines = [
        "# dumpcat's structure",
        "",
        "Generated from the code's imports by `python tests/import_layers.py --write` (checked by",
        "tests/test_import_layers.py). Layers from the bottom up; a module imports its own layer and",
        "the ones below. Each box is a module, or a subpackage with its modules inside; an arrow is an",
        "import (also one inside a function; not one under `TYPE_CHECKING`).",
        "",
    ]
    for i, (title, prefixes) in enumerate(LAYERS):
        members = sorted(m for m in graph if layer_of(m) == i)
        lines.append(f"- **{title}** (`{'`, `'.join(prefixes)}`): {len(members)} modules")
    found = cycles(graph)
    lines += ["", f"Import cycles: {len(found)}."]
    lines += [f"- {', '.join(c)}" for c in found]
    up = upward_imports(graph)
    lines += ["", f"Imports that run up a layer: {len(up)}."]
    lines += [f"- {a} imports {b}" for a, b in up]
    lines += ["", "```mermaid", "flowchart BT"]
    for i, (title, _) in enumerate(LAYERS):
        lines.append(f"  subgraph {title}")
        for g in sorted(g for g in groups if layer_of(g) == i):
            label = g if len(groups[g]) == 1 else f"{g} ({len(groups[g])} modules)"
            lines.append(f'    {node[g]}["{label}"]')
        lines.append("  end")
    lines += [f"  {node[a]} --> {node[b]}" for a, b in edges]
    lines += ["```", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write docs/structure.md")
    args = ap.parse_args()
    graph = import_graph()
    text = structure_markdown(graph)
    if args.write:
        STRUCTURE.write_text(text, encoding="utf-8")
    else:
        print(text)


if __name__ == "__main__":
    main()
