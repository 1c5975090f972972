"""The README's example outputs are what the commands print today. From a scratch folder that holds
the clone's tests/data at the same relative path, the README's set-up ingest runs, then every
`dumpcat` command of the page that works on a catalog made from the committed dumps, in the order of
the page: each `$ dumpcat ...` example's output is compared line by line, and each command without a
`$` must succeed. A `…` in a shown line stands for any text (a machine's path). The *HTML report*
section's printed lines, and the error line docs/report.md quotes, are checked the same way."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

from tests.catalog.cli.in_process import dumpcat_in_process
from tests.conftest import REPO

ROOT = REPO
README = ROOT / "README.md"
CLI = [sys.executable, "-m", "catalog.cli"]
# Commands that run until they are stopped: the page shows them, the test does not run them.
LONG_RUNNING = {"watch", "serve"}


@dataclass(frozen=True)
class Command:
    text: str  # the command as shown, without a trailing `# comment`
    expected: tuple[str, ...] | None  # the output shown after a `$ ` command; None without `$`


def commands(lines: list[str]) -> list[Command]:
    """Every indented `dumpcat` command of the page (with or without `$ `), in order."""
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^    (\$ )?(dumpcat .*)$", line)
        if not m:
            continue
        text = re.split(r"\s{2,}#", m.group(2))[0].strip()
        expected = None
        if m.group(1):
            body = []
            for follow in lines[i + 1 :]:
                if not follow.startswith("    ") or follow.startswith("    $ "):
                    break
                body.append(follow[4:].rstrip())
            expected = tuple(body)
        out.append(Command(text, expected))
    return out


def catalog_of(args: list[str]) -> str | None:
    """The catalog a command works on: `--catalog X`, else its first argument after the command."""
    if "--catalog" in args:
        return args[args.index("--catalog") + 1]
    return args[1] if len(args) > 1 else None


def runnable(found: list[Command], built: set[str]) -> list[Command]:
    """The commands that work on catalogs made from the committed dumps (`built` holds the set-up's):
    an ingest of `tests/data/` trees makes one; any other command on one of them is run."""
    out = []
    for command in found:
        args = shlex.split(command.text)[1:]
        if args[0] in LONG_RUNNING:
            continue
        if args[0] == "ingest":
            dumps = [a for a in args[1:] if not a.startswith("-") and a != catalog_of(args)]
            if dumps and all(d.startswith("tests/data/") for d in dumps):
                built.add(catalog_of(args))
                out.append(command)
        elif catalog_of(args) in built:
            out.append(command)
    return out


def matches(shown: str, printed: str) -> bool:
    """A printed line is the shown one, `…` standing for any text."""
    pattern = ".*".join(re.escape(part) for part in shown.split("…"))
    return re.fullmatch(pattern, printed) is not None


def setup_line(lines: list[str]) -> str:
    return next(ln for ln in lines if ln.startswith("    pip install -e . && dumpcat ingest "))


def test_readme_examples_print_what_the_readme_shows(tmp_path):
    lines = README.read_text().splitlines()
    setup = setup_line(lines)
    ingest = re.search(r"dumpcat ingest (tests/data/\S+) --catalog (scratch/\S+)", setup)
    assert ingest, setup
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the clone's tests/data, at the same relative path
    summary = subprocess.run(
        [*CLI, *shlex.split(ingest.group(0))[1:]], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout
    # The ingest summary the README shows has the counts this ingest printed (path and timing vary).
    shown = next(ln.strip() for ln in lines if ln.startswith("    run '"))
    counts = re.compile(r"^run '(\S+)' \(.*?\): (.*) in [\d.]+ s .*$")
    detected, printed = summary.strip().splitlines()
    assert counts.match(shown).groups() == counts.match(printed).groups(), (shown, summary)
    # So is the line before it, which says what detection found.
    shown_detected = next(ln.strip() for ln in lines if ln.startswith("    tests/data/"))
    assert detected == shown_detected, (shown_detected, detected)
    found = runnable(commands(lines), {ingest.group(2)})
    examples = [c for c in found if c.expected is not None]
    assert len(examples) >= 6, examples
    # The set-up command's own answer is among the examples shown.
    last = setup.rsplit("&&", 1)[1].strip()
    assert last in [c.text for c in examples], last
    # The first command of each kind runs as a real process (`python -m catalog.cli`, as the user's
    # `dumpcat`); later ones of a kind that only reads a catalog run the same command code in this
    # process (tests/catalog/cli/in_process.py). Commands that write a catalog always run for real.
    seen: set[str] = set()
    reports: list[str] = []  # what each `dumpcat report` printed
    for command in found:
        args = shlex.split(command.text)[1:]
        if args[0] in seen and args[0] not in ("ingest", "compare"):
            proc = dumpcat_in_process(*args, cwd=tmp_path)
        else:
            proc = subprocess.run([*CLI, *args], cwd=tmp_path, capture_output=True, text=True)
        seen.add(args[0])
        assert proc.returncode == 0, (command.text, proc.stderr)
        if args[0] == "report":
            reports += proc.stdout.splitlines()
        if command.expected is None:
            continue
        printed = [ln.rstrip() for ln in proc.stdout.splitlines()]
        assert len(printed) == len(command.expected), (command.text, printed)
        for shown_line, printed_line in zip(command.expected, printed, strict=True):
            assert matches(shown_line, printed_line), (command.text, shown_line, printed_line)
    # *The HTML report*: each `dumpcat report` printed the line the README shows (but for the
    # seconds), and the error line docs/report.md quotes is the one printed.
    shown_reports = [ln[4:] for ln in lines if re.match(r"    wrote scratch/\S+\.html ", ln)]
    assert shown_reports and any(c.text.startswith("dumpcat report ") for c in found), shown_reports
    seconds = re.compile(r" in \d+\.\d\d s$")
    assert [seconds.sub(" in S s", ln) for ln in reports] == [
        seconds.sub(" in S s", ln) for ln in shown_reports
    ]
    doc = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    quoted = re.search(r"\(`(dumpcat: error: run 'nope' [^`]+)`", doc).group(1)
    proc = dumpcat_in_process("report", "scratch/demo.cat", "--run", "nope", "--out", "scratch/nope.html",
                              cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1 and proc.stderr == quoted + "\n", proc.stderr
    # Every file the examples wrote is in the scratch folder the page names (git ignores it).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch", "tests"]
    assert "scratch/" in (ROOT / ".gitignore").read_text().splitlines()


def test_readme_catalogs_and_outputs_stay_in_scratch():
    """No command of the page writes a catalog or a file outside `scratch/` (or a placeholder path)."""
    for command in commands(README.read_text().splitlines()):
        args = shlex.split(command.text)[1:]
        written = [args[args.index(flag) + 1] for flag in ("--catalog", "--out") if flag in args]
        if args[0] == "export-duckdb":
            written.append(args[2])
        for path in written:
            assert path.startswith("scratch/") or path.isupper(), command.text
