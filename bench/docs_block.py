"""Replace generated blocks of a markdown file between HTML-comment markers, and nothing else.

A block is `<!-- name -->` ... `<!-- /name -->`; `python -m bench` (bench/__main__.py) owns the
blocks of docs/benchmarks.md and README.md and rewrites them from a run. Everything outside the
markers is hand-written (what a benchmark measures, why, how to run it) and is kept byte for byte,
which tests/test_bench_suite.py checks."""

from __future__ import annotations

import re


def markers(name: str) -> tuple[str, str]:
    """The opening and closing marker of the block `name`."""
    return f"<!-- {name} -->", f"<!-- /{name} -->"


def block_text(doc: str, name: str) -> str | None:
    """What the block `name` holds now (None when the document has no such block)."""
    start, end = markers(name)
    if doc.count(start) != 1 or doc.count(end) != 1:
        return None
    inner = doc.split(start, 1)[1].split(end, 1)[0]
    return inner[1:] if inner.startswith("\n") else inner


def replace_block(doc: str, name: str, text: str) -> str:
    """`doc` with the block `name` holding `text`. The block must exist exactly once: a generated
    section is placed by hand (under its heading, after its method text), never appended
    somewhere a reader would not look."""
    start, end = markers(name)
    if doc.count(start) != 1 or doc.count(end) != 1:
        raise ValueError(f"the document needs exactly one {start} ... {end} block")
    head, rest = doc.split(start, 1)
    _, tail = rest.split(end, 1)
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{head}{start}\n{text}{end}{tail}"


def block_names(doc: str) -> list[str]:
    """Names of the blocks the document has (each opened and closed), in order."""
    opened = re.findall(r"<!-- ([\w.-]+) -->", doc)
    return [name for name in opened if f"<!-- /{name} -->" in doc]
