"""The `dumpcat` command line: one click group (`commands.py`) and its terminal output (`output.py`).

Imports nothing heavy itself: each command imports what it needs when it runs, so that
`dumpcat --help` answers at once.
"""
