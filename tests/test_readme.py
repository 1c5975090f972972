"""The README's example outputs are what the commands print today: every `$ dumpcat ... demo.cat`
block is run on the catalog the README's set-up command builds, and its output compared line by line."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of each indented `$ dumpcat` block that uses demo.cat."""
    lines = (ROOT / "README.md").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^    \$ (dumpcat .*demo\.cat.*)$", line)
        if not m:
            continue
        command = re.split(r"\s{2,}#", m.group(1))[0]
        expected = []
        for body in lines[i + 1 :]:
            if not body.startswith("    ") or body.startswith("    $ "):
                break
            expected.append(body[4:].rstrip())
        out.append((command, expected))
    return out


def test_readme_examples_print_what_the_readme_shows(tmp_path):
    setup = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if "--catalog demo.cat" in ln)
    ingest = re.search(r"dumpcat ingest \S+ --catalog demo\.cat(?: --run \S+)?", setup)
    assert ingest, setup
    cli = [sys.executable, "-m", "catalog.cli"]
    args = shlex.split(ingest.group(0))[1:]
    args[1] = str(ROOT / args[1])  # the dump shipped in the repo
    summary = subprocess.run([*cli, *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    # The ingest summary the README shows has the counts this ingest printed (path and timing vary).
    shown = next(
        ln.strip() for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("    run '")
    )
    counts = re.compile(r"^run '(\S+)' \(.*?\): (.*) in [\d.]+ s .*$")
    detected, printed = summary.strip().splitlines()
    assert counts.match(shown).groups() == counts.match(printed).groups(), (shown, summary)
    # So is the line before it, which says what detection found (the README shows a relative path).
    shown_detected = next(
        ln.strip() for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("    tests/data/")
    )
    assert detected.split(": ", 1)[1] == shown_detected.split(": ", 1)[1], (shown_detected, detected)
    found = examples()
    assert len(found) >= 3
    # The set-up command's own answer is among the examples shown.
    last = setup.rsplit("&&", 1)[1].strip()
    assert last in [command for command, _ in found], last
    for command, expected in found:
        proc = subprocess.run([*cli, *shlex.split(command)[1:]], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, (command, proc.stderr)
        assert [ln.rstrip() for ln in proc.stdout.splitlines()] == expected, command
