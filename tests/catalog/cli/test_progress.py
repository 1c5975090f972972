"""The progress bars of `dumpcat ingest`, `stats` and `compare` tell the truth (issue 36): on a real
terminal (a pty, with a window size as a terminal has) each shows what it works on (the run's
name), a total from the start (`/N`), a final count equal to it, an ETA and a rate, and the name of
each phase after the walk; into a pipe, or with --no-progress, nothing of a bar is written."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from bench import synth
from catalog import Catalog
from tests.conftest import DATA, REPO, dump_of
from tests.pty_output import read_until_closed

COMPARE = DATA / "ms210" / "compare"
# tqdm's meter: "12/345 [00:01<00:02, 98.76 files/s]" (the ETA after "<", then the rate)
METER = r"(\d+)/(\d+) \[\d\d:\d\d<(\d\d:\d\d|\?), ([\d.?]+) ?{unit}/s\]"


def _on_a_terminal(*args: str) -> str:
    """Run `dumpcat` with stdin, stdout and stderr on a pty of 120 x 24; all it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog.cli", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=REPO,
    )
    os.close(follower)
    out = read_until_closed(leader, proc)
    text = out.decode("utf-8", "replace")
    assert proc.wait(60) == 0, text[-3000:]
    return text


def _in_a_pipe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catalog.cli", *args], capture_output=True, text=True, cwd=REPO, check=True
    )


def _meters(text: str, unit: str) -> list[tuple[int, int, str, str]]:
    """Every (count, total, eta, rate) the bar drew."""
    return [
        (int(n), int(total), eta, rate) for n, total, eta, rate in re.findall(METER.format(unit=unit), text)
    ]


def _assert_truthful(text: str, label: str, unit: str, total: int, phases: list[str]) -> list[int]:
    """The bar is labelled `label`, has `total` from its first meter to its last, ends at it, shows
    an ETA and a rate, and names each of `phases`; returns the counts it drew."""
    meters = _meters(text, unit)
    assert meters, text[-3000:]
    assert {t for _, t, _, _ in meters} == {total}, meters
    assert meters[-1][0] == total and f"{total}/{total}" in text
    assert any(re.fullmatch(r"\d\d:\d\d", eta) for _, _, eta, _ in meters), meters  # an ETA
    assert any(re.fullmatch(r"[\d.]+", rate) for _, _, _, rate in meters), meters  # a rate
    for name in phases:
        assert f"{label}, {name}:" in text, (name, text[-3000:])
    return [n for n, _, _, _ in meters]


def _no_bar(output: str, unit: str) -> None:
    """Nothing of a bar: no meter, no bar, no carriage return but a terminal's before a newline."""
    assert not _meters(output, unit) and "%|" not in output and f" {unit} [" not in output, output
    assert not re.search("\r(?!\n)", output), output


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    """20,000 npy files in 4 iteration folders (no statistic.csv: the ingest computes statistics)."""
    tree = tmp_path_factory.mktemp("synth") / "synth_run"
    synth.generate(tree, 20_000, ranks=1, iterations=4, statistic_csv=False, workers=1)
    return tree


def _files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if not p.is_dir())


def test_ingest_bar_has_the_run_name_a_total_an_eta_and_every_phase(tmp_path, synthetic):
    """A tree big enough for several updates: the bar counts up to the files walked (every one,
    metadata too: the bar used to stop short of the count), then names what follows the walk."""
    text = _on_a_terminal("ingest", str(synthetic), "-c", str(tmp_path / "cat"), "--workers", "2")
    total = _files(synthetic)
    assert f"{total} files seen" in text  # the summary line: the bar's total is the walk's count
    counts = _assert_truthful(
        text, "ingest run 'synth_run'", "files", total,
        ["counting files", "walking", "writing batch", "resolving names", "committing"],
    )  # fmt: skip
    # the walk computed every tensor's statistics as it read the headers (no statistic.csv here)
    assert "computing statistics" not in text and "20000 computed stats" in text
    # the last batch's commit makes the run's flat files final: nothing is left to merge
    assert "merging flat files" not in text
    assert any(0 < n < total for n in counts), counts  # it moved during the walk
    assert counts == sorted(counts)


def test_ingest_bar_of_a_sample_dump_is_labelled_with_the_given_run(tmp_path):
    dump = dump_of("nan_log")
    text = _on_a_terminal("ingest", str(dump), "-c", str(tmp_path / "cat"), "--run", "my run")
    total = _files(dump)
    assert f"run 'my run' ({dump}): {total} files seen" in text
    _assert_truthful(text, "ingest run 'my run'", "files", total, ["walking", "committing"])


def test_ingest_bar_is_labelled_with_the_derived_run_name(tmp_path):
    """A dump root named `dump` makes a run named after its parent folder, and so is the bar."""
    dump = shutil.copytree(dump_of("nan_log"), tmp_path / "experiment_7" / "dump")
    text = _on_a_terminal("ingest", str(dump), "-c", str(tmp_path / "cat"))
    assert "run 'experiment_7'" in text
    _assert_truthful(text, "ingest run 'experiment_7'", "files", _files(dump), ["walking"])


def test_a_run_name_with_escapes_is_shown_not_sent(tmp_path):
    """A run's name is anyone's text: on the bar its control characters are shown as `\\xNN`."""
    hostile = "r\x1b]0;pwned\x07"
    text = _on_a_terminal("ingest", str(dump_of("nan_log")), "-c", str(tmp_path / "cat"), "--run", hostile)
    assert "\x1b]0;pwned" not in text and "\x07" not in text
    assert "ingest run 'r\\x1b]0;pwned\\x07', walking:" in text


def test_ingest_without_a_terminal_or_with_no_progress_draws_no_bar(tmp_path, synthetic):
    piped = _in_a_pipe("ingest", str(dump_of("nan_log")), "-c", str(tmp_path / "a"))
    _no_bar(piped.stderr, "files")
    assert "files seen" in piped.stdout
    quiet = _on_a_terminal("ingest", str(dump_of("nan_log")), "-c", str(tmp_path / "b"), "--no-progress")
    _no_bar(quiet, "files")
    assert "walking" not in quiet and "files seen" in quiet


def test_progress_forces_a_bar_into_a_pipe(tmp_path):
    piped = _in_a_pipe("ingest", str(dump_of("nan_log")), "-c", str(tmp_path / "a"), "--progress")
    _assert_truthful(piped.stderr, "ingest run 'nan_log'", "files", _files(dump_of("nan_log")), ["walking"])


@pytest.fixture(scope="module")
def unstated(tmp_path_factory, synthetic) -> Path:
    """A catalog of the synthetic tree ingested with --no-stats: 20,000 tensors without statistics."""
    cat = tmp_path_factory.mktemp("nostats") / "cat"
    _in_a_pipe("ingest", str(synthetic), "-c", str(cat), "--no-stats", "--workers", "2")
    return cat


def test_stats_bar_has_the_total_from_the_start_and_moves_in_small_steps(tmp_path, unstated):
    cat = shutil.copytree(unstated, tmp_path / "cat")
    text = _on_a_terminal("stats", str(cat), "--run", "synth_run", "--workers", "2")
    counts = _assert_truthful(
        text, "stats of run 'synth_run'", "tensors", 20_000,
        ["listing tensors", "computing statistics", "writing batch", "committing"],
    )  # fmt: skip
    assert not re.search(r"[1-9]\d* tensors \[", text)  # never a count without its total
    assert counts == sorted(counts) and any(0 < n < 20_000 for n in counts), counts  # it moved
    with Catalog.open(cat) as c:
        assert c.sql("SELECT count(*) FROM stats WHERE max IS NOT NULL").column(0)[0].as_py() == 20_000


def test_stats_without_a_terminal_draws_no_bar(tmp_path, unstated):
    cat = shutil.copytree(unstated, tmp_path / "cat")
    piped = _in_a_pipe("stats", str(cat))
    _no_bar(piped.stderr, "tensors")
    assert "committed" in piped.stderr


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    cat = tmp_path_factory.mktemp("compare") / "cat"
    with Catalog.open(cat, create=True) as c:
        c.ingest(COMPARE / "base" / "dump", run="base")
        c.ingest(COMPARE / "cast" / "dump", run="cast")
    return cat


def test_compare_bar_has_the_pair_total_an_eta_and_its_phases(tmp_path, two_runs):
    cat = shutil.copytree(two_runs, tmp_path / "cat")
    text = _on_a_terminal("compare", str(cat), "cast", "base", "--workers", "2")
    pairs = int(re.search(r"compared 'cast' with 'base': ([\d,]+) new pairs", text).group(1).replace(",", ""))
    assert pairs > 100
    _assert_truthful(
        text,
        "compare 'cast' with 'base'",
        "pairs",
        pairs,
        ["pairing", "comparing", "writing batch", "committing"],
    )


def test_compare_without_a_terminal_draws_no_bar(tmp_path, two_runs):
    cat = shutil.copytree(two_runs, tmp_path / "cat")
    piped = _in_a_pipe("compare", str(cat), "cast", "base", "--workers", "1")
    _no_bar(piped.stderr, "pairs")
    assert "new pairs" in piped.stderr
    assert "pairing" not in piped.stderr


def test_every_phase_is_reported_somewhere_and_documented():
    """The phase names the code reports are ingest.progress.PHASES, and docs/cli.md's table has a row
    for each."""
    from ingest.progress import PHASES

    code = "".join(p.read_text() for d in ("ingest", "catalog") for p in (REPO / d).rglob("*.py"))
    reported = set(re.findall(r"phase\(\"([a-z ]+)\"\)", code))
    assert reported == set(PHASES)
    docs = (REPO / "docs" / "cli.md").read_text()
    for name in PHASES:
        assert f"| `{name}` |" in docs, name
