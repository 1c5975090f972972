"""`dumpcat` run inside the test's process: the real command code (click's CliRunner invokes the same
`main` group, its one-line errors and exit codes), without the ~0.5 s start-up of a new interpreter.

Tests use it where they check what a command prints or refuses, many times over; each command still
runs as a real process in at least one test (its start-up path: imports, the writer's warm-up,
`python -m catalog.cli`).
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path


def dumpcat_in_process(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`dumpcat ARGS` as a CompletedProcess (returncode, stdout, stderr). An exception the command
    did not turn into its one-line error propagates, as a real process would print a traceback."""
    from click.testing import CliRunner

    from catalog.cli.commands import main

    argv = [str(a) for a in args]
    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        result = CliRunner().invoke(main, argv, prog_name="dumpcat", catch_exceptions=False)
    return subprocess.CompletedProcess(["dumpcat", *argv], result.exit_code, result.stdout, result.stderr)
