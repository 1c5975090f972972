"""The producers table of docs/producers.md, rendered from the reader registry (issue 34: adding
a producer is one module, its tests and its registry line; its row in the table comes from the
reader's class attributes `dumped_by`, `tree`, `cataloged` and `decoders`).

`python tests/producers_table.py --write` rewrites the table in place (between its markers);
tests/ingest/readers/test_readers_registry.py checks that the page shows today's table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "producers.md"
BEGIN = "<!-- producers table: generated from ingest/readers/registry.py by tests/producers_table.py -->"
END = "<!-- end of the producers table -->"


def _path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def producers_table() -> str:
    """The markdown table: one row per built-in reader, in detection order."""
    from ingest.readers.registry import built_in_readers

    rows = ["| producer (`--producer`) | layout | reader module | what is cataloged |", "|---|---|---|---|"]
    for reader in built_in_readers():
        module = f"[`{Path(_path(reader.__module__)).name}`](../{_path(reader.__module__)})"
        if reader.decoders:
            links = [f"[`{_path(d).removeprefix('ingest/')}`](../{_path(d)})" for d in reader.decoders]
            decoders = ", ".join(links)
            module += f" (decoders: {decoders})"
        cells = [f"`{reader.name}`: {reader.dumped_by}", reader.tree, module, reader.cataloged]
        rows.append("| " + " | ".join(c.replace("|", "\\|").replace("\\\\|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def page_with_table(page: str) -> str:
    """`page` with the text between the markers replaced by today's table."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + producers_table() + "\n" + page[end:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="rewrite the table in docs/producers.md")
    args = ap.parse_args()
    if args.write:
        PAGE.write_text(page_with_table(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(producers_table())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
