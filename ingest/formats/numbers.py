"""Decimal fields of dump files, checked before they become catalog integers.

`str.isdigit()` accepts '²' and other Unicode digits that `int()` refuses, and a digit run of any
length parses to a Python int that no BIGINT column holds. Every parser that turns dump text into
an integer column goes through `parse_uint`, so such input becomes that parser's own error, never a
traceback at `int()` or when rows are converted to Arrow.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def parse_uint(text: str, limit: int = INT64_MAX) -> int | None:
    """`text` as a non-negative integer if it is ASCII digits worth at most `limit`, else None."""
    if not text or len(text) > 19 or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= limit else None


def parse_int(text: str, limit: int = INT64_MAX) -> int | None:
    """`parse_uint` that also takes a leading '-' (MindSpore writes column -1 for "unknown")."""
    if text.startswith("-"):
        value = parse_uint(text[1:], limit)
        return None if value is None else -value
    return parse_uint(text, limit)
