"""The `dumpcat` command line: one click group (`commands.py`) and its terminal output (`output.py`).

Imports nothing heavy itself: each command imports what it needs when it runs, so that
`dumpcat --help` answers at once.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The `dumpcat` console script (pyproject.toml): the click group of commands.py."""
    from catalog.cli.commands import main as run

    run(argv)
