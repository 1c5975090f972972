"""Write a benchmark's report into docs/benchmarks.md between its two HTML-comment markers.

Each benchmark script owns one block (`<!-- bench_x -->` ... `<!-- /bench_x -->`); a re-run replaces
that block and nothing else, so hand-written notes around it survive."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_block(name: str, text: str, heading: str) -> None:
    """Replace the block of `name` (e.g. "bench_speed") with `text`; append it under `heading`
    when the file has no such block yet."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    doc = DOCS.read_text(encoding="utf-8")
    block = f"{start}\n{text}{end}"
    if start in doc and end in doc:
        head, rest = doc.split(start, 1)
        _, tail = rest.split(end, 1)
        doc = head + block + tail
    else:
        doc = doc.rstrip("\n") + f"\n\n## {heading}\n\n" + block + "\n"
    DOCS.write_text(doc, encoding="utf-8")
