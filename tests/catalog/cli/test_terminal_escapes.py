"""Text from a dump never drives the user's terminal (issue 33): an operator name holding escape
sequences (retitle the window, clear the screen) is printed by `dumpcat sql` with its control
characters shown as `\\xNN`, in table and csv output on a real terminal (a pty); csv written to a
pipe or a file keeps the exact text, and json escapes it as JSON does."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalog import Catalog
from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import REPO, dump_of
from tests.pty_output import read_until_closed

HOSTILE = "Evil\x1b]0;pwned\x07\x1b[2J\x9b31m-op0"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Path:
    """The `simple` sample with one npy file renamed so that its op name holds escapes."""
    tmp = tmp_path_factory.mktemp("escapes")
    dump = Path(shutil.copytree(dump_of("simple"), tmp / "dump"))
    leaf = dump / "rank_0/Net/0/0"
    victim = sorted(leaf.glob("ReLU.*.npy"))[0]
    parts = victim.name.split(".")
    parts[1] = HOSTILE
    victim.rename(leaf / ".".join(parts))
    with Catalog.open(tmp / "cat", create=True) as cat:
        cat.ingest(dump, run="r")
        assert (
            cat.sql("SELECT count(*) FROM tensors WHERE file_op_name = $n", {"n": HOSTILE})
            .column(0)[0]
            .as_py()
        )
    return tmp / "cat"


def _on_a_terminal(*args: str) -> bytes:
    """Run `dumpcat` with its stdout on a pty, as a user's terminal; what it wrote there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog.cli", *args], stdout=follower, stderr=subprocess.PIPE, cwd=REPO
    )
    os.close(follower)
    out = read_until_closed(leader, proc)
    assert proc.wait(60) == 0, proc.stderr.read()
    return out


QUERY = "SELECT DISTINCT file_op_name FROM tensors WHERE file_op_name LIKE 'Evil%'"


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_escapes_are_shown_not_sent_on_a_terminal(catalog, fmt):
    out = _on_a_terminal("sql", str(catalog), QUERY, "--format", fmt)
    assert b"\x1b" not in out and b"\x07" not in out and "\x9b".encode() not in out
    assert b"Evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m-op0" in out


def test_csv_to_a_pipe_keeps_the_exact_text_and_json_escapes(catalog):
    run = [sys.executable, "-m", "catalog.cli", "sql", str(catalog), QUERY, "--format"]
    out = subprocess.run([*run, "csv"], capture_output=True, check=True, cwd=REPO).stdout
    assert out.decode().splitlines()[1] == HOSTILE
    # json: the command's code in this process, its stdout not a terminal (as the pipe above)
    out = dumpcat_in_process("sql", catalog, QUERY, "--format", "json").stdout
    assert "\x1b" not in out and json.loads(out)["file_op_name"] == HOSTILE
